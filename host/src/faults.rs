//! Crash points for the crash-consistency tests (host/tests/crash.rs, docs/robustness.md).
//!
//! Every durable write of the evidence, and every answer given to a client after one, passes a point.
//! With `RUNBOOK_HOST_KILL_AT=N` in its environment the process sends itself SIGKILL at the N-th point it
//! reaches (no destructor, no flush: what `kill -9` leaves); with `RUNBOOK_HOST_FAULT_LOG=FILE` it appends
//! each point's name to FILE first, so a test can count the points of a scenario and then kill at each.
//! Unset (always, outside tests), a point costs one load of an initialised cell.
//!
//! Compiled into the binary users run, on purpose: the tests kill the very code that writes evidence. The
//! switch can only kill the host itself, which whoever sets its environment can already do, and a killed
//! host is a case the evidence is built to survive.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

struct Config {
    kill_at: Option<u64>,
    log: Option<std::path::PathBuf>,
}

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();
static REACHED: AtomicU64 = AtomicU64::new(0);

fn config() -> Option<&'static Config> {
    CONFIG
        .get_or_init(|| {
            let kill_at = std::env::var("RUNBOOK_HOST_KILL_AT").ok().and_then(|v| v.parse().ok());
            let log = std::env::var_os("RUNBOOK_HOST_FAULT_LOG").map(std::path::PathBuf::from);
            (kill_at.is_some() || log.is_some()).then_some(Config { kill_at, log })
        })
        .as_ref()
}

/// A crash point: `what` is the file or answer, `when` the moment (e.g. `events.ndjson`, `synced`).
pub fn point(what: &str, when: &str) {
    let Some(c) = config() else { return };
    let n = REACHED.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some(log) = &c.log {
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).create(true).open(log) {
            let _ = writeln!(f, "{n} {what}:{when}");
        }
    }
    if c.kill_at == Some(n) {
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
