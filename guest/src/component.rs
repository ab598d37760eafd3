//! The WebAssembly component's exports: a thin mapping between the WIT types and the core.

use crate::event::{self, Claim, Coverage, EndReason, EventKind};
use crate::{doc, json, supervisor};
use exports::runbook::policy::policy as t;
use exports::runbook::policy::policy::{self as wit, Guest, GuestSession};
use std::cell::RefCell;

wit_bindgen::generate!({ path: "../wit", world: "runbook-policy" });

struct Component;

export!(Component);

fn finding(f: &doc::Finding) -> t::Finding {
    t::Finding {
        code: f.code.to_string(),
        severity: match f.severity {
            doc::Severity::Error => t::Severity::Error,
            doc::Severity::Warning => t::Severity::Warning,
        },
        line: f.pos.line,
        column: f.pos.column,
        pointer: f.pointer.clone(),
        message: f.message.clone(),
    }
}

fn json_arg(text: &str, what: &str) -> Result<crate::value::Node, String> {
    let p = json::parse(text);
    match (p.node, p.issues.first()) {
        (Some(n), None) => Ok(n),
        (_, Some(i)) => Err(format!("{what}: {}", i.message)),
        (None, None) => Err(format!("{what}: not JSON")),
    }
}

/// Converts a typed event; an argument that is not JSON makes it malformed.
fn to_event(e: t::Event) -> Result<event::Event, String> {
    let kind = match e.kind {
        t::EventKind::Start(c) => EventKind::Start(Claim {
            run_id: c.run_id,
            profile: match c.profile {
                t::Profile::R0 => doc::Profile::R0,
                t::Profile::R1 => doc::Profile::R1,
                t::Profile::R2 => doc::Profile::R2,
            },
            allowlist: c.allowlist,
            risk_ceiling: match c.risk_ceiling {
                t::Risk::ReadOnly => doc::Risk::ReadOnly,
                t::Risk::Mutating => doc::Risk::Mutating,
                t::Risk::Destructive => doc::Risk::Destructive,
                t::Risk::Irreversible => doc::Risk::Irreversible,
            },
            coverage: match c.coverage {
                t::Coverage::Complete => Coverage::Complete,
                t::Coverage::Blind(mut v) => {
                    crate::sort::sort(&mut v);
                    v.dedup();
                    if v.is_empty() {
                        Coverage::Complete
                    } else {
                        Coverage::Blind(v)
                    }
                }
            },
            agent: c.agent,
            available: c.available,
        }),
        t::EventKind::Invoke(i) => {
            EventKind::Invoke { arguments: json_arg(&i.arguments, "arguments")?, tool: i.tool, call_id: i.call_id, step: i.step, guard: i.guard }
        }
        t::EventKind::Result(r) => EventKind::Result { result: json_arg(&r.result, "result")?, tool: r.tool, is_error: r.is_error, call_id: r.call_id },
        t::EventKind::Approval(a) => {
            if let Some(h) = &a.call_sha256 {
                if h.len() != 64 || !h.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
                    return Err("call-sha256 must be 64 lowercase hex digits".into());
                }
            }
            EventKind::Approval { step: a.step, call_sha256: a.call_sha256, approver: a.approver, granted: a.granted, request: a.request }
        }
        t::EventKind::Advance(to) => EventKind::Advance { to },
        t::EventKind::Verdict(v) => EventKind::Verdict { step: v.step, pass: v.pass, by: v.by },
        t::EventKind::FinalOutput => EventKind::FinalOutput,
        t::EventKind::Tick => EventKind::Tick,
        t::EventKind::End(r) => EventKind::End {
            reason: match r {
                t::EndReason::Normal => EndReason::Normal,
                t::EndReason::ClientClosed => EndReason::ClientClosed,
                t::EndReason::ServerExited => EndReason::ServerExited,
                t::EndReason::Interrupted => EndReason::Interrupted,
                t::EndReason::ApprovalTimeout => EndReason::ApprovalTimeout,
            },
        },
    };
    Ok(event::Event { at: e.at, kind })
}

fn from_decision(d: event::Decision) -> t::Decision {
    use event::{DecisionKind as K, Deviation as D, Reason as R, Refusal as F};
    t::Decision {
        seq: d.seq,
        kind: match d.kind {
            K::Allow => t::DecisionKind::Allow,
            K::Deny => t::DecisionKind::Deny,
            K::NeedsApproval => t::DecisionKind::NeedsApproval,
            K::NeedsVerdict => t::DecisionKind::NeedsVerdict,
            K::Halt => t::DecisionKind::Halt,
        },
        step: d.step,
        deviation: d.deviation.map(|x| match x {
            D::UndeclaredTool => t::Deviation::UndeclaredTool,
            D::OutOfScopeTool => t::Deviation::OutOfScopeTool,
            D::OutOfOrderStep => t::Deviation::OutOfOrderStep,
            D::BudgetExhausted => t::Deviation::BudgetExhausted,
            D::TerminalNotReached => t::Deviation::TerminalNotReached,
        }),
        reason: d.reason.map(|x| match x {
            R::Refused => t::Reason::Refused,
            R::AwaitingApproval => t::Reason::AwaitingApproval,
            R::Guarded => t::Reason::Guarded,
            R::Limit => t::Reason::Limit,
            R::Halted => t::Reason::Halted,
            R::AssertFailed => t::Reason::AssertFailed,
            R::BudgetExhausted => t::Reason::BudgetExhausted,
            R::OrphanResult => t::Reason::OrphanResult,
            R::SelfApproval => t::Reason::SelfApproval,
            R::NotCurrent => t::Reason::NotCurrent,
            R::UnknownStep => t::Reason::UnknownStep,
            R::NoPending => t::Reason::NoPending,
            R::OutOfOrderStep => t::Reason::OutOfOrderStep,
            R::NotR1 => t::Reason::NotR1,
            R::CheckpointTimeout => t::Reason::CheckpointTimeout,
            R::RunEnded => t::Reason::RunEnded,
            R::MalformedEvent => t::Reason::MalformedEvent,
            R::HostTrap => t::Reason::HostTrap,
            R::InexactNumber => t::Reason::InexactNumber,
        }),
        refusals: d
            .refusals
            .into_iter()
            .map(|x| match x {
                F::AutonomousAtR0 => t::Refusal::AutonomousAtR0,
                F::CapabilityNotAllowed => t::Refusal::CapabilityNotAllowed,
                F::CoverageIncomplete => t::Refusal::CoverageIncomplete,
                F::InvalidDocument => t::Refusal::InvalidDocument,
                F::PrerequisiteUnmet => t::Refusal::PrerequisiteUnmet,
                F::ProfileTooLow => t::Refusal::ProfileTooLow,
                F::RiskAboveCeiling => t::Refusal::RiskAboveCeiling,
            })
            .collect(),
    }
}

fn recorded(r: supervisor::Recorded) -> t::Recorded {
    t::Recorded {
        event_line: r.event_line,
        decision: from_decision(r.decision),
        decision_line: r.decision_line,
        link: r.link,
        record_line: r.record_line,
        explanation: r.explanation,
        state: run_state(r.state),
    }
}

fn items(entries: Vec<(String, t::BundleItem)>) -> Vec<(String, crate::verify::Item)> {
    use crate::verify::Item;
    entries
        .into_iter()
        .map(|(n, i)| {
            let i = match i {
                t::BundleItem::File(b) => Item::File(b),
                t::BundleItem::Directory(c) => Item::Dir(c),
                t::BundleItem::Other => Item::Other,
            };
            (n, i)
        })
        .collect()
}

fn effects(e: Vec<crate::bundle::Effect>) -> Vec<t::Effect> {
    use crate::bundle::Op;
    e.into_iter()
        .map(|e| t::Effect {
            op: match e.op {
                Op::CreateDir => t::EffectOp::CreateDir,
                Op::Write => t::EffectOp::Write,
                Op::Append => t::EffectOp::Append,
                Op::Sign => t::EffectOp::Sign,
            },
            path: e.path,
            bytes: e.bytes,
        })
        .collect()
}

fn run_state(st: supervisor::RunState) -> t::RunState {
    t::RunState {
        phase: match st.phase {
            supervisor::RunPhase::New => t::Phase::New,
            supervisor::RunPhase::Running => t::Phase::Running,
            supervisor::RunPhase::Over => t::Phase::Over,
        },
        step: st.step,
        at_terminal: st.at_terminal,
        scope: st.scope,
        scope_tools: st.scope_tools,
        gated: st.gated,
        approved: st.approved,
        call_approvals: st.call_approvals,
        awaiting_verdict: st.awaiting_verdict,
        outcome: st.outcome.map(|o| match o {
            supervisor::Outcome::Completed => t::Outcome::Completed,
            supervisor::Outcome::Incomplete => t::Outcome::Incomplete,
            supervisor::Outcome::Refused => t::Outcome::Refused,
            supervisor::Outcome::Failed => t::Outcome::Failed,
            supervisor::Outcome::Aborted => t::Outcome::Aborted,
        }),
        events: st.events,
        next_deadline: st.next_deadline,
        approval_requests: st.approval_requests.into_iter().map(|(seq, call_sha256)| t::ApprovalRequest { seq, call_sha256 }).collect(),
    }
}

impl Guest for Component {
    type Session = Session;
    type Verifier = Verifier;

    fn lint(document: Vec<u8>) -> t::LintReport {
        let r = crate::lint(&document);
        t::LintReport {
            ok: r.ok(),
            sha256: r.sha256,
            findings: r.findings.iter().map(finding).collect(),
            structure: r.structure.map(|s| match s {
                doc::Structure::P0 => t::Structure::P0,
                doc::Structure::P1 => t::Structure::P1,
                doc::Structure::P2 => t::Structure::P2,
            }),
        }
    }

    fn envelope(document: Vec<u8>) -> Result<String, Vec<t::Finding>> {
        crate::envelope(&document).map_err(|f| f.iter().map(finding).collect())
    }

    fn call_sha256(tool: String, arguments: String) -> Result<String, String> {
        crate::call_sha256(&tool, &arguments)
    }

    fn approval_payload(run_id: String, request: u64, step: Option<String>, call_sha256: String, granted: bool) -> String {
        crate::approval_payload(&run_id, request, step.as_deref(), &call_sha256, granted)
    }

    fn canonicalize(json: String) -> Result<String, String> {
        crate::canonicalize(&json)
    }

    fn encode_event(event: t::Event) -> Result<String, String> {
        to_event(event).map(|e| crate::jcs::to_string_record(&e.to_node()))
    }

    fn chain_link(prev: String, event_line: String, decision_line: String, digested: bool) -> String {
        crate::chain::link(&prev, &event_line, &decision_line, digested)
    }

    fn check_report(document: Vec<u8>, records: Vec<(String, String)>, report: String) -> Result<(), (String, String)> {
        crate::audit::check_report(&document, &records, &report)
    }

    fn bundle_create(document: Vec<u8>, facts: String) -> Result<Vec<t::Effect>, String> {
        crate::bundle::create(&document, &facts).map(effects)
    }

    fn bundle_change(manifest: String, change: String) -> Result<Vec<t::Effect>, String> {
        crate::bundle::change(&manifest, &change).map(effects)
    }

    fn bundle_end(manifest: String, report: Option<String>, facts: String) -> Result<Vec<t::Effect>, String> {
        crate::bundle::end(&manifest, report.as_deref(), &facts).map(effects)
    }

    fn check_receipt(run_json: String, report: String, chain_head: String, hashes: String, receipt: String) -> Result<(), String> {
        crate::bundle::check_receipt(&run_json, &report, &chain_head, &hashes, &receipt)
    }

    fn admission_preflight(document: Vec<u8>, claim: t::StartClaim) -> Vec<t::Refusal> {
        let mut s = supervisor::Session::new(&document);
        let d = match to_event(t::Event { at: 0, kind: t::EventKind::Start(claim) }) {
            Ok(e) => s.handle(e),
            Err(_) => s.malformed(false),
        };
        // Only these two depend on the tools the servers offer: every other refusal stands now.
        let mut d = from_decision(d);
        d.refusals.retain(|r| !matches!(r, t::Refusal::CapabilityNotAllowed | t::Refusal::PrerequisiteUnmet));
        d.refusals
    }

    fn signed_history(run_id: String, events: Vec<u8>, signatures: Vec<u8>) -> Result<Vec<t::SignedAnswer>, (String, String)> {
        let answers = crate::verify::signed_history(&run_id, &events, &signatures)?;
        Ok(answers
            .into_iter()
            .map(|a| t::SignedAnswer { place: a.place, principal: a.principal, message: a.message, signature: a.signature, fingerprint: a.fingerprint })
            .collect())
    }

    fn bundle_redact(entries: Vec<(String, t::BundleItem)>, at: u64) -> Result<Vec<t::Effect>, String> {
        crate::verify::redact(&items(entries), at).map(effects)
    }

    fn verify_bundle(entries: Vec<(String, t::BundleItem)>, module_sha256: String, signers_sha256: Option<String>) -> t::Verification {
        verification(crate::verify::verify(&items(entries), &crate::verify::Options { module_sha256, signers_sha256 }))
    }

    fn record_line(link: String, event_line: String, decision_line: String) -> String {
        crate::bundle::record_line(&link, &event_line, &decision_line, None)
    }

    fn signature_line(seq: u64, request: u64, channel_id: String, message: String, signature: String, principal: String, fingerprint: String) -> String {
        crate::bundle::signature_line(seq, request, &channel_id, &message, &signature, &principal, &fingerprint)
    }

    fn shadow_line(seq: u64, tool: String, call_sha256: String, decision: String) -> String {
        crate::bundle::shadow_line(seq, &tool, &call_sha256, &decision)
    }

    fn traffic_line(prev: String, entry: String) -> Result<(String, String), String> {
        crate::bundle::traffic_line(&prev, &entry)
    }

    fn guard_names(tool: String, arguments: String, needles: Vec<String>) -> bool {
        crate::bundle::guard_names(&tool, &arguments, &needles)
    }

    fn git_state(exit_code: Option<i32>, porcelain: Vec<u8>) -> String {
        crate::bundle::git_state(exit_code, &porcelain)
    }

    fn redact_line(event_line: String) -> String {
        crate::chain::redacted_line(&event_line)
    }

    fn explain(kind: String, code: String) -> Option<String> {
        crate::codes::explain(&kind, &code).map(str::to_string)
    }

    fn prose(document: Vec<u8>) -> Option<String> {
        crate::prose(&document)
    }

    fn version() -> String {
        crate::VERSION.to_string()
    }
}

struct Session(RefCell<supervisor::Session>);

impl GuestSession for Session {
    fn new(document: Vec<u8>) -> Session {
        Session(RefCell::new(supervisor::Session::new(&document)))
    }

    fn handle(&self, event: t::Event) -> t::Decision {
        let mut s = self.0.borrow_mut();
        let d = match to_event(event) {
            Ok(mut e) => {
                s.complete_typed(&mut e);
                s.handle(e)
            }
            Err(_) => s.malformed(false),
        };
        from_decision(d)
    }

    fn feed(&self, event: t::Event, prev: String) -> t::Recorded {
        recorded(self.0.borrow_mut().feed(to_event(event), &prev))
    }

    fn feed_line(&self, line: String, prev: String) -> t::Recorded {
        recorded(self.0.borrow_mut().feed_line(&line, &prev))
    }

    fn replay_line(&self, line: String, prev: String) -> (String, String) {
        self.0.borrow_mut().replay_line(&line, &prev)
    }

    fn replay_events(&self, events: Vec<u8>, prev: String) -> Result<t::Replayed, (String, String)> {
        let r = crate::verify::replay_events(&mut self.0.borrow_mut(), &events, &prev)?;
        Ok(t::Replayed { head: r.head, events: r.events, last_at: r.last_at })
    }

    fn chain_start(&self, run_json: String, pin: Option<(String, String)>) -> Result<String, (String, String)> {
        let pin = pin.as_ref().map(|(d, h)| (d.as_str(), h.as_str()));
        crate::bundle::chain_start(self.0.borrow().analysis(), &run_json, pin)
    }

    fn state(&self) -> t::RunState {
        run_state(self.0.borrow().state())
    }

    fn visible_tools(&self, offered: Vec<String>, whole_allowlist: bool) -> Vec<String> {
        self.0.borrow().visible_tools(&offered, whole_allowlist)
    }

    fn leaving(&self, calls_in_flight: u32, last_call_timed_out: bool) -> t::Leaving {
        let l = self.0.borrow().leaving(calls_in_flight, last_call_timed_out);
        t::Leaving {
            final_output: l.final_output,
            reason: match l.reason {
                EndReason::Normal => t::EndReason::Normal,
                EndReason::ClientClosed => t::EndReason::ClientClosed,
                EndReason::ServerExited => t::EndReason::ServerExited,
                EndReason::Interrupted => t::EndReason::Interrupted,
                EndReason::ApprovalTimeout => t::EndReason::ApprovalTimeout,
            },
        }
    }

    fn exit_code(&self, shadow: bool) -> u8 {
        self.0.borrow().exit_code(shadow)
    }

    fn handle_line(&self, line: String) -> String {
        self.0.borrow_mut().handle_line(&line)
    }

    fn report(&self) -> String {
        self.0.borrow().report()
    }

    fn status(&self) -> String {
        self.0.borrow().status()
    }

    fn set_guard(&self, needles: Vec<String>) {
        self.0.borrow_mut().set_guard(&needles)
    }

    fn is_over(&self) -> bool {
        self.0.borrow().is_over()
    }

    fn snapshot(&self) -> String {
        self.0.borrow().snapshot()
    }

    fn restore(document: Vec<u8>, snapshot: String) -> Result<wit::Session, String> {
        supervisor::Session::restore(&document, &snapshot).map(|s| wit::Session::new(Session(RefCell::new(s))))
    }
}

#[allow(unused)]
fn _type_check(_: wit::Session) {}

fn verification(v: crate::verify::Verification) -> t::Verification {
    t::Verification {
        checks: v.checks.iter().map(|c| c.to_string()).collect(),
        failure: v.failure,
        run_id: v.run_id,
        outcome: v.outcome,
        events: v.events,
        reasons: v.reasons.into_iter().map(|(c, m)| (c.to_string(), m)).collect(),
        warnings: v.warnings,
        redacted: v.redacted,
        shadow: v.shadow,
        signed_answers: v
            .signed_answers
            .into_iter()
            .map(|a| t::SignedAnswer { place: a.place, principal: a.principal, message: a.message, signature: a.signature, fingerprint: a.fingerprint })
            .collect(),
        receipt_signed: v.receipt_signed,
    }
}

/// `verify-bundle` in pieces (WIT `verifier`); None once finished.
struct Verifier(RefCell<Option<crate::verify::Verifier<'static>>>);

impl wit::GuestVerifier for Verifier {
    fn new(entries: Vec<(String, t::BundleItem)>, module_sha256: String, signers_sha256: Option<String>) -> Verifier {
        let options = crate::verify::Options { module_sha256, signers_sha256 };
        Verifier(RefCell::new(Some(crate::verify::Verifier::new(std::borrow::Cow::Owned(items(entries)), options))))
    }

    fn push(&self, chunk: Vec<u8>) {
        if let Some(v) = self.0.borrow_mut().as_mut() {
            v.push(&chunk);
        }
    }

    fn finish(&self) -> t::Verification {
        match self.0.borrow_mut().take() {
            Some(v) => verification(v.finish()),
            // Fail closed: the one answer was given, and nothing pushed since was checked.
            None => verification(crate::verify::Verification {
                failure: Some(("events.ndjson".into(), "the verifier has already finished".into())),
                ..Default::default()
            }),
        }
    }
}
