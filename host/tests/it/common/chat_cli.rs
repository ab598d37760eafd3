//! Driving an agent CLI offline: a scripted model API on loopback plays the model (OpenAI Chat
//! Completions for Qwen Code and Copilot CLI, host/tests/it/common/chat_api.py; Gemini's for Gemini CLI,
//! host/tests/it/common/gemini_api.py; OpenAI Responses for Codex, host/tests/it/common/responses_api.py), the CLI runs with a timeout, and what it sent back to the model is
//! read from the API's request log.
#![allow(dead_code)]

use super::{cmd, repo};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The scripted model (killed when dropped).
pub struct ChatApi {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl ChatApi {
    /// Starts the API playing `turns` (`{"tool_use": [{"name", "input"}]}` / `{"text"}`), its script and
    /// request log in `dir`.
    pub fn start(dir: &Path, turns: &Value) -> ChatApi {
        Self::start_program(dir, turns, "chat_api.py")
    }

    /// The same with another scripted API of host/tests/it/common/ (`gemini_api.py`).
    pub fn start_program(dir: &Path, turns: &Value, program: &str) -> ChatApi {
        let script = dir.join("script.json");
        let log = dir.join("requests.ndjson");
        std::fs::write(&script, turns.to_string()).unwrap();
        let mut child = cmd("python3")
            .arg(repo().join("host/tests/it/common").join(program))
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

    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

impl Drop for ChatApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct CliRun {
    pub code: Option<i32>,
    pub output: String,
    /// The tool results the CLI sent back to the model, in order.
    pub tool_results: Vec<String>,
}

/// Runs `cmd` (its environment already set) to the end, at most 120 s, while `api` plays the model.
pub fn run(mut cmd: Command, api: &ChatApi) -> CliRun {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{cmd:?} did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let tool_results = api
        .requests()
        .last()
        .map(|r| match r["messages"].as_array() {
            // Cline tells a hook's reason in a user message after the tool's (`<hook_context ...>`): it is
            // read as part of that result.
            Some(messages) => {
                let mut results: Vec<String> = Vec::new();
                for m in messages {
                    let text = m["content"].to_string();
                    if m["role"] == "tool" {
                        results.push(text);
                    } else if let (true, Some(last)) = (m["role"] == "user" && text.contains("<hook_context"), results.last_mut()) {
                        last.push_str(&text);
                    }
                }
                results
            }
            // The Responses API (Codex): the function call outputs among the input items.
            None if r["input"].is_array() => {
                r["input"].as_array().unwrap().iter().filter(|i| i["type"] == "function_call_output").map(|i| i["output"].to_string()).collect()
            }
            // Gemini: the function responses among the parts of the conversation.
            None => r["contents"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
                .filter(|p| p.get("functionResponse").is_some())
                .map(|p| p["functionResponse"]["response"].to_string())
                .collect(),
        })
        .unwrap_or_default();
    CliRun { code: o.status.code(), output: format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)), tool_results }
}

/// The model's turns: `touch pwned` (which the say-hello runbook does not allow), `echo hello`, an answer,
/// the shell tool named as the client names it.
pub fn script(shell_tool: &str) -> Value {
    json!([
        {"tool_use": [{"name": shell_tool, "input": {"command": "touch pwned", "description": "make a file"}}]},
        {"tool_use": [{"name": shell_tool, "input": {"command": "echo hello", "description": "say hello"}}]},
        {"text": "Said hello."}
    ])
}

/// A scratch project holding the say-hello runbook (the Claude Code tests' own) as `runbook.yaml`, and a
/// scratch directory beside it.
pub fn project(root: &Path) -> (PathBuf, PathBuf) {
    let (p, s) = (root.join("project"), root.join("scratch"));
    std::fs::create_dir_all(&p).unwrap();
    std::fs::create_dir_all(&s).unwrap();
    std::fs::copy(repo().join("host/tests/claude/say-hello.yaml"), p.join("runbook.yaml")).unwrap();
    (p, s)
}

/// The latest run of `project`: its events and its report, after `verify latest` passed.
pub fn latest_verified(project: &Path, bin: &str) -> (Vec<Value>, Value) {
    let runs = project.join(".runbook/runs");
    let l: Value = serde_json::from_slice(&std::fs::read(runs.join("latest.json")).unwrap()).unwrap();
    let dir = runs.join(l["path"].as_str().unwrap());
    let events = std::fs::read_to_string(dir.join("events.ndjson")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let report = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let v = cmd(bin).args(["verify", "latest"]).current_dir(project).output().unwrap();
    assert!(v.status.success(), "{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
    (events, report)
}

/// The shell invocations of a run: (tool, command, decision).
pub fn invokes(events: &[Value]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter(|e| e["event"]["type"] == "invoke")
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (s(&e["event"]["tool"]), s(&e["event"]["arguments"]["command"]), s(&e["decision"]["decision"]))
        })
        .collect()
}

/// Plays the human of a gated call: waits (at most 90 s) until a run of `project` has a pending approval
/// request, approves it on a terminal (`runbook-host approve RUN STEP`, answering y), then creates `go`,
/// which lets the scripted model retry the call (a turn with `"wait_for": go`). Returns the run's id.
pub fn approve_when_asked(project: &Path, step: &str, go: &Path) -> String {
    let runs = project.join(".runbook/runs");
    let t = Instant::now();
    let run_id = loop {
        let asked = std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .find(|d| d.file_name().to_string_lossy().starts_with("r-") && runbook_host::run::approvals::pending(&d.path()).is_ok_and(|p| !p.is_empty()));
        if let Some(d) = asked {
            break d.file_name().to_string_lossy().into_owned();
        }
        assert!(t.elapsed() < Duration::from_secs(90), "no approval was asked for within 90 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    super::hooks::approve_on_a_terminal(&runs, &run_id, step);
    std::fs::write(go, "").unwrap();
    run_id
}

/// The decision lines of a run (the module's answers, which carry no time, id or client name), to compare
/// across clients: the same canonical session gives the same lines in every client.
pub fn decisions(events: &[Value]) -> Value {
    Value::Array(events.iter().map(|e| e["decision"].clone()).collect())
}

/// The decision lines the say-hello session (`touch pwned`, `echo hello`, an answer) gives in every client:
/// host/tests/fixtures/agent-clis/say-hello.decisions.json.
pub fn say_hello_decisions() -> Value {
    serde_json::from_slice(&std::fs::read(repo().join("host/tests/fixtures/agent-clis/say-hello.decisions.json")).unwrap()).unwrap()
}

/// The say-hello session's record, as every client leaves it: the run names the client (`agent`
/// starting `agent:`), `touch pwned` denied and `echo hello` allowed as `Bash`, completed, verified, and
/// the decision lines byte for byte those of every other client. Returns the events and the report.
/// `shell`: the client's own name of its shell tool, which the record keeps beside `Bash` (`x-client`,
/// docs/spec/adapters.md#canonical-tool-names); None for a client whose hook already names it `Bash`.
pub fn assert_say_hello_run(project: &Path, bin: &str, agent: &str, shell: Option<&str>) -> (Vec<Value>, Value) {
    let (events, report) = latest_verified(project, bin);
    assert!(events[0]["event"]["agent"].as_str().unwrap().starts_with(&format!("{agent}:")), "{}", events[0]);
    let want = [("Bash", "touch pwned", "deny"), ("Bash", "echo hello", "allow")].map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(invokes(&events), want);
    let client = agent.split('-').next().unwrap();
    let tool_events: Vec<&Value> = events.iter().map(|e| &e["event"]).filter(|e| e["type"] == "invoke" || e["type"] == "result").collect();
    assert_eq!(tool_events.len(), 3, "{tool_events:#?}");
    for e in tool_events {
        match shell {
            Some(own) => {
                assert_eq!((e["x-client"]["client"].as_str(), e["x-client"]["tool"].as_str()), (Some(client), Some(own)), "{e}");
                // The client's own arguments by their call hash only (a redacted copy must not hold them).
                assert_eq!(e["x-client"]["call_sha256"].as_str().map(str::len), (e["type"] == "invoke").then_some(64), "{e}");
                assert!(e["x-client"].get("arguments").is_none(), "{e}");
            }
            None => assert!(e.get("x-client").is_none(), "{e}"),
        }
    }
    assert_eq!(report["outcome"], "completed", "{report}\n{events:#?}");
    assert_eq!(decisions(&events), say_hello_decisions());
    (events, report)
}

/// The gated-hello session in a client whose hook is installed in `project`: `call` (the client's shell
/// tool running `echo hello`) is denied as awaiting approval, a person approves it on a terminal while
/// the model is held ([`approve_when_asked`]), and the same call retried runs, its result holding `ran`.
/// `run` runs the client's CLI with the script it is given. The run completes with the approval in its
/// report and verifies.
pub fn assert_gated_session(project: &Path, bin: &str, call: Value, ran: &str, run: impl FnOnce(Value) -> CliRun + Send + 'static) {
    let go = project.parent().unwrap().join("approved");
    let script = json!([{"tool_use": [call]}, {"wait_for": go, "tool_use": [call]}, {"text": "Said hello."}]);
    let cli = std::thread::spawn(move || run(script));
    let run_id = approve_when_asked(project, "greet", &go);
    let r = cli.join().unwrap();
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("awaits a human"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains(ran) && !r.tool_results[1].contains("awaits a human"), "{}", r.tool_results[1]);
    let (events, report) = latest_verified(project, bin);
    assert_eq!(report["run_id"], run_id.as_str());
    let want = [("Bash", "echo hello", "needs-approval"), ("Bash", "echo hello", "allow")].map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(invokes(&events), want);
    assert_eq!(report["approvals"].as_array().map(Vec::len), Some(1), "{report}");
    assert_eq!(report["outcome"], "completed", "{report}\n{events:#?}");
}

/// The mcp-echo session (host/tests/gemini/mcp-echo.yaml, server-everything configured as `my_everything`)
/// as the client `r` ran it: the server's sum tool, which the runbook does not name, denied before it ran
/// (named `sum` as the client canonically names it), its echo allowed and run; the run records both under
/// their canonical names, completes and verifies.
pub fn assert_mcp_echo_run(r: &CliRun, project: &Path, bin: &str, sum: &str) {
    assert_eq!(r.code, Some(0), "{}", r.output);
    assert_eq!(r.tool_results.len(), 2, "{:?}\n{}", r.tool_results, r.output);
    assert!(r.tool_results[0].contains("undeclared-tool") && !r.tool_results[0].contains("The sum"), "{}", r.tool_results[0]);
    assert!(r.tool_results[1].contains("Echo: hi"), "{}", r.tool_results[1]);
    let (events, report) = latest_verified(project, bin);
    let tools: Vec<_> =
        events.iter().filter(|e| e["event"]["type"] == "invoke").map(|e| (e["event"]["tool"].clone(), e["decision"]["decision"].clone())).collect();
    assert_eq!(tools, [(json!(sum), json!("deny")), (json!("mcp__my_everything__echo"), json!("allow"))]);
    assert_eq!(report["outcome"], "completed", "{report}\n{events:#?}");
}

/// server-everything, installed by host/tests/mcp/setup.
pub fn everything() -> PathBuf {
    let p = repo().join("host/tests/mcp/node_modules/.bin/mcp-server-everything");
    assert!(p.exists(), "server-everything is not installed: run `bash host/tests/mcp/setup` first");
    p
}
