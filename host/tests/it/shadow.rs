//! Shadow mode (`run --mode shadow`, issue "Past one machine"): the module decides and every call is
//! recorded, nothing is blocked, and no one can mistake the bundle for an enforced run: run.json says
//! `"mode": "shadow"`, `shadow.ndjson` (pinned by the receipt) lists every call that ran against a
//! decision, `verify` says SHADOW first, and the proxy exits 3, never 0. The same calls in enforce mode are
//! blocked, as a control.

use crate::common;
use crate::common::mcp::*;
use serde_json::{json, Value};

fn verify_json(run_dir: &std::path::Path) -> (bool, Value, String) {
    let o = common::cmd(BIN).args(["verify", "--format", "json"]).arg(run_dir).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    (o.status.success(), serde_json::from_str(&text).unwrap_or(Value::Null), text)
}

#[test]
fn a_shadow_run_blocks_nothing_records_everything_and_never_counts_as_enforced() {
    let w = work("shadow");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--mode", "shadow"], &[everything()]);
    c.init();
    // Every server tool is listed, whatever the step.
    let listed = c.list();
    assert!(listed.contains(&"get-env".to_string()) && listed.contains(&"get-sum".to_string()), "{listed:?}");
    assert_eq!(text(&c.call("echo", json!({"message": "hi"}))), "Echo: hi");
    // Undeclared: it runs (the real server answers), and is recorded as denied.
    let env = c.call("get-env", json!({}));
    assert_eq!(env["is_error"], false, "{env}");
    // Out of scope (and gated): runs without waiting for a human.
    let sum = c.call("get-sum", json!({"a": 2, "b": 3}));
    assert!(text(&sum).contains('5'), "{sum}");
    assert_eq!(c.close(), Some(3), "a shadow run exits 3, never 0");
    let run_dir = w.latest();
    let run: Value = serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["mode"], "shadow");
    let shadow: Vec<Value> = std::fs::read_to_string(run_dir.join("shadow.ndjson")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let named: Vec<(&str, &str)> = shadow.iter().map(|l| (l["tool"].as_str().unwrap(), l["decision"].as_str().unwrap())).collect();
    assert_eq!(named, [("get-env", "deny"), ("get-sum", "deny")]);
    // The module heard the calls it decided and no result of a call it did not allow.
    let ev = events(&run_dir);
    let results: Vec<&str> = ev.iter().filter(|(e, _)| e["type"] == "result").map(|(e, _)| e["tool"].as_str().unwrap()).collect();
    assert_eq!(results, ["echo"]);
    let (ok, v, t) = verify_json(&run_dir);
    assert!(ok, "{t}");
    assert_eq!(v["shadow"], json!({"enforced": false, "forwarded_against_a_decision": 2}), "{t}");
    let o = common::cmd(BIN).arg("verify").arg(&run_dir).output().unwrap();
    let first = String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with("SHADOW RUN, NOT ENFORCED"), "{first}");
    // Its redacted derivative is a shadow run too, and verifies (shadow.ndjson names calls by hash only).
    let shared = w.dir.join("shared");
    let o = common::cmd(BIN).arg("export").arg(&run_dir).arg("--out").arg(&shared).output().unwrap();
    assert!(o.status.success(), "export of a shadow run: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let (ok, v, t) = verify_json(&shared.join(run_dir.file_name().unwrap()));
    assert!(ok, "{t}");
    assert_eq!(v["shadow"], json!({"enforced": false, "forwarded_against_a_decision": 2}), "{t}");

    // Passing it off as enforced: a line dropped from shadow.ndjson, or the mode removed from run.json, is refused.
    let original = std::fs::read(run_dir.join("shadow.ndjson")).unwrap();
    let first_line = String::from_utf8_lossy(&original).lines().next().unwrap().to_string() + "\n";
    std::fs::write(run_dir.join("shadow.ndjson"), &first_line).unwrap();
    let (ok, _, t) = verify_json(&run_dir);
    assert!(!ok && t.contains("shadow.ndjson"), "{t}");
    std::fs::write(run_dir.join("shadow.ndjson"), &original).unwrap();
    // (Parsed and written back: the key order of run.json depends on serde_json's features in the build.)
    let mut run_v: Value = serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    assert!(run_v.as_object_mut().unwrap().remove("mode").is_some());
    std::fs::write(run_dir.join("run.json"), serde_json::to_string_pretty(&run_v).unwrap() + "\n").unwrap();
    let (ok, _, t) = verify_json(&run_dir);
    assert!(!ok && t.contains("shadow.ndjson"), "a shadow file in a run that no longer says shadow: {t}");
    std::fs::remove_file(run_dir.join("shadow.ndjson")).unwrap();
    let (ok, _, t) = verify_json(&run_dir);
    assert!(!ok, "an enforced-looking bundle whose receipt pinned a shadow file: {t}");

    // The control: the same calls, enforced, are blocked and the run does not complete.
    let w = work("shadow-control");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &[], &[everything()]);
    c.init();
    assert_blocked(&c.call("get-env", json!({})), "undeclared-tool");
    assert_ne!(c.close(), Some(0));
    assert!(!w.latest().join("shadow.ndjson").exists());
    w.verify_all();
}
