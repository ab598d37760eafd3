//! A whole `runbook-host replay examples/executive-snapshot/runbook.json <events>` process: spawn, load
//! the component from a warm precompiled cache, five events, the report, exit. Next to it, the floor of
//! spawning the same binary for `--version` (no component load).
//!
//! The binary is the release build at `target/release/runbook-host` (or `$RUNBOOK_HOST_BIN`); building it
//! is the user's job (`cargo build --release -p runbook-host`). Without it, the bench says so and measures
//! nothing.

use criterion::{criterion_group, criterion_main, Criterion};
use runbook_benches::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const EVENTS: &str = concat!(
    r#"{"type":"start","at":0,"run_id":"r-1","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}"#,
    "\n",
    r#"{"type":"invoke","at":10,"tool":"quickbooks_profit_and_loss","arguments":{"start_date":"2024-01-01","end_date":"2024-03-31"}}"#,
    "\n",
    r#"{"type":"result","at":42,"tool":"quickbooks_profit_and_loss","result":{"revenue":125000,"net_income":18000},"is_error":false}"#,
    "\n",
    r#"{"type":"final_output","at":50}"#,
    "\n",
    r#"{"type":"end","at":60,"reason":"normal"}"#,
    "\n",
);

fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("RUNBOOK_HOST_BIN") {
        return PathBuf::from(p);
    }
    // CARGO_TARGET_TMPDIR is `<target>/tmp`.
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target directory").join("release").join("runbook-host")
}

fn replay_process(c: &mut Criterion) {
    let bin = binary();
    if !bin.is_file() {
        eprintln!(
            "replay_process: SKIPPED, no release binary at target/release/runbook-host; build it first with \
             `cargo build --release -p runbook-host` (or point RUNBOOK_HOST_BIN at one)"
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let runbook = root.join("examples/executive-snapshot/runbook.json");
    let dir = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "replay-process");
    let events = dir.join("events.ndjson");
    std::fs::write(&events, EVENTS).expect("write the events file");
    let cache = dir.join("cache");
    let replay = || {
        let mut cmd = Command::new(&bin);
        cmd.arg("replay").arg(&runbook).arg(&events).env("RUNBOOK_HOST_CACHE", &cache).stdin(Stdio::null());
        cmd
    };

    // Warm the cache, then check the run: five decisions and a completed report, exit 0.
    for _ in 0..2 {
        let out = replay().output().expect("spawn runbook-host");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert!(out.status.success(), "replay failed ({}): {stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
        assert_eq!(lines.len(), 6, "five decisions and the report: {stdout}");
        assert!(lines[1].starts_with(r#"{"decision":"allow""#), "the invoke is allowed: {}", lines[1]);
        assert!(lines[5].contains(r#""outcome":"completed""#), "the run completed: {}", lines[5]);
    }
    let warm = std::fs::read_dir(&cache).map(|d| d.flatten().any(|e| e.path().extension().is_some_and(|x| x == "cwasm"))).unwrap_or(false);
    assert!(warm, "the first replay wrote the precompiled cache");

    let mut g = c.benchmark_group("replay_process");
    g.sample_size(50);
    g.bench_function("replay-5-events-warm-cache", |b| {
        b.iter(|| {
            let status = replay().stdout(Stdio::null()).stderr(Stdio::null()).status().expect("spawn runbook-host");
            assert!(status.success());
        })
    });
    g.bench_function("version-floor", |b| {
        b.iter(|| {
            let status = Command::new(&bin).arg("--version").stdin(Stdio::null()).stdout(Stdio::null()).status().expect("spawn runbook-host");
            assert!(status.success());
        })
    });
    g.finish();
}

criterion_group!(benches, replay_process);
criterion_main!(benches);
