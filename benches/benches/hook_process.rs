//! A whole `runbook-host hook` process for one PreToolUse, as Claude Code runs it before every tool call:
//! spawn, load the precompiled component, take the session's lock, resume the run from its bundle by
//! replaying every recorded event (each chain link and decision checked by the module; nothing the agent
//! could write is trusted without it), decide, record, answer, exit. Measured on runs of
//! 50, 500 and 5,000 recorded events of read-only-investigation (see below how they are grown); each
//! iteration starts from a fresh copy of the same run (copied untimed), so the run does not grow while it
//! is measured.
//!
//! The binary is the release build at `target/release/runbook-host` (or `$RUNBOOK_HOST_BIN`); without it
//! the bench says so and measures nothing.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use runbook_benches::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("RUNBOOK_HOST_BIN") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target directory").join("release").join("runbook-host")
}

fn payload(event: &str, extra: &str) -> String {
    format!(r#"{{"session_id":"bench","transcript_path":"t.jsonl","cwd":".","hook_event_name":"{event}"{extra}}}"#)
}

fn pre_tool_use(n: usize, command: &str) -> String {
    payload("PreToolUse", &format!(r#","tool_name":"Bash","tool_input":{{"command":"{command}"}},"tool_use_id":"toolu_{n}""#))
}

fn post_tool_use(n: usize, command: &str) -> String {
    payload(
        "PostToolUse",
        &format!(
            r#","tool_name":"Bash","tool_input":{{"command":"{command}"}},"tool_response":{{"stdout":"/dev/sda1 50G 45G 5G 90% /var","stderr":"","interrupted":false,"isImage":false}},"tool_use_id":"toolu_{n}""#
        ),
    )
}

/// An allowed read of the runbook's first step, and a command no capability allows.
const ALLOWED: &str = "df -h /var";
const DENIED: &str = "rm -rf /var/log/old";

/// Runs the hook once in `dir` and returns its exit code and stdout.
fn hook(bin: &Path, dir: &Path, input: &str) -> (i32, String) {
    let mut child = Command::new(bin)
        .args(["hook", "--runbook", "runbook.yaml", "--profile", "R1"])
        .current_dir(dir)
        .env("RUNBOOK_HOST_CACHE", dir.parent().unwrap().join("cache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn runbook-host hook");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The file one allowed PreToolUse changes (it appends to `events.ndjson`), as it was, to put a run back
/// between iterations.
struct Reset {
    events: PathBuf,
    events_len: u64,
}

impl Reset {
    fn new(dir: &Path) -> Reset {
        let runs = dir.join(".runbook/runs");
        // The session's one run directory (run ids start with `r-`).
        let run =
            std::fs::read_dir(&runs).unwrap().map(|e| e.unwrap().path()).find(|p| p.is_dir() && p.file_name().unwrap().to_string_lossy().starts_with("r-"));
        let events = run.expect("the run directory").join("events.ndjson");
        Reset { events_len: std::fs::metadata(&events).unwrap().len(), events }
    }

    fn apply(&self) {
        let f = std::fs::OpenOptions::new().write(true).open(&self.events).unwrap();
        f.set_len(self.events_len).unwrap();
        f.sync_all().unwrap();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn hook_process(c: &mut Criterion) {
    let bin = binary();
    if !bin.is_file() {
        eprintln!("hook_process: SKIPPED, no release binary at target/release/runbook-host; build it first with `cargo build --release -p runbook-host`");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let base = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "hook-process");
    let mut group = c.benchmark_group("hook_process");
    // `cargo test` runs each bench once as a smoke test: there the 5,000-event run (5,000 processes to
    // fill) is left to `cargo bench`.
    let sizes: &[usize] = if std::env::args().any(|a| a == "--bench") { &[50, 500, 5000] } else { &[50, 500] };
    for &events in sizes {
        // A session grown to `events` recorded events the way one grows: read-only-investigation at R1 (the
        // client routes, so a step's calls can repeat), each call followed by its result, one call in ten
        // one that no capability allows (denied and recorded).
        let template = base.join(format!("template-{events}"));
        let _ = std::fs::remove_dir_all(&template);
        std::fs::create_dir_all(&template).unwrap();
        std::fs::copy(root.join("examples/read-only-investigation/runbook.yaml"), template.join("runbook.yaml")).unwrap();
        assert_eq!(hook(&bin, &template, &payload("SessionStart", r#","source":"startup""#)).0, 0, "SessionStart");
        let mut recorded = 1;
        let mut n = 0;
        while recorded < events {
            n += 1;
            if n % 10 == 0 {
                let (code, out) = hook(&bin, &template, &pre_tool_use(n, DENIED));
                assert!(code == 0 && out.contains("deny"), "an undeclared command is denied: {out}");
                recorded += 1;
            } else {
                let (code, out) = hook(&bin, &template, &pre_tool_use(n, ALLOWED));
                assert!(code == 0 && !out.contains("deny"), "an allowed read: {out}");
                assert_eq!(hook(&bin, &template, &post_tool_use(n, ALLOWED)).0, 0);
                recorded += 2;
            }
        }
        {
            let dir = base.join(format!("run-{events}"));
            let _ = std::fs::remove_dir_all(&dir);
            copy_dir(&template, &dir);
            let reset = Reset::new(&dir);
            group.bench_function(format!("pre-tool-use/replay/{events}-events"), |b| {
                b.iter_batched(
                    // Back to the same state before each process, untimed, by rewriting the files a
                    // PreToolUse changes in place (a fresh copy of the run would make the hook's fsync
                    // write back freshly created files, which a live session never has to).
                    || reset.apply(),
                    |()| {
                        let (code, out) = hook(&bin, &dir, &pre_tool_use(events + 1, ALLOWED));
                        assert_eq!(code, 0);
                        assert!(!out.contains("deny"), "{out}");
                    },
                    BatchSize::PerIteration,
                )
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = hook_process
}
criterion_main!(benches);
