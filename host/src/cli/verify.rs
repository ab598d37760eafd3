//! `runbook-host verify RUN_DIR [--format json]`: what [`runbook_host::bundle::verify`] finds about a
//! bundle, as text or JSON (`runbook-verify-result/v1`). Exit 0 when verified, 1 when not, 2 when the
//! directory cannot be opened.

use crate::Format;
use anyhow::Result;
use cap_std::fs::Dir;
use runbook_host::bundle;
use runbook_host::bundle::verify::{verify_bundle, VERIFY_SCHEMA};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The run: its bundle directory (.runbook/runs/<run-id>), its id, `latest`, .runbook/runs/latest, or an
    /// evidence artifact in an OCI registry (`oci://HOST/REPO@sha256:...`, pushed by `export --to`)
    pub run_dir: PathBuf,
    /// For an `oci://` run: PEM certificates to trust, beside the system's roots
    #[arg(long, value_name = "FILE")]
    pub registry_ca: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// The `allowed_signers` file the run's approvals must be signed by (ssh-keygen's format): each
    /// signature is checked against it, and a run that required signatures must name this very file
    #[arg(long, value_name = "FILE")]
    pub allowed_signers: Option<PathBuf>,
    /// Accept software keys (`ssh-ed25519`, `ecdsa-sha2-nistp256`) in `--allowed-signers`: they sign
    /// without a touch, so whoever reads the key or reaches an ssh-agent holding it can sign (said on
    /// stderr). Without it, only FIDO `sk-` keys are accepted
    #[arg(long)]
    pub allow_software_keys: bool,
    /// The public key (PEM) the run's receipt must be signed by (`receipt.dsse.json`, written by a host
    /// given `--signing-key`); repeat to accept several. Without it, a receipt signature that run.json
    /// announces is checked against the key run.json names, which proves integrity, not who signed.
    /// `--host-key` names the same check for a separated-mode service's key (`<state>/host.pub`)
    #[arg(long, value_name = "KEY", visible_alias = "host-key")]
    pub key: Vec<PathBuf>,
}

/// The run a command was given (see [`bundle::resolve_run`]): a run id (or `latest`) names a run under
/// .runbook/runs when no such directory exists here. Naming the runs folder itself is a usage error.
pub(crate) fn resolve(arg: &std::path::Path) -> Result<std::path::PathBuf> {
    bundle::resolve_run(&arg.to_string_lossy(), std::path::Path::new(".runbook/runs")).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidInput {
            anyhow::anyhow!("{e}")
        } else {
            anyhow::anyhow!("cannot find the run `{}`: {e}", arg.display())
        }
    })
}

pub fn run(args: Args) -> Result<ExitCode> {
    let given = args.run_dir.to_string_lossy().into_owned();
    // An evidence artifact is pulled (every layer checked against its digest) into a directory of its own.
    let _pulled;
    let run_dir = if given.starts_with("oci://") || given.starts_with("oci+http://") {
        let settings = super::registry::settings("", &args.registry_ca, &[])?;
        let d = tempfile::tempdir()?;
        let digest = runbook_host::registry::oci::pull_evidence(&given, d.path(), &settings).map_err(|e| anyhow::anyhow!("{}: {}", e.kind, e.message))?;
        if args.format == Format::Text {
            outln!("pulled {given} (manifest {digest})");
        }
        let p = d.path().to_path_buf();
        _pulled = d;
        p
    } else {
        resolve(&args.run_dir)?
    };
    let dir = match Dir::open_ambient_dir(&run_dir, cap_std::ambient_authority()) {
        Ok(d) => d,
        Err(e) => anyhow::bail!("cannot open the run directory `{}`: {e}", args.run_dir.display()),
    };
    let signers = match &args.allowed_signers {
        Some(p) => Some(runbook_host::signatures::Signers::load(p, args.allow_software_keys).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let keys = super::sign::read_keys(&args.key)?;
    let o = verify_bundle(&dir, signers, &keys);
    let receipt_signed = o.receipt_signed.clone();
    let status = if o.failure.is_some() {
        "blocked"
    } else if o.reasons.is_empty() {
        "share_ready"
    } else {
        "local_only"
    };
    let mut reasons: Vec<Value> = o.reasons.iter().map(|(c, m)| json!({"code": c, "message": m})).collect();
    if let Some(f) = &o.failure {
        reasons.insert(0, json!({"code": "VERIFY_FAILED", "message": format!("{}: {}", f.place, f.message)}));
    }
    if args.format == Format::Json {
        let mut v = json!({
            "schema": VERIFY_SCHEMA,
            "ok": o.failure.is_none(),
            "replayed": o.checks.iter().any(|(c, _)| *c == "replay-decisions"),
            "run_id": o.run_id,
            "outcome": o.outcome,
            "events": o.events,
            "checks": o.checks.iter().map(|(c, ok)| json!({"id": c, "ok": ok})).collect::<Vec<_>>(),
            "warnings": o.warnings,
            "failure": o.failure.as_ref().map(|f| json!({"place": f.place, "message": f.message})),
            "share_safety": {"status": status, "reasons": reasons},
        });
        if o.failure.is_none() && !o.signers.is_empty() {
            v["approvals_signed_by"] = o
                .signers
                .iter()
                .map(|s| json!({"place": s.place, "principal": s.principal, "kind": s.kind, "fingerprint": s.fingerprint, "allowed_signers_given": o.signed.1}))
                .collect();
        }
        if let Some((id, given)) = &receipt_signed {
            v["receipt_signed_by"] = json!({"key_id": id, "key_given": given});
        }
        if let Some(n) = o.shadow {
            v["shadow"] = json!({"enforced": false, "forwarded_against_a_decision": n});
        }
        outln!("{v}");
    } else {
        if let (None, Some(n)) = (&o.failure, o.shadow) {
            outln!("SHADOW RUN, NOT ENFORCED: nothing was blocked; {n} call(s) the module did not allow ran anyway (shadow.ndjson)");
        }
        match &o.failure {
            None if o.redacted => outln!(
                "verified: run {} ({} events, outcome {}); a redacted derivative: its chain and receipt verify, it cannot be replayed",
                o.run_id.as_deref().unwrap_or("?"),
                o.events,
                o.outcome.as_deref().unwrap_or("none"),
            ),
            None => outln!(
                "verified: run {} ({} events, outcome {}); replayed through module {}",
                o.run_id.as_deref().unwrap_or("?"),
                o.events,
                o.outcome.as_deref().unwrap_or("none"),
                &runbook_host::module_sha256()[..16]
            ),
            Some(f) => outln!("NOT VERIFIED: {}: {}", f.place, f.message),
        }
        if o.failure.is_none() && o.signed.0 > 0 {
            if o.signed.1 {
                outln!("{} signed approval(s), each by a key of the allowed signers given", o.signed.0);
            } else {
                outln!("{} signed approval(s), each verified by the key it carries; pass --allowed-signers FILE to check who may sign", o.signed.0);
            }
            for s in &o.signers {
                let kind = if s.kind == "passkey" { "passkey" } else { "SSH key" };
                outln!("  {}: signed by {} with {kind} {}", s.place, s.principal, s.fingerprint);
            }
        }
        match (&o.failure, &receipt_signed) {
            (None, Some((id, true))) => outln!("receipt signed by {id}, a key given with --key"),
            (None, Some((id, false))) => outln!("receipt signed by {id} (the key run.json names); pass --key KEY.pub to check who signed"),
            _ => {}
        }
        for w in &o.warnings {
            outln!("warning: {w}");
        }
        outln!("share safety: {status}");
        for (c, m) in &o.reasons {
            outln!("  {c}: {m}");
        }
    }
    Ok(if o.failure.is_none() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
