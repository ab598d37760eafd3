//! `runbook-host registry add FILE [--registry DIR]` and `registry list [--registry DIR] [--format json]`:
//! a directory registry (docs/spec/registry.md#index-layout). See `runbook_host::registry`.

use crate::Format;
use anyhow::{Context, Result};
use runbook_host::registry;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(clap::Subcommand)]
pub enum Sub {
    /// Lint a document, store its exact bytes at `<id>/<version>/` and pin its sha256 in index.json
    Add {
        /// The runbook (JSON or YAML)
        file: PathBuf,
        /// The directory registry (created when missing)
        #[arg(long, default_value = ".runbook/registry")]
        registry: PathBuf,
        /// Require the runbook's approvals to be signed: a host then runs it only with
        /// `--allowed-signers FILE`
        #[arg(long)]
        signed_approvals: bool,
        /// Take the document only when `<FILE>.dsse.json` beside it is a valid signature by this public
        /// key (repeat to accept several); the signature is stored with it
        #[arg(long, value_name = "KEY")]
        require_signature: Vec<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Push a document (and `<FILE>.dsse.json` beside it, when there is one) to an OCI registry: to
    /// `oci://HOST/REPO:TAG`, or with `--registry oci://HOST/PREFIX` to `PREFIX/<id>:<version>`, pinned in
    /// the registry's index (`PREFIX:index`) so that `id@version` resolves. Credentials:
    /// RUNBOOK_REGISTRY_USERNAME and RUNBOOK_REGISTRY_PASSWORD
    Push {
        /// The runbook (JSON or YAML)
        file: PathBuf,
        /// `oci://HOST/REPO:TAG` (`oci+http://` for a registry on loopback without TLS)
        target: Option<String>,
        /// An OCI registry prefix, `oci://HOST/PREFIX`, whose index pins the document
        #[arg(long)]
        registry: Option<String>,
        /// PEM certificates to trust, beside the system's roots
        #[arg(long, value_name = "FILE")]
        registry_ca: Vec<PathBuf>,
        /// Push only a document whose signature is valid by this public key (repeat to accept several)
        #[arg(long, value_name = "KEY")]
        require_signature: Vec<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Every pinned id@version of a directory registry, with its sha256
    List {
        #[arg(long, default_value = ".runbook/registry")]
        registry: PathBuf,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
}

/// The resolution settings the run and hook commands share: the registry, its extra CAs and the keys a
/// document must be signed by.
pub fn settings(registry: &str, ca: &[PathBuf], require_signature: &[PathBuf]) -> Result<registry::Settings> {
    let mut s = registry::Settings::new(registry);
    for p in ca {
        s.ca_pem.push(std::fs::read(p).with_context(|| format!("cannot read the CA file `{}`", p.display()))?);
    }
    s.require_signature = super::sign::read_keys(require_signature)?;
    Ok(s)
}

/// What the guard protects beside the runs and the registry (docs/spec/run.md#guarded-calls): the keys and CAs the host
/// trusts or signs with, and the registry cache (a forged cached index would stand in for a registry that
/// is down).
pub fn guard_paths(ca: &[PathBuf], require_signature: &[PathBuf], signing_key: Option<&std::path::Path>, settings: &registry::Settings) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ca.iter().chain(require_signature).cloned().collect();
    v.extend(signing_key.map(std::path::Path::to_path_buf));
    v.extend(settings.cache.as_ref().map(|c| c.root.clone()));
    v
}

/// The receipt-signing key of `--signing-key`, when given.
pub fn signing_key(path: Option<&std::path::Path>) -> Result<Option<ed25519_dalek::SigningKey>> {
    let Some(p) = path else { return Ok(None) };
    let pem = std::fs::read_to_string(p).with_context(|| format!("cannot read the signing key `{}`", p.display()))?;
    runbook_host::signatures::dsse::read_private(&pem).map(Some).map_err(|e| anyhow::anyhow!("`{}`: {e}", p.display()))
}

fn fail(e: &registry::RegistryError, format: Format) -> Result<ExitCode> {
    if format == Format::Json {
        outln!("{}", serde_json::json!({"ok": false, "code": e.kind.code(), "message": e.message}));
    } else {
        eprintln!("runbook-host: registry: {}: {}", e.kind, e.message);
    }
    // A refused document is "found wanting" (1); anything else is an IO problem (2).
    Ok(ExitCode::from(if e.kind.is_refusal() { 1 } else { 2 }))
}

pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Sub::Push { file, target, registry: prefix, registry_ca, require_signature, format } => {
            let keys = super::sign::read_keys(&require_signature)?;
            let mut settings = settings(prefix.as_deref().unwrap_or(""), &registry_ca, &[])?;
            settings.cache = None;
            let bytes = std::fs::read(&file).with_context(|| format!("cannot read `{}`", file.display()))?;
            let sidecar = PathBuf::from(format!("{}{}", file.display(), registry::SIGNATURE_SUFFIX));
            let signature = match std::fs::read(&sidecar) {
                Ok(b) => Some(b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => anyhow::bail!("cannot read `{}`: {e}", sidecar.display()),
            };
            if !keys.is_empty() {
                let Some(env) = &signature else {
                    return fail(
                        &registry::RegistryError {
                            kind: registry::RegistryErrorKind::SignatureMissing,
                            message: format!("`{}` has no signature beside it", file.display()),
                        },
                        format,
                    );
                };
                let sha = runbook_host::files::sha256_hex(&bytes);
                if let Err(e) = runbook_host::signatures::dsse::verify_envelope(
                    env,
                    &keys,
                    &sha,
                    runbook_host::signatures::dsse::DOCUMENT_PREDICATE,
                    runbook_host::registry::https::now_unix(),
                ) {
                    return fail(&registry::RegistryError { kind: e.kind.into(), message: format!("`{}`: {}", sidecar.display(), e.message) }, format);
                }
            }
            let pushed = match (&target, &prefix) {
                (Some(t), None) => runbook_host::registry::oci::push_document(&bytes, t, signature.as_deref(), &settings),
                (None, Some(p)) => runbook_host::registry::oci::publish(&bytes, p, signature.as_deref(), &settings),
                _ => anyhow::bail!("give either a target `oci://HOST/REPO:TAG` or `--registry oci://HOST/PREFIX`, not both or neither"),
            };
            match pushed {
                Ok(p) => {
                    if format == Format::Json {
                        outln!(
                            "{}",
                            serde_json::json!({"ok": true, "reference": p.reference, "manifest_digest": p.manifest_digest, "sha256": p.sha256,
                            "signature_digest": p.signature_digest, "id": p.id, "version": p.version})
                        );
                    } else {
                        outln!("pushed {} sha256:{}", p.reference, p.sha256);
                        if let Some(d) = &p.signature_digest {
                            outln!("with its signature ({d})");
                        }
                        if prefix.is_some() {
                            outln!("pinned {}@{} in the registry's index", p.id.as_deref().unwrap_or("?"), p.version.as_deref().unwrap_or("?"));
                        }
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => fail(&e, format),
            }
        }
        Sub::Add { file, registry: dir, signed_approvals, require_signature, format } => match super::sign::read_keys(&require_signature)
            .map_err(|e| registry::RegistryError { kind: registry::RegistryErrorKind::Io, message: format!("{e:#}") })
            .and_then(|keys| registry::add_checked(&dir, &file, &keys))
            .and_then(|(id, version, sha)| {
                if signed_approvals {
                    registry::require_signed_approvals(&dir, &id, &version)?;
                }
                Ok((id, version, sha))
            }) {
            Ok((id, version, sha)) => {
                if format == Format::Json {
                    outln!("{}", serde_json::json!({"ok": true, "id": id, "version": version, "sha256": sha, "path": format!("{id}/{version}")}));
                } else {
                    outln!("pinned {id}@{version} sha256:{sha}{}", if signed_approvals { " (approvals must be signed)" } else { "" });
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => fail(&e, format),
        },
        Sub::List { registry: dir, format } => match registry::list(&dir) {
            Ok(entries) => {
                if format == Format::Json {
                    let v: Vec<_> = entries.iter().map(|(i, v, s)| serde_json::json!({"id": i, "version": v, "sha256": s})).collect();
                    outln!("{}", serde_json::Value::Array(v));
                } else if entries.is_empty() {
                    outln!("(the registry is empty)");
                } else {
                    for (i, v, s) in &entries {
                        outln!("{:<40} sha256:{s}", format!("{i}@{v}"));
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => fail(&e, format),
        },
    }
}
