//! `runbook-host approvals serve`: the approval page on 127.0.0.1 for runs whose host serves none of its
//! own (stdio proxies, command hooks); `runbook-host approvers add NAME`: registers a passkey for an
//! approver, in the browser, into the allowed-signers file (runbook_host::web, runbook_host::signatures::passkey).

use anyhow::{bail, Context, Result};
use runbook_host::web::{self, ApprovalPage, Registration};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub command: ApprovalsCommand,
}

#[derive(clap::Subcommand)]
pub enum ApprovalsCommand {
    /// Serve the approval page on 127.0.0.1: the gated calls of open runs, each answered with a passkey
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Where the run bundles are
    #[arg(long, default_value = ".runbook/runs")]
    pub runs: PathBuf,
    /// The allowed-signers file whose passkeys may answer (`approvers add` writes it); keep it where the
    /// agent cannot write
    #[arg(long, value_name = "FILE")]
    pub allowed_signers: PathBuf,
    /// The port on 127.0.0.1; 0 picks a free one (the URL printed on stdout names it)
    #[arg(long, default_value_t = 0)]
    pub port: u16,
}

#[derive(clap::Args)]
pub struct ApproversArgs {
    #[command(subcommand)]
    pub command: ApproversCommand,
}

#[derive(clap::Subcommand)]
pub enum ApproversCommand {
    /// Register a passkey for approver NAME: serves a page on 127.0.0.1, and writes the passkey's public
    /// key into the allowed-signers file once the browser created it (user verification required)
    Add(AddArgs),
}

#[derive(clap::Args)]
pub struct AddArgs {
    /// The approver's principal, as approvals will name them
    pub name: String,
    /// The allowed-signers file to add the passkey to (created when missing)
    #[arg(long, value_name = "FILE")]
    pub allowed_signers: PathBuf,
    /// The port on 127.0.0.1; 0 picks a free one
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// How long to wait for the browser, in seconds
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting the async runtime")
}

pub fn approvals(args: ApprovalsArgs) -> Result<ExitCode> {
    let ApprovalsCommand::Serve(a) = args.command;
    // The page answers only with passkeys of this file: refuse to start on one that does not parse.
    if a.allowed_signers.exists() {
        runbook_host::signatures::sshsig::AllowedSigners::load(&a.allowed_signers).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, a.port))
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{}", a.port))?;
        let port = listener.local_addr()?.port();
        let page = Arc::new(ApprovalPage { runs: a.runs.clone(), allowed_signers: a.allowed_signers.clone(), port });
        outln!("http://localhost:{port}/approvals");
        std::io::stdout().flush()?;
        eprintln!("serving the approval page for the runs in {}; Ctrl-C stops", a.runs.display());
        let app = web::approvals_router(page);
        let limits = runbook_host::net::listen::Limits { max_connections: 64, idle_timeout: Some(Duration::from_secs(30)), ..Default::default() };
        runbook_host::net::listen::serve(listener, app, limits, std::future::pending()).await.context("serving the approval page")?;
        Ok(ExitCode::SUCCESS)
    })
}

pub fn approvers(args: ApproversArgs) -> Result<ExitCode> {
    let ApproversCommand::Add(a) = args.command;
    let existing = match std::fs::read_to_string(&a.allowed_signers) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", a.allowed_signers.display())),
    };
    runbook_host::signatures::sshsig::AllowedSigners::parse(&existing).map_err(|e| anyhow::anyhow!("{}: {e}", a.allowed_signers.display()))?;
    // The principal is checked before any page is served.
    runbook_host::signatures::passkey::check_principal(&a.name).map_err(|e| anyhow::anyhow!(e))?;
    let random = |n: usize| -> Result<Vec<u8>> {
        let mut v = vec![0u8; n];
        getrandom::fill(&mut v).map_err(|e| anyhow::anyhow!("the system's random source: {e}"))?;
        Ok(v)
    };
    let (user_id, create_challenge, proof_challenge) = (random(16)?, random(32)?, random(32)?);
    let (name, want_port, timeout) = (a.name.clone(), a.port, a.timeout);
    let line = runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, want_port))
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{want_port}"))?;
        let port = listener.local_addr()?.port();
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let reg = Arc::new(Registration { principal: name.clone(), port, user_id, create_challenge, proof_challenge, done: tx });
        outln!("http://localhost:{port}/register");
        std::io::stdout().flush()?;
        eprintln!("open the page above in a browser with your passkey's authenticator, to register a passkey for {name}");
        let limits = runbook_host::net::listen::Limits { max_connections: 16, idle_timeout: Some(Duration::from_secs(30)), ..Default::default() };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(runbook_host::net::listen::serve(listener, web::register_router(reg), limits, async move {
            let _ = stop_rx.await;
        }));
        let line = tokio::time::timeout(Duration::from_secs(timeout), rx.recv()).await;
        let _ = stop_tx.send(());
        let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
        match line {
            Ok(Some(line)) => Ok(line),
            _ => bail!("no passkey was registered within {timeout} s"),
        }
    })?;
    // Appended to the text read above (re-read now: another registration may have landed meanwhile), in
    // one atomic rename, so the file is never half-written.
    let now = match std::fs::read_to_string(&a.allowed_signers) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", a.allowed_signers.display())),
    };
    let mut text = now;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&line);
    text.push('\n');
    runbook_host::signatures::sshsig::AllowedSigners::parse(&text).map_err(|e| anyhow::anyhow!("the new line does not parse: {e}"))?;
    // The new file keeps the old one's permissions (an allowed_signers file is often root's, 0644).
    let mode = std::fs::metadata(&a.allowed_signers).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777).unwrap_or(0o644);
    runbook_host::files::write_atomic_path(&a.allowed_signers, text.as_bytes(), Some(mode))
        .with_context(|| format!("cannot replace {}", a.allowed_signers.display()))?;
    outln!("{line}");
    eprintln!("added a passkey for {} to {}", a.name, a.allowed_signers.display());
    Ok(ExitCode::SUCCESS)
}
