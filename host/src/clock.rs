//! The one clock of a run: the wall clock, or a manual one its owner sets (the conformance vectors and the
//! byte-for-byte bundle tests, where every host must see the same times). The module reads no clock; every
//! time it writes comes from here, as Unix milliseconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Debug, Default)]
pub struct Clock(Option<Arc<AtomicU64>>);

impl Clock {
    /// The wall clock.
    pub fn system() -> Clock {
        Clock(None)
    }

    /// A clock that reads `ms` until [`set`](Clock::set) again (clones share it).
    pub fn manual(ms: u64) -> Clock {
        Clock(Some(Arc::new(AtomicU64::new(ms))))
    }

    /// Sets a manual clock; the wall clock is not set.
    pub fn set(&self, ms: u64) {
        if let Some(c) = &self.0 {
            c.store(ms, Ordering::SeqCst);
        }
    }

    /// Unix time in milliseconds.
    pub fn now_ms(&self) -> u64 {
        match &self.0 {
            Some(c) => c.load(Ordering::SeqCst),
            None => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64,
        }
    }
}

/// The wall clock's Unix time in milliseconds: for what is not a run's time (a listener's idle deadline, a
/// cache entry's age); a run reads its own [`Clock`].
pub fn now_ms() -> u64 {
    Clock::system().now_ms()
}

/// Now, as UTC RFC 3339 with milliseconds (`2026-11-30T12:34:56.789Z`).
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let f = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    now.format(&f).unwrap_or_default()
}
