//! The MCP proxy as a library, with its runs on a memory store (`Base::store`): no run directory exists,
//! so a gated call's approval must go through the run's own approval channel, never through files. The
//! client is a JSON-RPC script over an in-memory pipe (as the `mcp` fuzz target drives the proxy), in front
//! of host/tests/mcp/bad_server.py, either the real stdio process or the same server in this process over
//! a pipe (`ServerStream`, common/memory_server.rs), and fuzz/mcp-runbook.yaml (step `gated` needs a
//! human's approval for every call).

use crate::common::{repo, Tmp};
use runbook_host::adapters::mcp::{self, Base, Hub, ServerSpec, Upstream};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

struct Proxy {
    rt: tokio::runtime::Runtime,
    hub: Arc<Hub>,
    store: runbook_host::bundle::MemoryStore,
    server_log: std::path::PathBuf,
    /// The in-memory server's count of calls (None: the python process logs them to `server_log`).
    in_memory_calls: Option<Arc<std::sync::atomic::AtomicUsize>>,
    tmp: Tmp,
    _said: tokio::sync::mpsc::UnboundedReceiver<mcp::Said>,
}

/// Where the server runs.
#[derive(Clone, Copy, PartialEq)]
enum Server {
    Process,
    InMemory,
}

fn proxy(tag: &str, server: Server) -> Proxy {
    let tmp = Tmp::new(tag);
    let repo = repo();
    let server_log = tmp.join("server-calls.ndjson");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let policy = Arc::clone(runbook_host::files::shared_policy().expect("the embedded component loads"));
    let doc = runbook_host::registry::resolve(&repo.join("fuzz/mcp-runbook.yaml").to_string_lossy(), "unused").unwrap();
    let envelope = policy.envelope(&doc.bytes).unwrap().ok().and_then(|e| serde_json::from_str(&e).ok());
    let (tx, said) = tokio::sync::mpsc::unbounded_channel();
    let (spec, in_memory_calls) = match server {
        Server::Process => {
            let argv = vec!["python3".into(), repo.join("host/tests/mcp/bad_server.py").display().to_string(), server_log.display().to_string()];
            (ServerSpec { argv, ..Default::default() }, None)
        }
        Server::InMemory => {
            let (pipe, calls) = rt.block_on(async { crate::common::memory_server::spawn() });
            (ServerSpec { stream: Some(mcp::ServerStream::new(pipe)), ..Default::default() }, Some(calls))
        }
    };
    let upstream =
        rt.block_on(Upstream::start(&[spec], &[], Duration::from_secs(60), Duration::from_millis(100), Vec::new(), tx)).expect("python3 runs the server");
    let runs = tmp.join("runs");
    let store = runbook_host::bundle::MemoryStore::named(&runs);
    let base = Arc::new(Base {
        policy,
        doc,
        envelope,
        upstream,
        profile: runbook_host::Profile::R1,
        risk_ceiling: runbook_host::Risk::ReadOnly,
        list_allowlist: false,
        agent_override: None,
        approval_timeout: Duration::from_secs(30),
        approve_via_elicitation: true,
        signers: None,
        runs,
        store: Some(store.shared()),
        registry: tmp.join("registry").display().to_string(),
        receipt_key: None,
        shadow: false,
        guard_paths: Vec::new(),
        session_idle: Duration::from_secs(60),
    });
    Proxy { rt, hub: Hub::new(base), store, server_log, in_memory_calls, tmp, _said: said }
}

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn call(id: u64, tool: &str, args: Value) -> Value {
    rpc(id, "tools/call", json!({"name": tool, "arguments": args}))
}

/// One client session: each request waits for its answer; an `elicitation/create` from the proxy is
/// answered `decision` as `approver`. Returns the answers by request id, the proxy's exit code and the
/// run's id.
fn session(p: &Proxy, requests: Vec<Value>, approver: &str, decision: &str) -> (Vec<Value>, u8, String, Vec<Value>) {
    let (approver, decision) = (approver.to_string(), decision.to_string());
    p.rt.block_on(async {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (pr, pw) = tokio::io::split(server);
        let (cr, mut cw) = tokio::io::split(client);
        let (answers_tx, mut answers) = tokio::sync::mpsc::unbounded_channel::<Value>();
        let (replies_tx, mut replies) = tokio::sync::mpsc::unbounded_channel::<Value>();
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let asked_by_reader = Arc::clone(&asked);
        let reader = tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(cr).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let v: Value = serde_json::from_str(&l).expect("the proxy writes JSON lines");
                if v["method"] == "elicitation/create" {
                    asked_by_reader.lock().unwrap().push(v["params"].clone());
                    let content = json!({"decision": decision, "approver": approver});
                    let _ = replies_tx.send(json!({"jsonrpc": "2.0", "id": v["id"], "result": {"action": "accept", "content": content}}));
                } else if v.get("id").is_some() && v.get("method").is_none() {
                    let _ = answers_tx.send(v);
                }
            }
        });
        let client = async move {
            let init = rpc(
                0,
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "memory-test", "version": "1"}}),
            );
            let mut out = Vec::new();
            let send = |v: &Value| {
                let mut line = serde_json::to_vec(v).unwrap();
                line.push(b'\n');
                line
            };
            let mut lines = vec![init];
            lines.push(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
            lines.extend(requests);
            for req in lines {
                cw.write_all(&send(&req)).await.unwrap();
                let Some(id) = req.get("id").cloned() else { continue };
                loop {
                    tokio::select! {
                        Some(a) = answers.recv() => if a["id"] == id { out.push(a); break },
                        Some(r) = replies.recv() => cw.write_all(&send(&r)).await.unwrap(),
                        _ = tokio::time::sleep(Duration::from_secs(60)) => panic!("no answer to {req}"),
                    }
                }
            }
            cw.shutdown().await.unwrap();
            out
        };
        let ((code, dir), out) = tokio::join!(mcp::serve_stream(&p.hub, pr, pw), client);
        reader.abort();
        let run_id = dir.expect("a run was started").file_name().unwrap().to_string_lossy().into_owned();
        let asked = asked.lock().unwrap().clone();
        (out, code, run_id, asked)
    })
}

/// The answer to request `id`.
fn answer(answers: &[Value], id: u64) -> &Value {
    answers.iter().find(|a| a["id"] == id).unwrap_or_else(|| panic!("no answer to request {id}: {answers:?}"))
}

fn text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

fn events(p: &Proxy, run_id: &str) -> Vec<Value> {
    let raw = p.store.get(&format!("{run_id}/events.ndjson")).expect("the run's events are in the store");
    String::from_utf8(raw).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn verify(p: &Proxy, run_id: &str) -> Value {
    let bundle = p.store.bundle(run_id).expect("the run's directory is in the store");
    let o = runbook_host::bundle::verify::verify_bundle(&bundle, None, &[]);
    assert!(o.failure.is_none(), "the bundle does not verify: {:?}", o.failure.map(|f| format!("{}: {}", f.place, f.message)));
    serde_json::from_slice(&bundle.0["report.json"]).unwrap()
}

fn served(p: &Proxy) -> usize {
    match &p.in_memory_calls {
        Some(n) => n.load(std::sync::atomic::Ordering::SeqCst),
        None => std::fs::read_to_string(&p.server_log).map(|t| t.lines().count()).unwrap_or(0),
    }
}

#[test]
fn a_gated_call_on_a_memory_store_is_approved_through_the_runs_channel() {
    let p = proxy("proxy-memory-approve", Server::Process);
    let requests = vec![
        call(1, "ok", json!({})),
        call(2, "runbook_advance", json!({"to": "gated"})),
        call(3, "ok", json!({"n": 1})),
        call(4, "runbook_status", json!({})),
    ];
    let (answers, _code, run_id, asked) = session(&p, requests, "alice", "approve");
    assert_eq!(asked.len(), 1, "the client was asked once: {asked:?}");
    assert!(asked[0]["message"].as_str().unwrap().contains("`gated`"), "{asked:?}");
    let gated = answer(&answers, 3);
    assert!(gated["result"]["isError"] != true && text(gated) == "ok", "the server's answer is passed on: {gated}");
    assert!(p.tmp.join("runs").read_dir().is_err(), "a run on a memory store wrote a directory");
    let evs = events(&p, &run_id);
    let grant = evs.iter().find(|l| l["event"]["type"] == "approval").expect("the approval is recorded");
    assert_eq!((&grant["event"]["approver"], &grant["event"]["granted"]), (&json!("alice"), &json!(true)), "{grant}");
    assert_eq!(served(&p), 2, "both calls reached the server");
    let rep = verify(&p, &run_id);
    assert_eq!(rep["approvals"][0]["accepted"], true, "{rep}");
}

#[test]
fn a_gated_call_on_a_memory_store_denied_through_the_runs_channel_never_runs() {
    let p = proxy("proxy-memory-deny", Server::InMemory);
    let requests = vec![call(1, "runbook_advance", json!({"to": "gated"})), call(2, "ok", json!({"n": 2}))];
    let (answers, _code, run_id, asked) = session(&p, requests, "bob", "deny");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let gated = answer(&answers, 2);
    assert_eq!(gated["result"]["isError"], true, "{gated}");
    assert!(text(gated).starts_with("needs-approval"), "{gated}");
    assert_eq!(served(&p), 0, "a refused call reached the server");
    let evs = events(&p, &run_id);
    assert!(evs.iter().any(|l| l["event"]["type"] == "approval" && l["event"]["granted"] == false), "{evs:?}");
    verify(&p, &run_id);
}

#[test]
fn a_server_in_this_process_over_a_pipe_is_supervised_like_a_process() {
    let p = proxy("proxy-memory-pipe", Server::InMemory);
    let requests = vec![
        rpc(1, "tools/list", json!({})),
        call(2, "ok", json!({})),
        call(3, "wrong_id", json!({})),
        call(4, "garbage", json!({})),
        call(5, "ok", json!({"again": true})),
    ];
    let (answers, _code, run_id, _) = session(&p, requests, "nobody", "deny");
    let mut listed: Vec<&str> = answer(&answers, 1)["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    listed.sort();
    // The runbook's tools of the current step and those of the server it declares, and the proxy's own.
    assert!(listed.contains(&"ok") && !listed.contains(&"garbage") && !listed.contains(&"hang"), "{listed:?}");
    assert_eq!(text(answer(&answers, 2)), "ok");
    // An answer under another id is never taken for this call's: the call times out, as an error.
    assert_eq!(answer(&answers, 3)["result"]["isError"], true, "{}", answer(&answers, 3));
    // `garbage` is not in the runbook: blocked before the server sees it.
    assert_eq!(answer(&answers, 4)["result"]["isError"], true, "{}", answer(&answers, 4));
    assert_eq!(text(answer(&answers, 5)), "ok");
    assert_eq!(served(&p), 3, "ok, wrong_id and ok reached the server; garbage did not");
    let evs = events(&p, &run_id);
    let allowed = evs.iter().filter(|l| l["event"]["type"] == "invoke" && l["decision"]["decision"] == "allow").count();
    assert_eq!(allowed, 3, "{evs:?}");
    verify(&p, &run_id);
}
