//! Facts about the run's surroundings that the host gathers and passes in: the working directory's git
//! state (the host runs git; the module keeps counts only).

use std::io;

/// Runs `git status --porcelain=v1 -z` in the working directory, bounded in time: its exit code (None when
/// it could not run or did not finish) and its output, which the module turns into counts only
/// (`git-state`): never a branch name, a file name or a path.
pub fn git_status() -> (Option<i32>, Vec<u8>) {
    use std::process::{Command, Stdio};
    let child = Command::new("git")
        // No fsmonitor hook: reading the state of a checkout must not run a program its config names.
        .args(["-c", "core.fsmonitor=false", "status", "--porcelain=v1", "-z", "--", ":/", ":(exclude).runbook"])
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return (None, Vec::new()) };
    // Bounded: a huge checkout must not hold a run up.
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
    let out = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    (status.and_then(|s| s.code()), out)
}
