//! The hook under the real OpenAI Codex CLI (issue 30; `bash host/tests/codex/setup` installs it, pinned),
//! offline: a scripted OpenAI Responses API on loopback plays the model ([`common::chat_cli`],
//! `responses_api.py`) and asks for shell commands; `codex exec` runs the hooks `runbook-host hook --client
//! codex install` wrote in the project's `.codex/hooks.json`, trusted by the hashes install wrote in
//! Codex's config (without them Codex skips the hooks silently). The runbook is the one the Claude Code
//! tests run (say-hello), unchanged: Codex names its shell `Bash` in its hooks.

use crate::common::chat_cli::{self, ChatApi, CliRun};
use crate::common::hooks::BIN;
use crate::common::{self, repo, Tmp};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

fn codex() -> PathBuf {
    let p = repo().join("host/tests/codex/node_modules/.bin/runbook-codex");
    assert!(p.is_file(), "Codex is not installed ({} is missing): run `bash host/tests/codex/setup` first", p.display());
    p
}

/// The model's turns: `touch pwned`, `echo hello`, an answer (Codex's shell tool is `exec_command {cmd}`).
fn script() -> serde_json::Value {
    json!([
        {"tool_use": [{"name": "exec_command", "input": {"cmd": "touch pwned"}}]},
        {"tool_use": [{"name": "exec_command", "input": {"cmd": "echo hello"}}]},
        {"text": "Said hello."}
    ])
}

/// Codex's user config before install: the scripted provider (its port filled in by [`run`]), no update
/// check, no analytics, no plugin fetches (each would reach past loopback).
const CONFIG: &str = r#"# the user's own settings: install adds to them and keeps these lines
model = "gpt-5.5"
model_provider = "scripted"
check_for_update_on_startup = false

[model_providers.scripted]
name = "scripted"
base_url = "http://127.0.0.1:1/v1"
wire_api = "responses"
env_key = "SCRIPTED_API_KEY"

[analytics]
enabled = false

[features]
plugins = false
apps = false
remote_plugin = false
"#;

/// `codex exec` in `project` with full access (no sandbox: whatever is blocked is blocked by the hook),
/// CODEX_HOME the one install wrote to, the provider pointed at a scripted API started now.
fn run(project: &Path, codex_home: &Path, scratch: &Path) -> CliRun {
    run_script(project, codex_home, scratch, &script())
}

fn run_script(project: &Path, codex_home: &Path, scratch: &Path, script: &serde_json::Value) -> CliRun {
    let api = ChatApi::start_program(scratch, script, "responses_api.py");
    let config = codex_home.join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text: String = text
        .lines()
        .map(|l| if l.starts_with("base_url = ") { format!("base_url = \"http://127.0.0.1:{}/v1\"\n", api.port) } else { format!("{l}\n") })
        .collect();
    std::fs::write(&config, text).unwrap();
    let mut cmd = Command::new(codex());
    cmd.args(["exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "Say hello through the shell."]).current_dir(project).env_clear();
    common::isolate(&mut cmd, codex_home.parent().unwrap())
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("CODEX_HOME", codex_home)
        .env("SCRIPTED_API_KEY", "scripted");
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
    std::fs::create_dir_all(home.join(".codex")).unwrap();
    std::fs::write(home.join(".codex/config.toml"), CONFIG).unwrap();
    (p, s, home)
}

#[test]
fn codex_is_governed_by_the_runbook_claude_code_runs() {
    let t = Tmp::new("codex-cli");
    let (p, s, home) = setup(&t);
    let said = hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "codex", "install"]);
    assert!(said.contains("installed in `.codex/hooks.json` (Codex, command mode: 5 events; a failure to answer a PreToolUse is a deny)"), "{said}");
    assert!(said.contains("trusted 5 hooks and the project"), "{said}");
    let config = std::fs::read_to_string(home.join(".codex/config.toml")).unwrap();
    assert!(config.starts_with("# the user's own settings"), "{config}");
    assert!(config.contains("trust_level = \"trusted\"") && config.contains(":pre_tool_use:0:0\"]"), "{config}");

    let r = run(&p, &home.join(".codex"), &s);
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(!p.join("pwned").exists(), "the denied command ran: {}", r.output);
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("Command blocked by PreToolUse hook") && r.tool_results[0].contains("undeclared-tool"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains("hello"), "{}", r.tool_results[1]);

    // The run: the client named, the same decisions as under Claude Code, completed at Stop, and it verifies.
    chat_cli::assert_say_hello_run(&p, BIN, "codex", None);

    // Without the hook the same script runs the command: the hook is what blocked it; its trust is gone
    // from the config, the user's lines and the project's trust stay.
    let said = hook_cli(Path::new(BIN), &p, &home, &["--client", "codex", "uninstall"]);
    assert!(said.contains("removed 5 hook entries"), "{said}");
    assert!(!p.join(".codex/hooks.json").exists());
    let config = std::fs::read_to_string(home.join(".codex/config.toml")).unwrap();
    assert!(!config.contains("trusted_hash") && config.contains("trust_level = \"trusted\"") && config.contains("remote_plugin = false"), "{config}");
    let s2 = t.0.join("scratch2");
    std::fs::create_dir_all(&s2).unwrap();
    let r = run(&p, &home.join(".codex"), &s2);
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(p.join("pwned").exists(), "{}", r.output);
}

/// Codex runs the tool when a hook is missing, exits 1 or dies; the installed command turns a missing
/// binary (and any other failure of ours) into an exit 2 with a reason, which it honours as a deny.
#[test]
fn a_missing_hook_binary_still_blocks_in_codex() {
    let t = Tmp::new("codex-missing");
    let (p, s, home) = setup(&t);
    let copy = common::hooks::binary_copy(&t.0);
    hook_cli(&copy, &p, &home, &["--runbook", "runbook.yaml", "--client", "codex", "install"]);
    std::fs::remove_file(&copy).unwrap();
    let r = run(&p, &home.join(".codex"), &s);
    assert!(!p.join("pwned").exists(), "{}", r.output);
    assert!(r.tool_results.first().is_some_and(|x| x.contains("no answer from the hook, so the call is denied")), "{:?}\n{}", r.tool_results, r.output);
}

/// A project the user marked untrusted for Codex would have its hooks skipped without a word: install
/// refuses, saying why, and writes nothing.
#[test]
fn an_untrusted_project_is_refused_at_install() {
    let t = Tmp::new("codex-untrusted");
    let (p, _s, home) = setup(&t);
    let key = p.canonicalize().unwrap();
    let config = format!("{CONFIG}\n[projects.\"{}\"]\ntrust_level = \"untrusted\"\n", key.display());
    std::fs::write(home.join(".codex/config.toml"), &config).unwrap();
    let o = common::cmd_in(BIN, &home).args(["hook", "--runbook", "runbook.yaml", "--client", "codex", "install"]).current_dir(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("trust_level = \"untrusted\"") && err.contains("every call would go unchecked"), "{err}");
    assert!(!p.join(".codex/hooks.json").exists());
    assert_eq!(std::fs::read_to_string(home.join(".codex/config.toml")).unwrap(), config);
}

/// A gated call waits for a human: the first `echo hello` is denied as awaiting approval, a person approves
/// it on a terminal while the model is held, and the same call retried runs; the run completes with the
/// approval in its report and verifies.
#[test]
fn a_gated_call_runs_once_a_human_approved_it_in_codex() {
    let t = Tmp::new("codex-gated");
    let (p, s, home) = setup(&t);
    std::fs::copy(repo().join("host/tests/claude/gated-hello.yaml"), p.join("runbook.yaml")).unwrap();
    hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "codex", "install"]);
    let p2 = p.clone();
    chat_cli::assert_gated_session(&p, BIN, json!({"name": "exec_command", "input": {"cmd": "echo hello"}}), "hello", move |script| {
        run_script(&p2, &home.join(".codex"), &s, &script)
    });
}

/// An MCP tool of a stdio server (the real server-everything, as `my_everything`) is decided by the same
/// hook: Codex names it `mcp__my_everything__echo` in its hooks, as the runbook does; the server's
/// `get-sum` (`get_sum` to Codex), which the runbook does not name, never runs.
#[test]
fn an_mcp_tool_is_decided_by_its_canonical_name_in_codex() {
    let everything = chat_cli::everything();
    let t = Tmp::new("codex-mcp");
    let (p, s, home) = setup(&t);
    // Codex's exec never asks: the server's tools are approved by its own setting, so only the hook decides.
    let server = format!(
        "\n[mcp_servers.my_everything]\ncommand = {}\nargs = [\"stdio\"]\ndefault_tools_approval_mode = \"approve\"\n",
        serde_json::Value::String(everything.to_string_lossy().into_owned())
    );
    std::fs::write(home.join(".codex/config.toml"), format!("{CONFIG}{server}")).unwrap();
    std::fs::copy(repo().join("host/tests/gemini/mcp-echo.yaml"), p.join("runbook.yaml")).unwrap();
    hook_cli(Path::new(BIN), &p, &home, &["--runbook", "runbook.yaml", "--client", "codex", "install"]);
    let script = json!([
        {"tool_use": [{"namespace": "mcp__my_everything", "name": "get_sum", "input": {"a": 1, "b": 2}}]},
        {"tool_use": [{"namespace": "mcp__my_everything", "name": "echo", "input": {"message": "hi"}}]},
        {"text": "Echoed."}
    ]);
    let r = run_script(&p, &home.join(".codex"), &s, &script);
    // Codex names the server's `get-sum` `get_sum` (to the model and in its hooks): it cannot be mapped back,
    // so a runbook for Codex names such a tool with `_` (README, "Use with Codex").
    chat_cli::assert_mcp_echo_run(&r, &p, BIN, "mcp__my_everything__get_sum");
}
