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
/// Signed approvals, one line each, in the order they were fed: `{seq, request, message, signature,
/// principal, fingerprint}` (`seq` is the approval event's). Present only when an approval was signed.
pub const SIGNATURES: &str = "signatures.ndjson";
/// A shadow run's calls that ran although the module did not allow them (see [`Bundle::set_shadow`]).
pub const SHADOW: &str = "shadow.ndjson";
/// The host's name and version, as written into receipts.
pub const HOST_NAME: &str = "runbook-host";
pub const HOST_VERSION: &str = env!("CARGO_PKG_VERSION");
/// Every host that writes bundles `verify` accepts: this one, and the packages that embed the same
/// component in a client's own process (packages/python, packages/js). The receipt names which.
pub const KNOWN_HOSTS: [&str; 3] = [HOST_NAME, "runbook-policy-python", "runbook-policy-js"];

mod chain;
mod export;
mod files;
mod git;

pub use chain::*;
pub use export::*;
pub use files::*;
pub use git::*;

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
    /// Signs the receipt at the end (`receipt.dsse.json`), when the host was given a key.
    receipt_key: Option<ed25519_dalek::SigningKey>,
}

/// The signed receipt's file: a DSSE envelope whose in-toto Statement names `receipt.json` and
/// `report.json` by sha256 (crate::dsse, predicate [`crate::dsse::RECEIPT_PREDICATE`]).
pub const RECEIPT_SIGNATURE: &str = "receipt.dsse.json";

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
        // Until run.json is written the directory is no bundle: one that cannot be completed goes again.
        let begun = (|| -> io::Result<(Dir, cap_std::fs::File)> {
            let dir = root.open_dir(run_id)?;
            write_atomic(&dir, doc_file, &doc.bytes)?;
            if let Some(e) = envelope {
                write_atomic(&dir, "envelope.json", e.as_bytes())?;
            }
            let events = dir.open_with("events.ndjson", OpenOptions::new().append(true).create_new(true))?;
            events.sync_all()?;
            Ok((dir, events))
        })();
        let (dir, events) = begun.inspect_err(|_| {
            let _ = root.remove_dir_all(run_id);
        })?;
        let created = now_rfc3339();
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
                "provenance": doc.provenance.to_json(),
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
        let mut b = Bundle {
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
            receipt_key: None,
        };
        if let Err(e) = b.write_manifest() {
            let _ = b.root.remove_dir_all(run_id);
            return Err(e);
        }
        let pointed = b.write_latest(&created).and_then(|()| {
            b.append_history(json!({"schema": HISTORY_SCHEMA, "event": "created", "run_id": run_id, "at": created, "path": run_id,
                "reference": public_reference(&doc.reference), "trust": doc.trust.as_str(), "adapter": adapter}))
        });
        if let Err(e) = pointed {
            // The bundle exists: it says it ended without a report where the disk still takes it.
            let _ = b.end_without_report("bundle-unwritable");
            return Err(e);
        }
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
            receipt_key: None,
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
        append_whole(&mut self.events, "events.ndjson", line.as_bytes())?;
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

    /// Records in `run.json` that this run's approvals must be signed by a key of the `allowed_signers`
    /// whose sha256 is given (`approvals: {signed: true, allowed_signers_sha256}`).
    pub fn require_signed_approvals(&mut self, allowed_signers_sha256: &str) -> io::Result<()> {
        self.manifest.insert("approvals".into(), json!({"signed": true, "allowed_signers_sha256": allowed_signers_sha256}));
        self.write_manifest()
    }

    /// [`SIGNATURES`] as written so far (empty when no approval was signed).
    pub fn signatures_bytes(&self) -> io::Result<Vec<u8>> {
        match self.dir.read(SIGNATURES) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            r => r,
        }
    }

    /// Appends one line to [`SIGNATURES`] and syncs it (evidence: the receipt pins the file).
    pub fn append_signature(&mut self, line: &Value) -> io::Result<()> {
        let mut text = serde_json::to_string(line)?;
        text.push('\n');
        let mut f = self.dir.open_with(SIGNATURES, OpenOptions::new().append(true).create(true))?;
        append_whole(&mut f, SIGNATURES, text.as_bytes())
    }

    /// Has the receipt signed with `key` at the end. `run.json` names the key (`receipt_signature`: its id
    /// and public key), so a bundle whose signature was removed is refused even by a `verify` given no key.
    pub fn sign_receipts_with(&mut self, key: ed25519_dalek::SigningKey) -> io::Result<()> {
        let public = key.verifying_key();
        if self.manifest.get("receipt_signature").is_some_and(|r| r["key_id"] == crate::dsse::key_id(&public).as_str()) {
            // Reopened by another process of the same run (the hook): run.json already names this key.
            self.receipt_key = Some(key);
            return Ok(());
        }
        self.manifest.insert(
            "receipt_signature".into(),
            json!({"file": RECEIPT_SIGNATURE, "key_id": crate::dsse::key_id(&public), "public_key": crate::dsse::public_pem(&public)}),
        );
        self.receipt_key = Some(key);
        self.write_manifest()
    }

    /// Marks the run as shadow (`--mode shadow`): run.json's `mode` says so from the start, and
    /// `shadow.ndjson` (pinned by the receipt) lists every call the module did not allow that was
    /// forwarded anyway. Nothing in a shadow bundle is enforcement evidence; `verify` says so first.
    pub fn set_shadow(&mut self) -> io::Result<()> {
        self.manifest.insert("mode".into(), json!("shadow"));
        if !self.dir.is_file(SHADOW) {
            write_atomic(&self.dir, SHADOW, b"")?;
        }
        self.write_manifest()
    }

    /// Whether run.json marks the run as shadow.
    pub fn is_shadow(&self) -> bool {
        self.manifest.get("mode").is_some_and(|m| m == "shadow")
    }

    /// Appends one line to [`SHADOW`] and syncs it, before the call it names is forwarded.
    pub fn append_shadow(&mut self, line: &Value) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("the bundle is finished"));
        }
        let mut text = serde_json::to_string(line)?;
        text.push('\n');
        let mut f = self.dir.open_with(SHADOW, OpenOptions::new().append(true))?;
        append_whole(&mut f, SHADOW, text.as_bytes())
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
        if let Some(key) = &self.receipt_key {
            let subjects = [
                crate::dsse::Subject { name: "receipt.json".into(), sha256: sha256_hex(receipt.as_bytes()) },
                crate::dsse::Subject { name: "report.json".into(), sha256: sha256_hex(report.as_bytes()) },
            ];
            let predicate = json!({"run_id": self.run_id, "outcome": report_v["outcome"], "host": {"name": HOST_NAME, "version": HOST_VERSION},
                "module_sha256": self.manifest["module_sha256"], "signed_at": ended});
            let envelope = crate::dsse::sign_statement(key, &subjects, crate::dsse::RECEIPT_PREDICATE, predicate);
            write_atomic(&self.dir, RECEIPT_SIGNATURE, &envelope)?;
        }
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

    /// Whether `receipt.json` is written (by [`finish`](Bundle::finish), which may still have failed after it).
    pub fn has_receipt(&self) -> bool {
        self.dir.is_file("receipt.json")
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
        if self.dir.is_file(SIGNATURES) {
            files.push(SIGNATURES.into());
        }
        if self.dir.is_file(SHADOW) {
            files.push(SHADOW.into());
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
        append_whole(&mut f, "history.ndjson", line.as_bytes())
    }
}

/// Appends one whole record (`bytes`, ending in a newline) to an append-only file in one `write`, and
/// fsyncs it. A disk that fills up or fails mid-record has the partial record cut off again, so the file
/// ends at its last whole record and nothing half written is ever read as evidence.
fn append_whole(f: &mut cap_std::fs::File, name: &str, bytes: &[u8]) -> io::Result<()> {
    let whole = f.metadata()?.len();
    crate::faults::write_point(name, "before")?;
    let written = f.write_all(bytes).and_then(|()| {
        crate::faults::write_point(name, "written-before-sync")?;
        f.sync_data()
    });
    if let Err(e) = written {
        let _ = f.set_len(whole).and_then(|()| f.sync_data());
        return Err(e);
    }
    crate::faults::point(name, "synced");
    Ok(())
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
