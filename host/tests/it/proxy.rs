//! `runbook-host run`, the MCP stdio proxy, with real peers: `@modelcontextprotocol/server-everything` and
//! `@modelcontextprotocol/server-filesystem` behind it, driven by real MCP clients: the Python MCP SDK
//! (`tests/mcp/client.py`, a scriptable ClientSession) and the inspector CLI. Nothing is downloaded here:
//! `tests/mcp/setup` installs the pinned peers first (`.ci/run` calls it).
//!
//! Each test works in its own directory (runs under `<dir>/.runbook/runs`), checks what the client saw, what
//! the bundle recorded, and that `runbook-host verify` passes on every bundle it produced.

use crate::common;
use crate::common::mcp::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn filtered_list_allowed_call_and_blocked_calls_recorded() {
    let w = work("filtered");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &[], &[everything()]);
    let init = c.init();
    assert_eq!(init["server"], "runbook-host");
    // Only the current step's tools, plus the proxy's own.
    assert_eq!(c.list(), ["echo", "runbook_status", "runbook_advance"]);
    // An allowed call passes through, untouched.
    let r = c.call("echo", json!({"message": "hello"}));
    assert_eq!(r["is_error"], false);
    assert_eq!(text(&r), "Echo: hello");
    // A tool the runbook does not declare, and one declared for another step: blocked, never forwarded.
    assert_blocked(&c.call("get-env", json!({})), "undeclared-tool");
    assert_blocked(&c.call("get-sum", json!({"a": 2, "b": 3})), "out-of-scope-tool");
    // R1: the client routes; the list follows the step, with `tools/list_changed`.
    assert!(c.notifications().is_empty());
    let r = c.call("runbook_advance", json!({"to": "forecast"}));
    assert_eq!(r["is_error"], true, "no route from greet to forecast: {r}");
    let r = c.call("runbook_advance", json!({"to": "add"}));
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(c.notifications(), ["notifications/tools/list_changed"]);
    assert_eq!(c.list(), ["get-sum", "runbook_status", "runbook_advance"]);
    assert_blocked(&c.call("echo", json!({"message": "again"})), "out-of-scope-tool");
    let st = c.status();
    assert_eq!(st["step"], "add");
    assert_eq!(st["tools_in_scope"], json!(["get-sum"]));
    assert_eq!(st["runbook"]["trust"], "T1");
    // A YAML document's prose reaches the agent too (quoted: a local file is T1), the current step's.
    assert_eq!(st["prose"]["untrusted"], true);
    assert_eq!(st["prose"]["quoted"]["runbook"]["title"], "A tour of the reference MCP server");
    assert_eq!(st["prose"]["quoted"]["step"]["body"], "Add two numbers; a human approves the exact call first.");
    assert_eq!(c.close(), Some(1), "a run that ends away from its terminal did not complete");

    let run = w.latest();
    let rep = report(&run);
    assert_eq!(rep["outcome"], "incomplete");
    assert_eq!(rep["coverage"], json!(["shell"]));
    let devs = deviations(&rep);
    assert!(devs.contains(&("undeclared-tool".into(), "get-env".into())), "{devs:?}");
    assert!(devs.contains(&("out-of-scope-tool".into(), "get-sum".into())), "{devs:?}");
    assert!(devs.contains(&("out-of-scope-tool".into(), "echo".into())), "{devs:?}");
    let ev = events(&run);
    // The start claim: the servers' tools as the allowlist, blind to the shell, the client's name as agent.
    assert_eq!(ev[0].0["type"], "start");
    assert_eq!(ev[0].0["agent"], "test-agent");
    assert_eq!(ev[0].0["coverage"], json!(["shell"]));
    assert!(ev[0].0["allowlist"].as_array().unwrap().contains(&json!("get-env")));
    // Every call was an invoke event with the MCP request id; the blocked ones are there too.
    let invokes: Vec<&str> = ev.iter().filter(|(e, _)| e["type"] == "invoke").map(|(e, _)| e["tool"].as_str().unwrap()).collect();
    assert_eq!(invokes, ["echo", "get-env", "get-sum", "echo"]);
    assert!(ev.iter().all(|(e, _)| e["type"] != "invoke" || e["call_id"].is_string()));
    let (last, _) = &ev[ev.len() - 1];
    assert_eq!(last["type"], "end");
    assert_eq!(last["reason"], "normal");
    assert_eq!(ev[ev.len() - 2].0["type"], "final_output", "a clean shutdown is the final output");

    // `--list allowlist`: every declared tool is listed from the start; the module still decides each call.
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--list", "allowlist"], &[everything()]);
    c.init();
    assert_eq!(c.list(), ["echo", "get-structured-content", "get-sum", "runbook_status", "runbook_advance"]);
    assert_blocked(&c.call("get-sum", json!({"a": 2, "b": 3})), "out-of-scope-tool");
    assert_eq!(c.close(), Some(1));
    w.verify_all();
}

#[test]
fn a_client_that_leaves_mid_call_is_client_closed() {
    let w = work("leave");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--approval-timeout", "60s"], &[everything()]);
    c.init();
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    // A gated call is held; the client goes away while it waits.
    assert_eq!(c.ask(json!({"op": "send", "tool": "get-sum", "args": {"a": 1, "b": 2}}))["ok"], true);
    pending_request(&run);
    assert_eq!(c.close(), Some(1));
    let ev = events(&run);
    let kinds: Vec<&str> = ev.iter().map(|(e, _)| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["start", "advance", "invoke", "end"], "no final output when the client vanished mid-call");
    assert_eq!(ev[2].1["decision"], "needs-approval");
    assert_eq!(ev[3].0["reason"], "client-closed");
    // Nothing is left for a human to approve in a run that ended.
    assert!(runbook_host::run::approvals::pending(&run).unwrap().is_empty());
    w.verify_all();
}

#[test]
fn a_client_without_the_initialize_handshake() {
    // The 2026-07-28 lifecycle: `server/discover`, then every request carries its own metadata (the
    // client's name included). Such a client gets no `tools/list_changed` here, so it is shown the
    // allowlist; the module decides each call as ever.
    let w = work("modern");
    let mut c = Client::proxy(&w, "modern-agent", &runbook("everything-tour.yaml"), &[], &[everything()]);
    let r = c.ask(json!({"op": "discover"}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(c.list(), ["echo", "get-structured-content", "get-sum", "runbook_status", "runbook_advance"]);
    assert_eq!(text(&c.call("echo", json!({"message": "hi"}))), "Echo: hi");
    assert_blocked(&c.call("get-env", json!({})), "undeclared-tool");
    assert_blocked(&c.call("get-sum", json!({"a": 1, "b": 1})), "out-of-scope-tool");
    assert_eq!(c.close(), Some(1));
    let ev = events(&w.latest());
    assert_eq!(ev[0].0["agent"], "modern-agent");
    w.verify_all();
}

#[test]
fn bundled_registry_runs_pinned_documents() {
    // The committed registry pins exactly the documents in runbooks/.
    let reg = mcp_dir().join("registry");
    let index: Value = serde_json::from_slice(&std::fs::read(reg.join("index.json")).unwrap()).unwrap();
    for (id, versions) in index["runbooks"].as_object().unwrap() {
        for (_, entry) in versions.as_object().unwrap() {
            let path = entry["path"].as_str().unwrap();
            let bytes = std::fs::read(reg.join(path)).unwrap();
            assert_eq!(runbook_host::files::sha256_hex(&bytes), entry["sha256"], "{path}");
            let ext = Path::new(path).extension().unwrap().to_string_lossy().into_owned();
            assert_eq!(bytes, std::fs::read(runbook(&format!("{id}.{ext}"))).unwrap(), "{path} differs from runbooks/{id}.{ext}");
        }
    }
    let w = work("registry");
    let reg_s = reg.to_string_lossy().into_owned();
    let mut c = Client::proxy(&w, "test-agent", "echo-deadline@1.0.0", &["--registry", &reg_s], &[everything()]);
    c.init();
    // Pinned (T2): the prose is passed as the document's own text, not quoted as untrusted.
    let st = c.status();
    assert_eq!(st["runbook"]["trust"], "T2");
    assert_eq!(st["prose"]["untrusted"], false);
    assert_eq!(st["prose"]["text"]["runbook"]["title"], "Echo once, promptly");
    assert_eq!(text(&c.call("echo", json!({"message": "pinned"}))), "Echo: pinned");
    assert_eq!(c.close(), Some(0));
    let run: Value = serde_json::from_slice(&std::fs::read(w.latest().join("run.json")).unwrap()).unwrap();
    assert_eq!(run["document"]["trust"], "T2");
    assert_eq!(run["document"]["reference"], "echo-deadline@1.0.0");
    w.verify_all();
}

#[test]
fn gated_call_approved_by_a_human_then_the_run_completes() {
    let w = work("approved");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--approval-timeout", "60s"], &[everything()]);
    c.init();
    assert_eq!(text(&c.call("echo", json!({"message": "hi"}))), "Echo: hi");
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    // The gated call waits; a human approves it from a terminal the agent cannot reach.
    let args = json!({"a": 2, "b": 3});
    c.write(json!({"op": "call", "tool": "get-sum", "args": args}));
    let p = pending_request(&run);
    assert_eq!(p.tool, "get-sum");
    assert_eq!(p.step.as_deref(), Some("add"));
    assert_eq!(p.call_sha256, call_sha256("get-sum", &args));
    let (code, said) = approve_on_a_terminal(&w, &run, "add", false, Duration::from_millis(1500));
    assert_eq!(code, Some(0), "approve: {said}");
    let r = c.read();
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(text(&r), "The sum of 2 and 3 is 5.");
    assert_eq!(c.call("runbook_advance", json!({"to": "forecast"}))["is_error"], false);
    let r = c.call("get-structured-content", json!({"location": "Chicago"}));
    assert_eq!(r["is_error"], false);
    assert!(r["structured"]["temperature"].is_number(), "{r}");
    assert_eq!(c.call("runbook_advance", json!({"to": "done"}))["is_error"], false);
    // At the terminal nothing is in scope any more.
    assert_eq!(c.list(), ["runbook_status", "runbook_advance"]);
    assert_eq!(c.close(), Some(0), "completed: exit 0");

    let rep = report(&run);
    assert_eq!(rep["outcome"], "completed");
    assert_eq!(rep["terminal"], "done");
    let a = &rep["approvals"][0];
    assert_eq!(a["step"], "add");
    assert_eq!(a["approver"], runbook_host::run::approvals::operator());
    assert_eq!(a["granted"], true);
    assert_eq!(a["accepted"], true);
    assert_eq!(a["call_sha256"], call_sha256("get-sum", &args));
    // The result is `structuredContent` when there is one.
    let ev = events(&run);
    let res = ev.iter().find(|(e, _)| e["type"] == "result" && e["tool"] == "get-structured-content").unwrap();
    assert!(res.0["result"]["temperature"].is_number());
    w.verify_all();
}

#[test]
fn gated_call_refused_timed_out_then_retried() {
    let w = work("refused");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--approval-timeout", "1s"], &[everything()]);
    c.init();
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    // Nobody answers within the bound: `needs-approval`, telling the agent to retry after a human approved.
    let r = c.call("get-sum", json!({"a": 1, "b": 1}));
    assert_blocked(&r, "needs-approval");
    assert!(text(&r).contains("runbook-host approve") && text(&r).contains("Retry"), "{r}");
    let st = c.status();
    assert_eq!(st["awaiting_approval"][0]["tool"], "get-sum");
    // A human refuses it: the retry of that call is refused, and it never ran.
    let p = pending_request(&run);
    runbook_host::run::approvals::answer(&run, &p.id, "alice", false, &p.call_sha256).unwrap();
    let r = c.call("get-sum", json!({"a": 1, "b": 1}));
    assert_blocked(&r, "needs-approval");
    assert!(text(&r).contains("alice") && text(&r).contains("refused"), "{r}");
    // Another call times out; a human approves it later; the retry passes.
    assert_blocked(&c.call("get-sum", json!({"a": 2, "b": 2})), "needs-approval");
    let p = pending_request(&run);
    assert_eq!(p.call_sha256, call_sha256("get-sum", &json!({"a": 2, "b": 2})));
    runbook_host::run::approvals::answer(&run, &p.id, "alice", true, &p.call_sha256).unwrap();
    let r = c.call("get-sum", json!({"a": 2, "b": 2}));
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(text(&r), "The sum of 2 and 2 is 4.");
    // The approval was bound to that one call: a different call needs a new one.
    assert_blocked(&c.call("get-sum", json!({"a": 3, "b": 3})), "needs-approval");
    assert_eq!(c.close(), Some(1));
    // The agent left right after a gated call waited in vain.
    assert_eq!(events(&run).last().unwrap().0["reason"], "approval-timeout");
    let rep = report(&run);
    let approvals: Vec<(bool, bool, String)> = rep["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["granted"].as_bool().unwrap(), a["accepted"].as_bool().unwrap(), a["approver"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(approvals, [(false, true, "alice".to_string()), (true, true, "alice".to_string())]);
    w.verify_all();
}

#[test]
fn one_approval_admits_one_call() {
    let w = work("once");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--approval-timeout", "5s"], &[everything()]);
    c.init();
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    // Two identical gated calls wait on one request; one human answer opens the gate for one of them.
    assert_eq!(c.ask(json!({"op": "send", "tool": "get-sum", "args": {"a": 2, "b": 3}}))["ok"], true);
    let p = pending_request(&run);
    c.write(json!({"op": "call", "tool": "get-sum", "args": {"a": 2, "b": 3}}));
    std::thread::sleep(Duration::from_millis(500));
    runbook_host::run::approvals::answer(&run, &p.id, "alice", true, &p.call_sha256).unwrap();
    let r = c.read();
    assert_eq!(r["ok"], true);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(c.close(), Some(1));
    let ev = events(&run);
    let approvals = ev.iter().filter(|(e, _)| e["type"] == "approval").count();
    let forwarded = ev.iter().filter(|(e, _)| e["type"] == "result" && e["tool"] == "get-sum").count();
    assert_eq!((approvals, forwarded), (1, 1), "one answer, one call: {ev:?}");
    w.verify_all();
}

/// docs/spec/runbook.md#exact-numbers, the integrity hole of issue 27: `1234567890123456768` and
/// `1234567890123456789` are one double, which RFC 8785 writes `1234567890123456800`, so their call hashes
/// were equal and an approval of one admitted the other, recorded as a third number. Now neither call runs:
/// each is denied before it is forwarded (`inexact-number`), no approval is asked for, the record keeps the
/// numbers as written, and the bundle verifies.
#[test]
fn a_number_rfc_8785_would_change_never_reaches_the_server() {
    let w = work("exact");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--approval-timeout", "2s"], &[everything()]);
    c.init();
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    for n in ["1234567890123456768", "1234567890123456789", "9007199254740993"] {
        let args: Value = serde_json::from_str(&format!(r#"{{"a": {n}, "b": 1}}"#)).unwrap();
        let r = c.call("get-sum", args);
        assert_blocked(&r, "inexact-number");
        assert!(text(&r).contains("not forwarded"), "{r}");
    }
    assert!(runbook_host::run::approvals::pending(&run).unwrap().is_empty(), "no approval was asked for a call that cannot run");
    assert_eq!(c.close(), Some(1));
    let ev = events(&run);
    let denied: Vec<&Value> = ev.iter().filter(|(_, d)| d["reason"] == "inexact-number").map(|(e, _)| &e["arguments"]["a"]).collect();
    assert_eq!(denied.len(), 3, "{ev:?}");
    assert!(ev.iter().all(|(e, _)| e["type"] != "result"), "nothing was forwarded: {ev:?}");
    // The record keeps each number as written (never the rounded `...800`).
    let raw = std::fs::read_to_string(run.join("events.ndjson")).unwrap();
    for n in ["1234567890123456768", "1234567890123456789", "9007199254740993"] {
        assert!(raw.contains(&format!("\"a\":{n}")), "{n} not recorded as written: {raw}");
    }
    assert!(!raw.contains("1234567890123456800"), "{raw}");
    w.verify_all();
}

#[test]
fn an_agent_cannot_approve_itself() {
    let w = work("self");
    // The client's name is the operator's: the human at the terminal is the agent's own identity.
    let me = runbook_host::run::approvals::operator();
    let mut c = Client::proxy(&w, &me, &runbook("everything-tour.yaml"), &["--approval-timeout", "60s"], &[everything()]);
    c.init();
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    c.write(json!({"op": "call", "tool": "get-sum", "args": {"a": 2, "b": 3}}));
    pending_request(&run);
    let (code, said) = approve_on_a_terminal(&w, &run, "add", false, Duration::from_millis(1500));
    assert_eq!(code, Some(0), "{said}");
    let r = c.read();
    assert_blocked(&r, "needs-approval");
    assert!(text(&r).contains("self-approval"), "{r}");
    // And with --agent: a grant written by the agent's own name is refused the same way.
    assert_eq!(c.close(), Some(1));
    let rep = report(&run);
    assert_eq!(rep["approvals"][0]["approver"], me);
    assert_eq!(rep["approvals"][0]["accepted"], false);

    let mut c = Client::proxy(&w, "whoever", &runbook("everything-tour.yaml"), &["--agent", "bot-7", "--approval-timeout", "60s"], &[everything()]);
    c.init();
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    c.write(json!({"op": "call", "tool": "get-sum", "args": {"a": 2, "b": 3}}));
    let p = pending_request(&run);
    runbook_host::run::approvals::answer(&run, &p.id, "bot-7", true, &p.call_sha256).unwrap();
    let r = c.read();
    assert!(text(&r).contains("self-approval"), "{r}");
    assert_eq!(c.close(), Some(1));
    assert_eq!(events(&run)[0].0["agent"], "bot-7");
    w.verify_all();
}

#[test]
fn the_typescript_and_python_sdk_clients_use_the_fixture_through_the_proxy_as_they_would_alone() {
    let w = work("sdk-clients-fixture");
    // The TypeScript SDK's client: a resource (text, binary, templated), two prompts (arguments, an image),
    // a completion and a tool whose server samples through the client, the same through the proxy as alone.
    let ts = |server: Vec<String>| -> Value {
        let out = common::cmd("node").arg(mcp_dir().join("ts_client.mjs")).arg("--").args(server).current_dir(&w.dir).stderr(Stdio::null()).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    };
    let alone = ts(fixture());
    assert!(alone.get("error").is_none(), "{alone}");
    assert_eq!(alone["completion"], json!(["paris", "park", "party"]));
    assert_eq!(alone["sampling"][0]["text"], "LLM response: sampled: capital of France?");
    assert_eq!(alone["binary"][0]["mimeType"], "image/png");
    let through = ts(fixture_proxy(&w));
    assert_eq!(through, alone, "the TypeScript client saw something else through the proxy");
    let run = w.latest();
    let methods: Vec<String> = std::fs::read_to_string(run.join("traffic.ndjson"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["method"].as_str().unwrap().to_string())
        .collect();
    for m in ["resources/list", "resources/templates/list", "resources/read", "prompts/get", "completion/complete", "sampling/createMessage"] {
        assert!(methods.iter().any(|x| x == m), "{m} not in traffic.ndjson: {methods:?}");
    }
    assert_eq!(methods.iter().filter(|m| *m == "resources/read").count(), 3, "{methods:?}");

    // The Python SDK's client, the same uses and the sampling tool.
    let py = |server: Vec<String>| -> (Value, Value) {
        let mut args = vec!["--answer".to_string(), "--".into()];
        args.extend(server);
        let mut c = Client::spawn(&w, &args);
        c.init();
        let used = c.ask(json!({"op": "use"}));
        let sampled = c.call("test_sampling", json!({"prompt": "capital?"}));
        c.close();
        (used, sampled)
    };
    let (used, sampled) = py(fixture());
    assert_eq!(used["ok"], true, "{used}");
    assert_eq!(text(&sampled), "LLM response: sampled: capital?");
    // The same resources, prompts and completion as the TypeScript client got.
    for k in ["resources", "templates", "text", "binary", "template", "prompt", "image_prompt", "completion"] {
        assert_eq!(used[k], alone[k], "{k}");
    }
    assert_eq!(py(fixture_proxy(&w)), (used, sampled), "the Python client saw something else through the proxy");
    w.verify_all();
}

/// The client in front of `runbook-host run everything-tour --approve-via elicitation ARGS`, answering an
/// approval request as `approver` with `decision`.
fn eliciting_client(w: &Work, name: &str, approver: &str, decision: &str, args: &[&str]) -> Client {
    let mut cmd: Vec<String> = ["--name", name, "--approve-as", approver, "--decision", decision, "--", BIN, "run"].iter().map(|s| s.to_string()).collect();
    cmd.push(runbook("everything-tour.yaml"));
    cmd.extend(["--approve-via", "elicitation"].iter().chain(args).map(|s| s.to_string()));
    cmd.push("--".into());
    cmd.extend(everything());
    Client::spawn(w, &cmd)
}

#[test]
fn a_gated_call_approved_through_the_clients_elicitation() {
    let w = work("approve-via-elicitation");
    let args = json!({"a": 2, "b": 3});
    // The client is asked for the exact call; its answer, under the approver it names, opens the gate.
    let mut c = eliciting_client(&w, "test-agent", "alice", "approve", &["--approval-timeout", "60s"]);
    c.init();
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    let r = c.call("get-sum", args.clone());
    assert_eq!(text(&r), "The sum of 2 and 3 is 5.", "{r}");
    let asked = c.ask(json!({"op": "asked"}));
    let message = asked["asked"][0]["elicitation"].as_str().expect("the client was asked").to_string();
    assert!(message.contains("get-sum") && message.contains(&call_sha256("get-sum", &args)) && message.contains("`add`"), "{message}");
    c.close();
    let rep = report(&run);
    let a = &rep["approvals"][0];
    assert_eq!((&a["approver"], &a["granted"], &a["accepted"]), (&json!("alice"), &json!(true), &json!(true)), "{rep}");
    assert_eq!(a["call_sha256"], call_sha256("get-sum", &args));
    let traffic = std::fs::read_to_string(run.join("traffic.ndjson")).unwrap();
    assert!(traffic.lines().any(|l| l.contains("\"elicitation/create\"") && l.contains("\"to-client\"")), "{traffic}");

    // A denial through the client refuses the call; it never reaches the server.
    let mut c = eliciting_client(&w, "test-agent", "alice", "deny", &["--approval-timeout", "60s"]);
    c.init();
    c.call("runbook_advance", json!({"to": "add"}));
    let run = w.latest();
    let r = c.call("get-sum", args.clone());
    assert_blocked(&r, "needs-approval");
    c.close();
    assert_eq!(report(&run)["approvals"][0]["granted"], false);
    assert!(!events(&run).iter().any(|(e, _)| e["type"] == "result" && e["tool"] == "get-sum"), "a refused call ran");

    // The agent answering as itself is the self-approval the module refuses, whatever the channel.
    let mut c = eliciting_client(&w, "test-agent", "test-agent", "approve", &["--approval-timeout", "60s"]);
    c.init();
    c.call("runbook_advance", json!({"to": "add"}));
    let run = w.latest();
    let r = c.call("get-sum", args.clone());
    assert_blocked(&r, "needs-approval");
    assert!(text(&r).contains("self-approval"), "{r}");
    c.close();
    assert_eq!(report(&run)["approvals"][0]["accepted"], false);

    // Declined at the client: nothing is written, the terminal still answers within the timeout.
    let mut c = eliciting_client(&w, "test-agent", "alice", "decline", &["--approval-timeout", "60s"]);
    c.init();
    c.call("runbook_advance", json!({"to": "add"}));
    let run = w.latest();
    c.write(json!({"op": "call", "tool": "get-sum", "args": args}));
    pending_request(&run);
    let (code, said) = approve_on_a_terminal(&w, &run, "add", false, Duration::from_millis(1500));
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(text(&c.read()), "The sum of 2 and 3 is 5.");
    c.close();
    assert_eq!(report(&run)["approvals"][0]["approver"], runbook_host::run::approvals::operator());
    w.verify_all();

    // Where approvals must be signed, or elicitation is withheld, the run is refused before anything starts.
    let key = w.dir.join("approver_key");
    let made = common::cmd("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&key).status().unwrap();
    assert!(made.success());
    let signers = w.dir.join("allowed_signers");
    std::fs::write(&signers, format!("alice {}", std::fs::read_to_string(key.with_extension("pub")).unwrap())).unwrap();
    for extra in [vec!["--allowed-signers", signers.to_str().unwrap(), "--allow-software-keys"], vec!["--block", "elicitation"]] {
        let mut cmd = common::cmd(BIN);
        cmd.args(["run", &runbook("everything-tour.yaml"), "--approve-via", "elicitation"]).args(&extra).arg("--").args(everything());
        let out = cmd.current_dir(&w.dir).stdin(std::process::Stdio::null()).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("approval-channel-refused"), "{extra:?}: {said}");
        assert!(!out.status.success(), "{extra:?}: {said}");
    }
}

/// Names the client chooses are data, not paths (docs/spec/bundle.md#relative-paths-only): a call to a tool
/// named `/etc/passwd` and an approval answered as `/home/alice` are recorded by those names, and the
/// bundle verifies. Before, an agent could make its own run's bundle fail `verify` this way (found by the
/// `mcp` fuzz target).
#[test]
fn tools_and_approvers_named_like_paths_leave_a_bundle_that_verifies() {
    let w = work("path-names");
    let args = json!({"a": 2, "b": 3});
    let mut c = eliciting_client(&w, "test-agent", "/home/alice", "approve", &["--approval-timeout", "60s"]);
    c.init();
    for t in ["/etc/passwd", "~root", "C:\\Windows", "file:///etc/shadow"] {
        assert_blocked(&c.call(t, json!({})), "undeclared-tool");
    }
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    assert_eq!(text(&c.call("get-sum", args)), "The sum of 2 and 3 is 5.");
    c.close();
    let rep = report(&run);
    let devs: Vec<String> = deviations(&rep).into_iter().filter(|(c, _)| c == "undeclared-tool").map(|(_, t)| t).collect();
    assert_eq!(devs, ["/etc/passwd", "~root", "C:\\Windows", "file:///etc/shadow"], "{rep}");
    assert_eq!(rep["approvals"][0]["approver"], "/home/alice", "{rep}");
    assert_eq!(rep["approvals"][0]["accepted"], true, "{rep}");
    w.verify_all();
}

#[test]
fn retry_budget_exhausted_at_r2() {
    let w = work("budget");
    let mut c = Client::proxy(&w, "test-agent", &runbook("sum-check.yaml"), &["--profile", "R2"], &[everything()]);
    c.init();
    // R2: the module routes itself, so there is no runbook_advance.
    assert_eq!(c.list(), ["get-sum", "runbook_status"]);
    // The assert wants a sum of 5: two failures are retried, with the server's real result passed on...
    for _ in 0..2 {
        let r = c.call("get-sum", json!({"a": 1, "b": 1}));
        assert_eq!(r["is_error"], false, "{r}");
        assert_eq!(text(&r), "The sum of 1 and 1 is 2.");
    }
    // ... the third exhausts the budget: no on_fail, so the run is aborted.
    let r = c.call("get-sum", json!({"a": 1, "b": 1}));
    assert_blocked(&r, "runbook_failed");
    assert_eq!(text(&r), "runbook_failed:aborted");
    assert_eq!(text(&c.call("get-sum", json!({"a": 2, "b": 3}))), "runbook_failed:aborted");
    assert_eq!(c.status()["runbook_failed"], "runbook_failed:aborted");
    assert_eq!(c.close(), Some(1));
    let rep = report(&w.latest());
    assert_eq!(rep["outcome"], "aborted");
    assert_eq!(rep["budgets"]["add->add"], json!({"max": 2, "used": 2}));
    assert!(deviations(&rep).iter().any(|d| d.0 == "budget-exhausted"), "{rep}");
    assert_eq!(rep["steps"]["add"]["assert"], "fail");
    w.verify_all();
}

#[test]
fn r2_run_completes_and_exits_zero() {
    let w = work("r2ok");
    let reg = mcp_dir().join("registry").to_string_lossy().into_owned();
    let mut c = Client::proxy(&w, "test-agent", "sum-check@1.0.0", &["--profile", "R2", "--registry", &reg], &[everything()]);
    c.init();
    assert_eq!(text(&c.call("get-sum", json!({"a": 2, "b": 3}))), "The sum of 2 and 3 is 5.");
    // The assert passed: the module moved to the terminal, and the list says so.
    assert_eq!(c.notifications(), ["notifications/tools/list_changed"]);
    assert_eq!(c.list(), ["runbook_status"]);
    assert_eq!(c.status()["step"], "done");
    assert_eq!(c.close(), Some(0));
    let rep = report(&w.latest());
    assert_eq!(rep["outcome"], "completed");
    assert_eq!(rep["steps"]["add"]["assert"], "pass");
    w.verify_all();
}

#[test]
fn checkpoint_timeout_fails_the_run() {
    let w = work("deadline");
    let mut c = Client::proxy(&w, "test-agent", &runbook("echo-deadline.json"), &[], &[everything()]);
    c.init();
    assert_eq!(c.list(), ["echo", "runbook_status"]);
    // The deadline (2 s) passes with no echo: a tick at the deadline fails the run then and there.
    std::thread::sleep(Duration::from_millis(3000));
    assert_eq!(c.notifications(), ["notifications/tools/list_changed"]);
    assert_eq!(c.list(), ["runbook_status"]);
    let r = c.call("echo", json!({"message": "too late"}));
    assert_eq!(text(&r), "runbook_failed:failed");
    assert_eq!(c.close(), Some(1));
    let run = w.latest();
    let rep = report(&run);
    assert_eq!(rep["outcome"], "failed");
    assert_eq!(rep["checkpoints"]["cp-echo"]["status"], "timed-out");
    let ev = events(&run);
    let tick = ev.iter().find(|(e, _)| e["type"] == "tick").expect("a tick at the deadline");
    assert_eq!(tick.1["reason"], "checkpoint-timeout");
    assert!(tick.0["at"].as_u64().unwrap() > 2000);
    w.verify_all();
}

#[test]
fn a_clean_shutdown_is_the_final_output() {
    let w = work("final");
    let mut c = Client::proxy(&w, "test-agent", &runbook("echo-deadline.json"), &[], &[everything()]);
    c.init();
    assert_eq!(text(&c.call("echo", json!({"message": "in time"}))), "Echo: in time");
    // A local file is trust T1: its prose reaches the agent only quoted, as untrusted data.
    let st = c.status();
    assert_eq!(st["prose"]["untrusted"], true);
    assert_eq!(st["prose"]["quoted"]["runbook"]["title"], "Echo once, promptly");
    assert_eq!(c.close(), Some(0));
    let run = w.latest();
    let rep = report(&run);
    assert_eq!(rep["outcome"], "completed");
    assert_eq!(rep["checkpoints"]["cp-echo"]["status"], "satisfied");
    assert_eq!(rep["checkpoints"]["cp-emit"]["status"], "satisfied");
    let ev = events(&run);
    let kinds: Vec<&str> = ev.iter().map(|(e, _)| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["start", "invoke", "result", "final_output", "end"]);
    w.verify_all();
}

/// A registry directory in the work directory pinning `everything-tour@1.0.0`.
fn make_registry(w: &Work) -> PathBuf {
    let reg = w.dir.join("registry");
    std::fs::create_dir_all(reg.join("everything-tour/1.0.0")).unwrap();
    let bytes = std::fs::read(runbook("everything-tour.yaml")).unwrap();
    std::fs::write(reg.join("everything-tour/1.0.0/runbook.yaml"), &bytes).unwrap();
    let sha = runbook_host::files::sha256_hex(&bytes);
    let index = json!({"schema": "runbook-registry-index/v1", "runbooks": {"everything-tour": {"1.0.0": {"sha256": sha, "path": "everything-tour/1.0.0/runbook.yaml"}}}});
    std::fs::write(reg.join("index.json"), index.to_string()).unwrap();
    reg
}

/// server-everything behind a shell that leaves a marker when it starts.
fn everything_with_marker(marker: &Path) -> Vec<String> {
    vec!["sh".into(), "-c".into(), format!("touch '{}'; exec '{}'", marker.display(), everything()[0])]
}

#[test]
fn tampered_registry_document_is_refused_before_anything_runs() {
    let w = work("tamper");
    let reg = make_registry(&w);
    let reg_s = reg.to_string_lossy().into_owned();
    // Pinned and intact: trust T2.
    let mut c = Client::proxy(&w, "test-agent", "everything-tour@1.0.0", &["--registry", &reg_s], &[everything()]);
    c.init();
    let st = c.status();
    assert_eq!(st["runbook"]["trust"], "T2");
    assert_eq!(st["runbook"]["pinned"], true);
    assert_eq!(st["runbook"]["reference"], "everything-tour@1.0.0");
    c.close();
    assert_eq!(w.run_dirs().len(), 1);
    // One byte more: the sha256 is no longer the pin. `initialize` answers runbook_failed; no server starts.
    let doc = reg.join("everything-tour/1.0.0/runbook.yaml");
    let mut bytes = std::fs::read(&doc).unwrap();
    bytes.extend_from_slice(b"# edited\n");
    std::fs::write(&doc, bytes).unwrap();
    let marker = w.dir.join("server-started");
    let mut c = Client::proxy(&w, "test-agent", "everything-tour@1.0.0", &["--registry", &reg_s], &[everything_with_marker(&marker)]);
    let r = c.ask(json!({"op": "init"}));
    assert_eq!(r["ok"], false, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().starts_with("runbook_failed:tampered"), "{r}");
    assert_eq!(c.close(), Some(1));
    assert!(!marker.exists(), "a server started for a tampered document");
    assert_eq!(w.run_dirs().len(), 1, "no run for a document that does not resolve");
    w.verify_all();
}

#[test]
fn unknown_runbook_is_refused() {
    let w = work("unknown");
    let reg = make_registry(&w);
    let reg_s = reg.to_string_lossy().into_owned();
    for (reference, code) in [("nope@1.0.0", "unknown-runbook"), ("everything-tour@9.9.9", "unknown-version")] {
        let mut c = Client::proxy(&w, "test-agent", reference, &["--registry", &reg_s], &[everything()]);
        let r = c.ask(json!({"op": "init"}));
        assert_eq!(r["ok"], false, "{r}");
        assert!(r["error"]["message"].as_str().unwrap().starts_with(&format!("runbook_failed:{code}")), "{r}");
        assert_eq!(c.close(), Some(1));
    }
    // A registry that is not there.
    let mut c = Client::proxy(&w, "test-agent", "everything-tour@1.0.0", &["--registry", "no-such-registry"], &[everything()]);
    let r = c.ask(json!({"op": "init"}));
    assert_eq!(r["ok"], false, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().starts_with("runbook_failed:"), "{r}");
    assert_eq!(c.close(), Some(1));
    assert!(w.run_dirs().is_empty());
}

#[test]
fn destructive_runbook_is_refused_by_the_mcp_proxy() {
    let w = work("destructive");
    let marker = w.dir.join("server-started");
    let mut c = Client::proxy(&w, "test-agent", &runbook("destructive.yaml"), &["--profile", "R2"], &[everything_with_marker(&marker)]);
    let r = c.ask(json!({"op": "init"}));
    assert_eq!(r["ok"], false, "{r}");
    let m = r["error"]["message"].as_str().unwrap();
    assert!(m.starts_with("runbook_failed:refused:coverage-incomplete"), "{m}");
    assert_eq!(c.close(), Some(1));
    // Admission refuses it whatever the servers offer, so it is refused before any server starts, like a
    // document that does not resolve: nothing ran, and there is no run.
    assert!(!marker.exists(), "a server started for a run admission refuses");
    assert!(w.run_dirs().is_empty());
}

#[test]
fn a_server_that_dies_ends_the_run() {
    let w = work("crash");
    let pidfile = w.dir.join("server.pid");
    let server = vec!["sh".into(), "-c".into(), format!("echo $$ > '{}'; exec '{}'", pidfile.display(), everything()[0])];
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &[], &[server]);
    c.init();
    assert_eq!(text(&c.call("echo", json!({"message": "before"}))), "Echo: before");
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_string();
    assert!(Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
    assert_eq!(c.wait_exit(), Some(1), "the proxy ends the run and exits 1");
    let run = w.latest();
    let rep = report(&run);
    assert_eq!(rep["outcome"], "incomplete");
    let ev = events(&run);
    let (last, d) = ev.last().unwrap();
    assert_eq!(last["type"], "end");
    assert_eq!(last["reason"], "server-exited");
    assert_eq!(d["reason"], "run-ended");
    drop(c);
    w.verify_all();
}

#[test]
fn an_interrupt_ends_the_run() {
    let w = work("interrupt");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &[], &[everything()]);
    c.init();
    assert_eq!(text(&c.call("echo", json!({"message": "x"}))), "Echo: x");
    let r = c.ask(json!({"op": "signal", "sig": "INT"}));
    assert_eq!(r["ok"], true);
    assert_eq!(c.wait_exit(), Some(1));
    let ev = events(&w.latest());
    assert_eq!(ev.last().unwrap().0["reason"], "interrupted");
    drop(c);
    w.verify_all();
}

#[test]
fn two_servers_named_tools_and_guarded_paths() {
    let w = work("files");
    let data = w.dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("note.txt"), "rotate the logs\nthen rest\n").unwrap();
    let mut c = Client::proxy(&w, "test-agent", &runbook("files.yaml"), &["--server-name", "ev", "--server-name", "fs"], &[everything(), filesystem(&w.dir)]);
    c.init();
    let mut listed = c.list();
    listed.sort();
    assert_eq!(listed, ["fs.list_directory", "fs.read_text_file", "runbook_advance", "runbook_status"]);
    let note = data.join("note.txt").to_string_lossy().into_owned();
    let r = c.call("fs.read_text_file", json!({"path": note}));
    assert_eq!(r["is_error"], false, "{r}");
    assert!(text(&r).contains("rotate the logs"), "{r}");
    // Writing is not declared: blocked, and the file is not created.
    let out = data.join("out.txt");
    assert_blocked(&c.call("fs.write_file", json!({"path": out.to_string_lossy(), "content": "x"})), "undeclared-tool");
    assert!(!out.exists());
    // The run's own evidence is out of reach even through a declared tool (9.20: guarded).
    let events_file = w.latest().join("events.ndjson").to_string_lossy().into_owned();
    let r = c.call("fs.read_text_file", json!({"path": events_file}));
    assert_blocked(&r, "undeclared-tool");
    assert!(text(&r).contains("runbook-host itself"), "{r}");
    assert_eq!(c.call("runbook_advance", json!({"to": "say"}))["is_error"], false);
    assert_eq!(text(&c.call("ev.echo", json!({"message": "rotate the logs"}))), "Echo: rotate the logs");
    assert_eq!(c.call("runbook_advance", json!({"to": "done"}))["is_error"], false);
    assert_eq!(c.close(), Some(0));
    let run = w.latest();
    let ev = events(&run);
    let guarded = ev.iter().find(|(e, _)| e["guard"] == true).expect("a guarded invoke");
    assert_eq!(guarded.1["reason"], "guarded");
    assert_eq!(report(&run)["outcome"], "completed");
    w.verify_all();
}

#[test]
fn the_inspector_cli_sees_only_the_runbook_s_tools() {
    let w = work("inspector");
    let config = json!({"mcpServers": {"runbook": {"command": BIN, "args": ["run", runbook("everything-tour.yaml"), "--", everything()[0]]}}});
    std::fs::write(w.dir.join("mcp.json"), config.to_string()).unwrap();
    let run = |extra: &[&str]| -> Value {
        let o = common::cmd(mcp_dir().join("node_modules/.bin/inspector"))
            .args(["--cli", "--config", "mcp.json", "--server", "runbook"])
            .args(extra)
            .env("MCP_INSPECTOR_SECRET_STORE", "memory")
            .current_dir(&w.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let start = out.find('{').unwrap_or_else(|| panic!("no JSON from the inspector: {out}\n{}", String::from_utf8_lossy(&o.stderr)));
        serde_json::Deserializer::from_str(&out[start..]).into_iter::<Value>().next().unwrap().unwrap()
    };
    let tools = run(&["--method", "tools/list"]);
    let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "runbook_status", "runbook_advance"]);
    let r = run(&["--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=from the inspector"]);
    assert_eq!(r["content"][0]["text"], "Echo: from the inspector", "{r}");
    assert_eq!(w.run_dirs().len(), 2);
    w.verify_all();
}

#[test]
fn verify_fails_on_a_tampered_bundle() {
    let w = work("verify");
    let mut c = Client::proxy(&w, "test-agent", &runbook("echo-only.json"), &[], &[everything()]);
    c.init();
    c.call("echo", json!({"message": "one"}));
    c.call("get-env", json!({}));
    assert_eq!(c.close(), Some(0));
    let run = w.latest();
    let (ok, out) = verify(&run);
    assert!(ok, "{out}");
    // One byte of the recorded arguments changed: the chain no longer holds.
    let path = run.join("events.ndjson");
    let original = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, original.replacen("\"one\"", "\"One\"", 1)).unwrap();
    let (ok, out) = verify(&run);
    assert!(!ok, "verify passed a tampered bundle: {out}");
    assert!(out.contains("events.ndjson"), "the place is named: {out}");
    std::fs::write(&path, &original).unwrap();
    // A decision edited to look allowed fails too.
    std::fs::write(&path, original.replacen("\"decision\":\"deny\"", "\"decision\":\"allow\"", 1)).unwrap();
    assert!(!verify(&run).0);
    // The report edited.
    std::fs::write(&path, &original).unwrap();
    let rep = std::fs::read_to_string(run.join("report.json")).unwrap();
    std::fs::write(run.join("report.json"), rep.replacen("\"completed\"", "\"complete\"", 1)).unwrap();
    assert!(!verify(&run).0);
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn dir_size(p: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(p).unwrap().flatten() {
        let m = e.metadata().unwrap();
        n += if m.is_dir() { dir_size(&e.path()) } else { m.len() };
    }
    n
}

/// The proxy's added latency per `tools/call` (median of 200 sequential `echo` calls through the proxy,
/// against the same client calling server-everything directly), and the size of a 100-call run's bundle.
#[test]
fn latency_and_bundle_size() {
    let w = work("bench");
    let bench = |c: &mut Client, n: u64| -> Vec<u64> {
        let r = c.ask(json!({"op": "bench", "tool": "echo", "args": {"message": "hello"}, "n": n}));
        assert_eq!(r["ok"], true, "{r}");
        r["us"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
    };
    let mut direct = Client::new(&w, "bench", everything());
    direct.init();
    bench(&mut direct, 20);
    let d = median(bench(&mut direct, 200));
    direct.close();
    let mut proxied = Client::proxy(&w, "bench", &runbook("echo-only.json"), &[], &[everything()]);
    proxied.init();
    bench(&mut proxied, 20);
    let p = median(bench(&mut proxied, 200));
    assert_eq!(proxied.close(), Some(0));
    // A run of exactly 100 calls.
    let mut hundred = Client::proxy(&w, "bench", &runbook("echo-only.json"), &[], &[everything()]);
    hundred.init();
    bench(&mut hundred, 100);
    assert_eq!(hundred.close(), Some(0));
    let run = w.latest();
    let size = dir_size(&run);
    let ev = std::fs::metadata(run.join("events.ndjson")).unwrap().len();
    let line = format!(
        "proxy latency: median tools/call {p} us through runbook-host run, {d} us direct, {} us added (200 echo calls each); bundle of a 100-call run: {size} bytes ({ev} in events.ndjson, {} events)",
        p.saturating_sub(d),
        events(&run).len()
    );
    eprintln!("{line}");
    println!("{line}");
    w.verify_all();
}

#[test]
fn servers_from_an_mcp_config_file_whose_arguments_hold_dashes() {
    // A server whose own arguments hold `--` cannot be given after `run REF --`: the command line splits
    // there. In the `.mcp.json` shape it can: here `sh -c 'exec "$SERVER"' -- ignored`, the server's path
    // in its `env` and a `${VAR:-default}` expanded.
    let w = work("mcp-config");
    let cfg = w.dir.join("mcp.json");
    let config = json!({"mcpServers": {"everything": {
        "command": "sh",
        "args": ["-c", "exec \"$SERVER\"", "--", "ignored"],
        "env": {"SERVER": everything()[0], "UNUSED": "${RUNBOOK_TEST_SURELY_UNSET:-fallback}"}
    }}});
    std::fs::write(&cfg, config.to_string()).unwrap();
    let cmd = vec![BIN.to_string(), "run".into(), runbook("everything-tour.yaml"), "--mcp-config".into(), cfg.to_string_lossy().into_owned()];
    let mut c = Client::new(&w, "test-agent", cmd);
    c.init();
    assert_eq!(c.list(), ["echo", "runbook_status", "runbook_advance"]);
    let r = c.call("echo", json!({"message": "through the config"}));
    assert_eq!(text(&r), "Echo: through the config");
    assert_blocked(&c.call("get-env", json!({})), "undeclared-tool");
    // Both ways at once, or a config the reader does not understand, start nothing.
    let both = common::cmd(BIN).args(["run", &runbook("everything-tour.yaml"), "--mcp-config", cfg.to_str().unwrap(), "--", "node"]).output().unwrap();
    assert_eq!(both.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both.stderr).contains("not both"), "{}", String::from_utf8_lossy(&both.stderr));
    std::fs::write(&cfg, r#"{"mcpServers": {"remote": {"type": "sse", "url": "https://example.invalid/sse"}}}"#).unwrap();
    let sse = common::cmd(BIN).args(["run", &runbook("everything-tour.yaml"), "--mcp-config", cfg.to_str().unwrap()]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(sse.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&sse.stderr).contains("mcpServers.remote.type: `sse` servers are not supported"),
        "{}",
        String::from_utf8_lossy(&sse.stderr)
    );
}

/// Everything of MCP but tools passes through by default (server-everything's resources listed and read,
/// its prompts listed, as directly) and is recorded in `traffic.ndjson`; `--block` withholds it (not
/// advertised, refused, the refusal recorded).
#[test]
fn resources_and_prompts_pass_through_unless_blocked() {
    let w = work("passthrough");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--block", "resources,prompts"], &[everything()]);
    c.init();
    let r = c.ask(json!({"op": "resources"}));
    assert_eq!(r["ok"], false, "{r}");
    assert!(r.to_string().contains("-32601") && r.to_string().contains("withholds"), "{r}");
    assert_eq!(c.close(), Some(1));

    let mut direct = Client::new(&w, "test-agent", everything());
    direct.init();
    let alone = direct.ask(json!({"op": "resources"}));
    direct.close();
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &[], &[everything()]);
    c.init();
    let r = c.ask(json!({"op": "resources"}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["advertised"], json!({"resources": true, "prompts": true}));
    assert!(!r["resources"].as_array().unwrap().is_empty(), "{r}");
    assert_eq!((&r["resources"], &r["read"], &r["prompts"]), (&alone["resources"], &alone["read"], &alone["prompts"]), "the same as the server alone");
    assert_eq!(c.close(), Some(1));
    w.verify_all();

    // Every request of both runs is in its bundle's traffic.ndjson: digests, never the content.
    let runs = w.run_dirs();
    let traffic =
        |run: &Path| -> Vec<Value> { std::fs::read_to_string(run.join("traffic.ndjson")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect() };
    let withheld = traffic(&runs[0]);
    assert_eq!(withheld.len(), 1, "{withheld:?}");
    assert_eq!((&withheld[0]["method"], &withheld[0]["error_code"], &withheld[0]["answer_sha256"]), (&json!("resources/list"), &json!(-32601), &Value::Null));
    let passed = traffic(runs.last().unwrap());
    let methods: Vec<&str> = passed.iter().map(|l| l["method"].as_str().unwrap()).collect();
    assert_eq!(methods, ["resources/list", "resources/read", "prompts/list"]);
    let first = r["resources"][0].as_str().unwrap();
    let text = std::fs::read_to_string(runs.last().unwrap().join("traffic.ndjson")).unwrap();
    assert!(!text.contains(first), "the URI read is digested, not written: {text}");
    for (i, l) in passed.iter().enumerate() {
        assert_eq!((&l["n"], &l["direction"], &l["server"], &l["error_code"]), (&json!(i + 1), &json!("to-server"), &json!("everything"), &Value::Null), "{l}");
        assert_eq!(l["answer_sha256"].as_str().map(str::len), Some(64), "{l}");
    }
    // A line dropped from it is caught by `verify`.
    let last = runs.last().unwrap();
    let kept: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(last.join("traffic.ndjson"), kept).unwrap();
    let (ok, out) = verify(last);
    assert!(!ok && out.contains("traffic.ndjson:1"), "{out}");
}

/// A server's own requests (sampling, elicitation, roots) and its log messages, sent while a call runs,
/// reach the proxy's client unless `--block` names them. Withheld, the server is answered the protocol's
/// error and the client is asked nothing; passed to a client that does not offer them, the server is
/// answered that the client does not; passed to one that does, the server gets its answers.
#[test]
fn server_requests_reach_the_client_unless_blocked() {
    let w = work("asking");
    let asking = runbook("asking.yaml");
    let proxy = |args: &[&str]| -> Vec<String> {
        let mut v = vec![BIN.to_string(), "run".into(), asking.clone()];
        v.extend(args.iter().map(|s| s.to_string()));
        v.push("--".into());
        v.extend(asking_server());
        v
    };
    let client = |answer: bool, cmd: Vec<String>| {
        let mut args = vec!["--name".to_string(), "test-agent".into()];
        if answer {
            args.push("--answer".into());
        }
        args.push("--".into());
        args.extend(cmd);
        let mut c = Client::spawn(&w, &args);
        c.init();
        c
    };

    // Withheld: every request refused by the proxy, the client asked nothing.
    let mut c = client(true, proxy(&["--block", "sampling,elicitation,roots,logging"]));
    let (got, asked) = ask_through(&mut c, "why?");
    for k in ["sampled", "elicited", "roots"] {
        let e = got[k].as_str().unwrap_or_else(|| panic!("{k} was answered: {got}"));
        assert!(e.starts_with("error:") && e.contains("withholds"), "{k}: {got}");
    }
    assert_eq!((&asked["asked"], &asked["logs"]), (&json!([]), &json!([])), "{asked}");
    assert_eq!(c.close(), Some(0), "the run completes");

    // Passed (the default), to a client that offers none of them: the server hears that the client does not.
    let mut c = client(false, proxy(&[]));
    let (got, asked) = ask_through(&mut c, "why?");
    for k in ["sampled", "elicited", "roots"] {
        let e = got[k].as_str().unwrap_or_else(|| panic!("{k} was answered: {got}"));
        assert!(e.contains("does not offer"), "{k}: {got}");
    }
    assert_eq!(asked["asked"], json!([]), "{asked}");
    assert_eq!(c.close(), Some(0), "the run completes");

    // Passed, to a client that answers: the server gets the client's own answers, the client the log.
    let mut c = client(true, proxy(&[]));
    let (got, asked) = ask_through(&mut c, "why?");
    assert_eq!(got, json!({"sampled": "sampled: why?", "elicited": {"action": "accept", "answer": "yes"}, "roots": ["file:///project"]}));
    assert_eq!(asked["asked"], json!([{"sampling": "why?"}, {"elicitation": "may I? why?"}, {"roots": true}]));
    assert_eq!(asked["logs"], json!([{"level": "info", "data": "asking: why?"}]));
    assert_eq!(c.close(), Some(0), "the run completes");
    w.verify_all();

    // Each run's traffic.ndjson holds what the server asked of the client, and how it was answered.
    let asked_of = |run: &Path| -> Vec<(String, Value)> {
        std::fs::read_to_string(run.join("traffic.ndjson"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .inspect(|l| assert_eq!((&l["direction"], &l["server"]), (&json!("to-client"), &json!("asking")), "{l}"))
            .map(|l| (l["method"].as_str().unwrap().to_string(), l["error_code"].clone()))
            .collect()
    };
    let runs = w.run_dirs();
    let methods = ["sampling/createMessage", "elicitation/create", "roots/list"];
    let withheld: Vec<(String, Value)> = methods.iter().map(|m| (m.to_string(), json!(-32601))).collect();
    assert_eq!(asked_of(&runs[0]), withheld, "withheld: refused by the proxy");
    assert_eq!(asked_of(&runs[1]), withheld, "a client without the capabilities: refused by the proxy");
    assert_eq!(asked_of(&runs[2]), methods.iter().map(|m| (m.to_string(), Value::Null)).collect::<Vec<_>>(), "answered by the client");
}
