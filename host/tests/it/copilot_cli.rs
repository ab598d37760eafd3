//! The hook under the real GitHub Copilot CLI (issue 30; `bash host/tests/copilot/setup` installs it,
//! pinned), offline (`COPILOT_OFFLINE`): a scripted OpenAI Chat Completions API on loopback plays the model
//! ([`common::chat_cli`]) and asks for shell commands; the CLI runs the hooks `runbook-host hook --client
//! copilot install` wrote in `.github/hooks/runbook-host.json`, in the folder that install trusted. The
//! runbook is the one the Claude Code tests run (say-hello), unchanged: Copilot's `bash` is decided as `Bash`.

use crate::common::chat_cli::{self, ChatApi, CliRun};
use crate::common::hooks::BIN;
use crate::common::{self, repo, Tmp};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn copilot() -> PathBuf {
    let p = repo().join("host/tests/copilot/node_modules/.bin/runbook-copilot");
    assert!(p.is_file(), "the Copilot CLI is not installed ({} is missing): run `bash host/tests/copilot/setup` first", p.display());
    p
}

/// `copilot -p PROMPT --allow-all-tools` in `project` (Copilot runs tools without asking, so whatever is
/// blocked is blocked by the hook), HOME the one `install` ran with, offline, no telemetry, no update.
fn run(project: &Path, home: &Path, scratch: &Path) -> CliRun {
    run_script(project, home, scratch, &chat_cli::script("bash"))
}

fn run_script(project: &Path, home: &Path, scratch: &Path, script: &serde_json::Value) -> CliRun {
    let api = ChatApi::start(scratch, script);
    let mut cmd = Command::new(copilot());
    cmd.args(["--no-auto-update", "--disable-client-telemetry", "--allow-all-tools", "-p", "Say hello through the shell."]).current_dir(project).env_clear();
    common::isolate(&mut cmd, home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("TERM", "dumb")
        .env("COPILOT_OFFLINE", "true")
        .env("COPILOT_AUTO_UPDATE", "false")
        .env("COPILOT_PROVIDER_BASE_URL", format!("http://127.0.0.1:{}/v1", api.port))
        .env("COPILOT_MODEL", "gpt-4.1");
    chat_cli::run(cmd, &api)
}

fn hook_cli(project: &Path, home: &Path, args: &[&str]) -> String {
    let o = common::cmd_in(BIN, home).arg("hook").args(args).current_dir(project).output().unwrap();
    assert!(o.status.success(), "hook {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn copilot_cli_is_governed_by_the_runbook_claude_code_runs() {
    let t = Tmp::new("copilot-cli");
    let (p, s) = chat_cli::project(&t.0);
    let home = t.0.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let said = hook_cli(&p, &home, &["--runbook", "runbook.yaml", "--client", "copilot", "install"]);
    assert!(said.contains("installed `.github/hooks/runbook-host.json` (Copilot CLI"), "{said}");
    assert!(said.contains("trusted"), "{said}");
    let config: Value = serde_json::from_slice(&std::fs::read(home.join(".copilot/config.json")).unwrap()).unwrap();
    assert_eq!(config["trustedFolders"][0], p.canonicalize().unwrap().to_string_lossy().as_ref());

    let r = run(&p, &home, &s);
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(!p.join("pwned").exists(), "the denied command ran: {}", r.output);
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("undeclared-tool"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains("hello"), "{}", r.tool_results[1]);

    chat_cli::assert_say_hello_run(&p, BIN, "copilot-cli", Some("bash"));

    // Without the hook the same script runs the command: the hook is what blocked it.
    let said = hook_cli(&p, &home, &["--client", "copilot", "uninstall"]);
    assert!(said.contains("removed `.github/hooks/runbook-host.json`"), "{said}");
    let s2 = t.0.join("scratch2");
    std::fs::create_dir_all(&s2).unwrap();
    let r = run(&p, &home, &s2);
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(p.join("pwned").exists(), "{}", r.output);
}

/// A gated call waits for a human: the first `echo hello` is denied as awaiting approval, a person approves
/// it on a terminal while the model is held, and the same call retried runs; the run completes and verifies.
#[test]
fn a_gated_call_runs_once_a_human_approved_it_in_copilot_cli() {
    let t = Tmp::new("copilot-gated");
    let (p, s) = chat_cli::project(&t.0);
    std::fs::copy(repo().join("host/tests/claude/gated-hello.yaml"), p.join("runbook.yaml")).unwrap();
    let home = t.0.join("home");
    std::fs::create_dir_all(&home).unwrap();
    hook_cli(&p, &home, &["--runbook", "runbook.yaml", "--client", "copilot", "install"]);
    let p2 = p.clone();
    chat_cli::assert_gated_session(
        &p,
        BIN,
        serde_json::json!({"name": "bash", "input": {"command": "echo hello", "description": "say hello"}}),
        "hello",
        move |script| run_script(&p2, &home, &s, &script),
    );
}

/// An MCP tool of a stdio server (the real server-everything, as `my_everything` in Copilot's
/// `mcp-config.json`) is decided by the same hook: Copilot names it `my_everything-echo`, which the adapter
/// splits by the servers `mcp-config.json` names into the runbook's `mcp__my_everything__echo`.
#[test]
fn an_mcp_tool_is_decided_by_its_canonical_name_in_copilot_cli() {
    let t = Tmp::new("copilot-mcp");
    let (p, s) = chat_cli::project(&t.0);
    let home = t.0.join("home");
    std::fs::create_dir_all(home.join(".copilot")).unwrap();
    std::fs::copy(repo().join("host/tests/gemini/mcp-echo.yaml"), p.join("runbook.yaml")).unwrap();
    let servers = serde_json::json!({"mcpServers": {"my_everything": {"type": "local", "command": chat_cli::everything(), "args": ["stdio"], "tools": ["*"]}}});
    std::fs::write(home.join(".copilot/mcp-config.json"), servers.to_string()).unwrap();
    hook_cli(&p, &home, &["--runbook", "runbook.yaml", "--client", "copilot", "install"]);
    let script = serde_json::json!([
        {"tool_use": [{"name": "my_everything-get-sum", "input": {"a": 1, "b": 2}}]},
        {"tool_use": [{"name": "my_everything-echo", "input": {"message": "hi"}}]},
        {"text": "Echoed."}
    ]);
    let r = run_script(&p, &home, &s, &script);
    chat_cli::assert_mcp_echo_run(&r, &p, BIN, "mcp__my_everything__get-sum");
}
