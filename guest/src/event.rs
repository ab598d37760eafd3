//! Events and decisions: the typed forms and their wire format, one JSON object a line (docs/spec/run.md#decision-lines).

use crate::doc::{Profile, Risk};
use crate::jcs::{self, b, n, null, obj, opt_s, s, strs};
use crate::json;
use crate::value::{Node, Value};

/// The largest event line the module reads (docs/spec/runbook.md#limits).
pub const MAX_EVENT_BYTES: usize = 1 << 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    Complete,
    /// What the adapter cannot see, sorted and without duplicates.
    Blind(Vec<String>),
}

#[derive(Clone, Debug)]
pub struct Claim {
    pub run_id: String,
    pub profile: Profile,
    pub allowlist: Vec<String>,
    pub risk_ceiling: Risk,
    pub coverage: Coverage,
    pub agent: String,
    pub available: Option<Vec<String>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    Normal,
    ClientClosed,
    ServerExited,
    Interrupted,
    ApprovalTimeout,
}

pub const END_REASONS: [(&str, EndReason); 5] = [
    ("normal", EndReason::Normal),
    ("client-closed", EndReason::ClientClosed),
    ("server-exited", EndReason::ServerExited),
    ("interrupted", EndReason::Interrupted),
    ("approval-timeout", EndReason::ApprovalTimeout),
];

impl EndReason {
    pub fn as_str(self) -> &'static str {
        END_REASONS.iter().find(|(_, r)| *r == self).map(|(n, _)| *n).unwrap_or("normal")
    }
}

#[derive(Clone, Debug)]
pub enum EventKind {
    Start(Claim),
    Invoke {
        tool: String,
        arguments: Node,
        call_id: Option<String>,
        step: Option<String>,
        guard: bool,
    },
    Result {
        tool: String,
        result: Node,
        is_error: bool,
        call_id: Option<String>,
    },
    /// `request`: the `seq` of the `needs-approval` decision this answers (9.19), when the host names it.
    Approval {
        step: Option<String>,
        call_sha256: Option<String>,
        approver: String,
        granted: bool,
        request: Option<u64>,
    },
    Advance {
        to: String,
    },
    Verdict {
        step: String,
        pass: bool,
        by: String,
    },
    FinalOutput,
    Tick,
    End {
        reason: EndReason,
    },
}

#[derive(Clone, Debug)]
pub struct Event {
    pub at: u64,
    pub kind: EventKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecisionKind {
    Allow,
    Deny,
    NeedsApproval,
    NeedsVerdict,
    Halt,
}

impl DecisionKind {
    pub const ALL: [DecisionKind; 5] = [DecisionKind::Allow, DecisionKind::Deny, DecisionKind::NeedsApproval, DecisionKind::NeedsVerdict, DecisionKind::Halt];

    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Allow => "allow",
            DecisionKind::Deny => "deny",
            DecisionKind::NeedsApproval => "needs-approval",
            DecisionKind::NeedsVerdict => "needs-verdict",
            DecisionKind::Halt => "halt",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Deviation {
    UndeclaredTool,
    OutOfScopeTool,
    OutOfOrderStep,
    BudgetExhausted,
    TerminalNotReached,
}

impl Deviation {
    pub const ALL: [Deviation; 5] =
        [Deviation::UndeclaredTool, Deviation::OutOfScopeTool, Deviation::OutOfOrderStep, Deviation::BudgetExhausted, Deviation::TerminalNotReached];

    pub fn as_str(self) -> &'static str {
        match self {
            Deviation::UndeclaredTool => "undeclared-tool",
            Deviation::OutOfScopeTool => "out-of-scope-tool",
            Deviation::OutOfOrderStep => "out-of-order-step",
            Deviation::BudgetExhausted => "budget-exhausted",
            Deviation::TerminalNotReached => "terminal-not-reached",
        }
    }
}

/// Reason codes (docs/spec/run.md#decision-lines). The WIT enum `reason` mirrors this list, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Refused,
    AwaitingApproval,
    Guarded,
    Limit,
    Halted,
    AssertFailed,
    BudgetExhausted,
    OrphanResult,
    SelfApproval,
    NotCurrent,
    UnknownStep,
    NoPending,
    OutOfOrderStep,
    NotR1,
    CheckpointTimeout,
    RunEnded,
    MalformedEvent,
    HostTrap,
    InexactNumber,
}

impl Reason {
    pub const ALL: [Reason; 19] = [
        Reason::Refused,
        Reason::AwaitingApproval,
        Reason::Guarded,
        Reason::Limit,
        Reason::Halted,
        Reason::AssertFailed,
        Reason::BudgetExhausted,
        Reason::OrphanResult,
        Reason::SelfApproval,
        Reason::NotCurrent,
        Reason::UnknownStep,
        Reason::NoPending,
        Reason::OutOfOrderStep,
        Reason::NotR1,
        Reason::CheckpointTimeout,
        Reason::RunEnded,
        Reason::MalformedEvent,
        Reason::HostTrap,
        Reason::InexactNumber,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Refused => "refused",
            Reason::AwaitingApproval => "awaiting-approval",
            Reason::Guarded => "guarded",
            Reason::Limit => "limit",
            Reason::Halted => "halted",
            Reason::AssertFailed => "assert-failed",
            Reason::BudgetExhausted => "budget-exhausted",
            Reason::OrphanResult => "orphan-result",
            Reason::SelfApproval => "self-approval",
            Reason::NotCurrent => "not-current",
            Reason::UnknownStep => "unknown-step",
            Reason::NoPending => "no-pending",
            Reason::OutOfOrderStep => "out-of-order-step",
            Reason::NotR1 => "not-r1",
            Reason::CheckpointTimeout => "checkpoint-timeout",
            Reason::RunEnded => "run-ended",
            Reason::MalformedEvent => "malformed-event",
            Reason::HostTrap => "host-trap",
            Reason::InexactNumber => "inexact-number",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    AutonomousAtR0,
    CapabilityNotAllowed,
    CoverageIncomplete,
    InvalidDocument,
    PrerequisiteUnmet,
    ProfileTooLow,
    RiskAboveCeiling,
}

impl Refusal {
    pub const ALL: [Refusal; 7] = [
        Refusal::AutonomousAtR0,
        Refusal::CapabilityNotAllowed,
        Refusal::CoverageIncomplete,
        Refusal::InvalidDocument,
        Refusal::PrerequisiteUnmet,
        Refusal::ProfileTooLow,
        Refusal::RiskAboveCeiling,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::AutonomousAtR0 => "autonomous-at-r0",
            Refusal::CapabilityNotAllowed => "capability-not-allowed",
            Refusal::CoverageIncomplete => "coverage-incomplete",
            Refusal::InvalidDocument => "invalid-document",
            Refusal::PrerequisiteUnmet => "prerequisite-unmet",
            Refusal::ProfileTooLow => "profile-too-low",
            Refusal::RiskAboveCeiling => "risk-above-ceiling",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub seq: u64,
    pub kind: DecisionKind,
    pub step: Option<String>,
    pub deviation: Option<Deviation>,
    pub reason: Option<Reason>,
    /// Sorted by code (the enum's order is alphabetical).
    pub refusals: Vec<Refusal>,
}

impl Decision {
    pub fn to_line(&self) -> String {
        let mut out = String::with_capacity(96);
        // Keys in RFC 8785 order: decision, deviation, reason, refusals, seq, step.
        out.push_str("{\"decision\":\"");
        out.push_str(self.kind.as_str());
        out.push_str("\",\"deviation\":");
        match self.deviation {
            Some(d) => {
                out.push('"');
                out.push_str(d.as_str());
                out.push('"');
            }
            None => out.push_str("null"),
        }
        out.push_str(",\"reason\":");
        match self.reason {
            Some(r) => {
                out.push('"');
                out.push_str(r.as_str());
                out.push('"');
            }
            None => out.push_str("null"),
        }
        out.push_str(",\"refusals\":[");
        for (i, r) in self.refusals.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('"');
            out.push_str(r.as_str());
            out.push('"');
        }
        out.push_str("],\"seq\":");
        out.push_str(&self.seq.to_string());
        out.push_str(",\"step\":");
        match &self.step {
            Some(st) => jcs::write_str(st, &mut out),
            None => out.push_str("null"),
        }
        out.push('}');
        out
    }
}

/// Why a line is not an event: the module answers `halt` with `malformed-event` (or `limit`).
#[derive(Clone, Debug)]
pub struct Malformed {
    pub limit: bool,
    pub message: String,
}

fn bad(message: impl Into<String>) -> Malformed {
    Malformed { limit: false, message: message.into() }
}

fn field<'a>(obj: &'a Node, key: &str) -> Option<&'a Node> {
    obj.get(key)
}

fn req_str(obj: &Node, key: &str) -> Result<String, Malformed> {
    match field(obj, key).map(|v| &v.value) {
        Some(Value::Str(s)) => Ok(s.clone()),
        Some(_) => Err(bad(format!("`{key}` must be a string"))),
        None => Err(bad(format!("missing `{key}`"))),
    }
}

fn opt_str(obj: &Node, key: &str) -> Result<Option<String>, Malformed> {
    match field(obj, key).map(|v| &v.value) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(format!("`{key}` must be a string"))),
    }
}

/// `call_id` may be an MCP request id, which is a string or a number: numbers are kept in their canonical text.
fn call_id(obj: &Node) -> Result<Option<String>, Malformed> {
    match field(obj, "call_id").map(|v| &v.value) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.clone())),
        Some(Value::Num(n)) => Ok(Some(n.canonical().to_string())),
        Some(_) => Err(bad("`call_id` must be a string or a number")),
    }
}

fn req_bool(obj: &Node, key: &str) -> Result<bool, Malformed> {
    match field(obj, key).map(|v| &v.value) {
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(format!("`{key}` must be true or false"))),
        None => Err(bad(format!("missing `{key}`"))),
    }
}

fn str_list(obj: &Node, key: &str) -> Result<Vec<String>, Malformed> {
    match field(obj, key).map(|v| &v.value) {
        Some(Value::Arr(items)) => {
            items.iter().map(|i| i.as_str().map(str::to_string).ok_or_else(|| bad(format!("`{key}` must be a list of strings")))).collect()
        }
        Some(_) => Err(bad(format!("`{key}` must be a list of strings"))),
        None => Err(bad(format!("missing `{key}`"))),
    }
}

fn only_fields(obj: &Node, allowed: &[&str]) -> Result<(), Malformed> {
    if let Value::Obj(members) = &obj.value {
        for m in members {
            if !m.key.starts_with("x-") && !allowed.contains(&m.key.as_str()) {
                return Err(bad(format!("unknown field `{}`", m.key)));
            }
        }
    }
    Ok(())
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// Parses one event line.
pub fn parse_line(line: &str) -> Result<Event, Malformed> {
    if line.len() > MAX_EVENT_BYTES {
        return Err(Malformed { limit: true, message: format!("event of {} bytes; the limit is {MAX_EVENT_BYTES}", line.len()) });
    }
    let parsed = json::parse(line);
    if let Some(i) = parsed.issues.iter().find(|i| i.code == "limit") {
        return Err(Malformed { limit: true, message: i.message.clone() });
    }
    if let Some(i) = parsed.issues.first() {
        return Err(bad(format!("{} at column {}", i.message, i.pos.column)));
    }
    let node = parsed.node.ok_or_else(|| bad("not JSON"))?;
    from_node(&node)
}

pub fn from_node(node: &Node) -> Result<Event, Malformed> {
    if !matches!(node.value, Value::Obj(_)) {
        return Err(bad("an event is a JSON object"));
    }
    let ty = req_str(node, "type")?;
    let at = match field(node, "at").map(|v| &v.value) {
        Some(Value::Num(n)) => n.as_u64().ok_or_else(|| bad("`at` must be a whole number of milliseconds"))?,
        Some(_) => return Err(bad("`at` must be a whole number of milliseconds")),
        None => return Err(bad("missing `at`")),
    };
    let kind = match ty.as_str() {
        "start" => {
            only_fields(node, &["type", "at", "run_id", "profile", "allowlist", "risk_ceiling", "coverage", "agent", "available"])?;
            let profile = Profile::parse(&req_str(node, "profile")?).ok_or_else(|| bad("`profile` must be `R0`, `R1` or `R2`"))?;
            let risk_ceiling = Risk::parse(&req_str(node, "risk_ceiling")?).ok_or_else(|| bad("`risk_ceiling` must be a risk level"))?;
            let coverage = match field(node, "coverage").map(|v| &v.value) {
                Some(Value::Str(s)) if s == "complete" => Coverage::Complete,
                Some(Value::Arr(_)) => {
                    let mut blind = str_list(node, "coverage")?;
                    crate::sort::sort(&mut blind);
                    blind.dedup();
                    if blind.is_empty() {
                        Coverage::Complete
                    } else {
                        Coverage::Blind(blind)
                    }
                }
                _ => return Err(bad("`coverage` must be `complete` or a list of what the adapter cannot see")),
            };
            let available = match field(node, "available") {
                None => None,
                Some(_) => Some(str_list(node, "available")?),
            };
            EventKind::Start(Claim {
                run_id: req_str(node, "run_id")?,
                profile,
                allowlist: str_list(node, "allowlist")?,
                risk_ceiling,
                coverage,
                agent: req_str(node, "agent")?,
                available,
            })
        }
        "invoke" => {
            only_fields(node, &["type", "at", "tool", "arguments", "call_id", "step", "guard"])?;
            let arguments = field(node, "arguments").cloned().unwrap_or_else(|| obj(vec![]));
            let guard = match field(node, "guard") {
                None => false,
                Some(_) => req_bool(node, "guard")?,
            };
            EventKind::Invoke { tool: req_str(node, "tool")?, arguments, call_id: call_id(node)?, step: opt_str(node, "step")?, guard }
        }
        "result" => {
            only_fields(node, &["type", "at", "tool", "result", "is_error", "call_id"])?;
            let is_error = match field(node, "is_error") {
                None => false,
                Some(_) => req_bool(node, "is_error")?,
            };
            EventKind::Result { tool: req_str(node, "tool")?, result: field(node, "result").cloned().unwrap_or_else(null), is_error, call_id: call_id(node)? }
        }
        "approval" => {
            only_fields(node, &["type", "at", "step", "call_sha256", "approver", "granted", "request"])?;
            let request = match field(node, "request") {
                None => None,
                Some(Node { value: Value::Num(num), .. }) if num.as_u64().is_some() => num.as_u64(),
                Some(_) => return Err(bad("`request` must be the seq of a `needs-approval` decision (a non-negative integer)")),
            };
            let call_sha256 = opt_str(node, "call_sha256")?;
            if let Some(h) = &call_sha256 {
                if !is_sha256_hex(h) {
                    return Err(bad("`call_sha256` must be 64 lowercase hex digits"));
                }
            }
            EventKind::Approval {
                step: opt_str(node, "step")?,
                call_sha256,
                approver: req_str(node, "approver")?,
                granted: req_bool(node, "granted")?,
                request,
            }
        }
        "advance" => {
            only_fields(node, &["type", "at", "to"])?;
            EventKind::Advance { to: req_str(node, "to")? }
        }
        "verdict" => {
            only_fields(node, &["type", "at", "step", "outcome", "by"])?;
            let pass = match req_str(node, "outcome")?.as_str() {
                "pass" => true,
                "fail" => false,
                _ => return Err(bad("`outcome` must be `pass` or `fail`")),
            };
            EventKind::Verdict { step: req_str(node, "step")?, pass, by: req_str(node, "by")? }
        }
        "final_output" => {
            only_fields(node, &["type", "at"])?;
            EventKind::FinalOutput
        }
        "tick" => {
            only_fields(node, &["type", "at"])?;
            EventKind::Tick
        }
        "end" => {
            only_fields(node, &["type", "at", "reason"])?;
            let reason = match opt_str(node, "reason")? {
                None => EndReason::Normal,
                Some(r) => END_REASONS.iter().find(|(n, _)| *n == r).map(|(_, e)| *e).ok_or_else(|| bad(format!("unknown end reason `{r}`")))?,
            };
            EventKind::End { reason }
        }
        other => return Err(bad(format!("unknown event type `{other}`"))),
    };
    Ok(Event { at, kind })
}

impl Event {
    /// The event as a canonical JSON tree (the form hosts record).
    pub fn to_node(&self) -> Node {
        let at = ("at", n(self.at));
        match &self.kind {
            EventKind::Start(c) => {
                let coverage = match &c.coverage {
                    Coverage::Complete => s("complete"),
                    Coverage::Blind(v) => strs(v.iter().map(|x| x.as_str())),
                };
                let mut m = vec![
                    ("type", s("start")),
                    at,
                    ("run_id", s(&c.run_id)),
                    ("profile", s(c.profile.as_str())),
                    ("allowlist", strs(c.allowlist.iter().map(|x| x.as_str()))),
                    ("risk_ceiling", s(c.risk_ceiling.as_str())),
                    ("coverage", coverage),
                    ("agent", s(&c.agent)),
                ];
                if let Some(a) = &c.available {
                    m.push(("available", strs(a.iter().map(|x| x.as_str()))));
                }
                obj(m)
            }
            EventKind::Invoke { tool, arguments, call_id, step, guard } => {
                let mut m = vec![("type", s("invoke")), at, ("tool", s(tool)), ("arguments", arguments.clone())];
                if let Some(c) = call_id {
                    m.push(("call_id", s(c)));
                }
                if let Some(st) = step {
                    m.push(("step", s(st)));
                }
                if *guard {
                    m.push(("guard", b(true)));
                }
                obj(m)
            }
            EventKind::Result { tool, result, is_error, call_id } => {
                let mut m = vec![("type", s("result")), at, ("tool", s(tool)), ("result", result.clone()), ("is_error", b(*is_error))];
                if let Some(c) = call_id {
                    m.push(("call_id", s(c)));
                }
                obj(m)
            }
            EventKind::Approval { step, call_sha256, approver, granted, request } => {
                let mut m = vec![("type", s("approval")), at, ("step", opt_s(step.as_deref())), ("approver", s(approver)), ("granted", b(*granted))];
                if let Some(h) = call_sha256 {
                    m.push(("call_sha256", s(h)));
                }
                if let Some(r) = request {
                    m.push(("request", n(*r)));
                }
                obj(m)
            }
            EventKind::Advance { to } => obj(vec![("type", s("advance")), at, ("to", s(to))]),
            EventKind::Verdict { step, pass, by } => {
                obj(vec![("type", s("verdict")), at, ("step", s(step)), ("outcome", s(if *pass { "pass" } else { "fail" })), ("by", s(by))])
            }
            EventKind::FinalOutput => obj(vec![("type", s("final_output")), at]),
            EventKind::Tick => obj(vec![("type", s("tick")), at]),
            EventKind::End { reason } => obj(vec![("type", s("end")), at, ("reason", s(reason.as_str()))]),
        }
    }
}

/// The hex SHA-256 of `{"arguments":..,"tool":..}` in canonical JSON, which binds an approval to one call (9.19).
pub fn call_sha256(tool: &str, arguments: &Node) -> String {
    let node = obj(vec![("arguments", arguments.clone()), ("tool", s(tool))]);
    crate::doc::sha256_hex(jcs::to_string_hashing(&node).as_bytes())
}
