//! `runbook-host keygen --out KEY`: an ed25519 key for `sign` and for signed receipts. It writes the private
//! key (PKCS#8 PEM, mode 0600, never overwritten) and `KEY.pub` (SPKI PEM): the formats `openssl genpkey
//! -algorithm ed25519` and `openssl pkey -pubout` write, so a key made by either tool works with the other.

use crate::Format;
use anyhow::{bail, Context, Result};
use runbook_host::signatures::dsse;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct KeygenArgs {
    /// Where to write the private key (its public key goes to `<FILE>.pub`); an existing file is never overwritten
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

pub fn keygen(a: KeygenArgs) -> Result<ExitCode> {
    let public = PathBuf::from(format!("{}.pub", a.out.display()));
    for p in [&a.out, &public] {
        if p.exists() {
            bail!("`{}` already exists: a key is never overwritten (remove it first if you mean to)", p.display());
        }
    }
    let key = dsse::generate().map_err(|e| anyhow::anyhow!("{e}"))?;
    write_new(&a.out, dsse::private_pem(&key).as_bytes(), 0o600)?;
    write_new(&public, dsse::public_pem(&key.verifying_key()).as_bytes(), 0o644)?;
    let id = dsse::key_id(&key.verifying_key());
    if a.format == Format::Json {
        outln!("{}", json!({"ok": true, "private": a.out, "public": public, "key_id": id}));
    } else {
        outln!("wrote {} (private, keep it off the agent's reach) and {} (public)\nkey id {id}", a.out.display(), public.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates `path` (never replacing one) with `mode` on Unix, its bytes synced.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, mode);
    let mut f = o.open(path).with_context(|| format!("cannot create `{}`", path.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}
