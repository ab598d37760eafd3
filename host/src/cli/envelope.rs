use crate::{diag, Format};
use anyhow::Result;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The runbook (JSON or YAML); `-` reads standard input
    pub document: String,
    /// How a document without an envelope is reported: `text` renders the findings on stderr, `json`
    /// prints them as JSON on stdout. The envelope itself is always its canonical JSON bytes.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let bytes = super::read_input(&args.document)?;
    match super::policy()?.envelope(&bytes)? {
        Ok(envelope) => {
            super::write_exact(envelope.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Err(findings) => {
            match args.format {
                Format::Json => {
                    let v = serde_json::json!({"document": args.document, "envelope": null, "findings": findings.iter().map(diag::finding_json).collect::<Vec<_>>()});
                    outln!("{v}");
                }
                Format::Text => {
                    let source = String::from_utf8_lossy(&bytes);
                    for f in &findings {
                        eprintln!("{}", diag::render(f, &args.document, &source));
                    }
                    eprintln!(
                        "{}: no envelope: the document has {} error(s) that leave it without a complete model (`{} lint` lists every finding)",
                        args.document,
                        findings.len(),
                        runbook_host::invocation()
                    );
                }
            }
            Ok(ExitCode::from(1))
        }
    }
}
