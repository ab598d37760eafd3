//! Cline's hooks (issue 30). Cline runs every file named after an event in `.clinerules/hooks/` (and in
//! `.cline/hooks/`, `$CLINE_DIR/hooks/`, `~/Documents/Cline/Hooks/`) with the event's JSON on stdin;
//! `install` writes one small shell script per event ([`script`]) that runs the hook command. Observed in
//! 3.0.65:
//!
//! - Only `PreToolUse` and `PostToolUse` block (120 s, not configurable); the others run detached, their
//!   answers ignored, so TaskStart may still be creating the run when the first call is asked about (the
//!   driver waits for the session's state, [`super::handle_all`]).
//! - Every failure of a hook (an exit code, a crash, output that is not one JSON document, the timeout)
//!   runs the tool, and exit codes are ignored: the script answers `cancel` itself when ours gives no answer.
//! - `{"cancel": true}` stops the call *and the whole task*; `overrideInput` replaces the call's input. A
//!   call is denied with input its tool rejects (`0`: the tool answers "Invalid input" and does not run,
//!   the model reads our reason as hook context, the task goes on) for the tools where that was seen to
//!   hold (`run_commands`, `editor`, `read_files`); every other tool (MCP tools run with `{}` when given
//!   junk) and every failure is answered `cancel`. Another PreToolUse hook could replace our input with
//!   its own (the last `overrideInput` wins), so while one exists a deny is a `cancel` too.
//!
//! | Cline tool      | canonical | arguments (Cline -> canonical)                                        |
//! |-----------------|-----------|-----------------------------------------------------------------------|
//! | `run_commands`  | `Bash`    | `{commands: [c1, c2]}` -> one `Bash {command}` per command, all of which must be allowed; each result `{query, result, error?, success}` gets `stdout`, `stderr`, `exit_code` |
//! | `editor` without `old_text` | `Write` | `path` -> `file_path`, `new_text` -> `content`                   |
//! | `editor` with `old_text`    | `Edit`  | `path` -> `file_path`, `old_text` -> `old_string`, `new_text` -> `new_string` |
//! | `read_files`    | `Read`    | `{files: [{path, start_line, end_line}]}` -> one `Read {file_path, ...}` per file |
//! | `S__T` (MCP)    | `mcp__S__T` | the MCP tool's arguments (the canonical name is the same whichever `__` splits server and tool) |
//! | any other       | `cline:<tool>` | its arguments                                                    |

use super::{rename_keys as rename, Answer, HookEvent};
use crate::run::ClientCall;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Where `install` writes its scripts, in the project.
pub const HOOKS_DIR: &str = ".clinerules/hooks";

/// The event files `install` writes.
pub const EVENTS: &[&str] = &["TaskStart", "PreToolUse", "PostToolUse", "TaskComplete", "TaskError", "TaskCancel", "SessionShutdown"];

/// The first line after the shebang of every script of ours.
const MARK: &str = "# runbook-host's Cline hook";

/// The answer when the hook command gave none: Cline would run the tool, so the task stops.
const NO_ANSWER: &str = r#"{"cancel":true,"errorMessage":"runbook-host hook: no answer from the hook, so the task is stopped"}"#;

/// The script of one event, running `command`: what ours prints when it answered (exit 0) or failed
/// closed with a cancel (exit 2), else a cancel of its own.
pub fn script(command: &str) -> String {
    format!(
        "#!/bin/sh\n{MARK} (`runbook-host hook --client cline install` wrote it; `uninstall` removes it).\n\
         # Cline runs the tool whenever a hook fails, so a failure to answer is answered here: cancel.\n\
         out=$({command})\n\
         case $?:$out in\n  0:*|2:'{{\"cancel\":true,'*) [ -z \"$out\" ] || printf '%s\\n' \"$out\" ;;\n  *) printf '%s\\n' '{NO_ANSWER}' ;;\nesac\n"
    )
}

/// Whether a file's text is one of our scripts (whatever command it runs).
pub fn is_ours(text: &str) -> bool {
    text.lines().nth(1).is_some_and(|l| l.starts_with(MARK))
}

/// The extensions Cline accepts on a hook file.
const EXTENSIONS: &[&str] = &["", "sh", "bash", "zsh", "js", "mjs", "cjs", "ts", "mts", "cts", "py", "ps1"];

/// The PreToolUse hooks Cline would run besides ours, for a project whose workspace is `workspace`.
pub fn other_pre_hooks(workspace: &Path) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cline_dir = std::env::var_os("CLINE_DIR").map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".cline")));
    let dirs = [
        home.map(|h| h.join("Documents/Cline/Hooks")),
        cline_dir.map(|d| d.join("hooks")),
        Some(workspace.join(HOOKS_DIR)),
        Some(workspace.join(".cline/hooks")),
    ];
    let mut found = Vec::new();
    for d in dirs.into_iter().flatten() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let (stem, ext) = match p.file_name().and_then(|n| n.to_str()) {
                Some(n) => n.split_once('.').unwrap_or((n, "")),
                None => continue,
            };
            let pre = stem.eq_ignore_ascii_case("PreToolUse") && EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str());
            if pre && e.file_type().is_ok_and(|t| t.is_file()) && !std::fs::read_to_string(&p).is_ok_and(|t| is_ours(&t)) {
                found.push(p);
            }
        }
    }
    found
}

/// The items of a list argument (a bare string is one item, as Cline takes it).
fn items(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a.clone(),
        Value::Null => Vec::new(),
        other => vec![other.clone()],
    }
}

/// The canonical calls one Cline tool call stands for.
pub fn canonical(tool: &str, input: &Value) -> Vec<(String, Value)> {
    match tool {
        "run_commands" => {
            let list = if input.is_object() { items(&input["commands"]) } else { items(input) };
            list.into_iter().map(|c| ("Bash".to_string(), json!({"command": c}))).collect()
        }
        "editor" if input["old_text"].is_null() => vec![("Write".into(), rename(input, &[("path", "file_path"), ("new_text", "content")]))],
        "editor" => vec![("Edit".into(), rename(input, &[("path", "file_path"), ("old_text", "old_string"), ("new_text", "new_string")]))],
        "read_files" => items(&input["files"])
            .into_iter()
            .map(|f| ("Read".to_string(), if f.is_object() { rename(&f, &[("path", "file_path")]) } else { json!({"file_path": f}) }))
            .collect(),
        mcp if mcp.contains("__") => vec![(format!("mcp__{mcp}"), input.clone())],
        other => vec![(format!("cline:{other}"), input.clone())],
    }
}

/// Whether a deny of this canonical call can be an input the tool rejects (the task goes on), rather than
/// a cancel of the whole task.
pub fn soft_deny(canonical_tool: &str) -> bool {
    matches!(canonical_tool, "Bash" | "Write" | "Edit" | "Read")
}

/// One command's or file's result with Claude Code's Bash fields besides its own
/// (`{query, result, error?, success}`).
fn shell_result(r: &Value) -> Value {
    let mut out = match r {
        Value::Object(o) => Value::Object(o.clone()),
        other => json!({"result": other}),
    };
    let error = r["error"].as_str().unwrap_or_default();
    out["stdout"] = json!(r["result"].as_str().unwrap_or_default());
    out["stderr"] = json!(error);
    out["interrupted"] = json!(error.contains("aborted"));
    let code = if r["success"] == true {
        Some(0)
    } else {
        error.rsplit("exited with code ").next().filter(|_| error.contains("exited with code ")).and_then(|c| c.trim().parse::<i64>().ok())
    };
    if let Some(c) = code {
        out["exit_code"] = json!(c);
    }
    out
}

/// The call id of the `i`th of a call's canonical calls.
fn part_id(id: &Option<String>, i: usize) -> Option<String> {
    id.as_ref().map(|id| if i == 0 { id.clone() } else { format!("{id}#{i}") })
}

/// Parses one Cline hook payload into the events it stands for: a `run_commands` or `read_files` call is
/// one event per command or file; TaskComplete is the stop and the end of the session (the task's last
/// event: Cline sends no other on a completed task).
pub fn parse_all(bytes: &[u8]) -> Result<Vec<HookEvent>, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("the hook payload is not JSON: {e}"))?;
    let session = v["taskId"].as_str().ok_or("the hook payload has no `taskId`")?.to_string();
    let name = v["hookName"].as_str().ok_or("the hook payload has no `hookName`")?;
    // A sub-agent's start and end are not the task's (its end is no final answer of the session).
    let subagent = !v["parent_agent_id"].is_null();
    let call = |key: &str| -> Result<(String, Value, Option<String>), String> {
        let c = &v[key];
        let tool = c["name"].as_str().ok_or_else(|| format!("a {name} payload without `{key}.name`"))?;
        Ok((tool.to_string(), c["input"].clone(), c["id"].as_str().map(str::to_string)))
    };
    Ok(match name {
        "agent_start" | "agent_resume" => vec![HookEvent::SessionStart { session }],
        "tool_call" => {
            let (tool, input, id) = call("tool_call")?;
            let own = ClientCall { client: "cline".into(), tool: tool.clone(), arguments: Some(input.clone()) };
            let calls = canonical(&tool, &input);
            if calls.is_empty() {
                return Err(format!("a `{tool}` call with nothing to run"));
            }
            calls
                .into_iter()
                .enumerate()
                .map(|(i, (tool, input))| HookEvent::PreToolUse { session: session.clone(), tool, input, call_id: part_id(&id, i), client: Some(own.clone()) })
                .collect()
        }
        "tool_result" => {
            let (tool, input, id) = call("tool_result")?;
            if input == json!(0) && matches!(tool.as_str(), "run_commands" | "editor" | "read_files") {
                // The result of a call our deny replaced with input its tool rejects: it never ran, and
                // its denial is recorded already.
                return Ok(Vec::new());
            }
            let own = ClientCall { client: "cline".into(), tool: tool.clone(), arguments: None };
            let output = &v["tool_result"]["output"];
            let thrown = !v["tool_result"]["error"].is_null();
            let calls = canonical(&tool, &input);
            let per_part = matches!(tool.as_str(), "run_commands" | "read_files") && output.as_array().is_some_and(|o| o.len() == calls.len());
            calls
                .into_iter()
                .enumerate()
                .map(|(i, (canonical, _))| {
                    let (response, failed) = if per_part {
                        let r = &output[i];
                        (if canonical == "Bash" { shell_result(r) } else { r.clone() }, r["success"] == false)
                    } else if thrown {
                        (v["tool_result"]["error"].clone(), true)
                    } else {
                        (output.clone(), output["success"] == false || output["isError"] == true)
                    };
                    HookEvent::PostToolUse { session: session.clone(), tool: canonical, response, call_id: part_id(&id, i), failed, client: Some(own.clone()) }
                })
                .collect()
        }
        "agent_end" if subagent => Vec::new(),
        "agent_end" => vec![HookEvent::Stop { session: session.clone(), again: true }, HookEvent::SessionEnd { session }],
        "agent_error" | "agent_abort" | "session_shutdown" if subagent => Vec::new(),
        "agent_error" | "agent_abort" | "session_shutdown" => vec![HookEvent::SessionEnd { session }],
        other => return Err(format!("`{other}` is not a Cline hook event this adapter handles")),
    })
}

/// The workspace of a payload (where Cline looks for the project's hooks).
pub fn workspace(bytes: &[u8]) -> Option<PathBuf> {
    let v: Value = serde_json::from_slice(bytes).ok()?;
    v["workspaceRoots"][0].as_str().map(PathBuf::from)
}

/// The JSON written on stdout for an answer to `ev`; `others`: another PreToolUse hook exists (whose
/// input could replace ours).
pub fn render(ev: &HookEvent, answer: &Answer, others: bool) -> Option<Value> {
    match (ev, answer) {
        (HookEvent::PreToolUse { tool, .. }, Answer::Deny(reason)) if soft_deny(tool) && !others => {
            Some(json!({"overrideInput": 0, "contextModification": format!("{reason} (the call was not run.)")}))
        }
        (HookEvent::PreToolUse { .. }, Answer::Deny(reason)) => Some(json!({"cancel": true, "errorMessage": reason})),
        (HookEvent::PostToolUse { .. }, Answer::Block(reason)) => Some(json!({"cancel": true, "errorMessage": reason})),
        _ => None,
    }
}

/// The answer of a hook that failed: the task stops.
pub fn failure_answer(reason: &str) -> Value {
    json!({"cancel": true, "errorMessage": reason})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(name: &str, extra: Value) -> Vec<u8> {
        let mut v = json!({"taskId": "conv_1", "hookName": name, "parent_agent_id": null, "workspaceRoots": ["/p"]});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string().into_bytes()
    }

    #[test]
    fn a_call_of_several_commands_is_one_bash_event_per_command() {
        let p = payload("tool_call", json!({"tool_call": {"id": "c1", "name": "run_commands", "input": {"commands": ["echo a", "touch b"]}}}));
        let evs = parse_all(&p).unwrap();
        let got: Vec<_> = evs
            .iter()
            .map(|e| match e {
                HookEvent::PreToolUse { tool, input, call_id, client, .. } => {
                    assert_eq!(client.as_ref().unwrap().tool, "run_commands");
                    (tool.clone(), input["command"].clone(), call_id.clone())
                }
                _ => panic!(),
            })
            .collect();
        assert_eq!(got, vec![("Bash".into(), json!("echo a"), Some("c1".into())), ("Bash".into(), json!("touch b"), Some("c1#1".into()))]);
        let post = payload(
            "tool_result",
            json!({"tool_result": {"id": "c1", "name": "run_commands", "input": {"commands": ["echo a", "false"]},
                "output": [{"query": "echo a", "result": "a\n", "success": true}, {"query": "false", "result": "[Command exited with code 1]", "error": "Command exited with code 1", "success": false}]}}),
        );
        let evs = parse_all(&post).unwrap();
        let HookEvent::PostToolUse { response, failed: false, .. } = &evs[0] else { panic!() };
        assert_eq!((response["stdout"].as_str(), response["exit_code"].as_i64()), (Some("a\n"), Some(0)));
        let HookEvent::PostToolUse { response, failed: true, call_id, .. } = &evs[1] else { panic!() };
        assert_eq!((response["exit_code"].as_i64(), call_id.as_deref()), (Some(1), Some("c1#1")));
    }

    #[test]
    fn cline_tools_become_canonical() {
        assert_eq!(canonical("editor", &json!({"path": "/a", "new_text": "x"})), vec![("Write".into(), json!({"file_path": "/a", "content": "x"}))]);
        assert_eq!(
            canonical("editor", &json!({"path": "/a", "old_text": "x", "new_text": "y"})),
            vec![("Edit".into(), json!({"file_path": "/a", "old_string": "x", "new_string": "y"}))]
        );
        assert_eq!(
            canonical("read_files", &json!({"files": [{"path": "/a"}, {"path": "/b", "start_line": 2}]}))[1],
            ("Read".into(), json!({"file_path": "/b", "start_line": 2}))
        );
        assert_eq!(canonical("everything__get-sum", &json!({"a": 1}))[0].0, "mcp__everything__get-sum");
        assert_eq!(canonical("spawn_agent", &json!({}))[0].0, "cline:spawn_agent");
        assert_eq!(canonical("run_commands", &json!({"commands": "ls"}))[0].1, json!({"command": "ls"}), "a bare string is one command");
    }

    #[test]
    fn a_deny_is_a_rejected_input_for_the_builtins_and_a_cancel_otherwise() {
        let ev = |tool: &str| HookEvent::PreToolUse { session: "s".into(), tool: tool.into(), input: json!({}), call_id: None, client: None };
        let deny = Answer::Deny("runbook: no".into());
        assert_eq!(render(&ev("Bash"), &deny, false).unwrap()["overrideInput"], json!(0));
        assert_eq!(render(&ev("Bash"), &deny, true).unwrap()["cancel"], json!(true), "another hook could put the input back");
        assert_eq!(render(&ev("mcp__s__t"), &deny, false).unwrap()["cancel"], json!(true));
        assert_eq!(render(&ev("Bash"), &Answer::Pass, false), None);
        let denied =
            payload("tool_result", json!({"tool_result": {"id": "c", "name": "run_commands", "input": 0, "output": {"error": "Invalid input"}, "error": "x"}}));
        assert!(parse_all(&denied).unwrap().is_empty(), "the result of a call denied by its input is no result");
        let mcp = payload("tool_result", json!({"tool_result": {"id": "c", "name": "s__t", "input": 0, "output": {"content": []}}}));
        assert_eq!(parse_all(&mcp).unwrap().len(), 1, "an MCP tool runs whatever its input");
        // The task's end is its stop and its session's end; a sub-agent's is neither.
        assert_eq!(parse_all(&payload("agent_end", json!({}))).unwrap().len(), 2);
        assert!(parse_all(&payload("agent_end", json!({"parent_agent_id": "agent_1"}))).unwrap().is_empty());
    }

    #[test]
    fn the_script_answers_cancel_when_the_command_gives_no_answer() {
        let run = |command: &str| {
            let o = std::process::Command::new("sh").arg("-c").arg(script(command)).output().unwrap();
            String::from_utf8(o.stdout).unwrap()
        };
        assert!(is_ours(&script("x")));
        assert_eq!(run("echo '{\"overrideInput\":0}'"), "{\"overrideInput\":0}\n");
        assert_eq!(run("true"), "");
        assert_eq!(run("echo '{\"cancel\":true,\"errorMessage\":\"why\"}'; exit 2"), "{\"cancel\":true,\"errorMessage\":\"why\"}\n");
        for broken in ["/nonexistent/runbook-host hook", "sh -c 'kill -9 $$'", "exit 1", "echo junk; exit 2"] {
            assert_eq!(run(broken), format!("{NO_ANSWER}\n"), "{broken}");
        }
    }
}
