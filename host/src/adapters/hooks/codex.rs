//! OpenAI Codex CLI's hook format (issue 30): Claude Code's in shape (the same events, payload fields,
//! tool names for the shell and MCP tools, and answers), in the project's `.codex/hooks.json`. What differs:
//!
//! | Codex tool (as its hooks name it) | canonical   | arguments                                      |
//! |-----------------------------------|-------------|------------------------------------------------|
//! | `Bash` (the model's `exec_command`) | `Bash`    | `{command}`; the result, a plain string (stdout and stderr merged, no exit code), becomes `{stdout, stderr: "", interrupted: false}` |
//! | `apply_patch`                     | `codex:apply_patch` | `{command: PATCH}`: one patch may touch several files, so it is no `Write` or `Edit` |
//! | any other (`view_image`)          | `codex:view_image` | its arguments                           |
//! | `mcp__S__T`                       | itself      | the MCP tool's arguments                       |
//!
//! An answer of "allow" is not supported (it fails and the tool runs): we answer a pass with nothing.
//!
//! Failures (observed in 0.169.0): everything but a deny fails open: a hook that exits 1, is missing,
//! dies, times out (`timeout`, seconds) or prints a deny without a reason lets the tool run. `install`
//! wraps PreToolUse's command so that any failure of ours is an exit 2 with a reason on stderr, which
//! Codex honours (only PreToolUse's: at Stop an exit 2 blocks the stop, and a missing binary would keep
//! the agent going forever). Trust: Codex runs a hook only when its user config trusts it, and skips an untrusted one
//! *silently* (`codex exec` exits 0 as if nothing was configured); a project's `.codex/` is read only in
//! a trusted project. `install` writes both into `$CODEX_HOME/config.toml`: the project's
//! `trust_level = "trusted"` and, per handler of ours, `[hooks.state."<hooks.json>:<event>:<group>:<handler>"]
//! trusted_hash`, the SHA-256 of the handler's normalised identity ([`trusted_hash`]).

use super::HookEvent;
use serde_json::{json, Value};

/// The events `install` registers, as Codex names them (Claude Code's names).
pub const EVENTS: &[&str] = &["SessionStart", "PreToolUse", "PostToolUse", "Stop", "SessionEnd"];

/// The hooks file `install` writes in the project.
pub const HOOKS_FILE: &str = ".codex/hooks.json";

/// Codex clamps a SessionEnd hook's timeout to 1..3 s; every other one gets ours.
fn timeout(event: &str) -> u64 {
    if event == "SessionEnd" {
        3
    } else {
        super::claude::HOOK_TIMEOUT_S
    }
}

/// The canonical name of a tool as Codex's hooks name it: its shell (`Bash`) and MCP tools already are;
/// any other is `codex:<tool>` (docs/spec/adapters.md#canonical-tool-names).
fn canonical_tool(name: &str) -> String {
    match name {
        "Bash" | "Read" | "Write" | "Edit" | "Glob" | "Grep" | "WebFetch" | "WebSearch" => name.into(),
        mcp if mcp.starts_with("mcp__") => mcp.into(),
        other => format!("codex:{other}"),
    }
}

/// Parses one Codex hook payload: Claude Code's shape, and a shell result given Bash's fields.
pub fn parse(bytes: &[u8]) -> Result<HookEvent, String> {
    let mut ev = super::claude::parse(bytes)?;
    match &mut ev {
        HookEvent::PreToolUse { tool, .. } | HookEvent::PostToolUse { tool, .. } | HookEvent::PermissionRequest { tool, .. } => {
            *tool = canonical_tool(tool);
        }
        _ => {}
    }
    if let HookEvent::PostToolUse { tool, response, .. } = &mut ev {
        if tool == "Bash" {
            if let Value::String(text) = response {
                *response = json!({"stdout": text, "stderr": "", "interrupted": false});
            }
        }
    }
    Ok(ev)
}

/// The `hooks` object of `.codex/hooks.json`: every event of [`EVENTS`] running `command` (no matcher:
/// every tool), PreToolUse running `pre` (the command that fails closed). Only there: at Stop an exit 2
/// blocks the stop and Codex goes on, so a missing binary there would keep the agent going forever
/// (seen in 0.169.0); at the other events a failure of ours lets nothing run that was not decided.
pub fn hooks(command: &str, pre: &str) -> Value {
    let mut hooks = serde_json::Map::new();
    for e in EVENTS {
        let c = if *e == "PreToolUse" { pre } else { command };
        hooks.insert(e.to_string(), json!([{"hooks": [{"type": "command", "command": c, "timeout": timeout(e)}]}]));
    }
    Value::Object(hooks)
}

/// Codex's name for an event in its trust keys (`PreToolUse` -> `pre_tool_use`).
fn label(event: &str) -> String {
    let mut out = String::new();
    for c in event.chars() {
        if c.is_ascii_uppercase() && !out.is_empty() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The hash Codex trusts a command handler by: SHA-256 of the compact, key-sorted JSON of its normalised
/// identity `{event_name, hooks: [{async, command, timeout, type}]}` (no matcher: ours have none).
pub fn trusted_hash(event: &str, command: &str, timeout: u64) -> String {
    let s = |v: &str| Value::String(v.to_string()).to_string();
    let identity =
        format!(r#"{{"event_name":{},"hooks":[{{"async":false,"command":{},"timeout":{timeout},"type":"command"}}]}}"#, s(&label(event)), s(command));
    format!("sha256:{}", crate::files::sha256_hex(identity.as_bytes()))
}

/// The trust entries of our handlers in a hooks document whose file is `path` (canonical, as Codex sees
/// it): `(key, hash)` with the key `<path>:<event label>:<group index>:<handler index>`.
pub fn trust_entries(path: &str, doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in EVENTS {
        for (gi, g) in doc["hooks"][*e].as_array().into_iter().flatten().enumerate() {
            if !super::claude::ours(g) {
                continue;
            }
            let h = &g["hooks"][0];
            let command = h["command"].as_str().unwrap_or_default();
            let t = h["timeout"].as_u64().unwrap_or(600);
            out.push((format!("{path}:{}:{gi}:0", label(e)), trusted_hash(e, command, t)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_payloads_are_claudes_and_the_shell_result_gets_bashs_fields() {
        let post = json!({"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "echo hi"},
            "tool_response": "hi\n", "tool_use_id": "call_1"});
        let HookEvent::PostToolUse { tool, response, call_id, .. } = parse(post.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!((tool.as_str(), call_id.as_deref()), ("Bash", Some("call_1")));
        assert_eq!(response, json!({"stdout": "hi\n", "stderr": "", "interrupted": false}));
        let mcp = json!({"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "mcp__x__echo", "tool_input": {},
            "tool_response": {"content": [], "isError": true}});
        let HookEvent::PostToolUse { response, .. } = parse(mcp.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!(response["isError"], true);
        let patch = json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "apply_patch", "tool_input": {"command": "*** Begin Patch"}});
        let HookEvent::PreToolUse { tool, .. } = parse(patch.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!(tool, "codex:apply_patch");
    }

    /// Hashes Codex 0.169.0 accepts (computed by an independent implementation that matched Codex's own
    /// `hooks.state` entries in real runs; `host/tests/it/codex_cli.rs` shows Codex running hooks trusted so).
    #[test]
    fn the_trust_hash_is_codexs() {
        assert_eq!(
            trusted_hash("PreToolUse", "/abs/runbook-host hook --client codex || { echo 'x' >&2; exit 2; }", 30),
            "sha256:ff0da37ca697def1e222e298d6733e0583585e8dd4fcfca75993e8245263e799"
        );
        assert_eq!(
            trusted_hash("SessionEnd", "/abs/runbook-host hook --client codex", 3),
            "sha256:1ec433c676c191a1f9328f62ce59456c8f3b3707b13e7b31ef9cf2c6b12137a7"
        );
        assert_eq!(label("PreToolUse"), "pre_tool_use");
        assert_eq!(label("SessionEnd"), "session_end");
        let doc = json!({"hooks": hooks("/abs/runbook-host hook --client codex", "/abs/runbook-host hook --client codex || exit 2")});
        let t = trust_entries("/p/.codex/hooks.json", &doc);
        assert_eq!(t.len(), EVENTS.len());
        assert_eq!(t[1].0, "/p/.codex/hooks.json:pre_tool_use:0:0");
        assert_eq!(t[1].1, trusted_hash("PreToolUse", "/abs/runbook-host hook --client codex || exit 2", 30));
        assert_eq!(t[4].1, trusted_hash("SessionEnd", "/abs/runbook-host hook --client codex", 3));
    }
}
