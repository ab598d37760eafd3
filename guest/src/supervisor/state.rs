//! What a host acts on between events (the typed state, the next deadline), and one call per event that
//! returns everything a host records: the canonical event line, the decision, its line, the chain link
//! and the sentence that explains it.

use super::{CheckpointStatus, Outcome, Phase, Position, Session};
use crate::event::{self, Decision, Event, EventKind, MAX_EVENT_BYTES};
use crate::{chain, codes, jcs};

impl Outcome {
    pub const ALL: [Outcome; 5] = [Outcome::Completed, Outcome::Incomplete, Outcome::Refused, Outcome::Failed, Outcome::Aborted];
}

/// Where the run is, typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunPhase {
    New,
    Running,
    Over,
}

/// The typed state of a run (the WIT `run-state`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunState {
    pub phase: RunPhase,
    pub step: Option<String>,
    pub at_terminal: bool,
    pub scope: Vec<String>,
    pub scope_tools: Vec<String>,
    pub gated: bool,
    pub approved: bool,
    pub call_approvals: u32,
    pub awaiting_verdict: bool,
    pub outcome: Option<Outcome>,
    pub events: u64,
    pub next_deadline: Option<u64>,
    /// The approval ledger (9.19): `(seq, call_sha256)` of each request of this visit not yet answered.
    pub approval_requests: Vec<(u64, String)>,
}

/// One event as a host records it (the WIT `recorded`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The canonical event line; for a line that is not an event, the line itself.
    pub event_line: String,
    pub decision: Decision,
    pub decision_line: String,
    pub link: String,
    /// The whole `events.ndjson` record of this event (docs/spec/bundle.md#event-records), newline included: what a host appends.
    pub record_line: String,
    pub explanation: String,
    /// The state after the event.
    pub state: RunState,
}

impl Session {
    /// The typed state.
    pub fn state(&self) -> RunState {
        let caps = &self.a.doc.capabilities;
        let (idx, gated): (Vec<usize>, bool) = match &self.pos {
            Position::Open => ((0..caps.len()).collect(), false),
            Position::Step(i) => (self.a.step_caps[*i].clone(), self.a.step_gated[*i]),
            Position::Terminal(_) => (Vec::new(), false),
        };
        let mut scope: Vec<String> = idx.iter().map(|c| caps[*c].name.clone()).collect();
        crate::sort::sort_by(&mut scope, |x, y| jcs::utf16_order(x, y));
        let mut tools: Vec<String> = idx.iter().map(|c| caps[*c].tool.clone()).collect();
        crate::sort::sort_by(&mut tools, |x, y| jcs::utf16_order(x, y));
        tools.dedup();
        RunState {
            phase: match self.phase {
                Phase::New => RunPhase::New,
                Phase::Running => RunPhase::Running,
                Phase::Over => RunPhase::Over,
            },
            step: self.current_name(),
            at_terminal: matches!(self.pos, Position::Terminal(_)),
            scope,
            scope_tools: tools,
            gated,
            approved: self.gate_open,
            call_approvals: self.call_approvals.len() as u32,
            awaiting_verdict: self.awaiting_verdict,
            outcome: self.outcome,
            events: self.events,
            next_deadline: self.next_deadline(),
            approval_requests: self.requests.clone(),
        }
    }

    /// The earliest `at` at which a pending checkpoint times out: an event at that `at` fails it (9.21:
    /// an `at` past the deadline). None unless the run is running with a pending deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.phase != Phase::Running {
            return None;
        }
        self.a
            .doc
            .checkpoints
            .iter()
            .zip(&self.checkpoints)
            .filter(|(_, st)| st.0 == CheckpointStatus::Pending)
            .filter_map(|(c, _)| c.timeout_ms.map(|t| self.start_at.saturating_add(t).saturating_add(1)))
            .min()
    }

    fn recorded(&self, event_line: String, event_form: String, decision: Decision, prev: &str, is_object: bool) -> Recorded {
        let decision_line = decision.to_line();
        let link = chain::link_of_forms(prev, &event_form, &decision_line);
        let explanation = codes::explain_decision(&decision);
        let record_line = crate::bundle::record_line(&link, &event_line, &decision_line, Some(is_object && event_line.len() <= MAX_EVENT_BYTES));
        Recorded { event_line, decision, decision_line, link, record_line, explanation, state: self.state() }
    }

    /// What the module fills in on a typed event, so that no host keeps the rule: the guard's needles on
    /// an `invoke` (9.20: one that names a needle is fed as guarded), and on a call-bound `approval` that
    /// names no request, the request it answers (9.19: the oldest pending request of the current step
    /// for that call). Either is then recorded, so a replay of the line decides alike without them.
    pub fn complete_typed(&self, ev: &mut Event) {
        match &mut ev.kind {
            EventKind::Invoke { tool, arguments, guard: guard @ false, .. } => {
                *guard = !self.needles.is_empty() && crate::bundle::names_any(tool, arguments, &self.needles);
            }
            EventKind::Approval { step, call_sha256: Some(h), request: request @ None, .. } => {
                let current = match self.pos {
                    super::Position::Step(i) => self.a.doc.steps.get(i).map(|s| s.id.as_str()),
                    _ => None,
                };
                if step.as_deref() == current {
                    *request = self.requests.iter().find(|r| r.1 == *h).map(|r| r.0);
                }
            }
            _ => {}
        }
    }

    /// The typed path with the record: `event` is the host's typed event, or why it could not be read
    /// (then it is recorded as a line that is not an event, and the run halts as for any such line).
    pub fn feed(&mut self, event: Result<Event, String>, prev: &str) -> Recorded {
        match event {
            Ok(mut ev) => {
                self.complete_typed(&mut ev);
                let node = ev.to_node();
                // 9.28: a number that is not exact is recorded as written, so the record replays as fed.
                let (line, form) = chain::record_and_form(&node);
                drop(node);
                let decision = if line.len() > MAX_EVENT_BYTES { self.malformed(true) } else { self.handle(ev) };
                self.recorded(line, form, decision, prev, true)
            }
            Err(why) => {
                let line = format!("malformed typed event: {why}");
                let decision = self.malformed(false);
                let form = chain::malformed_form(&line);
                self.recorded(line, form, decision, prev, false)
            }
        }
    }

    /// The wire path with the record: one event line (as read from a file) in.
    pub fn feed_line(&mut self, line: &str, prev: &str) -> Recorded {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let (decision, form, is_object) = self.decide_line(line);
        self.recorded(line.to_string(), form, decision, prev, is_object)
    }

    /// Decides one line and gives its chain form `E`, parsing the line once: the same decision as
    /// [`event::parse_line`] then `handle` (or `malformed`), the same `E` as [`chain::event_form`].
    fn decide_line(&mut self, line: &str) -> (Decision, String, bool) {
        if line.len() > MAX_EVENT_BYTES {
            return (self.malformed(true), chain::event_form(line, false), false);
        }
        let parsed = crate::json::parse(line);
        let is_object = parsed.issues.is_empty() && matches!(parsed.node.as_ref().map(|n| &n.value), Some(crate::value::Value::Obj(_)));
        let form = match (&parsed.node, parsed.issues.is_empty()) {
            (Some(n), true) => chain::event_form_parsed(n, line),
            _ => chain::malformed_form(line),
        };
        let decision = if parsed.issues.iter().any(|i| i.code == "limit") {
            self.malformed(true)
        } else if !parsed.issues.is_empty() {
            self.malformed(false)
        } else {
            match parsed.node.as_ref().map(event::from_node) {
                Some(Ok(ev)) => self.handle(ev),
                Some(Err(m)) => self.malformed(m.limit),
                None => self.malformed(false),
            }
        };
        (decision, form, is_object)
    }

    /// The replay path: the decision line and this line's chain link, exactly those of
    /// [`Session::feed_line`], without the sentence and the state.
    pub fn replay_line(&mut self, line: &str, prev: &str) -> (String, String) {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let (decision, form, _) = self.decide_line(line);
        let decision_line = decision.to_line();
        let link = chain::link_of_forms(prev, &form, &decision_line);
        (decision_line, link)
    }
}
