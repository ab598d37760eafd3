//! `runbook-host export RUN [--to OCI_REF]`: the redacted derivative of a bundle that verifies
//! (docs/spec/bundle.md#share-safety-and-redaction), verified again before it is written out or pushed.

use super::verify::resolve;
use crate::Format;
use anyhow::Result;
use cap_std::fs::Dir;
use runbook_host::bundle;
use runbook_host::bundle::verify::verify_dir;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// `runbook-host export RUN [--redact] [--out DIR]` (docs/spec/bundle.md#share-safety-and-redaction): see [`export`].
#[derive(clap::Args)]
pub struct ExportArgs {
    /// The run: its bundle directory, its id, `latest`, or .runbook/runs/latest
    pub run_dir: PathBuf,
    /// Accepted and implied: export only ever writes a redacted derivative (arguments and results
    /// replaced by their digests), never a copy of the raw bundle
    #[arg(long)]
    pub redact: bool,
    /// Where the derivative goes: `<out>/<run-id>/`
    #[arg(long, default_value = ".runbook/redacted")]
    pub out: PathBuf,
    /// Also push the verified derivative (its receipt signature included) to an OCI registry as one
    /// artifact, a file a layer: `oci://HOST/REPO:TAG`; `verify oci://HOST/REPO@sha256:...` pulls and
    /// verifies it. Credentials: RUNBOOK_REGISTRY_USERNAME/_PASSWORD
    #[arg(long, value_name = "OCI_REF")]
    pub to: Option<String>,
    /// With --to: PEM certificates to trust, beside the system's roots
    #[arg(long, value_name = "FILE")]
    pub registry_ca: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// Verifies the source bundle (refusing one that does not verify), writes its redacted derivative
/// (`runbook_host::bundle::export_redacted`) and verifies that: exit 0 when it verifies.
pub fn export(args: ExportArgs) -> Result<ExitCode> {
    // `--redact` changes nothing: a redacted derivative is the only thing export writes.
    let _ = args.redact;
    let run_dir = resolve(&args.run_dir)?;
    let src = Dir::open_ambient_dir(&run_dir, cap_std::ambient_authority())
        .map_err(|e| anyhow::anyhow!("cannot open the run directory `{}`: {e}", args.run_dir.display()))?;
    if let Some(f) = verify_dir(&src).failure {
        if args.format == Format::Json {
            outln!("{}", json!({"ok": false, "failure": {"place": f.place, "message": f.message}}));
        } else {
            outln!("NOT EXPORTED: the bundle does not verify: {}: {}", f.place, f.message);
        }
        return Ok(ExitCode::from(1));
    }
    let out = bundle::export_redacted(&run_dir, &args.out)?;
    let o = verify_dir(&Dir::open_ambient_dir(&out, cap_std::ambient_authority())?);
    let status = match (&o.failure, o.reasons.is_empty()) {
        (Some(_), _) => "blocked",
        (None, true) => "share_ready",
        (None, false) => "local_only",
    };
    // Only a derivative that verifies leaves the machine.
    let pushed = match (&args.to, &o.failure) {
        (Some(target), None) => {
            let settings = super::registry::settings("", &args.registry_ca, &[])?;
            Some(runbook_host::registry::oci::push_evidence(&out, target, &settings).map_err(|e| anyhow::anyhow!("export --to: {}: {}", e.kind, e.message))?)
        }
        _ => None,
    };
    if args.format == Format::Json {
        outln!(
            "{}",
            json!({"ok": o.failure.is_none(), "run_id": o.run_id, "share_safety": {"status": status}, "pushed": pushed.as_ref().map(|p| p.reference.clone())})
        );
    } else {
        outln!("wrote the redacted derivative of run {} under {}; share safety: {status}", o.run_id.as_deref().unwrap_or("?"), args.out.display());
        if let Some(p) = &pushed {
            outln!("pushed it to {}", p.reference);
        }
    }
    Ok(if o.failure.is_none() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
