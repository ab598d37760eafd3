//! What a call costs a command hook when the run is long (issue 32, item 3), side by side in one run:
//!
//! - **in process**: resuming a run of read-only-investigation of 50, 500 and 5,000 recorded events by a
//!   full replay (`Run::resume`, what a personal-mode command hook does every call), and from a
//!   checkpoint (`Run::resume_at`, what the separated mode's service does after a restart) taken at the
//!   last event, and 256 events before it (the service checkpoints every 256 events);
//!
//! A command hook of another client (Codex, Gemini CLI, ...) cannot use the service: the service binds a
//! session to the one process that posts its events, and a command hook is a new process per call (see
//! docs/separated-mode.md). So in personal mode every call replays (`hook_server` measures that process).

use criterion::{criterion_group, criterion_main, Criterion};
use runbook_benches::*;
use runbook_host::registry;
use runbook_host::run::{Checkpoint, Claim, Guard, Run};
use runbook_host::{Coverage, Profile, Risk};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// A run of `events` records (each allowed call with its result, one call in ten denied) and checkpoints
/// taken every 256 records: the run's id, its start and the checkpoints.
fn grow(runs: &Path, events: u64) -> (String, u64, Vec<Checkpoint>) {
    let policy = Arc::clone(runbook_host::files::shared_policy().unwrap());
    let doc = registry::resolve(root().join("examples/read-only-investigation/runbook.yaml").to_str().unwrap(), "unused").unwrap();
    let claim = Claim {
        profile: Profile::R1,
        allowlist: vec!["*".into()],
        risk_ceiling: Risk::Irreversible,
        coverage: Coverage::Complete,
        agent: "bench".into(),
        available: None,
    };
    let (mut run, _) = Run::create(policy, &doc, claim, runs, "bench", Guard::new(runs, None)).unwrap();
    let mut cps = Vec::new();
    let mut recorded = 1;
    let mut i = 0;
    while recorded < events {
        i += 1;
        let id = format!("c{i}");
        if i % 10 == 0 {
            assert!(!run.invoke("Bash", &json!({"command": "rm -rf /var/log/old"}), Some(&id), None).unwrap().allowed());
            recorded += 1;
        } else {
            assert!(run.invoke("Bash", &json!({"command": "df -h /var"}), Some(&id), None).unwrap().allowed());
            run.result("Bash", &json!({"stdout": "/dev/sda1 50G 45G 5G 90% /var"}), false, Some(&id)).unwrap();
            recorded += 2;
        }
        if recorded / 256 > cps.len() as u64 {
            cps.push(run.checkpoint().unwrap());
        }
    }
    cps.push(run.checkpoint().unwrap());
    (run.run_id().to_string(), run.t0_ms(), cps)
}

fn resume(c: &mut Criterion) {
    let base = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "resume");
    let full = std::env::args().any(|a| a == "--bench");
    let sizes: &[u64] = if full { &[50, 500, 5000] } else { &[50] };
    let policy = Arc::clone(runbook_host::files::shared_policy().unwrap());
    let mut group = c.benchmark_group("resume");
    for &events in sizes {
        let runs = base.join(format!("runs-{events}"));
        let _ = std::fs::remove_dir_all(&runs);
        let (id, t0, cps) = grow(&runs, events);
        let last = cps.last().unwrap().clone();
        let behind = cps.iter().rev().nth(1).cloned();
        let one = |f: &dyn Fn() -> (Run, runbook_host::run::Resumed)| {
            let (run, r) = f();
            assert_eq!(r.events, last.events);
            drop(run);
        };
        let replay = || Run::resume(Arc::clone(&policy), &runs, &id, t0, None, Guard::new(&runs, None)).unwrap();
        let at = |cp: &Checkpoint| Run::resume_at(Arc::clone(&policy), &runs, cp, t0, None, Guard::new(&runs, None)).unwrap();
        one(&replay);
        one(&|| at(&last));
        group.bench_function(format!("replay/{events}-events"), |b| b.iter(|| one(&replay)));
        group.bench_function(format!("checkpoint-at-end/{events}-events"), |b| b.iter(|| one(&|| at(&last))));
        if let Some(cp) = &behind {
            one(&|| at(cp));
            group.bench_function(format!("checkpoint-{}-behind/{events}-events", last.events - cp.events), |b| b.iter(|| one(&|| at(cp))));
        }
    }
    group.finish();
}

criterion_group!(benches, resume);
criterion_main!(benches);
