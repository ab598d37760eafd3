//! `runbook-host approve RUN STEP [--runs .runbook/runs] [--deny]`: a human answers the gated calls of a
//! run's step from a terminal, the channel the agent cannot reach.
//!
//! RUN is a run id or `latest`; STEP is the step id (`-` for a manifest without steps, whose gated calls
//! have no step). Each pending call of STEP is shown (tool, arguments, the canonical hash of the exact
//! call, recomputed by the module) and confirmed on the controlling terminal (`/dev/tty`, never standard
//! input); without a terminal the command refuses. The answer is bound to that call's hash: a different
//! call needs a new approval. The approver is the operating-system user.
//!
//! Only requests the host issued are shown: the run is replayed (every link and decision checked) and a
//! request is answerable only when the module answered `needs-approval` to that exact call in the
//! current step. A request file someone else wrote into the run directory, one for a step the run has
//! left, or one of a run whose evidence does not check out is refused. A terminal is not proof of a
//! human (`script` gives any process one): where that matters, approvals are signed (`--sign`).

use anyhow::{Context, Result};
use runbook_host::run::approvals;
use runbook_host::run::{Guard, Run};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The run: its id, `latest`, or its directory (.runbook/runs/<run-id>, .runbook/runs/latest)
    pub run: String,
    /// The step whose gated calls to answer (`-` for calls without a step)
    pub step: String,
    /// Where the run bundles are
    #[arg(long, default_value = ".runbook/runs")]
    pub runs: PathBuf,
    /// Refuse the calls instead of approving them
    #[arg(long)]
    pub deny: bool,
    /// Sign each answer with this SSH private key (`ssh-keygen -Y sign`; a FIDO `-sk` key asks for a
    /// touch): required where the run's approvals must be signed
    #[arg(long, value_name = "KEY")]
    pub sign: Option<PathBuf>,
}

/// What a terminal shows of text an agent chose: control, bidirectional and invisible format characters
/// escaped, so no argument can redraw the prompt or hide part of the call.
pub fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let hidden = c.is_control() && c != '\n'
            || matches!(c, '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}');
        if hidden {
            out.push_str(&format!("\\u{{{:04x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

pub use runbook_host::run::approvals::pretty;

pub const NO_TERMINAL: &str = "approve needs a terminal: it is the channel the agent cannot reach";

pub fn run(args: Args) -> Result<ExitCode> {
    // The terminal first: without one, nothing is read or shown.
    let tty = match std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty") {
        Ok(t) => t,
        Err(_) => {
            eprintln!("runbook-host: {NO_TERMINAL}");
            return Ok(ExitCode::from(1));
        }
    };
    let mut out = tty.try_clone().context("the terminal")?;
    let mut input = BufReader::new(tty);

    let run_dir = runbook_host::bundle::resolve_run(&args.run, &args.runs).with_context(|| format!("run `{}`", args.run))?;
    let run_id = run_dir.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let want: Option<&str> = if args.step == "-" { None } else { Some(args.step.as_str()) };
    let calls: Vec<_> = approvals::pending(&run_dir)?.into_iter().filter(|p| p.step.as_deref() == want).collect();
    if calls.is_empty() {
        eprintln!("runbook-host: no call of step `{}` awaits an answer in run {run_id}", args.step);
        return Ok(ExitCode::from(1));
    }
    let policy = super::policy()?;
    let signed_required = runbook_host::files::read_path_bounded(&run_dir.join("run.json"), runbook_host::files::MAX_SMALL_FILE_BYTES)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|m| m["approvals"]["signed"] == true);
    if signed_required && args.sign.is_none() {
        eprintln!("runbook-host: run {run_id} takes signed approvals only: pass --sign KEY (an SSH private key listed in its allowed_signers)");
        return Ok(ExitCode::from(1));
    }
    // The run as the module replays it: which calls it asked a human about, in which step.
    let runs_root = run_dir.parent().unwrap_or(std::path::Path::new("."));
    let mut run = match Run::resume(policy.clone(), runs_root, &run_id, 0, None, Guard::default()) {
        Ok((run, _)) => run,
        Err(e) => {
            eprintln!("runbook-host: nothing is approved: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let approver = approvals::operator();
    let verb = if args.deny { "DENY" } else { "approve" };
    let mut answered = 0;
    for p in &calls {
        // The module's ledger names the request (the seq of its `needs-approval` decision) a signature answers.
        let Some(request) = run.request_for(p.step.as_deref(), &p.call_sha256).ok().flatten() else {
            writeln!(
                out,
                "request {} was not issued by the host (the policy module asked for no approval of that call in the run's current step); it is not shown and stays unanswered",
                p.id
            )?;
            continue;
        };
        let record = approvals::request_record(&run_dir, &p.id)?;
        let arguments_json = record["arguments_json"].as_str().unwrap_or("").to_string();
        // The hash shown is the module's, of the exact text the host hashed; a request whose hash is not
        // its call's is refused, never shown as something else.
        match policy.call_sha256(&p.tool, &arguments_json)? {
            Ok(h) if h == p.call_sha256 => {}
            _ => {
                writeln!(out, "request {} does not hash to its call; it is not shown and stays unanswered", p.id)?;
                continue;
            }
        }
        // Shown from the very text that was hashed (never from another field of the request), in the
        // module's canonical form: exact numbers, no reformatting by this host.
        let canonical = match policy.canonicalize(&arguments_json)? {
            Ok(c) => pretty(&c),
            Err(_) => arguments_json.clone(),
        };
        let args_shown = shown(&canonical);
        writeln!(out, "\nrun {run_id}, step {}: a gated call awaits an answer (request {})", args.step, p.id)?;
        writeln!(out, "  tool:        {}", shown(&p.tool))?;
        writeln!(out, "  arguments:   {}", args_shown.replace('\n', "\n               "))?;
        writeln!(out, "  call_sha256: {}", p.call_sha256)?;
        write!(out, "{verb} this exact call as {approver}? [y/N] ")?;
        out.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            writeln!(out)?;
            break;
        }
        let yes = matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes");
        if !yes {
            writeln!(out, "left unanswered")?;
            continue;
        }
        let signature = match &args.sign {
            Some(key) => {
                let message = approvals::signed_message(&run_id, request, p.step.as_deref(), &p.call_sha256, !args.deny)?;
                match runbook_host::signatures::sshsig::sign_with_ssh_keygen(key, runbook_host::signatures::SIGNATURE_NAMESPACE, message.as_bytes()) {
                    Ok(sig) => Some(sig),
                    Err(e) => {
                        writeln!(out, "not signed ({e}); left unanswered")?;
                        continue;
                    }
                }
            }
            None => None,
        };
        match approvals::answer_signed(&run_dir, &p.id, &approver, !args.deny, &p.call_sha256, signature.as_deref()) {
            Ok(()) => {
                answered += 1;
                let what = if args.deny { "denied" } else { "approved" };
                writeln!(out, "{what} by {approver}")?;
                outln!("{what} {} step={} tool={} call_sha256={} approver={approver}", p.id, args.step, shown(&p.tool), p.call_sha256);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => writeln!(out, "already answered")?,
            Err(e) => return Err(e).context("writing the answer"),
        }
    }
    Ok(if answered > 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
