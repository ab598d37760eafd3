//! Driving the real Claude Code CLI offline: `claude -p` in a scratch project, its model played by a
//! scripted Anthropic Messages API on loopback (host/tests/claude/messages_api.py), so every tool call the
//! CLI makes, and every hook it runs, is the CLI's own. The CLI is the one `bash host/tests/claude/setup`
//! installs (host/tests/claude/.venv/bin/claude); without it the tests fail, they never skip.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `claude -p` may take before it is killed (a scripted run takes about a second).
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// The turns a run allows at most: a script that loops would end here rather than at [`TIMEOUT`].
pub const MAX_TURNS: u32 = 10;

fn here() -> PathBuf {
    super::repo().join("host/tests/claude")
}

/// The Claude Code CLI installed by host/tests/claude/setup.
pub fn claude() -> PathBuf {
    let p = here().join(".venv/bin/claude");
    assert!(p.is_file(), "the Claude Code CLI is not installed ({} is missing): run `bash host/tests/claude/setup` first", p.display());
    p
}

/// A running scripted Messages API (killed when dropped).
pub struct ScriptedApi {
    child: Child,
    pub port: u16,
    /// The request log: one JSON line per request (see messages_api.py).
    pub log: PathBuf,
}

impl ScriptedApi {
    /// Starts the API playing `turns` (a JSON list of `{"tool_use": [...]}` / `{"text": "..."}`), its
    /// script and request log written in `dir`.
    pub fn start(dir: &Path, turns: &Value) -> ScriptedApi {
        let script = dir.join("script.json");
        let log = dir.join("requests.ndjson");
        std::fs::write(&script, serde_json::to_vec_pretty(turns).unwrap()).unwrap();
        let _ = std::fs::remove_file(&log);
        let mut child = super::cmd("python3")
            .arg(here().join("messages_api.py"))
            .arg(&script)
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs host/tests/claude/messages_api.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("messages_api.py printed no port: {line:?}")
        });
        ScriptedApi { child, port, log }
    }

    /// The requests logged so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

impl Drop for ScriptedApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one `claude -p` run did.
pub struct CliRun {
    /// The CLI's exit code (None when killed by a signal).
    pub code: Option<i32>,
    /// Its standard output parsed (`--output-format json`: the result object).
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// The requests the scripted API received (messages_api.py's log).
    pub requests: Vec<Value>,
}

impl CliRun {
    /// The commands of the Bash calls the CLI reports as denied (`permission_denials`).
    pub fn denied_commands(&self) -> Vec<String> {
        let d = self.json["permission_denials"].as_array().unwrap_or_else(|| panic!("no permission_denials in the CLI's answer: {}", self.stdout));
        d.iter().filter(|d| d["tool_name"] == "Bash").map(|d| d["tool_input"]["command"].as_str().unwrap().to_string()).collect()
    }

    /// The tool results the CLI sent back to the model, in order: `{id, is_error, content}`.
    pub fn tool_results(&self) -> Vec<Value> {
        self.requests.iter().flat_map(|r| r["tool_results"].as_array().cloned().unwrap_or_default()).collect()
    }

    /// Everything, for an assertion message.
    pub fn show(&self) -> String {
        format!(
            "exit {:?} after {:?}\n--- stdout\n{}\n--- stderr\n{}\n--- requests\n{}",
            self.code,
            self.elapsed,
            self.stdout,
            self.stderr,
            self.requests.iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
        )
    }
}

/// Runs `claude -p PROMPT --output-format json` in `project` against a scripted API playing `turns`.
/// `scratch` (outside the project) holds the CLI's HOME, the script, the request log and the CLI's
/// output. The environment is cleared but for PATH: a scratch HOME (no user settings; [`super::isolate`]), a dummy API key,
/// no telemetry, update or other nonessential traffic. The settings are the project's
/// (`.claude/settings.json`, where `runbook-host hook install` writes the hook); the CLI itself lets
/// Bash run (`--allowedTools Bash`) so that whatever is blocked is blocked by a hook, and nothing
/// waits for a person (`--permission-prompts none`).
pub fn run(project: &Path, scratch: &Path, turns: &Value, prompt: &str) -> CliRun {
    run_with(project, scratch, turns, prompt, &[])
}

/// [`run`] with more arguments for the CLI (`--resume SESSION`, say).
pub fn run_with(project: &Path, scratch: &Path, turns: &Value, prompt: &str, extra: &[&str]) -> CliRun {
    run_as(None, project, scratch, turns, prompt, extra)
}

/// [`run_with`] as another user (`setpriv`; the test runs as root), who must be able to write the
/// project and `scratch/home`.
pub fn run_as(user: Option<&str>, project: &Path, scratch: &Path, turns: &Value, prompt: &str, extra: &[&str]) -> CliRun {
    run_tools(user, "Bash", project, scratch, turns, prompt, extra)
}

/// [`run_as`] with other built-in tools than Bash (comma-separated), each allowed without a prompt.
pub fn run_tools(user: Option<&str>, tools: &str, project: &Path, scratch: &Path, turns: &Value, prompt: &str, extra: &[&str]) -> CliRun {
    let home = scratch.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let api = ScriptedApi::start(scratch, turns);
    let (out, err) = (scratch.join("claude.stdout"), scratch.join("claude.stderr"));
    let t = Instant::now();
    let mut cmd = match user {
        None => Command::new(claude()),
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={u}"), format!("--regid={u}"), "--init-groups".into()]).arg(claude());
            c
        }
    };
    cmd.args(["-p", prompt, "--output-format", "json", "--max-turns", &MAX_TURNS.to_string()])
        .args(["--tools", tools, "--allowedTools", tools, "--permission-prompts", "none", "--strict-mcp-config"])
        .args(extra)
        .current_dir(project)
        .env_clear();
    let mut child = super::isolate(&mut cmd, &home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{}", api.port))
        .env("ANTHROPIC_API_KEY", "sk-ant-scripted-test")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        // Its own process group: a timeout kills the CLI with the hooks and shell commands it started.
        .process_group(0)
        .spawn()
        .expect("the Claude Code CLI starts");
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > TIMEOUT {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!(
                "claude -p did not finish within {TIMEOUT:?}; killed\n--- stderr\n{}\n--- requests\n{:?}",
                std::fs::read_to_string(&err).unwrap_or_default(),
                api.requests()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = t.elapsed();
    let stdout = std::fs::read_to_string(&out).unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap();
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    CliRun { code: status.code(), json, stdout, stderr, elapsed, requests: api.requests() }
}
