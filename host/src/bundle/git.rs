//! The working directory's git state, counts only.

#[allow(unused_imports)]
use super::*;

/// The working directory's git state as counts only: never a branch name, a file name or a path.
pub fn git_state() -> Value {
    use std::process::{Command, Stdio};
    let child = Command::new("git")
        // No fsmonitor hook: reading the state of a checkout must not run a program its config names.
        .args(["-c", "core.fsmonitor=false", "status", "--porcelain=v1", "-z", "--", ":/", ":(exclude).runbook"])
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return json!({"status": "unavailable"}) };
    // Bounded: a huge checkout must not hold a run up.
    let mut out = Vec::new();
    let reader = child.stdout.take().map(|mut s| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = io::Read::read_to_end(&mut s, &mut v);
            v
        })
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    if let Some(r) = reader {
        out = r.join().unwrap_or_default();
    }
    match status {
        Some(s) if s.success() => {}
        Some(s) if s.code() == Some(128) => return json!({"status": "not-a-checkout"}),
        _ => return json!({"status": "unavailable"}),
    }
    let (mut staged, mut unstaged, mut untracked, mut total) = (0u64, 0u64, 0u64, 0u64);
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let Some(f) = fields.next() {
        if f.len() < 3 {
            continue;
        }
        let (x, y) = (f[0], f[1]);
        total += 1;
        if x == b'?' {
            untracked += 1;
            continue;
        }
        if x != b' ' {
            staged += 1;
        }
        if y != b' ' {
            unstaged += 1;
        }
        if x == b'R' || x == b'C' {
            fields.next(); // the rename's source
        }
    }
    json!({
        "status": if total == 0 { "clean" } else { "dirty" },
        "staged": staged, "unstaged": unstaged, "untracked": untracked, "total": total,
    })
}

/// What an adapter sees, as published in `run.json` (its exact blind spots come from the `start` claim).
pub fn adapter_sees(adapter: &str) -> &'static str {
    match adapter {
        "mcp-proxy" => "MCP tool calls only",
        "hook" => "every tool invocation of the agent CLI, shell included",
        "library" => "what the embedding client feeds",
        "claude-agent-sdk" => "every tool call the Claude Agent SDK's agent loop sends through its hooks",
        "pydantic-ai" => "tool calls through the wrapped toolsets of a Pydantic AI agent",
        "replay" => "a recorded event stream",
        _ => "unknown",
    }
}
