//! The run supervisor: a pure state machine, one event in, one decision out (docs/spec/run.md).
//!
//! Call order: [`Session::new`] with the document's bytes, then [`Session::handle`] (or
//! [`Session::handle_line`]) once per event, the first being the `start` claim; [`Session::report`] at any
//! time gives the run report, final once the run has ended. Time comes only from the events' `at`.
//! [`Session::snapshot`] and [`Session::restore`] carry a session from one process to the next.

use crate::doc::{self, Analysis, CompletionCondition, Prerequisite, Profile};
use crate::event::{self, Claim, Coverage, Decision, DecisionKind, Deviation, Event, EventKind, Reason, Refusal};
use crate::jcs::{self, arr, n, null, obj, obj_owned, opt_s, s, strs};
use crate::predicate::{Pred, Truth};
use crate::value::Node;
use std::sync::Arc;

// A child module, so that it reads and writes the private state without making it public.
mod adapter;
mod snapshot;
mod state;

pub use adapter::Leaving;
pub use snapshot::SCHEMA as SNAPSHOT_SCHEMA;
pub use state::{Recorded, RunPhase, RunState};

/// The most events one run may have (docs/spec/runbook.md#limits).
pub const MAX_EVENTS: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Incomplete,
    Refused,
    Failed,
    Aborted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Incomplete => "incomplete",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
            Outcome::Aborted => "aborted",
        }
    }
}

/// Where the run stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Position {
    /// A manifest without steps: the whole allowlist is in scope (7.4).
    Open,
    Step(usize),
    Terminal(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the `start` claim.
    New,
    Running,
    /// Halted or ended: every later event answers `halt`.
    Over,
}

#[derive(Clone, Debug)]
struct PendingCall {
    call_id: Option<String>,
    tool: String,
    arguments: Node,
    /// The step and visit it was allowed in, when it was in that step's scope.
    scope: Option<(usize, u64)>,
    cap: Option<usize>,
}

#[derive(Clone, Debug)]
struct DeviationRec {
    seq: u64,
    class: Deviation,
    step: Option<String>,
    tool: Option<String>,
}

#[derive(Clone, Debug)]
struct ApprovalRec {
    seq: u64,
    step: Option<String>,
    call_sha256: Option<String>,
    approver: String,
    granted: bool,
    accepted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CheckpointStatus {
    Pending,
    Satisfied,
    TimedOut,
}

/// A supervised run of one document.
#[derive(Clone, Debug)]
pub struct Session {
    a: Arc<Analysis>,
    phase: Phase,
    claim: Option<Claim>,
    refusals: Vec<Refusal>,
    outcome: Option<Outcome>,
    pos: Position,
    visits: Vec<u64>,
    judgements: Vec<Option<Truth>>,
    /// A step-wide approval for the current visit (or, without steps, for every gated capability).
    gate_open: bool,
    /// Approvals bound to one call's hash, valid in the current visit.
    call_approvals: Vec<String>,
    /// The approval ledger (9.19): the requests of the current visit that no answer has consumed, each the
    /// `seq` of a `needs-approval` decision and the hash of its call, in the order asked.
    requests: Vec<(u64, String)>,
    awaiting_verdict: bool,
    pending: Vec<PendingCall>,
    budget_used: Vec<u64>,
    checkpoints: Vec<(CheckpointStatus, Option<u64>)>,
    final_output: bool,
    deviations: Vec<DeviationRec>,
    approvals: Vec<ApprovalRec>,
    events: u64,
    start_at: u64,
    last_at: u64,
    /// The guard's needles (9.20): what names the run's evidence, the approval channel, the registry or
    /// the host. Host configuration, not run state: not in a snapshot; a host sets them on every session.
    needles: Vec<String>,
}

pub use crate::envelope::{envelope_of, BLOCKING};

impl Session {
    pub fn new(document: &[u8]) -> Session {
        Session::from_analysis(doc::analysis_of(document))
    }

    pub fn from_analysis(a: Arc<Analysis>) -> Session {
        let steps = a.doc.steps.len();
        let budgets = steps;
        let checkpoints = a.doc.checkpoints.len();
        Session {
            a,
            phase: Phase::New,
            claim: None,
            refusals: Vec::new(),
            outcome: None,
            pos: Position::Open,
            visits: vec![0; steps],
            judgements: vec![None; steps],
            gate_open: false,
            call_approvals: Vec::new(),
            requests: Vec::new(),
            awaiting_verdict: false,
            pending: Vec::new(),
            budget_used: vec![0; budgets],
            checkpoints: vec![(CheckpointStatus::Pending, None); checkpoints],
            final_output: false,
            deviations: Vec::new(),
            approvals: Vec::new(),
            events: 0,
            start_at: 0,
            last_at: 0,
            needles: Vec::new(),
        }
    }

    /// Sets the guard's needles (9.20): a typed `invoke` whose tool name or any string of whose arguments
    /// (keys included) contains one is fed as `guard: true`, and so recorded. Empty needles are ignored.
    pub fn set_guard(&mut self, needles: &[String]) {
        self.needles = needles.iter().filter(|n| !n.is_empty()).cloned().collect();
    }

    pub fn analysis(&self) -> &Analysis {
        &self.a
    }

    pub fn is_over(&self) -> bool {
        self.phase == Phase::Over
    }

    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome
    }

    /// Handles one event line and returns its decision line (canonical JSON).
    pub fn handle_line(&mut self, line: &str) -> String {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        match event::parse_line(line) {
            Ok(ev) => self.handle(ev).to_line(),
            Err(m) => self.malformed(m.limit).to_line(),
        }
    }

    /// Records a line that is not a valid event: the run halts (9.16).
    pub fn malformed(&mut self, limit: bool) -> Decision {
        let seq = self.next_seq();
        if self.phase == Phase::Over {
            return self.decide(seq, DecisionKind::Halt, None, Some(Reason::Halted));
        }
        self.stop(if self.phase == Phase::New { Outcome::Refused } else { Outcome::Failed });
        self.decide(seq, DecisionKind::Halt, None, Some(if limit { Reason::Limit } else { Reason::MalformedEvent }))
    }

    fn next_seq(&mut self) -> u64 {
        let seq = self.events;
        self.events += 1;
        seq
    }

    fn stop(&mut self, outcome: Outcome) {
        self.phase = Phase::Over;
        if self.outcome.is_none() {
            self.outcome = Some(outcome);
        }
    }

    fn current_name(&self) -> Option<String> {
        match &self.pos {
            Position::Open => None,
            Position::Step(i) => Some(self.a.doc.steps[*i].id.clone()),
            Position::Terminal(t) => Some(t.clone()),
        }
    }

    fn decide(&self, seq: u64, kind: DecisionKind, deviation: Option<Deviation>, reason: Option<Reason>) -> Decision {
        Decision { seq, kind, step: self.current_name(), deviation, reason, refusals: Vec::new() }
    }

    fn profile(&self) -> Profile {
        self.claim.as_ref().map(|c| c.profile).unwrap_or(Profile::R0)
    }

    fn agent(&self) -> &str {
        self.claim.as_ref().map(|c| c.agent.as_str()).unwrap_or("")
    }

    fn record(&mut self, seq: u64, class: Deviation, tool: Option<&str>) {
        let step = self.current_name();
        self.deviations.push(DeviationRec { seq, class, step, tool: tool.map(str::to_string) });
    }

    /// Handles one event.
    pub fn handle(&mut self, ev: Event) -> Decision {
        let seq = self.next_seq();
        if self.phase == Phase::Over {
            return self.decide(seq, DecisionKind::Halt, None, Some(Reason::Halted));
        }
        if self.events > MAX_EVENTS {
            self.stop(Outcome::Failed);
            return self.decide(seq, DecisionKind::Halt, None, Some(Reason::Limit));
        }
        if self.phase == Phase::New {
            return match ev.kind {
                EventKind::Start(claim) => self.admit(seq, ev.at, claim),
                _ => {
                    self.stop(Outcome::Refused);
                    self.decide(seq, DecisionKind::Halt, None, Some(Reason::MalformedEvent))
                }
            };
        }
        if ev.at < self.last_at || matches!(ev.kind, EventKind::Start(_)) {
            self.stop(Outcome::Failed);
            return self.decide(seq, DecisionKind::Halt, None, Some(Reason::MalformedEvent));
        }
        self.last_at = ev.at;
        let timed_out = self.check_deadlines(seq, ev.at);
        if let EventKind::End { .. } = ev.kind {
            return self.end(seq);
        }
        if timed_out {
            self.stop(Outcome::Failed);
            return self.decide(seq, DecisionKind::Halt, None, Some(Reason::CheckpointTimeout));
        }
        match ev.kind {
            EventKind::Start(_) | EventKind::End { .. } => unreachable!("handled above"),
            EventKind::Invoke { tool, arguments, call_id, step, guard } => self.invoke(seq, tool, arguments, call_id, step, guard),
            EventKind::Result { tool, result, is_error, call_id } => self.result(seq, tool, result, is_error, call_id),
            EventKind::Approval { step, call_sha256, approver, granted, request } => self.approval(seq, step, call_sha256, approver, granted, request),
            EventKind::Advance { to } => self.advance(seq, to),
            EventKind::Verdict { step, pass, by } => self.verdict(seq, step, pass, by),
            EventKind::FinalOutput => {
                self.final_output = true;
                for (i, c) in self.a.doc.checkpoints.iter().enumerate() {
                    if c.condition.as_deref() == Some("final_output") && self.checkpoints[i].0 == CheckpointStatus::Pending {
                        self.checkpoints[i] = (CheckpointStatus::Satisfied, Some(seq));
                    }
                }
                self.decide(seq, DecisionKind::Allow, None, None)
            }
            EventKind::Tick => self.decide(seq, DecisionKind::Allow, None, None),
        }
    }

    /// Fails every checkpoint whose deadline `at` has passed; true when a required one did (9.21).
    fn check_deadlines(&mut self, seq: u64, at: u64) -> bool {
        let mut failed = false;
        for (i, c) in self.a.doc.checkpoints.iter().enumerate() {
            if let Some(t) = c.timeout_ms {
                if self.checkpoints[i].0 == CheckpointStatus::Pending && at > self.start_at.saturating_add(t) {
                    self.checkpoints[i] = (CheckpointStatus::TimedOut, Some(seq));
                    failed |= c.required;
                }
            }
        }
        failed
    }

    fn admit(&mut self, seq: u64, at: u64, claim: Claim) -> Decision {
        let a = &self.a;
        let mut refusals = Vec::new();
        if a.has_errors() {
            refusals.push(Refusal::InvalidDocument);
        }
        if a.parsed {
            let all = claim.allowlist.iter().any(|t| t == "*");
            if !all && a.doc.capabilities.iter().any(|c| !claim.allowlist.contains(&c.tool)) {
                refusals.push(Refusal::CapabilityNotAllowed);
            }
            if a.min_profile().0 > claim.profile {
                refusals.push(Refusal::ProfileTooLow);
            }
            if a.doc.execution == Some(doc::Execution::AgentAutonomous) && claim.profile == Profile::R0 {
                refusals.push(Refusal::AutonomousAtR0);
            }
            if a.destructive && claim.coverage != Coverage::Complete {
                refusals.push(Refusal::CoverageIncomplete);
            }
            if a.max_risk > claim.risk_ceiling {
                refusals.push(Refusal::RiskAboveCeiling);
            }
            let available = claim.available.as_deref().unwrap_or(&[]);
            let unmet = a.doc.prerequisites.iter().any(|p| match p {
                Prerequisite::ToolAvailable(t) => !available.contains(t),
                Prerequisite::Runbook { id, version } => !available.contains(&format!("{id}@{version}")),
            });
            if unmet {
                refusals.push(Refusal::PrerequisiteUnmet);
            }
        }
        crate::sort::sort(&mut refusals);
        self.start_at = at;
        self.last_at = at;
        self.claim = Some(claim);
        if !refusals.is_empty() {
            self.refusals = refusals.clone();
            self.stop(Outcome::Refused);
            let mut d = self.decide(seq, DecisionKind::Halt, None, Some(Reason::Refused));
            d.refusals = refusals;
            return d;
        }
        self.phase = Phase::Running;
        if !self.a.doc.steps.is_empty() {
            self.enter(0);
        }
        self.decide(seq, DecisionKind::Allow, None, None)
    }

    fn enter(&mut self, step: usize) {
        self.pos = Position::Step(step);
        self.visits[step] += 1;
        self.gate_open = false;
        self.call_approvals.clear();
        self.requests.clear();
        self.awaiting_verdict = false;
    }

    /// Moves to a step or terminal by name (already known to exist).
    fn go(&mut self, target: &str) {
        match self.a.step_index(target) {
            Some(i) => self.enter(i),
            None => {
                self.pos = Position::Terminal(target.to_string());
                self.gate_open = false;
                self.call_approvals.clear();
                self.requests.clear();
                self.awaiting_verdict = false;
            }
        }
    }

    /// The first capability (in document order) of `candidates` that this call is (9.18).
    fn match_cap(&self, candidates: impl Iterator<Item = usize>, tool: &str, arguments: &Node) -> Option<usize> {
        for ci in candidates {
            let c = &self.a.doc.capabilities[ci];
            if c.tool != tool {
                continue;
            }
            match &c.when {
                None => return Some(ci),
                // `when` is a predicate over the invocation's arguments.
                Some(w) if when_passes(w, arguments) => return Some(ci),
                Some(_) => {}
            }
        }
        None
    }

    /// Whether capability `ci` is named only by gated steps.
    fn gated_elsewhere(&self, ci: usize) -> bool {
        let mut named = false;
        for (i, caps) in self.a.step_caps.iter().enumerate() {
            if caps.contains(&ci) {
                named = true;
                if !self.a.step_gated[i] {
                    return false;
                }
            }
        }
        named
    }

    fn invoke(&mut self, seq: u64, tool: String, arguments: Node, call_id: Option<String>, step: Option<String>, guard: bool) -> Decision {
        let r0 = self.profile() == Profile::R0;
        let blocked = |me: &mut Session, class: Deviation, reason: Option<Reason>, tool: &str| {
            me.record(seq, class, Some(tool));
            me.decide(seq, DecisionKind::Deny, Some(class), reason)
        };
        if guard {
            // The approval channel and the evidence are never an agent's to touch, at any profile (9.20).
            return blocked(self, Deviation::UndeclaredTool, Some(Reason::Guarded), &tool);
        }
        if jcs::has_inexact(&arguments) {
            // 9.28: a number the canonical form would change could make the recorded and approved call
            // another than the one the server receives: a malformed call, refused before anything runs.
            return self.decide(seq, DecisionKind::Deny, None, Some(Reason::InexactNumber));
        }
        let mut deviation = None;
        if let Some(st) = &step {
            if self.current_name().as_deref() != Some(st.as_str()) || !matches!(self.pos, Position::Step(_)) {
                if !r0 {
                    return blocked(self, Deviation::OutOfOrderStep, None, &tool);
                }
                deviation = Some(Deviation::OutOfOrderStep);
            }
        }
        let ncaps = self.a.doc.capabilities.len();
        let (in_scope, gated_step) = match &self.pos {
            Position::Open => (self.match_cap(0..ncaps, &tool, &arguments), None),
            Position::Step(i) => (self.match_cap(self.a.step_caps[*i].iter().copied(), &tool, &arguments), Some(*i)),
            Position::Terminal(_) => (None, None),
        };
        let cap = match in_scope {
            Some(ci) => Some(ci),
            None => {
                let class = if self.match_cap(0..ncaps, &tool, &arguments).is_some() { Deviation::OutOfScopeTool } else { Deviation::UndeclaredTool };
                if !r0 {
                    return blocked(self, class, None, &tool);
                }
                // R0 still honours gates (7.1): a capability that only gated steps name runs only in its
                // step, after a human's approval, never from elsewhere.
                let gated_only = class == Deviation::OutOfScopeTool
                    && (0..ncaps).filter(|ci| self.match_cap(std::iter::once(*ci), &tool, &arguments).is_some()).all(|ci| self.gated_elsewhere(ci));
                if gated_only {
                    return blocked(self, class, None, &tool);
                }
                deviation = deviation.or(Some(class));
                None
            }
        };
        // Gates: a gated step's tools exist only once a human has approved this visit, or this very call.
        if let Some(ci) = cap {
            let gated = match gated_step {
                Some(i) => self.a.step_gated[i],
                None => self.a.doc.capabilities[ci].risk.is_destructive(),
            };
            if gated && !self.gate_open {
                let hash = event::call_sha256(&tool, &arguments);
                match self.call_approvals.iter().position(|h| *h == hash) {
                    Some(k) => {
                        self.call_approvals.remove(k);
                    }
                    None => {
                        // A request in the ledger: the only thing an approval may answer (9.19).
                        self.requests.push((seq, hash));
                        return self.decide(seq, DecisionKind::NeedsApproval, None, Some(Reason::AwaitingApproval));
                    }
                }
            }
        }
        if let Some(class) = deviation {
            self.record(seq, class, Some(&tool));
        }
        let scope = match (&self.pos, cap) {
            (Position::Step(i), Some(_)) => Some((*i, self.visits[*i])),
            _ => None,
        };
        self.pending.push(PendingCall { call_id, tool, arguments, scope, cap });
        self.decide(seq, DecisionKind::Allow, deviation, None)
    }

    fn result(&mut self, seq: u64, tool: String, result: Node, is_error: bool, call_id: Option<String>) -> Decision {
        let found = match &call_id {
            Some(id) => self.pending.iter().rposition(|p| p.call_id.as_deref() == Some(id.as_str()) && p.tool == tool),
            None => self.pending.iter().rposition(|p| p.call_id.is_none() && p.tool == tool),
        };
        let Some(k) = found else {
            return self.decide(seq, DecisionKind::Allow, None, Some(Reason::OrphanResult));
        };
        let call = self.pending.remove(k);
        if !is_error {
            for (i, c) in self.a.doc.checkpoints.iter().enumerate() {
                if c.kind == "tool_call" && c.match_tool.as_deref() == Some(call.tool.as_str()) && self.checkpoints[i].0 == CheckpointStatus::Pending {
                    self.checkpoints[i] = (CheckpointStatus::Satisfied, Some(seq));
                }
            }
        }
        // R2: the module judges the step's observed capability and routes the run itself.
        if self.profile() != Profile::R2 {
            return self.decide(seq, DecisionKind::Allow, None, None);
        }
        let Position::Step(i) = self.pos else { return self.decide(seq, DecisionKind::Allow, None, None) };
        let observed = call.scope == Some((i, self.visits[i])) && call.cap.is_some_and(|c| self.a.step_observe[i].contains(&c));
        if !observed {
            return self.decide(seq, DecisionKind::Allow, None, None);
        }
        let truth = match &self.a.doc.steps[i].assert {
            Some(preds) => {
                let obs = obj(vec![("tool", s(&call.tool)), ("arguments", call.arguments), ("result", result), ("is_error", jcs::b(is_error))]);
                let mut t = Truth::Pass;
                for p in preds {
                    match p.eval(&obs) {
                        Truth::Fail => {
                            t = Truth::Fail;
                            break;
                        }
                        Truth::Unevaluable => t = Truth::Unevaluable,
                        Truth::Pass => {}
                    }
                }
                t
            }
            // A step with only prose cannot be judged by the module: a human rules (seed 000).
            None => Truth::Unevaluable,
        };
        self.judgements[i] = Some(truth);
        match truth {
            Truth::Pass => {
                self.route_next(i);
                self.decide(seq, DecisionKind::Allow, None, None)
            }
            Truth::Unevaluable => {
                self.awaiting_verdict = true;
                self.decide(seq, DecisionKind::NeedsVerdict, None, None)
            }
            Truth::Fail => self.route_failure(seq, i, Some(&tool)),
        }
    }

    fn route_next(&mut self, i: usize) {
        match self.a.step_next[i].clone() {
            Some(t) if self.a.step_index(&t).is_some() || self.a.is_terminal(&t) => self.go(&t),
            // A document with a broken route is never admitted; stay put rather than guess.
            _ => {}
        }
    }

    /// After a failed judgement: retry while the budget lasts, then `on_fail`, else stop (7.5).
    fn route_failure(&mut self, seq: u64, i: usize, tool: Option<&str>) -> Decision {
        let step = self.a.doc.steps[i].clone();
        if let Some(r) = &step.retry {
            if self.budget_used[i] < r.max {
                self.budget_used[i] += 1;
                self.go(&r.to);
                return self.decide(seq, DecisionKind::Allow, None, Some(Reason::AssertFailed));
            }
            return self.budget_exhausted(seq, i, tool, DecisionKind::Allow);
        }
        match &step.on_fail {
            Some(f) => {
                self.go(f);
                self.decide(seq, DecisionKind::Allow, None, Some(Reason::AssertFailed))
            }
            None => {
                self.stop(Outcome::Failed);
                self.decide(seq, DecisionKind::Halt, None, Some(Reason::AssertFailed))
            }
        }
    }

    /// Step `i`'s retry budget is spent and the run needed it (R2: a failed judgement; R1: the client's
    /// `advance` along the retry edge): records `budget-exhausted` where the run is, then moves to the step's
    /// `on_fail` when it has one, answering `moved` (`allow` for a result the module routes, `deny` for an
    /// advance whose requested route was not taken), else halts the run `aborted` (7.5, 7.8).
    fn budget_exhausted(&mut self, seq: u64, i: usize, tool: Option<&str>, moved: DecisionKind) -> Decision {
        self.record(seq, Deviation::BudgetExhausted, tool);
        match self.a.doc.steps[i].on_fail.clone() {
            Some(f) => {
                self.go(&f);
                self.decide(seq, moved, Some(Deviation::BudgetExhausted), Some(Reason::BudgetExhausted))
            }
            None => {
                self.stop(Outcome::Aborted);
                self.decide(seq, DecisionKind::Halt, Some(Deviation::BudgetExhausted), Some(Reason::BudgetExhausted))
            }
        }
    }

    fn approval(&mut self, seq: u64, step: Option<String>, call_sha256: Option<String>, approver: String, granted: bool, request: Option<u64>) -> Decision {
        let reason = if approver == self.agent() {
            Some(Reason::SelfApproval)
        } else if self.a.doc.steps.is_empty() {
            if step.is_some() {
                Some(Reason::UnknownStep)
            } else if !self.a.doc.capabilities.iter().any(|c| c.risk.is_destructive()) {
                Some(Reason::NoPending)
            } else {
                None
            }
        } else {
            match step.as_deref().and_then(|s| self.a.step_index(s)) {
                None => Some(Reason::UnknownStep),
                Some(i) if self.pos != Position::Step(i) => Some(Reason::NotCurrent),
                Some(i) if !self.a.step_gated[i] => Some(Reason::NoPending),
                Some(_) => None,
            }
        };
        // The ledger (9.19): an answer must match a request of this visit that no answer consumed yet (the
        // one it names, or any for the call it names, or any at all for a step-wide answer).
        let matches = |r: &(u64, String)| request.is_none_or(|q| r.0 == q) && call_sha256.as_ref().is_none_or(|h| r.1 == *h);
        let reason = reason.or_else(|| (!self.requests.iter().any(matches)).then_some(Reason::NoPending));
        let accepted = reason.is_none();
        if accepted {
            // Answered: the request, and every other request for the same call, is used up. A step-wide
            // answer answers every request of the visit.
            match &call_sha256 {
                Some(h) => self.requests.retain(|r| r.1 != *h),
                None => self.requests.clear(),
            }
        }
        self.approvals.push(ApprovalRec { seq, step, call_sha256: call_sha256.clone(), approver, granted, accepted });
        if !accepted {
            return self.decide(seq, DecisionKind::Deny, None, reason);
        }
        if granted {
            match call_sha256 {
                Some(h) => self.call_approvals.push(h),
                None => self.gate_open = true,
            }
        } else {
            // A human's "no" closes whatever this visit had been granted.
            self.gate_open = false;
            self.call_approvals.clear();
        }
        self.decide(seq, DecisionKind::Allow, None, None)
    }

    fn verdict(&mut self, seq: u64, step: String, pass: bool, by: String) -> Decision {
        let idx = self.a.step_index(&step);
        let reason = if by == self.agent() {
            Some(Reason::SelfApproval)
        } else {
            match idx {
                None => Some(Reason::UnknownStep),
                Some(i) if self.pos != Position::Step(i) => Some(Reason::NotCurrent),
                Some(_) if !self.awaiting_verdict => Some(Reason::NoPending),
                Some(_) => None,
            }
        };
        if let Some(r) = reason {
            return self.decide(seq, DecisionKind::Deny, None, Some(r));
        }
        let i = idx.expect("checked above");
        self.awaiting_verdict = false;
        self.judgements[i] = Some(if pass { Truth::Pass } else { Truth::Fail });
        if pass {
            self.route_next(i);
            self.decide(seq, DecisionKind::Allow, None, None)
        } else {
            self.route_failure(seq, i, None)
        }
    }

    fn advance(&mut self, seq: u64, to: String) -> Decision {
        let r0 = self.profile() == Profile::R0;
        if self.profile() == Profile::R2 {
            return self.decide(seq, DecisionKind::Deny, None, Some(Reason::NotR1));
        }
        let known = self.a.step_index(&to).is_some() || self.a.is_terminal(&to);
        let Position::Step(i) = self.pos else {
            self.record(seq, Deviation::OutOfOrderStep, None);
            return self.decide(
                seq,
                if r0 { DecisionKind::Allow } else { DecisionKind::Deny },
                Some(Deviation::OutOfOrderStep),
                if r0 { None } else { Some(Reason::OutOfOrderStep) },
            );
        };
        let st = &self.a.doc.steps[i];
        let plain = self.a.step_next[i].as_deref() == Some(to.as_str()) || st.on_fail.as_deref() == Some(to.as_str());
        let retry = st.retry.as_ref().filter(|r| r.to == to).map(|r| r.max);
        if known && plain {
            self.go(&to);
            return self.decide(seq, DecisionKind::Allow, None, None);
        }
        if let (true, Some(max)) = (known, retry) {
            if self.budget_used[i] < max {
                self.budget_used[i] += 1;
                self.go(&to);
                return self.decide(seq, DecisionKind::Allow, None, None);
            }
            if r0 {
                // R0 records and lets the client go where it asked (7.1).
                self.record(seq, Deviation::BudgetExhausted, None);
                self.go(&to);
                return self.decide(seq, DecisionKind::Allow, Some(Deviation::BudgetExhausted), None);
            }
            // R1: the requested route is not taken; the run follows on_fail, else aborts (7.5).
            return self.budget_exhausted(seq, i, None, DecisionKind::Deny);
        }
        self.record(seq, Deviation::OutOfOrderStep, None);
        if r0 {
            if known {
                self.go(&to);
            }
            return self.decide(seq, DecisionKind::Allow, Some(Deviation::OutOfOrderStep), None);
        }
        self.decide(seq, DecisionKind::Deny, Some(Deviation::OutOfOrderStep), Some(Reason::OutOfOrderStep))
    }

    fn end(&mut self, seq: u64) -> Decision {
        let outcome = if self.checkpoints.iter().zip(&self.a.doc.checkpoints).any(|(st, c)| c.required && st.0 == CheckpointStatus::TimedOut) {
            Outcome::Failed
        } else {
            let at_terminal = matches!(self.pos, Position::Terminal(_));
            if self.a.needs_terminal() && !at_terminal {
                self.record(seq, Deviation::TerminalNotReached, None);
            }
            let checkpoints_met = self.checkpoints.iter().zip(&self.a.doc.checkpoints).all(|(st, c)| !c.required || st.0 == CheckpointStatus::Satisfied);
            let condition_met = match self.a.completion() {
                CompletionCondition::FinalOutput => self.final_output,
                CompletionCondition::Terminal => at_terminal,
            };
            if (at_terminal || !self.a.needs_terminal()) && checkpoints_met && condition_met {
                Outcome::Completed
            } else {
                Outcome::Incomplete
            }
        };
        self.stop(outcome);
        self.decide(seq, DecisionKind::Halt, None, Some(Reason::RunEnded))
    }

    /// The run report `runbook-run-report/v1` as canonical JSON.
    pub fn report(&self) -> String {
        jcs::to_string(&self.report_node())
    }

    pub fn report_node(&self) -> Node {
        let a = &self.a;
        let claim = self.claim.as_ref();
        let coverage = match claim.map(|c| &c.coverage) {
            None => null(),
            Some(Coverage::Complete) => s("complete"),
            Some(Coverage::Blind(v)) => strs(v.iter().map(|x| x.as_str())),
        };
        let steps = obj_owned(
            a.doc
                .steps
                .iter()
                .enumerate()
                .map(|(i, st)| (st.id.clone(), obj(vec![("visits", n(self.visits[i])), ("assert", opt_s(self.judgements[i].map(|t| t.as_str())))])))
                .collect(),
        );
        let deviations = arr(self
            .deviations
            .iter()
            .map(|d| obj(vec![("seq", n(d.seq)), ("class", s(d.class.as_str())), ("step", opt_s(d.step.as_deref())), ("tool", opt_s(d.tool.as_deref()))]))
            .collect());
        let approvals = arr(self
            .approvals
            .iter()
            .map(|r| {
                obj(vec![
                    ("seq", n(r.seq)),
                    ("step", opt_s(r.step.as_deref())),
                    ("call_sha256", opt_s(r.call_sha256.as_deref())),
                    ("approver", s(&r.approver)),
                    ("granted", jcs::b(r.granted)),
                    ("accepted", jcs::b(r.accepted)),
                ])
            })
            .collect());
        let budgets = obj_owned(
            a.doc
                .steps
                .iter()
                .enumerate()
                .filter_map(|(i, st)| {
                    st.retry.as_ref().map(|r| (format!("{}->{}", st.id, r.to), obj(vec![("max", n(r.max)), ("used", n(self.budget_used[i]))])))
                })
                .collect(),
        );
        let checkpoints = obj_owned(
            a.doc
                .checkpoints
                .iter()
                .zip(&self.checkpoints)
                .map(|(c, (st, seq))| {
                    let status = match st {
                        CheckpointStatus::Pending => "pending",
                        CheckpointStatus::Satisfied => "satisfied",
                        CheckpointStatus::TimedOut => "timed-out",
                    };
                    (c.id.clone(), obj(vec![("status", s(status)), ("seq", seq.map(n).unwrap_or_else(null))]))
                })
                .collect(),
        );
        let terminal = match &self.pos {
            Position::Terminal(t) => s(t),
            _ => null(),
        };
        obj(vec![
            ("schema", s("runbook-run-report/v1")),
            ("run_id", opt_s(claim.map(|c| c.run_id.as_str()))),
            ("document", obj(vec![("runbook_id", opt_s(a.doc.runbook_id.as_deref())), ("version", opt_s(a.doc.version.as_deref())), ("sha256", s(&a.sha256))])),
            // Derived when asked: a run rarely needs it before its report.
            ("envelope_sha256", opt_s(a.envelope_sha256())),
            ("profile", opt_s(claim.map(|c| c.profile.as_str()))),
            ("coverage", coverage),
            ("outcome", opt_s(self.outcome.map(|o| o.as_str()))),
            ("terminal", terminal),
            ("refusals", strs(self.refusals.iter().map(|r| r.as_str()))),
            ("steps", steps),
            ("deviations", deviations),
            ("approvals", approvals),
            ("budgets", budgets),
            ("checkpoints", checkpoints),
            ("events", n(self.events)),
        ])
    }

    /// What an agent may be told about the run now (for a read-only status tool): the current step, the
    /// capabilities in scope, whether the step's gate is open, and whether a human's ruling is awaited.
    pub fn status(&self) -> String {
        let (scope, gated): (Vec<&str>, bool) = match &self.pos {
            Position::Open => (self.a.doc.capabilities.iter().map(|c| c.name.as_str()).collect(), false),
            Position::Step(i) => (self.a.step_caps[*i].iter().map(|c| self.a.doc.capabilities[*c].name.as_str()).collect(), self.a.step_gated[*i]),
            Position::Terminal(_) => (Vec::new(), false),
        };
        let mut scope = scope;
        crate::sort::sort_by(&mut scope, |x, y| crate::jcs::utf16_order(x, y));
        let phase = match self.phase {
            Phase::New => "new",
            Phase::Running => "running",
            Phase::Over => "over",
        };
        jcs::to_string(&obj(vec![
            ("phase", s(phase)),
            ("step", opt_s(self.current_name().as_deref())),
            ("scope", strs(scope)),
            ("gated", jcs::b(gated)),
            ("approved", jcs::b(self.gate_open)),
            ("call_approvals", n(self.call_approvals.len() as u64)),
            ("awaiting_verdict", jcs::b(self.awaiting_verdict)),
            ("outcome", opt_s(self.outcome.map(|o| o.as_str()))),
            ("events", n(self.events)),
        ]))
    }
}

fn when_passes(w: &Pred, obs: &Node) -> bool {
    // Unevaluable counts as not passing: `when` grants, so doubt denies (9.18).
    w.eval(obs) == Truth::Pass
}
