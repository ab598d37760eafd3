//! Property tests over generated documents and event streams: the envelope's two invariants
//! (docs/spec/envelope.md#invariants) and the determinism of every artifact.

use proptest::prelude::*;
use runbook_policy::json;
use runbook_policy::testgen::{self, Rng};
use runbook_policy::value::{Node, Value};
use runbook_policy::{doc, Session};

fn strings(n: &Node) -> Vec<String> {
    match &n.value {
        Value::Arr(items) => items.iter().map(|i| i.as_str().unwrap().to_string()).collect(),
        _ => panic!("not a list"),
    }
}

fn members(n: &Node) -> Vec<(String, Node)> {
    match &n.value {
        Value::Obj(m) => m.iter().map(|m| (m.key.clone(), m.value.clone())).collect(),
        _ => panic!("not an object"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    /// Invariant 1: the envelope never grants a tool that the document does not declare.
    #[test]
    fn envelope_grants_only_declared_tools(seed in any::<u64>()) {
        let (text, _) = testgen::document(&mut Rng::new(seed), 10);
        let a = doc::analyze(text.as_bytes());
        let Ok(env) = runbook_policy::envelope(text.as_bytes()) else { return Ok(()) };
        let env = json::parse(&env).node.unwrap();
        let declared: Vec<String> = a.doc.capabilities.iter().map(|c| c.name.clone()).collect();
        let mut sorted = declared.clone();
        sorted.sort();
        prop_assert_eq!(strings(env.get("allowlist").unwrap()), sorted);
        let undeclared: Vec<(String, String)> = match &env.get("undeclared").unwrap().value {
            Value::Arr(items) => items.iter().map(|i| (i.get("step").unwrap().as_str().unwrap().to_string(), i.get("tool").unwrap().as_str().unwrap().to_string())).collect(),
            _ => unreachable!(),
        };
        for (id, step) in members(env.get("steps").unwrap()) {
            for tool in strings(step.get("tools").unwrap()) {
                prop_assert!(declared.contains(&tool), "step {} grants undeclared {}", id, tool);
                prop_assert!(!undeclared.contains(&(id.clone(), tool.clone())));
            }
        }
        // Every tool a step names that no capability declares is recorded.
        for s in &a.doc.steps {
            for t in &s.tools {
                if !declared.contains(t) {
                    prop_assert!(undeclared.contains(&(s.id.clone(), t.clone())), "{} not recorded", t);
                }
            }
        }
    }

    /// Invariant 2: a gated step's tools are never in scope before its approval, and never after control
    /// leaves that step. An independent model of "the gate of the current visit" watches the decisions.
    #[test]
    fn gated_tools_need_an_approval_of_this_visit(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (text, shape) = testgen::document(&mut rng, 0);
        let a = doc::analyze(text.as_bytes());
        if a.has_errors() || a.doc.steps.is_empty() {
            return Ok(());
        }
        let lines = testgen::events(&mut rng, &shape);
        let mut s = Session::new(text.as_bytes());
        let mut step: Option<String> = None;
        let mut gate_open = false;
        let mut call_grants: Vec<String> = Vec::new();
        for line in &lines {
            let d = json::parse(&s.handle_line(line)).node.unwrap();
            let ev = json::parse(line).node;
            let ty = ev.as_ref().and_then(|e| e.get("type")).and_then(|t| t.as_str()).unwrap_or("").to_string();
            let decision = d.get("decision").unwrap().as_str().unwrap().to_string();
            let reason = d.get("reason").unwrap().as_str().map(str::to_string);
            let deviation = d.get("deviation").unwrap().as_str().map(str::to_string);
            let now = d.get("step").unwrap().as_str().map(str::to_string);
            if ty == "invoke" && decision == "allow" && deviation.is_none() {
                if let Some(i) = step.as_deref().and_then(|st| a.step_index(st)) {
                    if a.step_gated[i] {
                        let e = ev.as_ref().unwrap();
                        let hash = runbook_policy::event::call_sha256(e.get("tool").unwrap().as_str().unwrap(), e.get("arguments").unwrap());
                        let bound = call_grants.iter().position(|h| *h == hash);
                        prop_assert!(gate_open || bound.is_some(), "gated step {:?} allowed a call without an approval of this visit: {}", step, line);
                        if let (false, Some(k)) = (gate_open, bound) {
                            call_grants.remove(k);
                        }
                    }
                }
            }
            if ty == "approval" && decision == "allow" {
                let e = ev.as_ref().unwrap();
                let granted = matches!(e.get("granted").unwrap().value, Value::Bool(true));
                match (granted, e.get("call_sha256").and_then(|h| h.as_str())) {
                    (true, Some(h)) => call_grants.push(h.to_string()),
                    (true, None) => gate_open = true,
                    (false, _) => { gate_open = false; call_grants.clear(); }
                }
            }
            // A new visit: the step changed, a failure was routed, or an advance was taken.
            let routed = decision == "allow" && matches!(reason.as_deref(), Some("assert-failed") | Some("budget-exhausted"));
            if now != step || routed || (ty == "advance" && decision == "allow") || ty == "start" {
                gate_open = false;
                call_grants.clear();
            }
            step = now;
        }
    }

    /// Same document and events, same bytes: decisions, report, envelope and lint.
    #[test]
    fn everything_is_deterministic(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (text, shape) = testgen::document(&mut rng, 20);
        let lines = testgen::events(&mut rng, &shape);
        let mut a = Session::new(text.as_bytes());
        let mut b = Session::new(text.as_bytes());
        for l in &lines {
            prop_assert_eq!(a.handle_line(l), b.handle_line(l));
        }
        prop_assert_eq!(a.report(), b.report());
        prop_assert_eq!(runbook_policy::envelope(text.as_bytes()).ok(), runbook_policy::envelope(text.as_bytes()).ok());
    }

    /// Whatever the bytes, the core answers with findings, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let r = runbook_policy::lint(&bytes);
        prop_assert_eq!(r.sha256.len(), 64);
        let mut s = Session::new(&bytes);
        let _ = s.handle_line(&String::from_utf8_lossy(&bytes));
        let _ = s.report();
    }

    /// Mutated valid documents (a byte flipped, a line dropped) still give findings, never a panic.
    #[test]
    fn mutated_documents_never_panic(seed in any::<u64>(), at in any::<usize>(), byte in any::<u8>()) {
        let (text, _) = testgen::document(&mut Rng::new(seed), 0);
        let mut bytes = text.into_bytes();
        let i = at % bytes.len();
        bytes[i] = byte;
        let _ = runbook_policy::lint(&bytes);
        let _ = runbook_policy::envelope(&bytes);
    }
}

#[test]
fn generated_documents_are_mostly_valid_and_cover_both_dialects() {
    let mut valid = 0;
    let mut yaml = 0;
    for seed in 0..500 {
        let (text, _) = testgen::document(&mut Rng::new(seed), 0);
        if runbook_policy::lint(text.as_bytes()).ok() {
            valid += 1;
        }
        if !text.starts_with('{') {
            yaml += 1;
        }
    }
    assert!(valid > 350, "only {valid} of 500 generated documents lint clean");
    assert!(yaml > 150 && yaml < 350, "{yaml} of 500 are YAML");
}
