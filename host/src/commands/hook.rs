//! `runbook-host hook`: the tool-call hook for agent CLIs (Claude Code), run by the client as a new
//! process per hook event, one JSON payload on stdin. It fails closed: any error answers exit 2 with the
//! reason on stderr, which the client treats as a block. `hook install` / `hook uninstall` write or
//! remove the client's hook configuration. The adapter lives in the library (`runbook_host::adapters::claude`).

use runbook_host::adapters::claude as hook;
use runbook_host::registry;
use runbook_host::shell_quote as quote;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// The runbook the session runs: `id@version` (from the registry, pinned) or a file (default: $RUNBOOK_HOOK_RUNBOOK)
    #[arg(long, global = true)]
    pub runbook: Option<String>,
    /// The registry: a directory or an `http://` base URL
    #[arg(long, default_value = ".runbook/registry", global = true)]
    pub registry: String,
    /// Where run bundles (and the hook's session state, in `.hook/`) are written
    #[arg(long, default_value = ".runbook/runs", global = true)]
    pub runs: PathBuf,
    /// The profile claimed: R2 (the module judges each step's `assert` and routes) or R0/R1
    #[arg(long, default_value = "R2", value_parser = ["R0", "R1", "R2"], global = true)]
    pub profile: String,
    /// At Stop, block the agent from stopping while the run has not reached a terminal
    #[arg(long, global = true)]
    pub keep_working: bool,
    /// The tools the client allows at all, comma-separated; by default the runbook's tools less those
    /// that Claude Code's own `permissions.deny` rules remove (a runbook that needs a denied tool is refused)
    #[arg(long, global = true, value_delimiter = ',')]
    pub allowlist: Option<Vec<String>>,
    /// How long an event waits for the session's lock (held while another event of the session is
    /// decided) before it is denied, in milliseconds
    #[arg(long, default_value_t = 10_000, global = true)]
    pub lock_timeout_ms: u64,
    /// Require every approval to be signed (`runbook-host approve --sign KEY`) by a key of this
    /// `allowed_signers` file (ssh-keygen's format; keep it where the agent cannot write)
    #[arg(long, value_name = "FILE", global = true)]
    pub allowed_signers: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// Write the client's hook configuration (merged with what is there): this binary and every path
    /// option as absolute paths, so the hook works from any directory
    Install(InstallArgs),
    /// Remove the hook configuration `install` added (every `runbook-host hook` entry, whatever its
    /// options: none need repeating); exit 1 when there was none
    Uninstall(InstallArgs),
}

#[derive(clap::Args)]
pub struct InstallArgs {
    /// The client's settings file
    #[arg(long, default_value = ".claude/settings.json")]
    pub settings: PathBuf,
    /// Print the resulting settings instead of writing them
    #[arg(long)]
    pub print: bool,
}

/// A path as the installed hook names it: absolute (canonical when it exists), so that the hook finds
/// it whatever directory Claude Code starts it in.
fn absolute(p: &Path) -> Result<PathBuf> {
    match p.canonicalize() {
        Ok(c) => Ok(c),
        Err(_) => std::path::absolute(p).with_context(|| format!("cannot make `{}` absolute", p.display())),
    }
}

/// The command line the client runs: this binary by its canonical absolute path, and the options given,
/// every path among them absolute. Absolute rather than relative to `$CLAUDE_PROJECT_DIR`: it needs no
/// shell expansion, works from any directory Claude Code starts the hook in (a session opened in a
/// subdirectory included), and names exactly the files the person installing meant from where they stood.
fn hook_command(a: &Args) -> Result<String> {
    let exe = std::env::current_exe().and_then(|e| e.canonicalize()).context("cannot find this executable's path")?;
    let mut c = vec![quote(&exe.to_string_lossy()), "hook".into()];
    if let Some(r) = &a.runbook {
        // `id@version` is resolved from the registry; anything else is a file.
        let r = if registry::parse_reference(r).is_some() {
            r.clone()
        } else if Path::new(r).is_file() {
            absolute(Path::new(r))?.to_string_lossy().into_owned()
        } else {
            bail!("--runbook `{r}` is neither `id@version` nor an existing file");
        };
        c.push(format!("--runbook {}", quote(&r)));
    }
    let registry = if a.registry.contains("://") { a.registry.clone() } else { absolute(Path::new(&a.registry))?.to_string_lossy().into_owned() };
    c.push(format!("--registry {}", quote(&registry)));
    c.push(format!("--runs {}", quote(&absolute(&a.runs)?.to_string_lossy())));
    if a.profile != "R2" {
        c.push(format!("--profile {}", a.profile));
    }
    if a.keep_working {
        c.push("--keep-working".into());
    }
    if let Some(list) = &a.allowlist {
        c.push(format!("--allowlist {}", quote(&list.join(","))));
    }
    if let Some(p) = &a.allowed_signers {
        c.push(format!("--allowed-signers {}", quote(&absolute(p)?.to_string_lossy())));
    }
    if a.lock_timeout_ms != 10_000 {
        c.push(format!("--lock-timeout-ms {}", a.lock_timeout_ms));
    }
    Ok(c.join(" "))
}

fn settings_edit(a: &Args, i: &InstallArgs, install: bool) -> Result<ExitCode> {
    let shown = i.settings.display();
    let mut settings: Value = match std::fs::read(&i.settings) {
        Ok(b) if !b.iter().all(u8::is_ascii_whitespace) => serde_json::from_slice(&b).with_context(|| format!("`{shown}` is not JSON"))?,
        Ok(_) => serde_json::json!({}),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !install => {
            eprintln!("runbook-host hook: nothing to uninstall: `{shown}` does not exist");
            return Ok(ExitCode::from(1));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::json!({}),
        Err(e) => return Err(e).with_context(|| format!("cannot read `{shown}`")),
    };
    let held_anything_else;
    let message = if install {
        if a.runbook.is_none() {
            bail!("`hook install` needs --runbook REF: the runbook every session of this project runs");
        }
        let command = hook_command(a)?;
        hook::claude::install(&mut settings, &command).map_err(anyhow::Error::msg)?;
        held_anything_else = true;
        format!("installed in `{shown}`: {command}")
    } else {
        // Our entries are recognised by the command they run (`runbook-host hook ...`), so no option of
        // the install has to be repeated here.
        let n = hook::claude::uninstall(&mut settings);
        if n == 0 {
            eprintln!("runbook-host hook: nothing to uninstall: `{shown}` holds no `runbook-host hook` entry");
            return Ok(ExitCode::from(1));
        }
        held_anything_else = settings.as_object().is_none_or(|o| !o.is_empty());
        format!("removed {n} hook entries from `{shown}`")
    };
    let mut text = serde_json::to_string_pretty(&settings)?;
    text.push('\n');
    if i.print {
        print!("{text}");
        eprintln!("runbook-host hook: {message} (printed, not written)");
    } else if !held_anything_else {
        // The file held only our hooks: remove it rather than leave `{}` behind.
        std::fs::remove_file(&i.settings).with_context(|| format!("cannot remove `{shown}`"))?;
        eprintln!("runbook-host hook: {message}; it held nothing else and was deleted");
    } else {
        if let Some(d) = i.settings.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(&i.settings, text).with_context(|| format!("cannot write `{shown}`"))?;
        eprintln!("runbook-host hook: {message}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: Args) -> Result<ExitCode> {
    match &a.action {
        Some(Action::Install(i)) => return settings_edit(&a, i, true),
        Some(Action::Uninstall(i)) => return settings_edit(&a, i, false),
        None => {}
    }
    let t = std::time::Instant::now();
    let mut timing = hook::Timing::default();
    // A panic must not become an exit code the client treats as "go ahead" (only 2 blocks): it is
    // caught and fails closed like any other error.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<(String, hook::Answer)> {
        let mut input = Vec::new();
        std::io::stdin().take(16 << 20).read_to_end(&mut input).context("reading the hook payload")?;
        let ev = hook::claude::parse(&input).map_err(anyhow::Error::msg)?;
        let t_load = std::time::Instant::now();
        let policy = super::policy()?;
        timing.load_us = t_load.elapsed().as_micros();
        let project = std::env::var_os("CLAUDE_PROJECT_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let cfg = hook::Config {
            runbook: a.runbook.clone().or_else(|| std::env::var("RUNBOOK_HOOK_RUNBOOK").ok().filter(|s| !s.is_empty())),
            registry: a.registry.clone(),
            runs: a.runs.clone(),
            profile: match a.profile.as_str() {
                "R0" => runbook_host::Profile::R0,
                "R1" => runbook_host::Profile::R1,
                _ => runbook_host::Profile::R2,
            },
            keep_working: a.keep_working,
            lock_timeout: std::time::Duration::from_millis(a.lock_timeout_ms),
            allowed_signers: a.allowed_signers.clone(),
            allowlist: a.allowlist.clone(),
            settings: hook::permissions::settings_files(&project, home.as_deref()),
        };
        let answer = hook::handle(policy, &cfg, &ev, &mut timing)?;
        Ok((ev.name().to_string(), answer))
    }))
    .unwrap_or_else(|_| Err(anyhow::anyhow!("the hook panicked")));
    if std::env::var_os("RUNBOOK_HOOK_TIMING").is_some() {
        eprintln!(
            "runbook-host hook: timing total_us={} load_us={} restore_us={} decide_us={} events={} chain_checked={} decide_calls={}",
            t.elapsed().as_micros(),
            timing.load_us,
            timing.restore_us,
            timing.decide_us,
            timing.events_replayed,
            timing.chain_checked,
            timing.decide_calls,
        );
    }
    match result {
        Ok((event, answer)) => {
            if let Some(v) = hook::claude::render(&event, &answer) {
                println!("{v}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            // Fail closed: exit 2 blocks the tool call (or the stop) and shows the reason.
            eprintln!("runbook-host hook: denied (fail closed): {e:#}");
            Ok(ExitCode::from(2))
        }
    }
}
