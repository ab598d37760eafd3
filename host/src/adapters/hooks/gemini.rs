//! Gemini CLI's hook format (issue 30): Claude Code's payload fields (`session_id`, `hook_event_name`,
//! `tool_name`, `tool_input`, `tool_response`) under its own event names, `.gemini/settings.json`, and a
//! call denied by `{"decision":"deny","reason":...}` on stdout.
//!
//! | Gemini CLI event | driver event  |
//! |------------------|---------------|
//! | `SessionStart`   | SessionStart  |
//! | `BeforeTool`     | PreToolUse    |
//! | `AfterTool`      | PostToolUse (failed when `tool_response.error` is set) |
//! | `AfterAgent`     | Stop (`prompt_response` is the final answer) |
//! | `SessionEnd`     | SessionEnd    |
//!
//! | Gemini CLI tool     | canonical   | arguments (Gemini -> canonical)                          |
//! |---------------------|-------------|----------------------------------------------------------|
//! | `run_shell_command` | `Bash`      | `{command, description, dir_path, ...}` as they are      |
//! | `write_file`        | `Write`     | `{file_path, content}` as they are                       |
//! | `replace`           | `Edit`      | `{file_path, old_string, new_string}`, `allow_multiple` -> `replace_all` |
//! | `read_file`         | `Read`      | `{file_path, ...}` as they are                           |
//! | any other (`save_memory`) | `gemini:save_memory` | its arguments                                  |
//! | an MCP tool (`mcp_S_T`) | `mcp__S__T` | its arguments; server and tool from `mcp_context`, so a `_` in either cannot shift the split |
//!
//! Any other tool is `gemini:<its name>` (`gemini:save_memory`, docs/spec/adapters.md#canonical-tool-names), so a runbook must name it
//! so to allow it. Coverage: every tool passes
//! BeforeTool, the shell and MCP tools included.
//!
//! Failures (observed in 0.61.0): a hook that exits 1, is killed by a signal, times out or exits 2 with
//! nothing on stderr lets the tool run; a missing binary denies only because the shell prints its error.
//! `install` wraps the command so that any failure of ours is an exit 2 with a reason on stderr (a deny),
//! with a timeout above our longest wait. Project hooks load only in a trusted folder (`gemini -p` in an
//! untrusted one exits 55 without running anything); `install` trusts the project in
//! `~/.gemini/trustedFolders.json` and says so.

use super::{Answer, HookEvent};
use serde_json::{json, Map, Value};

/// The events `install` registers, as Gemini CLI names them.
pub const EVENTS: &[&str] = &["SessionStart", "BeforeTool", "AfterTool", "AfterAgent", "SessionEnd"];

/// The canonical name and arguments of a Gemini CLI tool call (`mcp` is the payload's `mcp_context`).
fn canonical(tool: &str, args: &Value, mcp: &Value) -> (String, Value) {
    if let (Some(server), Some(name)) = (mcp["server_name"].as_str(), mcp["tool_name"].as_str()) {
        return (format!("mcp__{server}__{name}"), args.clone());
    }
    match tool {
        "run_shell_command" => ("Bash".into(), args.clone()),
        "write_file" => ("Write".into(), args.clone()),
        "read_file" => ("Read".into(), args.clone()),
        "replace" => {
            let mut out = Map::new();
            for (k, v) in args.as_object().into_iter().flatten() {
                out.insert(if k == "allow_multiple" { "replace_all".into() } else { k.clone() }, v.clone());
            }
            ("Edit".into(), Value::Object(out))
        }
        other => (format!("gemini:{other}"), args.clone()),
    }
}

/// A `run_shell_command` result (`{llmContent, returnDisplay, error?}`, `llmContent` being `Output: ...`
/// then `Error: ...`, `Exit Code: N` (only when not 0), `Signal: ...`, `Background PIDs: ...`, `Process
/// Group PGID: N`, one per line, inside `<untrusted_context>`) with Claude Code's Bash fields besides its
/// own. The trailing sections are read from the end, so output that prints `Exit Code: 0` itself does
/// not become the exit code.
fn shell_result(response: &Value) -> Value {
    let text = response["llmContent"].as_str().unwrap_or_default();
    let text = text.trim().strip_prefix("<untrusted_context>").and_then(|t| t.strip_suffix("</untrusted_context>")).unwrap_or(text).trim_matches('\n');
    const TRAILERS: [&str; 5] = ["Error", "Exit Code", "Signal", "Background PIDs", "Process Group PGID"];
    let mut rest = text;
    let mut trailers = Map::new();
    // Peel `Name: value` lines off the end while they are trailer sections, last first.
    while let Some(i) = rest.rfind('\n') {
        let line = &rest[i + 1..];
        let Some(name) = TRAILERS.iter().find(|n| line.starts_with(&format!("{n}: "))) else { break };
        trailers.insert(name.to_string(), json!(line[name.len() + 2..].to_string()));
        rest = &rest[..i];
    }
    let stdout = rest.strip_prefix("Output: ").map(|o| if o == "(empty)" { "" } else { o }).unwrap_or(rest);
    let mut out = match response {
        Value::Object(o) => Value::Object(o.clone()),
        other => json!({"result": other}),
    };
    out["stdout"] = json!(stdout);
    out["stderr"] = json!(trailers.get("Error").and_then(Value::as_str).unwrap_or_default());
    out["interrupted"] = json!(trailers.contains_key("Signal"));
    let code = match trailers.get("Exit Code").and_then(Value::as_str) {
        Some(c) => c.trim().parse::<i64>().ok(),
        // Gemini CLI writes the exit code only when it is not 0.
        None if text.starts_with("Output: ") && !trailers.contains_key("Signal") => Some(0),
        None => None,
    };
    if let Some(c) = code {
        out["exit_code"] = json!(c);
    }
    out
}

/// Parses one Gemini CLI hook payload.
pub fn parse(bytes: &[u8]) -> Result<HookEvent, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("the hook payload is not JSON: {e}"))?;
    let s = |k: &str| v[k].as_str().map(str::to_string);
    let session = s("session_id").ok_or("the hook payload has no `session_id`")?;
    let name = s("hook_event_name").ok_or("the hook payload has no `hook_event_name`")?;
    let tool = || -> Result<(String, Value), String> {
        let t = s("tool_name").ok_or_else(|| format!("a {name} payload without `tool_name`"))?;
        if !v["tool_input"].is_object() {
            return Err(format!("a {name} payload whose `tool_input` is not an object"));
        }
        Ok(canonical(&t, &v["tool_input"], &v["mcp_context"]))
    };
    Ok(match name.as_str() {
        "SessionStart" => HookEvent::SessionStart { session },
        "BeforeTool" => {
            let (tool, input) = tool()?;
            HookEvent::PreToolUse { session, tool, input, call_id: None, client: None }
        }
        "AfterTool" => {
            let (tool, _) = tool()?;
            let response = v.get("tool_response").cloned().ok_or("an AfterTool payload without `tool_response`")?;
            let failed = response.get("error").is_some_and(|e| !e.is_null());
            let response = if tool == "Bash" { shell_result(&response) } else { response };
            HookEvent::PostToolUse { session, tool, response, call_id: None, failed, client: None }
        }
        "AfterAgent" => HookEvent::Stop { session, again: v["stop_hook_active"].as_bool().unwrap_or(false) },
        "SessionEnd" => HookEvent::SessionEnd { session },
        other => return Err(format!("`{other}` is not a Gemini CLI hook event this adapter handles")),
    })
}

/// The JSON written on stdout for an answer; None writes nothing. A deny and a block are the same
/// shape in Gemini CLI (`decision` and `reason`); at AfterAgent a block makes the agent go on with the
/// reason as its next prompt.
pub fn render(event: &str, answer: &Answer) -> Option<Value> {
    match answer {
        Answer::Pass => None,
        Answer::Deny(reason) | Answer::Block(reason) => Some(json!({"decision": "deny", "reason": reason})),
        Answer::Note(message) if event != "PreToolUse" => Some(json!({"systemMessage": message})),
        Answer::Note(_) => None,
    }
}

/// The `hooks` object of `.gemini/settings.json`: every event of [`EVENTS`] running `command`, with a
/// timeout (Gemini CLI's is in milliseconds) above the hook's own longest wait.
pub fn hooks(command: &str) -> Value {
    let mut hooks = Map::new();
    for e in EVENTS {
        let entry = json!({"type": "command", "name": "runbook-host", "command": command, "timeout": super::claude::HOOK_TIMEOUT_S * 1000});
        let group = if matches!(*e, "BeforeTool" | "AfterTool") { json!({"matcher": ".*", "hooks": [entry]}) } else { json!({"hooks": [entry]}) };
        hooks.insert(e.to_string(), json!([group]));
    }
    Value::Object(hooks)
}

/// Adds the hooks of `command` to a settings object (replacing ours from an earlier install, keeping
/// everything else).
pub fn install(settings: &mut Value, command: &str) -> Result<(), String> {
    super::merge_hooks(settings, hooks(command), EVENTS)
}

/// Removes every hook group of ours (whatever options it ran with); returns how many.
pub fn uninstall(settings: &mut Value) -> usize {
    super::remove_hooks(settings, EVENTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(v: Value) -> HookEvent {
        parse(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn gemini_payloads_become_canonical_events() {
        let HookEvent::PreToolUse { tool, input, .. } = ev(
            json!({"session_id": "s1", "hook_event_name": "BeforeTool", "tool_name": "replace", "tool_input": {"file_path": "/p/a", "old_string": "x", "new_string": "y", "allow_multiple": true}}),
        ) else {
            panic!()
        };
        assert_eq!((tool.as_str(), input), ("Edit", json!({"file_path": "/p/a", "old_string": "x", "new_string": "y", "replace_all": true})));
        // An MCP tool is named from mcp_context: `my_srv` keeps its underscore.
        let HookEvent::PreToolUse { tool, .. } =
            ev(json!({"session_id": "s1", "hook_event_name": "BeforeTool", "tool_name": "mcp_my_srv_echo", "tool_input": {},
            "mcp_context": {"server_name": "my_srv", "tool_name": "echo", "command": "x"}}))
        else {
            panic!()
        };
        assert_eq!(tool, "mcp__my_srv__echo");
        // A tool of Gemini CLI's own with no canonical name is named as the client's.
        let HookEvent::PreToolUse { tool, .. } =
            ev(json!({"session_id": "s1", "hook_event_name": "BeforeTool", "tool_name": "save_memory", "tool_input": {"fact": "x"}}))
        else {
            panic!()
        };
        assert_eq!(tool, "gemini:save_memory");
        let HookEvent::Stop { again, .. } =
            ev(json!({"session_id": "s1", "hook_event_name": "AfterAgent", "prompt_response": "done", "stop_hook_active": true}))
        else {
            panic!()
        };
        assert!(again);
        assert!(parse(br#"{"session_id":"s1","hook_event_name":"BeforeModel"}"#).is_err());
        assert!(parse(br#"{"session_id":"s1","hook_event_name":"BeforeTool","tool_name":"x","tool_input":"no"}"#).is_err());
    }

    #[test]
    fn a_shell_result_gets_bashs_fields_read_from_the_end() {
        let after = |llm: &str, error: Option<Value>| {
            let mut r = json!({"llmContent": llm, "returnDisplay": "x"});
            if let Some(e) = error {
                r["error"] = e;
            }
            match ev(
                json!({"session_id": "s", "hook_event_name": "AfterTool", "tool_name": "run_shell_command", "tool_input": {"command": "c"}, "tool_response": r}),
            ) {
                HookEvent::PostToolUse { tool, response, failed, .. } => (tool, response, failed),
                _ => panic!(),
            }
        };
        let (tool, r, failed) = after("<untrusted_context>\nOutput: hello\nProcess Group PGID: 15903\n</untrusted_context>", None);
        assert_eq!((tool.as_str(), failed), ("Bash", false));
        assert_eq!((r["stdout"].as_str(), r["exit_code"].as_i64(), r["returnDisplay"].as_str()), (Some("hello"), Some(0), Some("x")));
        // Output that prints a trailer of its own does not set the exit code: the real one comes last.
        let (_, r, _) = after("Output: ok\nExit Code: 0\nmore\nExit Code: 3\nProcess Group PGID: 1", None);
        assert_eq!((r["stdout"].as_str(), r["exit_code"].as_i64()), (Some("ok\nExit Code: 0\nmore"), Some(3)));
        let (_, r, failed) = after("Output: (empty)\nError: spawn failed", Some(json!({"message": "spawn failed", "type": "x"})));
        assert!(failed);
        assert_eq!((r["stdout"].as_str(), r["stderr"].as_str()), (Some(""), Some("spawn failed")));
    }

    #[test]
    fn a_deny_is_geminis_decision_and_every_event_is_hooked() {
        assert_eq!(render("PreToolUse", &Answer::Deny("no".into())), Some(json!({"decision": "deny", "reason": "no"})));
        assert_eq!(render("PreToolUse", &Answer::Pass), None);
        let h = hooks("/abs/runbook-host hook --client gemini");
        assert_eq!(h["BeforeTool"][0]["matcher"], ".*");
        assert_eq!(h["AfterAgent"][0]["hooks"][0]["command"], "/abs/runbook-host hook --client gemini");
        assert_eq!(h.as_object().unwrap().len(), EVENTS.len());
        // Merged with what is there, idempotent, and removed whatever options it was installed with.
        let mut s = json!({"mcpServers": {"x": {}}, "hooks": {"BeforeTool": [{"matcher": "x", "hooks": [{"type": "command", "command": "mine"}]}]}});
        install(&mut s, "/abs/runbook-host hook --client gemini").unwrap();
        install(&mut s, "/abs/runbook-host hook --client gemini --runbook /p/r.yaml").unwrap();
        assert_eq!(s["hooks"]["BeforeTool"].as_array().unwrap().len(), 2, "{s}");
        assert_eq!(uninstall(&mut s), EVENTS.len());
        assert_eq!(s, json!({"mcpServers": {"x": {}}, "hooks": {"BeforeTool": [{"matcher": "x", "hooks": [{"type": "command", "command": "mine"}]}]}}));
    }
}
