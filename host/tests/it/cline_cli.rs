//! The hook under the real Cline CLI (issue 30; `bash host/tests/cline/setup` installs it, pinned),
//! offline: a scripted OpenAI Chat Completions API on loopback plays the model ([`common::chat_cli`])
//! through Cline's `openai-compatible` provider; `cline --json PROMPT` runs the scripts
//! `runbook-host hook --client cline install` wrote in `.clinerules/hooks/`. The runbook is the one the
//! Claude Code tests run (say-hello), unchanged: Cline's `run_commands` is decided as one `Bash` per
//! command.

use crate::common::chat_cli::{self, ChatApi, CliRun};
use crate::common::hooks::BIN;
use crate::common::{self, repo, Tmp};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn cline() -> PathBuf {
    let p = repo().join("host/tests/cline/node_modules/.bin/runbook-cline");
    assert!(p.is_file(), "Cline is not installed ({} is missing): run `bash host/tests/cline/setup` first", p.display());
    p
}

fn setup(t: &Tmp) -> (PathBuf, PathBuf, PathBuf) {
    let (p, s) = chat_cli::project(&t.0);
    let home = t.0.join("home");
    std::fs::create_dir_all(home.join(".cline/data/settings")).unwrap();
    (p, s, home)
}

/// `cline --json PROMPT` in `project`, HOME and CLINE_DIR in `home`, the provider the scripted API.
fn run_script(project: &Path, home: &Path, scratch: &Path, script: &Value) -> CliRun {
    let api = ChatApi::start(scratch, script);
    let settings = home.join(".cline/data/settings");
    let provider = json!({"provider": "openai-compatible", "apiKey": "scripted", "model": "scripted", "baseUrl": format!("http://127.0.0.1:{}/v1", api.port)});
    let providers = json!({"version": 1, "lastUsedProvider": "openai-compatible", "modes": {},
        "providers": {"openai-compatible": {"settings": provider, "updatedAt": "2026-01-01T00:00:00.000Z", "tokenSource": "manual"}}});
    std::fs::write(settings.join("providers.json"), providers.to_string()).unwrap();
    let mut cmd = Command::new(cline());
    cmd.args(["--json", "Say hello through the shell."]).current_dir(project).env_clear();
    common::isolate(&mut cmd, home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("CLINE_DIR", home.join(".cline"))
        .env("CLINE_SESSION_BACKEND_MODE", "local")
        .env("CLINE_NO_AUTO_UPDATE", "1");
    chat_cli::run(cmd, &api)
}

fn hook_cli(bin: &Path, project: &Path, home: &Path, args: &[&str]) -> String {
    let o = common::cmd_in(bin, home).arg("hook").args(args).current_dir(project).env("CLINE_DIR", home.join(".cline")).output().unwrap();
    assert!(o.status.success(), "hook {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn shell(commands: &[&str]) -> Value {
    json!({"name": "run_commands", "input": {"commands": commands}})
}

/// The say-hello session in Cline's vocabulary.
fn say_hello() -> Value {
    json!([{"tool_use": [shell(&["touch pwned"])]}, {"tool_use": [shell(&["echo hello"])]}, {"text": "Said hello."}])
}

/// Cline runs TaskComplete and SessionShutdown without waiting for them: the latest run, once its report
/// is written (at most 20 s).
fn wait_for_report(project: &Path) {
    let runs = project.join(".runbook/runs");
    let t = Instant::now();
    loop {
        let report = std::fs::read(runs.join("latest.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|l| l["path"].as_str().map(|p| runs.join(p).join("report.json")));
        if report.is_some_and(|r| r.exists()) {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "the run of {} was not ended within 20 s", project.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the model was told last: every message of the last request.
fn told(api_dir: &Path) -> String {
    std::fs::read_to_string(api_dir.join("requests.ndjson")).unwrap_or_default().lines().last().unwrap_or_default().to_string()
}

#[test]
fn cline_is_governed_by_the_runbook_claude_code_runs() {
    let t = Tmp::new("cline-cli");
    let (p, s, home) = setup(&t);
    let said = hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "cline", "install"]);
    assert!(said.contains("installed 7 hook scripts in `.clinerules/hooks`"), "{said}");

    let r = run_script(&p, &home, &s, &say_hello());
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(!p.join("pwned").exists(), "the denied command ran: {}", r.output);
    // The denied call: its input rejected (it never ran), the reason told to the model, the task went on.
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("Invalid input") && r.tool_results[0].contains("undeclared-tool"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains("hello"), "{}", r.tool_results[1]);
    assert!(r.output.contains("\"finishReason\":\"completed\""), "{}", r.output);

    // The run: the client named, each command as `Bash`, the same decision lines as every other client,
    // completed at the task's end, and it verifies.
    wait_for_report(&p);
    chat_cli::assert_say_hello_run(&p, BIN, "cline", Some("run_commands"));

    // Without the hooks the same script runs the command: the hooks are what blocked it.
    let said = hook_cli(Path::new(BIN), &p, &home, &["--client", "cline", "uninstall"]);
    assert!(said.contains("removed 7 hook scripts"), "{said}");
    let s2 = t.0.join("scratch2");
    std::fs::create_dir_all(&s2).unwrap();
    let r = run_script(&p, &home, &s2, &say_hello());
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(p.join("pwned").exists(), "{}", r.output);
}

/// One call of two commands runs only when both are allowed: `echo hello` with `touch pwned` runs neither
/// (the call's input is replaced as a whole).
#[test]
fn a_call_of_several_commands_runs_only_when_each_is_allowed_in_cline() {
    let t = Tmp::new("cline-two");
    let (p, s, home) = setup(&t);
    hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "cline", "install"]);
    let script = json!([{"tool_use": [shell(&["echo hello", "touch pwned"])]}, {"text": "Tried."}]);
    let r = run_script(&p, &home, &s, &script);
    assert!(!p.join("pwned").exists(), "{}", r.output);
    assert!(r.tool_results.first().is_some_and(|x| x.contains("Invalid input")), "{:?}\n{}", r.tool_results, r.output);
    wait_for_report(&p);
    let (events, _) = chat_cli::latest_verified(&p, BIN);
    let want = [("Bash", "echo hello", "allow"), ("Bash", "touch pwned", "deny")].map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(chat_cli::invokes(&events), want);
}

/// The scripts turn a hook that cannot answer (its binary deleted after install) into a cancel: the task
/// stops before the command runs.
#[test]
fn a_missing_hook_binary_still_blocks_in_cline() {
    let t = Tmp::new("cline-missing");
    let (p, s, home) = setup(&t);
    let copy = common::hooks::binary_copy(&t.0);
    hook_cli(&copy, &p, &home, &["--runbook", "runbook.yaml", "--client", "cline", "install"]);
    std::fs::remove_file(&copy).unwrap();
    let r = run_script(&p, &home, &s, &say_hello());
    assert!(!p.join("pwned").exists(), "{}", r.output);
    assert!(r.output.contains("\"finishReason\":\"aborted\""), "{}", r.output);
}

/// A gated call waits for a human: the first `echo hello` is denied as awaiting approval, a person approves
/// it on a terminal while the model is held, and the same call retried runs; the run completes and verifies.
#[test]
fn a_gated_call_runs_once_a_human_approved_it_in_cline() {
    let t = Tmp::new("cline-gated");
    let (p, s, home) = setup(&t);
    std::fs::copy(repo().join("host/tests/claude/gated-hello.yaml"), p.join("runbook.yaml")).unwrap();
    hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "cline", "install"]);
    let p2 = p.clone();
    chat_cli::assert_gated_session(&p, BIN, shell(&["echo hello"]), "hello", move |script| {
        let r = run_script(&p2, &home, &s, &script);
        wait_for_report(&p2);
        r
    });
}

/// An MCP tool of a stdio server is decided by its canonical name: the allowed `echo` runs; `get-sum`, which
/// the runbook does not name, never runs, and (Cline runs an MCP tool whatever input it is given) the task
/// is stopped rather than the call's input replaced.
#[test]
fn an_mcp_tool_is_decided_by_its_canonical_name_in_cline() {
    let everything = chat_cli::everything();
    let t = Tmp::new("cline-mcp");
    let (p, s, home) = setup(&t);
    std::fs::copy(repo().join("host/tests/gemini/mcp-echo.yaml"), p.join("runbook.yaml")).unwrap();
    let servers = json!({"mcpServers": {"my_everything": {"transport": {"type": "stdio", "command": everything, "args": ["stdio"]}}}});
    std::fs::write(home.join(".cline/data/settings/cline_mcp_settings.json"), servers.to_string()).unwrap();
    hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "cline", "install"]);
    let script = json!([
        {"tool_use": [{"name": "my_everything__echo", "input": {"message": "hi"}}]},
        {"tool_use": [{"name": "my_everything__get-sum", "input": {"a": 1, "b": 2}}]},
        {"text": "Done."}
    ]);
    let r = run_script(&p, &home, &s, &script);
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(r.tool_results.first().is_some_and(|x| x.contains("Echo: hi")), "{:?}\n{}", r.tool_results, r.output);
    assert!(r.output.contains("\"finishReason\":\"aborted\""), "{}", r.output);
    assert!(!told(&s).contains("The sum"), "{}", told(&s));
    wait_for_report(&p);
    let (events, report) = chat_cli::latest_verified(&p, BIN);
    let tools: Vec<_> =
        events.iter().filter(|e| e["event"]["type"] == "invoke").map(|e| (e["event"]["tool"].clone(), e["decision"]["decision"].clone())).collect();
    assert_eq!(tools, [(json!("mcp__my_everything__echo"), json!("allow")), (json!("mcp__my_everything__get-sum"), json!("deny"))]);
    assert_eq!(report["outcome"], "completed", "{report}\n{events:#?}");
}
