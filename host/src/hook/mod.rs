//! The tool-call hook adapter (DESIGN 5, 9.19-9.24): one process per hook event. Every decision comes
//! from the policy module; this module keeps a run's state across processes by replaying the bundle's
//! recorded events through a fresh module session (checking the hash chain and every recorded decision
//! on the way, so a tampered or corrupted bundle fails closed), and decides the events of one session one
//! at a time under a file lock, in the order they are recorded.
//!
//! ```text
//! <runs>/.hook/<session>.json   runbook-hook-session/v1: {schema, session_id, run_id, t0_ms}
//! <runs>/.hook/<session>.lock   the session's lock file (made at SessionStart; a missing one denies)
//! ```

pub mod claude;

use anyhow::{anyhow, bail, Context, Result};
use runbook_host::bundle::{self, chain_next_with, event_record_line, Bundle};
use runbook_host::{approvals, registry, Policy, Session};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const STATE_SCHEMA: &str = "runbook-hook-session/v1";
pub const ADAPTER: &str = "hook";

/// One hook event, client-neutral.
#[derive(Debug)]
pub enum HookEvent {
    SessionStart {
        session: String,
    },
    PreToolUse {
        session: String,
        tool: String,
        input: Value,
        call_id: Option<String>,
    },
    /// `failed`: the client reported the call as failed (its error is the result).
    PostToolUse {
        session: String,
        tool: String,
        response: Value,
        call_id: Option<String>,
        failed: bool,
    },
    /// `again`: the client is already continuing because of an earlier block of its stop.
    Stop {
        session: String,
        again: bool,
    },
    SessionEnd {
        session: String,
    },
}

impl HookEvent {
    pub fn session(&self) -> &str {
        match self {
            HookEvent::SessionStart { session }
            | HookEvent::PreToolUse { session, .. }
            | HookEvent::PostToolUse { session, .. }
            | HookEvent::Stop { session, .. }
            | HookEvent::SessionEnd { session } => session,
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            HookEvent::SessionStart { .. } => "SessionStart",
            HookEvent::PreToolUse { .. } => "PreToolUse",
            HookEvent::PostToolUse { .. } => "PostToolUse",
            HookEvent::Stop { .. } => "Stop",
            HookEvent::SessionEnd { .. } => "SessionEnd",
        }
    }
}

/// What the hook answers the client.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// No decision: the client's own rules apply.
    Pass,
    /// A tool call denied, with the reason the agent sees.
    Deny(String),
    /// A stop (or a tool's aftermath) blocked, with the reason.
    Block(String),
    /// A message for the user, nothing blocked.
    Note(String),
}

pub struct Config {
    pub runbook: Option<String>,
    pub registry: String,
    pub runs: PathBuf,
    pub profile: String,
    pub keep_working: bool,
    pub restore: Restore,
}

/// Timings of one hook process's work (for the benchmark; printed with RUNBOOK_HOOK_TIMING=1).
#[derive(Default, Debug)]
pub struct Timing {
    /// Events recorded before this process's event.
    pub events_replayed: usize,
    pub restore_us: u128,
    /// `snapshot` or `replay`: how the state was restored this time.
    pub restored_from: &'static str,
    /// Events whose chain link was recomputed (the rest were described by the previous process's record).
    pub chain_checked: usize,
    /// Why the module refused the snapshot, when it did (the run was then replayed).
    pub snapshot_refused: Option<String>,
    /// Loading the policy module (from the precompiled cache), deciding and recording the event, and
    /// leaving the record for the next process.
    pub load_us: u128,
    pub decide_us: u128,
    pub save_us: u128,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

fn hook_dir(runs: &Path) -> PathBuf {
    runs.join(".hook")
}

fn check_session(session: &str) -> Result<()> {
    if !bundle::is_safe_name(session) {
        bail!("`{session}` is not a usable session id");
    }
    Ok(())
}

/// The session's lock, held until dropped. `create` only at SessionStart: a lock file that disappeared
/// later means someone tampered with the session's state, and the hook fails closed.
fn lock(runs: &Path, session: &str, create: bool) -> Result<File> {
    let p = hook_dir(runs).join(format!("{session}.lock"));
    let f = if create {
        std::fs::create_dir_all(hook_dir(runs)).context("cannot create the hook state directory")?;
        OpenOptions::new().write(true).create(true).truncate(false).open(&p)
    } else {
        OpenOptions::new().write(true).open(&p)
    }
    .with_context(|| format!("the session's lock file .hook/{session}.lock is missing or unusable (was SessionStart run?)"))?;
    f.lock().context("cannot lock the session")?;
    Ok(f)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// How a hook process restores the run's state from the bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restore {
    /// From the module's canonical session snapshot that the previous process left (`<session>.snapshot`),
    /// when it was taken of exactly the `events.ndjson` bytes now on disk; otherwise by a full replay.
    Snapshot,
    /// By replaying every recorded event through a new module session (checking each recorded decision).
    Replay,
}

/// `<runs>/.hook/<session>.snapshot` (`runbook-hook-snapshot/v1`), rewritten by every hook process: the
/// events file it describes (its length and sha256), the chain's head and count at that point, the last
/// `at`, and (with [`Restore::Snapshot`]) the module's session snapshot. It is a cache: when the events
/// file is not byte for byte the one described, the run is restored by replaying it with every chain link
/// recomputed, so an edited, truncated or extended `events.ndjson` is always checked in full.
pub const SNAPSHOT_SCHEMA: &str = "runbook-hook-snapshot/v1";

/// A restored run: the reopened bundle, the module session in the state after every recorded event, and
/// the running sha256 of `events.ndjson` (extended with each line this process appends).
pub struct Run {
    pub run_id: String,
    pub bundle: Bundle,
    pub session: Session,
    pub last_at: u64,
    pub t0_ms: u64,
    events_hash: Sha256,
    events_len: u64,
}

fn load_state(runs: &Path, session: &str) -> Result<Value> {
    let p = hook_dir(runs).join(format!("{session}.json"));
    let bytes = std::fs::read(&p).with_context(|| format!("no hook state for session `{session}` (was SessionStart run?)"))?;
    let v: Value = serde_json::from_slice(&bytes).context("the hook state file is not JSON")?;
    if v["schema"] != STATE_SCHEMA || v["session_id"] != session {
        bail!("the hook state file of session `{session}` is not a {STATE_SCHEMA} of this session");
    }
    Ok(v)
}

fn snapshot_path(runs: &Path, session: &str) -> PathBuf {
    hook_dir(runs).join(format!("{session}.snapshot"))
}

/// Restores the run of `session` from its bundle (see [`Restore`] and [`SNAPSHOT_SCHEMA`]).
pub fn restore(policy: &Policy, runs: &Path, session: &str, how: Restore, timing: &mut Timing) -> Result<Run> {
    let t = Instant::now();
    let state = load_state(runs, session)?;
    let run_id = state["run_id"].as_str().filter(|r| bundle::is_safe_name(r)).ok_or_else(|| anyhow!("the hook state names no usable run"))?.to_string();
    let t0_ms = state["t0_ms"].as_u64().ok_or_else(|| anyhow!("the hook state has no t0_ms"))?;
    let mut b = Bundle::open(runs, &run_id)?;
    let doc = b.document()?;
    let bytes = b.events_bytes().with_context(|| format!("run {run_id}: events.ndjson is missing"))?;
    let events_hash = Sha256::new().chain_update(&bytes);
    let events_sha = hex::encode(events_hash.clone().finalize());
    // The record the previous process left, when it describes exactly these bytes.
    // The record the previous process left, when it describes exactly these bytes: their length and
    // sha256, their line count and the last line's `h` (the chain continues from the file's own last line).
    let (lines, last_h) = tail_of(&bytes);
    let head_now = last_h.unwrap_or(b.chain_head()).to_string();
    let snap = std::fs::read(snapshot_path(runs, session)).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()).filter(|s| {
        s["schema"] == SNAPSHOT_SCHEMA
            && s["run_id"] == run_id.as_str()
            && s["events_len"] == bytes.len()
            && s["events_sha256"] == events_sha.as_str()
            && s["lines"] == lines
            && s["head"] == head_now.as_str()
    });
    let from_snapshot = match (&snap, how) {
        (Some(s), Restore::Snapshot) => match s["session"].as_str() {
            Some(text) => match policy.restore(&doc, text)? {
                Ok(sess) => Some(sess),
                Err(e) => {
                    timing.snapshot_refused = Some(e);
                    None
                }
            },
            None => None,
        },
        _ => None,
    };
    let (session_, head, lines, last_at) = match (from_snapshot, &snap) {
        (Some(sess), Some(s)) => {
            timing.restored_from = "snapshot";
            (sess, head_now, lines, s["last_at"].as_u64().unwrap_or(0))
        }
        _ => {
            let records = bundle::read_events(&bytes).map_err(|(n, m)| anyhow!("run {run_id}: events.ndjson:{n}: {m}"))?;
            // A record that describes these bytes means the previous process checked their chain; else in full.
            let checked = if snap.is_some() { records.len() } else { 0 };
            let mut head = b.chain_head().to_string();
            let mut sess = policy.session(&doc)?;
            let mut last_at = 0;
            for (i, r) in records.iter().enumerate() {
                if i >= checked && chain_next_with(policy, &head, &r.event_line, &r.decision_line) != r.h {
                    bail!("run {run_id}: events.ndjson:{}: the hash chain is broken", i + 1);
                }
                head = r.h.clone();
                if sess.handle_line(&r.event_line) != r.decision_line {
                    bail!("run {run_id}: events.ndjson:{}: the module decides this event differently than recorded", i + 1);
                }
                if let Some(at) = serde_json::from_str::<Value>(&r.event_line).ok().and_then(|v| v["at"].as_u64()) {
                    last_at = last_at.max(at);
                }
            }
            timing.chain_checked = records.len() - checked;
            timing.restored_from = "replay";
            (sess, head, records.len() as u64, last_at)
        }
    };
    b.resume_chain(head, lines);
    timing.events_replayed = lines as usize;
    timing.restore_us = t.elapsed().as_micros();
    Ok(Run { run_id, bundle: b, session: session_, last_at, t0_ms, events_hash, events_len: bytes.len() as u64 })
}

/// The number of lines of an events file and the `h` of its last one (read from the line's fixed prefix;
/// a line that does not have one gives None, and the full replay that follows names the problem).
fn tail_of(bytes: &[u8]) -> (u64, Option<&str>) {
    let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let last = &body[body.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)..];
    let h = last.strip_prefix(b"{\"h\":\"").and_then(|r| r.get(..64)).and_then(|h| std::str::from_utf8(h).ok());
    (lines, if bytes.is_empty() { None } else { h })
}

impl Run {
    pub fn finished(&self) -> bool {
        self.bundle.is_finished()
    }

    pub fn dir(&self) -> &Path {
        self.bundle.dir()
    }

    /// Feeds one event (a JSON object without `at`: the hook adds it), records it, returns the decision.
    pub fn feed(&mut self, policy: &Policy, mut event: Value) -> Result<Value> {
        if self.finished() {
            bail!("run {} is finished; start a new session for a new run", self.run_id);
        }
        let at = now_ms().saturating_sub(self.t0_ms).max(self.last_at);
        self.last_at = at;
        event["at"] = json!(at);
        let line = policy.canonicalize(&event.to_string())?.map_err(|e| anyhow!("the event could not be encoded: {e}"))?;
        let decision_line = self.session.handle_line(&line);
        self.bundle.record(&line, &decision_line).with_context(|| format!("run {}: cannot record the event", self.run_id))?;
        let written = event_record_line(self.bundle.chain_head(), &line, &decision_line);
        self.events_hash.update(written.as_bytes());
        self.events_len += written.len() as u64;
        let d: Value = serde_json::from_str(&decision_line).context("the module answered something that is not a decision")?;
        if d["reason"] == "host-trap" {
            bail!("the policy module trapped: {}", self.session.trapped().unwrap_or("?"));
        }
        Ok(d)
    }

    /// Leaves the record the next process restores from (see [`SNAPSHOT_SCHEMA`]).
    pub fn save(&mut self, runs: &Path, session: &str, how: Restore) -> Result<()> {
        let path = snapshot_path(runs, session);
        if self.finished() {
            let _ = std::fs::remove_file(&path);
            return Ok(());
        }
        let snapshot = match how {
            Restore::Snapshot => Some(self.session.snapshot()?),
            Restore::Replay => None,
        };
        let rec = json!({"schema": SNAPSHOT_SCHEMA, "run_id": self.run_id, "events_len": self.events_len,
            "events_sha256": hex::encode(self.events_hash.clone().finalize()), "head": self.bundle.chain_head(),
            "lines": self.bundle.events_recorded(), "last_at": self.last_at, "session": snapshot});
        // Rewritten in place, not through a new file and a rename (which cost more than the decision): a
        // record torn by a crash is not JSON, or does not match the events file, and the next process replays.
        let bytes = rec.to_string();
        let mut f = OpenOptions::new().write(true).create(true).truncate(false).open(&path).context("cannot write the hook snapshot")?;
        f.write_all(bytes.as_bytes())?;
        f.set_len(bytes.len() as u64)?;
        Ok(())
    }

    pub fn report(&mut self) -> Result<Value> {
        Ok(serde_json::from_str(&self.session.report()?)?)
    }

    /// Ends the bundle (report, run.json, receipt, latest.json, history), from another process than the
    /// one that created it.
    pub fn finish(&mut self) -> Result<()> {
        let report = self.session.report()?;
        self.bundle.finish(&report).with_context(|| format!("run {}: cannot finish the bundle", self.run_id))
    }

    fn at_terminal(&mut self) -> Result<bool> {
        Ok(!self.report()?["terminal"].is_null())
    }
}

/// Whether a call names the approval channel, the evidence or the host itself (DESIGN 9.20): any string
/// (key or value) of the input containing the runs dir, the registry dir or `runbook-host`.
pub fn guarded(input: &Value, cfg: &Config) -> bool {
    let mut needles: Vec<String> = vec!["runbook-host".into()];
    for p in [cfg.runs.clone(), PathBuf::from(&cfg.registry)] {
        let s = p.to_string_lossy().trim_start_matches("./").to_string();
        if s.len() > 3 {
            needles.push(s);
        }
        if let Ok(c) = p.canonicalize() {
            needles.push(c.to_string_lossy().into_owned());
        }
    }
    bundle::names_any(input, &needles)
}

fn explain(d: &Value) -> String {
    let code = if d["reason"] == "guarded" { "guarded" } else { d["deviation"].as_str().or(d["reason"].as_str()).unwrap_or("denied") };
    let step = d["step"].as_str().unwrap_or("-");
    let what = match code {
        "undeclared-tool" => "no capability of the runbook allows this call (tool, or a shell command no `when` matches)",
        "out-of-scope-tool" => "the runbook allows this tool, but not in the current step",
        "out-of-order-step" => "the call belongs to a step that is not the current one",
        "budget-exhausted" => "the step's retry budget is spent",
        "guarded" => "the call names the run's evidence, the approval channel, the registry or runbook-host itself, which no agent may touch",
        "run-ended" | "halted" => "the supervised run is over",
        _ => "the runbook's policy module refused it",
    };
    format!("runbook: {} {code} at step `{step}` (seq {}): {what}", d["decision"].as_str().unwrap_or("deny"), d["seq"])
}

/// Handles one event. Errors are the caller's to turn into a fail-closed answer.
pub fn handle(policy: &Policy, cfg: &Config, ev: &HookEvent, timing: &mut Timing) -> Result<Answer> {
    check_session(ev.session())?;
    let session = ev.session();
    if let HookEvent::SessionStart { .. } = ev {
        return start(policy, cfg, session);
    }
    let _lock = lock(&cfg.runs, session, false)?;
    let mut run = restore(policy, &cfg.runs, session, cfg.restore, timing)?;
    let t = Instant::now();
    let answer = decide(policy, cfg, ev, &mut run)?;
    timing.decide_us = t.elapsed().as_micros();
    let t = Instant::now();
    run.save(&cfg.runs, session, cfg.restore)?;
    timing.save_us = t.elapsed().as_micros();
    Ok(answer)
}

fn decide(policy: &Policy, cfg: &Config, ev: &HookEvent, run: &mut Run) -> Result<Answer> {
    match ev {
        HookEvent::SessionStart { .. } => unreachable!(),
        HookEvent::PreToolUse { tool, input, call_id, .. } => {
            if run.finished() {
                return Ok(Answer::Deny(format!("runbook: run {} is finished; no further tool calls are supervised in this session", run.run_id)));
            }
            let arguments_json = policy.canonicalize(&input.to_string())?.map_err(|e| anyhow!("the tool input could not be canonicalized: {e}"))?;
            let sha = policy.call_sha256(tool, &arguments_json)?.map_err(|e| anyhow!("the call could not be hashed: {e}"))?;
            let guard = guarded(input, cfg);
            if !guard {
                if let Some((id, g)) = approvals::answered_for(run.dir(), &sha)? {
                    let rec = approvals::request_record(run.dir(), &id)?;
                    run.feed(
                        policy,
                        json!({"type": "approval", "step": rec["step"], "call_sha256": g.call_sha256, "approver": g.approver, "granted": g.granted}),
                    )?;
                    approvals::consume(run.dir(), &id)?;
                }
            }
            let mut ev = json!({"type": "invoke", "tool": tool, "arguments": serde_json::from_str::<Value>(&arguments_json)?, "call_id": call_id});
            if guard {
                ev["guard"] = json!(true);
            }
            let d = run.feed(policy, ev)?;
            match d["decision"].as_str() {
                Some("allow") => Ok(Answer::Pass),
                Some("needs-approval") => {
                    let step = d["step"].as_str();
                    let existing = approvals::pending(run.dir())?.into_iter().find(|p| p.call_sha256 == sha && p.step.as_deref() == step);
                    if existing.is_none() {
                        approvals::request(run.dir(), step, tool, &arguments_json, &sha)?;
                    }
                    Ok(Answer::Deny(format!(
                        "runbook: needs-approval: step `{}` is gated; `{tool}` with these exact arguments (call sha256 {sha}) awaits a human's approval: run `runbook-host approve {} {}` in another terminal, then retry this same call. Do not try another way around the gate.",
                        step.unwrap_or("-"),
                        run.run_id,
                        step.unwrap_or("-")
                    )))
                }
                _ => Ok(Answer::Deny(explain(&d))),
            }
        }
        HookEvent::PostToolUse { tool, response, call_id, failed, .. } => {
            if run.finished() {
                return Ok(Answer::Block(format!("runbook: run {} is finished", run.run_id)));
            }
            let d = run.feed(
                policy,
                json!({"type": "result", "tool": tool, "result": response, "is_error": *failed || claude::is_error(response), "call_id": call_id}),
            )?;
            if d["decision"] == "halt" || run.session.is_over() {
                let outcome = run.report()?["outcome"].clone();
                return Ok(Answer::Block(format!(
                    "runbook: the run halted ({}; outcome {outcome}); stop and tell the user",
                    d["reason"].as_str().or(d["deviation"].as_str()).unwrap_or("halt")
                )));
            }
            Ok(Answer::Pass)
        }
        HookEvent::Stop { again, .. } => {
            if run.finished() {
                return Ok(Answer::Pass);
            }
            if deadline_passed(run)? {
                run.feed(policy, json!({"type": "tick"}))?;
            }
            if run.at_terminal()? || run.session.is_over() {
                end(policy, run)?;
                return Ok(Answer::Pass);
            }
            let step = run.session.status().unwrap_or_default();
            let msg = format!("runbook: run {} has not reached a terminal (status {step}); the procedure is incomplete", run.run_id);
            if cfg.keep_working && !again {
                Ok(Answer::Block(format!("{msg}. Keep working towards a terminal of the runbook.")))
            } else {
                Ok(Answer::Note(msg))
            }
        }
        HookEvent::SessionEnd { .. } => {
            if !run.finished() {
                end(policy, run)?;
            }
            Ok(Answer::Pass)
        }
    }
}

fn end(policy: &Policy, run: &mut Run) -> Result<()> {
    if !run.session.is_over() {
        run.feed(policy, json!({"type": "end", "reason": "normal"}))?;
    }
    run.finish()
}

/// Whether a checkpoint of the run has a deadline that passed while it is still pending: the hook has no
/// timer between processes, so at a stop it feeds a `tick` to let the module fail the run then (9.21).
fn deadline_passed(run: &mut Run) -> Result<bool> {
    let Ok(bytes) = std::fs::read(run.dir().join("envelope.json")) else { return Ok(false) };
    let env: Value = serde_json::from_slice(&bytes).context("envelope.json is not JSON")?;
    let now = now_ms().saturating_sub(run.t0_ms);
    let report = run.report()?;
    Ok(env["checkpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["timeout_ms"].as_u64().is_some_and(|t| now > t) && c["id"].as_str().is_some_and(|id| report["checkpoints"][id]["status"] == "pending")))
}

fn start(policy: &Policy, cfg: &Config, session: &str) -> Result<Answer> {
    let _lock = lock(&cfg.runs, session, true)?;
    let state_path = hook_dir(&cfg.runs).join(format!("{session}.json"));
    if state_path.exists() {
        // A resumed session (`--resume`, `/clear`, compaction) keeps its run.
        load_state(&cfg.runs, session)?;
        return Ok(Answer::Pass);
    }
    let reference = cfg.runbook.as_deref().ok_or_else(|| anyhow!("no runbook configured: pass --runbook REF (or set RUNBOOK_HOOK_RUNBOOK)"))?;
    let doc = registry::resolve(reference, &cfg.registry).map_err(|e| anyhow!("{e}"))?;
    let envelope = match policy.envelope(&doc.bytes)? {
        Ok(e) => e,
        Err(f) => bail!("the runbook does not lint clean ({} findings): run `runbook-host lint`", f.len()),
    };
    let env_v: Value = serde_json::from_str(&envelope)?;
    let mut tools: Vec<String> =
        env_v["capabilities"].as_object().map(|c| c.values().filter_map(|v| v["tool"].as_str().map(str::to_string)).collect()).unwrap_or_default();
    tools.sort();
    tools.dedup();
    let run_id = bundle::new_run_id();
    let mut b = Bundle::create(&cfg.runs, &run_id, &doc, Some(&envelope), runbook_host::module_sha256(), ADAPTER).context("cannot create the run bundle")?;
    let t0_ms = now_ms();
    let mut state = serde_json::to_string_pretty(&json!({"schema": STATE_SCHEMA, "session_id": session, "run_id": run_id, "t0_ms": t0_ms}))?;
    state.push('\n');
    let mut s = policy.session(&doc.bytes)?;
    let claim = json!({"type": "start", "at": 0, "run_id": run_id, "profile": cfg.profile, "allowlist": tools, "risk_ceiling": "irreversible",
        "coverage": "complete", "agent": format!("claude-code:{session}")});
    let line = policy.canonicalize(&claim.to_string())?.map_err(|e| anyhow!("{e}"))?;
    let d = s.handle_line(&line);
    b.record(&line, &d)?;
    let dv: Value = serde_json::from_str(&d)?;
    let admitted = dv["decision"] == "allow";
    b.admitted(admitted)?;
    if !admitted {
        b.finish(&s.report()?)?;
        bail!("admission refused the run of {reference}: {}", dv["refusals"]);
    }
    write_atomic(&state_path, state.as_bytes())?;
    Ok(Answer::Note(format!(
        "runbook: supervising this session with {} (run {run_id}, {}); every tool call is decided by its policy module",
        doc.reference, cfg.profile
    )))
}
