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
    /// `text` (the default on a terminal): each event, its decision in words and a summary; `json` (the
    /// default when piped): the wire format, each decision line, then the report
    #[arg(long, value_enum)]
    pub format: Option<Format>,
}

/// Colours for a person at a terminal, none with `NO_COLOR` or when piped.
struct Paint(bool);

impl Paint {
    fn new() -> Paint {
        use std::io::IsTerminal;
        Paint(std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()))
    }
    fn on(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn good(&self, s: &str) -> String {
        self.on("32", s)
    }
    fn bad(&self, s: &str) -> String {
        self.on("1;31", s)
    }
    fn warn(&self, s: &str) -> String {
        self.on("33", s)
    }
    fn dim(&self, s: &str) -> String {
        self.on("2", s)
    }
}

/// What an event asked, in a few words: the call and its most telling argument.
fn what(ev: &serde_json::Value) -> String {
    let tool = ev["tool"].as_str().unwrap_or("");
    let arg = ev["arguments"]["command"]
        .as_str()
        .map(str::to_string)
        .or_else(|| ev["arguments"].as_object().filter(|o| !o.is_empty()).map(|_| ev["arguments"].to_string()));
    let short = |s: String| if s.chars().count() > 48 { format!("{}...", s.chars().take(45).collect::<String>()) } else { s };
    match ev["type"].as_str() {
        Some("start") => format!(
            "{}, coverage {}, agent {}",
            ev["profile"].as_str().unwrap_or("?"),
            if ev["coverage"].is_string() { ev["coverage"].as_str().unwrap().to_string() } else { ev["coverage"].to_string() },
            ev["agent"].as_str().unwrap_or("?")
        ),
        Some("invoke") => short(match arg {
            Some(a) => format!("{tool}: {a}"),
            None => tool.to_string(),
        }),
        Some("result") => format!("{tool}{}", if ev["is_error"] == true { " (error)" } else { "" }),
        Some("approval") => format!("{} by {}", if ev["granted"] == true { "granted" } else { "refused" }, ev["approver"].as_str().unwrap_or("?")),
        Some("advance") => format!("to {}", ev["to"].as_str().unwrap_or("?")),
        Some("end") => ev["reason"].as_str().unwrap_or("").to_string(),
        _ => String::new(),
    }
}

fn sentence(policy: &runbook_host::Policy, kind: &str, code: &str) -> String {
    policy.explain(kind, code).ok().flatten().map(|s| format!(": {s}")).unwrap_or_default()
}

/// One event and its decision, for a person.
fn line_for(policy: &runbook_host::Policy, p: &Paint, ev: &serde_json::Value, d: &serde_json::Value) -> String {
    let kind = ev["type"].as_str().unwrap_or("(malformed)");
    let decision = d["decision"].as_str().unwrap_or("?");
    let (dev, reason) = (d["deviation"].as_str(), d["reason"].as_str());
    let verdict = match (decision, dev, reason) {
        ("allow", None, Some("assert-failed")) => p.bad("ASSERT FAILED") + &sentence(policy, "reason", "assert-failed"),
        ("allow", None, Some(r)) => p.good("accepted") + &format!(" [{r}]{}", sentence(policy, "reason", r)),
        ("allow", Some(x), _) => p.warn("allowed, deviation") + &format!(" [{x}]{}", sentence(policy, "deviation", x)),
        ("allow", None, None) => p.good("allowed"),
        ("needs-approval", _, r) => p.warn("NEEDS APPROVAL") + &r.map(|r| format!(" [{r}]")).unwrap_or_default(),
        ("deny", Some(x), _) => p.bad("DENIED") + &format!(" [{x}]{}", sentence(policy, "deviation", x)),
        ("deny", None, Some(r)) => p.bad("DENIED") + &format!(" [{r}]{}", sentence(policy, "reason", r)),
        ("halt", _, Some("run-ended")) => p.good("run ended"),
        ("halt", _, r) => p.bad("HALT") + &r.map(|r| format!(" [{r}]{}", sentence(policy, "reason", r))).unwrap_or_default(),
        (other, _, _) => other.to_string(),
    };
    let step = d["step"].as_str().map(|s| p.dim(&format!("  (step {s})"))).unwrap_or_default();
    let mut out = format!("{:>4}  {:<12} {:<48}  {verdict}{step}", d["seq"].as_u64().unwrap_or(0), kind, what(ev));
    for r in d["refusals"].as_array().into_iter().flatten().filter_map(|r| r.as_str()) {
        out.push_str(&format!("\n{:>16}{} {}", "", p.bad(&format!("refused [{r}]")), sentence(policy, "refusal", r).trim_start_matches(": ")));
    }
    out
}

/// The run report, summarised for a person.
fn summary(policy: &runbook_host::Policy, p: &Paint, r: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let outcome = r["outcome"].as_str().unwrap_or("(the run did not end)");
    let painted = if outcome == "completed" { p.good(outcome) } else { p.bad(outcome) };
    let at = r["terminal"].as_str().map(|t| format!(" at terminal `{t}`")).unwrap_or_default();
    out.push(format!("Outcome:     {painted}{at}{} ({} events)", sentence(policy, "outcome", outcome), r["events"]));
    let refusals: Vec<&str> = r["refusals"].as_array().into_iter().flatten().filter_map(|x| x.as_str()).collect();
    if !refusals.is_empty() {
        out.push(format!("Refused:     {}", refusals.join(", ")));
    }
    let devs = r["deviations"].as_array().cloned().unwrap_or_default();
    let mut classes: Vec<(String, usize)> = Vec::new();
    for d in &devs {
        let c = d["class"].as_str().unwrap_or("?").to_string();
        match classes.iter_mut().find(|(k, _)| *k == c) {
            Some((_, n)) => *n += 1,
            None => classes.push((c, 1)),
        }
    }
    out.push(if devs.is_empty() {
        "Deviations:  none".into()
    } else {
        format!("Deviations:  {} ({})", devs.len(), classes.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", "))
    });
    let approvals = r["approvals"].as_array().cloned().unwrap_or_default();
    let accepted = approvals.iter().filter(|a| a["accepted"] == true).count();
    out.push(format!("Approvals:   {} answered, {accepted} accepted", approvals.len()));
    let cps = r["checkpoints"].as_object().cloned().unwrap_or_default();
    out.push(if cps.is_empty() {
        "Checkpoints: none".into()
    } else {
        format!("Checkpoints: {}", cps.iter().map(|(k, v)| format!("{k} {}", v["status"].as_str().unwrap_or("?"))).collect::<Vec<_>>().join(", "))
    });
    if let Some(steps) = r["steps"].as_object().filter(|s| !s.is_empty()) {
        let s: Vec<String> = steps
            .iter()
            .map(|(k, v)| {
                let visits = v["visits"].as_u64().unwrap_or(0);
                format!("{k} {}{}", v["assert"].as_str().unwrap_or("-"), if visits > 1 { format!(" ({visits} visits)") } else { String::new() })
            })
            .collect();
        out.push(format!("Steps:       {}", s.join(", ")));
    }
    out
}

pub fn run(args: Args) -> Result<ExitCode> {
    use std::io::IsTerminal;
    let format = args.format.unwrap_or(if std::io::stdout().is_terminal() { Format::Text } else { Format::Json });
    let document = super::read_input(&args.document)?;
    let events = super::read_input(&args.events)?;
    let policy = super::policy()?;
    let mut session = policy.session(&document)?;
    let paint = Paint::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if format == Format::Text {
        writeln!(out, "Replaying {} against {}", args.events, args.document)?;
    }
    // Blank lines separate nothing in NDJSON; every other line is an event, malformed or not.
    for raw in events.split(|b| *b == b'\n').filter(|l| !l.trim_ascii().is_empty()) {
        // A line that is not UTF-8 is a malformed event like any other: the module answers it (with the
        // empty line, which no event is), so the run halts where it stands rather than the tool erroring.
        let line = std::str::from_utf8(raw).unwrap_or("");
        let decision = session.handle_line(line);
        if format == Format::Json {
            writeln!(out, "{decision}")?;
        } else {
            let v: serde_json::Value = serde_json::from_str(&decision)?;
            let ev: serde_json::Value = serde_json::from_str(line).unwrap_or(serde_json::Value::Null);
            writeln!(out, "{}", line_for(&policy, &paint, &ev, &v))?;
        }
    }
    if let Some(why) = session.trapped() {
        // The halt is recorded in the decisions above; a report the module cannot vouch for is not made up.
        out.flush()?;
        eprintln!("runbook-host: the run halted with host-trap: {why}");
        return Ok(ExitCode::from(1));
    }
    let report = session.report()?;
    let r: serde_json::Value = serde_json::from_str(&report)?;
    let outcome = r["outcome"].as_str().map(str::to_string);
    if format == Format::Json {
        writeln!(out, "{report}")?;
    } else {
        writeln!(out)?;
        for l in summary(&policy, &paint, &r) {
            writeln!(out, "{l}")?;
        }
    }
    out.flush()?;
    Ok(if outcome.as_deref() == Some("completed") { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
