//! Resuming a run from a checkpoint instead of replaying it (issue 32, item 3).
//!
//! A checkpoint is the module's own snapshot of the session (`runbook-session-snapshot/v1`) with where
//! the run's `events.ndjson` stood when it was taken: how many records, how many bytes, the chain's head.
//! Resuming restores the snapshot, checks that the record ending at that byte carries that head, and
//! replays only the records written after it, each link and decision checked as in a full replay.
//!
//! The module checks a snapshot's form, not its history: whoever can write a checkpoint decides what the
//! run remembers. So only a host whose checkpoints are out of the agent's reach uses them (the separated
//! mode's service, whose state directory no client may write); a run directory the agent can write is
//! always resumed by a full replay ([`Run::resume`]).

use super::{Pin, Resumed, Run, RunError, Tampering};
use crate::bundle::Bundle;
use crate::clock::Clock;
use crate::Policy;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

pub const CHECKPOINT_SCHEMA: &str = "runbook-checkpoint/v1";

/// Where a run stood, and the module's state there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub run_id: String,
    pub document_sha256: String,
    /// Records in `events.ndjson` at the checkpoint.
    pub events: u64,
    /// Bytes of `events.ndjson` at the checkpoint (the end of its last record).
    pub offset: u64,
    /// The chain's head: the link of the record ending at `offset` (`h0` when there is none).
    pub head: String,
    /// The `at` of the last event (the run's clock never goes back).
    pub last_at: u64,
    pub snapshot: String,
}

impl Checkpoint {
    pub fn to_json(&self) -> String {
        json!({
            "schema": CHECKPOINT_SCHEMA,
            "run_id": self.run_id,
            "document_sha256": self.document_sha256,
            "events": self.events,
            "offset": self.offset,
            "head": self.head,
            "last_at": self.last_at,
            "snapshot": self.snapshot,
        })
        .to_string()
    }

    pub fn from_json(text: &[u8]) -> Result<Checkpoint, String> {
        let v: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
        if v["schema"] != CHECKPOINT_SCHEMA {
            return Err(format!("not a {CHECKPOINT_SCHEMA}"));
        }
        let s = |k: &str| v[k].as_str().map(str::to_string).ok_or_else(|| format!("`{k}` is not a string"));
        let n = |k: &str| v[k].as_u64().ok_or_else(|| format!("`{k}` is not a count"));
        let c = Checkpoint {
            run_id: s("run_id")?,
            document_sha256: s("document_sha256")?,
            events: n("events")?,
            offset: n("offset")?,
            head: s("head")?,
            last_at: n("last_at")?,
            snapshot: s("snapshot")?,
        };
        if !crate::files::is_safe_name(&c.run_id) || c.head.len() != 64 || !c.head.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("`run_id` or `head` is malformed".into());
        }
        Ok(c)
    }
}

impl Run {
    /// Records in the run's `events.ndjson`.
    pub fn events_recorded(&self) -> u64 {
        self.bundle.events_recorded()
    }

    /// The run's checkpoint now. Every record the run wrote is in the file (each is written before its
    /// answer), so the file's length is the end of the last one.
    pub fn checkpoint(&mut self) -> Result<Checkpoint, RunError> {
        let ev = |e: std::io::Error| RunError::Evidence(format!("run {}: {e}", self.bundle.run_id()));
        let offset = std::fs::symlink_metadata(self.bundle.dir().join("events.ndjson")).map_err(ev)?.len();
        let snapshot = self.session.snapshot()?;
        let document_sha256 = self.bundle.manifest()["document"]["sha256"].as_str().unwrap_or_default().to_string();
        Ok(Checkpoint {
            run_id: self.bundle.run_id().to_string(),
            document_sha256,
            events: self.bundle.events_recorded(),
            offset,
            head: self.bundle.chain_head().to_string(),
            last_at: self.last_at,
            snapshot,
        })
    }

    /// Resumes `run_id` from `cp`: the document and `h0` checked as by [`Run::resume`], the snapshot
    /// restored, the record ending at `cp.offset` checked to carry `cp.head`, and the records after it
    /// replayed. An error means this checkpoint cannot be used; the caller falls back to a full replay,
    /// which decides whether the evidence itself is sound.
    pub fn resume_at(
        policy: Arc<Policy>,
        runs: &Path,
        cp: &Checkpoint,
        t0_ms: u64,
        pin: Option<&Pin>,
        guard: super::Guard,
    ) -> Result<(Run, Resumed), RunError> {
        let run_id = cp.run_id.as_str();
        let ev = |e: std::io::Error| RunError::Evidence(format!("run {run_id}: {e}"));
        let stale = |m: String| RunError::Tampered(Tampering::new(run_id, "checkpoint", m));
        let mut b = Bundle::open(runs, run_id).map_err(ev)?;
        let doc = b.document().map_err(ev)?;
        let doc_sha = hex::encode(Sha256::digest(&doc));
        if doc_sha != cp.document_sha256 {
            return Err(stale(format!("of another document (sha256 {})", cp.document_sha256)));
        }
        let mut session = match policy.restore(&doc, &cp.snapshot)? {
            Ok(s) => s,
            Err(why) => return Err(stale(format!("a snapshot the module refuses: {why}"))),
        };
        // The module checks that run.json (and the pin) name this document and derives the chain's start.
        let h0 = session
            .chain_start(b.manifest_text(), pin.map(super::Pin::pair))?
            .map_err(|(place, why)| RunError::Tampered(Tampering::new(run_id, place, why)))?;
        let (last, tail) = read_around(&b.dir().join("events.ndjson"), cp.offset)
            .map_err(ev)?
            .map_err(|why| stale(format!("does not match events.ndjson: byte {} {why}", cp.offset)))?;
        let expected_last = if cp.events == 0 { None } else { Some(format!("{{\"h\":\"{}\",", cp.head)) };
        match (&expected_last, &last) {
            (None, None) if cp.head == h0 => {}
            (Some(prefix), Some(line)) if line.starts_with(prefix.as_bytes()) => {}
            _ => return Err(stale(format!("does not match events.ndjson: the record ending at byte {} is not the one with link {}", cp.offset, cp.head))),
        }
        if session.state()?.events != cp.events {
            return Err(stale(format!("{} events, its snapshot another number", cp.events)));
        }
        let replayed = session
            .replay_events(&tail, &cp.head)?
            .map_err(|(place, why)| RunError::Tampered(Tampering::new(run_id, place, format!("{why} (after the checkpoint's {} records)", cp.events))))?;
        let n = cp.events + replayed.events;
        let last_at = if replayed.events == 0 { cp.last_at } else { replayed.last_at };
        b.resume_chain(replayed.head, n);
        let mut guard = guard;
        guard.add_path(b.dir());
        session.set_guard(guard.needles())?;
        let resumed = Resumed { events: n, links_checked: replayed.events };
        let approvals = super::channel_for(&b, None);
        let run = Run {
            policy,
            session,
            bundle: b,
            guard,
            t0_ms,
            last_at,
            broken: None,
            state: None,
            signers: None,
            clock: Clock::system(),
            traffic: None,
            approvals,
        };
        Ok((run, resumed))
    }
}

/// The record that ends at `offset` (without its newline; `None` at offset 0) and every byte after it,
/// or why `offset` is not the end of a record. Reads only that last record and the tail (bounded as the
/// whole file would be).
type Around = Result<(Option<Vec<u8>>, Vec<u8>), &'static str>;
fn read_around(path: &Path, offset: u64) -> std::io::Result<Around> {
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let len = f.metadata()?.len();
    if len < offset {
        return Ok(Err("is past its end"));
    }
    if len > crate::files::MAX_EVIDENCE_BYTES {
        return Ok(Err("is in a file larger than any run's evidence"));
    }
    let mut tail = Vec::with_capacity((len - offset) as usize);
    f.seek(SeekFrom::Start(offset))?;
    f.by_ref().take(len - offset).read_to_end(&mut tail)?;
    if offset == 0 {
        return Ok(Ok((None, tail)));
    }
    // Back from the offset, a block at a time, to the newline before the last record.
    let mut line: Vec<u8> = Vec::new();
    let mut end = offset;
    loop {
        let start = end.saturating_sub(64 << 10);
        let mut block = vec![0; (end - start) as usize];
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut block)?;
        block.extend_from_slice(&line);
        line = block;
        if end == offset && line.last() != Some(&b'\n') {
            return Ok(Err("is not the end of a record"));
        }
        // The newline that ends this record is the last byte; look for the one before it.
        if let Some(i) = line[..line.len() - 1].iter().rposition(|&b| b == b'\n') {
            return Ok(Ok((Some(line[i + 1..line.len() - 1].to_vec()), tail)));
        }
        if start == 0 {
            line.pop();
            return Ok(Ok((Some(line), tail)));
        }
        if line.len() as u64 > crate::files::MAX_EVIDENCE_BYTES {
            return Ok(Err("ends a record larger than any run's evidence"));
        }
        end = start;
    }
}
