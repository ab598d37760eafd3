//! MCP messages into the proxy, as a client sends them: the real handler (`runbook_host::adapters::mcp`,
//! rmcp's parsing of JSON-RPC, the proxy's supervision of each request) over an in-memory pipe, in front of
//! host/tests/mcp/bad_server.py's tools served in this process over another pipe (`ServerStream`:
//! host/tests/it/common/memory_server.rs, started once) and fuzz/mcp-runbook.yaml. Each input is
//! one client session: a fixed `initialize` handshake (skipped when the first byte is 0, so the handshake
//! is fuzzed too), then up to 64 lines, each written to the proxy; a line that is a request waits for its
//! answer (at most 30 ms of the runtime's paused clock, which costs no wall time; after two unanswered
//! requests, no more). The client then closes its side and the run ends. The runs' bundles are written
//! into a `MemoryStore` (`Base::store`): no file, no fsync, no `git` per input; `verify` reads each ended
//! run's files from the store (`MemoryStore::bundle`).
//!
//! A crash is a panic anywhere in the proxy, a call the server received that no allowed invoke recorded
//! first (counted over the whole fuzzing session, so that a late call is never blamed on the wrong input),
//! or a bundle of an ended run that `verify` refuses.
#![no_main]
#[path = "../../host/tests/it/common/memory_server.rs"]
mod memory_server;
use libfuzzer_sys::fuzz_target;
use runbook_host::adapters::mcp::{self, Base, Hub, ServerSpec, ServerStream, Upstream};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

struct World {
    rt: tokio::runtime::Runtime,
    hub: Arc<Hub>,
    /// The calls the server received, over the whole fuzzing session.
    served: Arc<AtomicUsize>,
    store: runbook_host::bundle::MemoryStore,
    _said: tokio::sync::mpsc::UnboundedReceiver<mcp::Said>,
}

static ALLOWED_INVOKES: AtomicUsize = AtomicUsize::new(0);

fn scratch() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    base.join(format!("runbook-fuzz-mcp-{}", std::process::id()))
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        // What earlier fuzzer processes left (a crash ends a process without cleaning up).
        for e in std::fs::read_dir(scratch().parent().unwrap()).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.strip_prefix("runbook-fuzz-mcp-").is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = scratch();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        // One thread and tokio's paused clock: the proxy, the server and the client take their turns in one
        // order for a given input, and a wait (a request left unanswered, an approval's time-out) costs no
        // wall time, since the clock jumps to the next timer whenever every task waits. No IO driver: the
        // pipes are in memory, and without one the runtime does not poll epoll or write an eventfd between
        // tasks (about a tenth of an input's time before).
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let policy = Arc::clone(runbook_host::files::shared_policy().expect("the embedded component loads"));
        let doc = runbook_host::registry::resolve(&repo.join("fuzz/mcp-runbook.yaml").to_string_lossy(), "unused").expect("fuzz/mcp-runbook.yaml");
        let envelope = policy.envelope(&doc.bytes).unwrap().ok().and_then(|e| serde_json::from_str(&e).ok());
        let (tx, said) = tokio::sync::mpsc::unbounded_channel();
        let (pipe, served) = rt.block_on(async { memory_server::spawn() });
        let spec = ServerSpec { stream: Some(ServerStream::new(pipe)), ..Default::default() };
        let upstream =
            rt.block_on(Upstream::start(&[spec], &[], Duration::from_secs(60), Duration::from_millis(20), Vec::new(), tx)).expect("the in-memory server starts");
        let runs = dir.join("runs");
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
            approval_timeout: Duration::from_millis(5),
            approve_via_elicitation: false,
            signers: None,
            runs: runs.clone(),
            store: Some(store.shared()),
            registry: dir.join("registry").display().to_string(),
            receipt_key: None,
            shadow: false,
            guard_paths: Vec::new(),
            session_idle: Duration::from_secs(60),
        });
        World { rt, hub: Hub::new(base), served, store, _said: said }
    })
}

const HANDSHAKE: [&str; 2] = [
    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
];

/// Plays the session; the proxy's answers are drained as they come (a request's line waits for its own).
async fn session(hub: &Hub, lines: Vec<Vec<u8>>) -> (u8, Option<PathBuf>) {
    let (client, proxy) = tokio::io::duplex(1 << 16);
    let (pr, pw) = tokio::io::split(proxy);
    let (cr, mut cw) = tokio::io::split(client);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let reader = tokio::spawn(async move {
        let mut r = tokio::io::BufReader::new(cr).lines();
        while let Ok(Some(l)) = r.next_line().await {
            if let Ok(v) = serde_json::from_str::<Value>(&l) {
                let _ = tx.send(v);
            }
        }
    });
    let client = async move {
        // A proxy that left two requests unanswered (no handshake yet, a request it does not take) is
        // not waited for again in this session (each wait was once 30 ms of wall time).
        let mut unanswered = 0;
        for line in lines {
            if cw.write_all(&line).await.is_err() || cw.write_all(b"\n").await.is_err() {
                break;
            }
            let id = serde_json::from_slice::<Value>(&line).ok().filter(|v| v.get("method").is_some()).and_then(|v| v.get("id").cloned());
            if let Some(id) = id.filter(|_| unanswered < 2) {
                let answered = tokio::time::timeout(Duration::from_millis(30), async {
                    while let Some(v) = rx.recv().await {
                        if v.get("id") == Some(&id) {
                            break;
                        }
                    }
                })
                .await;
                if answered.is_err() {
                    unanswered += 1;
                }
            }
        }
        let _ = cw.shutdown().await;
    };
    let (out, ()) = tokio::join!(mcp::serve_stream(hub, pr, pw), client);
    reader.abort();
    out
}

fuzz_target!(init: { world(); }, |data: &[u8]| {
    let w = world();
    let (raw, rest) = match data.split_first() {
        Some((0, rest)) => (true, rest),
        _ => (false, data.get(1..).unwrap_or_default()),
    };
    let mut lines: Vec<Vec<u8>> = if raw { Vec::new() } else { HANDSHAKE.iter().map(|l| l.as_bytes().to_vec()).collect() };
    lines.extend(rest.split(|b| *b == b'\n').take(64).map(<[u8]>::to_vec));
    let (_code, dir) = w.rt.block_on(session(&w.hub, lines));
    if let Some(dir) = dir {
        let run_id = dir.file_name().unwrap().to_string_lossy().into_owned();
        let events = String::from_utf8(w.store.get(&format!("{run_id}/events.ndjson")).unwrap_or_default()).unwrap_or_default();
        let allowed = events
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["event"]["type"] == "invoke" && l["decision"]["decision"] == "allow")
            .count();
        ALLOWED_INVOKES.fetch_add(allowed, Ordering::SeqCst);
        let bundle = w.store.bundle(&run_id).expect("the ended run's directory is in the store");
        let o = runbook_host::bundle::verify::verify_bundle(&bundle, None, &[]);
        if let Some(f) = o.failure {
            panic!("the proxy's bundle does not verify: {}: {}\n{events}", f.place, f.message);
        }
    }
    // The store would grow with every input.
    w.store.clear();
    let served = w.served.load(Ordering::SeqCst);
    let recorded = ALLOWED_INVOKES.load(Ordering::SeqCst);
    assert!(served <= recorded, "the server received {served} calls; only {recorded} allowed invokes were recorded");
});
