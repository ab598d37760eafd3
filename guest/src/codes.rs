//! Every wire code the module writes, with the one sentence that explains it: the CLI, the MCP proxy,
//! the hook and the playground all show these sentences (through the `explain` export and the
//! `explanation` of each recorded event), so a code means the same words in every host.

use crate::event::{Decision, DecisionKind, Deviation, Reason, Refusal};

/// `(kind, code, sentence)`. Kinds: decision, deviation, reason, refusal, outcome, profile, risk,
/// end-reason (lint codes are the [`LintCode`] enum below). The string forms here must equal the `as_str` of each enum (a test checks it).
pub const CODES: &[(&str, &str, &str)] = &[
    ("decision", "allow", "the event is accepted and the call may run"),
    ("decision", "deny", "the call or request is refused and recorded; the run goes on"),
    ("decision", "needs-approval", "the step is gated: a human who is not the agent must approve this call before it may run"),
    ("decision", "needs-verdict", "the step cannot be checked by the module: a human must rule whether it passed"),
    ("decision", "halt", "the run is over; no further call is allowed"),
    ("deviation", "undeclared-tool", "no capability of the runbook allows this call (the tool, or a command that no `when` matches)"),
    ("deviation", "out-of-scope-tool", "the runbook allows this tool, but not in the current step"),
    ("deviation", "out-of-order-step", "the call or route belongs to a step that is not the current one"),
    ("deviation", "budget-exhausted", "the route's retry budget is spent"),
    ("deviation", "terminal-not-reached", "the run ended away from a terminal of the runbook"),
    ("reason", "refused", "admission refused the run before any tool ran"),
    ("reason", "awaiting-approval", "the call waits for a human's approval"),
    ("reason", "guarded", "the call names the run's evidence, the approval channel, the registry or runbook-host itself, which no agent may touch"),
    ("reason", "limit", "an input is over one of the module's limits"),
    ("reason", "halted", "the run had already stopped"),
    ("reason", "assert-failed", "the step's check failed on the tool's result"),
    ("reason", "budget-exhausted", "the retry budget is spent: the run follows the step's on_fail, or is aborted when it has none"),
    ("reason", "orphan-result", "the result answers no allowed call, so it judges nothing"),
    ("reason", "self-approval", "the agent may not approve or rule on its own work"),
    ("reason", "not-current", "the approval or ruling names a step that is not the current one"),
    ("reason", "unknown-step", "the runbook has no such step"),
    ("reason", "no-pending", "nothing awaits this answer: no request of the current visit matches it, or it was answered already"),
    ("reason", "out-of-order-step", "the runbook declares no such route from the current step"),
    ("reason", "not-r1", "only an R1 run is routed by the client; at R2 the module routes itself"),
    ("reason", "checkpoint-timeout", "a required checkpoint was not reached in time, so the run failed"),
    ("reason", "run-ended", "the run ended"),
    ("reason", "malformed-event", "the event is not one the module can read, so the run halted"),
    ("reason", "inexact-number", "the call's arguments hold a number that has no exact canonical form, so it was refused before it ran"),
    ("reason", "host-trap", "the policy module trapped or hit a host bound, so the run halted (fail closed)"),
    ("refusal", "autonomous-at-r0", "an agent-autonomous runbook cannot run at R0"),
    ("refusal", "capability-not-allowed", "the client does not allow a tool the runbook needs"),
    ("refusal", "coverage-incomplete", "the runbook has destructive or irreversible work, and this adapter cannot see every invocation"),
    ("refusal", "invalid-document", "the runbook has lint errors"),
    ("refusal", "prerequisite-unmet", "a prerequisite of the runbook is not available"),
    ("refusal", "profile-too-low", "the runbook needs a higher enforcement profile than the client claims"),
    ("refusal", "risk-above-ceiling", "the runbook's risk is above the client's ceiling"),
    ("outcome", "completed", "a terminal was reached, every required checkpoint satisfied and the completion condition met"),
    ("outcome", "incomplete", "the run ended away from a terminal, or without meeting its completion condition"),
    ("outcome", "refused", "admission refused the run"),
    ("outcome", "failed", "a check failed with no route, a required checkpoint timed out, or the module trapped"),
    ("outcome", "aborted", "a retry budget ran out with nowhere to go"),
    ("profile", "R0", "records every deviation and enforces only admission and human approval of gated steps"),
    ("profile", "R1", "enforces the allowlist, each step's scope, gates, budgets and the risk ceiling; the client routes"),
    ("profile", "R2", "R1, and the module checks each step's result and routes the run itself"),
    ("risk", "read-only", "changes nothing"),
    ("risk", "mutating", "changes state that can be changed back"),
    ("risk", "destructive", "removes or overwrites state"),
    ("risk", "irreversible", "cannot be undone"),
    ("end-reason", "normal", "the client ended the run"),
    ("end-reason", "client-closed", "the client went away"),
    ("end-reason", "server-exited", "a tool server exited"),
    ("end-reason", "interrupted", "the host was interrupted"),
    ("end-reason", "approval-timeout", "a call waited for approval in vain"),
];

/// Declares the lint codes: the enum, its string forms, its parser and its sentences in one list.
macro_rules! lint_codes {
    ($($v:ident => $code:literal, $sentence:literal;)*) => {
        /// Every code a lint finding can carry (docs/spec/runbook.md#lint-findings). `doc` emits findings only through this enum,
        /// so a misspelled code cannot be written.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub enum LintCode { $($v),* }

        impl LintCode {
            pub const ALL: &'static [LintCode] = &[$(LintCode::$v),*];
            pub fn as_str(self) -> &'static str {
                match self { $(LintCode::$v => $code),* }
            }
            pub fn parse(code: &str) -> Option<LintCode> {
                match code { $($code => Some(LintCode::$v),)* _ => None }
            }
            pub fn sentence(self) -> &'static str {
                match self { $(LintCode::$v => $sentence),* }
            }
        }
    };
}

lint_codes! {
    ParseError => "parse-error", "the document is not valid JSON or YAML";
    UnknownField => "unknown-field", "a field the format does not define (a typo must never silently drop a rule)";
    DuplicateKey => "duplicate-key", "a key appears twice in one object";
    WrongType => "wrong-type", "a field has the wrong type";
    MissingField => "missing-field", "a required field is missing";
    InvalidValue => "invalid-value", "a field's value is not one the format allows";
    ConflictingFields => "conflicting-fields", "two fields that exclude each other are both set";
    InvalidId => "invalid-id", "an id is not a lowercase identifier";
    DuplicateId => "duplicate-id", "two steps, capabilities or terminals share an id";
    UnknownRoute => "unknown-route", "a route names no step or terminal";
    MissingRoute => "missing-route", "a last step without `next`: a run must know where it may end";
    NameCollision => "name-collision", "a step and a terminal, or two things, share a name";
    UndeclaredTool => "undeclared-tool", "a step names a capability that no capability declares";
    BudgetOutOfRange => "budget-out-of-range", "a retry budget is outside 1..100";
    UnbudgetedCycle => "unbudgeted-cycle", "a cycle of routes with no retry budget could run forever";
    UnreachableStep => "unreachable-step", "no route leads to this step";
    NoTerminal => "no-terminal", "the runbook declares no terminal";
    AutonomousAtR0 => "autonomous-at-r0", "an agent-autonomous runbook cannot declare R0";
    MinProfileBelowImplied => "min-profile-below-implied", "the declared minimum profile is below what the runbook's risk implies";
    ReportOnlyRequiresAdvisory => "report-only-requires-advisory", "report-only enforcement is allowed only for advisory runbooks";
    InvalidRegex => "invalid-regex", "a pattern is not a valid regular expression";
    InvalidPointer => "invalid-pointer", "a path is not a valid JSON Pointer";
    InvalidPredicate => "invalid-predicate", "a check is not a valid predicate";
    AmbiguousObservation => "ambiguous-observation", "a step has several capabilities and no `observe` saying which result it checks";
    UnanchoredWhen => "unanchored-when", "a `matches` inside `when` must be anchored at both ends (^...$), or it grants more than it says";
    UnconstrainedShell => "unconstrained-shell", "a shell capability whose `when` does not pin the command (none, no `equals`, `in` or `matches` on it, or a pattern that admits a shell metacharacter) can run anything: an error in a runbook with a gated step or a destructive capability, a warning elsewhere";
    FlagArgument => "flag-argument", "a `when` pattern lets an argument start with `-`, so a name can be a flag (`-oyaml`, `--all-namespaces`); start each argument with a class without `-`, such as `[a-z0-9][a-z0-9.-]*`";
    Limit => "limit", "the document is over one of the module's limits";
}

/// The sentence for one code of one kind.
pub fn explain(kind: &str, code: &str) -> Option<&'static str> {
    if kind == "lint" {
        return LintCode::parse(code).map(LintCode::sentence);
    }
    CODES.iter().find(|(k, c, _)| *k == kind && *c == code).map(|(_, _, s)| *s)
}

fn sentence(kind: &str, code: &str) -> &'static str {
    explain(kind, code).unwrap_or("")
}

/// ` [reason]` when the decision carries a reason code.
fn reason_tag(d: &Decision) -> String {
    d.reason.map(|r| format!(" [{}]", r.as_str())).unwrap_or_default()
}

/// One sentence about a decision, for the agent or the person reading it: what was decided, at which
/// step, and why, in words, with the codes in brackets so that a log can be searched for them.
pub fn explain_decision(d: &Decision) -> String {
    let at = match &d.step {
        Some(s) => format!(" at step `{s}`"),
        None => String::new(),
    };
    let seq = d.seq;
    match d.kind {
        DecisionKind::Allow => match (d.deviation, d.reason) {
            (Some(dev), Some(r)) => {
                format!(
                    "Allowed{at} (event {seq}), with a recorded deviation [{}]: {}; {}.",
                    dev.as_str(),
                    sentence("deviation", dev.as_str()),
                    sentence("reason", r.as_str())
                )
            }
            (Some(dev), None) => format!("Allowed{at} (event {seq}), with a recorded deviation [{}]: {}.", dev.as_str(), sentence("deviation", dev.as_str())),
            (None, Some(r)) => format!("Accepted{at} (event {seq}) [{}]: {}.", r.as_str(), sentence("reason", r.as_str())),
            (None, None) => format!("Allowed{at} (event {seq})."),
        },
        DecisionKind::Deny => {
            let why = match (d.reason, d.deviation) {
                (Some(Reason::Guarded), dev) => {
                    format!("[{}] [guarded] {}", dev.map_or("undeclared-tool", |d| d.as_str()), sentence("reason", "guarded"))
                }
                (_, Some(dev)) => format!("[{}] {}", dev.as_str(), sentence("deviation", dev.as_str())),
                (Some(r), None) => format!("[{}] {}", r.as_str(), sentence("reason", r.as_str())),
                (None, None) => "the runbook does not allow it".to_string(),
            };
            format!("Denied{at} (event {seq}): {why}.")
        }
        DecisionKind::NeedsApproval => {
            format!("Needs approval{at} (event {seq}) [needs-approval]{}: {}.", reason_tag(d), sentence("decision", "needs-approval"))
        }
        DecisionKind::NeedsVerdict => {
            format!("Needs a human's verdict{at} (event {seq}) [needs-verdict]{}: {}.", reason_tag(d), sentence("decision", "needs-verdict"))
        }
        DecisionKind::Halt => {
            if !d.refusals.is_empty() {
                let parts: Vec<String> = d.refusals.iter().map(|r| format!("[{}] {}", r.as_str(), sentence("refusal", r.as_str()))).collect();
                return format!("Refused before any tool ran [refused]: {}.", parts.join("; "));
            }
            let why = match (d.reason, d.deviation) {
                (Some(r), Some(dev)) if dev.as_str() != r.as_str() => {
                    format!("[{}] {}; [{}] {}", dev.as_str(), sentence("deviation", dev.as_str()), r.as_str(), sentence("reason", r.as_str()))
                }
                (Some(r), _) => format!("[{}] {}", r.as_str(), sentence("reason", r.as_str())),
                (None, Some(dev)) => format!("[{}] {}", dev.as_str(), sentence("deviation", dev.as_str())),
                (None, None) => "the run is over".to_string(),
            };
            format!("The run halted{at} (event {seq}): {why}.")
        }
    }
}

/// Every enum's string form is in [`CODES`] (checked by a test), so an explanation never comes back empty.
pub fn all_enum_codes() -> Vec<(&'static str, &'static str)> {
    use crate::doc::{Profile, Risk};
    use crate::event::END_REASONS;
    let mut v = Vec::new();
    for k in DecisionKind::ALL {
        v.push(("decision", k.as_str()));
    }
    for d in Deviation::ALL {
        v.push(("deviation", d.as_str()));
    }
    for r in Reason::ALL {
        v.push(("reason", r.as_str()));
    }
    for r in Refusal::ALL {
        v.push(("refusal", r.as_str()));
    }
    for o in crate::supervisor::Outcome::ALL {
        v.push(("outcome", o.as_str()));
    }
    for p in [Profile::R0, Profile::R1, Profile::R2] {
        v.push(("profile", p.as_str()));
    }
    for (n, _) in Risk::ALL {
        v.push(("risk", n));
    }
    for (n, _) in END_REASONS {
        v.push(("end-reason", n));
    }
    for c in LintCode::ALL {
        v.push(("lint", c.as_str()));
    }
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_enum_code_has_a_sentence() {
        for (k, c) in super::all_enum_codes() {
            assert!(super::explain(k, c).is_some_and(|s| !s.is_empty()), "{k} {c}");
        }
    }

    #[test]
    fn no_code_is_listed_twice() {
        let mut seen = std::collections::BTreeSet::new();
        for (k, c, _) in super::CODES {
            assert!(seen.insert((k, c)), "{k} {c}");
        }
    }
}
