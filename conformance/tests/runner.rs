//! The runner itself: honest implementations pass, and an adapter that only reorders JSON keys (same
//! data, other bytes: decision lines, reports, snapshots) makes the suite fail with the first differing
//! byte named.

use std::path::Path;
use std::process::Command;

const CASE: &str = r#"{"area": "self-test", "description": "runner self-test", "cases": [
  {"id": "one-run", "description": "a short run", "clause": "docs/spec/run.md#decision-lines",
   "input": {"op": "replay",
     "document": {"text": "runbook_id: t\nversion: 1.0.0\ncapabilities: [q]\nsteps:\n  - {id: a, tool: q, next: done}\nterminals: [done]\n"},
     "events": ["{\"type\":\"start\",\"at\":0,\"run_id\":\"r\",\"profile\":\"R1\",\"allowlist\":[\"*\"],\"risk_ceiling\":\"irreversible\",\"coverage\":\"complete\",\"agent\":\"agent\"}",
                "{\"type\":\"invoke\",\"at\":1,\"tool\":\"x\",\"arguments\":{}}",
                "{\"type\":\"end\",\"at\":2}"]},
   "expected": {"summary": [["allow", null, null], ["deny", "undeclared-tool", null], ["halt", null, "run-ended"]], "outcome": "incomplete"}},
  {"id": "split-run", "description": "the same run split by a snapshot after the undeclared call", "clause": "docs/spec/run.md#decision-lines; wit/policy.wit snapshot",
   "input": {"op": "replay",
     "document": {"text": "runbook_id: t\nversion: 1.0.0\ncapabilities: [q]\nsteps:\n  - {id: a, tool: q, next: done}\nterminals: [done]\n"},
     "events": ["{\"type\":\"start\",\"at\":0,\"run_id\":\"r\",\"profile\":\"R1\",\"allowlist\":[\"*\"],\"risk_ceiling\":\"irreversible\",\"coverage\":\"complete\",\"agent\":\"agent\"}",
                "{\"type\":\"invoke\",\"at\":1,\"tool\":\"x\",\"arguments\":{}}",
                "{\"type\":\"end\",\"at\":2}"],
     "snapshot_after": 2},
   "expected": {"summary": [["allow", null, null], ["deny", "undeclared-tool", null], ["halt", null, "run-ended"]], "outcome": "incomplete",
                "snapshot_fields": {"/phase": "running", "/deviations/0/tool": "x"}}},
  {"id": "an-envelope", "description": "an envelope", "clause": "docs/spec/envelope.md",
   "input": {"op": "envelope", "document": {"text": "runbook_id: t\nversion: 1.0.0\ncapabilities: [q]\n"}},
   "expected": {"has_envelope": true, "fields": {"/allowlist": ["q"]}}}
]}"#;

fn setup(dir: &Path, implementations: &[(&str, &[&str])]) {
    std::fs::create_dir_all(dir.join("vectors/self-test")).unwrap();
    std::fs::write(dir.join("vectors/self-test/case.json"), CASE).unwrap();
    let adapter = env!("CARGO_BIN_EXE_runbook-conformance-adapter");
    let list: Vec<String> = implementations
        .iter()
        .map(|(name, args)| {
            let argv: Vec<String> = std::iter::once(adapter.to_string()).chain(args.iter().map(|a| a.to_string())).map(|a| format!("{a:?}")).collect();
            format!(r#"{{"name": "{name}", "command": [{}]}}"#, argv.join(", "))
        })
        .collect();
    std::fs::write(dir.join("implementations.json"), format!(r#"{{"implementations": [{}]}}"#, list.join(", "))).unwrap();
}

fn runner(dir: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_runbook-conformance"))
        .current_dir(dir)
        .args(["--vectors", "vectors", "--implementations", "implementations.json"])
        .args(extra)
        .env("RUNBOOK_HOST_CACHE", dir.join("cache"))
        .output()
        .unwrap()
}

#[test]
fn honest_implementations_pass_and_a_key_reordering_adapter_fails() {
    let dir = std::env::temp_dir().join(format!("runbook-runner-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    setup(&dir, &[("wasmtime", &["--impl", "wasmtime"]), ("native", &["--impl", "native"])]);
    // Bless the bytes from the hand-written expectations, then every implementation must pass.
    let out = runner(&dir, &["--bless"]);
    assert!(out.status.success(), "bless: {}", String::from_utf8_lossy(&out.stderr));
    let blessed = std::fs::read_to_string(dir.join("vectors/self-test/case.json")).unwrap();
    assert!(blessed.contains("report_sha256") && blessed.contains("envelope_sha256") && blessed.contains("snapshot_sha256"));
    let out = runner(&dir, &["--generated", "20"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // 3 vectors and 20 generated cases (lint, envelope, replay, and the replay split by a snapshot), on 2.
    assert!(stdout.lines().last().unwrap() == "166 passed, 0 failed", "{stdout}");

    setup(&dir, &[("native", &["--impl", "native"]), ("broken", &["--impl", "native", "--break-reorder-keys"])]);
    std::fs::write(dir.join("vectors/self-test/case.json"), &blessed).unwrap();
    let out = runner(&dir, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.lines().last().unwrap().ends_with(" failed") && !stdout.ends_with(" 0 failed\n"), "{stdout}");
    assert!(stderr.contains("FAIL self-test/one-run [broken]"), "{stderr}");
    assert!(stderr.contains("first differing byte at offset"), "{stderr}");
    // The snapshot is compared byte for byte as well (every replay vector also runs split half way).
    assert!(stderr.contains("FAIL self-test/split-run [broken]"), "{stderr}");
    assert!(stderr.contains("snapshot: first differing byte at offset"), "{stderr}");
    // The honest implementation is also reported as differing from the broken one: any difference fails.
    assert!(stderr.contains("FAIL self-test/one-run [native]"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hand_written_expectation_that_does_not_hold_is_never_blessed() {
    let dir = std::env::temp_dir().join(format!("runbook-runner-bless-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    setup(&dir, &[("native", &["--impl", "native"])]);
    let wrong = CASE.replace(r#"["deny", "undeclared-tool", null]"#, r#"["allow", null, null]"#);
    std::fs::write(dir.join("vectors/self-test/case.json"), &wrong).unwrap();
    let out = runner(&dir, &["--bless"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NOT BLESSED self-test/one-run"));
    let after = std::fs::read_to_string(dir.join("vectors/self-test/case.json")).unwrap();
    assert!(!after.contains("\"decisions\""), "a refused case must stay without bytes");
    // Likewise a hand-written snapshot field that does not hold.
    let wrong = CASE.replace(r#""/phase": "running""#, r#""/phase": "over""#);
    std::fs::write(dir.join("vectors/self-test/case.json"), &wrong).unwrap();
    let out = runner(&dir, &["--bless"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NOT BLESSED self-test/split-run"));
    let after: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("vectors/self-test/case.json")).unwrap()).unwrap();
    assert!(after["cases"][1]["expected"].get("snapshot").is_none(), "a refused case must stay without bytes");
    let _ = std::fs::remove_dir_all(&dir);
}
