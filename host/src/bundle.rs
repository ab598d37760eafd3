//! Run bundles (DESIGN 5, after seed 002's "Run Bundle Contract"): the durable evidence of one run.
//!
//! ```text
//! <runs_root>/                       (by default .runbook/runs)
//!   latest.json                      runbook-latest-run/v1: the newest run (written when a run is created)
//!   history.ndjson                   runbook-run-history-entry/v1 lines: one "created" and one "ended" a run
//!   <run-id>/
//!     run.json                       runbook-run-bundle/v1: the manifest (relative artifact paths only)
//!     runbook.yaml | runbook.json    the document's exact bytes
//!     envelope.json                  the canonical envelope (absent when the document has no complete model)
//!     events.ndjson                  one event, its decision and the chain hash a line, fsync'd as written
//!     report.json                    the module's runbook-run-report/v1, byte for byte
//!     receipt.json                   runbook-receipt/v1, canonical JSON
//!     pending/<id>.json, approvals/<id>.json, consumed/<id>.json
//!                                    the approval channel (see [`crate::approvals`]); not part of the evidence
//! ```
//!
//! The bundle directory is opened as a `cap-std` capability directory: nothing written or read here can
//! reach outside it, whatever a name says. No absolute path is written into `run.json`, the report, the
//! receipt, `latest.json` or `history.ndjson`: `path` fields are relative (to the run directory for
//! artifacts, to `runs_root` for `latest.json`/history), and a local document is named by its file name.
//!
//! # `events.ndjson`
//!
//! One line per event, in the order fed, each ending in `\n`, with the keys in this order:
//!
//! ```text
//! {"h":"<64 hex>","decision":<the decision line, verbatim>,"event":<the event line, verbatim>}
//! ```
//!
//! `event` is the raw event line exactly as it was fed to the module when that line is a JSON object
//! without a newline; any other line (malformed input) is stored as a JSON string holding the line. So a
//! JSON object under `event` is the line's own bytes, and a string is the line itself. Replaying feeds
//! these exact texts to a fresh session (see [`read_events`]).
//!
//! # The hash chain (DESIGN 9.22)
//!
//! `h0` is the hex sha256 of `envelope.json` (or, when the document has no envelope, the document's hex
//! sha256). For line N (1-based), `hN = sha256(ascii_hex(hN-1) || E || D)` where `E` is the JCS (RFC 8785,
//! computed by the module's `canonicalize`) of the event with the values of its top-level `arguments` and
//! `result` keys replaced by the hex sha256 of their JCS, and `D` is the JCS of the decision line. An event
//! line the module cannot canonicalize (it is not JSON) contributes the JCS of the JSON string holding the
//! line. `h` is lowercase hex; the receipt's `chain_head` is the last line's `h` (or `h0` with no lines).
//! See [`chain_next`].
//!
//! # `receipt.json` (runbook-receipt/v1, canonical JSON)
//!
//! ```text
//! {"artifacts":{"<relative path>":"<sha256>",..},"chain_head":"..","host":{"name":"runbook-host","version":".."},
//!  "module_sha256":"..","report":{..the report object..},"report_sha256":"..","schema":"runbook-receipt/v1"}
//! ```
//!
//! `artifacts` (an addition to DESIGN 4's list) pins every other file of the bundle (`run.json`, the
//! document, `envelope.json`, `events.ndjson`, `report.json`), so a change to any byte of any of them is
//! detected by `verify`.
//!
//! # `run.json` (runbook-run-bundle/v1)
//!
//! Pretty-printed with sorted keys: `schema`, `run_id`, `artifacts` (name -> relative path), `document`
//! (`reference`, `trust`, `sha256`, `pinned_sha256`, `file`, `runbook_id`, `version`), `envelope_sha256`,
//! `chain_h0`, `module_sha256`, `host {name, version}`, `adapter {name, sees, coverage}` (coverage from the
//! `start` claim once recorded), `lifecycle [{event: created|admitted|refused|ended, at}]` (UTC RFC 3339,
//! measured by the host), `outcome` (from the report, once ended), `source {git: {status:
//! clean|dirty|not-a-checkout|unavailable, staged, unstaged, untracked, total}}` (counts only).

use crate::registry::Resolved;
use crate::{HostError, Policy};
use cap_std::fs::{Dir, File, OpenOptions};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The schema names this module writes.
pub const RUN_SCHEMA: &str = "runbook-run-bundle/v1";
pub const RECEIPT_SCHEMA: &str = "runbook-receipt/v1";
pub const LATEST_SCHEMA: &str = "runbook-latest-run/v1";
pub const HISTORY_SCHEMA: &str = "runbook-run-history-entry/v1";
/// The host's name and version, as written into receipts.
pub const HOST_NAME: &str = "runbook-host";
pub const HOST_VERSION: &str = env!("CARGO_PKG_VERSION");

// ---------------------------------------------------------------------------------------------------
// Small shared helpers (also used by the registry, the approvals channel and `verify`).

/// Lowercase hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The process-wide policy module used for JCS (the chain) and for lint in `registry add`. Loaded once,
/// from the precompiled cache when there is one.
pub fn shared_policy() -> Result<&'static Arc<Policy>, HostError> {
    static POLICY: OnceLock<Result<Arc<Policy>, String>> = OnceLock::new();
    match POLICY.get_or_init(|| Policy::load().map(Arc::new).map_err(|e| e.to_string())) {
        Ok(p) => Ok(p),
        Err(e) => Err(HostError::Load(e.clone())),
    }
}

/// Whether any string of a JSON value (an object's keys included) contains one of `needles`: how the
/// adapters tell a call that names the run directory, the registry or the host binary (DESIGN 9.20).
pub fn names_any(v: &Value, needles: &[String]) -> bool {
    let hit = |s: &str| needles.iter().any(|n| s.contains(n.as_str()));
    match v {
        Value::String(s) => hit(s),
        Value::Array(a) => a.iter().any(|x| names_any(x, needles)),
        Value::Object(o) => o.iter().any(|(k, x)| hit(k) || names_any(x, needles)),
        _ => false,
    }
}

fn io_other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Now, as UTC RFC 3339 with milliseconds (`2026-11-30T12:34:56.789Z`).
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let f = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    now.format(&f).unwrap_or_default()
}

/// `n` hex digits from the operating system's random source (run ids, approval ids, tokens): never
/// guessable from the time, the pid or an address. Fails closed: no randomness, no id.
pub(crate) fn unique_hex(n: usize) -> io::Result<String> {
    let mut bytes = vec![0u8; n.div_ceil(2)];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(format!("the operating system's random source failed: {e}")))?;
    let mut s = hex::encode(bytes);
    s.truncate(n);
    Ok(s)
}

/// A new run id: `r-<UTC time, basic format>-<12 random hex>`, e.g. `r-20261130T123456Z-3fa9c1d20e7b`.
/// Only ever used as a string (the bundle's directory name and the `start` claim's `run_id`).
pub fn new_run_id() -> io::Result<String> {
    let f = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let t = time::OffsetDateTime::now_utc().format(&f).map_err(io::Error::other)?;
    Ok(format!("r-{t}-{}", unique_hex(12)?))
}

/// Whether `name` is a safe single path component for an id (run id, approval id): ASCII letters, digits,
/// `.`, `_`, `-`, not starting with `.`, at most 128 bytes.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 128 && !name.starts_with('.') && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Writes `bytes` to `name` in `dir` atomically (a temporary file, fsync, rename).
pub(crate) fn write_atomic(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = format!(".{name}.{}.tmp", unique_hex(8)?);
    {
        let mut f = dir.open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    dir.rename(&tmp, dir, name).inspect_err(|_| {
        let _ = dir.remove_file(&tmp);
    })
}

/// Opens (creating it and its parents when missing) an ambient directory as a capability directory.
pub(crate) fn open_or_create_dir(path: &Path) -> io::Result<Dir> {
    std::fs::create_dir_all(path)?;
    Dir::open_ambient_dir(path, cap_std::ambient_authority())
}

// ---------------------------------------------------------------------------------------------------
// JCS and the hash chain.

/// The end (exclusive) of the JSON value starting at `i` in canonical (whitespace-free) JSON text.
fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = skip_string(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']') {
                i += 1;
            }
            Some(i)
        }
    }
}

fn skip_string(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The top-level members of a canonical (whitespace-free) JSON object as (raw key text with its quotes,
/// raw value text); None when the text is not such an object.
pub fn canonical_members(canon: &str) -> Option<Vec<(&str, &str)>> {
    let b = canon.as_bytes();
    if b.first() != Some(&b'{') || b.last() != Some(&b'}') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 1;
    if b.get(i) == Some(&b'}') {
        return (i + 1 == b.len()).then_some(out);
    }
    loop {
        let k_end = skip_string(b, i)?;
        if b.get(k_end) != Some(&b':') {
            return None;
        }
        let v_end = skip_value(b, k_end + 1)?;
        out.push((&canon[i..k_end], &canon[k_end + 1..v_end]));
        match b.get(v_end) {
            Some(b',') => i = v_end + 1,
            Some(b'}') if v_end + 1 == b.len() => return Some(out),
            _ => return None,
        }
    }
}

/// JCS of any text through the module; a text that is not JSON the module accepts is taken as the JSON
/// string holding it.
pub fn jcs(policy: &Policy, text: &str) -> String {
    if let Ok(Ok(c)) = policy.canonicalize(text) {
        return c;
    }
    let s = serde_json::to_string(text).unwrap_or_default();
    match policy.canonicalize(&s) {
        Ok(Ok(c)) => c,
        _ => s,
    }
}

/// `E` of the chain: the JCS of the event with top-level `arguments` and `result` replaced by the hex
/// sha256 of their JCS.
pub fn chain_event_form(policy: &Policy, event_line: &str) -> String {
    let canon = jcs(policy, event_line);
    let Some(ms) = canonical_members(&canon) else { return canon };
    if !ms.iter().any(|(k, _)| *k == "\"arguments\"" || *k == "\"result\"") {
        return canon;
    }
    let mut out = String::with_capacity(canon.len());
    out.push('{');
    for (n, (k, v)) in ms.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push(':');
        if *k == "\"arguments\"" || *k == "\"result\"" {
            out.push('"');
            out.push_str(&sha256_hex(v.as_bytes()));
            out.push('"');
        } else {
            out.push_str(v);
        }
    }
    out.push('}');
    out
}

/// `hN` from `hN-1` (hex), the raw event line and the decision line (DESIGN 9.22), computed by the module.
pub fn chain_next_with(policy: &Policy, prev: &str, event_line: &str, decision_line: &str) -> Result<String, HostError> {
    policy.chain_link(prev, event_line, decision_line, false)
}

/// `hN` for a line of a redacted derivative, whose event is already in its chain form `E`.
pub fn chain_next_redacted(policy: &Policy, prev: &str, event_form: &str, decision_line: &str) -> Result<String, HostError> {
    policy.chain_link(prev, event_form, decision_line, true)
}

/// [`chain_next_with`] on the process's shared policy.
pub fn chain_next(prev: &str, event_line: &str, decision_line: &str) -> io::Result<String> {
    let policy = shared_policy().map_err(io_other)?;
    chain_next_with(&policy, prev, event_line, decision_line).map_err(io_other)
}

/// `h0`: the envelope's sha256, or the document's when there is no envelope.
pub fn chain_h0(envelope: Option<&str>, document_sha256: &str) -> String {
    envelope.map(|e| sha256_hex(e.as_bytes())).unwrap_or_else(|| document_sha256.to_string())
}

/// The text stored under a key of an `events.ndjson` line for a raw line: itself when it is a JSON object
/// without a newline, else the JSON string holding it.
fn embed(raw: &str) -> String {
    let t = raw.trim_start();
    if t.starts_with('{') && !raw.contains('\n') && serde_json::from_str::<serde::de::IgnoredAny>(raw).is_ok() {
        raw.to_string()
    } else {
        serde_json::to_string(raw).unwrap_or_default()
    }
}

/// The raw line from an embedded text (the inverse of `embed`).
fn unembed(text: &str) -> Option<String> {
    if text.trim_start().starts_with('"') {
        serde_json::from_str::<String>(text).ok()
    } else {
        Some(text.to_string())
    }
}

/// One line of `events.ndjson`, as written.
pub fn event_record_line(h: &str, event_line: &str, decision_line: &str) -> String {
    format!("{{\"h\":\"{h}\",\"decision\":{},\"event\":{}}}\n", embed(decision_line), embed(event_line))
}

/// One parsed line of `events.ndjson`: the exact texts recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    pub h: String,
    pub event_line: String,
    pub decision_line: String,
}

/// Parses one line of `events.ndjson` (without its `\n`).
pub fn parse_event_record(line: &str) -> Result<EventRecord, String> {
    const PRE: &str = "{\"h\":\"";
    let rest = line.strip_prefix(PRE).ok_or("a line must start with {\"h\":\"")?;
    if rest.len() < 64 || !rest.as_bytes()[..64].iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
        return Err("`h` must be 64 lowercase hex digits".into());
    }
    let h = rest[..64].to_string();
    let rest = rest[64..].strip_prefix("\",\"decision\":").ok_or("`decision` must follow `h`")?;
    let mut it = serde_json::Deserializer::from_str(rest).into_iter::<serde::de::IgnoredAny>();
    match it.next() {
        Some(Ok(_)) => {}
        _ => return Err("`decision` is not JSON".into()),
    }
    let end = it.byte_offset();
    let decision_text = &rest[..end];
    let rest = rest[end..].strip_prefix(",\"event\":").ok_or("`event` must follow `decision`")?;
    let event_text = rest.strip_suffix('}').ok_or("a line must end with }")?;
    if serde_json::from_str::<serde::de::IgnoredAny>(line).is_err() {
        return Err("the line is not JSON".into());
    }
    let decision_line = unembed(decision_text).ok_or("`decision` is not a JSON object or string")?;
    let event_line = unembed(event_text).ok_or("`event` is not a JSON object or string")?;
    if embed(&decision_line) != decision_text || embed(&event_line) != event_text {
        return Err("a value is not stored in its one allowed form".into());
    }
    Ok(EventRecord { h, event_line, decision_line })
}

/// Reads `events.ndjson` bytes into records; the error names the 1-based line.
pub fn read_events(bytes: &[u8]) -> Result<Vec<EventRecord>, (usize, String)> {
    let text = std::str::from_utf8(bytes).map_err(|e| (bytes[..e.valid_up_to()].iter().filter(|b| **b == b'\n').count() + 1, "not UTF-8".to_string()))?;
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let body = text.strip_suffix('\n').ok_or((text.split('\n').count(), "the last line does not end with a newline".to_string()))?;
    body.split('\n').enumerate().map(|(n, l)| parse_event_record(l).map_err(|e| (n + 1, e))).collect()
}

// ---------------------------------------------------------------------------------------------------
// Git state, counts only.

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
        "replay" => "a recorded event stream",
        _ => "unknown",
    }
}

// ---------------------------------------------------------------------------------------------------
// The bundle.

/// A run bundle being written. Create it before the first event, [`record`](Bundle::record) every event
/// and its decision as they happen, say whether the run was [`admitted`](Bundle::admitted), and
/// [`finish`](Bundle::finish) with the module's report.
pub struct Bundle {
    path: PathBuf,
    root: Dir,
    dir: Dir,
    events: File,
    run_id: String,
    head: String,
    lines: u64,
    manifest: Map<String, Value>,
    document_file: String,
    has_envelope: bool,
    finished: bool,
}

impl Bundle {
    /// Creates `<runs_root>/<run_id>/` (refusing an existing one) with `run.json`, the document's exact
    /// bytes, `envelope.json` (when given) and an empty `events.ndjson`; points `latest.json` at it and
    /// appends a `created` line to `history.ndjson`. `runs_root` is created when missing.
    pub fn create(runs_root: &Path, run_id: &str, doc: &Resolved, envelope: Option<&str>, module_sha256: &str, adapter: &str) -> io::Result<Bundle> {
        if !is_safe_name(run_id) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("`{run_id}` is not a usable run id")));
        }
        let doc_file = if doc.file_name == "runbook.json" { "runbook.json" } else { "runbook.yaml" };
        // Measured before the bundle exists, so the run's own files do not count.
        let git = git_state();
        let root = open_or_create_dir(runs_root)?;
        root.create_dir(run_id)?;
        let dir = root.open_dir(run_id)?;
        let created = now_rfc3339();
        write_atomic(&dir, doc_file, &doc.bytes)?;
        if let Some(e) = envelope {
            write_atomic(&dir, "envelope.json", e.as_bytes())?;
        }
        let events = dir.open_with("events.ndjson", OpenOptions::new().append(true).create_new(true))?;
        events.sync_all()?;
        let (runbook_id, version) = envelope
            .and_then(|e| serde_json::from_str::<Value>(e).ok())
            .map(|e| (e["document"]["runbook_id"].clone(), e["document"]["version"].clone()))
            .unwrap_or((Value::Null, Value::Null));
        let h0 = chain_h0(envelope, &doc.sha256);
        let mut artifacts = Map::new();
        artifacts.insert("run".into(), json!("run.json"));
        artifacts.insert("document".into(), json!(doc_file));
        artifacts.insert("envelope".into(), if envelope.is_some() { json!("envelope.json") } else { Value::Null });
        artifacts.insert("events".into(), json!("events.ndjson"));
        artifacts.insert("report".into(), json!("report.json"));
        artifacts.insert("receipt".into(), json!("receipt.json"));
        let manifest = json!({
            "schema": RUN_SCHEMA,
            "run_id": run_id,
            "artifacts": artifacts,
            "channels": {"pending": "pending", "approvals": "approvals", "consumed": "consumed"},
            "document": {
                "reference": public_reference(&doc.reference),
                "trust": doc.trust.as_str(),
                "sha256": doc.sha256,
                "pinned_sha256": doc.pinned_sha256,
                "file": doc_file,
                "runbook_id": runbook_id,
                "version": version,
            },
            "envelope_sha256": envelope.map(|e| sha256_hex(e.as_bytes())),
            "chain_h0": h0,
            "module_sha256": module_sha256,
            "host": {"name": HOST_NAME, "version": HOST_VERSION},
            "adapter": {"name": adapter, "sees": adapter_sees(adapter), "coverage": null},
            "lifecycle": [{"event": "created", "at": created}],
            "outcome": null,
            "source": {"git": git},
        });
        let Value::Object(manifest) = manifest else { unreachable!() };
        let b = Bundle {
            path: runs_root.join(run_id),
            root,
            dir,
            events,
            run_id: run_id.to_string(),
            head: h0,
            lines: 0,
            manifest,
            document_file: doc_file.to_string(),
            has_envelope: envelope.is_some(),
            finished: false,
        };
        b.write_manifest()?;
        b.write_latest(&created)?;
        b.append_history(json!({"schema": HISTORY_SCHEMA, "event": "created", "run_id": run_id, "at": created, "path": run_id,
            "reference": public_reference(&doc.reference), "trust": doc.trust.as_str(), "adapter": adapter}))?;
        Ok(b)
    }

    /// Reopens a bundle that another process created (the tool-call hook runs one process per event), to
    /// record further events and finish it. Reads `run.json` and the document (whose bytes must match the
    /// manifest's sha256); the chain starts at `h0` with no lines counted: the caller checks the recorded
    /// events and continues the chain with [`resume_chain`](Bundle::resume_chain). A bundle that has ended
    /// (an outcome, `ended_without_report` or a receipt) opens as finished.
    pub fn open(runs_root: &Path, run_id: &str) -> io::Result<Bundle> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidData, format!("run {run_id}: {m}"));
        if !is_safe_name(run_id) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("`{run_id}` is not a usable run id")));
        }
        let root = Dir::open_ambient_dir(runs_root, cap_std::ambient_authority())?;
        let dir = root.open_dir(run_id).map_err(|e| invalid(format!("the run directory cannot be opened: {e}")))?;
        let manifest: Value = serde_json::from_slice(&dir.read("run.json").map_err(|e| invalid(format!("run.json: {e}")))?)
            .map_err(|e| invalid(format!("run.json is not JSON: {e}")))?;
        let Value::Object(manifest) = manifest else { return Err(invalid("run.json is not an object".into())) };
        if manifest.get("schema") != Some(&json!(RUN_SCHEMA)) || manifest.get("run_id") != Some(&json!(run_id)) {
            return Err(invalid(format!("run.json is not the {RUN_SCHEMA} of this run")));
        }
        let document_file = match manifest["artifacts"]["document"].as_str() {
            Some(f @ ("runbook.yaml" | "runbook.json")) => f.to_string(),
            _ => return Err(invalid("run.json names no document".into())),
        };
        let head = manifest["chain_h0"].as_str().filter(|h| h.len() == 64).ok_or_else(|| invalid("run.json has no chain_h0".into()))?.to_string();
        let has_envelope = manifest["artifacts"]["envelope"].is_string();
        let finished = !manifest["outcome"].is_null() || manifest.contains_key("ended_without_report") || dir.exists("receipt.json");
        let events = dir.open_with("events.ndjson", OpenOptions::new().append(true)).map_err(|e| invalid(format!("events.ndjson: {e}")))?;
        Ok(Bundle {
            path: runs_root.join(run_id),
            root,
            dir,
            events,
            run_id: run_id.to_string(),
            head,
            lines: 0,
            manifest,
            document_file,
            has_envelope,
            finished,
        })
    }

    /// Continues the chain after `lines` recorded events whose last hash is `head` (checked by the caller).
    pub fn resume_chain(&mut self, head: String, lines: u64) {
        self.head = head;
        self.lines = lines;
    }

    /// `run.json` as read or last written.
    pub fn manifest(&self) -> &Map<String, Value> {
        &self.manifest
    }

    /// The document's exact bytes, checked against the manifest's sha256.
    pub fn document(&self) -> io::Result<Vec<u8>> {
        let bytes = self.dir.read(&self.document_file)?;
        if self.manifest["document"]["sha256"] != sha256_hex(&bytes).as_str() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("run {}: the document's sha256 is not run.json's", self.run_id)));
        }
        Ok(bytes)
    }

    /// The bytes of `events.ndjson` as they are now.
    pub fn events_bytes(&self) -> io::Result<Vec<u8>> {
        self.dir.read("events.ndjson")
    }

    /// The run directory (`runs_root/run_id`, as the caller named `runs_root`): the `run_dir` of
    /// [`crate::approvals`].
    pub fn dir(&self) -> &Path {
        &self.path
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The chain's head so far (`h0` before any event).
    pub fn chain_head(&self) -> &str {
        &self.head
    }

    /// How many events were recorded.
    pub fn events_recorded(&self) -> u64 {
        self.lines
    }

    /// Appends one event line and its decision line to `events.ndjson`, chained, in one write, and fsyncs
    /// it before returning: a crash loses at most the event in flight. The `start` claim's `coverage` is
    /// copied into `run.json`'s adapter (written at the next lifecycle change).
    pub fn record(&mut self, event_line: &str, decision_line: &str) -> io::Result<()> {
        let policy = shared_policy().map_err(io_other)?;
        let h = chain_next_with(&policy, &self.head, event_line, decision_line).map_err(io_other)?;
        self.record_linked(event_line, decision_line, &h)
    }

    /// [`Bundle::record`] with the link the module already computed (what [`crate::run::Run`] does: the
    /// module returns the link with the decision, in the same call).
    pub fn record_linked(&mut self, event_line: &str, decision_line: &str, h: &str) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("the bundle is finished"));
        }
        let h = h.to_string();
        let line = event_record_line(&h, event_line, decision_line);
        self.events.write_all(line.as_bytes())?;
        self.events.sync_data()?;
        self.head = h;
        self.lines += 1;
        if self.lines == 1 {
            if let Ok(ev) = serde_json::from_str::<Value>(event_line) {
                if ev["type"] == "start" {
                    if let Some(Value::Object(a)) = self.manifest.get_mut("adapter") {
                        a.insert("coverage".into(), ev["coverage"].clone());
                    }
                }
            }
        }
        Ok(())
    }

    /// Records admission (`admitted`) or refusal (`refused`) in `run.json`'s lifecycle.
    pub fn admitted(&mut self, admitted: bool) -> io::Result<()> {
        self.lifecycle(if admitted { "admitted" } else { "refused" })?;
        self.write_manifest()
    }

    /// Ends the bundle: `report.json` (the report's exact bytes), `run.json` (ended, outcome),
    /// `receipt.json`, `latest.json` (when it still points here) and an `ended` line in `history.ndjson`.
    pub fn finish(&mut self, report: &str) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("the bundle is already finished"));
        }
        let policy = shared_policy().map_err(io_other)?;
        let policy = &*policy;
        let report_v: Value = serde_json::from_str(report).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("the report is not JSON: {e}")))?;
        let ended = now_rfc3339();
        write_atomic(&self.dir, "report.json", report.as_bytes())?;
        self.lifecycle_at("ended", &ended);
        self.manifest.insert("outcome".into(), report_v["outcome"].clone());
        self.write_manifest()?;
        let receipt = self.receipt(policy, report)?;
        write_atomic(&self.dir, "receipt.json", receipt.as_bytes())?;
        self.finished = true;
        if self.latest_is_me() {
            self.write_latest(&ended)?;
        }
        self.append_history(json!({"schema": HISTORY_SCHEMA, "event": "ended", "run_id": self.run_id, "at": ended, "path": self.run_id,
            "outcome": report_v["outcome"]}))?;
        Ok(())
    }

    /// Ends a bundle that has no report to end with (the module trapped: a report it cannot vouch for is
    /// never made up). `run.json` records `ended` and `ended_without_report: <code>` (e.g. `host-trap`); no
    /// report or receipt is written, so `verify` refuses the bundle (fail closed) while the events stay.
    pub fn end_without_report(&mut self, code: &str) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("the bundle is already finished"));
        }
        let ended = now_rfc3339();
        self.lifecycle_at("ended", &ended);
        self.manifest.insert("ended_without_report".into(), json!(code));
        self.write_manifest()?;
        self.finished = true;
        if self.latest_is_me() {
            self.write_latest(&ended)?;
        }
        self.append_history(json!({"schema": HISTORY_SCHEMA, "event": "ended", "run_id": self.run_id, "at": ended, "path": self.run_id,
            "outcome": null, "ended_without_report": code}))
    }

    /// Whether [`finish`](Bundle::finish) (or [`end_without_report`](Bundle::end_without_report)) ran.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    fn receipt(&self, policy: &Policy, report: &str) -> io::Result<String> {
        let mut artifacts = Map::new();
        let mut files = vec!["run.json".to_string(), self.document_file.clone(), "events.ndjson".into(), "report.json".into()];
        if self.has_envelope {
            files.push("envelope.json".into());
        }
        for f in files {
            artifacts.insert(f.clone(), json!(sha256_hex(&self.dir.read(&f)?)));
        }
        let artifacts = serde_json::to_string(&artifacts)?;
        let text = format!(
            "{{\"artifacts\":{artifacts},\"chain_head\":\"{}\",\"host\":{{\"name\":\"{HOST_NAME}\",\"version\":\"{HOST_VERSION}\"}},\"module_sha256\":{},\"report\":{report},\"report_sha256\":\"{}\",\"schema\":\"{RECEIPT_SCHEMA}\"}}",
            self.head,
            serde_json::to_string(&self.manifest["module_sha256"])?,
            sha256_hex(report.as_bytes()),
        );
        match policy.canonicalize(&text) {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(io::Error::new(io::ErrorKind::InvalidData, format!("the receipt is not canonicalizable: {e}"))),
            Err(e) => Err(io_other(e)),
        }
    }

    fn lifecycle(&mut self, event: &str) -> io::Result<()> {
        self.lifecycle_at(event, &now_rfc3339());
        Ok(())
    }

    fn lifecycle_at(&mut self, event: &str, at: &str) {
        if let Some(Value::Array(l)) = self.manifest.get_mut("lifecycle") {
            l.push(json!({"event": event, "at": at}));
        }
    }

    fn write_manifest(&self) -> io::Result<()> {
        let mut text = serde_json::to_string_pretty(&Value::Object(self.manifest.clone()))?;
        text.push('\n');
        write_atomic(&self.dir, "run.json", text.as_bytes())
    }

    fn latest_is_me(&self) -> bool {
        self.root.read("latest.json").ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()).is_some_and(|v| v["run_id"] == self.run_id.as_str())
    }

    fn write_latest(&self, at: &str) -> io::Result<()> {
        let mut text = serde_json::to_string_pretty(&json!({"schema": LATEST_SCHEMA, "run_id": self.run_id, "path": self.run_id, "updated_at": at}))?;
        text.push('\n');
        write_atomic(&self.root, "latest.json", text.as_bytes())
    }

    fn append_history(&self, entry: Value) -> io::Result<()> {
        let mut line = serde_json::to_string(&entry)?;
        line.push('\n');
        let mut f = self.root.open_with("history.ndjson", OpenOptions::new().append(true).create(true))?;
        f.write_all(line.as_bytes())?;
        f.sync_data()
    }
}

/// A reference as it may be written into a bundle: `id@version` as is, a file by its name only.
pub fn public_reference(reference: &str) -> String {
    if reference.contains('/') || reference.contains('\\') {
        Path::new(reference).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
    } else {
        reference.to_string()
    }
}

/// The run a command was given, in any of the forms a person writes it: a bundle directory
/// (`.runbook/runs/r-...`), `latest` or a run id (under `runs_root`), or a path ending in `latest` or
/// `latest.json` (`.runbook/runs/latest`: the newest run of that runs directory).
pub fn resolve_run(arg: &str, runs_root: &Path) -> io::Result<PathBuf> {
    let p = Path::new(arg);
    // A directory is taken as the bundle it names (verify then says what is missing in it).
    if p.is_dir() && !matches!(p.file_name().and_then(|f| f.to_str()), Some("latest")) {
        return Ok(p.to_path_buf());
    }
    match p.file_name().and_then(|f| f.to_str()) {
        Some("latest" | "latest.json") => {
            let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(runs_root);
            find_run(parent, "latest")
        }
        _ if !arg.contains('/') => find_run(runs_root, arg),
        _ => Err(io::Error::new(io::ErrorKind::NotFound, format!("`{arg}` is not a run bundle (no run.json there), a run id or `latest`"))),
    }
}

/// The run directory named by `run` under `runs_root`: a run id, or `latest` (read from `latest.json`).
pub fn find_run(runs_root: &Path, run: &str) -> io::Result<PathBuf> {
    let id = if run == "latest" {
        let root = Dir::open_ambient_dir(runs_root, cap_std::ambient_authority())?;
        let v: Value =
            serde_json::from_slice(&root.read("latest.json")?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("latest.json: {e}")))?;
        v["run_id"].as_str().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "latest.json has no run_id"))?.to_string()
    } else {
        run.to_string()
    };
    if !is_safe_name(&id) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("`{id}` is not a run id")));
    }
    let p = runs_root.join(&id);
    if !p.is_dir() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no run `{id}`")));
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------------------
// The redacted derivative (DESIGN 7.15, after seed 002's "Redacted Derivative Workspace").

pub const DERIVATION_SCHEMA: &str = "runbook-redacted-derivation/v1";
/// The one transformation: every event stored in its chain form `E` (arguments and results replaced by
/// the hex sha256 of their JCS), so the chain and the receipt still verify; it cannot be replayed.
pub const REDACTION: &str = "digest-arguments-and-results/v1";

/// Writes a redacted derivative of the finished bundle `run_dir` at `<out_root>/<run-id>/` (refusing an
/// existing one): `events.ndjson` with each event in its chain form (same `h`, same decisions), every
/// other artifact copied byte for byte, the approval channel omitted, and `derivation.json`
/// (runbook-redacted-derivation/v1: `source_run_id`, `created_at`, `transformation`, `files [{path,
/// action: copied|redacted|omitted, source_sha256, output_sha256}]`). The source is left unchanged.
/// Check the source with `verify` first: this function copies, it does not judge.
pub fn export_redacted(run_dir: &Path, out_root: &Path) -> io::Result<PathBuf> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let src = Dir::open_ambient_dir(run_dir, cap_std::ambient_authority())?;
    if src.exists("derivation.json") {
        return Err(bad("this bundle is already a redacted derivative"));
    }
    let run: Value = serde_json::from_slice(&src.read("run.json")?).map_err(|e| bad(&format!("run.json: {e}")))?;
    let run_id = run["run_id"].as_str().filter(|r| is_safe_name(r)).ok_or_else(|| bad("run.json has no usable run_id"))?.to_string();
    let doc_file = match run["artifacts"]["document"].as_str() {
        Some(f @ ("runbook.yaml" | "runbook.json")) => f.to_string(),
        _ => return Err(bad("run.json names no document")),
    };
    let policy = shared_policy().map_err(io_other)?;
    let policy = &*policy;
    let root = open_or_create_dir(out_root)?;
    root.create_dir(&run_id)?;
    let out = root.open_dir(&run_id)?;
    let mut files = Vec::new();
    let mut copy = vec!["run.json".to_string(), doc_file, "report.json".into(), "receipt.json".into()];
    if run["artifacts"]["envelope"].is_string() {
        copy.push("envelope.json".into());
    }
    for f in copy {
        let bytes = src.read(&f)?;
        write_atomic(&out, &f, &bytes)?;
        let sha = sha256_hex(&bytes);
        files.push(json!({"path": f, "action": "copied", "source_sha256": sha, "output_sha256": sha}));
    }
    let source_events = src.read("events.ndjson")?;
    let records = read_events(&source_events).map_err(|(n, m)| bad(&format!("events.ndjson:{n}: {m}")))?;
    let mut redacted = String::new();
    for r in &records {
        redacted.push_str(&event_record_line(&r.h, &chain_event_form(policy, &r.event_line), &r.decision_line));
    }
    write_atomic(&out, "events.ndjson", redacted.as_bytes())?;
    files.push(
        json!({"path": "events.ndjson", "action": "redacted", "source_sha256": sha256_hex(&source_events), "output_sha256": sha256_hex(redacted.as_bytes())}),
    );
    for d in ["pending", "approvals", "consumed"] {
        if src.is_dir(d) {
            files.push(json!({"path": format!("{d}/"), "action": "omitted", "reason": "the approval channel holds call arguments"}));
        }
    }
    files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    let derivation = json!({
        "schema": DERIVATION_SCHEMA, "source_run_id": run_id, "created_at": now_rfc3339(), "transformation": REDACTION, "files": files,
    });
    let mut text = serde_json::to_string_pretty(&derivation)?;
    text.push('\n');
    write_atomic(&out, "derivation.json", text.as_bytes())?;
    Ok(out_root.join(&run_id))
}
