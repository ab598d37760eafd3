//! Driving `runbook-host hook` as Claude Code does: one process per hook event, the documented JSON
//! payload on stdin, in a scratch project with the rotate-credentials example as `runbook.yaml`.
#![allow(dead_code)]

use super::{cmd, Tmp};
pub use super::{repo, BIN};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// A copy of the binary in `dir/bin/` (a test installs a hook with it, then deletes it).
pub fn binary_copy(dir: &Path) -> PathBuf {
    let copy = dir.join("bin/runbook-host");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(BIN, &copy).unwrap();
    copy
}

/// A scratch project (a [`Tmp`]) with the rotate-credentials example as `runbook.yaml`.
pub struct Work(pub PathBuf, Tmp);

pub fn work(name: &str) -> Work {
    let t = Tmp::new(&format!("hook-{name}"));
    std::fs::copy(repo().join("examples/rotate-credentials/runbook.yaml"), t.join("runbook.yaml")).unwrap();
    Work(t.0.clone(), t)
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> Value {
        if self.stdout.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
        }
    }
    pub fn denied(&self) -> Option<String> {
        let v = self.json();
        (v["hookSpecificOutput"]["permissionDecision"] == "deny").then(|| v["hookSpecificOutput"]["permissionDecisionReason"].as_str().unwrap().to_string())
    }
    pub fn timing(&self) -> (u128, u128, u64) {
        let l = self.stderr.lines().find(|l| l.contains("timing ")).expect("timing line");
        let f = |k: &str| l.split_whitespace().find_map(|w| w.strip_prefix(k)).unwrap().parse::<u128>().unwrap();
        (f("total_us="), f("restore_us="), f("events=") as u64)
    }
}

impl Work {
    pub fn hook_bytes(&self, payload: &[u8]) -> Out {
        self.hook_with(&[], payload)
    }
    pub fn hook_with(&self, extra: &[&str], payload: &[u8]) -> Out {
        let mut c = cmd(BIN)
            .args(["hook", "--runbook", "runbook.yaml"])
            .args(extra)
            .current_dir(&self.0)
            .env("RUNBOOK_HOOK_TIMING", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(payload).unwrap();
        let o = c.wait_with_output().unwrap();
        Out { code: o.status.code().unwrap_or(-1), stdout: String::from_utf8_lossy(&o.stdout).into(), stderr: String::from_utf8_lossy(&o.stderr).into() }
    }
    pub fn hook(&self, payload: Value) -> Out {
        self.hook_bytes(payload.to_string().as_bytes())
    }
    pub fn runs(&self) -> PathBuf {
        self.0.join(".runbook/runs")
    }
    pub fn run_dir(&self, session: &str) -> PathBuf {
        let s: Value = serde_json::from_slice(&std::fs::read(self.runs().join(format!(".hook/{session}.json"))).unwrap()).unwrap();
        self.runs().join(s["run_id"].as_str().unwrap())
    }
    pub fn events(&self, session: &str) -> Vec<Value> {
        std::fs::read_to_string(self.run_dir(session).join("events.ndjson")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

pub fn base(session: &str, event: &str) -> Value {
    json!({"session_id": session, "transcript_path": "~/.claude/projects/t/s.jsonl", "cwd": ".", "permission_mode": "default", "hook_event_name": event})
}

pub fn start(session: &str) -> Value {
    let mut v = base(session, "SessionStart");
    v["source"] = json!("startup");
    v
}

pub fn pre(session: &str, tool: &str, input: Value, id: &str) -> Value {
    let mut v = base(session, "PreToolUse");
    v["tool_name"] = json!(tool);
    v["tool_input"] = input;
    v["tool_use_id"] = json!(id);
    v
}

pub fn post(session: &str, tool: &str, input: Value, response: Value, id: &str) -> Value {
    let mut v = pre(session, tool, input, id);
    v["hook_event_name"] = json!("PostToolUse");
    v["tool_response"] = response;
    v
}

pub fn bash(cmd: &str) -> Value {
    json!({"command": cmd})
}

pub fn out(stdout: &str) -> Value {
    json!({"stdout": stdout, "stderr": "", "interrupted": false, "isImage": false})
}

pub fn verify(run_dir: &Path) -> (bool, String) {
    let o = cmd(BIN).arg("verify").arg(run_dir).output().unwrap();
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// Allows (exit 0, no deny) or panics with what came back.
pub fn allowed(o: Out) {
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.denied().is_none(), "denied: {}", o.stdout);
}

/// Runs `runbook-host approve RUN STEP` on a pseudo-terminal (`script` from util-linux) and answers `y`,
/// as a human in another terminal would.
pub fn approve_on_a_terminal(runs: &Path, run_id: &str, step: &str) {
    let cmd = format!("{BIN} approve {run_id} {step} --runs {}", runs.display());
    let mut child = super::cmd("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux (bsdutils)");
    let mut stdin = child.stdin.take().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let _ = stdin.write_all(b"y\n");
    let _ = stdin.flush();
    std::thread::sleep(std::time::Duration::from_millis(500));
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "approve on a terminal: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let p = runbook_host::run::approvals::pending(&runs.join(run_id)).unwrap();
    assert!(p.is_empty(), "the request is still pending after the human's yes: {p:?}");
}

/// A session of rotate-credentials driven to its gated `rotate` step (inspect and check-age passed).
pub fn at_rotate(name: &str, s: &str) -> Work {
    let w = work(name);
    assert_eq!(w.hook(start(s)).code, 0);
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    allowed(w.hook(pre(s, "Bash", get.clone(), "t1")));
    allowed(w.hook(post(s, "Bash", get, out("payments-db-credentials   Opaque   2   97d\n"), "t1")));
    let meta = json!({"path": "database/creds/payments-app"});
    allowed(w.hook(pre(s, "mcp__vault__read_metadata", meta.clone(), "t2")));
    allowed(w.hook(post(s, "mcp__vault__read_metadata", meta, json!({"age_days": 97}), "t2")));
    w
}
