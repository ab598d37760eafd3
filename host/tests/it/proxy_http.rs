//! The MCP proxy over Streamable HTTP (`runbook-host run --listen`) and servers reached by URL, with real
//! peers: the Python MCP SDK's Streamable HTTP client (`tests/mcp/client.py --url`) on both protocol
//! revisions, `@modelcontextprotocol/server-everything` and `server-filesystem` over stdio, and a remote
//! server on the Python SDK served over HTTPS with a test CA (`tests/mcp/remote_server.py`).
//!
//! Each test checks what the client saw, what reached the servers, what the bundles hold, and that
//! `runbook-host verify` passes on every bundle it produced.

use crate::common;
use crate::common::mcp::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `runbook-host run REF ARGS --listen 127.0.0.1:0 -- SERVERS`, its URL read from its standard error.
struct Listening {
    child: Child,
    url: String,
    log: PathBuf,
}

fn listen(w: &Work, reference: &str, args: &[&str], servers: &[Vec<String>]) -> Listening {
    let log = w.dir.join(format!("proxy-{}.stderr", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()));
    let mut cmd = common::cmd(BIN);
    cmd.args(["run", reference, "--listen", "127.0.0.1:0"]).args(args);
    for s in servers {
        cmd.arg("--").args(s);
    }
    let child = cmd.current_dir(&w.dir).stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    let mut l = Listening { child, url: String::new(), log };
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let text = l.stderr();
        if let Some(rest) = text.split("listening on ").nth(1) {
            l.url = rest.split_whitespace().next().unwrap().to_string();
            return l;
        }
        if let Ok(Some(code)) = l.child.try_wait() {
            panic!("the proxy exited ({code}) before listening:\n{text}");
        }
        assert!(Instant::now() < deadline, "the proxy did not listen in time:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Listening {
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the proxy to exit by itself; its exit code.
    fn wait(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the proxy did not exit:\n{}", self.stderr());
    }

    /// SIGTERM, as an operator stops it; its exit code.
    fn stop(&mut self) -> Option<i32> {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.wait(Duration::from_secs(30))
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test CA and a certificate for 127.0.0.1 it signed (openssl): (ca.pem, cert.pem, key.pem).
fn test_ca(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let d = dir.join("pki");
    std::fs::create_dir_all(&d).unwrap();
    let run = |args: &[&str]| {
        let o = common::cmd("openssl").args(args).current_dir(&d).output().expect("openssl runs");
        assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(&[&["req", "-x509"][..], &ec, &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=runbook-host test CA"]].concat());
    run(&[&["req"][..], &ec, &["-keyout", "key.pem", "-out", "srv.csr", "-subj", "/CN=127.0.0.1"]].concat());
    std::fs::write(d.join("ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n").unwrap();
    run(&["x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "cert.pem", "-days", "2", "-extfile", "ext"]);
    (d.join("ca.pem"), d.join("cert.pem"), d.join("key.pem"))
}

/// tests/mcp/remote_server.py over HTTPS; its URL and the file where it logs each call that reached it.
struct Remote {
    child: Child,
    url: String,
    calls: PathBuf,
}

fn remote(w: &Work, cert: &Path, key: &Path) -> Remote {
    remote_with(w, &["--cert", cert.to_str().unwrap(), "--key", key.to_str().unwrap()])
}

fn remote_with(w: &Work, args: &[&str]) -> Remote {
    let calls = w.dir.join("remote-calls.ndjson");
    let mut child = common::cmd(mcp_dir().join(".venv/bin/python"))
        .arg(mcp_dir().join("remote_server.py"))
        .args(args)
        .args(["--log", calls.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(w.dir.join("remote.stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().strip_prefix("PORT ").unwrap_or_else(|| panic!("no port from the remote server: {line:?}"));
    // uvicorn listens on the socket it was given; wait until it answers TLS.
    let scheme = if args.contains(&"--cert") { "https" } else { "http" };
    let url = format!("{scheme}://127.0.0.1:{port}/mcp");
    std::thread::sleep(Duration::from_millis(300));
    Remote { child, url, calls }
}

impl Remote {
    /// The tools that reached the server, in order.
    fn reached(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["tool"].as_str().unwrap().to_string())
            .collect()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kinds(run_dir: &Path) -> Vec<String> {
    events(run_dir).iter().map(|(e, _)| e["type"].as_str().unwrap().to_string()).collect()
}

#[test]
fn each_session_is_a_run_and_requests_without_one_share_the_proxy_s_run() {
    let w = work("http-sessions");
    let mut p = listen(&w, &runbook("everything-tour.yaml"), &[], &[everything()]);
    // Two 2025-11-25 clients: a session, so a run, each.
    let mut a = Client::url(&w, "agent-a", &p.url);
    let mut b = Client::url(&w, "agent-b", &p.url);
    assert_eq!(a.init()["protocol"], "2025-11-25");
    b.init();
    assert_eq!(a.list(), ["echo", "runbook_status", "runbook_advance"], "a session is shown its step's scope");
    assert_eq!(text(&a.call("echo", json!({"message": "from a"}))), "Echo: from a");
    assert_blocked(&a.call("get-env", json!({})), "undeclared-tool");
    assert_blocked(&b.call("get-tiny-image", json!({})), "undeclared-tool");
    assert_eq!(a.status()["agent"], "agent-a");
    assert_eq!(b.status()["agent"], "agent-b");
    a.close();
    b.close();
    // A 2026-07-28 client: no session; its requests go to the proxy's one stateless run.
    let mut c = Client::url(&w, "agent-c", &p.url);
    let d = c.ask(json!({"op": "discover"}));
    assert_eq!(d["protocol"], "2026-07-28", "{d}");
    assert!(c.list().contains(&"get-sum".to_string()), "without a session the allowlist is listed (no list_changed to follow)");
    assert_eq!(text(&c.call("echo", json!({"message": "from c"}))), "Echo: from c");
    assert_blocked(&c.call("get-env", json!({})), "undeclared-tool");
    c.close();
    let code = p.stop();
    assert_eq!(code, Some(1), "no run completed:\n{}", p.stderr());
    // server-everything announces tools/list_changed once it runs: the proxy heard it and listed again.
    assert!(p.stderr().contains("server `everything` changed its tools"), "{}", p.stderr());
    let runs = w.run_dirs();
    assert_eq!(runs.len(), 3, "{}", p.stderr());
    let mut agents = Vec::new();
    for r in &runs {
        let ev = events(r);
        agents.push(ev[0].0["agent"].as_str().unwrap_or("").to_string());
        let last = &ev.last().unwrap().0;
        assert_eq!(last["type"], "end");
        let reason = if ev[0].0["agent"] == "agent-c" { "interrupted" } else { "normal" };
        assert_eq!(last["reason"], reason, "{}: the session's DELETE ends its run; SIGTERM the stateless one", r.display());
        assert!(ev.iter().any(|(e, d)| e["type"] == "invoke" && d["deviation"] == "undeclared-tool"), "the blocked call is recorded in {}", r.display());
    }
    agents.sort();
    assert_eq!(agents, ["agent-a", "agent-b", "agent-c"]);
    w.verify_all();
}

#[test]
fn a_session_left_idle_ends_client_closed_never_completed() {
    // A runbook without steps completes on the final output; a session that merely went quiet must not.
    let w = work("http-idle");
    let doc = mcp_dir().join("conformance/runbooks/everything-all.yaml");
    let p = listen(&w, doc.to_str().unwrap(), &["--session-idle", "2s"], &[everything()]);
    let mut c = Client::url(&w, "idle-agent", &p.url);
    c.init();
    assert_eq!(text(&c.call("echo", json!({"message": "then silence"}))), "Echo: then silence");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !p.stderr().contains("ended (client-closed)") {
        assert!(Instant::now() < deadline, "the idle session was not closed:\n{}", p.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    let run = w.latest();
    assert_eq!(kinds(&run), ["start", "invoke", "result", "end"], "no final output for an idle session");
    assert_ne!(report(&run)["outcome"], "completed");
    drop(c);
    w.verify_all();
}

#[test]
fn what_the_transport_refuses_never_reaches_a_run() {
    let w = work("http-refusals");
    let p = listen(&w, &runbook("everything-tour.yaml"), &[], &[everything()]);
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
    let post = |headers: &[(&str, &str)], body: &[u8]| -> (u16, String) {
        let mut r = agent.post(&p.url).header("content-type", "application/json").header("accept", "application/json, text/event-stream");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let mut resp = r.send(body).expect("an HTTP answer");
        (resp.status().as_u16(), resp.body_mut().read_to_string().unwrap_or_default())
    };
    let body = init.to_string();
    // A browser page of another site (any Origin but the proxy's own): 403; its own (same-origin): taken.
    assert_eq!(post(&[("origin", "https://evil.example")], body.as_bytes()).0, 403);
    assert_eq!(post(&[("origin", "http://localhost:1")], body.as_bytes()).0, 403, "another port is another origin");
    // A name that is not this machine (DNS rebinding): 403.
    assert_eq!(post(&[("host", "evil.example")], body.as_bytes()).0, 403);
    // A body over the bound: 413, before it is decoded.
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"message\":\"{}\"}}}}}}",
        "x".repeat(17 << 20)
    );
    // (the proxy answers 413 and closes as soon as the bound is passed, so the client may see the close
    // while it is still sending: either way nothing was decoded)
    let sent = agent.post(&p.url).header("content-type", "application/json").header("accept", "application/json, text/event-stream").send(big.as_bytes());
    match sent {
        Ok(resp) => assert_eq!(resp.status().as_u16(), 413),
        Err(e) => assert!(
            e.to_string().to_lowercase().contains("disconnect") || e.to_string().to_lowercase().contains("reset") || e.to_string().contains("pipe"),
            "{e}"
        ),
    }
    // A revision the proxy does not speak, named in the header: 400.
    let (status, said) =
        post(&[("mcp-protocol-version", "1999-01-01")], json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}).to_string().as_bytes());
    assert_eq!(status, 400, "{said}");
    // 2026-07-28: an Mcp-Method header that disagrees with the body's method: refused, the call not made.
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "smuggled"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": {}}}});
    let (status, said) = post(&[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/list")], call.to_string().as_bytes());
    assert!(status == 400 || said.contains("\"error\""), "{status} {said}");
    assert!(!said.contains("smuggled"), "the call was made: {said}");
    // Nothing of it opened a run; a proper client is still served.
    assert!(w.run_dirs().is_empty(), "a refused request opened a run: {:?}", w.run_dirs());
    // The proxy's own Origin (a same-origin request) is taken, as the suite's dns-rebinding-protection asks.
    let own = p.url.trim_end_matches("/mcp").to_string();
    assert_eq!(post(&[("origin", own.as_str())], body.as_bytes()).0, 200, "{own}");
    // A session's DELETE: 204 (the Python SDK takes rmcp's 202 for a failed termination).
    let resp = agent
        .post(&p.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .send(body.as_bytes())
        .expect("an HTTP answer");
    let session = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).expect("a session id").to_string();
    let deleted = agent.delete(&p.url).header("mcp-session-id", session.as_str()).call().expect("an HTTP answer");
    assert_eq!(deleted.status().as_u16(), 204);
    let mut c = Client::url(&w, "after", &p.url);
    c.init();
    assert_eq!(text(&c.call("echo", json!({"message": "ok"}))), "Echo: ok");
    c.close();
    drop(p);
}

#[test]
fn a_remote_server_over_https_progress_a_client_token_timeouts_and_a_crash() {
    let w = work("http-remote");
    let (ca, cert, key) = test_ca(&w.dir);
    let server = remote(&w, &cert, &key);
    let mut p = listen(&w, &runbook("remote.yaml"), &["--upstream-ca", ca.to_str().unwrap(), "--call-timeout", "2s"], &[vec![server.url.clone()]]);
    // The client sends a token of its own to the proxy: it must never reach the server.
    let mut c = Client::spawn(&w, &["--name", "remote-agent", "--url", &p.url, "--header", "Authorization:Bearer client-secret"]);
    c.init();
    assert_eq!(c.list(), ["whoami", "count", "shrink", "hang", "die", "runbook_status", "runbook_advance"]);
    let who: Value = serde_json::from_str(text(&c.call("whoami", json!({})))).unwrap();
    assert_eq!(who["authorization"], Value::Null, "the client's own token was passed through: {who}");
    // Progress of a forwarded call reaches the client under its own token.
    let r = c.ask(json!({"op": "call", "tool": "count", "args": {"n": 3}, "progress": true}));
    assert_eq!(text(&r), "counted 3");
    assert_eq!(r["progress"].as_array().map(Vec::len), Some(3), "{r}");
    // A server that does not answer: the call fails after --call-timeout, recorded.
    let r = c.call("hang", json!({}));
    assert_eq!(r["is_error"], true, "{r}");
    assert!(text(&r).contains("did not answer"), "{r}");
    // The client cancels a call: the cancellation reaches the server, and the run goes on.
    let r = c.ask(json!({"op": "cancel", "tool": "hang", "after": 1}));
    assert_eq!(r["cancelled"], true, "{r}");
    let deadline = Instant::now() + Duration::from_secs(20);
    // Two cancellations must arrive: the timed-out call's and this one's (waiting for the first alone
    // raced the server's death below).
    while server.reached().iter().filter(|t| *t == "hang-cancelled").count() < 2 {
        assert!(Instant::now() < deadline, "the cancellation did not reach the server: {:?}\n{}", server.reached(), p.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    // The server dies in the middle of a call: an error, never a result; so is every call after it, and
    // each is recorded.
    let r = c.ask(json!({"op": "call", "tool": "die", "args": {}}));
    assert!(r["ok"] == false || r["is_error"] == true, "{r}");
    let r = c.ask(json!({"op": "call", "tool": "whoami", "args": {}}));
    assert!(r["ok"] == false || r["is_error"] == true, "{r}");
    c.close();
    p.stop();
    let run = w.latest();
    let ev = events(&run);
    assert_eq!(ev.last().unwrap().0["type"], "end", "{:?}", kinds(&run));
    let failed: Vec<&str> = ev.iter().filter(|(e, _)| e["type"] == "result" && e["is_error"] == true).map(|(e, _)| e["tool"].as_str().unwrap()).collect();
    assert_eq!(failed, ["hang", "hang", "die", "whoami"], "the timed-out, the cancelled and the failed calls are recorded as failed");
    // Both the timed-out and the cancelled call were cancelled at the server (rmcp cancels a request that timed out).
    let reached = server.reached();
    let calls: Vec<&String> = reached.iter().filter(|t| *t != "hang-cancelled").collect();
    assert_eq!(calls, ["whoami", "count", "hang", "hang", "die"]);
    assert_eq!(reached.iter().filter(|t| *t == "hang-cancelled").count(), 2, "{reached:?}");
    w.verify_all();
}

/// `run remote.yaml --listen` in front of `url`, which must be refused before anything listens or runs:
/// exit 1, no listener, no run directory; its standard error.
fn start_refused(w: &Work, url: &str) -> String {
    let o = common::cmd(BIN)
        .args(["run", &runbook("remote.yaml"), "--listen", "127.0.0.1:0", "--", url])
        .current_dir(&w.dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("listening on"), "{err}");
    assert!(w.run_dirs().is_empty());
    err
}

#[test]
fn a_server_certificate_that_does_not_verify_starts_nothing() {
    let w = work("http-untrusted");
    let (_ca, cert, key) = test_ca(&w.dir);
    let server = remote(&w, &cert, &key);
    let err = start_refused(&w, &server.url);
    assert!(err.contains("runbook_failed:server-unavailable"), "{err}");
    assert!(err.to_lowercase().contains("certificate") || err.contains("UnknownIssuer"), "the reason is named: {err}");
    assert!(server.reached().is_empty());
}

#[test]
fn a_server_that_answers_garbage_starts_nothing() {
    let w = work("http-garbage");
    let server = remote_with(&w, &["--garbage"]);
    let err = start_refused(&w, &server.url);
    assert!(err.contains("runbook_failed:server-unavailable") && err.contains("failed to initialize"), "{err}");
}

#[test]
fn three_servers_from_an_mcp_config_one_remote_one_with_dashes_in_its_arguments() {
    let w = work("http-three");
    let (ca, cert, key) = test_ca(&w.dir);
    let server = remote(&w, &cert, &key);
    let files = w.dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("note.txt"), "hello\n").unwrap();
    let cfg = w.dir.join("mcp.json");
    let fs = filesystem(&files);
    let config = json!({"mcpServers": {
        "ev": {"command": "sh", "args": ["-c", "exec \"$SERVER\"", "--", "ignored"], "env": {"SERVER": everything()[0]}},
        "fs": {"command": fs[0], "args": [fs[1]]},
        "remote": {"type": "http", "url": server.url, "headers": {"Authorization": "Bearer ${RUNBOOK_TEST_REMOTE_TOKEN}", "X-Team": "ops"}}
    }});
    std::fs::write(&cfg, config.to_string()).unwrap();
    let cmd = vec![
        "env".to_string(),
        "RUNBOOK_TEST_REMOTE_TOKEN=t0k".into(),
        BIN.to_string(),
        "run".into(),
        runbook("three.yaml"),
        "--mcp-config".into(),
        cfg.to_string_lossy().into_owned(),
        "--upstream-ca".into(),
        ca.to_string_lossy().into_owned(),
    ];
    let mut c = Client::new(&w, "three-agent", cmd);
    c.init();
    assert_eq!(c.list(), ["ev.echo", "fs.list_directory", "remote.whoami", "runbook_status", "runbook_advance"]);
    assert_eq!(text(&c.call("ev.echo", json!({"message": "one"}))), "Echo: one");
    assert!(text(&c.call("fs.list_directory", json!({"path": files.to_str().unwrap()}))).contains("note.txt"));
    let who: Value = serde_json::from_str(text(&c.call("remote.whoami", json!({})))).unwrap();
    assert_eq!(who, json!({"authorization": "Bearer t0k", "x-team": "ops"}), "the configured headers reach the remote server");
    assert_blocked(&c.call("remote.count", json!({"n": 1})), "undeclared-tool");
    c.close();
    assert_eq!(server.reached(), ["whoami"], "the blocked call never reached the server");
    w.verify_all();
}

/// Over HTTP, a server's requests to the client (sampling, elicitation, roots) reach the client of the
/// call in flight, on that call's own stream, and so do its log messages; each client is asked only for
/// its own calls.
#[test]
fn server_requests_reach_the_calling_client_over_http() {
    let w = work("http-asking");
    let mut l = listen(&w, &runbook("asking.yaml"), &[], &[asking_server()]);
    let mut a = Client::spawn(&w, &["--name", "agent-a", "--answer", "--url", &l.url]);
    let mut b = Client::spawn(&w, &["--name", "agent-b", "--answer", "--url", &l.url]);
    a.init();
    b.init();
    for (c, q) in [(&mut a, "first?"), (&mut b, "second?")] {
        let (got, asked) = ask_through(c, q);
        assert_eq!(got, json!({"sampled": format!("sampled: {q}"), "elicited": {"action": "accept", "answer": "yes"}, "roots": ["file:///project"]}));
        assert_eq!(asked["asked"], json!([{"sampling": q}, {"elicitation": format!("may I? {q}")}, {"roots": true}]), "{asked}");
        assert_eq!(asked["logs"], json!([{"level": "info", "data": format!("asking: {q}")}]), "{asked}");
    }
    // Neither heard what the other was asked.
    for c in [&mut a, &mut b] {
        let asked = c.ask(json!({"op": "asked"}));
        assert_eq!((&asked["asked"], &asked["logs"]), (&json!([]), &json!([])), "{asked}");
    }
    a.close();
    b.close();
    l.stop();
    w.verify_all();
}

/// One JSON-RPC request of a 2026-07-28 client (no session; the revision, its capabilities and any log
/// level in `_meta`): the HTTP status and the answer (the last JSON-RPC response on an SSE stream) with
/// every notification the stream carried before it.
fn post_2026(url: &str, id: u64, method: &str, mut params: Value, capabilities: Value, log_level: Option<&str>) -> (u16, Value, Vec<Value>) {
    let mut meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities});
    if let Some(l) = log_level {
        meta["io.modelcontextprotocol/logLevel"] = json!(l);
    }
    params["_meta"] = meta;
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut r = agent.post(url).header("content-type", "application/json").header("accept", "application/json, text/event-stream");
    r = r.header("mcp-protocol-version", "2026-07-28").header("mcp-method", method);
    if let Some(name) = params.get("name").and_then(|n| n.as_str()) {
        r = r.header("mcp-name", name);
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    let mut resp = r.send(body.as_bytes()).expect("an HTTP answer");
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    let frames: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&text).expect("JSON")]
    } else {
        text.lines().filter_map(|l| l.strip_prefix("data:")).filter_map(|d| serde_json::from_str(d.trim()).ok()).collect()
    };
    let answer = frames.iter().rev().find(|f| f.get("id").is_some()).cloned().unwrap_or(Value::Null);
    let notes = frames.into_iter().filter(|f| f.get("method").is_some()).collect();
    (status, answer, notes)
}

#[test]
fn a_2026_client_is_asked_in_rounds_and_never_asked_what_it_did_not_declare() {
    let w = work("http-rounds-2026");
    let call_at = |url: &str, id, extra: Value, caps: Value, level| {
        let mut params = json!({"name": "ask", "arguments": {"question": "deploy?"}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        post_2026(url, id, "tools/call", params, caps, level)
    };
    let ask_results = |run: &Path| -> Vec<bool> {
        events(run).iter().filter(|(e, _)| e["type"] == "result" && e["tool"] == "ask").map(|(e, _)| e["is_error"].as_bool().unwrap()).collect()
    };
    // A client that declared nothing: the server's first request (sampling) is refused with -32021 and
    // HTTP 400, naming the capability as an object; nothing was asked of it, and the call is recorded as
    // failed. (A proxy of its own: over stdio the server's later requests of that cancelled call cannot be
    // told from another call's, see the README.)
    let mut l0 = listen(&w, &runbook("asking.yaml"), &[], &[asking_server()]);
    let (status, answer, _) = call_at(&l0.url, 1, json!({}), json!({}), None);
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], -32021, "{answer}");
    assert_eq!(answer["error"]["data"]["requiredCapabilities"], json!({"sampling": {}}), "{answer}");
    let run0 = w.latest();
    // (the refusal is recorded as the server's request ends, beside the client's answer: waited for, at most 10 s)
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(run0.join("traffic.ndjson")).unwrap_or_default().contains("sampling/createMessage") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    l0.stop();
    assert_eq!(ask_results(&run0), [true]);
    // The server's request the client was never asked is recorded as refused (an error code, no answer).
    let refused: Vec<Value> = std::fs::read_to_string(run0.join("traffic.ndjson")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(refused.iter().any(|t| t["method"] == "sampling/createMessage" && t["direction"] == "to-client" && t["error_code"].is_i64()), "{refused:?}");
    let mut l = listen(&w, &runbook("asking.yaml"), &[], &[asking_server()]);
    let call = |id, extra: Value, caps: Value, level| call_at(&l.url, id, extra, caps, level);
    // A client that declared all three is asked in three rounds, one request each, under the proxy's state.
    let caps = json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {}});
    let answers = [
        ("sampling/createMessage", json!({"role": "assistant", "content": {"type": "text", "text": "sampled: deploy?"}, "model": "scripted"})),
        ("elicitation/create", json!({"action": "accept", "content": {"answer": "yes"}})),
        ("roots/list", json!({"roots": [{"uri": "file:///project"}]})),
    ];
    let (status, mut answer, notes) = call(2, json!({}), caps.clone(), None);
    assert_eq!(status, 200, "{answer}");
    // No `logLevel` in its `_meta`: the server's log message is not sent to it.
    assert!(notes.iter().all(|n| n["method"] != "notifications/message"), "{notes:?}");
    let mut states = Vec::new();
    for (i, (method, reply)) in answers.iter().enumerate() {
        let r = &answer["result"];
        assert_eq!(r["resultType"], "input_required", "round {i}: {answer}");
        let requests = r["inputRequests"].as_object().expect("inputRequests");
        assert_eq!(requests.len(), 1, "{answer}");
        let (key, asked) = requests.iter().next().unwrap();
        assert_eq!(asked["method"], *method, "{answer}");
        let state = r["requestState"].as_str().expect("requestState").to_string();
        assert!(state.starts_with("runbook-proxy-round:"), "{state}");
        if i == 0 {
            // A state the proxy did not give (or gave for another call) is refused, and changes nothing.
            let (_, refused, _) = call(9, json!({"requestState": "runbook-proxy-round:00", "inputResponses": {key.clone(): reply}}), caps.clone(), None);
            assert_eq!(refused["error"]["code"], -32602, "{refused}");
        }
        states.push(state.clone());
        let (_, next, _) = call(3 + i as u64, json!({"requestState": state, "inputResponses": {key.clone(): reply}}), caps.clone(), None);
        answer = next;
    }
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    let said: Value = serde_json::from_str(answer["result"]["content"][0]["text"].as_str().expect("text")).unwrap();
    assert_eq!(said, json!({"sampled": "sampled: deploy?", "elicited": {"action": "accept", "answer": "yes"}, "roots": ["file:///project"]}));
    states.dedup();
    assert_eq!(states.len(), 3, "each round has a state of its own: {states:?}");
    l.stop();
    w.verify_all();
    // The stateless run recorded each request the server made of the client, with its answer's digest.
    let run = w.latest();
    let traffic = std::fs::read_to_string(run.join("traffic.ndjson")).expect("traffic.ndjson");
    let to_client: Vec<String> = traffic
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|t| t["direction"] == "to-client")
        .map(|t| t["method"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(to_client, ["sampling/createMessage", "elicitation/create", "roots/list"], "{traffic}");
    // The refused state is recorded as a failed result; the outcome as the last.
    assert_eq!(ask_results(&run), [true, false]);
}

/// A server that speaks 2026-07-28 (the conformance fixture, which the proxy reaches with
/// `server/discover`) asks through its answer: its own request, under its own key (`user_name`), reaches a
/// 2026-07-28 client under a `requestState` of the proxy's, and the client's answer under that key reaches
/// the server. The retry continues the call the module decided: one `invoke`, one `result`. A client that
/// did not declare elicitation is never asked it (-32021), and that call is recorded as failed.
#[test]
fn a_2026_server_s_own_input_requests_reach_a_2026_client_and_its_answers_the_server() {
    let w = work("http-relay-2026");
    let registry = mcp_dir().join("conformance/registry");
    let mut l = listen(&w, "fixture-all@1.0.0", &["--registry", registry.to_str().unwrap()], &[fixture()]);
    let tool = "test_input_required_result_elicitation";
    let call = |id, extra: Value, caps: Value| {
        let mut params = json!({"name": tool, "arguments": {}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        post_2026(&l.url, id, "tools/call", params, caps, None)
    };
    let caps = json!({"elicitation": {"form": {}}});
    let (status, answer, _) = call(1, json!({}), caps.clone());
    assert_eq!(status, 200, "{answer}");
    let r = &answer["result"];
    assert_eq!(r["resultType"], "input_required", "{answer}");
    let requests = r["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.keys().collect::<Vec<_>>(), ["user_name"], "the server's own key: {answer}");
    assert_eq!(requests["user_name"]["method"], "elicitation/create", "{answer}");
    assert_eq!(requests["user_name"]["params"]["message"], "What is your name?", "{answer}");
    let state = r["requestState"].as_str().expect("requestState").to_string();
    assert!(state.starts_with("runbook-proxy-round:"), "the proxy's own state, the server's held inside: {state}");
    let reply = json!({"action": "accept", "content": {"name": "Ada"}});
    let (_, done, _) = call(2, json!({"requestState": state, "inputResponses": {"user_name": reply}}), caps);
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Hello, Ada!", "the answer reached the server under its key: {done}");
    // A client that did not declare elicitation: -32021 naming it, nothing asked, the call recorded failed.
    let (status, refused, _) = call(3, json!({}), json!({}));
    assert_eq!((status, &refused["error"]["code"]), (400, &json!(-32021)), "{refused}");
    // (the server refuses it itself, told what the client declared; the proxy would otherwise)
    assert!(refused["error"]["data"]["requiredCapabilities"].get("elicitation").is_some(), "{refused}");
    l.stop();
    let run = w.latest();
    let of_tool = |kind: &str| -> Vec<Value> { events(&run).into_iter().filter(|(e, _)| e["type"] == kind && e["tool"] == tool).map(|(e, _)| e).collect() };
    let (invokes, results) = (of_tool("invoke"), of_tool("result"));
    // The retry is the call already decided: one invoke and one result for the answered call, under its id.
    assert_eq!((invokes.len(), results.len()), (2, 2), "{invokes:?} {results:?}");
    assert_eq!(results.iter().map(|e| e["is_error"].as_bool().unwrap()).collect::<Vec<_>>(), [false, true], "{results:?}");
    assert_eq!((&results[0]["call_id"], &results[1]["call_id"]), (&invokes[0]["call_id"], &invokes[1]["call_id"]), "{invokes:?} {results:?}");
    // The server's request and the client's answer are in the run's traffic (the refused call asked nothing).
    let traffic = std::fs::read_to_string(run.join("traffic.ndjson")).expect("traffic.ndjson");
    let to_client: Vec<Value> = traffic.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|t| t["direction"] == "to-client").collect();
    assert_eq!(to_client.iter().map(|t| t["method"].as_str().unwrap()).collect::<Vec<_>>(), ["elicitation/create"], "{traffic}");
    w.verify_all();
}
