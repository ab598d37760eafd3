//! The hook under the real Qwen Code CLI (issue 30; `bash host/tests/qwen/setup` installs it, pinned),
//! offline: a scripted OpenAI Chat Completions API on loopback plays the model ([`common::chat_cli`]) and
//! asks for shell commands; the CLI runs the hooks `runbook-host hook --client qwen install` wrote in the
//! project's `.qwen/settings.json`. The runbook is the one the Claude Code tests run (say-hello: Bash
//! `echo hello` only), unchanged: Qwen Code's `run_shell_command` is decided as `Bash`.

use crate::common::chat_cli::{self, ChatApi, CliRun};
use crate::common::hooks::BIN;
use crate::common::{self, repo, Tmp};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn qwen() -> PathBuf {
    let p = repo().join("host/tests/qwen/node_modules/.bin/runbook-qwen");
    assert!(p.is_file(), "Qwen Code is not installed ({} is missing): run `bash host/tests/qwen/setup` first", p.display());
    p
}

/// `qwen -p PROMPT --approval-mode yolo` in `project` (yolo: Qwen Code runs tools without asking, so
/// whatever is blocked is blocked by the hook), HOME beside it with folder trust on, no telemetry, no
/// update check. The shell
/// runs without a pseudo-terminal: through node-pty, Qwen Code now and then loses a fast command's output
/// (`Output: (empty)` for `echo hello`; seen once in CI), and the run then fails its assert, rightly.
fn run(project: &Path, scratch: &Path) -> CliRun {
    run_script(project, scratch, &chat_cli::script("run_shell_command"))
}

fn run_script(project: &Path, scratch: &Path, script: &Value) -> CliRun {
    let home = home_of(project);
    std::fs::create_dir_all(home.join(".qwen")).unwrap();
    let user = json!({"security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": true}}, "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false}, "general": {"enableAutoUpdate": false}, "tools": {"shell": {"enableInteractiveShell": false}}});
    std::fs::write(home.join(".qwen/settings.json"), user.to_string()).unwrap();
    let api = ChatApi::start(scratch, script);
    let mut cmd = Command::new(qwen());
    cmd.args(["--auth-type", "openai", "--approval-mode", "yolo", "-p", "Say hello through the shell."]).current_dir(project).env_clear();
    common::isolate(&mut cmd, &home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{}/v1", api.port))
        .env("OPENAI_API_KEY", "scripted")
        .env("OPENAI_MODEL", "scripted");
    chat_cli::run(cmd, &api)
}

/// The HOME of the project's install and runs (beside it): with Qwen Code's folder trust on, as the runs
/// have it, the hooks load only because install trusted the project there.
fn home_of(project: &Path) -> PathBuf {
    project.parent().unwrap().join("home")
}

fn hook_cli(bin: &Path, project: &Path, args: &[&str]) -> String {
    let o = common::cmd_in(bin, &home_of(project)).arg("hook").args(args).current_dir(project).output().unwrap();
    assert!(o.status.success(), "hook {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn qwen_code_is_governed_by_the_runbook_claude_code_runs() {
    let t = Tmp::new("qwen-code");
    let (p, s) = chat_cli::project(&t.0);
    let said = hook_cli(Path::new(BIN), &p, &["--runbook", "runbook.yaml", "--client", "qwen", "install"]);
    assert!(said.contains("installed in `.qwen/settings.json` (Qwen Code, command mode"), "{said}");
    assert!(said.contains("trusted") && said.contains("trustedFolders.json"), "{said}");
    let settings: Value = serde_json::from_slice(&std::fs::read(p.join(".qwen/settings.json")).unwrap()).unwrap();
    let pre = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"].as_str().unwrap().to_string();
    assert!(pre.contains("--client qwen") && pre.contains("exit 2"), "{pre}");

    let r = run(&p, &s);
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(!p.join("pwned").exists(), "the denied command ran: {}", r.output);
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("undeclared-tool"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains("Output: hello"), "{}", r.tool_results[1]);

    // The run: the client named, the shell as `Bash`, the same decisions as under Claude Code, completed at
    // the client's Stop (Qwen Code sends no SessionEnd in a one-shot session), and it verifies.
    chat_cli::assert_say_hello_run(&p, BIN, "qwen-code", Some("run_shell_command"));

    // Without the hook the same script runs the command: the hook is what blocked it.
    let said = hook_cli(Path::new(BIN), &p, &["--client", "qwen", "uninstall"]);
    assert!(said.contains("removed 6 hook entries"), "{said}");
    let s2 = t.0.join("scratch2");
    std::fs::create_dir_all(&s2).unwrap();
    let r = run(&p, &s2);
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(p.join("pwned").exists(), "{}", r.output);
}

/// Qwen Code runs the tool when a hook is missing or crashes (exit 127, a signal); the installed command
/// turns that into an exit 2 with a reason, which it honours as a deny.
#[test]
fn a_missing_hook_binary_still_blocks_in_qwen_code() {
    let t = Tmp::new("qwen-missing");
    let (p, s) = chat_cli::project(&t.0);
    let copy = common::hooks::binary_copy(&t.0);
    hook_cli(&copy, &p, &["--runbook", "runbook.yaml", "--client", "qwen", "install"]);
    std::fs::remove_file(&copy).unwrap();
    let r = run(&p, &s);
    assert!(!p.join("pwned").exists(), "{}", r.output);
    assert!(r.tool_results.first().is_some_and(|x| x.contains("no answer from the hook, so the call is denied")), "{:?}\n{}", r.tool_results, r.output);
}

/// A gated call waits for a human: the first `echo hello` is denied as awaiting approval, a person approves
/// it on a terminal while the model is held, and the same call retried runs; the run completes and verifies.
#[test]
fn a_gated_call_runs_once_a_human_approved_it_in_qwen_code() {
    let t = Tmp::new("qwen-gated");
    let (p, s) = chat_cli::project(&t.0);
    std::fs::copy(repo().join("host/tests/claude/gated-hello.yaml"), p.join("runbook.yaml")).unwrap();
    hook_cli(Path::new(BIN), &p, &["--runbook", "runbook.yaml", "--client", "qwen", "install"]);
    let p2 = p.clone();
    chat_cli::assert_gated_session(
        &p,
        BIN,
        json!({"name": "run_shell_command", "input": {"command": "echo hello", "description": "say hello"}}),
        "Output: hello",
        move |script| run_script(&p2, &s, &script),
    );
}

/// An MCP tool of a stdio server (the real server-everything, as `my_everything` in the project's
/// `.qwen/settings.json`, approved with `qwen mcp approve` as Qwen Code asks of a project's server) is
/// decided by the same hook: Qwen Code names it `mcp__my_everything__echo`, as the runbook does.
#[test]
fn an_mcp_tool_is_decided_by_its_canonical_name_in_qwen_code() {
    let t = Tmp::new("qwen-mcp");
    let (p, s) = chat_cli::project(&t.0);
    std::fs::copy(repo().join("host/tests/gemini/mcp-echo.yaml"), p.join("runbook.yaml")).unwrap();
    std::fs::create_dir_all(p.join(".qwen")).unwrap();
    let servers = json!({"mcpServers": {"my_everything": {"command": chat_cli::everything(), "args": ["stdio"]}}});
    std::fs::write(p.join(".qwen/settings.json"), servers.to_string()).unwrap();
    hook_cli(Path::new(BIN), &p, &["--runbook", "runbook.yaml", "--client", "qwen", "install"]);
    let home = home_of(&p);
    let mut approve = Command::new(qwen());
    approve.args(["mcp", "approve", "my_everything"]).current_dir(&p).env_clear();
    let o = common::isolate(&mut approve, &home).env("PATH", std::env::var_os("PATH").unwrap()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let script = json!([
        {"tool_use": [{"name": "mcp__my_everything__get-sum", "input": {"a": 1, "b": 2}}]},
        {"tool_use": [{"name": "mcp__my_everything__echo", "input": {"message": "hi"}}]},
        {"text": "Echoed."}
    ]);
    let r = run_script(&p, &s, &script);
    chat_cli::assert_mcp_echo_run(&r, &p, BIN, "mcp__my_everything__get-sum");
}
