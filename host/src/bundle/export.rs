//! The redacted derivative (docs/spec/bundle.md#share-safety-and-redaction, after seed 002's "Redacted Derivative Workspace").

#[allow(unused_imports)]
use super::*;

/// Writes a redacted derivative of the finished bundle `run_dir` at `<out_root>/<run-id>/` (refusing an
/// existing one): `events.ndjson` with each event in its chain form (same `h`, same decisions), every
/// other artifact copied byte for byte, the approval channel omitted, and `derivation.json`
/// (runbook-redacted-derivation/v1: `source_run_id`, `created_at`, `transformation`, `files [{path,
/// action: copied|redacted|omitted, source_sha256, output_sha256}]`). The source is left unchanged.
/// Check the source with `verify` first: this function copies, it does not judge. Every byte written is
/// the module's (WIT `bundle-redact`); the host lists the source's entries, passes the time and carries
/// the effects out.
pub fn export_redacted(run_dir: &Path, out_root: &Path) -> io::Result<PathBuf> {
    let entries = crate::bundle::verify::entries_at(run_dir).map_err(|f| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {}", f.place, f.message)))?;
    let policy = shared_policy().map_err(io_other)?;
    let effects =
        policy.bundle_redact(&entries, crate::clock::Clock::system().now_ms()).map_err(io_other)?.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let run_id =
        effects.first().filter(|e| e.op == EffectOp::CreateDir).map(|e| e.path.clone()).ok_or_else(|| io::Error::other("the module wrote no run directory"))?;
    let root = DirStore::create(out_root)?;
    apply(&root, &effects, None).map_err(|(i, e)| io::Error::new(e.kind(), format!("{}: {e}", effects[i].path)))?;
    Ok(out_root.join(&run_id))
}
