//! `runbook-host`: the command-line face of the policy module. Every decision comes from the component.

mod cli;
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
    Lint(cli::lint::Args),
    /// Print the canonical policy envelope of a runbook, as JSON (`--format` only changes how findings are reported)
    Envelope(cli::envelope::Args),
    /// Admission: would a run of this runbook be refused under this client's claim, and why
    Check(cli::check::Args),
    /// Replay an event stream through the module: decisions as NDJSON, then the run report
    Replay(cli::replay::Args),
    /// The embedded policy component: its sha256, its WIT, or its bytes
    Module(cli::module::Args),
    /// Run a runbook as an MCP stdio proxy in front of one or more MCP servers
    Run(cli::run::Args),
    /// Approve (or refuse) a gated call of a run, from a terminal the agent cannot reach
    Approve(cli::approve::Args),
    /// The approval page: answer gated calls with a passkey, in a browser on this machine
    Approvals(cli::approvals::ApprovalsArgs),
    /// Approvers' passkeys: register one into an allowed-signers file
    Approvers(cli::approvals::ApproversArgs),
    /// Verify a run bundle: files, hashes, hash chain, and a replay through the module
    Verify(cli::verify::Args),
    /// Add runbooks to a directory registry, or list it
    Registry(cli::registry::Args),
    /// Write a redacted derivative of a run bundle (digests in place of raw arguments and results)
    Export(cli::export::ExportArgs),
    /// Serve the envelope playground on 127.0.0.1
    Playground(cli::playground::Args),
    /// The tool-call hook for agent CLIs (Claude Code): one process per hook event
    Hook(cli::hook::Args),
    /// Separated mode: the enforcement as its own system user (install, run, status, uninstall)
    Service(cli::service::Args),
    /// Make an ed25519 key pair for signing documents, the component and receipts
    Keygen(cli::keygen::KeygenArgs),
    /// Sign a runbook document (or the component) with a DSSE envelope beside it, `<FILE>.dsse.json`
    Sign(cli::sign::SignArgs),
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
        Command::Lint(a) => cli::lint::run(a),
        Command::Envelope(a) => cli::envelope::run(a),
        Command::Check(a) => cli::check::run(a),
        Command::Replay(a) => cli::replay::run(a),
        Command::Module(a) => cli::module::run(a),
        Command::Run(a) => cli::run::run(a),
        Command::Approve(a) => cli::approve::run(a),
        Command::Approvals(a) => cli::approvals::approvals(a),
        Command::Approvers(a) => cli::approvals::approvers(a),
        Command::Verify(a) => cli::verify::run(a),
        Command::Registry(a) => cli::registry::run(a),
        Command::Export(a) => cli::export::export(a),
        Command::Playground(a) => cli::playground::run(a),
        Command::Hook(a) => cli::hook::run(a),
        Command::Service(a) => cli::service::run_command(a),
        Command::Keygen(a) => cli::keygen::keygen(a),
        Command::Sign(a) => cli::sign::sign(a),
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
