//! The hook under the real GitHub Copilot CLI (issue 30; `bash host/tests/copilot/setup` installs it,
//! pinned), offline (`COPILOT_OFFLINE`): a scripted OpenAI Chat Completions API on loopback
//! (host/tests/qwen/chat_api.py) plays the model and asks for shell commands; the CLI runs the hooks
//! `runbook-host hook --client copilot install` wrote in `.github/hooks/runbook-host.json`, in the folder that
//! install trusted. The runbook is the one the Claude Code tests run (say-hello), unchanged: Copilot's `bash`
//! is decided as `Bash`.

mod common;

use common::hooks::BIN;
use common::{repo, Tmp};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn copilot() -> PathBuf {
    let p = repo().join("host/tests/copilot/node_modules/.bin/runbook-copilot");
    assert!(p.is_file(), "the Copilot CLI is not installed ({} is missing): run `bash host/tests/copilot/setup` first", p.display());
    p
}

/// The scripted model (killed when dropped).
struct ChatApi {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl ChatApi {
    fn start(dir: &Path, turns: &Value) -> ChatApi {
        let script = dir.join("script.json");
        let log = dir.join("requests.ndjson");
        std::fs::write(&script, turns.to_string()).unwrap();
        let mut child = Command::new("python3")
            .arg(repo().join("host/tests/qwen/chat_api.py"))
            .arg(&script)
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs chat_api.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        ChatApi { port: line.trim().parse().expect("chat_api.py printed its port"), child, log }
    }
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

impl Drop for ChatApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct CopilotRun {
    code: Option<i32>,
    output: String,
    /// The tool results the CLI sent back to the model, in order.
    tool_results: Vec<String>,
}

/// `copilot -p PROMPT --allow-all-tools` in `project` (Copilot runs tools without asking, so whatever is
/// blocked is blocked by the hook), HOME the one `install` ran with, offline, no telemetry, no update.
fn run(project: &Path, home: &Path, scratch: &Path, turns: &Value) -> CopilotRun {
    let api = ChatApi::start(scratch, turns);
    let mut child = Command::new(copilot())
        .args(["--no-auto-update", "--disable-client-telemetry", "--allow-all-tools", "-p", "Say hello through the shell."])
        .current_dir(project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", home)
        .env("TERM", "dumb")
        .env("COPILOT_OFFLINE", "true")
        .env("COPILOT_AUTO_UPDATE", "false")
        .env("COPILOT_PROVIDER_BASE_URL", format!("http://127.0.0.1:{}/v1", api.port))
        .env("COPILOT_MODEL", "gpt-4.1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("copilot did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let requests = api.requests();
    let tool_results = requests
        .last()
        .map(|r| r["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").map(|m| m["content"].to_string()).collect())
        .unwrap_or_default();
    CopilotRun { code: o.status.code(), output: format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)), tool_results }
}

fn script() -> Value {
    json!([
        {"tool_use": [{"name": "bash", "input": {"command": "touch pwned", "description": "make a file"}}]},
        {"tool_use": [{"name": "bash", "input": {"command": "echo hello", "description": "say hello"}}]},
        {"text": "Said hello."}
    ])
}

fn project(t: &Tmp) -> (PathBuf, PathBuf) {
    let (p, s) = (t.0.join("project"), t.0.join("scratch"));
    std::fs::create_dir_all(&p).unwrap();
    std::fs::create_dir_all(&s).unwrap();
    std::fs::copy(repo().join("host/tests/claude/say-hello.yaml"), p.join("runbook.yaml")).unwrap();
    (p, s)
}

fn hook_cli(bin: &Path, project: &Path, home: &Path, args: &[&str]) -> String {
    let o = Command::new(bin).arg("hook").args(args).current_dir(project).env("HOME", home).env_remove("COPILOT_HOME").output().unwrap();
    assert!(o.status.success(), "hook {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn copilot_cli_is_governed_by_the_runbook_claude_code_runs() {
    let t = Tmp::new("copilot-cli");
    let (p, s) = project(&t);
    let home = t.0.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let said = hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "copilot", "install"]);
    assert!(said.contains("installed `.github/hooks/runbook-host.json` (Copilot CLI"), "{said}");
    assert!(said.contains("trusted"), "{said}");
    let config: Value = serde_json::from_slice(&std::fs::read(home.join(".copilot/config.json")).unwrap()).unwrap();
    assert_eq!(config["trustedFolders"][0], p.canonicalize().unwrap().to_string_lossy().as_ref());

    let r = run(&p, &home, &s, &script());
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(!p.join("pwned").exists(), "the denied command ran: {}", r.output);
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("undeclared-tool"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains("hello"), "{}", r.tool_results[1]);

    let runs = p.join(".runbook/runs");
    let l: Value = serde_json::from_slice(&std::fs::read(runs.join("latest.json")).unwrap()).unwrap();
    let dir = runs.join(l["path"].as_str().unwrap());
    let events: Vec<Value> = std::fs::read_to_string(dir.join("events.ndjson")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(events[0]["event"]["agent"].as_str().unwrap().starts_with("copilot-cli:"), "{}", events[0]);
    let invokes: Vec<(&str, &str, &str)> = events
        .iter()
        .filter(|e| e["event"]["type"] == "invoke")
        .map(|e| (e["event"]["tool"].as_str().unwrap(), e["event"]["arguments"]["command"].as_str().unwrap(), e["decision"]["decision"].as_str().unwrap()))
        .collect();
    assert_eq!(invokes, [("Bash", "touch pwned", "deny"), ("Bash", "echo hello", "allow")]);
    let report: Value = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["outcome"], "completed", "{report}");
    let v = Command::new(BIN).args(["verify", "latest"]).current_dir(&p).output().unwrap();
    assert!(v.status.success(), "{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));

    // Without the hook the same script runs the command: the hook is what blocked it.
    let said = hook_cli(Path::new(BIN), &p, &home, &["--client", "copilot", "uninstall"]);
    assert!(said.contains("removed `.github/hooks/runbook-host.json`"), "{said}");
    let s2 = t.0.join("scratch2");
    std::fs::create_dir_all(&s2).unwrap();
    let r = run(&p, &home, &s2, &script());
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(p.join("pwned").exists(), "{}", r.output);
}
