//! Run bundles (docs/spec/bundle.md, after seed 002's "Run Bundle Contract"): the durable evidence of one run.
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
//!                                    the approval channel (see [`crate::run::approvals`]); not part of the evidence
//! ```
//!
//! Where these files live is a [`Store`] (see [`store`]): a directory, opened as a `cap-std` capability
//! directory ([`DirStore`], every production run), or memory ([`MemoryStore`]: tests and the fuzz targets,
//! the same bytes without a disk). On disk nothing written or read here can reach outside the runs
//! directory, whatever a name says. No absolute path is written into `run.json`, the report, the
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
//! these exact texts to a fresh session (the module's `session.replay-events`).
//!
//! # The hash chain (docs/spec/bundle.md#the-hash-chain)
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
//! `artifacts` (see docs/spec/bundle.md#the-receipt) pins every other file of the bundle (`run.json`, the
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

use crate::clock::Clock;
use crate::files::*;
use crate::registry::Resolved;
use crate::{Effect, EffectOp, HostError, Policy};
use cap_std::fs::Dir;
use serde_json::{json, Map, Value};

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The schema names this module writes.
pub const RUN_SCHEMA: &str = "runbook-run-bundle/v1";
pub const RECEIPT_SCHEMA: &str = "runbook-receipt/v1";
pub const LATEST_SCHEMA: &str = "runbook-latest-run/v1";
pub const HISTORY_SCHEMA: &str = "runbook-run-history-entry/v1";
/// Signed approvals, one line each, in the order they were fed: `{seq, request, message, signature,
/// principal, fingerprint}` (`seq` is the approval event's). Present only when an approval was signed.
pub const SIGNATURES: &str = "signatures.ndjson";
/// A shadow run's calls that ran although the module did not allow them (see [`Bundle::set_shadow`]).
pub const SHADOW: &str = "shadow.ndjson";
/// MCP traffic besides tool calls that the proxy passed on (docs/spec/adapters.md#mcp-beyond-tools): digests, chained.
pub const TRAFFIC: &str = "traffic.ndjson";
/// The host's name and version, as written into receipts.
pub const HOST_NAME: &str = "runbook-host";
pub const HOST_VERSION: &str = env!("CARGO_PKG_VERSION");

mod chain;
mod export;
pub mod store;
pub mod verify;

pub use chain::*;
pub use export::*;
pub use store::{DirStore, MemoryStore, SharedStore, Store};

// ---------------------------------------------------------------------------------------------------
// The bundle.

/// A run bundle being written. Create it before the first event, [`record`](Bundle::record) every event
/// and its decision as they happen, say whether the run was [`admitted`](Bundle::admitted), and
/// [`finish`](Bundle::finish) with the module's report.
///
/// Every byte of every file here is composed by the module (WIT `bundle-create`, `bundle-change`,
/// `bundle-end`, `recorded.record-line`); this type only carries out the effects it returns, in order.
pub struct Bundle {
    path: PathBuf,
    /// The runs root the bundle lives in: a directory ([`DirStore`]) or memory ([`MemoryStore`]).
    store: SharedStore,
    run_id: String,
    head: String,
    lines: u64,
    /// `run.json` as last written (the module changes these bytes) and parsed, for readers.
    manifest_text: String,
    manifest: Map<String, Value>,
    document_file: String,
    has_envelope: bool,
    finished: bool,
    /// The first recorded event line (the `start` claim), whose coverage run.json publishes on admission.
    start_line: Option<String>,
    /// Signs the receipt at the end (`receipt.dsse.json`), when the host was given a key.
    receipt_key: Option<ed25519_dalek::SigningKey>,
    /// Where every time written into the bundle comes from.
    clock: Clock,
}

/// The facts a host measures for a new bundle, or fixes (tests and the conformance vectors, where every
/// host must write the same bytes): the clock, the host's name and version, the git state.
#[derive(Clone, Debug, Default)]
pub struct BundleFacts {
    pub clock: Clock,
    /// (name, version); by default this host's.
    pub host: Option<(String, String)>,
    /// The `source.git` object; by default measured in the working directory (`git status`) on a
    /// directory store, and `unavailable` on a memory store (which never runs `git`).
    pub git: Option<Value>,
}

/// The signed receipt's file: a DSSE envelope whose in-toto Statement names `receipt.json` and
/// `report.json` by sha256 (crate::signatures::dsse, predicate [`crate::signatures::dsse::RECEIPT_PREDICATE`]).
pub const RECEIPT_SIGNATURE: &str = "receipt.dsse.json";

fn module_refused(e: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Carries out the module's effects under `root`, in order, stopping at the first that fails; returns how
/// many were carried out. A path is taken only when each of its components is a safe name (no absolute
/// path, no `..`): the module never writes one, and a host never follows one.
fn apply(store: &dyn Store, effects: &[Effect], key: Option<&ed25519_dalek::SigningKey>) -> Result<(), (usize, io::Error)> {
    for (i, e) in effects.iter().enumerate() {
        let fail = |err: io::Error| (i, err);
        let parts: Vec<&str> = e.path.split('/').collect();
        if parts.is_empty() || parts.len() > 2 || !parts.iter().all(|p| is_safe_name(p)) {
            return Err(fail(io::Error::new(io::ErrorKind::InvalidData, format!("the module named the path `{}`", e.path))));
        }
        match e.op {
            EffectOp::CreateDir => store.create_dir(&e.path).map_err(fail)?,
            EffectOp::Write => store.write_atomic(&e.path, &e.bytes).map_err(fail)?,
            EffectOp::Append => store.append(&e.path, &e.bytes, true).map_err(fail)?,
            EffectOp::Sign => {
                let key = key.ok_or_else(|| fail(io::Error::other("run.json names a receipt key, and this host holds none")))?;
                store.write_atomic(&e.path, &crate::signatures::dsse::sign_payload(key, &e.bytes)).map_err(fail)?;
            }
        }
    }
    Ok(())
}

impl Bundle {
    /// Creates `<runs_root>/<run_id>/` (refusing an existing one) with the document's exact bytes,
    /// `envelope.json` (when the document has one), an empty `events.ndjson` and `run.json`; points
    /// `latest.json` at it and appends a `created` line to `history.ndjson` (the module's
    /// `bundle-create`). `runs_root` is created when missing.
    pub fn create(runs_root: &Path, run_id: &str, doc: &Resolved, module_sha256: &str, adapter: &str) -> io::Result<Bundle> {
        Bundle::create_with(runs_root, run_id, doc, module_sha256, adapter, &BundleFacts::default())
    }

    /// [`Bundle::create`] with the facts given.
    pub fn create_with(runs_root: &Path, run_id: &str, doc: &Resolved, module_sha256: &str, adapter: &str, given: &BundleFacts) -> io::Result<Bundle> {
        // The runs root is created only once the module composed the bundle (after `git status`).
        Bundle::create_impl(|| Ok(Arc::new(DirStore::create(runs_root)?) as SharedStore), true, run_id, doc, module_sha256, adapter, given)
    }

    /// [`Bundle::create_with`] in `store` (a directory or memory). A store not on disk
    /// ([`Store::on_disk`]: memory) records `source.git` as `unavailable` unless the facts give it: no
    /// `git` is run.
    pub fn create_in(store: SharedStore, run_id: &str, doc: &Resolved, module_sha256: &str, adapter: &str, given: &BundleFacts) -> io::Result<Bundle> {
        let measure = store.on_disk();
        Bundle::create_impl(|| Ok(store), measure, run_id, doc, module_sha256, adapter, given)
    }

    fn create_impl(
        store: impl FnOnce() -> io::Result<SharedStore>,
        measure: bool,
        run_id: &str,
        doc: &Resolved,
        module_sha256: &str,
        adapter: &str,
        given: &BundleFacts,
    ) -> io::Result<Bundle> {
        if !is_safe_name(run_id) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("`{run_id}` is not a usable run id")));
        }
        let policy = shared_policy().map_err(io_other)?;
        let git = match &given.git {
            Some(g) => g.clone(),
            None if !measure => serde_json::from_str(&policy.git_state(None, b"").map_err(io_other)?)?,
            None => {
                // Measured before the bundle exists, so the run's own files do not count.
                let (code, porcelain) = crate::facts::git_status();
                serde_json::from_str(&policy.git_state(code, &porcelain).map_err(io_other)?)?
            }
        };
        let (host_name, host_version) = given.host.clone().unwrap_or((HOST_NAME.into(), HOST_VERSION.into()));
        let facts = json!({
            "run_id": run_id, "at": given.clock.now_ms(), "reference": doc.reference, "trust": doc.trust.as_str(),
            "pinned_sha256": doc.pinned_sha256, "provenance": doc.provenance.to_json(), "module_sha256": module_sha256,
            "host": {"name": host_name, "version": host_version}, "adapter": adapter, "git": git,
        });
        let effects = policy.bundle_create(&doc.bytes, &facts.to_string()).map_err(io_other)?.map_err(module_refused)?;
        let store = store()?;
        let manifest_at =
            effects.iter().position(|e| e.path == format!("{run_id}/run.json")).ok_or_else(|| io::Error::other("the module wrote no run.json"))?;
        if let Err((i, e)) = apply(&*store, &effects, None) {
            if i <= manifest_at {
                // Until run.json is written the directory is no bundle: one that cannot be completed goes again.
                if i > 0 {
                    let _ = store.remove_dir_all(run_id);
                }
                return Err(e);
            }
            // The bundle exists: it says it ended without a report where the disk still takes it.
            if let Ok(mut b) = Bundle::open_in(Arc::clone(&store), run_id) {
                let _ = b.end_without_report("bundle-unwritable");
            }
            return Err(e);
        }
        let mut b = Bundle::open_in(store, run_id)?;
        b.clock = given.clock.clone();
        Ok(b)
    }

    /// Reopens a bundle that another process created (the tool-call hook runs one process per event), to
    /// record further events and finish it. Reads `run.json` and the document (whose bytes must match the
    /// manifest's sha256); the chain starts at `h0` with no lines counted: the caller checks the recorded
    /// events and continues the chain with [`resume_chain`](Bundle::resume_chain). A bundle that has ended
    /// (an outcome, `ended_without_report` or a receipt) opens as finished.
    pub fn open(runs_root: &Path, run_id: &str) -> io::Result<Bundle> {
        if !is_safe_name(run_id) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("`{run_id}` is not a usable run id")));
        }
        Bundle::open_in(Arc::new(DirStore::open(runs_root)?), run_id)
    }

    /// [`Bundle::open`] in `store`.
    pub fn open_in(store: SharedStore, run_id: &str) -> io::Result<Bundle> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidData, format!("run {run_id}: {m}"));
        if !is_safe_name(run_id) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("`{run_id}` is not a usable run id")));
        }
        let at = |name: &str| format!("{run_id}/{name}");
        store.open_dir(run_id).map_err(|e| invalid(format!("the run directory cannot be opened: {e}")))?;
        let manifest_bytes = store.read(&at("run.json"), MAX_SMALL_FILE_BYTES).map_err(|e| invalid(format!("run.json: {e}")))?;
        let manifest_text = String::from_utf8(manifest_bytes).map_err(|_| invalid("run.json is not UTF-8".into()))?;
        let manifest: Value = serde_json::from_str(&manifest_text).map_err(|e| invalid(format!("run.json is not JSON: {e}")))?;
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
        let finished = !manifest["outcome"].is_null() || manifest.contains_key("ended_without_report") || store.exists(&at("receipt.json"));
        store.open_append(&at("events.ndjson")).map_err(|e| invalid(format!("events.ndjson: {e}")))?;
        Ok(Bundle {
            path: store.root().join(run_id),
            store,
            run_id: run_id.to_string(),
            head,
            lines: 0,
            manifest_text,
            manifest,
            document_file,
            has_envelope,
            finished,
            start_line: None,
            receipt_key: None,
            clock: Clock::system(),
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

    /// The clock whose time the bundle's later lifecycle entries record (the run's, so that a resumed run
    /// on a given clock writes what one run would have; opening a bundle takes the system clock).
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// `run.json`'s text, as read or as the module last wrote it.
    pub fn manifest_text(&self) -> &str {
        &self.manifest_text
    }

    /// The document's exact bytes, checked against the manifest's sha256.
    pub fn document(&self) -> io::Result<Vec<u8>> {
        let bytes = self.document_unchecked()?;
        if self.manifest["document"]["sha256"] != sha256_hex(&bytes).as_str() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("run {}: the document's sha256 is not run.json's", self.run_id)));
        }
        Ok(bytes)
    }

    /// The document's bytes as they are in the bundle, unchecked: for resume, where the module checks them
    /// against run.json (`session.chain-start`) and names the file.
    pub fn document_unchecked(&self) -> io::Result<Vec<u8>> {
        self.store.read(&self.at(&self.document_file), MAX_SMALL_FILE_BYTES)
    }

    /// The bytes of `events.ndjson` as they are now (at most [`MAX_EVIDENCE_BYTES`]).
    pub fn events_bytes(&self) -> io::Result<Vec<u8>> {
        self.store.read(&self.at("events.ndjson"), MAX_EVIDENCE_BYTES)
    }

    /// The path of the bundle's file `name` in its store.
    fn at(&self, name: &str) -> String {
        format!("{}/{name}", self.run_id)
    }

    /// The store the bundle lives in.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// The run directory (`runs_root/run_id`, as the caller named `runs_root`): the `run_dir` of
    /// [`crate::run::approvals`].
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

    /// Records one event line and its decision line: the module links them and composes the record
    /// (what [`crate::run::Run`] gets with the decision itself; see [`append_record`](Bundle::append_record)).
    pub fn record(&mut self, event_line: &str, decision_line: &str) -> io::Result<()> {
        let policy = shared_policy().map_err(io_other)?;
        let h = chain_next_with(policy, &self.head, event_line, decision_line).map_err(io_other)?;
        let line = policy.record_line(&h, event_line, decision_line).map_err(io_other)?;
        self.append_record(event_line, &line, &h)
    }

    /// Appends the module's record of one event (`recorded.record-line`, whose link is `h`) to
    /// `events.ndjson` in one write, and fsyncs it before returning: a crash loses at most the event in
    /// flight. The first event's line (the `start` claim) is kept: run.json publishes its coverage.
    pub fn append_record(&mut self, event_line: &str, record_line: &str, h: &str) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("the bundle is finished"));
        }
        self.store.append(&self.at("events.ndjson"), record_line.as_bytes(), false)?;
        if self.lines == 0 {
            self.start_line = Some(event_line.to_string());
        }
        self.head = h.to_string();
        self.lines += 1;
        Ok(())
    }

    /// Carries out one `bundle-change` of run.json.
    fn change(&mut self, change: Value) -> io::Result<()> {
        let policy = shared_policy().map_err(io_other)?;
        let effects = policy.bundle_change(&self.manifest_text, &change.to_string()).map_err(io_other)?.map_err(module_refused)?;
        self.carry_out(&effects)
    }

    fn carry_out(&mut self, effects: &[Effect]) -> io::Result<()> {
        apply(&*self.store, effects, self.receipt_key.as_ref()).map_err(|(_, e)| e)?;
        // What was written is what this bundle now holds (the last run.json of the effects).
        let run_json = format!("{}/run.json", self.run_id);
        if let Some(e) = effects.iter().rev().find(|e| e.path == run_json) {
            self.manifest_text = String::from_utf8(e.bytes.clone()).map_err(io_other)?;
            if let Value::Object(m) = serde_json::from_str(&self.manifest_text)? {
                self.manifest = m;
            }
        }
        Ok(())
    }

    /// Records in `run.json` that this run's approvals must be signed by a key of the `allowed_signers`
    /// whose sha256 is given (`approvals: {signed: true, allowed_signers_sha256}`).
    pub fn require_signed_approvals(&mut self, allowed_signers_sha256: &str) -> io::Result<()> {
        self.change(json!({"approvals_signed": allowed_signers_sha256}))
    }

    /// [`SIGNATURES`] as written so far (empty when no approval was signed).
    pub fn signatures_bytes(&self) -> io::Result<Vec<u8>> {
        match self.store.read(&self.at(SIGNATURES), MAX_EVIDENCE_BYTES) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            r => r,
        }
    }

    /// Appends the module's `signature-line` to [`SIGNATURES`] and syncs it (evidence: the receipt pins the file).
    pub fn append_signature(&mut self, line: &str) -> io::Result<()> {
        self.store.append(&self.at(SIGNATURES), line.as_bytes(), true)
    }

    /// Has the receipt signed with `key` at the end. `run.json` names the key (`receipt_signature`: its id
    /// and public key), so a bundle whose signature was removed is refused even by a `verify` given no key.
    pub fn sign_receipts_with(&mut self, key: ed25519_dalek::SigningKey) -> io::Result<()> {
        let public = key.verifying_key();
        let key_id = crate::signatures::dsse::key_id(&public);
        self.receipt_key = Some(key);
        if self.manifest.get("receipt_signature").is_some_and(|r| r["key_id"] == key_id.as_str()) {
            // Reopened by another process of the same run (the hook): run.json already names this key.
            return Ok(());
        }
        self.change(json!({"receipt_key": {"key_id": key_id, "public_key": crate::signatures::dsse::public_pem(&public)}}))
    }

    /// Marks the run as shadow (`--mode shadow`): run.json's `mode` says so from the start, and
    /// `shadow.ndjson` (pinned by the receipt) lists every call the module did not allow that was
    /// forwarded anyway. Nothing in a shadow bundle is enforcement evidence; `verify` says so first.
    pub fn set_shadow(&mut self) -> io::Result<()> {
        self.change(json!({"shadow": true}))
    }

    /// Whether run.json marks the run as shadow.
    pub fn is_shadow(&self) -> bool {
        self.manifest.get("mode").is_some_and(|m| m == "shadow")
    }

    /// Appends the module's `shadow-line` to [`SHADOW`] and syncs it, before the call it names is forwarded.
    pub fn append_shadow(&mut self, line: &str) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("the bundle is finished"));
        }
        self.store.append(&self.at(SHADOW), line.as_bytes(), false)
    }

    /// The number and link of the last line of [`TRAFFIC`] (none yet: 0 and run.json's `chain_h0`), so a
    /// reopened run continues its chain.
    pub fn traffic_tail(&self) -> io::Result<(u64, String)> {
        let h0 = self.manifest["chain_h0"].as_str().unwrap_or_default().to_string();
        if !self.store.is_file(&self.at(TRAFFIC)) {
            return Ok((0, h0));
        }
        let text = String::from_utf8(self.store.read(&self.at(TRAFFIC), u64::MAX)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        match text.lines().last() {
            None => Ok((0, h0)),
            Some(l) => {
                let v: Value = serde_json::from_str(l).map_err(|e| io::Error::other(format!("its last line is not JSON: {e}")))?;
                Ok((v["n"].as_u64().unwrap_or_default(), v["link"].as_str().unwrap_or_default().to_string()))
            }
        }
    }

    /// Appends the module's `traffic-line` to [`TRAFFIC`] (created at its first line) and syncs it.
    pub fn append_traffic(&mut self, line: &str) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("the bundle is finished"));
        }
        self.store.append(&self.at(TRAFFIC), line.as_bytes(), true)
    }

    /// Records admission (`admitted`) or refusal (`refused`) in `run.json`'s lifecycle, with the `start`
    /// claim's coverage.
    pub fn admitted(&mut self, admitted: bool) -> io::Result<()> {
        let change = json!({"lifecycle": if admitted { "admitted" } else { "refused" }, "at": self.clock.now_ms(), "start": self.start_line});
        self.change(change)
    }

    /// Ends the bundle: `report.json` (the report's exact bytes), `run.json` (ended, outcome),
    /// `receipt.json`, its signature, `latest.json` (when it still points here) and an `ended` line in
    /// `history.ndjson`, all composed by the module (`bundle-end`) from the hashes of the files written.
    pub fn finish(&mut self, report: &str) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("the bundle is already finished"));
        }
        let mut hashes = Map::new();
        let mut files = vec![self.document_file.clone(), "events.ndjson".to_string()];
        if self.has_envelope {
            files.push("envelope.json".into());
        }
        for optional in [SIGNATURES, SHADOW, TRAFFIC] {
            if self.store.is_file(&self.at(optional)) {
                files.push(optional.into());
            }
        }
        for f in files {
            hashes.insert(f.clone(), json!(self.store.sha256(&self.at(&f))?));
        }
        self.end_with(Some(report), json!({"at": self.clock.now_ms(), "chain_head": self.head, "hashes": hashes, "latest": self.latest_text()}))
    }

    /// Ends a bundle that has no report to end with (the module trapped: a report it cannot vouch for is
    /// never made up). `run.json` records `ended` and `ended_without_report: <code>` (e.g. `host-trap`); no
    /// report or receipt is written, so `verify` refuses the bundle (fail closed) while the events stay.
    pub fn end_without_report(&mut self, code: &str) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("the bundle is already finished"));
        }
        self.end_with(None, json!({"at": self.clock.now_ms(), "ended_without_report": code, "latest": self.latest_text()}))
    }

    fn end_with(&mut self, report: Option<&str>, facts: Value) -> io::Result<()> {
        let policy = shared_policy().map_err(io_other)?;
        let effects = policy.bundle_end(&self.manifest_text, report, &facts.to_string()).map_err(io_other)?.map_err(module_refused)?;
        let result = self.carry_out(&effects);
        // Once run.json says the run ended, it has: a later failure (latest.json, history) does not reopen it.
        if result.is_ok() || self.manifest.get("lifecycle").and_then(Value::as_array).is_some_and(|l| l.iter().any(|e| e["event"] == "ended")) {
            self.finished = true;
        }
        result
    }

    fn latest_text(&self) -> Option<String> {
        self.store.read("latest.json", MAX_SMALL_FILE_BYTES).ok().and_then(|b| String::from_utf8(b).ok())
    }

    /// Whether `receipt.json` is written (by [`finish`](Bundle::finish), which may still have failed after it).
    pub fn has_receipt(&self) -> bool {
        self.store.is_file(&self.at("receipt.json"))
    }

    /// Whether [`finish`](Bundle::finish) (or [`end_without_report`](Bundle::end_without_report)) ran.
    pub fn is_finished(&self) -> bool {
        self.finished
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
/// `latest.json` (`.runbook/runs/latest`: the newest run of that runs directory). The runs directory
/// itself is refused with [`io::ErrorKind::InvalidInput`] and a message saying how to name a run.
pub fn resolve_run(arg: &str, runs_root: &Path) -> io::Result<PathBuf> {
    let p = Path::new(arg);
    // A directory is taken as the bundle it names (verify then says what is missing in it), unless it
    // is the folder of all runs.
    if p.is_dir() && !matches!(p.file_name().and_then(|f| f.to_str()), Some("latest")) {
        if is_runs_root(p) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("`{arg}` is the runs folder: name a run (its id or directory) or `latest`")));
        }
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

/// Whether `dir` is a folder of runs rather than one run: no `run.json` of its own, and a `latest.json`,
/// a `history.ndjson` or a subdirectory holding a `run.json`.
pub fn is_runs_root(dir: &Path) -> bool {
    if dir.join("run.json").exists() {
        return false;
    }
    if dir.join("latest.json").is_file() || dir.join("history.ndjson").is_file() {
        return true;
    }
    std::fs::read_dir(dir).is_ok_and(|entries| entries.flatten().take(10_000).any(|e| e.path().join("run.json").is_file()))
}

/// The run directory named by `run` under `runs_root`: a run id, or `latest` (read from `latest.json`).
pub fn find_run(runs_root: &Path, run: &str) -> io::Result<PathBuf> {
    let id = if run == "latest" {
        let root = Dir::open_ambient_dir(runs_root, cap_std::ambient_authority())?;
        let v: Value = serde_json::from_slice(&read_bounded(&root, "latest.json", MAX_SMALL_FILE_BYTES)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("latest.json: {e}")))?;
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
