//! The client's allowlist from Claude Code's own permission rules, so the hook's `start` claim says what
//! the client will actually allow (docs/spec/run.md#admission-and-refusals: `capability-not-allowed` is refused at admission).
//!
//! Claude Code reads `permissions` from the managed settings, the user's `~/.claude/settings.json`, the
//! project's `.claude/settings.json` and `.claude/settings.local.json`. A `deny` rule that names a whole
//! tool (`WebFetch`, `Bash`, `Bash(*)`, `mcp__server`, `mcp__server__*`, `mcp__server__tool`) removes it:
//! the client never runs that tool. A rule with a narrower specifier (`Bash(rm:*)`, `Read(./.env)`) denies
//! some calls only, and leaves the tool allowed at all. `allow` and `ask` rules never remove a tool.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The settings files Claude Code reads for a project, lowest precedence first (all of their deny rules
/// apply: a deny anywhere wins).
pub fn settings_files(project: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(h) = home {
        v.push(h.join(".claude/settings.json"));
    }
    v.push(project.join(".claude/settings.json"));
    v.push(project.join(".claude/settings.local.json"));
    v.push(PathBuf::from("/etc/claude-code/managed-settings.json"));
    v
}

/// The deny rules of the files that exist. A file that exists but is not JSON is an error (fail closed:
/// the client may be denying what we cannot read).
pub fn deny_rules(files: &[PathBuf]) -> Result<Vec<String>, String> {
    let mut rules = Vec::new();
    for f in files {
        let bytes = match crate::files::read_path_bounded(f, crate::files::MAX_SMALL_FILE_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read the client's settings `{}`: {e}", f.display())),
        };
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| format!("the client's settings `{}` are not JSON: {e}", f.display()))?;
        if let Some(d) = v["permissions"]["deny"].as_array() {
            rules.extend(d.iter().filter_map(|r| r.as_str().map(str::to_string)));
        }
    }
    Ok(rules)
}

/// Whether a deny rule removes `tool` entirely.
pub fn denies_whole_tool(rule: &str, tool: &str) -> bool {
    let rule = rule.trim();
    let (name, spec) = match rule.split_once('(') {
        Some((n, rest)) => (n.trim(), Some(rest.strip_suffix(')').unwrap_or(rest).trim())),
        None => (rule, None),
    };
    if spec.is_some_and(|s| !s.is_empty() && s != "*") {
        return false;
    }
    if name == tool {
        return true;
    }
    // MCP: `mcp__server` and `mcp__server__*` deny every tool of that server.
    if let Some(server) = name.strip_prefix("mcp__") {
        let server = server.strip_suffix("__*").unwrap_or(server);
        if !server.contains("__") {
            return tool.strip_prefix("mcp__").and_then(|t| t.strip_prefix(server)).is_some_and(|rest| rest.starts_with("__"));
        }
    }
    false
}

/// `tools` without those a deny rule removes.
pub fn allowed(tools: &[String], deny: &[String]) -> Vec<String> {
    tools.iter().filter(|t| !deny.iter().any(|r| denies_whole_tool(r, t))).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_tool_rules_remove_a_tool_and_narrow_ones_do_not() {
        for (rule, tool, whole) in [
            ("WebFetch", "WebFetch", true),
            ("Bash", "Bash", true),
            ("Bash(*)", "Bash", true),
            ("Bash()", "Bash", true),
            ("Bash(rm:*)", "Bash", false),
            ("Read(./.env)", "Read", false),
            ("Bash", "BashOutput", false),
            ("mcp__vault", "mcp__vault__write", true),
            ("mcp__vault__*", "mcp__vault__write", true),
            ("mcp__vault__write", "mcp__vault__write", true),
            ("mcp__vault__write", "mcp__vault__read", false),
            ("mcp__vault", "mcp__vaultx__write", false),
            (" Edit ", "Edit", true),
        ] {
            assert_eq!(denies_whole_tool(rule, tool), whole, "{rule} {tool}");
        }
    }

    #[test]
    fn deny_rules_come_from_every_file_and_an_unreadable_one_fails_closed() {
        let d = std::env::temp_dir().join(format!("rh-perm-{}", std::process::id()));
        std::fs::create_dir_all(d.join(".claude")).unwrap();
        std::fs::write(d.join(".claude/settings.json"), r#"{"permissions":{"deny":["Bash"],"allow":["Edit"]}}"#).unwrap();
        std::fs::write(d.join(".claude/settings.local.json"), r#"{"permissions":{"deny":["mcp__vault"]}}"#).unwrap();
        let files = settings_files(&d, None);
        let rules = deny_rules(&files).unwrap();
        let tools: Vec<String> = ["Bash", "Edit", "mcp__vault__write", "Read"].iter().map(|s| s.to_string()).collect();
        assert_eq!(allowed(&tools, &rules), vec!["Edit".to_string(), "Read".to_string()]);
        std::fs::write(d.join(".claude/settings.local.json"), "{not json").unwrap();
        assert!(deny_rules(&files).unwrap_err().contains("not JSON"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
