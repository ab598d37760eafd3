//! Crash points and disk faults for the robustness tests (host/tests/it/faults.rs, docs/robustness.md).
//!
//! Every durable write of the evidence, and every answer given to a client after one, passes a point.
//! With `RUNBOOK_HOST_KILL_AT=N` in its environment the process sends itself SIGKILL at the N-th point it
//! reaches (no destructor, no flush: what `kill -9` leaves); with `RUNBOOK_HOST_FAULT_LOG=FILE` it appends
//! each point's name to FILE first, so a test can count the points of a scenario and then kill at each.
//!
//! A point that stands just before a write, an fsync or a rename is a *write point*: there the operation
//! can be made to fail as a failing disk does, with `EIO`. `RUNBOOK_HOST_EIO_AT=N` fails the N-th point
//! only (a transient error: the disk takes the next write), `RUNBOOK_HOST_EIO_FROM=N` fails it and every
//! write point after it (a disk that has failed for good). The log marks write points with ` io`.
//! Unset (always, outside tests), a point costs one load of an initialised cell.
//!
//! Compiled into the binary users run, on purpose: the tests fault the very code that writes evidence. The
//! switches can only kill the host itself or make its own writes fail, which whoever sets its environment
//! can already do, and both are cases the evidence is built to survive.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

struct Config {
    kill_at: Option<u64>,
    eio_at: Option<u64>,
    eio_from: Option<u64>,
    log: Option<std::path::PathBuf>,
}

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();
static REACHED: AtomicU64 = AtomicU64::new(0);

fn config() -> Option<&'static Config> {
    CONFIG
        .get_or_init(|| {
            let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse().ok());
            let (kill_at, eio_at, eio_from) = (num("RUNBOOK_HOST_KILL_AT"), num("RUNBOOK_HOST_EIO_AT"), num("RUNBOOK_HOST_EIO_FROM"));
            let log = std::env::var_os("RUNBOOK_HOST_FAULT_LOG").map(std::path::PathBuf::from);
            (kill_at.is_some() || eio_at.is_some() || eio_from.is_some() || log.is_some()).then_some(Config { kill_at, eio_at, eio_from, log })
        })
        .as_ref()
}

/// Counts the point, logs it and kills the process there when asked to; its number.
fn reach(c: &Config, what: &str, when: &str, io: bool) -> u64 {
    let n = REACHED.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some(log) = &c.log {
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).create(true).open(log) {
            let _ = writeln!(f, "{n} {what}:{when}{}", if io { " io" } else { "" });
        }
    }
    if c.kill_at == Some(n) {
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
    n
}

/// A crash point: `what` is the file or answer, `when` the moment (e.g. `events.ndjson`, `synced`).
pub fn point(what: &str, when: &str) {
    if let Some(c) = config() {
        reach(c, what, when, false);
    }
}

/// A write point: a crash point just before a write, fsync or rename of `what`, which fails with `EIO`
/// when the disk is made to fail there (the caller returns the error as its own operation would have).
pub fn write_point(what: &str, when: &str) -> std::io::Result<()> {
    let Some(c) = config() else { return Ok(()) };
    let n = reach(c, what, when, true);
    let failed = c.eio_at == Some(n) || c.eio_from.is_some_and(|from| n >= from);
    if failed {
        return Err(std::io::Error::from_raw_os_error(libc::EIO));
    }
    Ok(())
}
