//! `runbook-host`: the command-line face of the policy module. Every decision comes from the component.

mod commands;
mod diag;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "runbook-host", version, about = "Enforce runbooks on AI agents' tool calls with a deterministic policy module")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Lint a runbook: findings with line and column (exit 1 on errors)
    Lint(commands::lint::Args),
    /// Print the canonical policy envelope of a runbook, as JSON (`--format` only changes how findings are reported)
    Envelope(commands::envelope::Args),
    /// Admission: would a run of this runbook be refused under this client's claim, and why
    Check(commands::check::Args),
    /// Replay an event stream through the module: decisions as NDJSON, then the run report
    Replay(commands::replay::Args),
    /// The embedded policy component: its sha256, its WIT, or its bytes
    Module(commands::module::Args),
    /// Run a runbook as an MCP stdio proxy in front of one or more MCP servers
    Run(commands::run::Args),
    /// Approve (or refuse) a gated call of a run, from a terminal the agent cannot reach
    Approve(commands::approve::Args),
    /// The approval page: answer gated calls with a passkey, in a browser on this machine
    Approvals(commands::approvals::ApprovalsArgs),
    /// Approvers' passkeys: register one into an allowed-signers file
    Approvers(commands::approvals::ApproversArgs),
    /// Verify a run bundle: files, hashes, hash chain, and a replay through the module
    Verify(commands::verify::Args),
    /// Add runbooks to a directory registry, or list it
    Registry(commands::registry::Args),
    /// Write a redacted derivative of a run bundle (digests in place of raw arguments and results)
    Export(commands::verify::ExportArgs),
    /// Serve the envelope playground on 127.0.0.1
    Playground(commands::playground::Args),
    /// The tool-call hook for agent CLIs (Claude Code): one process per hook event
    Hook(commands::hook::Args),
    /// Separated mode: the enforcement as its own system user (install, run, status, uninstall)
    Service(commands::service::Args),
    /// Make an ed25519 key pair for signing documents, the component and receipts
    Keygen(commands::sign::KeygenArgs),
    /// Sign a runbook document (or the component) with a DSSE envelope beside it, `<FILE>.dsse.json`
    Sign(commands::sign::SignArgs),
}

/// Output format shared by the commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Lint(a) => commands::lint::run(a),
        Command::Envelope(a) => commands::envelope::run(a),
        Command::Check(a) => commands::check::run(a),
        Command::Replay(a) => commands::replay::run(a),
        Command::Module(a) => commands::module::run(a),
        Command::Run(a) => commands::run::run(a),
        Command::Approve(a) => commands::approve::run(a),
        Command::Approvals(a) => commands::approvals::approvals(a),
        Command::Approvers(a) => commands::approvals::approvers(a),
        Command::Verify(a) => commands::verify::run(a),
        Command::Registry(a) => commands::registry::run(a),
        Command::Export(a) => commands::verify::export(a),
        Command::Playground(a) => commands::playground::run(a),
        Command::Hook(a) => commands::hook::run(a),
        Command::Service(a) => commands::service::run_command(a),
        Command::Keygen(a) => commands::sign::keygen(a),
        Command::Sign(a) => commands::sign::sign(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // A closed pipe (`| head`) is not an error.
            if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) {
                return ExitCode::SUCCESS;
            }
            eprintln!("runbook-host: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
