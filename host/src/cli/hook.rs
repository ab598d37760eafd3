//! `runbook-host hook`: the tool-call hook for agent CLIs (Claude Code), in two modes. As a command, the
//! client runs it as a new process per hook event, one JSON payload on stdin; with `--port` the process
//! hands the payload to the resident server (`hook serve`, started when none answers), which is how the
//! server mode's SessionStart (a command hook by Claude Code's rules) reaches it. It fails closed: any
//! error answers exit 2 with the reason on stderr, which the client treats as a block. `hook install` /
//! `hook uninstall` write or remove the client's hook configuration; `hook status` and `hook stop` ask
//! the server. The adapter lives in the library (`runbook_host::adapters::hooks`).

use runbook_host::adapters::hooks as hook;
use runbook_host::adapters::hooks::server;
use runbook_host::registry;
use runbook_host::shell_quote as quote;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Clone, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// The runbook the session runs: `id@version` (from the registry, pinned) or a file (default: $RUNBOOK_HOOK_RUNBOOK)
    #[arg(long, global = true)]
    pub runbook: Option<String>,
    /// The registry: a directory, an `https://` base URL (`http://` on loopback only) or `oci://HOST/PREFIX`
    #[arg(long, default_value = ".runbook/registry", global = true)]
    pub registry: String,
    /// PEM certificates to trust, beside the system's roots, for an `https://` or `oci://` registry
    #[arg(long, value_name = "FILE", global = true)]
    pub registry_ca: Vec<PathBuf>,
    /// Run only a document signed (`runbook-host sign`) by this public key; repeat to accept several keys
    #[arg(long, value_name = "KEY", global = true)]
    pub require_signature: Vec<PathBuf>,
    /// Sign each run's receipt with this private key (`receipt.dsse.json`, checked by `verify --key`);
    /// keep it where the agent cannot read it
    #[arg(long, value_name = "KEY", global = true)]
    pub signing_key: Option<PathBuf>,
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
    /// Accept software keys (`ssh-ed25519`, `ecdsa-sha2-nistp256`) in `--allowed-signers`: they sign
    /// without a touch, so an agent that reads the key or reaches an ssh-agent holding it can approve
    /// (said on stderr whenever the file is loaded). Without it, only FIDO `sk-` keys are accepted
    #[arg(long, global = true)]
    pub allow_software_keys: bool,
    /// For `hook serve`: exit once no session has been open and no event has come for this many
    /// seconds (0: never). The next SessionStart starts a server again
    #[arg(long, default_value_t = 600, global = true)]
    pub idle_exit_secs: u64,
    /// Decide through the resident hook server on 127.0.0.1:PORT (started when none answers): the
    /// server mode's SessionStart (later events come from the client itself, to which the server binds
    /// the session); for `hook serve`, the port to listen on (0: any free port); for `install`, the
    /// server mode's port (default: a free port chosen now)
    #[arg(long, global = true)]
    pub port: Option<u16>,
    /// Separated mode: hand the event to the runbook-host service on 127.0.0.1:PORT (`runbook-host
    /// service install`), which must be held by `--service-user`; nothing is started, and a service that
    /// does not answer, or a port held by anyone else, denies. For `install`: write the separated mode's
    /// hooks (http hooks with no token, to that port)
    #[arg(long, value_name = "PORT", global = true, conflicts_with = "port")]
    pub service: Option<u16>,
    /// The service's system user (separated mode)
    #[arg(long, default_value = "runbook-host", global = true)]
    pub service_user: String,
    /// The agent CLI: `claude` (Claude Code), `qwen` (Qwen Code), `copilot` (GitHub Copilot CLI),
    /// `gemini` (Gemini CLI), `codex` (OpenAI Codex CLI), `opencode` or `cline`; each client's tool names
    /// are mapped to the canonical ones a runbook is written in, and `install` writes the client's own
    /// configuration
    #[arg(long, value_enum, default_value = "claude", global = true)]
    pub client: ClientName,
    /// The event the payload is of, for a client whose payloads do not name it (Copilot; `install` writes it)
    #[arg(long, global = true)]
    pub event: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientName {
    Claude,
    Qwen,
    Copilot,
    Gemini,
    Codex,
    Opencode,
    Cline,
    /// install/uninstall: every client above whose command is on PATH (`claude`, `codex`, `gemini`,
    /// `copilot`, `qwen`, `opencode`, `cline`), each said with where it was found
    Auto,
}

/// The agent CLIs `--client auto` looks for, by the command each installs.
const CLIS: &[(&str, ClientName, &str)] = &[
    ("claude", ClientName::Claude, "Claude Code"),
    ("codex", ClientName::Codex, "Codex"),
    ("gemini", ClientName::Gemini, "Gemini CLI"),
    ("copilot", ClientName::Copilot, "Copilot CLI"),
    ("qwen", ClientName::Qwen, "Qwen Code"),
    ("opencode", ClientName::Opencode, "opencode"),
    ("cline", ClientName::Cline, "Cline"),
];

/// The first executable file named `cmd` in $PATH.
fn on_path(cmd: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(cmd))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// `hook --client auto install|uninstall`: each client of [`CLIS`] found on PATH, in turn.
fn auto_edit(a: &Args, i: &InstallArgs, install: bool) -> Result<ExitCode> {
    if i.settings.is_some() {
        bail!("--client auto installs each client's own file; --settings names one file, so name the client too");
    }
    let found: Vec<_> = CLIS.iter().filter_map(|(cmd, c, name)| on_path(cmd).map(|p| (*c, *name, p))).collect();
    if found.is_empty() {
        let names: Vec<_> = CLIS.iter().map(|(c, ..)| format!("`{c}`")).collect();
        bail!("--client auto found none of {} on PATH: name the client with --client", names.join(", "));
    }
    let list: Vec<_> = found.iter().map(|(_, name, p)| format!("{name} ({})", p.display())).collect();
    eprintln!("runbook-host hook: --client auto: on PATH: {}; {} for each", list.join(", "), if install { "installing" } else { "uninstalling" });
    let mut any = false;
    for (c, ..) in &found {
        let mut b = a.clone();
        b.client = *c;
        any |= settings_edit(&b, i, install)? == ExitCode::SUCCESS;
    }
    Ok(if any { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

impl ClientName {
    fn client(self) -> hook::Client {
        match self {
            ClientName::Claude => hook::Client::Claude,
            ClientName::Qwen => hook::Client::Qwen,
            ClientName::Copilot => hook::Client::Copilot,
            ClientName::Gemini => hook::Client::Gemini,
            ClientName::Codex => hook::Client::Codex,
            ClientName::Opencode => hook::Client::Opencode,
            ClientName::Cline => hook::Client::Cline,
            // Never reached: `run` refuses `auto` outside install and uninstall.
            ClientName::Auto => hook::Client::Claude,
        }
    }
}

#[derive(Clone, clap::Subcommand)]
pub enum Action {
    /// Write the client's hook configuration (merged with what is there): this binary and every path
    /// option as absolute paths, so the hook works from any directory
    Install(InstallArgs),
    /// Remove the hook configuration `install` added (every `runbook-host hook` entry and every http
    /// hook of a hook server, whatever its options: none need repeating); exit 1 when there was none
    Uninstall(InstallArgs),
    /// Run the resident hook server in the foreground (SessionStart starts one in the background when
    /// none answers): one per runs directory, on 127.0.0.1 only
    Serve,
    /// Show the hook server of the runs directory: its pid and port, each open session with its run,
    /// step and last decision; exit 1 when none answers
    Status(StatusArgs),
    /// Ask the hook server of the runs directory to stop (open sessions resume from their bundles when
    /// the next server starts); exit 1 when none answers
    Stop,
}

#[derive(Clone, clap::Args)]
pub struct StatusArgs {
    /// Print the server's status document (JSON) as it answered
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InstallMode {
    /// The server mode where the installed Claude Code has http hooks with onFailure (2.1.295 and
    /// later), else command hooks
    Auto,
    /// Claude Code's http hooks to the resident server (SessionStart stays a command hook)
    Http,
    /// A process per hook event
    Command,
}

#[derive(Clone, clap::Args)]
pub struct InstallArgs {
    /// The client's settings file (default: `.claude/settings.json`, `.qwen/settings.json`,
    /// `.github/hooks/runbook-host.json`, `.gemini/settings.json`, `.codex/hooks.json`,
    /// `.opencode/plugin/runbook-host.js` or the folder `.clinerules/hooks`, by `--client`)
    #[arg(long)]
    pub settings: Option<PathBuf>,
    /// Print the resulting settings instead of writing them
    #[arg(long)]
    pub print: bool,
    /// How the client reaches the hook (install only)
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: InstallMode,
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
    for p in &a.registry_ca {
        c.push(format!("--registry-ca {}", quote(&absolute(p)?.to_string_lossy())));
    }
    for p in &a.require_signature {
        c.push(format!("--require-signature {}", quote(&absolute(p)?.to_string_lossy())));
    }
    if let Some(p) = &a.signing_key {
        c.push(format!("--signing-key {}", quote(&absolute(p)?.to_string_lossy())));
    }
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
    if a.allow_software_keys {
        c.push("--allow-software-keys".into());
    }
    if a.lock_timeout_ms != 10_000 {
        c.push(format!("--lock-timeout-ms {}", a.lock_timeout_ms));
    }
    match a.client {
        ClientName::Claude => {}
        ClientName::Auto => bail!("--client auto names no one client"),
        other => c.push(format!("--client {}", other.client().name())),
    }
    Ok(c.join(" "))
}

/// Reads a settings file: `{}` when it is missing or blank (None when missing and `must_exist`).
fn read_settings(path: &Path, must_exist: bool) -> Result<Option<Value>> {
    let shown = path.display();
    match runbook_host::files::read_path_bounded(path, runbook_host::files::MAX_SMALL_FILE_BYTES) {
        Ok(b) if !b.iter().all(u8::is_ascii_whitespace) => Ok(Some(serde_json::from_slice(&b).with_context(|| format!("`{shown}` is not JSON"))?)),
        Ok(_) => Ok(Some(serde_json::json!({}))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && must_exist => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Some(serde_json::json!({}))),
        Err(e) => Err(e).with_context(|| format!("cannot read `{shown}`")),
    }
}

/// Writes a settings file, or deletes it when nothing is left in it; `private` files (the token's) are
/// made readable by their owner only.
fn write_settings(path: &Path, settings: &Value, private: bool) -> Result<&'static str> {
    let shown = path.display();
    if settings.as_object().is_some_and(|o| o.is_empty()) {
        // The file held only what we added: remove it rather than leave `{}` behind.
        std::fs::remove_file(path).with_context(|| format!("cannot remove `{shown}`"))?;
        return Ok("; it held nothing else and was deleted");
    }
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    let mut text = serde_json::to_string_pretty(settings)?;
    text.push('\n');
    // Atomic, and a private file (the token's) is created 0600: never readable by others, even for a moment.
    let kept = std::fs::metadata(path).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777).unwrap_or(0o644);
    runbook_host::files::write_atomic_path(path, text.as_bytes(), Some(if private { 0o600 } else { kept }))
        .with_context(|| format!("cannot write `{shown}`"))?;
    Ok("")
}

/// Claude Code's personal settings file beside the shared one (not committed: Claude Code keeps it out
/// of git), where the server mode puts the token the http hooks send.
fn local_settings(settings: &Path) -> PathBuf {
    settings.with_file_name("settings.local.json")
}

/// The version of the `claude` on PATH, when there is one that answers `--version`.
fn claude_version() -> Option<(u64, u64, u64)> {
    let out = std::process::Command::new("claude").arg("--version").stdin(std::process::Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace().next()?.split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// The first Claude Code with `http` hooks that block on failure (`onFailure`).
const HTTP_HOOKS_SINCE: (u64, u64, u64) = (2, 1, 295);

fn choose_mode(m: InstallMode) -> (bool, String) {
    match m {
        InstallMode::Http => (true, "server mode, as asked".into()),
        InstallMode::Command => (false, "command mode, as asked".into()),
        InstallMode::Auto => match claude_version() {
            Some(v) if v >= HTTP_HOOKS_SINCE => {
                (true, format!("server mode: the claude on PATH is {}.{}.{}, which has http hooks with onFailure", v.0, v.1, v.2))
            }
            Some(v) => (false, format!("command mode: the claude on PATH is {}.{}.{}, older than 2.1.295 (no http hooks with onFailure)", v.0, v.1, v.2)),
            None => (
                false,
                "command mode: no `claude` on PATH answered --version, so its support of http hooks is unknown (pass --mode http for the server mode)".into(),
            ),
        },
    }
}

fn settings_edit(a: &Args, i: &InstallArgs, install: bool) -> Result<ExitCode> {
    if a.client == ClientName::Auto {
        return auto_edit(a, i, install);
    }
    let path = i.settings.clone().unwrap_or_else(|| match a.client {
        ClientName::Claude => PathBuf::from(".claude/settings.json"),
        ClientName::Qwen => PathBuf::from(".qwen/settings.json"),
        ClientName::Copilot => PathBuf::from(hook::copilot::HOOKS_FILE),
        ClientName::Gemini => PathBuf::from(".gemini/settings.json"),
        ClientName::Codex => PathBuf::from(hook::codex::HOOKS_FILE),
        ClientName::Opencode => PathBuf::from(hook::opencode::PLUGIN_FILE),
        ClientName::Cline => PathBuf::from(hook::cline::HOOKS_DIR),
        ClientName::Auto => unreachable!("handled above"),
    });
    if a.client == ClientName::Opencode {
        return opencode_edit(a, &path, i, install);
    }
    if a.client == ClientName::Cline {
        return cline_edit(a, &path, i, install);
    }
    if a.client == ClientName::Codex {
        return codex_edit(a, &path, i, install);
    }
    if a.client == ClientName::Copilot {
        return copilot_edit(a, &path, i, install);
    }
    if a.client == ClientName::Gemini {
        return gemini_edit(a, &path, i, install);
    }
    let settings_path = path.as_path();
    let shown = settings_path.display();
    let Some(mut settings) = read_settings(settings_path, !install)? else {
        eprintln!("runbook-host hook: nothing to uninstall: `{shown}` does not exist");
        return Ok(ExitCode::from(1));
    };
    let local = local_settings(settings_path);
    let mut token_edit: Option<Value> = None;
    let message = if install {
        if a.runbook.is_none() && a.service.is_none() {
            bail!("`hook install` needs --runbook REF: the runbook every session of this project runs");
        }
        let command = hook_command(a)?;
        let (http, why) = choose_mode(i.mode);
        if a.client == ClientName::Qwen {
            // Qwen Code: command hooks that fail closed by themselves (it has no `onFailure`, and runs the
            // tool when a hook is missing, crashes or times out).
            if a.service.is_some() || i.mode == InstallMode::Http {
                bail!("--client qwen is installed in command mode only (the server mode and separated mode are Claude Code's for now)");
            }
            let command = hook::fail_closed(&command);
            hook::claude::install(&mut settings, &hook::claude::Mode::CommandNoOnFailure { command: &command }).map_err(anyhow::Error::msg)?;
            // With `security.folderTrust` on, Qwen Code drops an untrusted project's hooks without a word:
            // the project is trusted now, whether or not the user has turned the feature on yet.
            let said = if i.print {
                String::new()
            } else {
                let abs = absolute(settings_path)?;
                let project = abs.parent().and_then(Path::parent).context("the settings file has no project folder")?.to_path_buf();
                trust_folder(&trusted_folders_file("QWEN_CODE_TRUSTED_FOLDERS_PATH", "QWEN_HOME", ".qwen", "Qwen Code")?, &project, "Qwen Code")?
            };
            format!("installed in `{shown}` (Qwen Code, command mode; a failure to answer is a deny): {command}{said}")
        } else if let Some(port) = a.service {
            // Separated mode: the service decides with its own options; the client only forwards.
            let exe = std::env::current_exe().and_then(|e| e.canonicalize()).context("cannot find this executable's path")?;
            let start_command = format!("{} hook --service {port} --service-user {}", quote(&exe.to_string_lossy()), quote(&a.service_user));
            let url = format!("http://127.0.0.1:{port}{}", server::HOOK_PATH);
            hook::claude::install(&mut settings, &hook::claude::Mode::Http { start_command: &start_command, url: &url, token: false })
                .map_err(anyhow::Error::msg)?;
            if let Some(mut l) = read_settings(&local, true)? {
                if remove_token(&mut l) {
                    token_edit = Some(l);
                }
            }
            format!("installed in `{shown}` (separated mode): SessionStart runs {start_command}; every other event is posted to {url}, no token (the service knows its clients by uid)")
        } else if http {
            let port = match a.port {
                Some(p) if p != 0 => p,
                // A free port now; the server binds it at the first SessionStart (one that is taken by
                // then fails closed with the reason: reinstall with --port).
                _ => std::net::TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr()).context("cannot find a free port")?.port(),
            };
            let start_command = format!("{command} --port {port}");
            let url = format!("http://127.0.0.1:{port}{}", server::HOOK_PATH);
            hook::claude::install(&mut settings, &hook::claude::Mode::Http { start_command: &start_command, url: &url, token: true })
                .map_err(anyhow::Error::msg)?;
            // The token the http hooks send, in the personal settings' `env` (Claude Code fills the
            // header from its environment; allowedEnvVars names the one variable it may use).
            std::fs::create_dir_all(&a.runs).with_context(|| format!("cannot create the runs directory {}", a.runs.display()))?;
            let token = server::token(&a.runs, true)?;
            let mut l = if local == settings_path { settings.clone() } else { read_settings(&local, false)?.unwrap_or_default() };
            let env = l
                .as_object_mut()
                .ok_or_else(|| anyhow::anyhow!("`{}` is not a JSON object", local.display()))?
                .entry("env")
                .or_insert_with(|| serde_json::json!({}));
            env.as_object_mut()
                .ok_or_else(|| anyhow::anyhow!("`env` in `{}` is not an object", local.display()))?
                .insert(server::TOKEN_ENV.into(), token.into());
            token_edit = Some(l);
            format!(
                "installed in `{shown}` ({why}): SessionStart runs {start_command}; every other event is posted to {url}, with the token from `{}`",
                local.display()
            )
        } else {
            hook::claude::install(&mut settings, &hook::claude::Mode::Command { command: &command }).map_err(anyhow::Error::msg)?;
            // A token of an earlier server-mode install is no longer used.
            if let Some(mut l) = read_settings(&local, true)? {
                if remove_token(&mut l) {
                    token_edit = Some(l);
                }
            }
            format!("installed in `{shown}` ({why}): {command}")
        }
    } else {
        // Our entries are recognised by the command they run (`runbook-host hook ...`) or the server URL
        // they post to, so no option of the install has to be repeated here.
        let n = hook::claude::uninstall(&mut settings);
        if let Some(mut l) = read_settings(&local, true)? {
            if remove_token(&mut l) {
                token_edit = Some(l);
            }
        }
        if n == 0 {
            eprintln!("runbook-host hook: nothing to uninstall: `{shown}` holds no `runbook-host hook` entry");
            return Ok(ExitCode::from(1));
        }
        format!("removed {n} hook entries from `{shown}`")
    };
    if i.print {
        print!("{}", serde_json::to_string_pretty(&settings)? + "\n");
        eprintln!("runbook-host hook: {message} (printed, not written)");
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(l) = &token_edit {
        if local == settings_path {
            settings = l.clone();
        } else {
            write_settings(&local, l, true)?;
        }
    }
    let deleted = write_settings(settings_path, &settings, local == settings_path)?;
    eprintln!("runbook-host hook: {message}{deleted}");
    // A running server decides with the options it was started with: it is stopped, and the next
    // SessionStart of a server-mode install starts one with the new options (its open sessions resume).
    if let Ok(Some(c)) = client(a) {
        if c.shutdown().is_ok() {
            eprintln!("runbook-host hook: stopped the hook server of {} (it ran with the options of before)", a.runs.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What every install in command mode only needs: a runbook, and neither the server nor the separated
/// mode (`why` says so for the client).
fn command_mode_install(a: &Args, i: &InstallArgs, why: &str) -> Result<()> {
    if a.runbook.is_none() {
        bail!("`hook install` needs --runbook REF: the runbook every session of this project runs");
    }
    if a.service.is_some() || i.mode == InstallMode::Http {
        bail!("{why}");
    }
    Ok(())
}

/// `hook --client copilot install|uninstall`: the project's `.github/hooks/runbook-host.json` (the whole
/// file is ours), and the project trusted in Copilot's `config.json` (it loads a project's hooks only in a
/// trusted folder, silently skipping them otherwise).
fn copilot_edit(a: &Args, path: &Path, i: &InstallArgs, install: bool) -> Result<ExitCode> {
    let shown = path.display();
    if !install {
        // Ours when any entry's command is `runbook-host hook ...` (Copilot's `bash` or `command` key).
        let ours = runbook_host::files::read_path_bounded(path, runbook_host::files::MAX_SMALL_FILE_BYTES)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v["hooks"].as_object().cloned())
            .is_some_and(|h| {
                h.values()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter_map(|e| e["bash"].as_str().or_else(|| e["command"].as_str()))
                    .any(hook::claude::is_hook_command)
            });
        if !ours {
            eprintln!("runbook-host hook: nothing to uninstall: `{shown}` holds no `runbook-host hook` entry");
            return Ok(ExitCode::from(1));
        }
        std::fs::remove_file(path).with_context(|| format!("cannot remove `{shown}`"))?;
        eprintln!("runbook-host hook: removed `{shown}` (the project stays trusted in Copilot's config.json)");
        return Ok(ExitCode::SUCCESS);
    }
    command_mode_install(a, i, "--client copilot is installed in command mode only (the server and separated modes are Claude Code's for now)")?;
    let file = hook::copilot::hooks_file(&hook_command(a)?);
    if i.print {
        print!("{}", serde_json::to_string_pretty(&file)? + "\n");
        return Ok(ExitCode::SUCCESS);
    }
    write_settings(path, &file, false)?;
    // The folder Copilot is started in: the project (the directory `.github/` is in).
    let project = absolute(Path::new("."))?;
    let home = std::env::var_os("COPILOT_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".copilot")))
        .context("neither COPILOT_HOME nor HOME is set: cannot find Copilot's config.json to trust the project")?;
    let config = home.join("config.json");
    let mut c = read_settings(&config, false)?.unwrap_or_default();
    let trusted = c
        .as_object_mut()
        .with_context(|| format!("`{}` is not a JSON object", config.display()))?
        .entry("trustedFolders")
        .or_insert_with(|| serde_json::json!([]));
    let list = trusted.as_array_mut().with_context(|| format!("`trustedFolders` in `{}` is not a list", config.display()))?;
    let p = Value::String(project.to_string_lossy().into_owned());
    let newly = !list.contains(&p);
    if newly {
        list.push(p);
        write_settings(&config, &c, true)?;
    }
    eprintln!(
        "runbook-host hook: installed `{shown}` (Copilot CLI, command mode: {} events){}",
        hook::copilot::EVENTS.len(),
        if newly { format!("; trusted {} in `{}` (Copilot skips an untrusted project's hooks)", project.display(), config.display()) } else { String::new() }
    );
    Ok(ExitCode::SUCCESS)
}

/// The `trustedFolders.json` of Gemini CLI or Qwen Code (a fork of it): `$<path_var>`, else
/// `$<home_var>/<dir>/` or `~/<dir>/`.
fn trusted_folders_file(path_var: &str, home_var: &str, dir: &str, client: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(path_var) {
        return Ok(PathBuf::from(p));
    }
    if let Some(h) = std::env::var_os(home_var) {
        // GEMINI_CLI_HOME stands for the home folder, QWEN_HOME for `~/.qwen` itself.
        let h = PathBuf::from(h);
        return Ok(if home_var == "QWEN_HOME" { h } else { h.join(dir) }.join("trustedFolders.json"));
    }
    let home = std::env::var_os("HOME")
        .with_context(|| format!("neither {home_var} nor HOME is set: cannot find {client}'s trustedFolders.json to trust the project"))?;
    Ok(PathBuf::from(home).join(dir).join("trustedFolders.json"))
}

/// Trusts `project` in a `trustedFolders.json` (`{"/abs": "TRUST_FOLDER"}`): what install says about it. A
/// level the user set (`DO_NOT_TRUST`) is left as it is and said.
fn trust_folder(file: &Path, project: &Path, client: &str) -> Result<String> {
    let mut t = read_settings(file, false)?.unwrap_or_default();
    let folders = t.as_object_mut().with_context(|| format!("`{}` is not a JSON object", file.display()))?;
    let key = project.to_string_lossy().into_owned();
    Ok(match folders.get(&key).and_then(Value::as_str) {
        Some("TRUST_FOLDER") => String::new(),
        Some(other) => {
            format!("; {} is `{other}` in `{}`, left as it is: {client} does not load its hooks until it is trusted", project.display(), file.display())
        }
        None => {
            folders.insert(key, "TRUST_FOLDER".into());
            if let Some(d) = file.parent() {
                std::fs::create_dir_all(d)?;
            }
            write_settings(file, &t, false)?;
            format!("; trusted {} in `{}` ({client} loads a project's hooks only in a trusted folder)", project.display(), file.display())
        }
    })
}

/// `hook --client gemini install|uninstall`: our hooks merged into the project's `.gemini/settings.json`,
/// the command failing closed (Gemini CLI runs the tool when a hook exits 1, dies or prints nothing), and
/// the project trusted in Gemini CLI's `trustedFolders.json` (it loads a project's hooks only in a trusted
/// folder; `gemini -p` in an untrusted one exits without running anything).
fn gemini_edit(a: &Args, path: &Path, i: &InstallArgs, install: bool) -> Result<ExitCode> {
    let shown = path.display();
    let Some(mut settings) = read_settings(path, !install)? else {
        eprintln!("runbook-host hook: nothing to uninstall: `{shown}` does not exist");
        return Ok(ExitCode::from(1));
    };
    if !install {
        let n = hook::gemini::uninstall(&mut settings);
        if n == 0 {
            eprintln!("runbook-host hook: nothing to uninstall: `{shown}` holds no `runbook-host hook` entry");
            return Ok(ExitCode::from(1));
        }
        let deleted = write_settings(path, &settings, false)?;
        eprintln!("runbook-host hook: removed {n} hook entries from `{shown}`{deleted} (the project stays trusted in Gemini CLI's trustedFolders.json)");
        return Ok(ExitCode::SUCCESS);
    }
    command_mode_install(a, i, "--client gemini is installed in command mode only (Gemini CLI has no http hooks)")?;
    let command = hook::fail_closed(&hook_command(a)?);
    hook::gemini::install(&mut settings, &command).map_err(anyhow::Error::msg)?;
    if i.print {
        print!("{}", serde_json::to_string_pretty(&settings)? + "\n");
        return Ok(ExitCode::SUCCESS);
    }
    write_settings(path, &settings, false)?;
    // The folder Gemini CLI is started in: the one `.gemini/` is in.
    let abs = absolute(path)?;
    let project = abs.parent().and_then(Path::parent).context("the settings file has no project folder")?.to_path_buf();
    let trust = trusted_folders_file("GEMINI_CLI_TRUSTED_FOLDERS_PATH", "GEMINI_CLI_HOME", ".gemini", "Gemini CLI")?;
    let said = trust_folder(&trust, &project, "Gemini CLI")?;
    eprintln!(
        "runbook-host hook: installed in `{shown}` (Gemini CLI, command mode: {} events; a failure to answer is a deny): {command}{said}",
        hook::gemini::EVENTS.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// `hook --client opencode install|uninstall`: our plugin, `.opencode/plugin/runbook-host.js` (the whole
/// file is ours), which asks the hook command about every tool call in opencode's loop.
fn opencode_edit(a: &Args, path: &Path, i: &InstallArgs, install: bool) -> Result<ExitCode> {
    let shown = path.display();
    let existing = std::fs::read_to_string(path).ok();
    if existing.as_deref().is_some_and(|t| !hook::opencode::is_ours(t)) {
        bail!("`{shown}` exists and is not runbook-host's plugin: it is left alone (remove or rename it, then install again)");
    }
    if !install {
        if existing.is_none() {
            eprintln!("runbook-host hook: nothing to uninstall: `{shown}` does not exist");
            return Ok(ExitCode::from(1));
        }
        std::fs::remove_file(path).with_context(|| format!("cannot remove `{shown}`"))?;
        eprintln!("runbook-host hook: removed `{shown}`");
        return Ok(ExitCode::SUCCESS);
    }
    command_mode_install(a, i, "--client opencode is installed in command mode only (its plugin runs the hook command)")?;
    let command = hook_command(a)?;
    let text = hook::opencode::plugin(&command);
    if i.print {
        print!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write `{shown}`"))?;
    eprintln!("runbook-host hook: installed `{shown}` (opencode's plugin: every tool call asks {command}; a failure to answer is a deny)");
    Ok(ExitCode::SUCCESS)
}

/// `hook --client cline install|uninstall`: one script per event of [`hook::cline::EVENTS`] in the
/// project's `.clinerules/hooks/` (each file wholly ours), each running the hook command and answering
/// `cancel` when it gives no answer (Cline runs the tool on any failure of a hook).
fn cline_edit(a: &Args, dir: &Path, i: &InstallArgs, install: bool) -> Result<ExitCode> {
    let shown = dir.display();
    let files: Vec<PathBuf> = hook::cline::EVENTS.iter().map(|e| dir.join(e)).collect();
    let ours = |p: &Path| std::fs::read_to_string(p).is_ok_and(|t| hook::cline::is_ours(&t));
    if let Some(p) = files.iter().find(|p| std::fs::symlink_metadata(p).is_ok() && !ours(p)) {
        bail!("`{}` exists and is not runbook-host's hook: it is left alone (remove or rename it, then run this again)", p.display());
    }
    if !install {
        let mine: Vec<&PathBuf> = files.iter().filter(|p| ours(p)).collect();
        if mine.is_empty() {
            eprintln!("runbook-host hook: nothing to uninstall: `{shown}` holds no runbook-host hook");
            return Ok(ExitCode::from(1));
        }
        for p in &mine {
            std::fs::remove_file(p).with_context(|| format!("cannot remove `{}`", p.display()))?;
        }
        eprintln!("runbook-host hook: removed {} hook scripts from `{shown}`", mine.len());
        return Ok(ExitCode::SUCCESS);
    }
    command_mode_install(a, i, "--client cline is installed in command mode only (Cline runs hook files)")?;
    let script = hook::cline::script(&hook_command(a)?);
    if i.print {
        print!("{script}");
        return Ok(ExitCode::SUCCESS);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {shown}"))?;
    for p in &files {
        std::fs::write(p, &script).with_context(|| format!("cannot write `{}`", p.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))?;
    }
    let others = hook::cline::other_pre_hooks(&absolute(Path::new("."))?);
    let said = if others.is_empty() {
        String::new()
    } else {
        let list: Vec<_> = others.iter().map(|p| p.display().to_string()).collect();
        format!("; other PreToolUse hooks exist ({}): while they do, every denied call stops the whole task", list.join(", "))
    };
    eprintln!("runbook-host hook: installed {} hook scripts in `{shown}` (Cline, command mode; a failure to answer stops the task){said}", files.len());
    Ok(ExitCode::SUCCESS)
}

/// Codex's user config (`$CODEX_HOME/config.toml`, else `~/.codex/config.toml`) and its document.
fn codex_config() -> Result<(PathBuf, toml_edit::DocumentMut)> {
    let home = std::env::var_os("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".codex")))
        .context("neither CODEX_HOME nor HOME is set: cannot find Codex's config.toml to trust the hooks")?;
    let path = home.join("config.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read `{}`", path.display())),
    };
    let doc = text.parse::<toml_edit::DocumentMut>().with_context(|| format!("`{}` is not TOML", path.display()))?;
    Ok((path, doc))
}

/// The `[hooks.state]` table of Codex's config, made (implicit, so only its entries show) when missing.
fn codex_state(doc: &mut toml_edit::DocumentMut) -> Result<&mut toml_edit::Table> {
    let hooks = doc.entry("hooks").or_insert_with(|| {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        toml_edit::Item::Table(t)
    });
    let hooks = hooks.as_table_mut().context("`hooks` in Codex's config.toml is not a table")?;
    let state = hooks.entry("state").or_insert_with(|| {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        toml_edit::Item::Table(t)
    });
    state.as_table_mut().context("`hooks.state` in Codex's config.toml is not a table")
}

/// `hook --client codex install|uninstall`: our hooks merged into the project's `.codex/hooks.json`, the
/// command failing closed (Codex runs the tool on every failure but a deny), and in Codex's user config the
/// project trusted and each of our handlers trusted by its hash: Codex skips an untrusted hook silently.
/// A project the user marked untrusted is refused, with the reason: the hooks would never run there.
fn codex_edit(a: &Args, path: &Path, i: &InstallArgs, install: bool) -> Result<ExitCode> {
    let shown = path.display();
    let Some(mut doc) = read_settings(path, !install)? else {
        eprintln!("runbook-host hook: nothing to uninstall: `{shown}` does not exist");
        return Ok(ExitCode::from(1));
    };
    let abs = absolute(path)?;
    let project = abs.parent().and_then(Path::parent).context("the hooks file has no project folder")?.to_path_buf();
    // Codex keys its trust by the file's canonical path.
    let key_path = |p: &Path| -> Result<String> {
        let dir = p.parent().context("no folder")?.canonicalize().with_context(|| format!("cannot resolve {}", p.display()))?;
        Ok(dir.join(p.file_name().context("no file name")?).to_string_lossy().into_owned())
    };
    let (config_path, mut config) = codex_config()?;
    if !install {
        let old = hook::codex::trust_entries(&key_path(&abs)?, &doc);
        let n = hook::remove_hooks(&mut doc, hook::codex::EVENTS);
        if n == 0 {
            eprintln!("runbook-host hook: nothing to uninstall: `{shown}` holds no `runbook-host hook` entry");
            return Ok(ExitCode::from(1));
        }
        let deleted = write_settings(path, &doc, false)?;
        let state = codex_state(&mut config)?;
        for (k, _) in &old {
            state.remove(k);
        }
        std::fs::write(&config_path, config.to_string()).with_context(|| format!("cannot write `{}`", config_path.display()))?;
        eprintln!(
            "runbook-host hook: removed {n} hook entries from `{shown}`{deleted}, and their trust from `{}` (the project stays trusted)",
            config_path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    command_mode_install(a, i, "--client codex is installed in command mode only (Codex has no http hooks)")?;
    let project_key = project.canonicalize().unwrap_or_else(|_| project.clone()).to_string_lossy().into_owned();
    let level = config.get("projects").and_then(|p| p.get(&project_key)).and_then(|p| p.get("trust_level")).and_then(|v| v.as_str()).map(str::to_string);
    if let Some(l) = level.as_deref().filter(|l| *l != "trusted") {
        bail!(
            "Codex's `{}` marks {project_key} `trust_level = \"{l}\"`: Codex reads no project hooks there, so every call would go unchecked; trust the project (or remove that line) and install again",
            config_path.display()
        );
    }
    let command = hook_command(a)?;
    let pre = hook::fail_closed(&command);
    hook::merge_hooks(&mut doc, hook::codex::hooks(&command, &pre), hook::codex::EVENTS).map_err(anyhow::Error::msg)?;
    if i.print {
        print!("{}", serde_json::to_string_pretty(&doc)? + "\n");
        return Ok(ExitCode::SUCCESS);
    }
    write_settings(path, &doc, false)?;
    let trust = hook::codex::trust_entries(&key_path(&abs)?, &doc);
    if level.is_none() {
        let projects = config.entry("projects").or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        });
        let projects = projects.as_table_mut().context("`projects` in Codex's config.toml is not a table")?;
        let mut t = toml_edit::Table::new();
        t.insert("trust_level", toml_edit::value("trusted"));
        projects.insert(&project_key, toml_edit::Item::Table(t));
    }
    let state = codex_state(&mut config)?;
    for (k, hash) in &trust {
        let mut t = toml_edit::Table::new();
        t.insert("trusted_hash", toml_edit::value(hash.as_str()));
        state.insert(k, toml_edit::Item::Table(t));
    }
    if let Some(d) = config_path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(&config_path, config.to_string()).with_context(|| format!("cannot write `{}`", config_path.display()))?;
    eprintln!(
        "runbook-host hook: installed in `{shown}` (Codex, command mode: {} events; a failure to answer a PreToolUse is a deny): {pre}; trusted {} hooks{} in `{}` (Codex skips an untrusted hook without a word)",
        hook::codex::EVENTS.len(),
        trust.len(),
        if level.is_none() { format!(" and the project {project_key}") } else { String::new() },
        config_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Removes the server token from a settings document's `env` (and an `env` left empty); whether it did.
fn remove_token(settings: &mut Value) -> bool {
    let Some(env) = settings.get_mut("env").and_then(Value::as_object_mut) else {
        return false;
    };
    if env.remove(server::TOKEN_ENV).is_none() {
        return false;
    }
    if env.is_empty() {
        settings.as_object_mut().unwrap().remove("env");
    }
    true
}

pub fn config(a: &Args) -> Result<hook::Config> {
    let project = std::env::var_os("CLAUDE_PROJECT_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let settings = super::registry::settings(&a.registry, &a.registry_ca, &a.require_signature)?;
    Ok(hook::Config {
        runbook: a.runbook.clone().or_else(|| std::env::var("RUNBOOK_HOOK_RUNBOOK").ok().filter(|s| !s.is_empty())),
        guard_paths: super::registry::guard_paths(&a.registry_ca, &a.require_signature, a.signing_key.as_deref(), &settings),
        registry: settings,
        receipt_key: super::registry::signing_key(a.signing_key.as_deref())?,
        runs: a.runs.clone(),
        profile: match a.profile.as_str() {
            "R0" => runbook_host::Profile::R0,
            "R1" => runbook_host::Profile::R1,
            _ => runbook_host::Profile::R2,
        },
        keep_working: a.keep_working,
        lock_timeout: std::time::Duration::from_millis(a.lock_timeout_ms),
        allowed_signers: a.allowed_signers.clone(),
        allow_software_keys: a.allow_software_keys,
        allowlist: a.allowlist.clone(),
        // Claude Code's permission rules; Qwen Code's are not read (its deny rules are its own to apply).
        settings: match a.client {
            ClientName::Claude => hook::permissions::settings_files(&project, home.as_deref()),
            _ => Vec::new(),
        },
        client: a.client.client(),
    })
}

/// The options a started server gets: the ones this process was given (paths as given: the server
/// starts in this process's directory).
fn server_args(a: &Args, port: u16) -> Vec<String> {
    let mut v: Vec<String> = vec!["hook".into(), "serve".into(), "--port".into(), port.to_string()];
    v.extend(["--registry".into(), a.registry.clone(), "--runs".into(), a.runs.to_string_lossy().into_owned(), "--profile".into(), a.profile.clone()]);
    for p in &a.registry_ca {
        v.extend(["--registry-ca".into(), p.to_string_lossy().into_owned()]);
    }
    for p in &a.require_signature {
        v.extend(["--require-signature".into(), p.to_string_lossy().into_owned()]);
    }
    if let Some(p) = &a.signing_key {
        v.extend(["--signing-key".into(), p.to_string_lossy().into_owned()]);
    }
    if let Some(r) = &a.runbook {
        v.extend(["--runbook".into(), r.clone()]);
    }
    if a.keep_working {
        v.push("--keep-working".into());
    }
    if let Some(l) = &a.allowlist {
        v.extend(["--allowlist".into(), l.join(",")]);
    }
    if let Some(p) = &a.allowed_signers {
        v.extend(["--allowed-signers".into(), p.to_string_lossy().into_owned()]);
    }
    if a.allow_software_keys {
        v.push("--allow-software-keys".into());
    }
    v.extend(["--lock-timeout-ms".into(), a.lock_timeout_ms.to_string()]);
    v.extend(["--idle-exit-secs".into(), a.idle_exit_secs.to_string()]);
    v
}

/// Starts a server in the background, in a process group of its own (a client that ends its hook's
/// group does not end the server), its log appended to `log`.
fn spawn_server(a: &Args, port: u16, log: &Path) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find this executable's path")?;
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).with_context(|| format!("cannot open {}", log.display()))?;
    std::process::Command::new(exe)
        .args(server_args(a, port))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the hook server")?;
    Ok(())
}

/// A hook event handed to the server (started when none answers); its answer printed as the client reads it.
fn through_server(a: &Args, port: u16, payload: &[u8]) -> Result<Option<String>> {
    // Stopping a server started with other options and starting this one share one deadline: 30 s, so a
    // loaded machine (a replaced server finishing its sessions, a cold module) is not refused; Claude Code
    // gives a command hook 60 s.
    let client = server::ensure(&a.runs, port, &config(a)?.fingerprint(), std::time::Duration::from_secs(30), |log| spawn_server(a, port, log))?;
    let (status, body) = client.hook(payload).map_err(|e| anyhow::anyhow!("the hook server on 127.0.0.1:{port} did not answer: {e}"))?;
    if status != 200 {
        bail!("the hook server answered {status}: {}", body.trim());
    }
    Ok((!body.trim().is_empty()).then(|| body.trim().to_string()))
}

/// A hook event handed to the separated mode's service: sent only to a listener of the service's user
/// (a squatter on the port gets nothing, and the event is denied).
fn through_service(a: &Args, port: u16, payload: &[u8]) -> Result<Option<String>> {
    let user = runbook_host::service::lookup_user(&a.service_user)?
        .ok_or_else(|| anyhow::anyhow!("there is no user `{}`: is the runbook-host service installed (`runbook-host service install`)?", a.service_user))?;
    let client = server::Client::service(port, user.uid, std::time::Duration::from_secs(30));
    let (status, body) = client.hook(payload).map_err(|e| anyhow::anyhow!("the runbook-host service on 127.0.0.1:{port}: {e}"))?;
    if status != 200 {
        bail!("the runbook-host service answered {status}: {}", body.trim());
    }
    Ok((!body.trim().is_empty()).then(|| body.trim().to_string()))
}

fn serve(a: &Args) -> Result<ExitCode> {
    let policy = super::policy()?;
    let port = a.port.unwrap_or(0);
    let idle_exit = (a.idle_exit_secs > 0).then(|| std::time::Duration::from_secs(a.idle_exit_secs));
    server::serve(policy, config(a)?, port, idle_exit, server::Access::Personal, |port| {
        eprintln!("runbook-host hook serve: listening on 127.0.0.1:{port} for {}", a.runs.display())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The server of the runs directory, by `--port` or the port its `server.json` records.
fn client(a: &Args) -> Result<Option<server::Client>> {
    let Some(port) = a.port.or_else(|| server::read_info(&a.runs).map(|i| i.port)) else {
        return Ok(None);
    };
    let c = server::Client::new(&a.runs, port, std::time::Duration::from_secs(10))?;
    Ok(c.serves(&a.runs).then_some(c))
}

fn status(a: &Args, s: &StatusArgs) -> Result<ExitCode> {
    let Some(c) = client(a)? else {
        eprintln!("runbook-host hook: no hook server answers for {} (the next SessionStart of a server-mode install starts one)", a.runs.display());
        return Ok(ExitCode::from(1));
    };
    let (_, body) = c.status().map_err(|e| anyhow::anyhow!("{e}"))?;
    if s.json {
        outln!("{}", body.trim());
        return Ok(ExitCode::SUCCESS);
    }
    let v: Value = serde_json::from_str(&body)?;
    outln!("hook server pid {} on 127.0.0.1:{}, since {}, {} events decided", v["pid"], v["port"], v["started"].as_str().unwrap_or("?"), v["decided"]);
    // The server lists no sessions (issue 28, F8): the sessions are the ones this runs directory holds.
    let mut shown = 0;
    for session in runbook_host::adapters::hooks::sessions(&a.runs) {
        let (_, body) = c.status_of(Some(&session)).map_err(|e| anyhow::anyhow!("{e}"))?;
        let x = serde_json::from_str::<Value>(&body)?["session"].clone();
        if x.is_null() {
            continue;
        }
        shown += 1;
        if x["busy"] == true {
            outln!("  session {session}: deciding an event now");
            continue;
        }
        outln!(
            "  session {session}: run {}, step {}{}, {} events, last: {}{}",
            x["run_id"].as_str().unwrap_or("?"),
            x["step"].as_str().unwrap_or("(none)"),
            if x["finished"] == true { " (finished)" } else { "" },
            x["events"],
            x["last"].as_str().unwrap_or("(none yet)"),
            x["client"].as_u64().map(|p| format!(", client pid {p}")).unwrap_or_default()
        );
    }
    if shown == 0 {
        outln!("no open session");
    }
    Ok(ExitCode::SUCCESS)
}

fn stop(a: &Args) -> Result<ExitCode> {
    let Some(c) = client(a)? else {
        eprintln!("runbook-host hook: no hook server answers for {}", a.runs.display());
        return Ok(ExitCode::from(1));
    };
    c.shutdown().map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!("runbook-host hook: the hook server of {} is stopping", a.runs.display());
    Ok(ExitCode::SUCCESS)
}

/// One Cline payload: the events it stands for, decided in order ([`hook::handle_all`]), and the answer in
/// Cline's shape (a deny is input the tool rejects only while no other PreToolUse hook could replace it).
fn cline_event(a: &Args, input: &[u8], timing: &mut hook::Timing) -> Result<(String, Option<String>)> {
    if a.port.is_some() || a.service.is_some() {
        bail!("--client cline runs in command mode only");
    }
    let evs = hook::cline::parse_all(input).map_err(anyhow::Error::msg)?;
    let Some(first) = evs.first() else { return Ok(("(none)".into(), None)) };
    let t_load = std::time::Instant::now();
    let policy = super::policy()?;
    timing.load_us = t_load.elapsed().as_micros();
    let cfg = config(a)?;
    let answer = hook::handle_all(policy, &cfg, &evs, timing)?;
    let others = matches!(answer, hook::Answer::Deny(_)) && {
        let workspace = hook::cline::workspace(input).unwrap_or_else(|| PathBuf::from("."));
        !hook::cline::other_pre_hooks(&workspace).is_empty()
    };
    Ok((first.name().to_string(), hook::cline::render(first, &answer, others).map(|v| v.to_string())))
}

pub fn run(a: Args) -> Result<ExitCode> {
    match &a.action {
        Some(Action::Install(i)) => return settings_edit(&a, i, true),
        Some(Action::Uninstall(i)) => return settings_edit(&a, i, false),
        Some(Action::Serve) => return serve(&a),
        Some(Action::Status(s)) => return status(&a, s),
        Some(Action::Stop) => return stop(&a),
        None => {}
    }
    if a.client == ClientName::Auto {
        bail!("--client auto is for `install` and `uninstall`: a hook event comes from one client, named by the command install wrote");
    }
    let t = std::time::Instant::now();
    let mut timing = hook::Timing::default();
    // A panic must not become an exit code the client treats as "go ahead" (only 2 blocks): it is
    // caught and fails closed like any other error.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<(String, Option<String>)> {
        let mut input = Vec::new();
        std::io::stdin().take(16 << 20).read_to_end(&mut input).context("reading the hook payload")?;
        let client = a.client.client();
        if client == hook::Client::Cline {
            return cline_event(&a, &input, &mut timing);
        }
        let ev = client.parse(a.event.as_deref(), &input).map_err(anyhow::Error::msg)?;
        if let Some(port) = a.port {
            return Ok((ev.name().to_string(), through_server(&a, port, &input)?));
        }
        if let Some(port) = a.service {
            return Ok((ev.name().to_string(), through_service(&a, port, &input)?));
        }
        let t_load = std::time::Instant::now();
        let policy = super::policy()?;
        timing.load_us = t_load.elapsed().as_micros();
        let cfg = config(&a)?;
        let answer = hook::handle(policy, &cfg, &ev, &mut timing)?;
        Ok((ev.name().to_string(), client.render(ev.name(), &answer).map(|v| v.to_string())))
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
        Ok((_event, answer)) => {
            // After the decision was recorded, before the client hears it.
            runbook_host::faults::point("answer", "before");
            if let Some(v) = answer {
                println!("{v}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            // Fail closed: exit 2 blocks the tool call (or the stop) and shows the reason.
            eprintln!("runbook-host hook: denied (fail closed): {e:#}");
            if let Some(v) = a.client.client().failure_answer(&format!("runbook-host hook: denied (fail closed): {e:#}")) {
                println!("{v}");
            }
            Ok(ExitCode::from(2))
        }
    }
}
