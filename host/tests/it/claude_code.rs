//! The hook under the real Claude Code CLI (`claude -p`, installed by `bash host/tests/claude/setup`),
//! offline, in both modes: command hooks (a process per event) and the resident server (`http` hooks,
//! SessionStart a command that starts the server). A scripted Messages API plays the model
//! (host/tests/claude/messages_api.py) and asks for shell commands; the CLI runs its hooks from the
//! project's `.claude/settings.json` exactly as `runbook-host hook install` wrote it, and the runbook is
//! host/tests/claude/say-hello.yaml (Bash `echo hello` only). And the MCP proxy in front of the conformance
//! fixture as one of the CLI's MCP servers: the CLI lists and reads the fixture's resources through it.

use crate::common::{self, repo, Tmp};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::common::claude_cli::{self, CliRun};
use crate::common::hooks::BIN;

/// The model's turns: a command the runbook does not allow, then the one it does, then an answer.
fn script() -> Value {
    json!([
        {"tool_use": [{"name": "Bash", "input": {"command": "touch pwned"}}]},
        {"tool_use": [{"name": "Bash", "input": {"command": "echo hello"}}]},
        {"text": "Said hello."}
    ])
}

const PROMPT: &str = "Say hello through the shell.";

/// A scratch project holding the say-hello runbook as `runbook.yaml`, and the scratch directory beside it
/// (the CLI's HOME, the script, the logs).
fn project(t: &Tmp) -> (PathBuf, PathBuf) {
    let (p, s) = (t.0.join("project"), t.0.join("scratch"));
    std::fs::create_dir_all(&p).unwrap();
    std::fs::create_dir_all(&s).unwrap();
    std::fs::copy(repo().join("host/tests/claude/say-hello.yaml"), p.join("runbook.yaml")).unwrap();
    (p, s)
}

/// Runs `bin hook ARGS` in the project; panics unless it exits 0.
fn hook_cli(bin: &Path, project: &Path, args: &[&str]) {
    let o = common::cmd(bin).arg("hook").args(args).current_dir(project).output().unwrap();
    assert!(o.status.success(), "hook {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

const MODES: [&str; 2] = ["command", "http"];

/// `hook install` in a mode; in the server mode, a guard that stops the server the sessions started.
fn install(bin: &Path, project: &Path, mode: &str) -> StopServer {
    hook_cli(bin, project, &["--runbook", "runbook.yaml", "install", "--mode", mode]);
    StopServer(project.to_path_buf())
}

/// Stops the project's hook server, if one runs, when dropped (a test never leaves one behind).
struct StopServer(PathBuf);

impl Drop for StopServer {
    fn drop(&mut self) {
        let _ = common::cmd(BIN).args(["hook", "stop"]).current_dir(&self.0).output();
    }
}

fn server_json(project: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(project.join(".runbook/runs/.hook/server/server.json")).expect("the server wrote server.json")).unwrap()
}

fn run(project: &Path, scratch: &Path) -> CliRun {
    let r = claude_cli::run(project, scratch, &script(), PROMPT);
    eprintln!("claude -p took {:?}", r.elapsed);
    assert_eq!(r.code, Some(0), "{}", r.show());
    assert_eq!(r.json["subtype"], "success", "{}", r.show());
    // Every scripted turn was played, once each, and no request asked for one past the script.
    let turns: Vec<&Value> = r.requests.iter().filter(|q| !q["turn"].is_null()).map(|q| &q["turn"]).collect();
    assert_eq!(turns, [&json!(0), &json!(1), &json!(2)], "{}", r.show());
    r
}

/// The latest run bundle of the project: its directory, its events and its report.
fn latest(project: &Path) -> (PathBuf, Vec<Value>, Value) {
    let runs = project.join(".runbook/runs");
    let l: Value = serde_json::from_slice(&std::fs::read(runs.join("latest.json")).unwrap()).unwrap();
    let dir = runs.join(l["path"].as_str().unwrap());
    let events = std::fs::read_to_string(dir.join("events.ndjson")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let report = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    (dir, events, report)
}

/// The decision recorded for the invocation of a shell command.
fn decision_of<'a>(events: &'a [Value], command: &str) -> &'a Value {
    let e = events.iter().find(|e| e["event"]["type"] == "invoke" && e["event"]["arguments"]["command"] == command);
    &e.unwrap_or_else(|| panic!("no invoke of `{command}` in {events:#?}"))["decision"]
}

#[test]
fn the_hook_denies_a_command_before_the_shell_runs_it_and_the_run_completes() {
    for mode in MODES {
        let t = Tmp::new(&format!("claude-code-{mode}"));
        let (p, s) = project(&t);
        let _server = install(Path::new(BIN), &p, mode);
        denies_and_completes(&p, &s, mode);
    }
}

fn denies_and_completes(p: &Path, s: &Path, mode: &str) {
    let settings: Value = serde_json::from_slice(&std::fs::read(p.join(".claude/settings.json")).unwrap()).unwrap();
    let kind = if mode == "http" { "http" } else { "command" };
    assert_eq!(settings["hooks"]["PreToolUse"][0]["hooks"][0]["type"], kind, "{settings}");
    assert_eq!(settings["hooks"]["SessionStart"][0]["hooks"][0]["type"], "command", "{settings}");
    let r = run(p, s);

    // The CLI never ran `touch pwned`: the hook denied it, and the CLI says so.
    assert!(!p.join("pwned").exists(), "`touch pwned` ran\n{}", r.show());
    assert_eq!(r.denied_commands(), ["touch pwned"], "{}", r.show());
    let results = r.tool_results();
    assert_eq!(results.len(), 2, "{}", r.show());
    assert_eq!(results[0]["is_error"], true);
    assert!(results[0]["content"].as_str().unwrap().contains("undeclared-tool"), "{}", results[0]);
    // `echo hello` ran, and its output went back to the model.
    assert_eq!(results[1]["is_error"], false);
    assert_eq!(results[1]["content"], "hello");

    // The bundle holds both decisions, the result, and the end at the terminal; it verifies.
    let (dir, events, report) = latest(&p);
    assert_eq!(events[0]["event"]["type"], "start");
    assert_eq!(events[0]["event"]["agent"], format!("claude-code:{}", r.json["session_id"].as_str().unwrap()));
    let denied = decision_of(&events, "touch pwned");
    assert_eq!((&denied["decision"], &denied["deviation"]), (&json!("deny"), &json!("undeclared-tool")), "{denied}");
    assert_eq!(decision_of(&events, "echo hello")["decision"], "allow");
    let result = events.iter().find(|e| e["event"]["type"] == "result").expect("a result event");
    assert_eq!(result["event"]["result"]["stdout"], "hello");
    assert_eq!(events.last().unwrap()["event"]["type"], "end");
    assert_eq!(report["outcome"], "completed", "{report}");
    assert_eq!(report["terminal"], "greeted", "{report}");
    assert_eq!(report["steps"]["greet"]["assert"], "pass", "{report}");
    // The same decision lines, byte for byte, as every other agent CLI gives for this session.
    assert_eq!(common::chat_cli::decisions(&events), common::chat_cli::say_hello_decisions(), "{events:#?}");
    assert!(dir.join("receipt.json").is_file());
    let v = common::cmd(BIN).args(["verify", "latest"]).current_dir(p).output().unwrap();
    assert!(v.status.success(), "verify latest: {}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
    let runs: Vec<_> = std::fs::read_dir(p.join(".runbook/runs")).unwrap().flatten().filter(|e| e.path().join("run.json").is_file()).collect();
    assert_eq!(runs.len(), 1, "one session, one run");

    if mode == "http" {
        // The token the http hooks send sits in the personal settings, owner-only, equal to the server's.
        let local: Value = serde_json::from_slice(&std::fs::read(p.join(".claude/settings.local.json")).unwrap()).unwrap();
        let token = std::fs::read_to_string(p.join(".runbook/runs/.hook/server/token")).unwrap();
        assert_eq!(local["env"]["RUNBOOK_HOOK_TOKEN"], token.trim());
        use std::os::unix::fs::PermissionsExt;
        for f in [".claude/settings.local.json", ".runbook/runs/.hook/server/token"] {
            assert_eq!(std::fs::metadata(p.join(f)).unwrap().permissions().mode() & 0o777, 0o600, "{f}");
        }
        // The session was bound to its client, the CLI's own process, at its first event after SessionStart
        // (issue 28, item 2): every later event came from it, so none was refused.
        let log = std::fs::read_to_string(p.join(".runbook/runs/.hook/server/log")).unwrap();
        let session = r.json["session_id"].as_str().unwrap();
        assert!(log.contains(&format!("session {session} is bound to its client (pid ")), "{log}");
        assert!(!log.contains("refused"), "{log}");
        // The server the SessionStart started decided the session's events and closed it at SessionEnd.
        let o = common::cmd(BIN).args(["hook", "status", "--json"]).current_dir(p).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let st: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(st["pid"], server_json(p)["pid"]);
        assert_eq!(st["open"], json!(0), "{st}");
        // SessionStart, 2 PreToolUse, PostToolUse, PostToolUseFailure? no: 1 PostToolUse, Stop, SessionEnd.
        assert!(st["decided"].as_u64().unwrap() >= 6, "{st}");
    }
}

#[test]
fn after_hook_uninstall_the_same_script_runs_the_command() {
    // The control: the same project, CLI flags and script with the hook installed and then uninstalled.
    // `touch pwned` runs, so what blocked it above was the hook, not the CLI's own permission rules.
    for mode in MODES {
        let t = Tmp::new(&format!("claude-code-uninstalled-{mode}"));
        let (p, s) = project(&t);
        let _server = install(Path::new(BIN), &p, mode);
        hook_cli(Path::new(BIN), &p, &["uninstall"]);
        assert!(!p.join(".claude/settings.json").exists(), "uninstall leaves no settings file that held only our hooks");
        assert!(!p.join(".claude/settings.local.json").exists(), "nor the personal settings that held only the token");
        let r = run(&p, &s);
        assert!(p.join("pwned").is_file(), "`touch pwned` did not run without the hook\n{}", r.show());
        assert!(r.denied_commands().is_empty(), "{}", r.show());
        assert!(r.tool_results().iter().all(|x| x["is_error"] == false), "{}", r.show());
        assert!(!p.join(".runbook/runs").read_dir().is_ok_and(|mut d| d.any(|e| e.unwrap().path().join("run.json").exists())), "no hook, no run");
    }
}

#[test]
fn a_hook_that_cannot_run_blocks_every_call() {
    // `install` writes `onFailure: block`: when the hook binary is gone, or is there but cannot be
    // executed, the CLI blocks each tool call instead of running it. Installed from a copy of the
    // binary, which is then removed (or made unexecutable).
    for (mode, broken) in [("command", "gone"), ("command", "not executable"), ("http", "gone")] {
        let t = Tmp::new(&format!("claude-code-broken-{mode}"));
        let (p, s) = project(&t);
        let bin = t.0.join("bin/runbook-host");
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::copy(BIN, &bin).unwrap();
        let _server = install(&bin, &p, mode);
        let settings = std::fs::read_to_string(p.join(".claude/settings.json")).unwrap();
        assert!(settings.contains(bin.to_str().unwrap()), "{settings}");
        if broken == "gone" {
            std::fs::remove_file(&bin).unwrap();
        } else {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let r = run(&p, &s);
        assert!(!p.join("pwned").exists(), "{broken}: `touch pwned` ran\n{}", r.show());
        assert_eq!(r.denied_commands(), ["touch pwned", "echo hello"], "{broken}: {}", r.show());
        for x in r.tool_results() {
            assert_eq!(x["is_error"], true, "{broken}: {x}");
            assert!(x["content"].as_str().unwrap().contains("onFailure is \"block\""), "{broken}: {x}");
        }
        let began = p.join(".runbook/runs").read_dir().is_ok_and(|mut d| d.any(|e| e.unwrap().path().join("run.json").exists()));
        assert!(!began, "{mode} {broken}: the hook never ran, so no run began");
    }
}

#[test]
fn the_server_killed_mid_session_blocks_every_call_and_the_resumed_session_completes_its_run() {
    let t = Tmp::new("claude-code-kill");
    let (p, s) = project(&t);
    let _server = install(Path::new(BIN), &p, "http");
    let server_json = p.join(".runbook/runs/.hook/server/server.json");
    // The test's hand, between the model's first and second tool call: kill -9 of the server.
    let kill = format!("import json, os; os.kill(json.load(open({:?}))['pid'], 9)", server_json.to_str().unwrap());
    let first = json!([
        {"tool_use": [{"name": "Bash", "input": {"command": "touch pwned"}}]},
        {"before": ["python3", "-c", kill], "tool_use": [{"name": "Bash", "input": {"command": "echo hello"}}]},
        {"text": "The hook server went away."}
    ]);
    let r = claude_cli::run(&p, &s, &first, PROMPT);
    assert_eq!(r.code, Some(0), "{}", r.show());
    assert!(r.requests.iter().any(|q| q["before"] == 0), "the kill ran: {}", r.show());
    // Neither call ran: the first was denied by the server, the second blocked by the client (onFailure)
    // because no server answered.
    assert!(!p.join("pwned").exists());
    assert_eq!(r.denied_commands(), ["touch pwned", "echo hello"], "{}", r.show());
    let results = r.tool_results();
    assert!(results[0]["content"].as_str().unwrap().contains("undeclared-tool"), "{}", results[0]);
    assert!(results[1]["content"].as_str().unwrap().contains("onFailure is \"block\""), "{}", results[1]);
    let runs = p.join(".runbook/runs");
    let l: Value = serde_json::from_slice(&std::fs::read(runs.join("latest.json")).unwrap()).unwrap();
    let dir = runs.join(l["path"].as_str().unwrap());
    let events: Vec<Value> = std::fs::read_to_string(dir.join("events.ndjson")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.len(), 2, "start and the denied call, nothing after the kill: {events:#?}");
    assert!(!dir.join("report.json").exists(), "the run is still open");

    // The session resumed: its SessionStart starts a new server, which resumes the open run from its
    // bundle (checked by replay); the run goes on in the same bundle and completes at its terminal.
    let session = r.json["session_id"].as_str().unwrap().to_string();
    let played = r.requests.iter().filter(|q| !q["turn"].is_null()).count();
    let mut second: Vec<Value> = vec![json!({"text": "(played before)"}); played];
    second.push(json!({"tool_use": [{"name": "Bash", "input": {"command": "echo hello"}}]}));
    second.push(json!({"text": "Said hello."}));
    let s2 = t.0.join("scratch2");
    std::fs::create_dir_all(&s2).unwrap();
    // The same HOME, so the CLI finds the session it resumes.
    std::os::unix::fs::symlink(s.join("home"), s2.join("home")).unwrap();
    let r2 = claude_cli::run_with(&p, &s2, &Value::Array(second), "Go on.", &["--resume", &session]);
    assert_eq!(r2.code, Some(0), "{}", r2.show());
    assert!(r2.denied_commands().is_empty(), "{}", r2.show());
    let (dir2, events, report) = latest(&p);
    assert_eq!(dir2, dir, "the same run goes on");
    assert_eq!(decision_of(&events, "echo hello")["decision"], "allow");
    assert_eq!(report["outcome"], "completed", "{report}");
    let v = common::cmd(BIN).args(["verify", "latest"]).current_dir(&p).output().unwrap();
    assert!(v.status.success(), "verify latest: {}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
    let log = std::fs::read_to_string(p.join(".runbook/runs/.hook/server/log")).unwrap();
    assert!(log.contains(&format!("resumed session {session}")), "{log}");
}

#[test]
fn install_chooses_the_server_mode_only_for_a_claude_that_has_http_hooks() {
    // `--mode auto` (the default) asks the `claude` on PATH for its version: the real CLI (2.1.332) gets
    // the server mode; an older one (a stand-in script answering 2.1.200) and none at all get command
    // hooks, never an option the client would reject; the message says which and why.
    let t = Tmp::new("claude-code-auto");
    let (p, _) = project(&t);
    let old = t.0.join("old-claude");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("claude"), "#!/bin/sh\necho '2.1.200 (Claude Code)'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(old.join("claude"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let real = claude_cli::claude().parent().unwrap().to_path_buf();
    for (path, kind, why) in [
        (real.as_path(), "http", "server mode: the claude on PATH is 2.1.332"),
        (old.as_path(), "command", "command mode: the claude on PATH is 2.1.200, older than 2.1.295"),
        (Path::new("/nonexistent"), "command", "command mode: no `claude` on PATH answered --version"),
    ] {
        let o = common::cmd(BIN)
            .args(["hook", "--runbook", "runbook.yaml", "install"])
            .current_dir(&p)
            .env("PATH", format!("{}:/usr/bin:/bin", path.display()))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && err.contains(why), "{err}");
        let settings: Value = serde_json::from_slice(&std::fs::read(p.join(".claude/settings.json")).unwrap()).unwrap();
        assert_eq!(settings["hooks"]["PreToolUse"][0]["hooks"][0]["type"], kind, "{settings}");
        assert_eq!(settings["hooks"]["PreToolUse"].as_array().unwrap().len(), 1, "one hook of ours per event, whatever the mode before");
        assert_eq!(settings["hooks"].get("PermissionRequest").is_some(), kind == "http", "{settings}");
        assert_eq!(p.join(".claude/settings.local.json").exists(), kind == "http", "the token only where http hooks send it");
    }
}

#[test]
fn claude_code_lists_and_reads_the_fixtures_resources_through_the_proxy() {
    let t = Tmp::new("claude-mcp-resources");
    let (p, s) = project(&t);
    let runs = t.0.join("runs");
    let mcp = repo().join("host/tests/mcp");
    let config = json!({"mcpServers": {"fixture": {"command": BIN, "args": [
        "run", "fixture-all@1.0.0", "--registry", mcp.join("conformance/registry"), "--runs", &runs, "--", "node", mcp.join("conformance/fixture/server.mjs")]}}});
    let config_file = s.join("mcp.json");
    std::fs::write(&config_file, config.to_string()).unwrap();
    let turns = json!([
        {"tool_use": [{"name": "ListMcpResourcesTool", "input": {}}]},
        {"tool_use": [{"name": "ReadMcpResourceTool", "input": {"server": "fixture", "uri": "test://static-text"}}]},
        {"text": "Read it."}
    ]);
    let tools = "ListMcpResourcesTool,ReadMcpResourceTool";
    let r = claude_cli::run_tools(None, tools, &p, &s, &turns, "Read the fixture's static text resource.", &["--mcp-config", config_file.to_str().unwrap()]);
    assert_eq!(r.code, Some(0), "{}", r.show());
    let results = r.tool_results();
    assert_eq!(results.len(), 2, "{}", r.show());
    let listed: Value = serde_json::from_str(results[0]["content"].as_str().unwrap()).unwrap_or_else(|e| panic!("{e}: {}", r.show()));
    let mut uris: Vec<&str> = listed.as_array().unwrap().iter().map(|x| x["uri"].as_str().unwrap()).collect();
    uris.sort();
    assert_eq!(uris, ["test://static-binary", "test://static-text", "test://watched-resource"], "{}", r.show());
    assert!(listed.as_array().unwrap().iter().all(|x| x["server"] == "fixture"));
    let read: Value = serde_json::from_str(results[1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(read["contents"][0]["text"], "This is the content of the static text resource.", "{}", r.show());
    assert_eq!(results[1]["is_error"], false);
    // The proxy's run recorded both requests, and its bundle verifies.
    let run = std::fs::read_dir(&runs).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).find(|d| d.join("run.json").exists()).expect("a run bundle");
    let methods: Vec<String> = std::fs::read_to_string(run.join("traffic.ndjson"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["method"].as_str().unwrap().to_string())
        .collect();
    assert!(methods.contains(&"resources/list".to_string()) && methods.contains(&"resources/read".to_string()), "{methods:?}");
    let v = common::cmd(BIN).arg("verify").arg(&run).output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
}
