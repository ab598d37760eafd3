//! The hook under the real Gemini CLI (issue 30; `bash host/tests/gemini/setup` installs it, pinned),
//! offline: a scripted Gemini API on loopback plays the model ([`common::chat_cli`], `gemini_api.py`) and
//! asks for shell commands; the CLI runs the hooks `runbook-host hook --client gemini install` merged into
//! the project's `.gemini/settings.json`, in the folder that install trusted. The runbook is the one the
//! Claude Code tests run (say-hello), unchanged: Gemini CLI's `run_shell_command` is decided as `Bash`.

use crate::common::chat_cli::{self, ChatApi, CliRun};
use crate::common::hooks::BIN;
use crate::common::{self, repo, Tmp};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn gemini() -> PathBuf {
    let p = repo().join("host/tests/gemini/node_modules/.bin/runbook-gemini");
    assert!(p.is_file(), "Gemini CLI is not installed ({} is missing): run `bash host/tests/gemini/setup` first", p.display());
    p
}

/// `gemini -p PROMPT --approval-mode yolo` in `project` (yolo: Gemini CLI runs tools without asking, so
/// whatever is blocked is blocked by the hook), HOME the one `install` ran with (its trusted folders), an
/// API key for the scripted API, no telemetry, no update check, the shell without a pseudo-terminal.
fn run(project: &Path, home: &Path, scratch: &Path) -> CliRun {
    run_script(project, home, scratch, &chat_cli::script("run_shell_command"))
}

fn run_script(project: &Path, home: &Path, scratch: &Path, script: &Value) -> CliRun {
    let user = json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
        "privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false},
        "tools": {"shell": {"enableInteractiveShell": false}}});
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::write(home.join(".gemini/settings.json"), user.to_string()).unwrap();
    let api = ChatApi::start_program(scratch, script, "gemini_api.py");
    let mut cmd = Command::new(gemini());
    cmd.args(["--approval-mode", "yolo", "-m", "gemini-2.5-flash", "-p", "Say hello through the shell."]).current_dir(project).env_clear();
    common::isolate(&mut cmd, home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("TERM", "dumb")
        .env("GOOGLE_GEMINI_BASE_URL", format!("http://127.0.0.1:{}", api.port))
        .env("GEMINI_API_KEY", "scripted");
    chat_cli::run(cmd, &api)
}

fn hook_cli(bin: &Path, project: &Path, home: &Path, args: &[&str]) -> String {
    let o = common::cmd_in(bin, home).arg("hook").args(args).current_dir(project).output().unwrap();
    assert!(o.status.success(), "hook {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn setup(t: &Tmp) -> (PathBuf, PathBuf, PathBuf) {
    let (p, s) = chat_cli::project(&t.0);
    let home = t.0.join("home");
    std::fs::create_dir_all(&home).unwrap();
    // A settings file of the user's own: install merges into it and uninstall leaves it as it was.
    std::fs::create_dir_all(p.join(".gemini")).unwrap();
    std::fs::write(p.join(".gemini/settings.json"), json!({"context": {"fileName": "NOTES.md"}}).to_string()).unwrap();
    (p, s, home)
}

#[test]
fn gemini_cli_is_governed_by_the_runbook_claude_code_runs() {
    let t = Tmp::new("gemini-cli");
    let (p, s, home) = setup(&t);
    let said = hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "gemini", "install"]);
    assert!(said.contains("installed in `.gemini/settings.json` (Gemini CLI, command mode: 5 events; a failure to answer is a deny)"), "{said}");
    assert!(said.contains("trusted"), "{said}");
    let trusted: Value = serde_json::from_slice(&std::fs::read(home.join(".gemini/trustedFolders.json")).unwrap()).unwrap();
    assert_eq!(trusted[p.canonicalize().unwrap().to_string_lossy().as_ref()], "TRUST_FOLDER", "{trusted}");
    let settings: Value = serde_json::from_slice(&std::fs::read(p.join(".gemini/settings.json")).unwrap()).unwrap();
    assert_eq!(settings["context"]["fileName"], "NOTES.md");
    let before = settings["hooks"]["BeforeTool"][0]["hooks"][0]["command"].as_str().unwrap();
    assert!(before.contains("--client gemini") && before.contains("exit 2"), "{before}");

    let r = run(&p, &home, &s);
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(!p.join("pwned").exists(), "the denied command ran: {}", r.output);
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("undeclared-tool"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains("Output: hello"), "{}", r.tool_results[1]);

    // The run: the client named, the shell as `Bash`, the same decisions as under Claude Code, completed at
    // AfterAgent (its Stop), and it verifies.
    chat_cli::assert_say_hello_run(&p, BIN, "gemini-cli", Some("run_shell_command"));

    // Without the hook the same script runs the command: the hook is what blocked it. The user's own
    // settings are left as they were.
    let said = hook_cli(Path::new(BIN), &p, &home, &["--client", "gemini", "uninstall"]);
    assert!(said.contains("removed 5 hook entries"), "{said}");
    let settings: Value = serde_json::from_slice(&std::fs::read(p.join(".gemini/settings.json")).unwrap()).unwrap();
    assert_eq!(settings, json!({"context": {"fileName": "NOTES.md"}}));
    let s2 = t.0.join("scratch2");
    std::fs::create_dir_all(&s2).unwrap();
    let r = run(&p, &home, &s2);
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(p.join("pwned").exists(), "{}", r.output);
}

/// Gemini CLI runs the tool when a hook exits 1, dies or times out; the installed command turns a missing
/// binary (and any other failure of ours) into an exit 2 with a reason, which it honours as a deny.
#[test]
fn a_missing_hook_binary_still_blocks_in_gemini_cli() {
    let t = Tmp::new("gemini-missing");
    let (p, s, home) = setup(&t);
    let copy = common::hooks::binary_copy(&t.0);
    hook_cli(&copy, &p, &home, &["--runbook", "runbook.yaml", "--client", "gemini", "install"]);
    std::fs::remove_file(&copy).unwrap();
    let r = run(&p, &home, &s);
    assert!(!p.join("pwned").exists(), "{}", r.output);
    assert!(r.tool_results.first().is_some_and(|x| x.contains("no answer from the hook, so the call is denied")), "{:?}\n{}", r.tool_results, r.output);
}

/// An MCP tool of a stdio server (the real server-everything) is decided by the same hook under its
/// canonical name: Gemini CLI calls it `mcp_my_everything_echo`, the runbook names
/// `mcp__my_everything__echo` (the server's name holds an underscore: the split comes from the payload's
/// `mcp_context`, not from the name). The server's `add`, which the runbook does not name, never runs.
#[test]
fn an_mcp_tool_is_decided_by_its_canonical_name_in_gemini_cli() {
    let everything = chat_cli::everything();
    let t = Tmp::new("gemini-mcp");
    let (p, s, home) = setup(&t);
    std::fs::copy(repo().join("host/tests/gemini/mcp-echo.yaml"), p.join("runbook.yaml")).unwrap();
    let servers = json!({"mcpServers": {"my_everything": {"command": everything, "args": ["stdio"]}}});
    std::fs::write(p.join(".gemini/settings.json"), servers.to_string()).unwrap();
    hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "gemini", "install"]);
    let script = json!([
        {"tool_use": [{"name": "mcp_my_everything_get-sum", "input": {"a": 1, "b": 2}}]},
        {"tool_use": [{"name": "mcp_my_everything_echo", "input": {"message": "hi"}}]},
        {"text": "Echoed."}
    ]);
    let r = run_script(&p, &home, &s, &script);
    chat_cli::assert_mcp_echo_run(&r, &p, BIN, "mcp__my_everything__get-sum");
}

/// A gated call waits for a human: the first `echo hello` is denied as awaiting approval (the request
/// recorded), a person approves it on a terminal while the model is held, and the same call retried runs;
/// the run completes with the approval in its report and verifies.
#[test]
fn a_gated_call_runs_once_a_human_approved_it_in_gemini_cli() {
    let t = Tmp::new("gemini-gated");
    let (p, s, home) = setup(&t);
    std::fs::copy(repo().join("host/tests/claude/gated-hello.yaml"), p.join("runbook.yaml")).unwrap();
    hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "gemini", "install"]);
    let p2 = p.clone();
    chat_cli::assert_gated_session(&p, BIN, json!({"name": "run_shell_command", "input": {"command": "echo hello"}}), "Output: hello", move |script| {
        run_script(&p2, &home, &s, &script)
    });
}
