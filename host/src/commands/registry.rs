//! `runbook-host registry add FILE [--registry DIR]` and `registry list [--registry DIR] [--format json]`:
//! a directory registry (DESIGN 7.13). See `runbook_host::registry`.

use crate::Format;
use anyhow::Result;
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

fn fail(e: &registry::RegistryError, format: Format) -> Result<ExitCode> {
    if format == Format::Json {
        outln!("{}", serde_json::json!({"ok": false, "code": e.code, "message": e.message}));
    } else {
        eprintln!("runbook-host: registry: {}: {}", e.code, e.message);
    }
    // A refused document is "found wanting" (1); anything else is an IO problem (2).
    Ok(ExitCode::from(if matches!(e.code, "invalid-document" | "conflict" | "invalid-index") { 1 } else { 2 }))
}

pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Sub::Add { file, registry: dir, signed_approvals, format } => match registry::add(&dir, &file).and_then(|(id, version, sha)| {
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
