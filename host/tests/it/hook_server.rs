//! `runbook-host hook serve`, the resident hook server, over real HTTP with a keep-alive client (one
//! `ureq` agent per test, its connections pooled): the same payloads Claude Code's `http` hooks POST,
//! the rejections of requests that must never be decided, concurrency within and across sessions, a
//! kill -9 and the resume of every open run, and the same decisions, byte for byte, as the command hook.

use crate::common;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::hooks::*;

/// A server started in a work directory (`hook serve --port 0`), killed when dropped.
struct Server {
    child: Child,
    port: u16,
    token: String,
    agent: ureq::Agent,
    dir: PathBuf,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(60))).build().into()
}

impl Server {
    fn start(w: &Work, extra: &[&str]) -> Server {
        Server::start_env(w, extra, &[])
    }

    /// [`Server::start`] with more environment (the crash points of `runbook_host::faults`).
    fn start_env(w: &Work, extra: &[&str], env: &[(&str, String)]) -> Server {
        Server::start_under(w, &[], extra, env)
    }

    /// [`Server::start_env`] under a program that then execs the server (`prlimit ... --`).
    fn start_under(w: &Work, wrapper: &[&str], extra: &[&str], env: &[(&str, String)]) -> Server {
        let info = w.runs().join(".hook/server/server.json");
        let _ = std::fs::remove_file(&info);
        std::fs::create_dir_all(w.runs()).unwrap();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(w.0.join("serve.log")).unwrap();
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = common::cmd(program);
                c.args(args).arg(BIN);
                c
            }
            None => common::cmd(BIN),
        };
        let child = command
            .args(["hook", "serve", "--port", "0", "--runbook", "runbook.yaml"])
            .args(extra)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .current_dir(&w.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let t = Instant::now();
        let v: Value = loop {
            if let Some(v) = std::fs::read(&info).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()).filter(|v| v["pid"] == child.id()) {
                break v;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "the server did not start: {}", std::fs::read_to_string(w.0.join("serve.log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(10));
        };
        let token = std::fs::read_to_string(w.runs().join(".hook/server/token")).unwrap().trim().to_string();
        Server { child, port: v["port"].as_u64().unwrap() as u16, token, agent: agent(), dir: w.0.clone() }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/runbook-hook", self.port)
    }

    /// POSTs bytes with the server's token; the status and the body.
    fn post(&self, body: &[u8]) -> (u16, String) {
        let mut r =
            self.agent.post(&self.url()).header("Authorization", &format!("Bearer {}", self.token)).content_type("application/json").send(body).unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    }

    /// A hook event answered as the client reads it: a 200 is the command hook's exit 0 with the body
    /// as its stdout; anything else blocks (the command hook's exit 2).
    fn hook(&self, payload: Value) -> Out {
        let (status, body) = self.post(payload.to_string().as_bytes());
        if status == 200 {
            Out { code: 0, stdout: body, stderr: String::new() }
        } else {
            Out { code: 2, stdout: String::new(), stderr: format!("{status}: {body}") }
        }
    }

    /// [`Server::hook`], or None when nothing answered (the server died).
    fn try_hook(&self, payload: &Value) -> Option<Out> {
        let mut r = self
            .agent
            .post(&self.url())
            .header("Authorization", &format!("Bearer {}", self.token))
            .content_type("application/json")
            .send(payload.to_string().as_bytes())
            .ok()?;
        let (status, body) = (r.status().as_u16(), r.body_mut().read_to_string().ok()?);
        Some(if status == 200 {
            Out { code: 0, stdout: body, stderr: String::new() }
        } else {
            Out { code: 2, stdout: String::new(), stderr: format!("{status}: {body}") }
        })
    }

    fn status(&self) -> Value {
        self.status_at(&format!("{}/status", self.url()))
    }

    /// The status with one session's (`?session=`).
    fn status_of(&self, session: &str) -> Value {
        self.status_at(&format!("{}/status?session={session}", self.url()))
    }

    fn status_at(&self, url: &str) -> Value {
        let mut r = self.agent.get(url).header("Authorization", &format!("Bearer {}", self.token)).call().unwrap();
        assert_eq!(r.status().as_u16(), 200);
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default()
    }

    fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw HTTP/1.1 request (for what a well-behaved client never sends: a foreign Host, an Origin).
fn raw(port: u16, head: &str, body: &[u8]) -> u16 {
    raw_declared(port, head, body, body.len())
}

/// [`raw`] declaring `length` bytes of body, whatever it sends.
fn raw_declared(port: u16, head: &str, body: &[u8], length: usize) -> u16 {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(format!("{head}Content-Length: {length}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// One scripted session, sent through `send` (the command hook or the server).
type Send<'a> = &'a dyn Fn(Value) -> Out;

/// The credential rotation to its terminal, the gated rotation approved by a human on a
/// pseudo-terminal (`runbook-host approve` under `script`).
fn rotation(w: &Work, send: Send, s: &str) {
    assert_eq!(send(start(s)).code, 0);
    let run_id = w.run_dir(s).file_name().unwrap().to_string_lossy().to_string();
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    allowed(send(pre(s, "Bash", get.clone(), "t1")));
    allowed(send(post(s, "Bash", get, out("payments-db-credentials   Opaque   2   97d\n"), "t1")));
    let meta = json!({"path": "database/creds/payments-app"});
    allowed(send(pre(s, "mcp__vault__read_metadata", meta.clone(), "t2")));
    allowed(send(post(s, "mcp__vault__read_metadata", meta, json!({"age_days": 97}), "t2")));
    let rot = bash("vault write -f database/rotate-role/payments-app");
    assert!(send(pre(s, "Bash", rot.clone(), "t3")).denied().unwrap().contains("needs-approval"));
    approve_on_a_terminal(&w.runs(), &run_id, "rotate");
    allowed(send(pre(s, "Bash", rot.clone(), "t4")));
    allowed(send(post(s, "Bash", rot, out("Success! Data written to: database/rotate-role/payments-app\n"), "t4")));
    for (i, (tool, input, resp)) in [
        ("Bash", bash("kubectl -n payments rollout restart deployment/payments-api"), out("deployment.apps/payments-api restarted\n")),
        (
            "Bash",
            bash("kubectl -n payments rollout status deployment/payments-api --timeout=300s"),
            out("deployment \"payments-api\" successfully rolled out\n"),
        ),
        ("mcp__slack__post_message", json!({"channel": "#payments-oncall", "text": "rotated"}), json!({"ok": true})),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("u{i}");
        allowed(send(pre(s, tool, input.clone(), &id)));
        allowed(send(post(s, tool, input, resp, &id)));
    }
    assert_eq!(send(base(s, "Stop")).code, 0);
    assert_eq!(send(base(s, "SessionEnd")).code, 0);
}

/// The executive snapshot (a checkpointed document without steps) to completion: its one tool call, then
/// the final answer at Stop.
fn snapshot(_w: &Work, send: Send, s: &str) {
    assert_eq!(send(start(s)).code, 0);
    let args = json!({"start_date": "2024-07-01", "end_date": "2024-09-30", "accounting_method": "Accrual"});
    allowed(send(pre(s, "quickbooks_profit_and_loss", args.clone(), "q1")));
    allowed(send(post(s, "quickbooks_profit_and_loss", args, json!({"net_income": 372256.45}), "q1")));
    assert_eq!(send(base(s, "Stop")).code, 0);
    assert_eq!(send(base(s, "SessionEnd")).code, 0);
}

/// A session of denials: an undeclared command, a tool out of its step, the approval channel reached for
/// through the shell, a failed call, then the session ends short of a terminal.
fn denials(w: &Work, send: Send, s: &str) {
    assert_eq!(send(start(s)).code, 0);
    let run_id = w.run_dir(s).file_name().unwrap().to_string_lossy().to_string();
    assert!(send(pre(s, "Bash", bash("rm -rf /var/lib/postgres"), "d1")).denied().unwrap().contains("undeclared-tool"));
    assert!(send(pre(s, "mcp__slack__post_message", json!({"channel": "#x", "text": "done"}), "d2")).denied().unwrap().contains("out-of-scope"));
    assert!(send(pre(s, "Bash", bash(&format!("runbook-host approve {run_id} rotate")), "d3")).denied().unwrap().contains("guarded"));
    // The hook's own configuration and the server, reached for through the shell: guarded too (the
    // guard, not only the missing capability, denies them: the event is marked).
    for (i, cmd) in [
        "curl -s -H \"Authorization: Bearer $RUNBOOK_HOOK_TOKEN\" -d @forged.json http://127.0.0.1:4000/runbook-hook",
        "cat .claude/settings.local.json",
        "sed -i /hooks/d .claude/settings.json",
    ]
    .into_iter()
    .enumerate()
    {
        assert!(send(pre(s, "Bash", bash(cmd), &format!("g{i}"))).denied().unwrap().contains("guarded"), "{cmd}");
        assert_eq!(w.events(s).last().unwrap()["event"]["guard"], true, "{cmd}");
    }
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    allowed(send(pre(s, "Bash", get.clone(), "d4")));
    let mut failed = post(s, "Bash", get, json!("Exit code 1\nerror: forbidden"), "d4");
    failed["hook_event_name"] = json!("PostToolUseFailure");
    failed["error"] = failed["tool_response"].take();
    assert_eq!(send(failed).code, 0);
    assert_eq!(send(base(s, "Stop")).code, 0);
    assert_eq!(send(base(s, "SessionEnd")).code, 0);
}

/// What must be the same in both modes: every decision line, and the report with the run's own
/// identity and wall-clock times masked.
fn outcome(w: &Work, s: &str) -> (Vec<String>, Value) {
    let decisions = w.events(s).iter().map(|e| e["decision"].to_string()).collect();
    let mut report: Value = serde_json::from_slice(&std::fs::read(w.run_dir(s).join("report.json")).unwrap()).unwrap();
    fn mask(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if k == "run_id" || k.ends_with("_at") || k == "at" || k.ends_with("_ms") {
                        *x = json!("(masked)");
                    } else {
                        mask(x);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(mask),
            _ => {}
        }
    }
    mask(&mut report);
    let (ok, text) = verify(&w.run_dir(s));
    assert!(ok, "{text}");
    (decisions, report)
}

#[test]
fn the_server_decides_byte_for_byte_as_the_command_hook() {
    type Script = fn(&Work, Send, &str);
    let sessions: [(&str, Script, &str, &[&str]); 3] = [
        ("rotation", rotation, "examples/rotate-credentials/runbook.yaml", &[]),
        ("snapshot", snapshot, "examples/executive-snapshot/runbook.json", &["--profile", "R1"]),
        ("denials", denials, "examples/rotate-credentials/runbook.yaml", &[]),
    ];
    for (name, script, doc, extra) in sessions {
        let (wc, ws) = (work(&format!("same-command-{name}")), work(&format!("same-server-{name}")));
        for w in [&wc, &ws] {
            std::fs::copy(repo().join(doc), w.0.join("runbook.yaml")).unwrap();
        }
        let s = format!("sess-{name}");
        script(&wc, &|p| wc.hook_with(extra, p.to_string().as_bytes()), &s);
        let server = Server::start(&ws, extra);
        script(&ws, &|p| server.hook(p), &s);
        let (cd, cr) = outcome(&wc, &s);
        let (sd, sr) = outcome(&ws, &s);
        assert_eq!(cd, sd, "{name}: the decision lines differ");
        assert_eq!(cr, sr, "{name}: the reports differ");
        eprintln!("{name}: {} decisions, outcome {}, the same in both modes", cd.len(), cr["outcome"]);
        match name {
            "rotation" => assert_eq!((&cr["outcome"], &cr["terminal"]), (&json!("completed"), &json!("rotated")), "{cr}"),
            "snapshot" => assert_eq!(cr["outcome"], "completed", "{cr}"),
            _ => assert_ne!(cr["outcome"], "completed", "{cr}"),
        }
    }
}

#[test]
fn every_event_kind_over_http() {
    let w = work("srv-events");
    let server = Server::start(&w, &[]);
    let fx = |n: &str| std::fs::read(repo().join(format!("host/tests/fixtures/hook/{n}.json"))).unwrap();
    let (status, body) = server.post(&fx("session-start"));
    assert_eq!(status, 200);
    assert!(body.contains("supervising"), "{body}");
    for f in ["pre-tool-use", "post-tool-use"] {
        assert_eq!(server.post(&fx(f)), (200, String::new()), "{f}: allowed, no opinion written");
    }
    // PermissionRequest: the call the module allowed may go on to the client's own prompt (no opinion);
    // any other is denied in the PermissionRequest decision shape.
    let s = "fixture-session";
    let allowed_call: Value = serde_json::from_slice(&fx("pre-tool-use")).unwrap();
    let mut pr = base(s, "PermissionRequest");
    pr["tool_name"] = allowed_call["tool_name"].clone();
    pr["tool_input"] = allowed_call["tool_input"].clone();
    pr["permission_suggestions"] = json!([]);
    assert_eq!(server.post(pr.to_string().as_bytes()), (200, String::new()));
    pr["tool_input"] = bash("rm -rf /");
    let (status, body) = server.post(pr.to_string().as_bytes());
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, &v["hookSpecificOutput"]["decision"]["behavior"]), (200, &json!("deny")), "{body}");
    let events_before = w.events(s).len();
    assert_eq!(events_before, 3, "a PermissionRequest records nothing");
    // PostToolUseFailure (the fixture's call, in this session): a result with is_error.
    let failure: Value = serde_json::from_slice(&fx("post-tool-use-failure")).unwrap();
    let f = failure["session_id"].as_str().unwrap();
    assert_eq!(server.hook(start(f)).code, 0);
    allowed(server.hook(pre(f, failure["tool_name"].as_str().unwrap(), failure["tool_input"].clone(), failure["tool_use_id"].as_str().unwrap())));
    // The failed call fails the step's check: the run halts, and the agent is told to stop.
    let (status, body) = server.post(failure.to_string().as_bytes());
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, &v["decision"]), (200, &json!("block")), "{body}");
    assert!(body.contains("assert-failed"), "{body}");
    assert_eq!(w.events(f).last().unwrap()["event"]["is_error"], true);
    let (status, body) = server.post(&fx("stop"));
    assert!(status == 200 && body.contains("not at a terminal"), "{body}");
    assert_eq!(server.post(&fx("session-end")).0, 200);
    let (ok, text) = verify(&w.run_dir(s));
    assert!(ok, "{text}");
    // A finished session takes no more calls (resumed from its bundle: the server closed it at SessionEnd).
    assert!(server.hook(serde_json::from_slice(&fx("pre-tool-use")).unwrap()).denied().unwrap().contains("finished"));
}

#[test]
fn requests_that_must_never_be_decided_are_refused_and_logged_and_others_still_served() {
    let w = work("srv-reject");
    let server = Server::start(&w, &[]);
    let s = "sess-ok";
    assert_eq!(server.hook(start(s)).code, 0);
    let body = pre(s, "Bash", bash("kubectl -n payments get pods"), "x1").to_string();
    let post_with = |auth: Option<&str>| {
        let mut r = server.agent.post(&server.url()).content_type("application/json");
        if let Some(a) = auth {
            r = r.header("Authorization", a);
        }
        r.send(body.as_bytes()).unwrap().status().as_u16()
    };
    assert_eq!(post_with(None), 401, "no token");
    assert_eq!(post_with(Some("Bearer 0000")), 401, "a wrong token");
    assert_eq!(post_with(Some(&format!("Basic {}", server.token))), 401, "not a bearer token");
    let auth = format!("Authorization: Bearer {}\r\nContent-Type: application/json\r\n", server.token);
    let head = |host: &str, extra: &str| format!("POST /runbook-hook HTTP/1.1\r\nHost: {host}\r\n{auth}{extra}");
    assert_eq!(raw(server.port, &head(&format!("127.0.0.1:{}", server.port), "Origin: http://evil.example\r\n"), body.as_bytes()), 403, "an Origin");
    assert_eq!(raw(server.port, &head(&format!("attacker.example:{}", server.port), ""), body.as_bytes()), 403, "DNS rebinding: a foreign Host");
    assert_eq!(raw(server.port, &head("127.0.0.1:1", ""), body.as_bytes()), 403, "another port's Host");
    // Issue 28, F9: what a lenient reader would take. Two Host headers (the second naming another server),
    // an absolute-form target naming another host, and the token with spaces around it.
    let this = format!("127.0.0.1:{}", server.port);
    assert_eq!(raw(server.port, &head(&this, "Host: attacker.example\r\n"), body.as_bytes()), 403, "two Host headers");
    let absolute = format!("POST http://attacker.example/runbook-hook HTTP/1.1\r\nHost: {this}\r\n{auth}");
    assert_eq!(raw(server.port, &absolute, body.as_bytes()), 403, "an absolute-form target");
    let spaced = format!("POST /runbook-hook HTTP/1.1\r\nHost: {this}\r\nAuthorization: Bearer  {} \r\nContent-Type: application/json\r\n", server.token);
    assert_eq!(raw(server.port, &spaced, body.as_bytes()), 401, "spaces around the token");
    // None of these was decided.
    assert_eq!(w.events(s).len(), 1);
    // Bad payloads: 400 (the client, with onFailure block, blocks), never an allow.
    let ok_head = head(&format!("127.0.0.1:{}", server.port), "");
    assert_eq!(raw_declared(server.port, &ok_head, b"{", (16 << 20) + 1), 413, "a body over the bound (refused before it is read)");
    assert_eq!(server.post(b"{not json").0, 400);
    assert_eq!(server.post(base(s, "UserPromptSubmit").to_string().as_bytes()).0, 400, "an event this adapter does not handle");
    assert_eq!(server.post(base(s, "SubagentStop").to_string().as_bytes()).0, 400, "a subagent's stop is not the session's (F8)");
    assert_eq!(server.post(json!({"hook_event_name": "PreToolUse"}).to_string().as_bytes()).0, 400, "no session");
    // A session the server never opened: denied (fail closed), in the client's own deny shape.
    let r = server.hook(pre("sess-never-started", "Bash", bash("ls"), "n1")).denied().unwrap();
    assert!(r.contains("never started"), "{r}");
    assert!(!w.runs().join(".hook/sess-never-started.json").exists());
    // The server still serves the open session, and recorded only what it decided.
    allowed(server.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), "x3")));
    assert_eq!(w.events(s).len(), 2);
    let log = server.log();
    for needle in [
        "refused (401): no bearer token",
        "refused (401): a wrong bearer token",
        "refused (403): a request with an Origin",
        "refused (403): Host `attacker.example",
        "refused (403): 2 Host headers",
        "refused (403): an absolute-form target",
        "bad payload",
        "never started",
    ] {
        assert!(log.contains(needle), "the log does not say `{needle}`:\n{log}");
    }
}

/// Issue 28, F7: 19,990 idle connections once exhausted the server's file descriptors, and new ones timed
/// out for every session; slowloris connections stayed open past 35 s. Here the server may hold 512 file
/// descriptors (`prlimit`), and 1,000 connections that never send a byte plus 50 that trickle a request's
/// head are held open against it: a client that connects after them is served at once (the flood gives
/// way at the cap of 256), and a head that has not arrived after the 10 s deadline closes its connection.
#[test]
fn a_flood_of_idle_and_slow_connections_is_held_off_and_sessions_are_still_served() {
    let w = work("srv-flood");
    let server = Server::start_under(&w, &["prlimit", "--nofile=512:512", "--"], &[], &[]);
    let s = "sess-flood";
    assert_eq!(server.hook(start(s)).code, 0);
    let connect = || std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let idle: Vec<std::net::TcpStream> = (0..1000).map(|_| connect()).collect();
    let mut slow: Vec<std::net::TcpStream> = (0..50)
        .map(|_| {
            let mut c = connect();
            c.write_all(b"POST /runbook-hook HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
            c
        })
        .collect();
    // A client on a new connection (a new pool), while every flood connection is still held: served. Its
    // time-out is short enough to fail the test, where the flood once made it wait for ever.
    let fresh: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(20))).build().into();
    let call = pre(s, "Bash", bash("kubectl -n payments get pods"), "f1").to_string();
    let mut r =
        fresh.post(&server.url()).header("Authorization", &format!("Bearer {}", server.token)).content_type("application/json").send(call.as_bytes()).unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let out = Out { code: 0, stdout: r.body_mut().read_to_string().unwrap(), stderr: String::new() };
    allowed(out);
    // The slow heads: each trickles one more header line, then waits; past the deadline the server has
    // closed the connection (end of stream, or a reset), never answered it.
    for c in &mut slow {
        let _ = c.write_all(b"X-Slow: 1\r\n");
    }
    std::thread::sleep(Duration::from_secs(12));
    for c in &mut slow {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        let closed = loop {
            let mut buf = [0u8; 256];
            match c.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => break !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            }
        };
        assert!(closed, "a slow head's connection is closed after the deadline");
        assert!(got.is_empty() || got.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&got));
    }
    // The session is still served on the usual client, and the flood decided nothing.
    allowed(server.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), "f2")));
    assert_eq!(w.events(s).len(), 3);
    drop(idle);
}

/// Issue 28, F7: a server started by a session does not outlive its use. With no open session and no event
/// for its idle time it exits (the next SessionStart starts one); while a session is open it stays.
#[test]
fn a_server_with_no_open_session_exits_after_its_idle_time() {
    let w = work("srv-idle-exit");
    let mut server = Server::start(&w, &["--idle-exit-secs", "2"]);
    let s = "sess-idle";
    assert_eq!(server.hook(start(s)).code, 0);
    std::thread::sleep(Duration::from_secs(5));
    assert!(server.child.try_wait().unwrap().is_none(), "a server with an open session stays: {}", server.log());
    assert_eq!(server.hook(base(s, "SessionEnd")).code, 0);
    let t = Instant::now();
    let status = loop {
        if let Some(st) = server.child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the idle server did not exit: {}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(server.log().contains("no open session and no event for"), "{}", server.log());
    assert!(!w.runs().join(".hook/server/server.json").exists());
}

/// Whether the tests run as root (CI does): only root can start a process as another user.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").unwrap().lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// Posts `payload` with `token` from a child process (python3): the status and the body. The child is what
/// the agent's shell would start; as another user with `as_uid` (setpriv); with `orphan`, from a grandchild
/// whose parent has exited (a double fork, as a daemon makes), so it descends from no client.
fn post_from_child(url: &str, token: &str, payload: &str, as_uid: Option<u32>, orphan: bool) -> (u16, String) {
    const POST: &str = r#"
import os, sys, time, urllib.request, urllib.error
url, token, body, orphan = sys.argv[1], sys.argv[2], sys.argv[3].encode(), sys.argv[4] == "1"
def post():
    req = urllib.request.Request(url, data=body if body else None, headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        r = urllib.request.urlopen(req, timeout=20); code, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        code, text = e.code, e.read()
    return ("%d\n" % code).encode() + text
if not orphan:
    sys.stdout.buffer.write(post()); sys.exit(0)
r, w = os.pipe()
if os.fork() == 0:
    if os.fork() != 0:
        os._exit(0)
    time.sleep(0.2)  # the middle process has exited and been reaped: this one descends from no client
    os.write(w, post()); os._exit(0)
os.close(w)
os.wait()
out = b""
while True:
    b = os.read(r, 65536)
    if not b: break
    out += b
sys.stdout.buffer.write(out)
"#;
    let mut c = match as_uid {
        Some(u) => {
            let mut c = common::cmd("setpriv");
            // Debian's interpreter by its path: another user may not be able to enter a per-user install.
            c.args([&format!("--reuid={u}"), &format!("--regid={u}"), "--clear-groups", "/usr/bin/python3"]);
            c
        }
        None => common::cmd("python3"),
    };
    let o = c.args(["-c", POST, url, token, payload, if orphan { "1" } else { "0" }]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let (code, body) = text.split_once('\n').unwrap_or_else(|| panic!("{text}{}", String::from_utf8_lossy(&o.stderr)));
    (code.trim().parse().unwrap(), body.to_string())
}

/// Issue 28, item 2 and F8: the server hears each session only from its own client. A session is bound
/// to the first process that sends an event after SessionStart, which must be the SessionStart's sender or
/// one of its ancestors (Claude Code runs the SessionStart command hook, then posts every later event
/// itself); here this test process plays the client. A process it starts (what the agent's shell runs)
/// holding the right token is refused and logged, for its own session and another's: its forged
/// PreToolUse, SessionEnd and Stop decide and end nothing. The server lists no sessions. And, as root, a
/// request from another user carrying the token is refused whatever it names (F1).
#[test]
fn only_a_sessions_own_client_is_heard() {
    let w = work("srv-peer");
    let server = Server::start(&w, &[]);
    for s in ["sess-own", "sess-other"] {
        assert_eq!(server.hook(start(s)).code, 0);
        allowed(server.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), "p1")));
    }
    let me = std::process::id() as u64;
    assert_eq!(server.status_of("sess-own")["session"]["client"], me);
    assert!(server.status().get("sessions").is_none());
    let before = (w.events("sess-own").len(), w.events("sess-other").len());
    let forged = [
        pre("sess-own", "Bash", bash("kubectl -n payments get pods"), "f1"),
        pre("sess-other", "Bash", bash("kubectl -n payments get pods"), "f2"),
        base("sess-other", "SessionEnd"),
        base("sess-own", "Stop"),
    ];
    for f in &forged {
        let (code, body) = post_from_child(&server.url(), &server.token, &f.to_string(), None, false);
        assert_eq!(code, 403, "{f}: {body}\n{}", server.log());
        assert!(body.contains("belongs to its client (pid "), "{body}");
    }
    // Nothing was decided or ended: both sessions go on with their client.
    assert_eq!((w.events("sess-own").len(), w.events("sess-other").len()), before);
    assert_eq!(server.status_of("sess-other")["session"]["finished"], false);
    allowed(server.hook(pre("sess-other", "Bash", bash("kubectl -n payments get pods"), "p2")));
    // A SessionStart from a process the client started is what its own SessionStart hook is: answered,
    // and the session stays bound to the client (that process's next event is still refused).
    let (code, body) = post_from_child(&server.url(), &server.token, &start("sess-own").to_string(), None, false);
    assert_eq!(code, 200, "{body}");
    assert_eq!(server.status_of("sess-own")["session"]["client"], me);
    // From a process that descends from no client (a double fork): refused while the client runs.
    let (code, body) = post_from_child(&server.url(), &server.token, &start("sess-own").to_string(), None, true);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("which is running"), "{body}");
    let (code, body) = post_from_child(&server.url(), &server.token, &base("sess-own", "SessionEnd").to_string(), None, true);
    assert_eq!(code, 403, "{body}");
    assert_eq!(w.events("sess-own").len(), before.0, "nothing was recorded");
    assert!(server.log().contains("refused (403): session sess-other belongs to its client"), "{}", server.log());
    // `hook status` shows each session of the runs directory, asked of the server one by one.
    let o = common::cmd(BIN).args(["hook", "status", "--port", &server.port.to_string()]).current_dir(&w.0).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    for s in ["sess-own", "sess-other"] {
        assert!(text.contains(&format!("session {s}: run ")) && text.contains(&format!("client pid {me}")), "{text}");
    }
    if is_root() {
        // Another user with the token (F1: `nobody` once captured it): refused, for events and the status.
        for (url, payload) in [
            (server.url(), pre("sess-own", "Bash", bash("kubectl -n payments get pods"), "n1").to_string()),
            (format!("{}/status", server.url()), String::new()),
        ] {
            let (code, body) = post_from_child(&url, &server.token, &payload, Some(65534), false);
            assert_eq!(code, 403, "{url}: {body}");
            assert!(body.contains("another user (uid 65534)"), "{body}");
        }
        assert_eq!(w.events("sess-own").len(), before.0);
    } else {
        eprintln!("(not root: the other-user half of this test needs root to start a process as nobody)");
    }
}

/// Issue 28, F1: while the server is down, another user binds its port. The SessionStart command hook used
/// to send the bearer token to whatever answered (`GET /runbook-hook/status`, polling). Now it checks who
/// owns the listening socket first: another user's listener never sees the token, and the session is
/// refused (exit 2), so nothing decides its events.
#[test]
fn a_port_squatted_by_another_user_is_sent_no_token() {
    if !is_root() {
        eprintln!("(skipped: needs root to start a listener as another user)");
        return;
    }
    const SQUAT: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        print(self.command, self.path, dict(self.headers), self.rfile.read(n), flush=True)
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers(); self.wfile.write(b"{}")
    do_GET = do_POST = answer
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("listening", flush=True)
s.serve_forever()
"#;
    let w = work("srv-squat");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut squatter = common::cmd("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", SQUAT, &port.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = squatter.stdout.take().unwrap();
    let mut first = [0u8; 10];
    out.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"listening\n");
    // The SessionStart command hook, as Claude Code runs it in server mode (`hook --port PORT`).
    let s = "sess-squat";
    let o = w.hook_with(&["--port", &port.to_string()], start(s).to_string().as_bytes());
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains(&format!("127.0.0.1:{port} is held by a process of uid 65534")), "{}", o.stderr);
    // The same for a later event of a command-mode session: denied, the token unsent.
    let o = w.hook_with(&["--port", &port.to_string()], pre(s, "Bash", bash("kubectl -n payments get pods"), "q1").to_string().as_bytes());
    assert_ne!(o.code, 0, "{}", o.stdout);
    let _ = squatter.kill();
    let _ = squatter.wait();
    let mut seen = String::new();
    out.read_to_string(&mut seen).unwrap();
    let token = std::fs::read_to_string(w.runs().join(".hook/server/token")).unwrap_or_default();
    assert!(!seen.contains("Authorization") && (token.trim().is_empty() || !seen.contains(token.trim())), "the squatter saw: {seen}");
    assert!(!w.runs().join(format!(".hook/{s}.json")).exists(), "no run began");
}

#[test]
fn twelve_parallel_calls_of_one_session_are_decided_one_at_a_time() {
    let w = work("srv-parallel");
    let server = Server::start(&w, &[]);
    let s = "sess-par";
    assert_eq!(server.hook(start(s)).code, 0);
    let n = 12;
    let outs: Vec<Out> = std::thread::scope(|sc| {
        let server = &server;
        let hs: Vec<_> = (0..n).map(|i| sc.spawn(move || server.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), &format!("p{i}"))))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in outs {
        allowed(o);
    }
    let ev = w.events(s);
    assert_eq!(ev.len(), 1 + n, "every call recorded once");
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e["decision"]["seq"], i as u64, "one recorded order");
    }
    let mut ids: Vec<&str> = ev[1..].iter().map(|e| e["event"]["call_id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n);
    assert_eq!(server.hook(base(s, "SessionEnd")).code, 0);
    let (ok, text) = verify(&w.run_dir(s));
    assert!(ok, "{text}");
}

#[test]
fn four_sessions_at_once_keep_their_own_runs() {
    let w = work("srv-four");
    let server = Server::start(&w, &[]);
    std::thread::scope(|sc| {
        for k in 0..4 {
            let (server, w) = (&server, &w);
            sc.spawn(move || {
                let s = format!("sess-{k}");
                assert_eq!(server.hook(start(&s)).code, 0);
                for i in 0..5 {
                    allowed(server.hook(pre(&s, "Bash", bash("kubectl -n payments get pods"), &format!("{k}-{i}"))));
                }
                assert!(server.hook(pre(&s, "Bash", bash("rm -rf /"), "bad")).denied().is_some());
                assert_eq!(server.hook(base(&s, "SessionEnd")).code, 0);
                let ev = w.events(&s);
                assert_eq!(ev.len(), 1 + 5 + 1 + 1, "{s}");
                assert_eq!(ev[0]["event"]["agent"], format!("claude-code:{s}"));
                assert!(ev.iter().all(|e| e["event"]["call_id"].as_str().is_none_or(|c| c.starts_with(&format!("{k}-")) || c == "bad")), "{s}: {ev:?}");
            });
        }
    });
    let dirs: std::collections::HashSet<PathBuf> = (0..4).map(|k| w.run_dir(&format!("sess-{k}"))).collect();
    assert_eq!(dirs.len(), 4);
    for d in dirs {
        let (ok, text) = verify(&d);
        assert!(ok, "{text}");
    }
}

#[test]
fn a_killed_server_loses_nothing_and_the_next_resumes_every_open_run() {
    let w = work("srv-kill");
    let mut server = Server::start(&w, &[]);
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    for s in ["sess-a", "sess-b"] {
        assert_eq!(server.hook(start(s)).code, 0);
        allowed(server.hook(pre(s, "Bash", get.clone(), "k1")));
    }
    allowed(server.hook(post("sess-a", "Bash", get.clone(), out("payments-db-credentials   Opaque   2   97d\n"), "k1")));
    // The server holds each open session's lock: a command hook of the same session waits, then denies.
    let o = w.hook_with(&["--lock-timeout-ms", "200"], pre("sess-a", "Bash", get.clone(), "k2").to_string().as_bytes());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("lock is still held"), "{}", o.stderr);
    let answered = [w.events("sess-a").len(), w.events("sess-b").len()];
    assert_eq!(answered, [3, 2]);
    server.kill9();
    // While no server runs, the client cannot reach one (with onFailure block it blocks every call).
    let refused = server.agent.post(&server.url()).send(b"{}");
    assert!(refused.is_err(), "nothing answers after kill -9");
    // The next server resumes both runs from their bundles, each checked by replay.
    let server = Server::start(&w, &[]);
    let st = server.status();
    assert_eq!(st["open"], 2, "{st}");
    assert!(st.get("sessions").is_none(), "the server lists no sessions (F8): {st}");
    let steps: Vec<(String, String)> = ["sess-a", "sess-b"]
        .iter()
        .map(|s| {
            let x = server.status_of(s)["session"].clone();
            (x["session"].as_str().unwrap().into(), x["step"].as_str().unwrap().into())
        })
        .collect();
    assert_eq!(steps, [("sess-a".into(), "check-age".into()), ("sess-b".into(), "inspect".into())], "{st}");
    assert!(server.log().contains("resumed session sess-a"), "{}", server.log());
    // Nothing the client was told about was lost: the runs go on from where they were.
    assert_eq!([w.events("sess-a").len(), w.events("sess-b").len()], answered);
    allowed(server.hook(post("sess-b", "Bash", get, out("payments-db-credentials   Opaque   2   97d\n"), "k1")));
    for s in ["sess-a", "sess-b"] {
        assert_eq!(server.hook(base(s, "SessionEnd")).code, 0);
        let (ok, text) = verify(&w.run_dir(s));
        assert!(ok, "{s}: {text}");
    }
    assert_eq!(w.events("sess-b").len(), 4);
}

#[test]
fn one_server_per_runs_directory() {
    let w = work("srv-one");
    let _server = Server::start(&w, &[]);
    let o = common::cmd(BIN).args(["hook", "serve", "--port", "0", "--runbook", "runbook.yaml"]).current_dir(&w.0).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("a hook server already serves"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_session_start_with_other_options_replaces_the_server_and_its_sessions_go_on() {
    // The server mode's SessionStart is `hook --port P ...`: it starts the server when none answers, uses
    // the one that answers with the same options, and replaces one started with other options (an
    // `install` since), whose open sessions resume in the new one.
    let w = work("srv-options");
    let port = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port().to_string();
    let via = |extra: &[&str], payload: Value| {
        let mut args = vec!["--port", port.as_str()];
        args.extend_from_slice(extra);
        w.hook_with(&args, payload.to_string().as_bytes())
    };
    let pid = || -> u64 {
        let v: Value = serde_json::from_slice(&std::fs::read(w.runs().join(".hook/server/server.json")).unwrap()).unwrap();
        v["pid"].as_u64().unwrap()
    };
    // The later events, as Claude Code's http hooks post them: from the client (here, this test).
    let client = agent();
    let post = |payload: Value| {
        let token = std::fs::read_to_string(w.runs().join(".hook/server/token")).unwrap();
        let mut r = client
            .post(&format!("http://127.0.0.1:{port}/runbook-hook"))
            .header("Authorization", &format!("Bearer {}", token.trim()))
            .content_type("application/json")
            .send(payload.to_string().as_bytes())
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        Out { code: 0, stdout: r.body_mut().read_to_string().unwrap(), stderr: String::new() }
    };
    let get = bash("kubectl -n payments get pods");
    let o = via(&[], start("s1"));
    assert!(o.code == 0 && o.stdout.contains("supervising"), "{}", o.stderr);
    let first = pid();
    allowed(post(pre("s1", "Bash", get.clone(), "o1")));
    assert_eq!(via(&[], start("s2")).code, 0);
    assert_eq!(pid(), first, "the same options: the same server");
    assert_eq!(via(&["--keep-working"], start("s3")).code, 0);
    let second = pid();
    assert_ne!(second, first, "other options: a new server");
    allowed(post(pre("s1", "Bash", get, "o2")));
    assert_eq!(w.events("s1").len(), 3, "s1 went on in the new server");
    let stop = common::cmd(BIN).args(["hook", "stop"]).current_dir(&w.0).output().unwrap();
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    let log = std::fs::read_to_string(w.runs().join(".hook/server/log")).unwrap();
    assert!(log.contains("resumed session s1"), "{log}");
}

/// The events of the session's run as (type, tool, decision), when its state exists.
fn shape_of(w: &Work, s: &str) -> Option<Vec<String>> {
    let state = w.runs().join(format!(".hook/{s}.json"));
    if !state.exists() {
        return None;
    }
    Some(common::event_shape(&common::event_records(&w.run_dir(s))))
}

/// The eight events the fault tests play: an allowed call and its result, a denied call, a second call
/// and its result, Stop, SessionEnd.
fn fault_script(s: &str) -> Vec<Value> {
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    let meta = json!({"path": "database/creds/payments-app"});
    vec![
        start(s),
        pre(s, "Bash", get.clone(), "t1"),
        post(s, "Bash", get, out("payments-db-credentials   Opaque   2   97d\n"), "t1"),
        pre(s, "Bash", bash("rm -rf /var/lib/postgres"), "t2"),
        pre(s, "mcp__vault__read_metadata", meta.clone(), "t3"),
        post(s, "mcp__vault__read_metadata", meta, json!({"age_days": 97}), "t3"),
        base(s, "Stop"),
        base(s, "SessionEnd"),
    ]
}

/// kill -9 of the resident server at every crash point its events pass (host/tests/faults.rs does the
/// same for the command hook and the proxy): a new server resumes the open run from its bundle; nothing
/// the client was told is lost; every later event is answered or refused with a reason; a run that ends
/// verifies.
#[test]
fn the_server_killed_at_every_write_point() {
    let s = "sess-points";
    let script = fault_script(s);
    // The points a run without faults passes, after the server is up.
    let w = work("srv-points");
    let log = w.0.join("points.log");
    let server = Server::start_env(&w, &[], &[("RUNBOOK_HOST_FAULT_LOG", log.display().to_string())]);
    let count = || std::fs::read_to_string(&log).unwrap_or_default().lines().count();
    let startup = count();
    let mut recorded_after = Vec::new();
    for p in &script {
        assert_eq!(server.hook(p.clone()).code, 0);
        recorded_after.push(shape_of(&w, s).unwrap());
    }
    let total = count();
    drop(server);
    assert!(total - startup > 40, "{startup}..{total}");
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for n in startup + 1..=total {
        let w = work(&format!("srv-points-{n}"));
        let mut server = Server::start_env(&w, &[], &[("RUNBOOK_HOST_KILL_AT", n.to_string())]);
        let mut killed_at = None;
        for (i, p) in script.iter().enumerate() {
            match server.try_hook(p) {
                Some(o) => assert_eq!(o.code, 0, "point {n}: event {i} before the kill: {}", o.stderr),
                None => {
                    killed_at = Some(i);
                    break;
                }
            }
        }
        let i = killed_at.unwrap_or_else(|| panic!("point {n}: the server was not killed"));
        let status = server.child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "point {n}");
        let at = format!("point {n} (event {i}, {})", script[i]["hook_event_name"]);
        if i > 0 {
            let got = shape_of(&w, s).unwrap_or_else(|| panic!("{at}: the session is gone"));
            let told = &recorded_after[i - 1];
            assert!(got.len() >= told.len() && got[..told.len()] == told[..], "{at}: events the client was told about are missing: {got:?}");
        }
        // A new server (Claude Code's next event of a server-mode install starts one) resumes the run.
        let server = Server::start(&w, &[]);
        let mut refused = Vec::new();
        for (j, p) in script.iter().enumerate().skip(i + 1) {
            // Refused: an HTTP error, or a 200 whose answer blocks failing closed (the http hook's deny).
            let o = server.hook(p.clone());
            if o.code != 0 || o.stdout.contains("fail closed") {
                assert!(!(o.stderr.clone() + &o.stdout).trim().is_empty(), "{at}: event {j} refused without a reason");
                refused.push(o.stderr + &o.stdout);
            }
        }
        let kind = match shape_of(&w, s) {
            None => {
                assert_eq!(refused.len(), script.len() - 1 - i, "{at}: a session without state let an event through");
                "no session: every later event refused"
            }
            Some(got) => {
                let dir = w.run_dir(s);
                let (ok, text) = verify(&dir);
                let finished = dir.join("receipt.json").exists();
                assert_eq!(ok, finished, "{at}: verify ({ok}) disagrees with the bundle being finished ({finished}): {text}");
                if i + 1 == script.len() {
                    if finished {
                        "the last event killed after the receipt: verifies"
                    } else {
                        "the last event killed before the receipt: unfinished, verify refuses it"
                    }
                } else if refused.is_empty() {
                    assert!(ok, "{at}: the resumed run ended but does not verify: {text}");
                    if got == *recorded_after.last().unwrap() {
                        "resumed, same events as without the kill"
                    } else {
                        "resumed, the killed event not recorded (its client got no answer)"
                    }
                } else {
                    "later events refused"
                }
            }
        };
        *outcomes.entry(kind.to_string()).or_default() += 1;
    }
    eprintln!("hook server: {} crash points after start-up:", total - startup);
    for (k, v) in &outcomes {
        eprintln!("  {v:3}  {k}");
    }
}

/// The run directory of session `s`, also once the session was marked broken (its state renamed aside
/// after its evidence could not be written).
fn run_dir_any(w: &Work, s: &str) -> Option<PathBuf> {
    let hook = w.runs().join(".hook");
    let state = std::fs::read(hook.join(format!("{s}.json"))).or_else(|_| std::fs::read(hook.join(format!("{s}.broken.json")))).ok()?;
    let v: Value = serde_json::from_slice(&state).ok()?;
    Some(w.runs().join(v["run_id"].as_str()?))
}

/// A failing disk (`EIO`) at every write point the server's events pass, once and for good (as
/// host/tests/faults.rs does for the command hook and the proxy): every call the server let through is
/// recorded as allowed first; after the fault every later event of the session is refused with a reason,
/// by this server and by the next one (the session is marked broken on disk, not only in memory); verify
/// names the place.
#[test]
fn the_server_on_a_failing_disk_at_every_write_point() {
    let s = "sess-eio";
    let meta = json!({"path": "database/creds/payments-app"});
    let script = fault_script(s);
    let w = work("srv-eio");
    let log = w.0.join("points.log");
    let server = Server::start_env(&w, &[], &[("RUNBOOK_HOST_FAULT_LOG", log.display().to_string())]);
    let lines = || std::fs::read_to_string(&log).unwrap_or_default().lines().map(str::to_string).collect::<Vec<_>>();
    let startup = lines().len();
    for p in &script {
        assert_eq!(server.hook(p.clone()).code, 0);
    }
    let io: Vec<usize> = lines().iter().enumerate().skip(startup).filter(|(_, l)| l.ends_with(" io")).map(|(i, _)| i + 1).collect();
    drop(server);
    assert!(io.len() > 20, "{io:?}");
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for &n in &io {
        for (mode, var) in [("once", "RUNBOOK_HOST_EIO_AT"), ("for good", "RUNBOOK_HOST_EIO_FROM")] {
            let w = work(&format!("srv-eio-{n}"));
            let server = Server::start_env(&w, &[], &[(var, n.to_string())]);
            let mut first_refused = None;
            for (i, p) in script.iter().enumerate() {
                let o = server.hook(p.clone());
                let refused = o.code != 0 || o.stdout.contains("fail closed");
                let at = format!("EIO {mode} at point {n}, event {i} ({})", p["hook_event_name"]);
                if refused {
                    assert!(!(o.stderr.clone() + &o.stdout).trim().is_empty(), "{at}: refused without a reason");
                    first_refused.get_or_insert(i);
                } else if let Some(f) = first_refused {
                    // Only a finished run's own answers (its SessionEnd after the receipt) may follow.
                    assert!(
                        p["hook_event_name"] != "PreToolUse" || o.stdout.contains("\"deny\""),
                        "{at}: a call was let through after the evidence failed at event {f}: {}",
                        o.stdout
                    );
                }
                if !refused && p["hook_event_name"] == "PreToolUse" && !o.stdout.contains("\"deny\"") {
                    let dir = run_dir_any(&w, s).unwrap_or_else(|| panic!("{at}: allowed with no run"));
                    let id = p["tool_use_id"].as_str().unwrap();
                    assert!(
                        common::event_records(&dir)
                            .iter()
                            .any(|l| l["event"]["type"] == "invoke" && l["event"]["call_id"] == id && l["decision"]["decision"] == "allow"),
                        "{at}: allowed but its invoke is not recorded as allowed"
                    );
                }
            }
            drop(server);
            // The next server (no fault) refuses a broken session as well.
            let after = if first_refused.is_some_and(|f| f + 1 < script.len()) {
                let server = Server::start(&w, &[]);
                let o = server.hook(pre(s, "mcp__vault__read_metadata", meta.clone(), "late"));
                assert!(
                    o.code != 0 || o.stdout.contains("fail closed") || o.stdout.contains("\"deny\""),
                    "EIO {mode} at point {n}: the next server let a call through: {}",
                    o.stdout
                );
                "the next server refuses too"
            } else {
                "-"
            };
            let said = match run_dir_any(&w, s) {
                None => "no session".to_string(),
                Some(dir) => {
                    let (ok, text) = verify(&dir);
                    assert_eq!(ok, dir.join("receipt.json").exists(), "EIO {mode} at point {n}: {text}");
                    if ok {
                        "verifies".to_string()
                    } else {
                        text.lines().next().unwrap_or("").chars().take(90).collect()
                    }
                }
            };
            let refused = first_refused.map(|f| format!("refused from event {f}")).unwrap_or_else(|| "every event answered".into());
            *outcomes.entry(format!("{mode}: {refused}; {after}; verify: {said}")).or_default() += 1;
        }
    }
    eprintln!("hook server on a failing disk: {} write points x 2:", io.len());
    for (k, v) in &outcomes {
        eprintln!("  {v:3}  {k}");
    }
}
