//! opencode's hook (issue 30). opencode runs no external hook; its plugins run in its loop. `install`
//! writes our plugin ([`PLUGIN`], `.opencode/plugin/runbook-host.js`): before and after every tool call,
//! at a session's first call and when the session goes idle, it runs the hook command with a payload in
//! Claude Code's shape carrying opencode's own tool name and arguments, and throws on a deny (the call
//! does not run; the model reads the reason). This file maps those to the canonical vocabulary.
//!
//! | opencode tool | canonical | arguments (opencode -> canonical)                                   |
//! |---------------|-----------|---------------------------------------------------------------------|
//! | `bash`        | `Bash`    | `{command, description, timeout, workdir}` as they are; the result gets `stdout` and `exit_code` from `metadata` |
//! | `write`       | `Write`   | `filePath` -> `file_path`, `content`                                 |
//! | `edit`        | `Edit`    | `filePath`, `oldString`, `newString`, `replaceAll` -> `file_path`, `old_string`, `new_string`, `replace_all` |
//! | `read`        | `Read`    | `filePath` -> `file_path`, `offset`, `limit`                          |
//! | `S_T` (MCP)   | `mcp__S__T` | S a server of the project's `opencode.json` `mcp` (the longest that fits), so a `_` in either cannot shift the split |
//! | any other     | `opencode:<tool>` | its arguments (an MCP tool of a server not in `opencode.json` too: denied unless named so) |
//!
//! Failures (observed in 1.18.33): a plugin that throws blocks the call; one that cannot load (a syntax
//! error, an init that throws) is skipped with only a log line, and then nothing is guarded. The plugin
//! turns any failure to answer (the binary gone, a crash, output that is not JSON) into a deny.

use super::{rename_keys as rename, Answer, HookEvent};
use serde_json::{json, Value};

/// The plugin file `install` writes in the project (the whole file is ours).
pub const PLUGIN_FILE: &str = ".opencode/plugin/runbook-host.js";

/// The plugin, `@COMMAND@` standing for the hook command as a JavaScript string.
pub const PLUGIN: &str = include_str!("opencode.js");

/// The plugin running `command`.
pub fn plugin(command: &str) -> String {
    PLUGIN.replace("@COMMAND@", &Value::String(command.to_string()).to_string())
}

/// Whether a file's text is our plugin (whatever command it runs).
pub fn is_ours(text: &str) -> bool {
    text.starts_with("// runbook-host's opencode plugin")
}

/// The MCP servers of the project's `opencode.json` (`mcp` keys); none when it is missing or not JSON.
fn servers() -> Vec<String> {
    std::fs::read("opencode.json")
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["mcp"].as_object().map(|m| m.keys().cloned().collect()))
        .unwrap_or_default()
}

/// The canonical name and arguments of an opencode tool call, `servers` the project's MCP servers.
pub fn canonical(tool: &str, args: &Value, servers: &[String]) -> (String, Value) {
    match tool {
        "bash" => ("Bash".into(), args.clone()),
        "write" => ("Write".into(), rename(args, &[("filePath", "file_path")])),
        "edit" => {
            ("Edit".into(), rename(args, &[("filePath", "file_path"), ("oldString", "old_string"), ("newString", "new_string"), ("replaceAll", "replace_all")]))
        }
        "read" => ("Read".into(), rename(args, &[("filePath", "file_path")])),
        other => (super::split_mcp(other, servers, b'_').unwrap_or_else(|| format!("opencode:{other}")), args.clone()),
    }
}

/// A `bash` result (`{title, metadata: {output, exit}, output}`) with Claude Code's Bash fields besides
/// its own.
fn shell_result(r: &Value) -> Value {
    let mut out = match r {
        Value::Object(o) => Value::Object(o.clone()),
        other => json!({"result": other}),
    };
    out["stdout"] = r["metadata"]["output"].clone();
    if !out["stdout"].is_string() {
        out["stdout"] = json!(r["output"].as_str().unwrap_or_default());
    }
    out["stderr"] = json!("");
    out["interrupted"] = json!(false);
    if let Some(c) = r["metadata"]["exit"].as_i64() {
        out["exit_code"] = json!(c);
    }
    out
}

/// Parses one payload of our plugin.
pub fn parse(bytes: &[u8]) -> Result<HookEvent, String> {
    parse_with(bytes, &servers())
}

fn parse_with(bytes: &[u8], servers: &[String]) -> Result<HookEvent, String> {
    let mut ev = super::claude::parse(bytes)?;
    match &mut ev {
        HookEvent::PreToolUse { tool, input, .. } => {
            (*tool, *input) = canonical(tool, input, servers);
        }
        HookEvent::PostToolUse { tool, response, .. } => {
            let (t, _) = canonical(tool, &Value::Null, servers);
            if t == "Bash" {
                *response = shell_result(response);
            }
            *tool = t;
        }
        _ => {}
    }
    Ok(ev)
}

/// The JSON written on stdout for an answer (the plugin throws on `deny`); None writes nothing.
pub fn render(answer: &Answer) -> Option<Value> {
    match answer {
        Answer::Deny(reason) => Some(json!({"decision": "deny", "reason": reason})),
        Answer::Block(reason) => Some(json!({"decision": "block", "reason": reason})),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opencode_tools_become_canonical_and_mcp_tools_split_by_known_servers() {
        let servers = vec!["my_srv".to_string(), "my".to_string()];
        assert_eq!(
            canonical("edit", &json!({"filePath": "/a", "oldString": "x", "newString": "y"}), &servers),
            ("Edit".into(), json!({"file_path": "/a", "old_string": "x", "new_string": "y"}))
        );
        assert_eq!(canonical("my_srv_echo", &json!({}), &servers).0, "mcp__my_srv__echo", "the longest server that fits");
        assert_eq!(canonical("other_echo", &json!({}), &servers).0, "opencode:other_echo", "a server opencode.json does not name");
        assert_eq!(canonical("todowrite", &json!({}), &servers).0, "opencode:todowrite");
        let post = json!({"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "bash", "tool_input": {"command": "exit 3"},
            "tool_response": {"title": "exit 3", "metadata": {"output": "(no output)", "exit": 3}, "output": "(no output)"}});
        let HookEvent::PostToolUse { tool, response, .. } = parse_with(post.to_string().as_bytes(), &servers).unwrap() else { panic!() };
        assert_eq!((tool.as_str(), response["exit_code"].as_i64(), response["stdout"].as_str()), ("Bash", Some(3), Some("(no output)")));
    }

    #[test]
    fn the_plugin_carries_the_command_as_a_string() {
        let p = plugin("'/a b/runbook-host' hook --client opencode \"x\"");
        assert!(is_ours(&p));
        assert!(p.contains(r#"const COMMAND = "'/a b/runbook-host' hook --client opencode \"x\"";"#), "{p}");
        assert_eq!(render(&Answer::Deny("no".into())), Some(json!({"decision": "deny", "reason": "no"})));
    }
}
