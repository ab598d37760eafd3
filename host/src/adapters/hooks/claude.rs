//! Claude Code's hook format (the only client-specific part): its stdin payload parsed into a
//! [`HookEvent`], and the answers written in its documented output shapes. A second client is a sibling
//! of this file.

use super::{Answer, HookEvent};
use serde_json::{json, Value};

/// Parses one Claude Code hook payload.
pub fn parse(bytes: &[u8]) -> Result<HookEvent, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("the hook payload is not JSON: {e}"))?;
    let s = |k: &str| v[k].as_str().map(str::to_string);
    let session = s("session_id").ok_or("the hook payload has no `session_id`")?;
    let name = s("hook_event_name").ok_or("the hook payload has no `hook_event_name`")?;
    let tool = || s("tool_name").ok_or_else(|| format!("a {name} payload without `tool_name`"));
    let input = || match &v["tool_input"] {
        Value::Object(_) => Ok(v["tool_input"].clone()),
        _ => Err(format!("a {name} payload whose `tool_input` is not an object")),
    };
    let call_id = s("tool_use_id");
    Ok(match name.as_str() {
        "SessionStart" => HookEvent::SessionStart { session },
        "PreToolUse" => HookEvent::PreToolUse { session, tool: tool()?, input: input()?, call_id, client: None },
        "PostToolUse" => {
            let response = v.get("tool_response").cloned().ok_or("a PostToolUse payload without `tool_response`")?;
            input()?;
            HookEvent::PostToolUse { session, tool: tool()?, response, call_id, failed: false, client: None }
        }
        // A tool call that failed: its error is the result, and `is_error` is true.
        "PostToolUseFailure" => {
            let response = v.get("tool_response").or_else(|| v.get("error")).cloned().ok_or("a PostToolUseFailure payload without `error`")?;
            input()?;
            HookEvent::PostToolUse { session, tool: tool()?, response, call_id, failed: true, client: None }
        }
        "PermissionRequest" => HookEvent::PermissionRequest { session, tool: tool()?, input: input()? },
        // Not `SubagentStop`: install never registers it, and a subagent's stop is not the session's final
        // answer (issue 28, F8: a forged one fed `final_output`).
        "Stop" => HookEvent::Stop { session, again: v["stop_hook_active"].as_bool().unwrap_or(false) },
        "SessionEnd" => HookEvent::SessionEnd { session },
        other => {
            return Err(format!("`{other}` is not a hook event this adapter handles"));
        }
    })
}

/// Whether a tool's response reports an error (Claude Code's shapes: `is_error`/`isError`, or a
/// `success: false`). Absent means no error.
pub fn is_error(response: &Value) -> bool {
    response["is_error"].as_bool().or_else(|| response["isError"].as_bool()).or_else(|| response["success"].as_bool().map(|s| !s)).unwrap_or(false)
}

/// The JSON written on stdout (exit 0) for an answer; None writes nothing.
pub fn render(event: &str, answer: &Answer) -> Option<Value> {
    match answer {
        Answer::Pass => None,
        Answer::Deny(reason) if event == "PermissionRequest" => Some(json!({
            "hookSpecificOutput": {"hookEventName": event, "decision": {"behavior": "deny", "message": reason}}
        })),
        Answer::Deny(reason) => Some(json!({
            "hookSpecificOutput": {"hookEventName": event, "permissionDecision": "deny", "permissionDecisionReason": reason}
        })),
        Answer::Block(reason) => Some(json!({"decision": "block", "reason": reason})),
        Answer::Note(message) => Some(json!({"systemMessage": message})),
    }
}

/// The hook events `install` registers in command mode, with their matcher (tool events match every tool).
pub const EVENTS: &[(&str, Option<&str>)] =
    &[("SessionStart", None), ("PreToolUse", Some("*")), ("PostToolUse", Some("*")), ("PostToolUseFailure", Some("*")), ("Stop", None), ("SessionEnd", None)];

/// The events the server mode adds: PermissionRequest is judged by the server's memory of the calls the
/// module allowed (a command process has none).
pub const SERVER_EVENTS: &[(&str, Option<&str>)] = &[("PermissionRequest", Some("*"))];

/// The timeout, in seconds, `install` sets on each hook.
pub const HOOK_TIMEOUT_S: u64 = 30;

/// How the client reaches the hook.
pub enum Mode<'a> {
    /// A process per event: `command` is the whole command line.
    Command { command: &'a str },
    /// A process per event for a client without `onFailure` (Qwen Code): the command line fails closed by
    /// itself ([`super::fail_closed`]).
    CommandNoOnFailure { command: &'a str },
    /// The resident server at `url` for every event but SessionStart, which Claude Code runs only as a
    /// command (`start_command`): it starts the server when none answers and opens the session in it.
    /// `token`: the http hooks send the server's token (personal mode); the separated mode's service knows
    /// its clients by uid and takes none.
    Http { start_command: &'a str, url: &'a str, token: bool },
}

/// Merges our hooks into a settings document. Idempotent, and one hook of ours per event: a group of
/// ours that is exactly the one to write is kept, any other of ours (an earlier `install` with other
/// options or the other mode, or of another checkout) is replaced.
pub fn install(settings: &mut Value, mode: &Mode) -> Result<(), String> {
    if !settings.is_object() {
        return Err("the settings file is not a JSON object".into());
    }
    let hooks = settings.as_object_mut().unwrap().entry("hooks").or_insert_with(|| json!({}));
    let hooks = hooks.as_object_mut().ok_or("`hooks` in the settings file is not an object")?;
    let events: Vec<_> = match mode {
        Mode::Command { .. } | Mode::CommandNoOnFailure { .. } => EVENTS.to_vec(),
        Mode::Http { .. } => EVENTS.iter().chain(SERVER_EVENTS).copied().collect(),
    };
    // Events of ours the chosen mode does not use (PermissionRequest when going back to command mode).
    for (event, _) in SERVER_EVENTS {
        if !events.iter().any(|(e, _)| e == event) {
            if let Some(list) = hooks.get_mut(*event).and_then(Value::as_array_mut) {
                list.retain(|g| !ours(g));
                if list.is_empty() {
                    hooks.remove(*event);
                }
            }
        }
    }
    for (event, matcher) in events {
        // `onFailure: block` (Claude Code 2.1.295 and later): a hook that cannot start (the binary is gone)
        // or cannot reach the server, times out, dies with an unexpected exit code or answers non-2xx or
        // something invalid blocks the action instead of letting it through. The timeout bounds a hung
        // hook (the default is 600 s); a decision takes milliseconds.
        let hook = match mode {
            Mode::Command { command } => json!({"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S, "onFailure": "block"}),
            Mode::CommandNoOnFailure { command } => json!({"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}),
            Mode::Http { start_command, .. } if event == "SessionStart" => {
                json!({"type": "command", "command": start_command, "timeout": HOOK_TIMEOUT_S, "onFailure": "block"})
            }
            Mode::Http { url, token: true, .. } => json!({
                "type": "http", "url": url, "timeout": HOOK_TIMEOUT_S, "onFailure": "block",
                "headers": {"Authorization": format!("Bearer ${}", super::server::TOKEN_ENV)},
                "allowedEnvVars": [super::server::TOKEN_ENV],
            }),
            Mode::Http { url, token: false, .. } => json!({"type": "http", "url": url, "timeout": HOOK_TIMEOUT_S, "onFailure": "block"}),
        };
        let mut group = json!({"hooks": [hook]});
        if let Some(m) = matcher {
            group["matcher"] = json!(m);
        }
        let list = hooks.entry(event).or_insert_with(|| json!([]));
        let list = list.as_array_mut().ok_or_else(|| format!("`hooks.{event}` is not an array"))?;
        if list.iter().filter(|g| ours(g)).count() == 1 && list.contains(&group) {
            continue;
        }
        list.retain(|g| !ours(g));
        list.push(group);
    }
    Ok(())
}

/// Whether a hook group is one [`install`] wrote: a single command hook running `runbook-host hook`,
/// whatever path names the binary and whatever options follow (so `uninstall` needs none of them), or a
/// single `http` hook posting to a loopback server's [`super::server::HOOK_PATH`].
pub(super) fn ours(group: &Value) -> bool {
    let Some([h]) = group["hooks"].as_array().map(Vec::as_slice) else {
        return false;
    };
    match h["type"].as_str() {
        Some("command") => h["command"].as_str().is_some_and(is_hook_command),
        Some("http") => h["url"].as_str().is_some_and(is_server_url),
        _ => false,
    }
}

/// Whether a URL is a hook server's: `http://127.0.0.1:PORT/runbook-hook`.
pub fn is_server_url(url: &str) -> bool {
    url.strip_prefix("http://127.0.0.1:")
        .and_then(|r| r.strip_suffix(super::server::HOOK_PATH))
        .is_some_and(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether a command line runs this CLI's `hook`: its first word is a `runbook-host` binary (by name or
/// by any path) and its second is `hook`.
pub fn is_hook_command(command: &str) -> bool {
    let words = shell_words(command);
    let named = |w: &str| std::path::Path::new(w).file_name().is_some_and(|f| f == crate::BIN_NAME);
    words.len() >= 2 && named(&words[0]) && words[1] == "hook"
}

/// The first words of a POSIX shell command line (single and double quotes, backslashes), enough to
/// read back what [`crate::shell_quote`] wrote; anything it does not understand ends the words.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.trim_start().chars().peekable();
    let mut word = String::new();
    let mut in_word = false;
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' if in_word => {
                words.push(std::mem::take(&mut word));
                in_word = false;
            }
            ' ' | '\t' => {}
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                word.push(n);
                            }
                        }
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            ';' | '&' | '|' | '<' | '>' | '(' | ')' | '\n' => break,
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// Removes every group [`install`] added, whatever options it was installed with (and an event list or
/// `hooks` left empty by that); returns how many it removed.
pub fn uninstall(settings: &mut Value) -> usize {
    let mut removed = 0;
    let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) else {
        return 0;
    };
    for (event, _) in EVENTS.iter().chain(SERVER_EVENTS) {
        if let Some(list) = hooks.get_mut(*event).and_then(Value::as_array_mut) {
            let before = list.len();
            list.retain(|g| !ours(g));
            removed += before - list.len();
            if list.is_empty() && before > 0 {
                hooks.remove(*event);
            }
        }
    }
    if hooks.is_empty() && removed > 0 {
        settings.as_object_mut().unwrap().remove("hooks");
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_hook_is_recognised_however_it_was_installed() {
        for c in [
            "runbook-host hook",
            "./target/release/runbook-host hook --runbook rotate-credentials@1.3.0",
            "'./a b/runbook-host' hook --runbook 'x y.yaml' --registry r",
            "\"/opt/runbook-host\" hook",
        ] {
            assert!(is_hook_command(c), "{c}");
        }
        for c in ["lint-it", "runbook-host lint x.yaml", "my-runbook-host hook", "echo runbook-host hook", "", "runbook-host"] {
            assert!(!is_hook_command(c), "{c}");
        }
        let mut s = json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "./runbook-host hook --runbook a.yaml"}]}]}});
        install(&mut s, &Mode::Command { command: "/abs/runbook-host hook --runbook /p/a.yaml" }).unwrap();
        assert_eq!(s["hooks"]["Stop"].as_array().unwrap().len(), 1, "{s}");
        assert_eq!(s["hooks"]["Stop"][0]["hooks"][0]["command"], "/abs/runbook-host hook --runbook /p/a.yaml");
        assert_eq!(uninstall(&mut s), EVENTS.len());
        assert_eq!(s, json!({}));
        // The server mode replaces the command hooks (SessionStart stays a command) and adds
        // PermissionRequest; going back to command mode removes it again.
        let http = Mode::Http { start_command: "/abs/runbook-host hook --port 4000", url: "http://127.0.0.1:4000/runbook-hook", token: true };
        install(&mut s, &Mode::Command { command: "/abs/runbook-host hook" }).unwrap();
        install(&mut s, &http).unwrap();
        let before = s.clone();
        install(&mut s, &http).unwrap();
        assert_eq!(s, before, "idempotent");
        assert_eq!(s["hooks"]["PreToolUse"].as_array().unwrap().len(), 1);
        assert_eq!(s["hooks"]["PreToolUse"][0]["hooks"][0]["type"], "http");
        assert_eq!(s["hooks"]["SessionStart"][0]["hooks"][0]["type"], "command");
        assert_eq!(s["hooks"]["PermissionRequest"][0]["hooks"][0]["url"], "http://127.0.0.1:4000/runbook-hook");
        install(&mut s, &Mode::Command { command: "/abs/runbook-host hook" }).unwrap();
        assert!(s["hooks"].get("PermissionRequest").is_none(), "{s}");
        assert!(!is_server_url("http://127.0.0.1:4000/other") && !is_server_url("http://10.0.0.1:4000/runbook-hook"));
        // The command that fails closed is still recognised as ours.
        assert!(is_hook_command(&super::super::fail_closed("/abs/runbook-host hook --client qwen --runbook x@1")));
    }
}
