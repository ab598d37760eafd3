//! `runbook-host run REF [options] (--mcp-config FILE | -- SERVER CMD or URL... [-- ...])`: the MCP proxy
//! (docs/spec/adapters.md#the-mcp-proxy). To the client it is one MCP server over stdio (or over Streamable HTTP with `--listen`); it
//! starts the servers as its children (or reaches them by URL) and
//! feeds every tool call to the policy module, which alone decides. The proxy lives in the library (`runbook_host::adapters::mcp`).

use runbook_host::adapters::mcp as proxy;

use anyhow::{bail, Context, Result};
use runbook_host::{Profile, Risk};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// The runbook: `id@version` (resolved from the registry and pinned) or a file (trust T1, unpinned)
    pub reference: String,
    /// The registry: a directory, an `https://` base URL (`http://` on loopback only) or `oci://HOST/PREFIX`
    #[arg(long, default_value = ".runbook/registry")]
    pub registry: String,
    /// PEM certificates to trust, beside the system's roots, for an `https://` or `oci://` registry
    #[arg(long, value_name = "FILE")]
    pub registry_ca: Vec<PathBuf>,
    /// Run only a document signed (`runbook-host sign`) by this public key; repeat to accept several keys
    #[arg(long, value_name = "KEY")]
    pub require_signature: Vec<PathBuf>,
    /// Sign each run's receipt with this private key (`receipt.dsse.json`, checked by `verify --key`);
    /// keep it where the agent cannot read it
    #[arg(long, value_name = "KEY")]
    pub signing_key: Option<PathBuf>,
    /// `enforce` (the default) blocks what the module does not allow; `shadow` (for rolling a runbook
    /// out) decides and records every call and blocks none: run.json says `"mode": "shadow"`, the calls
    /// that ran against a decision are listed in `shadow.ndjson`, `verify` says SHADOW first, and the
    /// proxy exits 3, never 0
    #[arg(long, default_value = "enforce", value_parser = ["enforce", "shadow"])]
    pub mode: String,
    /// Where run bundles are written
    #[arg(long, default_value = ".runbook/runs")]
    pub runs: PathBuf,
    /// The agent's identity (default: the client's `clientInfo.name`)
    #[arg(long)]
    pub agent: Option<String>,
    /// How long a gated call waits for a human's approval before answering `needs-approval`
    /// (keep it below the client's request timeout)
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub approval_timeout: Duration,
    /// Where a gated call's approval may come from besides `runbook-host approve`: `terminal` (only
    /// there, the default) or `elicitation` (the calling client is also asked, through
    /// `elicitation/create`, and the approver it names is recorded; never where approvals must be signed)
    #[arg(long, default_value = "terminal", value_parser = ["terminal", "elicitation"])]
    pub approve_via: String,
    /// The profile the proxy claims: R1 (the client routes with `runbook_advance`) or R2 (the module
    /// judges each step's `assert` and routes itself); R0 records deviations without blocking
    #[arg(long, default_value = "R1", value_parser = parse_profile)]
    pub profile: Profile,
    /// The highest risk this client accepts
    #[arg(long, default_value = "irreversible", value_parser = parse_risk)]
    pub risk_ceiling: Risk,
    /// What `tools/list` shows: `scope` (the current step's tools, with `notifications/tools/list_changed`
    /// when the step changes) or `allowlist` (every declared tool, for clients that ignore that
    /// notification); the module decides every call either way
    #[arg(long, default_value = "scope", value_parser = ["scope", "allowlist"])]
    pub list: String,
    /// Withhold these parts of MCP besides tools, comma-separated: to the servers `resources`, `prompts`,
    /// `completions`, `logging` (its messages back too); from the servers to the client `sampling`,
    /// `elicitation`, `roots`; or `all`. By default every one passes, undecided by the module and
    /// recorded in the run's `traffic.ndjson`; a withheld one is answered `method not found`
    #[arg(long, value_delimiter = ',', value_parser = ["resources", "prompts", "completions", "logging", "sampling", "elicitation", "roots", "all"])]
    pub block: Vec<String>,
    /// Names of the servers, in order (with several servers their tools are listed as `name.tool`);
    /// default: from each server's `serverInfo.name`
    #[arg(long = "server-name", value_name = "NAME")]
    pub server_names: Vec<String>,
    /// Require every approval of the run to be signed (`runbook-host approve --sign KEY`) by a key of
    /// this `allowed_signers` file (ssh-keygen's format; keep it where the agent cannot write)
    #[arg(long, value_name = "FILE")]
    pub allowed_signers: Option<PathBuf>,
    /// Accept software keys (`ssh-ed25519`, `ecdsa-sha2-nistp256`) in `--allowed-signers`: they sign
    /// without a touch, so whoever reads the key or reaches an ssh-agent holding it can sign (said on
    /// stderr). Without it, only FIDO `sk-` keys are accepted
    #[arg(long)]
    pub allow_software_keys: bool,
    /// The servers from a configuration file in the shape MCP clients use (`.mcp.json`: `mcpServers`,
    /// each with `command`, `args` and `env`; `${VAR}` expanded): a server's own arguments may hold `--`
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// Serve MCP over Streamable HTTP at `ADDR:PORT` (or a port of 127.0.0.1), endpoint `/mcp`, instead of
    /// over stdio: each MCP session is a run of its own; requests without a session (2026-07-28) share one
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub listen: Option<std::net::SocketAddr>,
    /// Over HTTP: how long a session may go without a request before it is closed (its run ends
    /// `client-closed`)
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub session_idle: Duration,
    /// PEM certificates to trust, beside the system's roots, for servers given by `https://` URL
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,
    /// How long a server may take to start and answer `initialize` and `tools/list`; one that does not is
    /// stopped, and the run refused before any tool runs
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub start_timeout: Duration,
    /// How long a forwarded call may take at its server before it is answered as failed
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub call_timeout: Duration,
    /// The servers: each a command line or an `http(s)://` URL, each after `--`
    #[arg(last = true, value_name = "SERVER CMD")]
    pub servers: Vec<String>,
}

fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| format!("`{s}` is not a duration (e.g. 30s, 500ms, 2m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" | "min" => n * 60.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (ms, s or m)")),
    };
    if !(0.0..=86_400.0).contains(&secs) {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_listen(s: &str) -> std::result::Result<std::net::SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| format!("`{s}` is not ADDR:PORT (e.g. 127.0.0.1:8808) or a port"))
}

fn parse_profile(s: &str) -> std::result::Result<Profile, String> {
    match s {
        "R0" | "r0" => Ok(Profile::R0),
        "R1" | "r1" => Ok(Profile::R1),
        "R2" | "r2" => Ok(Profile::R2),
        _ => Err(format!("`{s}` is not a profile (R0, R1 or R2)")),
    }
}

fn parse_risk(s: &str) -> std::result::Result<Risk, String> {
    match s {
        "read-only" => Ok(Risk::ReadOnly),
        "mutating" => Ok(Risk::Mutating),
        "destructive" => Ok(Risk::Destructive),
        "irreversible" => Ok(Risk::Irreversible),
        _ => Err(format!("`{s}` is not a risk (read-only, mutating, destructive, irreversible)")),
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    // Everything after the first `--` is the servers' command lines, separated by further `--`.
    let mut servers: Vec<Vec<String>> = vec![Vec::new()];
    for a in args.servers {
        if a == "--" {
            servers.push(Vec::new());
        } else {
            servers.last_mut().expect("one at least").push(a);
        }
    }
    servers.retain(|s| !s.is_empty());
    if args.server_names.len() > servers.len() {
        bail!("{} --server-name given for {} server(s)", args.server_names.len(), servers.len());
    }
    for n in &args.server_names {
        if n.is_empty() || n.contains('.') || n.chars().any(|c| c.is_whitespace() || c.is_control()) {
            bail!("`{n}` is not a usable server name (no dot, no space)");
        }
    }
    let specs: Vec<proxy::ServerSpec> = match &args.mcp_config {
        Some(path) => {
            if !servers.is_empty() || !args.server_names.is_empty() {
                bail!("give the servers either in --mcp-config or after `--` (with --server-name), not both");
            }
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the server configuration `{}`", path.display()))?;
            proxy::config::parse(&text, &|k| std::env::var(k).ok()).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => servers
            .into_iter()
            .enumerate()
            .map(|(i, argv)| {
                let name = args.server_names.get(i).cloned();
                // A lone `http://` or `https://` argument is a server's URL (no command is spelt so).
                match argv.as_slice() {
                    [url] if url.starts_with("http://") || url.starts_with("https://") => {
                        proxy::config::check_url(url).map_err(anyhow::Error::msg)?;
                        Ok(proxy::ServerSpec { name, url: Some(url.clone()), ..Default::default() })
                    }
                    _ => Ok(proxy::ServerSpec { name, argv, ..Default::default() }),
                }
            })
            .collect::<Result<_>>()?,
    };
    let mut upstream_ca = Vec::new();
    for p in &args.upstream_ca {
        upstream_ca.push(std::fs::read(p).with_context(|| format!("cannot read the CA file `{}`", p.display()))?);
    }
    let signers = match &args.allowed_signers {
        Some(p) => Some(runbook_host::signatures::Signers::load(p, args.allow_software_keys).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let settings = super::registry::settings(&args.registry, &args.registry_ca, &args.require_signature)?;
    let config = proxy::Config {
        signers,
        reference: args.reference,
        guard_paths: super::registry::guard_paths(&args.registry_ca, &args.require_signature, args.signing_key.as_deref(), &settings),
        registry: settings,
        receipt_key: super::registry::signing_key(args.signing_key.as_deref())?,
        shadow: args.mode == "shadow",
        runs: args.runs,
        agent: args.agent,
        approval_timeout: args.approval_timeout,
        approve_via_elicitation: args.approve_via == "elicitation",
        profile: args.profile,
        risk_ceiling: args.risk_ceiling,
        list_allowlist: args.list == "allowlist",
        servers: specs,
        listen: args.listen,
        upstream_ca,
        start_timeout: args.start_timeout,
        call_timeout: args.call_timeout,
        session_idle: args.session_idle,
        pass_through: proxy::passed_kinds(&args.block),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting the async runtime")?;
    let code = runtime.block_on(proxy::main(config));
    // Standard input is read by a blocking thread that nothing can interrupt: leave without waiting for it.
    runtime.shutdown_background();
    Ok(ExitCode::from(code))
}
