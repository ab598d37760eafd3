use crate::Format;
use anyhow::{bail, Result};
use runbook_host::{wire, Coverage, DecisionKind, Event, EventKind, Profile, Refusal, Risk, StartClaim};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The runbook (JSON or YAML); `-` reads standard input
    pub document: String,
    /// The profile the client enforces: R0, R1 or R2
    #[arg(long)]
    pub profile: String,
    /// The tools the client allows at all: a comma list, or `*`
    #[arg(long, default_value = "*")]
    pub allow: String,
    /// `complete`, or a comma list of what the adapter cannot see (e.g. `shell`)
    #[arg(long, default_value = "complete")]
    pub coverage: String,
    /// The highest risk the client accepts
    #[arg(long, default_value = "irreversible")]
    pub risk_ceiling: String,
    /// The agent's identity
    #[arg(long, default_value = "agent")]
    pub agent: String,
    /// Tools (and `id@version` runbooks) available, for prerequisites: a comma list
    #[arg(long)]
    pub available: Option<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

fn list(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|x| !x.is_empty()).map(str::to_string).collect()
}

pub fn run(args: Args) -> Result<ExitCode> {
    let profile = match args.profile.as_str() {
        "R0" | "r0" => Profile::R0,
        "R1" | "r1" => Profile::R1,
        "R2" | "r2" => Profile::R2,
        p => bail!("--profile must be R0, R1 or R2, not `{p}`"),
    };
    let risk_ceiling = match args.risk_ceiling.as_str() {
        "read-only" => Risk::ReadOnly,
        "mutating" => Risk::Mutating,
        "destructive" => Risk::Destructive,
        "irreversible" => Risk::Irreversible,
        r => bail!("--risk-ceiling must be read-only, mutating, destructive or irreversible, not `{r}`"),
    };
    let coverage = if args.coverage == "complete" { Coverage::Complete } else { Coverage::Blind(list(&args.coverage)) };
    let bytes = super::read_input(&args.document)?;
    let policy = super::policy()?;
    let mut session = policy.session(&bytes)?;
    let claim = StartClaim {
        run_id: "check".into(),
        profile,
        allowlist: list(&args.allow),
        risk_ceiling,
        coverage,
        agent: args.agent.clone(),
        available: args.available.as_deref().map(list),
    };
    let d = session.handle(&Event { at: 0, kind: EventKind::Start(claim) });
    let admitted = d.kind == DecisionKind::Allow;
    match args.format {
        Format::Json => {
            let codes: Vec<String> = d.refusals.iter().map(|r| wire::code(*r)).collect();
            outln!("{}", serde_json::json!({"document": args.document, "admitted": admitted, "refusals": codes}));
        }
        Format::Text => {
            if admitted {
                outln!("{}: admitted", args.document);
            } else {
                outln!("{}: refused", args.document);
                // The module's code and sentence for each refusal: the same every host shows.
                for r in &d.refusals {
                    let code = wire::code(*r);
                    let why = policy.explain("refusal", &code)?.unwrap_or_default();
                    // The one thing the module cannot say: how this binary is run, to see the errors.
                    let hint = if *r == Refusal::InvalidDocument { format!(" (run `{} lint`)", runbook_host::invocation()) } else { String::new() };
                    outln!("  {code}: {why}{hint}");
                }
            }
        }
    }
    Ok(if admitted { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
