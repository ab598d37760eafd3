//! Qwen Code's hook format (issue 30): its hooks are Claude Code's in shape (the same events, payload fields
//! and answers; `.qwen/settings.json`), so this file is only what differs: the tool vocabulary, mapped to the
//! canonical names the runbook is written in (docs/spec/adapters.md#canonical-tool-names), and the fail-open failures its install must
//! close.
//!
//! | Qwen Code tool      | canonical | arguments (both)                                   |
//! |---------------------|-----------|----------------------------------------------------|
//! | `run_shell_command` | `Bash`    | `{command, description, ...}` (the runbook's `when` reads `/command`) |
//! | `write_file`        | `Write`   | `{file_path, content}`                             |
//! | `edit`              | `Edit`    | `{file_path, old_string, new_string, replace_all}` |
//! | `read_file`         | `Read`    | `{file_path, offset, limit}`                       |
//! | `mcp__S__T`         | `mcp__S__T` | the MCP tool's arguments                         |
//!
//! Any other tool is `qwen:<its name>` (`qwen:save_memory`), so a runbook must name it so to allow it. Coverage: Qwen Code runs
//! PreToolUse for every tool, the shell and MCP tools included; it does not run SessionEnd in a one-shot
//! (`-p`) session, so such a run ends at its Stop when it is at a terminal and stays open otherwise.
//!
//! Failures (observed in 0.24.4): a hook that is missing (exit 127), crashes, times out, or exits 2 with
//! nothing on stderr lets the tool run. `install` therefore wraps the command so that any failure of ours is
//! an exit 2 with a reason on stderr, which Qwen Code honours as a deny; a timeout is not ours to close (its
//! request for an answer gives up after 60 s whatever the hook's `timeout`), so the hook's own waits stay
//! well under it.

use super::HookEvent;
use serde_json::{json, Value};

/// The canonical name of a Qwen Code tool: one of Claude Code's, an MCP tool's own, or `qwen:<tool>`
/// (docs/spec/adapters.md#canonical-tool-names), so that a tool of Qwen Code's own is undeclared unless a runbook names it so.
pub fn canonical_tool(name: &str) -> String {
    match name {
        "run_shell_command" => "Bash".into(),
        "write_file" => "Write".into(),
        "edit" => "Edit".into(),
        "read_file" => "Read".into(),
        mcp if mcp.starts_with("mcp__") => mcp.into(),
        "Bash" | "Read" | "Write" | "Edit" | "Glob" | "Grep" | "WebFetch" | "WebSearch" => name.into(),
        other => format!("qwen:{other}"),
    }
}

/// Parses one Qwen Code hook payload: Claude Code's shape, the tool named canonically, and a shell result
/// given Claude Code's `Bash` fields besides its own.
pub fn parse(bytes: &[u8]) -> Result<HookEvent, String> {
    let mut ev = super::claude::parse(bytes)?;
    match &mut ev {
        HookEvent::PostToolUse { tool, response, .. } if tool == "run_shell_command" => {
            *tool = "Bash".into();
            *response = shell_result(response);
        }
        HookEvent::PreToolUse { tool, .. } | HookEvent::PostToolUse { tool, .. } | HookEvent::PermissionRequest { tool, .. } => {
            *tool = canonical_tool(tool);
        }
        _ => {}
    }
    Ok(ev)
}

/// A `run_shell_command` result (`{llmContent, returnDisplay}`, where `llmContent` is `Command: ...`,
/// `Directory: ...`, `Output: ...`, `Error: ...`, `Exit Code: N`, ... one per line, the output possibly over
/// several) with `stdout`, `stderr`, `exit_code` and `interrupted` as Claude Code's Bash result has them, so
/// that a runbook's asserts read the same paths in every client; Qwen Code's own fields are kept. A failed
/// command's result (PostToolUseFailure) is the error text: kept as it is, under `stderr` too.
fn shell_result(response: &Value) -> Value {
    let text = match response {
        Value::String(s) => s.clone(),
        _ => response["llmContent"].as_str().unwrap_or_default().to_string(),
    };
    let section = |name: &str, until: &[&str]| -> Option<String> {
        let start = text.find(&format!("{name}: "))? + name.len() + 2;
        let rest = &text[start..];
        let end = until.iter().filter_map(|u| rest.find(&format!("\n{u}: "))).min().unwrap_or(rest.len());
        Some(rest[..end].to_string())
    };
    let none = |s: Option<String>| s.filter(|s| s.trim() != "(none)").unwrap_or_default();
    let stdout = none(section("Output", &["Error", "Exit Code", "Signal"]));
    let stderr = match response {
        Value::String(s) => s.clone(),
        _ => none(section("Error", &["Exit Code", "Signal"])),
    };
    let exit_code = section("Exit Code", &["Signal", "Background PIDs", "Process Group PGID"]).and_then(|c| c.trim().parse::<i64>().ok());
    let mut out = match response {
        Value::Object(o) => Value::Object(o.clone()),
        other => json!({"error": other}),
    };
    out["stdout"] = json!(stdout);
    out["stderr"] = json!(stderr);
    out["interrupted"] = json!(false);
    if let Some(c) = exit_code {
        out["exit_code"] = json!(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn qwen_tools_are_named_canonically_and_mcp_tools_keep_their_names() {
        let p = |tool: &str| {
            let v = json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": {"command": "ls"}, "tool_use_id": "t1"});
            match parse(v.to_string().as_bytes()).unwrap() {
                HookEvent::PreToolUse { tool, call_id, .. } => (tool, call_id),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(p("run_shell_command"), ("Bash".to_string(), Some("t1".to_string())));
        assert_eq!(p("write_file").0, "Write");
        assert_eq!(p("edit").0, "Edit");
        assert_eq!(p("read_file").0, "Read");
        assert_eq!(p("mcp__everything__echo").0, "mcp__everything__echo");
        assert_eq!(p("Bash").0, "Bash", "a name that is already canonical stays");
        assert_eq!(p("save_memory").0, "qwen:save_memory", "a tool of Qwen Code's own");
    }

    #[test]
    fn a_shell_result_gets_bashs_fields_and_keeps_its_own() {
        let llm = "Command: printf 'a\\nb'\nDirectory: (root)\nOutput: a\nb\nError: (none)\nExit Code: 0\nSignal: (none)\nProcess Group PGID: (none)";
        let v = json!({"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "run_shell_command", "tool_input": {"command": "x"},
            "tool_response": {"llmContent": llm, "returnDisplay": "a\nb"}, "tool_use_id": "t1"});
        let HookEvent::PostToolUse { tool, response, .. } = parse(v.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!(tool, "Bash");
        assert_eq!(response["stdout"], "a\nb");
        assert_eq!(response["stderr"], "");
        assert_eq!(response["exit_code"], 0);
        assert_eq!(response["returnDisplay"], "a\nb", "Qwen Code's own fields are kept");
    }
}
