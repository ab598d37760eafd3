//! The component (through wasmtime) and the same core linked natively must give identical bytes: lint
//! findings, envelopes, every decision line and every report, for every example and for generated
//! documents and event streams.

use crate::common::{module_cache, repo};
use runbook_host::{Policy, Severity};
use runbook_policy::testgen::{self, Rng};

/// Generated cases checked per test run (at least 1,000).
const GENERATED: u64 = 1_000;

fn policy() -> Policy {
    Policy::load_with_cache(Some(module_cache())).expect("the component loads")
}

fn findings_native(doc: &[u8]) -> Vec<String> {
    runbook_policy::lint(doc)
        .findings
        .iter()
        .map(|f| format!("{}|{}|{}|{}|{}|{}", f.code, f.severity.as_str(), f.pos.line, f.pos.column, f.pointer, f.message))
        .collect()
}

fn findings_component(p: &Policy, doc: &[u8]) -> Vec<String> {
    p.lint(doc)
        .unwrap()
        .findings
        .iter()
        .map(|f| {
            let sev = if f.severity == Severity::Error { "error" } else { "warning" };
            format!("{}|{sev}|{}|{}|{}|{}", f.code, f.line, f.column, f.pointer, f.message)
        })
        .collect()
}

/// Runs one case through both and returns how many byte strings were compared.
fn compare(p: &Policy, name: &str, doc: &[u8], events: &[String]) -> usize {
    assert_eq!(findings_native(doc), findings_component(p, doc), "{name}: lint differs");
    let native_env = runbook_policy::envelope(doc).ok();
    let comp_env = p.envelope(doc).unwrap().ok();
    assert_eq!(native_env, comp_env, "{name}: envelope differs");
    assert_eq!(runbook_policy::prose(doc), p.prose(doc).unwrap(), "{name}: prose differs");
    let mut native = runbook_policy::Session::new(doc);
    let mut comp = p.session(doc).unwrap();
    for (i, line) in events.iter().enumerate() {
        let a = native.handle_line(line);
        let b = comp.handle_line(line);
        assert_eq!(a, b, "{name}: decision {i} differs for event {line}");
    }
    assert_eq!(native.report(), comp.report().unwrap(), "{name}: report differs");
    3 + events.len()
}

/// (name, document bytes, event lines) for every example document: no events, then each of its streams.
fn example_cases() -> Vec<(String, Vec<u8>, Vec<String>)> {
    let root = repo().join("examples");
    let mut cases = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let Some(doc) = ["runbook.yaml", "runbook.json"].iter().map(|f| dir.join(f)).find(|f| f.is_file()) else { continue };
        let bytes = std::fs::read(&doc).unwrap();
        let mut streams = vec![Vec::new()];
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "ndjson") {
                let text = std::fs::read_to_string(&f).unwrap();
                streams.push(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect());
            }
        }
        for s in streams {
            cases.push((doc.display().to_string(), bytes.clone(), s));
        }
    }
    cases
}

#[test]
fn examples_agree() {
    let p = policy();
    let mut cases = 0;
    for (name, bytes, events) in example_cases() {
        compare(&p, &name, &bytes, &events);
        cases += 1;
    }
    assert!(cases >= 5, "expected the bundled examples, found {cases} cases");
}

/// Takes snapshots in the component at a few split points: each must be the native core's bytes, and a
/// session restored from it in the component must go on exactly as the native run that was never
/// interrupted. Returns the number of restores.
fn compare_snapshots(p: &Policy, name: &str, doc: &[u8], events: &[String]) -> usize {
    let mut native = runbook_policy::Session::new(doc);
    let mut snapshots = vec![native.snapshot()];
    let decisions: Vec<String> = events
        .iter()
        .map(|e| {
            let d = native.handle_line(e);
            snapshots.push(native.snapshot());
            d
        })
        .collect();
    let report = native.report();
    let n = events.len();
    let mut points = vec![0, 1, n / 3, n / 2, n.saturating_sub(1), n];
    points.retain(|k| *k <= n);
    points.dedup();
    let mut comp = p.session(doc).unwrap();
    let mut restores = 0;
    for k in 0..=n {
        if points.contains(&k) {
            let snap = comp.snapshot().unwrap();
            assert_eq!(snap, snapshots[k], "{name}: the snapshot after {k} events differs");
            let mut restored =
                p.restore(doc, &snap).unwrap().unwrap_or_else(|e| panic!("{name}: the component refused its own snapshot after {k} events: {e}"));
            for (i, e) in events.iter().enumerate().skip(k) {
                assert_eq!(restored.handle_line(e), decisions[i], "{name}: restored after {k} events, decision {i} differs for {e}");
            }
            assert_eq!(restored.report().unwrap(), report, "{name}: restored after {k} events, the report differs");
            assert_eq!(restored.snapshot().unwrap(), snapshots[n], "{name}: restored after {k} events, the final snapshot differs");
            restores += 1;
        }
        if k < n {
            assert_eq!(comp.handle_line(&events[k]), decisions[k], "{name}: decision {k} differs");
        }
    }
    restores
}

#[test]
fn snapshots_agree_and_restored_sessions_continue() {
    let p = policy();
    let mut restores = 0;
    let cases = example_cases();
    for (name, bytes, events) in &cases {
        restores += compare_snapshots(&p, name, bytes, events);
    }
    for seed in 0..200 {
        let mut rng = Rng::new(seed);
        let (doc, shape) = testgen::document(&mut rng, 15);
        let events = testgen::events(&mut rng, &shape);
        restores += compare_snapshots(&p, &format!("seed {seed}"), doc.as_bytes(), &events);
    }
    assert!(restores > 800, "only {restores} restores");
    // The component refuses what the native core refuses, with the same message.
    let (name, doc, events) = cases.iter().find(|(_, _, e)| e.len() > 3).unwrap();
    let (_, other, _) = cases.iter().find(|(_, d, _)| d != doc).unwrap();
    let mut s = p.session(doc).unwrap();
    for e in &events[..3] {
        s.handle_line(e);
    }
    let snap = s.snapshot().unwrap();
    for (d, bad) in [(other, snap.clone()), (doc, snap.replace("\"events\":3", "\"events\":9007199254740992")), (doc, snap[1..].to_string())] {
        let refusal = p.restore(d, &bad).unwrap().err().unwrap_or_else(|| panic!("{name}: the component accepted a bad snapshot: {bad}"));
        assert_eq!(Err(refusal), runbook_policy::Session::restore(d, &bad).map(|_| ()), "{name}");
    }
}

#[test]
fn generated_documents_and_streams_agree() {
    let p = policy();
    let mut compared = 0;
    let mut decisions = std::collections::BTreeSet::new();
    for seed in 0..GENERATED {
        let mut rng = Rng::new(seed);
        let (doc, shape) = testgen::document(&mut rng, 15);
        let events = testgen::events(&mut rng, &shape);
        compared += compare(&p, &format!("seed {seed}"), doc.as_bytes(), &events);
        let mut s = runbook_policy::Session::new(doc.as_bytes());
        for e in &events {
            let line = s.handle_line(e);
            let kind = line.split('"').nth(3).unwrap_or("").to_string();
            decisions.insert(kind);
        }
    }
    // The generator must reach every decision kind, or agreement proves little.
    for kind in ["allow", "deny", "needs-approval", "needs-verdict", "halt"] {
        assert!(decisions.contains(kind), "no generated case produced `{kind}`");
    }
    assert!(compared > 20_000, "only {compared} byte strings compared");
}

#[test]
fn typed_and_wire_paths_agree() {
    use runbook_host::{Coverage, DecisionKind, Event, EventKind, Invoke, Profile, Risk, StartClaim, ToolResult};
    let p = policy();
    let doc = std::fs::read(repo().join("examples/executive-snapshot/runbook.json")).unwrap();
    let mut typed = p.session(&doc).unwrap();
    let mut wire = p.session(&doc).unwrap();
    let events = [
        Event {
            at: 0,
            kind: EventKind::Start(StartClaim {
                run_id: "r-1".into(),
                profile: Profile::R2,
                allowlist: vec!["*".into()],
                risk_ceiling: Risk::Irreversible,
                coverage: Coverage::Complete,
                agent: "agent-1".into(),
                available: None,
            }),
        },
        Event {
            at: 5,
            kind: EventKind::Invoke(Invoke {
                tool: "quickbooks_profit_and_loss".into(),
                arguments: r#"{"period":"Q3"}"#.into(),
                call_id: Some("1".into()),
                step: None,
                guard: false,
            }),
        },
        Event {
            at: 6,
            kind: EventKind::Result(ToolResult { tool: "quickbooks_profit_and_loss".into(), result: "{}".into(), is_error: false, call_id: Some("1".into()) }),
        },
        Event { at: 7, kind: EventKind::Invoke(Invoke { tool: "rm".into(), arguments: "{}".into(), call_id: None, step: None, guard: false }) },
        Event { at: 8, kind: EventKind::Invoke(Invoke { tool: "rm".into(), arguments: "{not json".into(), call_id: None, step: None, guard: false }) },
    ];
    for e in &events {
        let d = typed.handle(e);
        let expected = match p.encode_event(e).unwrap() {
            Ok(l) => wire.handle_line(&l),
            Err(_) => wire.handle_line("{malformed"),
        };
        let v: serde_json::Value = serde_json::from_str(&expected).unwrap();
        assert_eq!(v["seq"], d.seq);
        assert_eq!(v["step"].as_str(), d.step.as_deref());
        assert_eq!(v["deviation"].is_null(), d.deviation.is_none(), "{expected}");
        assert_eq!(v["reason"].is_null(), d.reason.is_none(), "{expected}");
        let kind = match d.kind {
            DecisionKind::Allow => "allow",
            DecisionKind::Deny => "deny",
            DecisionKind::NeedsApproval => "needs-approval",
            DecisionKind::NeedsVerdict => "needs-verdict",
            DecisionKind::Halt => "halt",
        };
        assert_eq!(v["decision"], kind);
    }
    assert_eq!(typed.report().unwrap(), wire.report().unwrap());
}

/// A restored session is bounded like any other: after a trap it has no snapshot, and the host numbers the
/// lines it writes itself from the restored run's count.
#[test]
fn restored_sessions_trap_like_any_other() {
    use runbook_host::{HostError, Limits};
    // Enough to restore a small session, not enough to decide on a large event.
    let p = Policy::load_with(Some(module_cache()), Limits { fuel_per_call: 2_000_000, ..Limits::default() }).unwrap();
    let doc = std::fs::read(repo().join("examples/executive-snapshot/runbook.json")).unwrap();
    let mut s = p.session(&doc).unwrap();
    s.handle_line(
        r#"{"type":"start","at":0,"run_id":"r-1","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}"#,
    );
    s.handle_line(r#"{"type":"tick","at":1}"#);
    let snap = s.snapshot().unwrap();
    let mut r = p.restore(&doc, &snap).unwrap().unwrap();
    let big = format!(r#"{{"type":"invoke","at":2,"tool":"quickbooks_profit_and_loss","arguments":{{"x":"{}"}}}}"#, "a".repeat(500_000));
    assert_eq!(r.handle_line(&big), r#"{"decision":"halt","deviation":null,"reason":"host-trap","refusals":[],"seq":2,"step":null}"#);
    assert!(matches!(r.snapshot(), Err(HostError::Trap(_))), "a trapped session has no snapshot");
    assert_eq!(r.handle_line(r#"{"type":"end","at":3}"#), r#"{"decision":"halt","deviation":null,"reason":"halted","refusals":[],"seq":3,"step":null}"#);
    // The session it was restored from is untouched.
    assert!(s.snapshot().is_ok());
}
