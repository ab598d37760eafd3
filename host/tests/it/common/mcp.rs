//! The MCP proxy tests' harness: real peers (`host/tests/mcp/`), a test's own directory, the Python MCP SDK
//! as a scripted client (over stdio, or over Streamable HTTP to `run --listen`), and the bundle's files.
#![allow(dead_code)]

pub use super::BIN;
use super::{cmd, repo, Tmp};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub const READ_TIMEOUT: Duration = Duration::from_secs(120);

pub fn mcp_dir() -> PathBuf {
    repo().join("host/tests/mcp")
}

pub fn runbook(name: &str) -> String {
    mcp_dir().join("runbooks").join(name).to_string_lossy().into_owned()
}

pub fn python() -> PathBuf {
    let p = mcp_dir().join(".venv/bin/python");
    assert!(
        p.exists() && mcp_dir().join("node_modules/.bin/mcp-server-everything").exists(),
        "the MCP test peers are not installed: run `bash host/tests/mcp/setup` (node, npm and python3 needed)"
    );
    p
}

pub fn everything() -> Vec<String> {
    vec![mcp_dir().join("node_modules/.bin/mcp-server-everything").to_string_lossy().into_owned()]
}

pub fn filesystem(dir: &Path) -> Vec<String> {
    vec![mcp_dir().join("node_modules/.bin/mcp-server-filesystem").to_string_lossy().into_owned(), dir.to_string_lossy().into_owned()]
}

/// At most this many proxies at once (each has a Python client and a Node server): timing-sensitive
/// scenarios stay honest on a 2-core machine.
pub struct Slots {
    used: Mutex<usize>,
    cv: Condvar,
}

pub static SLOTS: Slots = Slots { used: Mutex::new(0), cv: Condvar::new() };

pub struct Slot;

pub fn slot() -> Slot {
    let mut u = SLOTS.used.lock().unwrap_or_else(|e| e.into_inner());
    while *u >= 3 {
        u = SLOTS.cv.wait(u).unwrap_or_else(|e| e.into_inner());
    }
    *u += 1;
    Slot
}

impl Drop for Slot {
    fn drop(&mut self) {
        *SLOTS.used.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        SLOTS.cv.notify_one();
    }
}

/// A test's own directory (a [`Tmp`]), and its slot.
pub struct Work {
    pub dir: PathBuf,
    _tmp: Tmp,
    _slot: Slot,
}

pub fn work(name: &str) -> Work {
    python();
    let s = slot();
    let t = Tmp::new(&format!("proxy-{name}"));
    Work { dir: t.0.canonicalize().unwrap(), _tmp: t, _slot: s }
}

impl Work {
    pub fn runs(&self) -> PathBuf {
        self.dir.join(".runbook/runs")
    }

    /// Every run directory, oldest first.
    pub fn run_dirs(&self) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(self.runs()) else { return Vec::new() };
        let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect();
        v.sort();
        v
    }

    pub fn latest(&self) -> PathBuf {
        let l: Value = serde_json::from_slice(&std::fs::read(self.runs().join("latest.json")).expect("latest.json")).unwrap();
        self.runs().join(l["run_id"].as_str().unwrap())
    }

    /// `runbook-host verify` passes on every bundle this test produced.
    pub fn verify_all(&self) {
        for d in self.run_dirs() {
            let (ok, out) = verify(&d);
            assert!(ok, "verify failed on {}:\n{out}", d.display());
        }
    }
}

pub fn verify(run_dir: &Path) -> (bool, String) {
    let o = cmd(BIN).args(["verify", "--format", "json"]).arg(run_dir).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.success(), text)
}

pub fn report(run_dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(run_dir.join("report.json")).expect("report.json")).unwrap()
}

/// (event, decision) of every line of `events.ndjson`.
pub fn events(run_dir: &Path) -> Vec<(Value, Value)> {
    std::fs::read_to_string(run_dir.join("events.ndjson"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["event"].clone(), v["decision"].clone())
        })
        .collect()
}

/// The Python MCP SDK as a client, scripted line by line (see tests/mcp/client.py).
pub struct Client {
    pub child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<String>,
    stderr: PathBuf,
}

impl Client {
    pub fn new(work: &Work, name: &str, server: Vec<String>) -> Client {
        let mut args = vec!["--name".to_string(), name.to_string(), "--".to_string()];
        args.extend(server);
        Client::spawn(work, &args)
    }

    pub fn spawn(work: &Work, args: &[impl AsRef<std::ffi::OsStr>]) -> Client {
        let stderr = work.dir.join(format!("client-{}.stderr", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()));
        let mut child = cmd(python())
            .arg(mcp_dir().join("client.py"))
            .args(args)
            .current_dir(&work.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("the Python client starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        Client { stdin: child.stdin.take(), child, rx, stderr }
    }

    /// The client over Streamable HTTP (the SDK's transport) to a proxy started with `--listen`.
    pub fn url(work: &Work, name: &str, url: &str) -> Client {
        Client::spawn(work, &["--name", name, "--url", url])
    }

    /// The client in front of `runbook-host run REF ARGS -- SERVER...`.
    pub fn proxy(work: &Work, name: &str, reference: &str, args: &[&str], servers: &[Vec<String>]) -> Client {
        let mut cmd = vec![BIN.to_string(), "run".into(), reference.to_string()];
        cmd.extend(args.iter().map(|s| s.to_string()));
        for s in servers {
            cmd.push("--".into());
            cmd.extend(s.iter().cloned());
        }
        Client::new(work, name, cmd)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn write(&mut self, cmd: Value) {
        let stdin = self.stdin.as_mut().expect("open");
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
    }

    pub fn read(&mut self) -> Value {
        match self.rx.recv_timeout(READ_TIMEOUT) {
            Ok(l) => serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON from the client ({e}): {l}")),
            Err(e) => panic!("no answer from the client ({e}); its stderr:\n{}", self.stderr()),
        }
    }

    pub fn ask(&mut self, cmd: Value) -> Value {
        self.write(cmd);
        self.read()
    }

    pub fn init(&mut self) -> Value {
        let r = self.ask(json!({"op": "init"}));
        assert_eq!(r["ok"], true, "initialize failed: {r}\n{}", self.stderr());
        r
    }

    pub fn list(&mut self) -> Vec<String> {
        let r = self.ask(json!({"op": "list"}));
        assert_eq!(r["ok"], true, "{r}");
        r["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
    }

    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.ask(json!({"op": "call", "tool": tool, "args": args}));
        assert_eq!(r["ok"], true, "tools/call {tool} failed at the protocol level: {r}\n{}", self.stderr());
        r
    }

    pub fn notifications(&mut self) -> Vec<String> {
        let r = self.ask(json!({"op": "notifications"}));
        r["notifications"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
    }

    pub fn status(&mut self) -> Value {
        let r = self.call("runbook_status", json!({}));
        assert_eq!(r["is_error"], false, "{r}");
        serde_json::from_str(r["text"].as_str().unwrap()).unwrap()
    }

    /// Clean shutdown (the SDK closes the proxy's standard input); the proxy's exit code.
    pub fn close(mut self) -> Option<i64> {
        let r = self.ask(json!({"op": "close"}));
        let _ = self.stdin.take();
        let _ = self.child.wait();
        r["returncode"].as_i64()
    }

    pub fn wait_exit(&mut self) -> Option<i64> {
        let r = self.ask(json!({"op": "wait_exit", "timeout": 30}));
        r["returncode"].as_i64()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn text(r: &Value) -> &str {
    r["text"].as_str().unwrap_or("")
}

pub fn assert_blocked(r: &Value, class: &str) {
    assert_eq!(r["is_error"], true, "expected a tool error: {r}");
    assert!(text(r).starts_with(&format!("{class}:")), "expected `{class}`: {r}");
}

/// Waits until the run has a pending approval request; its id.
pub fn pending_request(run_dir: &Path) -> runbook_host::run::approvals::Pending {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(p) = runbook_host::run::approvals::pending(run_dir) {
            if let Some(first) = p.into_iter().next() {
                return first;
            }
        }
        assert!(Instant::now() < deadline, "no approval request appeared in {}", run_dir.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn deviations(report: &Value) -> Vec<(String, String)> {
    report["deviations"].as_array().unwrap().iter().map(|d| (d["class"].as_str().unwrap().to_string(), d["tool"].as_str().unwrap_or("").to_string())).collect()
}

pub fn call_sha256(tool: &str, args: &Value) -> String {
    let policy = runbook_host::Policy::load().unwrap();
    policy.call_sha256(tool, &args.to_string()).unwrap().unwrap()
}

/// `runbook-host approve RUN STEP [--deny]` on a pseudo-terminal (script(1)), confirmed with `y` after
/// `delay`: (exit code, what it printed).
pub fn approve_on_a_terminal(w: &Work, run_dir: &Path, step: &str, deny: bool, delay: Duration) -> (Option<i32>, String) {
    let run_id = run_dir.file_name().unwrap().to_string_lossy().into_owned();
    let cmd = format!("{BIN} approve {run_id} {step} --runs {}{}", w.runs().display(), if deny { " --deny" } else { "" });
    let mut child = super::cmd("script")
        .args(["-qec", &cmd, "/dev/null"])
        .current_dir(&w.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux");
    let mut stdin = child.stdin.take().unwrap();
    std::thread::sleep(delay);
    let _ = stdin.write_all(b"y\n");
    let _ = stdin.flush();
    std::thread::sleep(Duration::from_millis(500));
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// The MCP conformance fixture (host/tests/mcp/conformance/fixture/server.mjs, on the TypeScript SDK) over
/// stdio: resources, a template, prompts, completions and tools that ask the client.
pub fn fixture() -> Vec<String> {
    let f = mcp_dir().join("conformance/fixture/server.mjs");
    assert!(
        mcp_dir().join("conformance/node_modules/@modelcontextprotocol/server").exists(),
        "the conformance fixture's SDK is not installed: run `bash host/tests/mcp/conformance/setup`"
    );
    vec!["node".into(), f.to_string_lossy().into_owned()]
}

/// `runbook-host run fixture-all@1.0.0` (every tool the fixture lists) from the conformance registry.
pub fn fixture_proxy(w: &Work) -> Vec<String> {
    let mut v: Vec<String> = [BIN, "run", "fixture-all@1.0.0", "--registry"].iter().map(|s| s.to_string()).collect();
    v.push(mcp_dir().join("conformance/registry").to_string_lossy().into_owned());
    v.extend(["--runs".to_string(), w.runs().to_string_lossy().into_owned(), "--".into()]);
    v.extend(fixture());
    v
}

/// host/tests/mcp/asking_server.py over stdio: its tool `ask` samples, elicits and lists roots through the
/// client, and logs.
pub fn asking_server() -> Vec<String> {
    vec![python().to_string_lossy().into_owned(), mcp_dir().join("asking_server.py").to_string_lossy().into_owned()]
}

/// What `ask` answered (its text is JSON), and what the client was asked and the logs it got meanwhile.
pub fn ask_through(c: &mut Client, question: &str) -> (Value, Value) {
    let r = c.ask(json!({"op": "call", "tool": "ask", "args": {"question": question}}));
    assert_eq!((&r["ok"], &r["is_error"]), (&json!(true), &json!(false)), "{r}");
    let answered: Value = serde_json::from_str(r["text"].as_str().unwrap()).unwrap_or_else(|e| panic!("{e}: {r}"));
    // A log message is a notification: give it the moment it may trail the answer by.
    std::thread::sleep(std::time::Duration::from_millis(300));
    (answered, c.ask(json!({"op": "asked"})))
}
