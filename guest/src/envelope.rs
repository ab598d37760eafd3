//! The policy envelope `runbook-policy-envelope/v1`, derived from the document alone (docs/spec/envelope.md#derivation).

use crate::codes::LintCode;
use crate::doc::Analysis;
use crate::jcs::{self, arr, b, n, null, obj, obj_owned, opt_s, s, strs};
use crate::value::Node;

pub const SCHEMA: &str = "runbook-policy-envelope/v1";

fn derivable(a: &Analysis) -> bool {
    a.parsed && !a.findings.iter().any(|f| f.severity == crate::doc::Severity::Error && BLOCKING.iter().any(|c| c.as_str() == f.code))
}

/// Errors that leave the document without an envelope: those that leave it without a complete model, and
/// `unconstrained-shell` as an error (a shell capability that can run anything in a runbook with a gated
/// step or a destructive capability, docs/spec/runbook.md#tight-conditions): an envelope is what hosts enforce, and one that grants a
/// whole shell beside a gate would look enforced and not be. Only findings of error severity block, so the
/// warning form of the same code does not. The others (an undeclared tool, a bad route, a profile too
/// low, ...) still give an envelope that shows them.
pub const BLOCKING: &[LintCode] = &[
    LintCode::ParseError,
    LintCode::UnknownField,
    LintCode::DuplicateKey,
    LintCode::WrongType,
    LintCode::InvalidId,
    LintCode::InvalidValue,
    LintCode::DuplicateId,
    LintCode::MissingField,
    LintCode::ConflictingFields,
    LintCode::NameCollision,
    LintCode::BudgetOutOfRange,
    LintCode::InvalidRegex,
    LintCode::InvalidPointer,
    LintCode::InvalidPredicate,
    LintCode::Limit,
    LintCode::UnconstrainedShell,
];

/// The canonical envelope, or None when the document has no complete model.
pub fn envelope_of(a: &Analysis) -> Option<String> {
    derivable(a).then(|| canonical(a))
}

/// The envelope as a tree; `jcs::to_string` gives its canonical bytes. Only for documents without errors.
pub fn build(a: &Analysis) -> Node {
    let d = &a.doc;
    let mut allowlist: Vec<&str> = d.capabilities.iter().map(|c| c.name.as_str()).collect();
    crate::sort::sort_by(&mut allowlist, |x, y| crate::jcs::utf16_order(x, y));
    let capabilities = obj_owned(
        d.capabilities
            .iter()
            .map(|c| {
                let when = c.when.as_ref().map(|w| w.to_node()).unwrap_or_else(null);
                (c.name.clone(), obj(vec![("tool", s(&c.tool)), ("risk", s(c.risk.as_str())), ("when", when)]))
            })
            .collect(),
    );
    let steps = obj_owned(
        d.steps
            .iter()
            .enumerate()
            .map(|(i, st)| {
                let mut tools: Vec<&str> = a.step_caps[i].iter().map(|ci| d.capabilities[*ci].name.as_str()).collect();
                crate::sort::sort_by(&mut tools, |x, y| crate::jcs::utf16_order(x, y));
                (
                    st.id.clone(),
                    obj(vec![
                        ("tools", strs(tools)),
                        ("risk", s(a.step_risk[i].as_str())),
                        ("gated", b(a.step_gated[i])),
                        ("assert", b(st.assert.is_some())),
                        ("next", opt_s(a.step_next[i].as_deref())),
                        ("on_fail", opt_s(st.on_fail.as_deref())),
                    ]),
                )
            })
            .collect(),
    );
    let undeclared = arr(a.undeclared.iter().map(|(st, t)| obj(vec![("step", s(st)), ("tool", s(t))])).collect());
    let budgets = obj_owned(d.steps.iter().filter_map(|st| st.retry.as_ref().map(|r| (format!("{}->{}", st.id, r.to), n(r.max)))).collect());
    let mut terminals: Vec<&str> = d.terminals.iter().map(|t| t.as_str()).collect();
    crate::sort::sort_by(&mut terminals, |x, y| crate::jcs::utf16_order(x, y));
    let checkpoints = arr(d
        .checkpoints
        .iter()
        .map(|c| {
            obj(vec![
                ("id", s(&c.id)),
                ("kind", s(&c.kind)),
                ("required", b(c.required)),
                ("match", c.match_tool.as_deref().map(|t| obj(vec![("tool", s(t))])).unwrap_or_else(null)),
                ("condition", opt_s(c.condition.as_deref())),
                ("timeout_ms", c.timeout_ms.map(n).unwrap_or_else(null)),
            ])
        })
        .collect());
    let (min, declared) = a.min_profile();
    obj(vec![
        ("schema", s(SCHEMA)),
        ("document", obj(vec![("runbook_id", opt_s(d.runbook_id.as_deref())), ("version", opt_s(d.version.as_deref())), ("sha256", s(&a.sha256))])),
        ("allowlist", strs(allowlist)),
        ("capabilities", capabilities),
        ("steps", steps),
        ("undeclared", undeclared),
        ("budgets", budgets),
        ("terminals", strs(terminals)),
        ("initial", opt_s(d.steps.first().map(|s| s.id.as_str()))),
        ("checkpoints", checkpoints),
        ("execution", s(d.execution.unwrap_or(crate::doc::Execution::HumanWithAgent).as_str())),
        ("min_runtime_profile", obj(vec![("value", s(min.as_str())), ("source", s(if declared { "declared" } else { "implied" }))])),
        ("structure", s(a.structure.as_str())),
    ])
}

pub fn canonical(a: &Analysis) -> String {
    jcs::to_string(&build(a))
}
