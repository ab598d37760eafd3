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
use runbook_host::bundle::{self, chain_next_with, event_record_line, read_events, sha256_hex, Bundle};
use runbook_host::{approvals, registry, Policy, Session};
use serde_json::{json, Value};
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
}

/// Timings of one hook process's work (for the benchmark; printed with RUNBOOK_HOOK_TIMING=1).
#[derive(Default, Debug)]
pub struct Timing {
    pub events_replayed: usize,
    pub restore_us: u128,
    /// Events whose chain link was recomputed (the rest matched the cache of an earlier check).
    pub chain_checked: usize,
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

/// A cache file: atomic, not synced (losing it costs one full chain check).
fn write_cache(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// A restored run: the module session after replaying every recorded event, and the chain's state.
pub struct Run {
    pub run_id: String,
    pub dir: PathBuf,
    pub session: Session,
    pub head: String,
    pub last_at: u64,
    pub t0_ms: u64,
    pub finished: bool,
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

/// Restores the run of `session` by replaying its bundle (chain and decisions checked).
pub fn restore(policy: &Policy, runs: &Path, session: &str, timing: &mut Timing) -> Result<Run> {
    let t = Instant::now();
    let state = load_state(runs, session)?;
    let run_id = state["run_id"].as_str().filter(|r| bundle::is_safe_name(r)).ok_or_else(|| anyhow!("the hook state names no usable run"))?.to_string();
    let t0_ms = state["t0_ms"].as_u64().ok_or_else(|| anyhow!("the hook state has no t0_ms"))?;
    let dir = runs.join(&run_id);
    let run: Value = serde_json::from_slice(&std::fs::read(dir.join("run.json")).with_context(|| format!("run {run_id}: run.json is missing"))?)
        .with_context(|| format!("run {run_id}: run.json is not JSON"))?;
    let doc_file = match run["artifacts"]["document"].as_str() {
        Some(f @ ("runbook.yaml" | "runbook.json")) => f,
        _ => bail!("run {run_id}: run.json names no document"),
    };
    let doc = std::fs::read(dir.join(doc_file)).with_context(|| format!("run {run_id}: the document is missing"))?;
    if run["document"]["sha256"] != sha256_hex(&doc).as_str() {
        bail!("run {run_id}: the document's sha256 is not run.json's");
    }
    let mut head = run["chain_h0"].as_str().ok_or_else(|| anyhow!("run {run_id}: run.json has no chain_h0"))?.to_string();
    let bytes = std::fs::read(dir.join("events.ndjson")).with_context(|| format!("run {run_id}: events.ndjson is missing"))?;
    let records = read_events(&bytes).map_err(|(n, m)| anyhow!("run {run_id}: events.ndjson:{n}: {m}"))?;
    // The chain up to the prefix this hook already checked (a cache: when it does not match byte for byte,
    // the whole chain is checked again).
    let cache_path = hook_dir(runs).join(format!("{session}.chain"));
    let checked = std::fs::read(&cache_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|c| {
            let len = c["len"].as_u64()? as usize;
            let k = bytes.get(..len)?.iter().filter(|b| **b == b'\n').count();
            (len > 0
                && bytes[len - 1] == b'\n'
                && c["sha256"] == sha256_hex(&bytes[..len]).as_str()
                && k <= records.len()
                && c["head"] == records[k - 1].h.as_str())
            .then_some(k)
        })
        .unwrap_or(0);
    let mut session_ = policy.session(&doc)?;
    let mut last_at = 0;
    for (i, r) in records.iter().enumerate() {
        if i >= checked {
            let h = chain_next_with(policy, &head, &r.event_line, &r.decision_line);
            if h != r.h {
                bail!("run {run_id}: events.ndjson:{}: the hash chain is broken", i + 1);
            }
        }
        head = r.h.clone();
        let d = session_.handle_line(&r.event_line);
        if d != r.decision_line {
            bail!("run {run_id}: events.ndjson:{}: the module decides this event differently than recorded", i + 1);
        }
        if let Some(at) = serde_json::from_str::<Value>(&r.event_line).ok().and_then(|v| v["at"].as_u64()) {
            last_at = last_at.max(at);
        }
    }
    if checked < records.len() {
        let c = json!({"len": bytes.len(), "sha256": sha256_hex(&bytes), "head": head});
        let _ = write_cache(&cache_path, c.to_string().as_bytes());
    }
    timing.events_replayed = records.len();
    timing.chain_checked = records.len() - checked;
    timing.restore_us = t.elapsed().as_micros();
    let finished = dir.join("receipt.json").exists() || run["outcome"] != Value::Null;
    Ok(Run { run_id, dir, session: session_, head, last_at, t0_ms, finished })
}

impl Run {
    /// Feeds one event (a JSON object without `at`: the hook adds it), records it, returns the decision.
    pub fn feed(&mut self, policy: &Policy, mut event: Value) -> Result<Value> {
        if self.finished {
            bail!("run {} is finished; start a new session for a new run", self.run_id);
        }
        let at = now_ms().saturating_sub(self.t0_ms).max(self.last_at);
        self.last_at = at;
        event["at"] = json!(at);
        let line = policy.canonicalize(&event.to_string())?.map_err(|e| anyhow!("the event could not be encoded: {e}"))?;
        let decision_line = self.session.handle_line(&line);
        let h = chain_next_with(policy, &self.head, &line, &decision_line);
        let mut f = OpenOptions::new().append(true).open(self.dir.join("events.ndjson")).context("cannot open events.ndjson")?;
        f.write_all(event_record_line(&h, &line, &decision_line).as_bytes()).context("cannot write events.ndjson")?;
        f.sync_data()?;
        self.head = h;
        let d: Value = serde_json::from_str(&decision_line).context("the module answered something that is not a decision")?;
        if d["reason"] == "host-trap" {
            bail!("the policy module trapped: {}", self.session.trapped().unwrap_or("?"));
        }
        Ok(d)
    }

    pub fn report(&mut self) -> Result<Value> {
        Ok(serde_json::from_str(&self.session.report()?)?)
    }

    /// Ends the bundle: report.json, run.json (ended, outcome), receipt.json, latest.json, history.
    /// (The same files as `Bundle::finish`, written from another process than the one that created it.)
    pub fn finish(&mut self, policy: &Policy) -> Result<()> {
        let report = self.session.report()?;
        let report_v: Value = serde_json::from_str(&report)?;
        let ended = bundle::now_rfc3339();
        write_atomic(&self.dir.join("report.json"), report.as_bytes())?;
        let mut run: Value = serde_json::from_slice(&std::fs::read(self.dir.join("run.json"))?)?;
        if let Some(l) = run["lifecycle"].as_array_mut() {
            l.push(json!({"event": "ended", "at": ended}));
        }
        run["outcome"] = report_v["outcome"].clone();
        let mut text = serde_json::to_string_pretty(&run)?;
        text.push('\n');
        write_atomic(&self.dir.join("run.json"), text.as_bytes())?;
        let mut artifacts = serde_json::Map::new();
        let mut files = vec![
            "run.json".to_string(),
            run["artifacts"]["document"].as_str().unwrap_or("runbook.yaml").to_string(),
            "events.ndjson".into(),
            "report.json".into(),
        ];
        if run["artifacts"]["envelope"].is_string() {
            files.push("envelope.json".into());
        }
        for f in files {
            artifacts.insert(f.clone(), json!(sha256_hex(&std::fs::read(self.dir.join(&f))?)));
        }
        let receipt = format!(
            "{{\"artifacts\":{},\"chain_head\":\"{}\",\"host\":{{\"name\":\"{}\",\"version\":\"{}\"}},\"module_sha256\":{},\"report\":{report},\"report_sha256\":\"{}\",\"schema\":\"{}\"}}",
            serde_json::to_string(&artifacts)?,
            self.head,
            bundle::HOST_NAME,
            bundle::HOST_VERSION,
            serde_json::to_string(&run["module_sha256"])?,
            sha256_hex(report.as_bytes()),
            bundle::RECEIPT_SCHEMA,
        );
        let receipt = policy.canonicalize(&receipt)?.map_err(|e| anyhow!("the receipt is not canonicalizable: {e}"))?;
        write_atomic(&self.dir.join("receipt.json"), receipt.as_bytes())?;
        self.finished = true;
        let root = self.dir.parent().unwrap_or(Path::new("."));
        let latest_is_me = std::fs::read(root.join("latest.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| v["run_id"] == self.run_id.as_str());
        if latest_is_me {
            let mut t =
                serde_json::to_string_pretty(&json!({"schema": bundle::LATEST_SCHEMA, "run_id": self.run_id, "path": self.run_id, "updated_at": ended}))?;
            t.push('\n');
            write_atomic(&root.join("latest.json"), t.as_bytes())?;
        }
        let mut line = serde_json::to_string(
            &json!({"schema": bundle::HISTORY_SCHEMA, "event": "ended", "run_id": self.run_id, "at": ended, "path": self.run_id, "outcome": report_v["outcome"]}),
        )?;
        line.push('\n');
        let mut f = OpenOptions::new().append(true).create(true).open(root.join("history.ndjson"))?;
        f.write_all(line.as_bytes())?;
        f.sync_data()?;
        Ok(())
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
    fn walk(v: &Value, f: &dyn Fn(&str) -> bool) -> bool {
        match v {
            Value::String(s) => f(s),
            Value::Array(a) => a.iter().any(|x| walk(x, f)),
            Value::Object(o) => o.iter().any(|(k, x)| f(k) || walk(x, f)),
            _ => false,
        }
    }
    walk(input, &|s: &str| needles.iter().any(|n| s.contains(n.as_str())))
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
    let mut run = restore(policy, &cfg.runs, session, timing)?;
    match ev {
        HookEvent::SessionStart { .. } => unreachable!(),
        HookEvent::PreToolUse { tool, input, call_id, .. } => {
            if run.finished {
                return Ok(Answer::Deny(format!("runbook: run {} is finished; no further tool calls are supervised in this session", run.run_id)));
            }
            let arguments_json = policy.canonicalize(&input.to_string())?.map_err(|e| anyhow!("the tool input could not be canonicalized: {e}"))?;
            let sha = policy.call_sha256(tool, &arguments_json)?.map_err(|e| anyhow!("the call could not be hashed: {e}"))?;
            let guard = guarded(input, cfg);
            if !guard {
                if let Some((id, g)) = approvals::answered_for(&run.dir, &sha)? {
                    let rec = approvals::request_record(&run.dir, &id)?;
                    run.feed(
                        policy,
                        json!({"type": "approval", "step": rec["step"], "call_sha256": g.call_sha256, "approver": g.approver, "granted": g.granted}),
                    )?;
                    approvals::consume(&run.dir, &id)?;
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
                    let existing = approvals::pending(&run.dir)?.into_iter().find(|p| p.call_sha256 == sha && p.step.as_deref() == step);
                    if existing.is_none() {
                        approvals::request(&run.dir, step, tool, &arguments_json, &sha)?;
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
            if run.finished {
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
            if run.finished {
                return Ok(Answer::Pass);
            }
            if run.at_terminal()? || run.session.is_over() {
                end(policy, &mut run)?;
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
            if !run.finished {
                end(policy, &mut run)?;
            }
            Ok(Answer::Pass)
        }
    }
}

fn end(policy: &Policy, run: &mut Run) -> Result<()> {
    if !run.session.is_over() {
        run.feed(policy, json!({"type": "end", "reason": "normal"}))?;
    }
    run.finish(policy)
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
