//! The adapters' traffic conforms to conformance/protocol.schema.json: requests the runner sends and the
//! responses both Rust adapters give (the Node and Python adapters are checked the same way by the suite,
//! since the runner refuses a response it cannot read).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn requests_and_responses_match_the_protocol_schema() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(root.join("protocol.schema.json")).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the protocol schema compiles");
    let doc = "runbook_id: p\nversion: 1.0.0\ncapabilities: [q]\nsteps:\n  - {id: a, tool: q, next: done}\nterminals: [done]\n";
    let events = json!(["{\"type\":\"tick\",\"at\":0}", "not json"]);
    // (request, valid by the schema, answered `ok: true`)
    let requests = [
        (json!({"id": "1", "op": "hello"}), true, true),
        (json!({"id": "2", "op": "lint", "document": {"text": doc}}), true, true),
        (json!({"id": "3", "op": "envelope", "document": {"base64": "cnVuYm9va19pZDogeAo="}}), true, true),
        (json!({"id": "4", "op": "replay", "document": {"text": doc}, "events": events}), true, true),
        (json!({"id": "5", "op": "frobnicate"}), false, false),
        (json!({"id": "6", "op": "replay", "document": {"text": doc}, "events": events, "snapshot_after": 1}), true, true),
        // The schema cannot compare with the number of events; the adapter refuses a split past them.
        (json!({"id": "7", "op": "replay", "document": {"text": doc}, "events": events, "snapshot_after": 3}), true, false),
        (json!({"id": "8", "op": "replay", "document": {"text": doc}, "events": events, "snapshot_after": -1}), false, false),
        // The chain (WIT 1.1.0): one link per event, across a split too; a chain_h0 that is not 64 hex is refused.
        (json!({"id": "9", "op": "replay", "document": {"text": doc}, "events": events, "chain_h0": "0".repeat(64)}), true, true),
        (json!({"id": "10", "op": "replay", "document": {"text": doc}, "events": events, "chain_h0": "0".repeat(64), "snapshot_after": 1}), true, true),
        (json!({"id": "11", "op": "replay", "document": {"text": doc}, "events": events, "chain_h0": "XYZ"}), false, false),
    ];
    let mut links: Vec<Value> = Vec::new();
    for imp in ["wasmtime", "native"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_runbook-conformance-adapter"))
            .args(["--impl", imp])
            .env("RUNBOOK_HOST_CACHE", std::env::temp_dir().join(format!("runbook-protocol-{}", std::process::id())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        for (req, valid, ok) in &requests {
            assert_eq!(validator.is_valid(req), *valid, "request {req}");
            writeln!(stdin, "{req}").unwrap();
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            let resp: Value = serde_json::from_str(&line).unwrap();
            let errors: Vec<String> = validator.iter_errors(&resp).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{imp}: response {resp} does not match the protocol: {errors:?}");
            assert_eq!(resp["id"], req["id"]);
            assert_eq!(resp["ok"], json!(ok), "{resp}");
            // A split replay answers with the snapshot it restored from, and every decision.
            if req.get("snapshot_after").is_some() && *ok {
                assert!(resp["result"]["snapshot"].as_str().is_some_and(|s| s.contains("runbook-session-snapshot/v1")), "{resp}");
                assert_eq!(resp["result"]["decisions"].as_array().map(Vec::len), Some(2), "{resp}");
                assert!(resp["result"].get("restore_error").is_none(), "{resp}");
            }
            if req.get("chain_h0").is_some() && *ok {
                let l = resp["result"]["links"].as_array().cloned().unwrap_or_default();
                assert_eq!(l.len(), 2, "{resp}");
                assert!(l.iter().all(|h| h.as_str().is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))), "{resp}");
                links.push(Value::Array(l));
            } else if req.get("chain_h0").is_none() {
                assert!(resp["result"].get("links").is_none(), "no chain_h0, no links: {resp}");
            }
        }
        drop(stdin);
        assert!(child.wait().unwrap().success());
    }
    // The whole run and the split one, in both implementations: the same links.
    assert_eq!(links.len(), 4);
    assert!(links.windows(2).all(|w| w[0] == w[1]), "{links:?}");
}
