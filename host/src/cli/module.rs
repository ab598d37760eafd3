use anyhow::{Context, Result};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print only the component's sha256
    #[arg(long)]
    pub sha256: bool,
    /// Print the WIT world decoded from the component's own bytes
    #[arg(long)]
    pub wit: bool,
    /// Write the component's bytes to this file
    #[arg(long, value_name = "FILE")]
    pub out: Option<String>,
    /// Push the component's bytes to an OCI registry, `oci://HOST/REPO:TAG`, so embedders pull exactly the
    /// bytes that decide (by the digest printed). Credentials: RUNBOOK_REGISTRY_USERNAME/_PASSWORD
    #[arg(long, value_name = "OCI_REF")]
    pub push: Option<String>,
    /// With --push: also push a DSSE signature of the component made with this private key
    #[arg(long, value_name = "KEY", requires = "push")]
    pub sign: Option<std::path::PathBuf>,
    /// With --push: PEM certificates to trust, beside the system's roots
    #[arg(long, value_name = "FILE", requires = "push")]
    pub registry_ca: Vec<std::path::PathBuf>,
}

/// The WIT of the embedded bytes, decoded (not the source file): what any host that loads them sees.
pub fn decoded_wit() -> Result<String> {
    let decoded = wit_component::decode(runbook_host::COMPONENT).context("decoding the component")?;
    let mut printer = wit_component::WitPrinter::default();
    let resolve = decoded.resolve();
    let others: Vec<_> = resolve.packages.iter().map(|(id, _)| id).filter(|id| *id != decoded.package()).collect();
    printer.print(resolve, decoded.package(), &others).context("printing its WIT")?;
    Ok(printer.output.to_string())
}

pub fn run(args: Args) -> Result<ExitCode> {
    if let Some(path) = &args.out {
        std::fs::write(path, runbook_host::COMPONENT).with_context(|| format!("cannot write `{path}`"))?;
        eprintln!("wrote {} bytes to {path} (sha256 {})", runbook_host::COMPONENT.len(), runbook_host::module_sha256());
    }
    if args.sha256 {
        outln!("{}", runbook_host::module_sha256());
    }
    if args.wit {
        {
            use std::io::Write as _;
            write!(std::io::stdout().lock(), "{}", decoded_wit()?)?;
        }
    }
    if let Some(target) = &args.push {
        let settings = super::registry::settings("", &args.registry_ca, &[])?;
        let signature = match &args.sign {
            Some(k) => {
                let key = super::registry::signing_key(Some(k))?.expect("a key path was given");
                let subject = runbook_host::signatures::dsse::Subject { name: "policy.wasm".into(), sha256: runbook_host::module_sha256().to_string() };
                let now = runbook_host::registry::https::now_unix();
                Some(runbook_host::signatures::dsse::sign_statement(
                    &key,
                    &[subject],
                    runbook_host::signatures::dsse::MODULE_PREDICATE,
                    serde_json::json!({"signed_at": runbook_host::signatures::dsse::rfc3339(now)}),
                ))
            }
            None => None,
        };
        let p = runbook_host::registry::oci::push_module(runbook_host::COMPONENT, target, signature.as_deref(), &settings)
            .map_err(|e| anyhow::anyhow!("module --push: {}: {}", e.kind, e.message))?;
        outln!("pushed {} (sha256 {})", p.reference, p.sha256);
        if let Some(d) = &p.signature_digest {
            outln!("with its signature ({d})");
        }
    }
    if !args.sha256 && !args.wit && args.out.is_none() && args.push.is_none() {
        let version = super::policy()?.version()?;
        outln!("runbook:policy component {version}");
        outln!("sha256 {}", runbook_host::module_sha256());
        outln!("bytes  {}", runbook_host::COMPONENT.len());
        outln!("imports none (see `runbook-host module --wit`)");
    }
    Ok(ExitCode::SUCCESS)
}
