//! The hook under the real opencode CLI (issue 30; `bash host/tests/opencode/setup` installs it, pinned),
//! offline: a scripted OpenAI Chat Completions API on loopback plays the model ([`common::chat_cli`]) through
//! opencode's `@ai-sdk/openai-compatible` provider and asks for shell commands; opencode runs the plugin
//! `runbook-host hook --client opencode install` wrote in `.opencode/plugin/`, which asks the hook about
//! every call. The runbook is the one the Claude Code tests run (say-hello), unchanged: opencode's `bash`
//! is decided as `Bash`.

use crate::common::chat_cli::{self, ChatApi, CliRun};
use crate::common::hooks::BIN;
use crate::common::{self, repo, Tmp};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn opencode() -> PathBuf {
    let p = repo().join("host/tests/opencode/node_modules/.bin/runbook-opencode");
    assert!(p.is_file(), "opencode is not installed ({} is missing): run `bash host/tests/opencode/setup` first", p.display());
    p
}

/// The project's `opencode.json`: the scripted provider (its URL from the environment), bash and edits
/// allowed without asking (so whatever is blocked is blocked by the plugin), no sharing, no update.
fn config() -> Value {
    json!({
        "autoupdate": false, "share": "disabled", "model": "scripted/scripted", "small_model": "scripted/scripted",
        "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
            "options": {"baseURL": "{env:SCRIPTED_BASE_URL}", "apiKey": "scripted"},
            "models": {"scripted": {"name": "Scripted", "tool_call": true}}}},
        "permission": {"bash": "allow", "edit": "allow"}
    })
}

/// opencode installs its plugin SDK into each config folder at start when it is missing (about 70 s of
/// retries offline): an empty `node_modules/` and a lock naming the package tell it there is nothing to do.
fn no_plugin_sdk_install(dir: &Path) {
    std::fs::create_dir_all(dir.join("node_modules")).unwrap();
    std::fs::write(dir.join("package-lock.json"), r#"{"lockfileVersion":3,"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}"#).unwrap();
}

fn setup(t: &Tmp) -> (PathBuf, PathBuf, PathBuf) {
    let (p, s) = chat_cli::project(&t.0);
    std::fs::write(p.join("opencode.json"), config().to_string()).unwrap();
    let home = t.0.join("home");
    no_plugin_sdk_install(&p.join(".opencode"));
    no_plugin_sdk_install(&home.join(".config/opencode"));
    (p, s, home)
}

/// `opencode run PROMPT` in `project`, HOME and the XDG folders in `home`, nothing fetched.
fn run_script(project: &Path, home: &Path, scratch: &Path, script: &Value) -> CliRun {
    let api = ChatApi::start(scratch, script);
    let mut cmd = Command::new(opencode());
    cmd.args(["run", "--format", "json", "Say hello through the shell."]).current_dir(project).env_clear();
    common::isolate(&mut cmd, home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("SCRIPTED_BASE_URL", format!("http://127.0.0.1:{}/v1", api.port));
    for flag in ["AUTOUPDATE", "SHARE", "MODELS_FETCH", "LSP_DOWNLOAD", "CLAUDE_CODE", "DEFAULT_PLUGINS", "EXTERNAL_SKILLS"] {
        cmd.env(format!("OPENCODE_DISABLE_{flag}"), "1");
    }
    chat_cli::run(cmd, &api)
}

fn hook_cli(bin: &Path, project: &Path, args: &[&str]) -> String {
    let o = common::cmd(bin).arg("hook").args(args).current_dir(project).output().unwrap();
    assert!(o.status.success(), "hook {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn opencode_is_governed_by_the_runbook_claude_code_runs() {
    let t = Tmp::new("opencode-cli");
    let (p, s, home) = setup(&t);
    let said = hook_cli(Path::new(BIN), &p, &["--runbook", "runbook.yaml", "--client", "opencode", "install"]);
    assert!(said.contains("installed `.opencode/plugin/runbook-host.js` (opencode's plugin"), "{said}");

    let r = run_script(&p, &home, &s, &chat_cli::script("bash"));
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(!p.join("pwned").exists(), "the denied command ran: {}", r.output);
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("undeclared-tool"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains("hello"), "{}", r.tool_results[1]);

    // The run: the client named, the shell as `Bash`, the same decision lines as every other client,
    // completed when the session went idle, and it verifies.
    chat_cli::assert_say_hello_run(&p, BIN, "opencode", Some("bash"));

    // Without the plugin the same script runs the command: the plugin is what blocked it.
    let said = hook_cli(Path::new(BIN), &p, &["--client", "opencode", "uninstall"]);
    assert!(said.contains("removed `.opencode/plugin/runbook-host.js`"), "{said}");
    let s2 = t.0.join("scratch2");
    std::fs::create_dir_all(&s2).unwrap();
    let r = run_script(&p, &home, &s2, &chat_cli::script("bash"));
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert!(p.join("pwned").exists(), "{}", r.output);
}

/// The plugin turns a hook that cannot answer (its binary deleted after install) into a deny.
#[test]
fn a_missing_hook_binary_still_blocks_in_opencode() {
    let t = Tmp::new("opencode-missing");
    let (p, s, home) = setup(&t);
    let copy = common::hooks::binary_copy(&t.0);
    hook_cli(&copy, &p, &["--runbook", "runbook.yaml", "--client", "opencode", "install"]);
    std::fs::remove_file(&copy).unwrap();
    let r = run_script(&p, &home, &s, &chat_cli::script("bash"));
    assert!(!p.join("pwned").exists(), "{}", r.output);
    assert!(r.tool_results.first().is_some_and(|x| x.contains("no answer from the hook")), "{:?}\n{}", r.tool_results, r.output);
}

/// A gated call waits for a human: the first `echo hello` is denied as awaiting approval, a person approves
/// it on a terminal while the model is held, and the same call retried runs; the run completes and verifies.
#[test]
fn a_gated_call_runs_once_a_human_approved_it_in_opencode() {
    let t = Tmp::new("opencode-gated");
    let (p, s, home) = setup(&t);
    std::fs::copy(repo().join("host/tests/claude/gated-hello.yaml"), p.join("runbook.yaml")).unwrap();
    hook_cli(Path::new(BIN), &p, &["--runbook", "runbook.yaml", "--client", "opencode", "install"]);
    let p2 = p.clone();
    chat_cli::assert_gated_session(&p, BIN, json!({"name": "bash", "input": {"command": "echo hello", "description": "say hello"}}), "hello", move |script| {
        run_script(&p2, &home, &s, &script)
    });
}

/// An MCP tool of a stdio server (the real server-everything, as `my_everything` in the project's
/// `opencode.json`) is decided by the same plugin: opencode names it `my_everything_echo`, which the adapter
/// splits by the servers `opencode.json` names into the runbook's `mcp__my_everything__echo`.
#[test]
fn an_mcp_tool_is_decided_by_its_canonical_name_in_opencode() {
    let t = Tmp::new("opencode-mcp");
    let (p, s, home) = setup(&t);
    std::fs::copy(repo().join("host/tests/gemini/mcp-echo.yaml"), p.join("runbook.yaml")).unwrap();
    let mut c = config();
    c["mcp"] = json!({"my_everything": {"type": "local", "command": [chat_cli::everything(), "stdio"], "enabled": true}});
    std::fs::write(p.join("opencode.json"), c.to_string()).unwrap();
    hook_cli(Path::new(BIN), &p, &["--runbook", "runbook.yaml", "--client", "opencode", "install"]);
    let script = json!([
        {"tool_use": [{"name": "my_everything_get-sum", "input": {"a": 1, "b": 2}}]},
        {"tool_use": [{"name": "my_everything_echo", "input": {"message": "hi"}}]},
        {"text": "Echoed."}
    ]);
    let r = run_script(&p, &home, &s, &script);
    chat_cli::assert_mcp_echo_run(&r, &p, BIN, "mcp__my_everything__get-sum");
}
