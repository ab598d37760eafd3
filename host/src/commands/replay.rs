use crate::Format;
use anyhow::Result;
use std::io::Write;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The runbook (JSON or YAML)
    pub document: String,
    /// The event stream, one JSON event a line (the `start` claim first); `-` reads standard input
    pub events: String,
    /// `json` (default) prints the wire format: decision lines, then the report; `text` a summary
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let document = super::read_input(&args.document)?;
    let events = super::read_input(&args.events)?;
    let policy = super::policy()?;
    let mut session = policy.session(&document)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // Blank lines separate nothing in NDJSON; every other line is an event, malformed or not.
    for raw in events.split(|b| *b == b'\n').filter(|l| !l.trim_ascii().is_empty()) {
        // A line that is not UTF-8 is a malformed event like any other: the module answers it (with the
        // empty line, which no event is), so the run halts where it stands rather than the tool erroring.
        let line = std::str::from_utf8(raw).unwrap_or("");
        let decision = session.handle_line(line);
        if args.format == Format::Json {
            writeln!(out, "{decision}")?;
        } else {
            let v: serde_json::Value = serde_json::from_str(&decision)?;
            let ev: serde_json::Value = serde_json::from_str(line).unwrap_or(serde_json::Value::Null);
            let what = ev.get("type").and_then(|t| t.as_str()).unwrap_or("?");
            let tool = ev.get("tool").and_then(|t| t.as_str()).map(|t| format!(" {t}")).unwrap_or_default();
            let extra: Vec<String> = ["deviation", "reason"].iter().filter_map(|k| v[*k].as_str().map(|x| format!("{k}={x}"))).collect();
            writeln!(
                out,
                "{:>4} {:<13} {:<28} -> {:<14} step={} {}",
                v["seq"].as_u64().unwrap_or(0),
                what,
                tool,
                v["decision"].as_str().unwrap_or("?"),
                v["step"].as_str().unwrap_or("-"),
                extra.join(" ")
            )?;
        }
    }
    if let Some(why) = session.trapped() {
        // The halt is recorded in the decisions above; a report the module cannot vouch for is not made up.
        out.flush()?;
        eprintln!("runbook-host: the run halted with host-trap: {why}");
        return Ok(ExitCode::from(1));
    }
    let report = session.report()?;
    let outcome = serde_json::from_str::<serde_json::Value>(&report)?["outcome"].as_str().map(str::to_string);
    if args.format == Format::Json {
        writeln!(out, "{report}")?;
    } else {
        writeln!(out, "outcome: {}", outcome.as_deref().unwrap_or("(run not ended)"))?;
    }
    out.flush()?;
    Ok(if outcome.as_deref() == Some("completed") { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
