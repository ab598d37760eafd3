//! The hook under the real Qwen Code CLI (issue 30; `bash host/tests/qwen/setup` installs it, pinned),
//! offline: a scripted OpenAI Chat Completions API on loopback (host/tests/qwen/chat_api.py) plays the model
//! and asks for shell commands; the CLI runs the hooks `runbook-host hook --client qwen install` wrote in the
//! project's `.qwen/settings.json`. The runbook is the one the Claude Code tests run (say-hello: Bash
//! `echo hello` only), unchanged: Qwen Code's `run_shell_command` is decided as `Bash`.

mod common;

use common::hooks::BIN;
use common::{repo, Tmp};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn qwen() -> PathBuf {
    let p = repo().join("host/tests/qwen/node_modules/.bin/runbook-qwen");
    assert!(p.is_file(), "Qwen Code is not installed ({} is missing): run `bash host/tests/qwen/setup` first", p.display());
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

struct QwenRun {
    code: Option<i32>,
    output: String,
    /// The tool results the CLI sent back to the model, in order.
    tool_results: Vec<String>,
}

/// `qwen -p PROMPT --approval-mode yolo` in `project` (yolo: Qwen Code runs tools without asking, so
/// whatever is blocked is blocked by the hook), HOME in `scratch`, no telemetry, no update check.
fn run(project: &Path, scratch: &Path, turns: &Value) -> QwenRun {
    let home = scratch.join("home");
    std::fs::create_dir_all(home.join(".qwen")).unwrap();
    let user = json!({"security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false}, "general": {"enableAutoUpdate": false}});
    std::fs::write(home.join(".qwen/settings.json"), user.to_string()).unwrap();
    let api = ChatApi::start(scratch, turns);
    let mut child = Command::new(qwen())
        .args(["--auth-type", "openai", "--approval-mode", "yolo", "-p", "Say hello through the shell."])
        .current_dir(project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", &home)
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{}/v1", api.port))
        .env("OPENAI_API_KEY", "scripted")
        .env("OPENAI_MODEL", "scripted")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("qwen did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let requests = api.requests();
    let tool_results = requests
        .last()
        .map(|r| r["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").map(|m| m["content"].to_string()).collect())
        .unwrap_or_default();
    QwenRun { code: o.status.code(), output: format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)), tool_results }
}

fn script() -> Value {
    json!([
        {"tool_use": [{"name": "run_shell_command", "input": {"command": "touch pwned", "description": "make a file"}}]},
        {"tool_use": [{"name": "run_shell_command", "input": {"command": "echo hello", "description": "say hello"}}]},
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

fn hook_cli(bin: &Path, project: &Path, args: &[&str]) -> String {
    let o = Command::new(bin).arg("hook").args(args).current_dir(project).output().unwrap();
    assert!(o.status.success(), "hook {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn qwen_code_is_governed_by_the_runbook_claude_code_runs() {
    let t = Tmp::new("qwen-code");
    let (p, s) = project(&t);
    let said = hook_cli(Path::new(BIN), &p, &["--runbook", "runbook.yaml", "--client", "qwen", "install"]);
    assert!(said.contains("installed in `.qwen/settings.json` (Qwen Code, command mode"), "{said}");
    let settings: Value = serde_json::from_slice(&std::fs::read(p.join(".qwen/settings.json")).unwrap()).unwrap();
    let pre = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"].as_str().unwrap().to_string();
    assert!(pre.contains("--client qwen") && pre.contains("exit 2"), "{pre}");

    let r = run(&p, &s, &script());
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(!p.join("pwned").exists(), "the denied command ran: {}", r.output);
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("undeclared-tool"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains("hello"), "{}", r.tool_results[1]);

    // The run: the client named, the shell as `Bash`, the same decisions as under Claude Code, completed at
    // the client's Stop (Qwen Code sends no SessionEnd in a one-shot session), and it verifies.
    let runs = p.join(".runbook/runs");
    let l: Value = serde_json::from_slice(&std::fs::read(runs.join("latest.json")).unwrap()).unwrap();
    let dir = runs.join(l["path"].as_str().unwrap());
    let events: Vec<Value> = std::fs::read_to_string(dir.join("events.ndjson")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(events[0]["event"]["agent"].as_str().unwrap().starts_with("qwen-code:"), "{}", events[0]);
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
    let said = hook_cli(Path::new(BIN), &p, &["--client", "qwen", "uninstall"]);
    assert!(said.contains("removed 6 hook entries"), "{said}");
    let s2 = t.0.join("scratch2");
    std::fs::create_dir_all(&s2).unwrap();
    let r = run(&p, &s2, &script());
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(p.join("pwned").exists(), "{}", r.output);
}

/// Qwen Code runs the tool when a hook is missing or crashes (exit 127, a signal); the installed command
/// turns that into an exit 2 with a reason, which it honours as a deny.
#[test]
fn a_missing_hook_binary_still_blocks_in_qwen_code() {
    let t = Tmp::new("qwen-missing");
    let (p, s) = project(&t);
    let copy = t.0.join("bin/runbook-host");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(BIN, &copy).unwrap();
    hook_cli(&copy, &p, &["--runbook", "runbook.yaml", "--client", "qwen", "install"]);
    std::fs::remove_file(&copy).unwrap();
    let r = run(&p, &s, &script());
    assert!(!p.join("pwned").exists(), "{}", r.output);
    assert!(r.tool_results.first().is_some_and(|x| x.contains("no answer from the hook, so the call is denied")), "{:?}\n{}", r.tool_results, r.output);
}
