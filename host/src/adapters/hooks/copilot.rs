//! GitHub Copilot CLI's hook format (issue 30). Its own (camelCase) events carry no event name in the
//! payload, so the installed command names it (`--event preToolUse`); the payload is `{sessionId, cwd,
//! toolName, toolArgs}` (+ `toolResult` after the call), and a call is denied by
//! `{"permissionDecision":"deny","permissionDecisionReason":...}` on stdout.
//!
//! | Copilot tool | canonical | arguments (Copilot -> canonical)                        |
//! |--------------|-----------|---------------------------------------------------------|
//! | `bash`       | `Bash`    | `{command, description, ...}` as they are               |
//! | `create`     | `Write`   | `path` -> `file_path`, `file_text` -> `content`          |
//! | `edit`       | `Edit`    | `path` -> `file_path`, `old_str` -> `old_string`, `new_str` -> `new_string` |
//! | `view`       | `Read`    | `path` -> `file_path`                                   |
//! | `SERVER-TOOL` (MCP) | `mcp__SERVER__TOOL` | SERVER one of `mcp-config.json`'s `mcpServers` (the longest that fits, so a `-` in either cannot shift the split) |
//! | any other    | `copilot:<tool>` | its arguments (an MCP tool of a server `mcp-config.json` does not name too: denied unless named so) |
//!
//! Failures (observed in 1.0.102): a hook that is missing, crashes or exits non-zero denies the call (exit 2
//! drops stderr, so our denials print their reason as JSON too); a hook that times out lets the tool run
//! (default 30 s). Project hooks (`.github/hooks/*.json`) load only in a trusted folder; `install` trusts
//! the project in Copilot's `config.json` and says so.

use super::{Answer, HookEvent};
use serde_json::{json, Map, Value};

/// The events `install` registers, as Copilot names them.
pub const EVENTS: &[&str] = &["sessionStart", "preToolUse", "postToolUse", "postToolUseFailure", "agentStop", "sessionEnd"];

/// The hooks file `install` writes in the project (the whole file is ours).
pub const HOOKS_FILE: &str = ".github/hooks/runbook-host.json";

/// The MCP servers of Copilot's `mcp-config.json` (`$COPILOT_HOME/`, else `~/.copilot/`; `mcpServers`
/// keys); none when it is missing or not JSON.
fn servers() -> Vec<String> {
    let home = std::env::var_os("COPILOT_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".copilot")));
    home.and_then(|h| std::fs::read(h.join("mcp-config.json")).ok())
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["mcpServers"].as_object().map(|m| m.keys().cloned().collect()))
        .unwrap_or_default()
}

/// The canonical name and arguments of a Copilot tool call.
fn canonical(tool: &str, args: &Value) -> (String, Value) {
    canonical_with(tool, args, &servers())
}

/// The same, `servers` Copilot's MCP servers: an MCP tool, `SERVER-TOOL` to Copilot, is
/// `mcp__SERVER__TOOL` for the longest server that fits (a `-` in either cannot shift the split); any other
/// tool of Copilot's own is `copilot:<tool>` (docs/spec/adapters.md#canonical-tool-names).
fn canonical_with(tool: &str, args: &Value, servers: &[String]) -> (String, Value) {
    let rename = |pairs: &[(&str, &str)]| super::rename_keys(args, pairs);
    match tool {
        "bash" => ("Bash".into(), args.clone()),
        "create" => ("Write".into(), rename(&[("path", "file_path"), ("file_text", "content")])),
        "edit" => ("Edit".into(), rename(&[("path", "file_path"), ("old_str", "old_string"), ("new_str", "new_string")])),
        "view" => ("Read".into(), rename(&[("path", "file_path")])),
        other => (super::split_mcp(other, servers, b'-').unwrap_or_else(|| format!("copilot:{other}")), args.clone()),
    }
}

/// A `bash` result (`{resultType, textResultForLlm: "OUTPUT\n<shellId: N completed with exit code C>"}`)
/// with Claude Code's Bash fields besides its own.
fn shell_result(result: &Value) -> Value {
    let text = result["textResultForLlm"].as_str().unwrap_or_default();
    let (stdout, code) = match text.rfind("<shellId:") {
        Some(i) => {
            let tail = &text[i..];
            let code = tail.rsplit("exit code ").next().and_then(|c| c.trim_end_matches(['>', ' ', '\n']).parse::<i64>().ok());
            (text[..i].to_string(), code)
        }
        None => (text.to_string(), None),
    };
    let mut out = match result {
        Value::Object(o) => Value::Object(o.clone()),
        other => json!({"result": other}),
    };
    out["stdout"] = json!(stdout);
    out["stderr"] = json!("");
    out["interrupted"] = json!(false);
    if let Some(c) = code {
        out["exit_code"] = json!(c);
    }
    out
}

/// Parses one Copilot hook payload of the event `event` (which the command line names).
pub fn parse(event: &str, bytes: &[u8]) -> Result<HookEvent, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("the hook payload is not JSON: {e}"))?;
    let session = v["sessionId"].as_str().ok_or("the hook payload has no `sessionId`")?.to_string();
    let tool = || -> Result<(String, Value), String> {
        let name = v["toolName"].as_str().ok_or_else(|| format!("a {event} payload without `toolName`"))?;
        let args = match &v["toolArgs"] {
            Value::Object(_) => v["toolArgs"].clone(),
            // Older releases sent the arguments as a JSON string.
            Value::String(s) => serde_json::from_str(s).map_err(|e| format!("`toolArgs` is not a JSON object: {e}"))?,
            _ => return Err(format!("a {event} payload whose `toolArgs` is not an object")),
        };
        Ok(canonical(name, &args))
    };
    Ok(match event {
        "sessionStart" => HookEvent::SessionStart { session },
        "preToolUse" => {
            let (tool, input) = tool()?;
            HookEvent::PreToolUse { session, tool, input, call_id: None, client: None }
        }
        "postToolUse" => {
            let (tool, _) = tool()?;
            let result = v.get("toolResult").cloned().ok_or("a postToolUse payload without `toolResult`")?;
            let failed = result["resultType"].as_str().is_some_and(|t| t != "success");
            let response = if tool == "Bash" { shell_result(&result) } else { result };
            HookEvent::PostToolUse { session, tool, response, call_id: None, failed, client: None }
        }
        "postToolUseFailure" => {
            let (tool, _) = tool()?;
            let error = v.get("error").cloned().ok_or("a postToolUseFailure payload without `error`")?;
            HookEvent::PostToolUse { session, tool, response: error, call_id: None, failed: true, client: None }
        }
        "agentStop" => HookEvent::Stop { session, again: v["stop_hook_active"].as_bool().unwrap_or(false) },
        "sessionEnd" => HookEvent::SessionEnd { session },
        other => return Err(format!("`{other}` is not a Copilot hook event this adapter handles")),
    })
}

/// The JSON written on stdout for an answer; None writes nothing (Copilot reads only a preToolUse's
/// decision; anything else it would ignore or log).
pub fn render(event: &str, answer: &Answer) -> Option<Value> {
    match answer {
        Answer::Deny(reason) if event == "PreToolUse" => Some(json!({"permissionDecision": "deny", "permissionDecisionReason": reason})),
        Answer::Block(reason) => Some(json!({"decision": "block", "reason": reason})),
        _ => None,
    }
}

/// The hooks file: every event of [`EVENTS`] running `command --event EVENT`.
pub fn hooks_file(command: &str) -> Value {
    let mut hooks = Map::new();
    for e in EVENTS {
        hooks.insert(e.to_string(), json!([{"type": "command", "bash": format!("{command} --event {e}"), "timeoutSec": super::claude::HOOK_TIMEOUT_S}]));
    }
    json!({"version": 1, "hooks": hooks})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copilot_payloads_become_canonical_events() {
        let pre = json!({"sessionId": "s1", "timestamp": 1, "cwd": "/p", "toolName": "create", "toolArgs": {"path": "/p/a", "file_text": "x"}});
        let HookEvent::PreToolUse { session, tool, input, .. } = parse("preToolUse", pre.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!((session.as_str(), tool.as_str()), ("s1", "Write"));
        assert_eq!(input, json!({"file_path": "/p/a", "content": "x"}));
        let post = json!({"sessionId": "s1", "toolName": "bash", "toolArgs": {"command": "echo hello"},
            "toolResult": {"resultType": "success", "textResultForLlm": "hello\n<shellId: 0 completed with exit code 0>"}});
        let HookEvent::PostToolUse { tool, response, failed, .. } = parse("postToolUse", post.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!(tool, "Bash");
        assert!(!failed);
        assert_eq!((response["stdout"].as_str(), response["exit_code"].as_i64()), (Some("hello\n"), Some(0)));
        let servers = vec!["my-srv".to_string(), "my".to_string()];
        assert_eq!(canonical_with("my-srv-get-sum", &json!({}), &servers).0, "mcp__my-srv__get-sum", "the longest server that fits");
        assert_eq!(canonical_with("other-echo", &json!({}), &servers).0, "copilot:other-echo");
        assert_eq!(canonical_with("read_bash", &json!({}), &servers).0, "copilot:read_bash");
        assert!(parse("somethingElse", pre.to_string().as_bytes()).is_err());
        assert!(parse("preToolUse", b"{}").is_err(), "no sessionId");
    }

    #[test]
    fn a_deny_is_copilots_decision_and_the_hooks_file_names_each_event() {
        assert_eq!(render("PreToolUse", &Answer::Deny("no".into())), Some(json!({"permissionDecision": "deny", "permissionDecisionReason": "no"})));
        assert_eq!(render("SessionStart", &Answer::Note("hi".into())), None);
        let f = hooks_file("/abs/runbook-host hook --client copilot");
        assert_eq!(f["hooks"]["preToolUse"][0]["bash"], "/abs/runbook-host hook --client copilot --event preToolUse");
        assert!(super::super::claude::is_hook_command(f["hooks"]["agentStop"][0]["bash"].as_str().unwrap()));
    }
}
