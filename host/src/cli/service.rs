//! `runbook-host service`: separated mode (docs/spec/README.md#threat-model, issue 28 item 1). `install` (as root) makes the
//! service's system user and directory, copies this binary where no client can write it, makes the host's
//! signing key and installs a systemd unit (or prints the one command that starts the service where systemd
//! does not run); `run` is the service itself, as its user; `status` asks it; `uninstall` undoes `install`
//! and keeps the evidence. The layout and the checks live in the library (`runbook_host::service`).

use runbook_host::adapters::hooks::server;
use runbook_host::service::{self as svc, Layout};
use runbook_host::shell_quote as quote;

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(clap::Args)]
pub struct Where {
    /// The service's directory (its evidence, caches, key and configuration)
    #[arg(long, default_value = svc::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// Install the service (as root): its system user, its directory, the host's key, a copy of this binary,
    /// and a systemd unit where systemd runs (else the command that starts it is printed)
    Install(InstallArgs),
    /// Run the service in the foreground, as its user with CAP_NET_BIND_SERVICE, CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE (what
    /// the unit, or the command `install` prints, does)
    Run(Where),
    /// Show the running service: its pid, port and how many sessions are open; exit 1 when it does not answer
    Status(Where),
    /// Stop the service and remove what `install` made, but the evidence (`runs/`, given to root), unless --purge
    Uninstall(UninstallArgs),
}

#[derive(clap::Args)]
pub struct InstallArgs {
    #[command(flatten)]
    pub at: Where,
    /// The service's system user (made when there is none)
    #[arg(long, default_value = svc::DEFAULT_USER)]
    pub user: String,
    /// The hook server's port on 127.0.0.1: one only root may bind (below net.ipv4.ip_unprivileged_port_start)
    #[arg(long, default_value_t = svc::DEFAULT_PORT)]
    pub port: u16,
    /// A user whose agent CLI sessions the service decides (the agent's user); repeat for several
    #[arg(long = "client", value_name = "USER", required = true)]
    pub clients: Vec<String>,
    /// Write the unit (or print the start command) but do not start the service
    #[arg(long)]
    pub no_start: bool,
    /// After `--`: the `runbook-host hook` options the service decides with (`--runbook`, `--registry`,
    /// `--allowed-signers`, ...); the service's own `--runs`, `--signing-key` and port are set by install
    #[arg(last = true, required = true, value_name = "HOOK OPTIONS")]
    pub hook: Vec<String>,
}

#[derive(clap::Args)]
pub struct UninstallArgs {
    #[command(flatten)]
    pub at: Where,
    /// Remove the evidence too
    #[arg(long)]
    pub purge: bool,
}

/// `runbook-host hook`'s options, parsed as the hook parses them.
#[derive(Parser)]
#[command(name = "runbook-host hook", no_binary_name = true)]
struct HookOptions {
    #[command(flatten)]
    a: super::hook::Args,
}

fn is_root() -> bool {
    runbook_host::private::euid() == 0
}

/// The unit's file (systemd).
fn unit_path(user: &str) -> PathBuf {
    PathBuf::from(format!("/etc/systemd/system/{user}.service"))
}

/// Refuses a path a client could write, or that lies under a directory a client could write: the
/// service would then run what the agent put there.
fn out_of_reach(what: &str, p: &Path, clients: &[u32]) -> Result<()> {
    let abs = std::path::absolute(p)?;
    for (i, q) in abs.ancestors().enumerate() {
        let m = match std::fs::metadata(q) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && i == 0 => continue,
            Err(e) => return Err(e).with_context(|| format!("{what}: cannot read `{}`", q.display())),
        };
        let sticky = m.is_dir() && m.mode() & 0o1000 != 0;
        if clients.contains(&m.uid()) {
            bail!("{what} `{}`: `{}` belongs to a client (uid {}), whose agent could change it", p.display(), q.display(), m.uid());
        }
        if m.mode() & 0o022 != 0 && !(i > 0 && sticky) {
            bail!("{what} `{}`: `{}` is writable by other users (mode {:o}), an agent among them", p.display(), q.display(), m.mode() & 0o7777);
        }
    }
    Ok(())
}

fn chown(p: &Path, uid: u32, gid: u32) -> Result<()> {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).with_context(|| format!("cannot chown `{}`", p.display()))
}

fn mkdir(p: &Path, mode: u32, uid: u32, gid: u32) -> Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() || !m.is_dir() => bail!("`{}` exists and is not a directory", p.display()),
        Ok(_) => {}
        Err(_) => std::fs::create_dir(p).with_context(|| format!("cannot create `{}`", p.display()))?,
    }
    chown(p, uid, gid)?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn write_file(p: &Path, bytes: &[u8], mode: u32, uid: u32, gid: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = p.with_extension("tmp-install");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    chown(&tmp, uid, gid)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, p).with_context(|| format!("cannot write `{}`", p.display()))
}

fn run_tool(program: &str, args: &[&str]) -> Result<()> {
    let o = std::process::Command::new(program).args(args).output().with_context(|| format!("cannot run {program}"))?;
    if !o.status.success() {
        bail!("`{program} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok(())
}

/// The hook options, checked and with every path absolute (the service starts in another directory).
fn hook_args(given: &[String], clients: &[u32]) -> Result<Vec<String>> {
    for own in ["--runs", "--signing-key", "--port", "--service", "--service-user", "--idle-exit-secs"] {
        if given.iter().any(|g| g == own || g.starts_with(&format!("{own}="))) {
            bail!("{own} is the service's own: `service install` sets it");
        }
    }
    let h = HookOptions::try_parse_from(given).map_err(|e| anyhow::anyhow!("the hook options after `--`: {e}"))?;
    let a = h.a;
    if a.action.is_some() {
        bail!("the hook options after `--` name a subcommand; give only options");
    }
    let Some(runbook) = &a.runbook else { bail!("the hook options after `--` need --runbook REF: the runbook every session runs") };
    let mut v: Vec<String> = Vec::new();
    let path = |v: &mut Vec<String>, flag: &str, what: &str, p: &Path| -> Result<()> {
        let abs = p.canonicalize().with_context(|| format!("{flag} `{}`", p.display()))?;
        out_of_reach(what, &abs, clients)?;
        v.extend([flag.to_string(), abs.to_string_lossy().into_owned()]);
        Ok(())
    };
    if runbook_host::registry::parse_reference(runbook).is_none() {
        path(&mut v, "--runbook", "the runbook", Path::new(runbook))?;
    } else {
        v.extend(["--runbook".to_string(), runbook.clone()]);
    }
    if a.registry.contains("://") {
        v.extend(["--registry".to_string(), a.registry.clone()]);
    } else if Path::new(&a.registry).exists() {
        path(&mut v, "--registry", "the registry", Path::new(&a.registry))?;
    } else if runbook_host::registry::parse_reference(runbook).is_some() {
        bail!("--registry `{}` does not exist, and --runbook {runbook} is resolved from it", a.registry);
    }
    for p in &a.registry_ca {
        path(&mut v, "--registry-ca", "a registry CA", p)?;
    }
    for p in &a.require_signature {
        path(&mut v, "--require-signature", "a document-signing key", p)?;
    }
    if let Some(p) = &a.allowed_signers {
        path(&mut v, "--allowed-signers", "the approvers' allowed_signers", p)?;
    }
    if a.allow_software_keys {
        v.push("--allow-software-keys".into());
    }
    v.extend(["--profile".into(), a.profile.clone(), "--lock-timeout-ms".into(), a.lock_timeout_ms.to_string()]);
    if a.keep_working {
        v.push("--keep-working".into());
    }
    if let Some(l) = &a.allowlist {
        v.extend(["--allowlist".into(), l.join(",")]);
    }
    Ok(v)
}

fn install(i: &InstallArgs) -> Result<ExitCode> {
    if !is_root() {
        bail!("`service install` makes a system user and root-owned files: run it as root");
    }
    let layout = Layout::new(&std::path::absolute(&i.at.state_dir)?);
    svc::check_privileged(i.port)?;
    let mut clients = Vec::new();
    for name in &i.clients {
        let u = svc::lookup_user(name)?.with_context(|| format!("--client {name}: there is no such user"))?;
        if u.uid == 0 {
            bail!("--client {name}: root cannot be a client (an agent running as root can undo any control)");
        }
        if name == &i.user {
            bail!("--client {name}: the service's own user cannot be its client");
        }
        clients.push((u.name, u.uid));
    }
    let client_uids: Vec<u32> = clients.iter().map(|c| c.1).collect();
    let hook = hook_args(&i.hook, &client_uids)?;
    // The runbook must resolve now (pinned, signed where a signature is required, linted): a service that
    // could run no session is refused at install rather than at every SessionStart. Root's cache is not used.
    {
        let h = HookOptions::try_parse_from(&hook).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut settings = super::registry::settings(&h.a.registry, &h.a.registry_ca, &h.a.require_signature)?;
        settings.cache = None;
        let reference = h.a.runbook.as_deref().unwrap_or_default();
        runbook_host::registry::resolve_with(reference, &settings).map_err(|e| anyhow::anyhow!("the service could not run `{reference}`: {e}"))?;
    }
    let mut running = false;
    if let Ok(Some(uid)) = runbook_host::adapters::hooks::peer::listener_uid(runbook_host::adapters::hooks::peer::loopback(i.port)) {
        running = svc::lookup_user(&i.user)?.is_some_and(|u| u.uid == uid);
        if !running {
            bail!("127.0.0.1:{} is already held by uid {uid}: choose another --port", i.port);
        }
    }
    // The user: made as a system user with no login and no home of its own.
    let (user, created) = match svc::lookup_user(&i.user)? {
        Some(u) => (u, false),
        None => {
            let shell = ["/usr/sbin/nologin", "/sbin/nologin", "/bin/false"].into_iter().find(|s| Path::new(s).exists()).unwrap_or("/bin/false");
            let home = layout.root.to_string_lossy().into_owned();
            run_tool("useradd", &["--system", "--user-group", "--no-create-home", "--home-dir", &home, "--shell", shell, &i.user])?;
            (svc::lookup_user(&i.user)?.with_context(|| format!("useradd made no user `{}`", i.user))?, true)
        }
    };
    if user.uid == 0 || client_uids.contains(&user.uid) {
        bail!("the service's user `{}` is uid {}: it must be a user of its own", user.name, user.uid);
    }
    // The directory: root's, above which no client and no other user can rename or replace anything.
    out_of_reach("the service's directory", &layout.root, &client_uids)?;
    mkdir(&layout.root, 0o755, 0, 0)?;
    mkdir(&layout.bin_dir(), 0o755, 0, 0)?;
    let exe = std::env::current_exe().context("cannot find this executable")?;
    if exe.canonicalize().ok() != layout.binary().canonicalize().ok() {
        let bytes = std::fs::read(&exe).with_context(|| format!("cannot read `{}`", exe.display()))?;
        write_file(&layout.binary(), &bytes, 0o755, 0, 0)?;
    }
    mkdir(&layout.keys(), 0o700, user.uid, user.gid)?;
    let key = match std::fs::read_to_string(layout.private_key()) {
        // A reinstall keeps the key: receipts already signed stay provable by the same public key.
        Ok(pem) => runbook_host::signatures::dsse::read_private(&pem).map_err(|e| anyhow::anyhow!("`{}`: {e}", layout.private_key().display()))?,
        Err(_) => {
            let k = runbook_host::signatures::dsse::generate().map_err(|e| anyhow::anyhow!("{e}"))?;
            write_file(&layout.private_key(), runbook_host::signatures::dsse::private_pem(&k).as_bytes(), 0o600, user.uid, user.gid)?;
            k
        }
    };
    write_file(&layout.public_key(), runbook_host::signatures::dsse::public_pem(&key.verifying_key()).as_bytes(), 0o644, 0, 0)?;
    mkdir(&layout.runs(), 0o750, user.uid, user.gid)?;
    mkdir(&layout.cache(), 0o700, user.uid, user.gid)?;
    let config = svc::Config { user: user.name.clone(), port: i.port, clients: clients.clone(), hook_args: hook };
    write_file(&layout.config(), config.to_json().as_bytes(), 0o644, 0, 0)?;
    let names: Vec<&str> = clients.iter().map(|c| c.0.as_str()).collect();
    eprintln!(
        "runbook-host service: installed in {} for {} ({}): user `{}` (uid {}{}), 127.0.0.1:{}",
        layout.root.display(),
        names.join(", "),
        if clients.len() == 1 { "client" } else { "clients" },
        user.name,
        user.uid,
        if created { ", made now" } else { "" },
        i.port
    );
    eprintln!("runbook-host service: host key {} (public: {})", runbook_host::signatures::dsse::key_id(&key.verifying_key()), layout.public_key().display());
    let start = svc::start_command(&layout, &user.name);
    if svc::systemd_running() {
        write_file(&unit_path(&user.name), svc::systemd_unit(&layout, &user.name).as_bytes(), 0o644, 0, 0)?;
        run_tool("systemctl", &["daemon-reload"])?;
        let unit = format!("{}.service", user.name);
        if i.no_start {
            eprintln!("runbook-host service: wrote {}; start it with: systemctl enable --now {unit}", unit_path(&user.name).display());
        } else {
            // Restarted rather than only started: a reinstall's options take effect now.
            run_tool("systemctl", &["enable", &unit])?;
            run_tool("systemctl", &["restart", &unit])?;
            eprintln!("runbook-host service: started {unit} (systemctl status {unit})");
        }
    } else {
        if running {
            eprintln!("runbook-host service: the running service keeps its earlier options until it is restarted");
        }
        eprintln!("runbook-host service: systemd is not running here; start the service, as root, with:");
        outln!("{}", start.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "));
    }
    eprintln!(
        "runbook-host service: in each client's project: {} hook install --service {} --service-user {}",
        quote(&layout.binary().to_string_lossy()),
        i.port,
        quote(&user.name)
    );
    Ok(ExitCode::SUCCESS)
}

fn has_cap(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

fn run(w: &Where) -> Result<ExitCode> {
    let layout = Layout::new(&std::path::absolute(&w.state_dir)?);
    let config = svc::Config::read(&layout)?;
    let user = svc::lookup_user(&config.user)?.with_context(|| format!("the service's user `{}` does not exist", config.user))?;
    let start = svc::start_command(&layout, &user.name).iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ");
    let me = runbook_host::private::euid();
    if me != user.uid {
        bail!("the service runs as `{}` (uid {}), not uid {me}: start it with {start}", user.name, user.uid);
    }
    let caps = svc::effective_caps()?;
    for (cap, name, _) in svc::CAPS {
        if !has_cap(caps, cap) {
            let why = if cap == svc::CAP_NET_BIND_SERVICE { "to bind its privileged port" } else { "to find which client process holds a connection" };
            bail!("the service needs {name} {why}: start it with {start}");
        }
    }
    svc::check_privileged(config.port)?;
    // Its configuration and binary are root's: the service cannot change what it enforces.
    for p in [layout.config(), layout.binary()] {
        let m = std::fs::metadata(&p).with_context(|| format!("cannot read `{}`", p.display()))?;
        if m.uid() != 0 || m.mode() & 0o022 != 0 {
            bail!("`{}` must be root's and writable by no one else (reinstall: `runbook-host service install`)", p.display());
        }
    }
    // Before anything reads it: the registry cache and the compiled-module cache are the service's.
    std::env::set_var("RUNBOOK_HOST_CACHE", layout.cache());
    let mut args = config.hook_args.clone();
    args.extend(["--runs".into(), layout.runs().to_string_lossy().into_owned()]);
    args.extend(["--signing-key".into(), layout.private_key().to_string_lossy().into_owned()]);
    let h = HookOptions::try_parse_from(&args).map_err(|e| anyhow::anyhow!("{}: hook_args: {e}", layout.config().display()))?;
    let mut cfg = super::hook::config(&h.a)?;
    // No client's settings files: the service serves many projects, and a client's file is the agent's to
    // write. The runbook alone says which tools run.
    cfg.settings.clear();
    let policy = super::policy()?;
    let clients: Vec<u32> = config.clients.iter().map(|c| c.1).collect();
    let port = config.port;
    server::serve(policy, cfg, port, None, server::Access::Service { clients }, |port| {
        eprintln!("runbook-host service: listening on 127.0.0.1:{port} as `{}` for {}", user.name, layout.runs().display())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn client(w: &Where) -> Result<(svc::Config, server::Client)> {
    let layout = Layout::new(&std::path::absolute(&w.state_dir)?);
    let config = svc::Config::read(&layout)?;
    let user = svc::lookup_user(&config.user)?.with_context(|| format!("the service's user `{}` does not exist", config.user))?;
    let c = server::Client::service(config.port, user.uid, std::time::Duration::from_secs(10));
    Ok((config, c))
}

fn status(w: &Where) -> Result<ExitCode> {
    let (config, c) = client(w)?;
    match c.status() {
        Ok((200, body)) => {
            let v: serde_json::Value = serde_json::from_str(&body)?;
            outln!(
                "runbook-host service `{}`: pid {} on 127.0.0.1:{}, since {}, {} events decided, {} sessions open",
                config.user,
                v["pid"],
                v["port"],
                v["started"].as_str().unwrap_or("?"),
                v["decided"],
                v["open"]
            );
            Ok(ExitCode::SUCCESS)
        }
        Ok((code, body)) => {
            eprintln!("runbook-host service: the service answered {code}: {}", body.trim());
            Ok(ExitCode::from(1))
        }
        Err(e) => {
            eprintln!("runbook-host service: the service does not answer on 127.0.0.1:{}: {e}", config.port);
            Ok(ExitCode::from(1))
        }
    }
}

fn uninstall(u: &UninstallArgs) -> Result<ExitCode> {
    if !is_root() {
        bail!("`service uninstall` removes a system user and root-owned files: run it as root");
    }
    let layout = Layout::new(&std::path::absolute(&u.at.state_dir)?);
    let (config, c) = client(&u.at)?;
    if svc::systemd_running() && unit_path(&config.user).exists() {
        let _ = run_tool("systemctl", &["disable", "--now", &format!("{}.service", config.user)]);
        std::fs::remove_file(unit_path(&config.user))?;
        let _ = run_tool("systemctl", &["daemon-reload"]);
    } else if c.shutdown().is_ok() {
        // Wait for the port to close: the user is removed only once none of its processes runs.
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", config.port)).is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    for p in [layout.private_key(), layout.public_key(), layout.config(), layout.binary()] {
        let _ = std::fs::remove_file(p);
    }
    for d in [layout.keys(), layout.cache(), layout.bin_dir()] {
        let _ = std::fs::remove_dir_all(d);
    }
    let kept = if u.purge {
        std::fs::remove_dir_all(layout.runs()).ok();
        std::fs::remove_dir(&layout.root).ok();
        "removed the evidence too".to_string()
    } else if layout.runs().exists() {
        // The evidence outlives the user: given to root, so a later user of the same uid owns none of it.
        run_tool("chown", &["-R", "root:root", &layout.runs().to_string_lossy()])?;
        format!("kept the evidence in {} (now root's)", layout.runs().display())
    } else {
        String::new()
    };
    if svc::lookup_user(&config.user)?.is_some() {
        run_tool("userdel", &[&config.user])?;
    }
    eprintln!("runbook-host service: uninstalled `{}` from {}; {kept}", config.user, layout.root.display());
    Ok(ExitCode::SUCCESS)
}

pub fn run_command(a: Args) -> Result<ExitCode> {
    match &a.action {
        Action::Install(i) => install(i),
        Action::Run(w) => run(w),
        Action::Status(w) => status(w),
        Action::Uninstall(u) => uninstall(u),
    }
}
