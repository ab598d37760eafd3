//! The redacted derivative (DESIGN 7.15, after seed 002's "Redacted Derivative Workspace").

#[allow(unused_imports)]
use super::*;

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
    // Signed approvals name the call by its hash only: shared as they are, and checked by verify.
    if src.is_file(SIGNATURES) {
        copy.push(SIGNATURES.into());
    }
    // A shadow run's list of calls that ran against a decision names each by its hash only.
    if src.is_file(super::SHADOW) {
        copy.push(super::SHADOW.into());
    }
    // The receipt is copied unchanged, so the host's signature over it still holds.
    if src.is_file(super::RECEIPT_SIGNATURE) {
        copy.push(super::RECEIPT_SIGNATURE.into());
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
        let form = chain_event_form(policy, &r.event_line).map_err(|e| io::Error::other(e.to_string()))?;
        redacted.push_str(&policy.record_line(&r.h, &form, &r.decision_line).map_err(|e| io::Error::other(e.to_string()))?);
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
