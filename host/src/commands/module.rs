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
    if !args.sha256 && !args.wit && args.out.is_none() {
        let version = super::policy()?.version()?;
        outln!("runbook:policy component {version}");
        outln!("sha256 {}", runbook_host::module_sha256());
        outln!("bytes  {}", runbook_host::COMPONENT.len());
        outln!("imports none (see `runbook-host module --wit`)");
    }
    Ok(ExitCode::SUCCESS)
}
