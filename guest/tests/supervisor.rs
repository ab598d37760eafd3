//! Scripted runs with virtual time: every decision, deviation class, refusal and outcome, checked against
//! docs/spec/run.md. No processes, no clock.

use runbook_policy::json;
use runbook_policy::value::{Node, Value};
use runbook_policy::Session;

const ROTATE: &str = r#"
runbook_id: rotate-db-credentials
version: 1.0.0
execution: agent-autonomous
capabilities:
  - {name: read-age, tool: db.read, risk: read-only}
  - {name: rotate, tool: secrets.rotate, risk: destructive}
  - {name: kubectl-get, tool: Bash, risk: read-only, when: {path: /command, op: matches, value: '^kubectl get [a-z0-9./-]+$'}}
  - {name: verify, tool: db.read, risk: read-only}
steps:
  - id: check
    tools: [read-age, kubectl-get]
    observe: read-age
    assert:
      - {path: /result/age_days, op: gt, value: 90}
  - id: rotate
    tool: rotate
    requires_approval: true
    assert:
      - {path: /is_error, op: equals, value: false}
    retry: {max: 2}
    on_fail: rolled-back
  - id: confirm
    tool: verify
    assert:
      - {all: [{path: /result/ok, op: equals, value: true}, {path: /result/errors, op: len_eq, value: 0}]}
    next: done
terminals: [done, rolled-back]
"#;

/// The rotation without destructive risk (so R1 may run it), still gated by `requires_approval`.
fn r1_rotate() -> String {
    ROTATE.replace("risk: destructive", "risk: mutating")
}

fn start(profile: &str) -> String {
    format!(
        r#"{{"type":"start","at":0,"run_id":"r-1","profile":"{profile}","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}}"#
    )
}

/// (decision, step, deviation, reason) of each decision line.
fn run(doc: &str, lines: &[String]) -> (Vec<(String, String, String, String)>, Node) {
    let mut s = Session::new(doc.as_bytes());
    let mut out = Vec::new();
    for l in lines {
        let d = json::parse(&s.handle_line(l)).node.unwrap();
        let f = |k: &str| match &d.get(k).unwrap().value {
            Value::Str(x) => x.clone(),
            Value::Null => "-".into(),
            _ => "?".into(),
        };
        out.push((f("decision"), f("step"), f("deviation"), f("reason")));
    }
    (out, json::parse(&s.report()).node.unwrap())
}

fn t(d: &str, step: &str, dev: &str, reason: &str) -> (String, String, String, String) {
    (d.into(), step.into(), dev.into(), reason.into())
}

fn ev(s: &str) -> String {
    s.to_string()
}

fn get<'a>(n: &'a Node, path: &str) -> &'a Node {
    n.pointer(&runbook_policy::value::parse_pointer(path).unwrap()).unwrap_or_else(|| panic!("no {path}"))
}

fn text(n: &Node, path: &str) -> String {
    runbook_policy::jcs::to_string(get(n, path))
}

#[test]
fn a_completed_p2_rotation() {
    let call = runbook_policy::call_sha256("secrets.rotate", r#"{"db":"orders"}"#).unwrap();
    let lines = vec![
        start("R2"),
        ev(r#"{"type":"invoke","at":1,"tool":"Bash","arguments":{"command":"kubectl get pods"},"call_id":"k"}"#),
        ev(r#"{"type":"result","at":2,"tool":"Bash","result":"pod/a Running","is_error":false,"call_id":"k"}"#),
        ev(r#"{"type":"invoke","at":3,"tool":"db.read","arguments":{"q":"age"},"call_id":"1"}"#),
        ev(r#"{"type":"result","at":4,"tool":"db.read","result":{"age_days":120},"is_error":false,"call_id":"1"}"#),
        ev(r#"{"type":"invoke","at":5,"tool":"secrets.rotate","arguments":{"db":"orders"},"call_id":"2"}"#),
        format!(r#"{{"type":"approval","at":6,"step":"rotate","call_sha256":"{call}","approver":"alice","granted":true}}"#),
        ev(r#"{"type":"invoke","at":7,"tool":"secrets.rotate","arguments":{"db":"orders"},"call_id":"3"}"#),
        ev(r#"{"type":"result","at":8,"tool":"secrets.rotate","result":{"rotated":true},"is_error":false,"call_id":"3"}"#),
        ev(r#"{"type":"invoke","at":9,"tool":"db.read","arguments":{},"call_id":"4"}"#),
        ev(r#"{"type":"result","at":10,"tool":"db.read","result":{"ok":true,"errors":[]},"is_error":false,"call_id":"4"}"#),
        ev(r#"{"type":"end","at":11}"#),
    ];
    let (d, report) = run(ROTATE, &lines);
    assert_eq!(
        d,
        vec![
            t("allow", "check", "-", "-"),
            t("allow", "check", "-", "-"),
            t("allow", "check", "-", "-"),
            t("allow", "check", "-", "-"),
            t("allow", "rotate", "-", "-"),
            t("needs-approval", "rotate", "-", "awaiting-approval"),
            t("allow", "rotate", "-", "-"),
            t("allow", "rotate", "-", "-"),
            t("allow", "confirm", "-", "-"),
            t("allow", "confirm", "-", "-"),
            t("allow", "done", "-", "-"),
            t("halt", "done", "-", "run-ended"),
        ]
    );
    assert_eq!(text(&report, "/outcome"), "\"completed\"");
    assert_eq!(text(&report, "/terminal"), "\"done\"");
    assert_eq!(text(&report, "/steps/rotate"), r#"{"assert":"pass","visits":1}"#);
    assert_eq!(text(&report, "/approvals/0/accepted"), "true");
    assert_eq!(text(&report, "/events"), "12");
}

#[test]
fn deviations_are_blocked_at_r1_and_recorded() {
    let lines = vec![
        start("R2"),
        // Outside the allowlist entirely.
        ev(r#"{"type":"invoke","at":1,"tool":"rm","arguments":{}}"#),
        // Declared, but by another step.
        ev(r#"{"type":"invoke","at":2,"tool":"secrets.rotate","arguments":{}}"#),
        // A shell command the `when` does not grant: undeclared.
        ev(r#"{"type":"invoke","at":3,"tool":"Bash","arguments":{"command":"kubectl delete ns prod"}}"#),
        // A `when` that cannot be evaluated does not grant.
        ev(r#"{"type":"invoke","at":4,"tool":"Bash","arguments":{}}"#),
        // Attributed to another step.
        ev(r#"{"type":"invoke","at":5,"tool":"db.read","arguments":{},"step":"confirm"}"#),
        // The approval channel is never an agent's to touch.
        ev(r#"{"type":"invoke","at":6,"tool":"db.read","arguments":{},"guard":true}"#),
        ev(r#"{"type":"end","at":7}"#),
    ];
    let (d, report) = run(ROTATE, &lines);
    assert_eq!(d[1], t("deny", "check", "undeclared-tool", "-"));
    assert_eq!(d[2], t("deny", "check", "out-of-scope-tool", "-"));
    assert_eq!(d[3], t("deny", "check", "undeclared-tool", "-"));
    assert_eq!(d[4], t("deny", "check", "undeclared-tool", "-"));
    assert_eq!(d[5], t("deny", "check", "out-of-order-step", "-"));
    assert_eq!(d[6], t("deny", "check", "undeclared-tool", "guarded"));
    assert_eq!(d[7], t("halt", "check", "-", "run-ended"));
    assert_eq!(text(&report, "/outcome"), "\"incomplete\"");
    let classes: Vec<String> = match &get(&report, "/deviations").value {
        Value::Arr(items) => items.iter().map(|i| text(i, "/class")).collect(),
        _ => panic!(),
    };
    assert_eq!(
        classes,
        ["undeclared-tool", "out-of-scope-tool", "undeclared-tool", "undeclared-tool", "out-of-order-step", "undeclared-tool", "terminal-not-reached"]
            .map(|c| format!("\"{c}\""))
    );
}

#[test]
fn r0_records_but_does_not_block_and_still_gates() {
    let doc = ROTATE.replace("execution: agent-autonomous", "execution: human-with-agent").replace("risk: destructive", "risk: mutating");
    let lines = vec![
        start("R0"),
        ev(r#"{"type":"invoke","at":1,"tool":"rm","arguments":{}}"#),
        ev(r#"{"type":"advance","at":2,"to":"rotate"}"#),
        ev(r#"{"type":"invoke","at":3,"tool":"secrets.rotate","arguments":{}}"#),
        ev(r#"{"type":"advance","at":4,"to":"done"}"#),
        ev(r#"{"type":"end","at":5}"#),
    ];
    let (d, report) = run(&doc, &lines);
    assert_eq!(d[0], t("allow", "check", "-", "-"));
    assert_eq!(d[1], t("allow", "check", "undeclared-tool", "-"));
    assert_eq!(d[2], t("allow", "rotate", "-", "-"));
    assert_eq!(d[3], t("needs-approval", "rotate", "-", "awaiting-approval"));
    assert_eq!(d[4], t("allow", "done", "out-of-order-step", "-"));
    assert_eq!(text(&report, "/outcome"), "\"completed\"");
}

#[test]
fn self_approval_and_wrong_step_approvals_are_refused() {
    let doc = r1_rotate();
    let lines = vec![
        start("R1"),
        ev(r#"{"type":"approval","at":1,"step":"rotate","approver":"alice","granted":true}"#),
        ev(r#"{"type":"advance","at":2,"to":"rotate"}"#),
        ev(r#"{"type":"approval","at":3,"step":"rotate","approver":"agent-1","granted":true}"#),
        ev(r#"{"type":"approval","at":4,"step":"nope","approver":"alice","granted":true}"#),
        ev(r#"{"type":"invoke","at":5,"tool":"secrets.rotate","arguments":{"db":"a"}}"#),
        ev(r#"{"type":"approval","at":6,"step":"rotate","approver":"alice","granted":true}"#),
        ev(r#"{"type":"invoke","at":7,"tool":"secrets.rotate","arguments":{"db":"a"}}"#),
        ev(r#"{"type":"invoke","at":8,"tool":"secrets.rotate","arguments":{"db":"b"}}"#),
        // A "no" with no request pending answers nothing (docs/spec/run.md#the-approval-ledger): refused, the
        // visit's gate stays open.
        ev(r#"{"type":"approval","at":9,"step":"rotate","approver":"alice","granted":false}"#),
        ev(r#"{"type":"invoke","at":10,"tool":"secrets.rotate","arguments":{"db":"a"}}"#),
        ev(r#"{"type":"advance","at":11,"to":"confirm"}"#),
        ev(r#"{"type":"approval","at":12,"step":"confirm","approver":"alice","granted":true}"#),
        ev(r#"{"type":"advance","at":13,"to":"rotate"}"#),
        ev(r#"{"type":"advance","at":14,"to":"done"}"#),
        ev(r#"{"type":"end","at":15}"#),
    ];
    let (d, report) = run(&doc, &lines);
    assert_eq!(d[1], t("deny", "check", "-", "not-current"));
    assert_eq!(d[3], t("deny", "rotate", "-", "self-approval"));
    assert_eq!(d[4], t("deny", "rotate", "-", "unknown-step"));
    assert_eq!(d[5], t("needs-approval", "rotate", "-", "awaiting-approval"));
    assert_eq!(d[6], t("allow", "rotate", "-", "-"));
    assert_eq!(d[7], t("allow", "rotate", "-", "-"));
    assert_eq!(d[8], t("allow", "rotate", "-", "-"), "a step-wide approval admits any call of the step");
    assert_eq!(d[9], t("deny", "rotate", "-", "no-pending"));
    assert_eq!(d[10], t("allow", "rotate", "-", "-"));
    assert_eq!(d[11], t("allow", "confirm", "-", "-"));
    assert_eq!(d[12], t("deny", "confirm", "-", "no-pending"));
    assert_eq!(d[13], t("deny", "confirm", "out-of-order-step", "out-of-order-step"), "no route from confirm back to rotate");
    assert_eq!(d[14], t("allow", "done", "-", "-"));
    assert_eq!(text(&report, "/outcome"), "\"completed\"");
    assert_eq!(text(&report, "/approvals/1"), r#"{"accepted":false,"approver":"agent-1","call_sha256":null,"granted":true,"seq":3,"step":"rotate"}"#);
}

#[test]
fn gates_close_when_control_leaves_the_step() {
    let doc = r1_rotate();
    let lines = vec![
        start("R1"),
        ev(r#"{"type":"advance","at":1,"to":"rotate"}"#),
        ev(r#"{"type":"invoke","at":2,"tool":"secrets.rotate","arguments":{}}"#),
        ev(r#"{"type":"approval","at":2,"step":"rotate","approver":"alice","granted":true}"#),
        ev(r#"{"type":"invoke","at":3,"tool":"secrets.rotate","arguments":{}}"#),
        // Retry re-enters the step: a new visit needs a new approval.
        ev(r#"{"type":"advance","at":4,"to":"rotate"}"#),
        ev(r#"{"type":"invoke","at":5,"tool":"secrets.rotate","arguments":{}}"#),
        ev(r#"{"type":"advance","at":6,"to":"rotate"}"#),
        ev(r#"{"type":"advance","at":7,"to":"rotate"}"#),
    ];
    let (d, report) = run(&doc, &lines);
    assert_eq!(d[2], t("needs-approval", "rotate", "-", "awaiting-approval"));
    assert_eq!(d[3], t("allow", "rotate", "-", "-"));
    assert_eq!(d[4], t("allow", "rotate", "-", "-"));
    assert_eq!(d[5], t("allow", "rotate", "-", "-"));
    assert_eq!(d[6], t("needs-approval", "rotate", "-", "awaiting-approval"));
    assert_eq!(d[7], t("allow", "rotate", "-", "-"));
    // The budget is spent: the retry is not taken, and the run follows rotate's on_fail (7.5).
    assert_eq!(d[8], t("deny", "rolled-back", "budget-exhausted", "budget-exhausted"));
    assert_eq!(text(&report, "/budgets"), r#"{"rotate->rotate":{"max":2,"used":2}}"#);
    assert_eq!(text(&report, "/steps/rotate/visits"), "3");
    assert_eq!(text(&report, "/terminal"), "\"rolled-back\"");
    assert_eq!(text(&report, "/outcome"), "null", "the run has not ended");
}

/// Two steps: `check` may retry itself once and falls back to a gated `rollback` step
/// (docs/spec/runbook.md#retries-and-failure-routes).
const ADVANCE_BUDGET: &str = r#"{"runbook_id":"x","version":"1.0.0","capabilities":[
    {"name":"health","tool":"http.get","risk":"read-only"},{"name":"restore","tool":"deploy.restore","risk":"mutating"}],
  "steps":[{"id":"check","tool":"health","retry":{"max":1},"on_fail":"rollback","next":"healthy"},
    {"id":"rollback","tool":"restore","requires_approval":true,"next":"rolled-back"}],
  "terminals":["healthy","rolled-back"]}"#;

/// Restored from the snapshot after every prefix, the session answers the rest and reports exactly as
/// the uninterrupted one (a run halted `aborted` by an advance included).
fn restores_at_every_split(doc: &str, lines: &[String]) {
    let mut whole = Session::new(doc.as_bytes());
    let mut snaps = vec![whole.snapshot()];
    let mut decisions = Vec::new();
    for l in lines {
        decisions.push(whole.handle_line(l));
        snaps.push(whole.snapshot());
    }
    for (k, snap) in snaps.iter().enumerate() {
        let mut r = Session::restore(doc.as_bytes(), snap).unwrap_or_else(|e| panic!("restore after {k} events: {e}"));
        for (i, l) in lines.iter().enumerate().skip(k) {
            assert_eq!(r.handle_line(l), decisions[i], "restored after {k} events, event {i}");
        }
        assert_eq!(r.report(), whole.report(), "restored after {k} events");
    }
}

#[test]
fn r1_advance_past_a_spent_budget_follows_on_fail_to_a_step() {
    let lines = vec![
        start("R1"),
        ev(r#"{"type":"advance","at":1,"to":"check"}"#),
        ev(r#"{"type":"invoke","at":2,"tool":"http.get","arguments":{}}"#),
        ev(r#"{"type":"advance","at":3,"to":"check"}"#),
        ev(r#"{"type":"invoke","at":4,"tool":"deploy.restore","arguments":{}}"#),
        ev(r#"{"type":"approval","at":5,"step":"rollback","approver":"alice","granted":true}"#),
        ev(r#"{"type":"invoke","at":6,"tool":"deploy.restore","arguments":{}}"#),
        ev(r#"{"type":"invoke","at":7,"tool":"http.get","arguments":{}}"#),
        ev(r#"{"type":"advance","at":8,"to":"check"}"#),
        ev(r#"{"type":"advance","at":9,"to":"rolled-back"}"#),
        ev(r#"{"type":"end","at":10}"#),
    ];
    let (d, report) = run(ADVANCE_BUDGET, &lines);
    assert_eq!(d[1], t("allow", "check", "-", "-"), "the one retry");
    assert_eq!(d[3], t("deny", "rollback", "budget-exhausted", "budget-exhausted"), "not retried: on_fail instead");
    assert_eq!(d[4], t("needs-approval", "rollback", "-", "awaiting-approval"), "rollback's tools are in scope, behind its gate");
    assert_eq!(d[6], t("allow", "rollback", "-", "-"));
    assert_eq!(d[7], t("deny", "rollback", "out-of-scope-tool", "-"), "check's tools are not");
    assert_eq!(d[8], t("deny", "rollback", "out-of-order-step", "out-of-order-step"));
    assert_eq!(d[9], t("allow", "rolled-back", "-", "-"));
    assert_eq!(text(&report, "/outcome"), "\"completed\"");
    assert_eq!(text(&report, "/terminal"), "\"rolled-back\"");
    assert_eq!(text(&report, "/steps"), r#"{"check":{"assert":null,"visits":2},"rollback":{"assert":null,"visits":1}}"#);
    assert_eq!(text(&report, "/budgets"), r#"{"check->check":{"max":1,"used":1}}"#);
    assert_eq!(text(&report, "/deviations/0"), r#"{"class":"budget-exhausted","seq":3,"step":"check","tool":null}"#);
    restores_at_every_split(ADVANCE_BUDGET, &lines);
}

#[test]
fn r1_advance_past_a_spent_budget_without_on_fail_aborts() {
    let doc = ADVANCE_BUDGET.replace(r#","on_fail":"rollback""#, "");
    let lines = vec![
        start("R1"),
        ev(r#"{"type":"advance","at":1,"to":"check"}"#),
        ev(r#"{"type":"advance","at":2,"to":"check"}"#),
        ev(r#"{"type":"advance","at":3,"to":"healthy"}"#),
        ev(r#"{"type":"invoke","at":4,"tool":"http.get","arguments":{}}"#),
        ev(r#"{"type":"end","at":5}"#),
    ];
    let (d, report) = run(&doc, &lines);
    assert_eq!(d[1], t("allow", "check", "-", "-"));
    assert_eq!(d[2], t("halt", "check", "budget-exhausted", "budget-exhausted"));
    assert_eq!(d[3], t("halt", "check", "-", "halted"), "no advance after the halt");
    assert_eq!(d[4], t("halt", "check", "-", "halted"));
    assert_eq!(d[5], t("halt", "check", "-", "halted"));
    assert_eq!(text(&report, "/outcome"), "\"aborted\"");
    assert_eq!(text(&report, "/terminal"), "null");
    assert_eq!(text(&report, "/deviations"), r#"[{"class":"budget-exhausted","seq":2,"step":"check","tool":null}]"#);
    assert_eq!(text(&report, "/steps/check/visits"), "2");
    restores_at_every_split(&doc, &lines);
}

#[test]
fn r0_advance_past_a_spent_budget_is_recorded_and_taken_r2_advance_is_not_r1() {
    let lines = vec![
        start("R0"),
        ev(r#"{"type":"advance","at":1,"to":"check"}"#),
        ev(r#"{"type":"advance","at":2,"to":"check"}"#),
        ev(r#"{"type":"advance","at":3,"to":"healthy"}"#),
        ev(r#"{"type":"end","at":4}"#),
    ];
    let (d, report) = run(ADVANCE_BUDGET, &lines);
    assert_eq!(d[2], t("allow", "check", "budget-exhausted", "-"), "R0 records, allows, and goes where asked (7.1)");
    assert_eq!(d[3], t("allow", "healthy", "-", "-"));
    assert_eq!(text(&report, "/outcome"), "\"completed\"");
    assert_eq!(text(&report, "/steps/check/visits"), "3");
    assert_eq!(text(&report, "/steps/rollback/visits"), "0");
    let mut r2 = lines.clone();
    r2[0] = start("R2");
    let (d, report) = run(ADVANCE_BUDGET, &r2);
    assert_eq!(d[1], t("deny", "check", "-", "not-r1"));
    assert_eq!(d[2], t("deny", "check", "-", "not-r1"));
    assert_eq!(text(&report, "/budgets/check->check/used"), "0");
    assert_eq!(text(&report, "/outcome"), "\"incomplete\"");
}

#[test]
fn r2_routes_failures_through_retry_then_on_fail() {
    let mut lines = vec![
        start("R2"),
        ev(r#"{"type":"invoke","at":1,"tool":"db.read","arguments":{}}"#),
        ev(r#"{"type":"result","at":2,"tool":"db.read","result":{"age_days":120},"is_error":false}"#),
    ];
    // Each visit of the gated step: the call is held, a human approves it, it runs and fails.
    for k in 0..3 {
        let at = 10 + k * 10;
        lines.push(format!(r#"{{"type":"invoke","at":{at},"tool":"secrets.rotate","arguments":{{}}}}"#));
        lines.push(format!(r#"{{"type":"approval","at":{},"step":"rotate","approver":"alice","granted":true}}"#, at + 1));
        lines.push(format!(r#"{{"type":"invoke","at":{},"tool":"secrets.rotate","arguments":{{}}}}"#, at + 2));
        lines.push(format!(r#"{{"type":"result","at":{},"tool":"secrets.rotate","result":{{}},"is_error":true}}"#, at + 3));
    }
    // At the terminal, an approval for the gated step is not for the current step.
    lines.push(ev(r#"{"type":"approval","at":80,"step":"rotate","approver":"alice","granted":true}"#));
    lines.push(ev(r#"{"type":"end","at":90}"#));
    let (d, report) = run(ROTATE, &lines);
    assert_eq!(d[3], t("needs-approval", "rotate", "-", "awaiting-approval"));
    assert_eq!(d[4], t("allow", "rotate", "-", "-"));
    assert_eq!(d[6], t("allow", "rotate", "-", "assert-failed"), "first failure: retry 1 of 2");
    assert_eq!(d[7], t("needs-approval", "rotate", "-", "awaiting-approval"), "a new visit needs a new approval");
    assert_eq!(d[10], t("allow", "rotate", "-", "assert-failed"), "second failure: retry 2 of 2");
    assert_eq!(d[14], t("allow", "rolled-back", "budget-exhausted", "budget-exhausted"), "then on_fail");
    assert_eq!(d[15], t("deny", "rolled-back", "-", "not-current"));
    assert_eq!(text(&report, "/outcome"), "\"completed\"", "rolled-back is a terminal");
    assert_eq!(text(&report, "/terminal"), "\"rolled-back\"");
    assert_eq!(text(&report, "/steps/rotate"), r#"{"assert":"fail","visits":3}"#);
}

#[test]
fn r2_aborts_or_fails_without_a_route() {
    let doc = r#"{"runbook_id":"x","version":"1.0.0","capabilities":["t"],"steps":[
        {"id":"a","tool":"t","assert":[{"path":"/result","op":"equals","value":1}],"retry":{"max":1},"next":"end"},
        {"id":"b","tool":"t","assert":[{"path":"/result","op":"equals","value":1}],"next":"end"}],"terminals":["end"]}"#;
    let lines = vec![
        start("R2"),
        ev(r#"{"type":"invoke","at":1,"tool":"t","arguments":{}}"#),
        ev(r#"{"type":"result","at":2,"tool":"t","result":2}"#),
        ev(r#"{"type":"invoke","at":3,"tool":"t","arguments":{}}"#),
        ev(r#"{"type":"result","at":4,"tool":"t","result":2}"#),
        ev(r#"{"type":"invoke","at":5,"tool":"t","arguments":{}}"#),
        ev(r#"{"type":"end","at":6}"#),
    ];
    let (d, report) = run(doc, &lines);
    assert_eq!(d[2], t("allow", "a", "-", "assert-failed"));
    assert_eq!(d[4], t("halt", "a", "budget-exhausted", "budget-exhausted"));
    assert_eq!(d[5], t("halt", "a", "-", "halted"));
    assert_eq!(d[6], t("halt", "a", "-", "halted"));
    assert_eq!(text(&report, "/outcome"), "\"aborted\"");
    // Without a retry or on_fail, a failed assert fails the run.
    let doc2 = doc.replace(r#","retry":{"max":1}"#, "");
    let (d, report) = run(&doc2, &lines[..3]);
    assert_eq!(d[2], t("halt", "a", "-", "assert-failed"));
    assert_eq!(text(&report, "/outcome"), "\"failed\"");
}

#[test]
fn unevaluable_asks_a_human_and_only_a_human_rules() {
    let doc = r#"{"runbook_id":"x","version":"1.0.0","capabilities":["t"],"steps":[
        {"id":"a","tool":"t","assert":[{"path":"/result/n","op":"lt","value":3}],"next":"b"},
        {"id":"b","tool":"t","expect":"the dashboard looks right","next":"end"}],"terminals":["end"]}"#;
    let lines = vec![
        start("R2"),
        ev(r#"{"type":"invoke","at":1,"tool":"t","arguments":{}}"#),
        ev(r#"{"type":"result","at":2,"tool":"t","result":{"n":"three"}}"#),
        ev(r#"{"type":"verdict","at":3,"step":"a","outcome":"pass","by":"agent-1"}"#),
        ev(r#"{"type":"verdict","at":4,"step":"b","outcome":"pass","by":"bob"}"#),
        ev(r#"{"type":"verdict","at":5,"step":"a","outcome":"pass","by":"bob"}"#),
        ev(r#"{"type":"verdict","at":6,"step":"b","outcome":"pass","by":"bob"}"#),
        ev(r#"{"type":"invoke","at":7,"tool":"t","arguments":{}}"#),
        ev(r#"{"type":"result","at":8,"tool":"t","result":{}}"#),
        ev(r#"{"type":"verdict","at":9,"step":"b","outcome":"pass","by":"bob"}"#),
        ev(r#"{"type":"advance","at":10,"to":"end"}"#),
        ev(r#"{"type":"end","at":11}"#),
    ];
    let (d, report) = run(doc, &lines);
    assert_eq!(d[2], t("needs-verdict", "a", "-", "-"), "a string is not less than 3: unevaluable, never pass");
    assert_eq!(d[3], t("deny", "a", "-", "self-approval"));
    assert_eq!(d[4], t("deny", "a", "-", "not-current"));
    assert_eq!(d[5], t("allow", "b", "-", "-"));
    assert_eq!(d[6], t("deny", "b", "-", "no-pending"));
    assert_eq!(d[8], t("needs-verdict", "b", "-", "-"), "prose only: unevaluable");
    assert_eq!(d[9], t("allow", "end", "-", "-"));
    assert_eq!(d[10], t("deny", "end", "-", "not-r1"));
    assert_eq!(text(&report, "/steps"), r#"{"a":{"assert":"pass","visits":1},"b":{"assert":"pass","visits":1}}"#);
    assert_eq!(text(&report, "/outcome"), "\"completed\"");
}

#[test]
fn every_refusal_is_collected_up_front() {
    let doc = r#"{"runbook_id":"x","version":"1.0.0","execution":"agent-autonomous",
        "capabilities":[{"tool":"rm","risk":"irreversible"}],
        "prerequisites":[{"kind":"tool_available","tool":"vault"}],
        "steps":[{"id":"a","tool":"rm","next":"end"}],"terminals":["end"]}"#;
    let claim = r#"{"type":"start","at":0,"run_id":"r","profile":"R0","allowlist":["ls"],"risk_ceiling":"mutating","coverage":["shell"],"agent":"a"}"#;
    let mut s = Session::new(doc.as_bytes());
    let line = s.handle_line(claim);
    assert_eq!(
        line,
        r#"{"decision":"halt","deviation":null,"reason":"refused","refusals":["autonomous-at-r0","capability-not-allowed","coverage-incomplete","prerequisite-unmet","profile-too-low","risk-above-ceiling"],"seq":0,"step":null}"#
    );
    assert!(s.handle_line(r#"{"type":"invoke","at":1,"tool":"rm","arguments":{}}"#).contains(r#""reason":"halted""#));
    let report = json::parse(&s.report()).node.unwrap();
    assert_eq!(text(&report, "/outcome"), "\"refused\"");
    let mut bad = Session::new(b"runbook_id: x\nversion: 1\n");
    assert!(bad.handle_line(&start("R2")).contains(r#""refusals":["invalid-document"]"#));
}

#[test]
fn checkpoints_are_observed_and_time_out() {
    let doc = r#"{"runbook_id":"snap","version":"1.0.0","checkpoints":[
        {"id":"cp-call","kind":"tool_call","required":true,"match":{"tool":"q"},"timeout_ms":100},
        {"id":"cp-out","kind":"condition","required":true,"condition":"final_output"}]}"#;
    // A failed call does not satisfy a checkpoint; a successful one does.
    let ok = vec![
        start("R1"),
        ev(r#"{"type":"invoke","at":10,"tool":"q","arguments":{}}"#),
        ev(r#"{"type":"result","at":20,"tool":"q","result":{},"is_error":true}"#),
        ev(r#"{"type":"invoke","at":30,"tool":"q","arguments":{}}"#),
        ev(r#"{"type":"result","at":100,"tool":"q","result":{}}"#),
        ev(r#"{"type":"final_output","at":150}"#),
        ev(r#"{"type":"end","at":160}"#),
    ];
    let (d, report) = run(doc, &ok);
    assert!(d.iter().all(|x| x.0 == "allow" || x.3 == "run-ended"), "{d:?}");
    assert_eq!(text(&report, "/checkpoints"), r#"{"cp-call":{"seq":4,"status":"satisfied"},"cp-out":{"seq":5,"status":"satisfied"}}"#);
    assert_eq!(text(&report, "/outcome"), "\"completed\"");
    // Past the deadline the checkpoint fails first, and the run with it.
    let late = vec![start("R1"), ev(r#"{"type":"tick","at":101}"#), ev(r#"{"type":"end","at":102}"#)];
    let (d, report) = run(doc, &late);
    assert_eq!(d[1], t("halt", "-", "-", "checkpoint-timeout"));
    assert_eq!(d[2], t("halt", "-", "-", "halted"));
    assert_eq!(text(&report, "/checkpoints/cp-call"), r#"{"seq":1,"status":"timed-out"}"#);
    assert_eq!(text(&report, "/outcome"), "\"failed\"");
    // Without the final output the run is incomplete.
    let (_, report) = run(doc, &[ok[..5].to_vec(), vec![ev(r#"{"type":"end","at":160}"#)]].concat());
    assert_eq!(text(&report, "/outcome"), "\"incomplete\"");
}

#[test]
fn results_pair_with_calls() {
    let doc = r#"{"runbook_id":"x","version":"1.0.0","capabilities":["q"]}"#;
    let lines = vec![
        start("R1"),
        ev(r#"{"type":"result","at":1,"tool":"q","result":{}}"#),
        ev(r#"{"type":"invoke","at":2,"tool":"q","arguments":{},"call_id":7}"#),
        ev(r#"{"type":"result","at":3,"tool":"q","result":{},"call_id":"8"}"#),
        ev(r#"{"type":"result","at":4,"tool":"q","result":{},"call_id":"7"}"#),
        ev(r#"{"type":"result","at":5,"tool":"q","result":{},"call_id":"7"}"#),
    ];
    let (d, _) = run(doc, &lines);
    assert_eq!(d[1], t("allow", "-", "-", "orphan-result"));
    assert_eq!(d[3], t("allow", "-", "-", "orphan-result"));
    assert_eq!(d[4], t("allow", "-", "-", "-"), "a numeric MCP id pairs with its string form");
    assert_eq!(d[5], t("allow", "-", "-", "orphan-result"));
}

#[test]
fn malformed_lines_halt_the_run() {
    for (bad, reason) in [
        ("not json", "malformed-event"),
        (r#"{"type":"warp","at":1}"#, "malformed-event"),
        (r#"{"type":"tick"}"#, "malformed-event"),
        (r#"{"type":"tick","at":1,"extra":true}"#, "malformed-event"),
        (r#"{"type":"tick","at":1.5}"#, "malformed-event"),
        (
            r#"{"type":"start","at":1,"run_id":"r","profile":"R1","allowlist":[],"risk_ceiling":"mutating","coverage":"complete","agent":"a"}"#,
            "malformed-event",
        ),
    ] {
        let (d, report) = run(ROTATE, &[start("R2"), bad.to_string(), ev(r#"{"type":"end","at":9}"#)]);
        assert_eq!(d[1].0, "halt", "{bad}");
        assert_eq!(d[1].3, reason, "{bad}");
        assert_eq!(d[2].3, "halted");
        assert_eq!(text(&report, "/outcome"), "\"failed\"");
    }
    // Time never runs backwards.
    let (d, _) = run(ROTATE, &[start("R2"), ev(r#"{"type":"tick","at":5}"#), ev(r#"{"type":"tick","at":4}"#)]);
    assert_eq!(d[2], t("halt", "check", "-", "malformed-event"));
    // Before admission, anything but `start` is refused.
    let (d, report) = run(ROTATE, &[ev(r#"{"type":"tick","at":5}"#)]);
    assert_eq!(d[0], t("halt", "-", "-", "malformed-event"));
    assert_eq!(text(&report, "/outcome"), "\"refused\"");
    // An event over 1 MiB is a limit.
    let big = format!(r#"{{"type":"invoke","at":1,"tool":"q","arguments":{{"x":"{}"}}}}"#, "a".repeat(1 << 20));
    let (d, _) = run(ROTATE, &[start("R2"), big]);
    assert_eq!(d[1].3, "limit");
}

#[test]
fn report_is_stable_bytes() {
    let lines = vec![start("R2"), ev(r#"{"type":"end","at":1}"#)];
    let mut a = Session::new(ROTATE.as_bytes());
    let mut b = Session::new(ROTATE.as_bytes());
    for l in &lines {
        assert_eq!(a.handle_line(l), b.handle_line(l));
    }
    assert_eq!(a.report(), b.report());
    assert_eq!(
        a.report(),
        format!(
            r#"{{"approvals":[],"budgets":{{"rotate->rotate":{{"max":2,"used":0}}}},"checkpoints":{{}},"coverage":"complete","deviations":[{{"class":"terminal-not-reached","seq":1,"step":"check","tool":null}}],"document":{{"runbook_id":"rotate-db-credentials","sha256":"{}","version":"1.0.0"}},"envelope_sha256":"{}","events":2,"outcome":"incomplete","profile":"R2","refusals":[],"run_id":"r-1","schema":"runbook-run-report/v1","steps":{{"check":{{"assert":null,"visits":1}},"confirm":{{"assert":null,"visits":0}},"rotate":{{"assert":null,"visits":0}}}},"terminal":null}}"#,
            runbook_policy::doc::sha256_hex(ROTATE.as_bytes()),
            runbook_policy::doc::sha256_hex(runbook_policy::envelope(ROTATE.as_bytes()).unwrap().as_bytes())
        )
    );
}

fn when_doc(pattern: &str) -> String {
    format!(
        "runbook_id: w\nversion: 1.0.0\ncapabilities:\n  - {{name: get, tool: Bash, risk: read-only, when: {{path: /command, op: matches, value: '{pattern}'}}}}\nsteps:\n  - {{id: a, tool: get, next: done}}\nterminals: [done]\n"
    )
}

#[test]
fn when_patterns_match_the_whole_value() {
    // Patterns that pass the anchoring lint, and that a search would still let widen.
    for pattern in ["^(?m)kubectl get pods$", "^kubectl get pods$|^kubectl get nodes$"] {
        let doc = when_doc(pattern);
        assert!(runbook_policy::lint(doc.as_bytes()).ok(), "{pattern}");
        for (command, expect) in [
            ("kubectl get pods", "allow"),
            ("kubectl get pods; sudo rm -rf /", "deny"),
            ("kubectl get pods\\nrm -rf /", "deny"),
            ("rm -rf /\\nkubectl get pods", "deny"),
        ] {
            let ev = format!(r#"{{"type":"invoke","at":1,"tool":"Bash","arguments":{{"command":"{command}"}}}}"#);
            let (d, _) = run(&doc, &[start("R1"), ev]);
            assert_eq!(d[1].0, expect, "{pattern} / {command}");
        }
    }
}

#[test]
fn every_branch_of_a_when_pattern_must_be_anchored() {
    for (pattern, ok) in [
        ("^kubectl get pods$", true),
        ("^(get|describe) pods$", true),
        ("^a$|^b$", true),
        ("^[|]$", true),
        ("^kubectl get pods$|rm.*$", false),
        ("^a$|b", false),
        ("kubectl", false),
        ("^kubectl get pods\\$", false),
        ("^kubectl get pods\\\\$", true),
        ("(?m)^a$", false),
    ] {
        let r = runbook_policy::lint(when_doc(pattern).as_bytes());
        assert_eq!(!r.findings.iter().any(|f| f.code == "unanchored-when"), ok, "{pattern}: {:?}", r.findings);
    }
}

#[test]
fn r0_never_runs_a_gated_capability_outside_its_step() {
    let doc = "runbook_id: r0-gate\nversion: 1.0.0\ncapabilities: [{name: read, tool: db.read, risk: read-only}, {name: purge, tool: cache.purge}]\nsteps: [{id: look, tool: read}, {id: purge, tool: purge, requires_approval: true, next: done}]\nterminals: [done]\n";
    let lines = vec![
        start("R0"),
        ev(r#"{"type":"invoke","at":1,"tool":"cache.purge","arguments":{}}"#),
        ev(r#"{"type":"invoke","at":2,"tool":"rm","arguments":{}}"#),
        ev(r#"{"type":"advance","at":3,"to":"purge"}"#),
        ev(r#"{"type":"invoke","at":4,"tool":"cache.purge","arguments":{}}"#),
        ev(r#"{"type":"invoke","at":5,"tool":"db.read","arguments":{}}"#),
    ];
    let (d, _) = run(doc, &lines);
    assert_eq!(d[1], t("deny", "look", "out-of-scope-tool", "-"));
    assert_eq!(d[2], t("allow", "look", "undeclared-tool", "-"), "R0 records the rest and allows it");
    assert_eq!(d[4], t("needs-approval", "purge", "-", "awaiting-approval"));
    assert_eq!(d[5], t("allow", "purge", "out-of-scope-tool", "-"));
}

/// `prose` gives the runbook's title and description and each step's body and expect, only the keys
/// present, as canonical JSON, the same for the YAML and the JSON spelling of a document.
#[test]
fn prose_is_the_documents_text_and_nothing_else() {
    let yaml = b"runbook_id: p\nversion: 1.0.0\ntitle: T\ncapabilities:\n  - {name: c, tool: t, risk: read-only}\nsteps:\n  - {id: a, tool: c, body: Do a., expect: A done., next: b}\n  - {id: b, tool: c, next: end}\nterminals: [end]\n";
    let json = br#"{"runbook_id":"p","version":"1.0.0","title":"T","capabilities":[{"name":"c","tool":"t","risk":"read-only"}],"steps":[{"id":"a","tool":"c","body":"Do a.","expect":"A done.","next":"b"},{"id":"b","tool":"c","next":"end"}],"terminals":["end"]}"#;
    let want = r#"{"runbook":{"title":"T"},"steps":{"a":{"body":"Do a.","expect":"A done."},"b":{}}}"#;
    assert_eq!(runbook_policy::prose(yaml).as_deref(), Some(want));
    assert_eq!(runbook_policy::prose(json).as_deref(), Some(want));
    assert_eq!(runbook_policy::prose(b"steps: [").as_deref(), None, "a document that does not parse has none");
    // A duplicated step id keeps its first step's prose, so the object's keys stay unique.
    let dup = b"title: T\nsteps:\n  - {id: a, body: first}\n  - {id: a, body: second}\n";
    assert_eq!(runbook_policy::prose(dup).as_deref(), Some(r#"{"runbook":{"title":"T"},"steps":{"a":{"body":"first"}}}"#));
}

/// The adapters' rules in the module (docs/spec/adapters.md#adapter-duties): which tools a client sees, how
/// a run ends when its client leaves, and the exit code.
#[test]
fn what_a_client_sees_and_how_a_run_ends_when_it_leaves() {
    let doc = r1_rotate();
    let offered: Vec<String> = ["secrets.rotate", "db.read", "Bash", "other.tool"].iter().map(|s| s.to_string()).collect();
    let mut s = Session::new(doc.as_bytes());
    assert!(s.visible_tools(&offered, true).is_empty(), "nothing before admission");
    s.handle_line(&start("R1"));
    // The step's tools only, in the servers' order; the whole allowlist when the host lists it.
    assert_eq!(s.visible_tools(&offered, false), ["db.read", "Bash"]);
    assert_eq!(s.visible_tools(&offered, true), ["secrets.rotate", "db.read", "Bash"]);
    s.handle_line(r#"{"type":"advance","at":1,"to":"rotate"}"#);
    assert_eq!(s.visible_tools(&offered, false), ["secrets.rotate"]);
    // R0 shows every declared tool whatever the step (a runbook that is not agent-autonomous: R0 admits it).
    let mut r0 = Session::new(doc.replace("execution: agent-autonomous\n", "").as_bytes());
    r0.handle_line(&start("R0"));
    assert_eq!(r0.visible_tools(&offered, false), ["secrets.rotate", "db.read", "Bash"]);

    // Leaving: calls in flight, a last call that waited in vain, or a clean shutdown.
    use runbook_policy::event::EndReason;
    let l = s.leaving(2, true);
    assert_eq!((l.reason, l.final_output), (EndReason::ClientClosed, false));
    let l = s.leaving(0, true);
    assert_eq!((l.reason, l.final_output), (EndReason::ApprovalTimeout, true));
    let l = s.leaving(0, false);
    assert_eq!((l.reason, l.final_output), (EndReason::Normal, true));

    // The exit code: 1 until completed, 0 when completed, 3 for a shadow run whatever the outcome.
    assert_eq!(s.exit_code(false), 1);
    s.handle_line(r#"{"type":"invoke","at":2,"tool":"secrets.rotate","arguments":{}}"#);
    s.handle_line(r#"{"type":"approval","at":3,"step":"rotate","approver":"alice","granted":true}"#);
    s.handle_line(r#"{"type":"advance","at":4,"to":"confirm"}"#);
    s.handle_line(r#"{"type":"advance","at":5,"to":"done"}"#);
    s.handle_line(r#"{"type":"end","at":6}"#);
    assert_eq!(s.outcome(), Some(runbook_policy::Outcome::Completed));
    assert_eq!((s.exit_code(false), s.exit_code(true)), (0, 3));
    assert!(s.visible_tools(&offered, true).is_empty(), "nothing once the run is over");
}

/// The instance's memo of analyses: the same bytes get the analysis already made (the same one, not a copy),
/// other bytes (one byte more) another, equal to a fresh analysis; it keeps the last eight documents, and
/// none over 256 KiB.
#[test]
fn an_analysis_is_kept_for_the_same_bytes_only() {
    use runbook_policy::doc::{analysis_of, analyze};
    use std::sync::Arc;
    let a = analysis_of(ROTATE.as_bytes());
    assert!(Arc::ptr_eq(&a, &analysis_of(ROTATE.as_bytes())), "the same bytes again are not analysed again");
    let edited = format!("{ROTATE} ");
    let b = analysis_of(edited.as_bytes());
    assert!(!Arc::ptr_eq(&a, &b), "a document is its exact bytes");
    assert_eq!(format!("{:?}", b), format!("{:?}", analyze(edited.as_bytes())), "a kept analysis is a fresh one");
    for i in 0..7 {
        analysis_of(format!("{ROTATE}# {i}\n").as_bytes());
    }
    assert!(Arc::ptr_eq(&b, &analysis_of(edited.as_bytes())), "seven more leave the last used");
    assert!(!Arc::ptr_eq(&a, &analysis_of(ROTATE.as_bytes())), "and push out the oldest");
    let big = format!("{ROTATE}#{}\n", "x".repeat(256 << 10));
    assert!(!Arc::ptr_eq(&analysis_of(big.as_bytes()), &analysis_of(big.as_bytes())), "a document over 256 KiB is not kept");
}
