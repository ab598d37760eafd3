use crate::{diag, Format};
use anyhow::Result;
use runbook_host::{Severity, Structure};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The runbook (JSON or YAML); `-` reads standard input
    pub document: String,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

pub fn structure(s: Option<Structure>) -> Option<&'static str> {
    s.map(|s| match s {
        Structure::P0 => "P0",
        Structure::P1 => "P1",
        Structure::P2 => "P2",
    })
}

pub fn run(args: Args) -> Result<ExitCode> {
    let bytes = super::read_input(&args.document)?;
    let report = super::policy()?.lint(&bytes)?;
    let errors = report.findings.iter().filter(|f| f.severity == Severity::Error).count();
    let warnings = report.findings.len() - errors;
    match args.format {
        Format::Json => {
            let v = serde_json::json!({
                "document": args.document,
                "sha256": report.sha256,
                "structure": structure(report.structure),
                "ok": report.ok,
                "findings": report.findings.iter().map(diag::finding_json).collect::<Vec<_>>(),
            });
            outln!("{v}");
        }
        Format::Text => {
            let source = String::from_utf8_lossy(&bytes);
            for f in &report.findings {
                eprintln!("{}", diag::render(f, &args.document, &source));
            }
            let level = structure(report.structure).unwrap_or("none");
            outln!("{}: {errors} error(s), {warnings} warning(s); structure {level}; sha256 {}", args.document, report.sha256);
        }
    }
    Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
