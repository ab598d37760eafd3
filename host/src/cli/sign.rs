//! `runbook-host sign`: DSSE signatures (crate::signatures::dsse) for
//! runbook documents and the policy component.
//!
//! `sign FILE --key KEY` writes `FILE.dsse.json` beside it: an in-toto
//! Statement naming the file's sha256, signed in a DSSE envelope. A run or a registry that requires a
//! signature (`--require-signature KEY.pub`) refuses a document without a valid one before any tool runs.

use crate::Format;
use anyhow::{Context, Result};
use runbook_host::files::sha256_hex;
use runbook_host::registry::{self, https};
use runbook_host::signatures::dsse;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct SignArgs {
    /// The runbook document (or the policy component, `.wasm`) to sign
    pub file: PathBuf,
    /// The private key (`keygen`, or `openssl genpkey -algorithm ed25519`)
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// The signature stops being accepted after this long: `30d`, `12h`, `90m`, `3600s` (default: never)
    #[arg(long)]
    pub expires: Option<String>,
    /// Where to write the envelope (default: `<FILE>.dsse.json`)
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

pub fn sign(a: SignArgs) -> Result<ExitCode> {
    let bytes = std::fs::read(&a.file).with_context(|| format!("cannot read `{}`", a.file.display()))?;
    let pem = std::fs::read_to_string(&a.key).with_context(|| format!("cannot read the key `{}`", a.key.display()))?;
    let key = dsse::read_private(&pem).map_err(|e| anyhow::anyhow!("`{}`: {e}", a.key.display()))?;
    let now = https::now_unix();
    let mut predicate = json!({"signed_at": dsse::rfc3339(now)});
    if let Some(d) = &a.expires {
        let secs = dsse::parse_duration(d).map_err(|e| anyhow::anyhow!("--expires: {e}"))?;
        predicate["expires"] = json!(dsse::rfc3339(now + secs));
    }
    let is_module = a.file.extension().is_some_and(|e| e == "wasm");
    let name = a.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "document".into());
    let predicate_type = if is_module { dsse::MODULE_PREDICATE } else { dsse::DOCUMENT_PREDICATE };
    let sha = sha256_hex(&bytes);
    let envelope = dsse::sign_statement(&key, &[dsse::Subject { name, sha256: sha.clone() }], predicate_type, predicate.clone());
    let out = a.out.unwrap_or_else(|| PathBuf::from(format!("{}{}", a.file.display(), registry::SIGNATURE_SUFFIX)));
    std::fs::write(&out, &envelope).with_context(|| format!("cannot write `{}`", out.display()))?;
    let id = dsse::key_id(&key.verifying_key());
    if a.format == Format::Json {
        outln!("{}", json!({"ok": true, "signature": out, "sha256": sha, "key_id": id, "predicate_type": predicate_type, "expires": predicate["expires"]}));
    } else {
        let until = predicate["expires"].as_str().map(|e| format!(", valid until {e}")).unwrap_or_default();
        outln!("signed {} (sha256 {sha}) with {id}{until}\nwrote {}", a.file.display(), out.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads public keys for `--require-signature` / `verify --key` (a private key file gives its public key).
pub fn read_keys(paths: &[PathBuf]) -> Result<Vec<ed25519_dalek::VerifyingKey>> {
    paths
        .iter()
        .map(|p| {
            let pem = std::fs::read_to_string(p).with_context(|| format!("cannot read the key `{}`", p.display()))?;
            dsse::read_public(&pem).map_err(|e| anyhow::anyhow!("`{}`: {e}", p.display()))
        })
        .collect()
}
