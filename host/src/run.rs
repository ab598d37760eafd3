//! The run driver: one supervised run of one document, as every adapter drives it (DESIGN 11).
//!
//! A [`Run`] owns the module session, the bundle writer, the run's clock, the guard of DESIGN 9.20 and
//! the approval channel of its bundle. Each event is one method; each method makes one call into the
//! module (`feed`: the canonical event line, the decision, the chain link and a sentence come back
//! together), records the event and its decision durably (fsync) and only then returns an [`Answer`].
//! An adapter (the MCP proxy, the Claude Code hook, an embedder's own loop) translates its client's
//! protocol to these methods and the answers back, and decides nothing itself.
//!
//! Fail closed: when the bundle cannot be written or the module traps, the run is broken: the call that
//! caused it gets an error (the adapter blocks it), every later one too, and the bundle is ended without a
//! report (`verify` refuses it) when the module cannot vouch for one.

use crate::bundle::{self, Bundle};
use crate::registry::Resolved;
use crate::{
    approvals, Approval, Coverage, Decision, DecisionKind, EndReason, Event, EventKind, Invoke, Outcome, Phase, Policy, Profile, Recorded, Risk, RunState,
    Session, StartClaim, ToolResult, Verdict,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// Why a run cannot go on, grouped by whose fault it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The evidence cannot be written or read (disk, permissions): the host's environment.
    Evidence(String),
    /// The recorded evidence does not replay to what the module decides (edited, truncated, forged).
    Tampered(String),
    /// The policy module trapped or could not be loaded.
    Module(String),
    /// The run is already over and its bundle finished.
    Finished(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Evidence(m) => write!(f, "the run's evidence cannot be written or read: {m}"),
            RunError::Tampered(m) => write!(f, "the run's evidence does not check out: {m}"),
            RunError::Module(m) => write!(f, "the policy module failed: {m}"),
            RunError::Finished(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for RunError {}

impl From<crate::HostError> for RunError {
    fn from(e: crate::HostError) -> RunError {
        RunError::Module(e.to_string())
    }
}

/// The client's claim, as an adapter makes it (the `start` event without its run id).
#[derive(Clone, Debug)]
pub struct Claim {
    pub profile: Profile,
    pub allowlist: Vec<String>,
    pub risk_ceiling: Risk,
    pub coverage: Coverage,
    pub agent: String,
    pub available: Option<Vec<String>>,
}

/// The module's answer to one event, recorded before it is returned.
#[derive(Clone, Debug)]
pub struct Answer {
    pub decision: Decision,
    /// One sentence for the agent or the person reading it, written by the module.
    pub explanation: String,
}

impl Answer {
    pub fn kind(&self) -> DecisionKind {
        self.decision.kind
    }
    pub fn allowed(&self) -> bool {
        self.decision.kind == DecisionKind::Allow
    }
}

/// What names the run's evidence, the approval channel, the registry or the host itself (DESIGN 9.20):
/// one list of needles and one matching rule for every adapter.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    needles: Vec<String>,
}

impl Guard {
    /// The host binary (its name and its absolute path), the runs directory and, when it is a local
    /// directory, the registry.
    pub fn new(runs: &Path, registry: Option<&str>) -> Guard {
        let mut g = Guard { needles: vec!["runbook-host".to_string()] };
        if let Ok(exe) = std::env::current_exe() {
            g.add_path(&exe);
        }
        g.add_path(runs);
        if let Some(r) = registry.filter(|r| !r.contains("://")) {
            g.add_path(Path::new(r));
        }
        g
    }

    /// Adds a path in the forms an agent may write it: as given (without a leading `./`) and absolute.
    /// A form of 3 characters or fewer would match innocent text, so it is not added.
    pub fn add_path(&mut self, p: &Path) {
        let given = p.to_string_lossy();
        let given = given.trim_start_matches("./").trim_end_matches('/').to_string();
        let mut forms = vec![given];
        if let Ok(c) = p.canonicalize() {
            forms.push(c.to_string_lossy().into_owned());
        }
        for f in forms {
            if f.len() > 3 && !self.needles.contains(&f) {
                self.needles.push(f);
            }
        }
    }

    /// Whether any string of the call (its tool name, its arguments' keys and values) names a needle.
    pub fn names(&self, tool: &str, arguments: &Value) -> bool {
        self.needles.iter().any(|n| tool.contains(n.as_str())) || bundle::names_any(arguments, &self.needles)
    }
}

/// Unix time in milliseconds (the run's clock counts from the `start` event's wall time).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// How [`Run::resume`] restores the module's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restore {
    /// From the module's session snapshot in the resume record, when the record describes exactly the
    /// `events.ndjson` bytes on disk; else by replaying every event.
    Snapshot,
    /// By replaying every recorded event (each link and decision checked).
    Replay,
}

/// `runbook-resume/v1`: what a process leaves for the next one to resume a run from (the hook's
/// `.hook/<session>.snapshot`): the events file it describes (length, sha256, line count, last link), the
/// last `at`, and the module's session snapshot. It is a cache, never evidence: when it does not describe
/// the events file byte for byte, the run is replayed in full.
pub const RESUME_SCHEMA: &str = "runbook-resume/v1";

/// How a run was resumed (for timing and tests).
#[derive(Clone, Debug, Default)]
pub struct Resumed {
    pub from_snapshot: bool,
    pub events: u64,
    /// Links recomputed by the module (0 when resumed from the snapshot).
    pub links_checked: u64,
    pub snapshot_refused: Option<String>,
}

/// One supervised run.
pub struct Run {
    policy: Arc<Policy>,
    session: Session,
    bundle: Bundle,
    guard: Guard,
    t0_ms: u64,
    last_at: u64,
    broken: Option<RunError>,
    /// The running sha256 and length of `events.ndjson`, for the resume record.
    events_hash: Sha256,
    events_len: u64,
    /// The module's state after the last event (each `feed` returns it), so acting on it costs no call.
    state: Option<RunState>,
}

impl Run {
    /// Creates the bundle under `runs` and feeds the `start` claim. A refused run is a run too: its bundle
    /// is finished (outcome `refused`) and the returned answer is the `halt` with the refusals; nothing
    /// else may be fed to it.
    pub fn create(policy: Arc<Policy>, doc: &Resolved, claim: Claim, runs: &Path, adapter: &str, mut guard: Guard) -> Result<(Run, Answer), RunError> {
        let envelope = policy.envelope(&doc.bytes)?.ok();
        let run_id = bundle::new_run_id().map_err(|e| RunError::Evidence(e.to_string()))?;
        let bundle = Bundle::create(runs, &run_id, doc, envelope.as_deref(), crate::module_sha256(), adapter)
            .map_err(|e| RunError::Evidence(format!("cannot create the run bundle under {}: {e}", runs.display())))?;
        guard.add_path(bundle.dir());
        let session = policy.session(&doc.bytes)?;
        let mut run = Run { policy, session, bundle, guard, t0_ms: now_ms(), last_at: 0, broken: None, events_hash: Sha256::new(), events_len: 0, state: None };
        let start = EventKind::Start(StartClaim {
            run_id,
            profile: claim.profile,
            allowlist: claim.allowlist,
            risk_ceiling: claim.risk_ceiling,
            coverage: claim.coverage,
            agent: claim.agent,
            available: claim.available,
        });
        let answer = run.feed(start)?;
        let admitted = answer.allowed();
        run.bundle.admitted(admitted).map_err(|e| run.break_with(RunError::Evidence(e.to_string())))?;
        if !admitted {
            run.finish()?;
        }
        Ok((run, answer))
    }

    /// Reopens the run `run_id` under `runs` in another process: from the resume record at `record` when
    /// it describes exactly the events on disk (and `how` allows), else by replaying every recorded event
    /// with each chain link and decision checked by the module. `t0_ms` is the run's wall-clock start.
    pub fn resume(
        policy: Arc<Policy>,
        runs: &Path,
        run_id: &str,
        t0_ms: u64,
        record: Option<&Path>,
        how: Restore,
        guard: Guard,
    ) -> Result<(Run, Resumed), RunError> {
        let ev = |e: std::io::Error| RunError::Evidence(format!("run {run_id}: {e}"));
        let b = Bundle::open(runs, run_id).map_err(ev)?;
        let doc = b.document().map_err(ev)?;
        let bytes = b.events_bytes().map_err(ev)?;
        let events_hash = Sha256::new().chain_update(&bytes);
        let events_sha = hex::encode(events_hash.clone().finalize());
        let (lines, last_h) = tail_of(&bytes);
        let head_now = last_h.unwrap_or(b.chain_head()).to_string();
        let rec = record.and_then(|p| std::fs::read(p).ok()).and_then(|b| serde_json::from_slice::<Value>(&b).ok()).filter(|s| {
            s["schema"] == RESUME_SCHEMA
                && s["run_id"] == run_id
                && s["events_len"] == bytes.len()
                && s["events_sha256"] == events_sha.as_str()
                && s["lines"] == lines
                && s["head"] == head_now.as_str()
        });
        let mut resumed = Resumed { events: lines, ..Resumed::default() };
        let mut restored = None;
        if let (Some(r), Restore::Snapshot) = (&rec, how) {
            if let Some(text) = r["session"].as_str() {
                match policy.restore(&doc, text)? {
                    Ok(s) => restored = Some((s, r["last_at"].as_u64().unwrap_or(0))),
                    Err(e) => resumed.snapshot_refused = Some(e),
                }
            }
        }
        let (session, head, last_at) = match restored {
            Some((s, last_at)) => {
                resumed.from_snapshot = true;
                (s, head_now, last_at)
            }
            None => {
                let records = bundle::read_events(&bytes).map_err(|(n, m)| RunError::Tampered(format!("run {run_id}: events.ndjson:{n}: {m}")))?;
                let mut head = b.chain_head().to_string();
                let mut s = policy.session(&doc)?;
                let mut last_at = 0;
                // A record that describes these exact bytes was left by the process that wrote them and
                // checked their links: only the decisions are replayed then (one cheaper call an event).
                let links_known = rec.is_some();
                for (i, r) in records.iter().enumerate() {
                    let decision_line = if links_known {
                        s.handle_line(&r.event_line)
                    } else {
                        let (decision_line, link) = s.replay_line(&r.event_line, &head).map_err(|t| RunError::Module(t.message))?;
                        if link != r.h {
                            return Err(RunError::Tampered(format!("run {run_id}: events.ndjson:{}: the hash chain is broken", i + 1)));
                        }
                        decision_line
                    };
                    if decision_line != r.decision_line {
                        return Err(RunError::Tampered(format!(
                            "run {run_id}: events.ndjson:{}: the module decides this event differently than recorded",
                            i + 1
                        )));
                    }
                    head = r.h.clone();
                    if let Some(at) = serde_json::from_str::<Value>(&r.event_line).ok().and_then(|v| v["at"].as_u64()) {
                        last_at = last_at.max(at);
                    }
                }
                resumed.links_checked = if links_known { 0 } else { records.len() as u64 };
                (s, head, last_at)
            }
        };
        let mut b = b;
        b.resume_chain(head, lines);
        let mut guard = guard;
        guard.add_path(b.dir());
        let run = Run { policy, session, bundle: b, guard, t0_ms, last_at, broken: None, events_hash, events_len: bytes.len() as u64, state: None };
        Ok((run, resumed))
    }

    /// Leaves the resume record (see [`RESUME_SCHEMA`]) at `path`; removes it once the run is finished.
    /// Rewritten in place (a rename costs more than the decision): a record torn by a crash is not JSON,
    /// or does not describe the events file, and the next process replays.
    pub fn save_resume_record(&mut self, path: &Path, how: Restore) -> Result<(), RunError> {
        if self.bundle.is_finished() {
            let _ = std::fs::remove_file(path);
            return Ok(());
        }
        let snapshot = match how {
            Restore::Snapshot => Some(self.session.snapshot()?),
            Restore::Replay => None,
        };
        let rec = serde_json::json!({"schema": RESUME_SCHEMA, "run_id": self.run_id(), "events_len": self.events_len,
            "events_sha256": hex::encode(self.events_hash.clone().finalize()), "head": self.bundle.chain_head(),
            "lines": self.bundle.events_recorded(), "last_at": self.last_at, "session": snapshot});
        let bytes = rec.to_string();
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
            f.write_all(bytes.as_bytes())?;
            f.set_len(bytes.len() as u64)
        };
        write().map_err(|e| RunError::Evidence(format!("cannot write the resume record: {e}")))
    }

    pub fn run_id(&self) -> &str {
        self.bundle.run_id()
    }

    /// The run's wall-clock start (Unix ms): `at` counts from here.
    pub fn t0_ms(&self) -> u64 {
        self.t0_ms
    }

    pub fn dir(&self) -> &Path {
        self.bundle.dir()
    }

    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Whether the bundle is finished (the report and receipt are written).
    pub fn finished(&self) -> bool {
        self.bundle.is_finished()
    }

    pub fn broken(&self) -> Option<&RunError> {
        self.broken.as_ref()
    }

    /// The `at` of a new event: milliseconds since the run began, never lower than the last one.
    fn now_at(&mut self) -> u64 {
        let at = now_ms().saturating_sub(self.t0_ms).max(self.last_at);
        self.last_at = at;
        at
    }

    fn break_with(&mut self, e: RunError) -> RunError {
        if self.broken.is_none() {
            self.broken = Some(e.clone());
        }
        e
    }

    /// Feeds one event: one call into the module, then the record, fsync'd, then the answer.
    fn feed(&mut self, kind: EventKind) -> Result<Answer, RunError> {
        if let Some(b) = &self.broken {
            return Err(b.clone());
        }
        if self.bundle.is_finished() {
            return Err(RunError::Finished(format!("run {} is over and its evidence is sealed; start a new run", self.run_id())));
        }
        let event = Event { at: self.now_at(), kind };
        let prev = self.bundle.chain_head().to_string();
        let rec: Recorded = match self.session.feed(&event, &prev) {
            Ok(r) => r,
            Err(trapped) => {
                // No module to vouch for a report or a link: the bundle ends without one (verify refuses it).
                let _ = self.bundle.end_without_report("host-trap");
                return Err(self.break_with(RunError::Module(trapped.message)));
            }
        };
        if let Err(e) = self.bundle.record_linked(&rec.event_line, &rec.decision_line, &rec.link) {
            return Err(self.break_with(RunError::Evidence(format!("cannot record the event: {e}"))));
        }
        let written = bundle::event_record_line(&rec.link, &rec.event_line, &rec.decision_line);
        self.events_hash.update(written.as_bytes());
        self.events_len += written.len() as u64;
        self.state = Some(rec.state);
        Ok(Answer { decision: rec.decision, explanation: rec.explanation })
    }

    /// A tool call. The guard is applied here, for every adapter alike.
    pub fn invoke(&mut self, tool: &str, arguments: &Value, call_id: Option<&str>, step: Option<&str>) -> Result<Answer, RunError> {
        let guard = self.guard.names(tool, arguments);
        self.feed(EventKind::Invoke(Invoke {
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            call_id: call_id.map(str::to_string),
            step: step.map(str::to_string),
            guard,
        }))
    }

    /// A tool's result (`result` is what the adapter observes, DESIGN 9.23).
    pub fn result(&mut self, tool: &str, result: &Value, is_error: bool, call_id: Option<&str>) -> Result<Answer, RunError> {
        self.feed(EventKind::Result(ToolResult { tool: tool.to_string(), result: result.to_string(), is_error, call_id: call_id.map(str::to_string) }))
    }

    pub fn approval(&mut self, step: Option<&str>, call_sha256: Option<&str>, approver: &str, granted: bool) -> Result<Answer, RunError> {
        self.feed(EventKind::Approval(Approval {
            step: step.map(str::to_string),
            call_sha256: call_sha256.map(str::to_string),
            approver: approver.to_string(),
            granted,
        }))
    }

    pub fn advance(&mut self, to: &str) -> Result<Answer, RunError> {
        self.feed(EventKind::Advance(to.to_string()))
    }

    pub fn verdict(&mut self, step: &str, pass: bool, by: &str) -> Result<Answer, RunError> {
        self.feed(EventKind::Verdict(Verdict { step: step.to_string(), pass, by: by.to_string() }))
    }

    /// The model's final answer was given (the hook's Stop, a library's loop, the proxy's clean shutdown).
    pub fn final_output(&mut self) -> Result<Answer, RunError> {
        self.feed(EventKind::FinalOutput)
    }

    pub fn tick(&mut self) -> Result<Answer, RunError> {
        self.feed(EventKind::Tick)
    }

    /// A `tick` when a checkpoint deadline has passed (for adapters without a timer, e.g. the hook).
    pub fn tick_if_due(&mut self) -> Result<Option<Answer>, RunError> {
        match self.next_deadline_ms()? {
            Some(d) if now_ms() >= d => self.tick().map(Some),
            _ => Ok(None),
        }
    }

    /// The wall-clock time (Unix ms) at which the adapter should call [`Run::tick`]: quinn's
    /// `poll_timeout`. None when no checkpoint deadline is pending.
    pub fn next_deadline_ms(&mut self) -> Result<Option<u64>, RunError> {
        if self.broken.is_some() || self.finished() {
            return Ok(None);
        }
        Ok(self.state()?.next_deadline.map(|at| self.t0_ms.saturating_add(at)))
    }

    /// Ends the run: `end {reason}` unless the module already ended it, then the bundle is finished with
    /// the report and receipt, and every approval request still pending is withdrawn.
    pub fn end(&mut self, reason: EndReason) -> Result<Outcome, RunError> {
        if !self.finished() {
            if self.state()?.phase != Phase::Over {
                self.feed(EventKind::End(reason))?;
            }
            self.finish()?;
        }
        self.state()?.outcome.ok_or_else(|| RunError::Module("the ended run has no outcome".into()))
    }

    fn finish(&mut self) -> Result<(), RunError> {
        for p in approvals::pending(self.dir()).unwrap_or_default() {
            let _ = approvals::withdraw(self.dir(), &p.id);
        }
        let report = self.session.report()?;
        self.bundle.finish(&report).map_err(|e| self.break_with(RunError::Evidence(format!("cannot finish the bundle: {e}"))))
    }

    /// The typed state (current step, scope and its tools, outcome, ...).
    pub fn state(&mut self) -> Result<RunState, RunError> {
        if let Some(b) = &self.broken {
            return Err(b.clone());
        }
        if let Some(s) = &self.state {
            return Ok(s.clone());
        }
        let s = self.session.state()?;
        self.state = Some(s.clone());
        Ok(s)
    }

    /// The run report (canonical JSON).
    pub fn report(&mut self) -> Result<String, RunError> {
        Ok(self.session.report()?)
    }

    // The approval channel of this run's bundle (see [`crate::approvals`]).

    /// When a human answered an approval request for this exact call, feeds that answer (an `approval`
    /// event) and consumes the request, so the call that follows is decided with it.
    pub fn apply_answered_approval(&mut self, call_sha256: &str) -> Result<Option<Answer>, RunError> {
        let dir = self.dir().to_path_buf();
        let ev = |e: std::io::Error| RunError::Evidence(format!("the approval channel: {e}"));
        let Some((id, grant)) = approvals::answered_for(&dir, call_sha256).map_err(ev)? else { return Ok(None) };
        self.apply_grant(&id, &grant).map(Some)
    }

    /// Before a call is decided: when a human answered a request for this exact call (a retry after a
    /// gated call), feeds that answer first. Guarded calls never consume an approval. Costs a call into
    /// the module (the call's hash) only while some request is pending.
    pub fn apply_answered_approval_for(&mut self, tool: &str, arguments: &Value) -> Result<Option<Answer>, RunError> {
        if self.guard.names(tool, arguments) || !approvals::any_requests(self.dir()) {
            return Ok(None);
        }
        let sha = self.call_sha256(tool, arguments)?;
        self.apply_answered_approval(&sha)
    }

    /// The hash an approval bound to this call names (DESIGN 9.19), from the module.
    pub fn call_sha256(&self, tool: &str, arguments: &Value) -> Result<String, RunError> {
        self.policy.call_sha256(tool, &arguments.to_string())?.map_err(|e| RunError::Module(format!("the call could not be hashed: {e}")))
    }

    /// Feeds a human's answer to the request `id` and consumes the request.
    pub fn apply_grant(&mut self, id: &str, grant: &approvals::Grant) -> Result<Answer, RunError> {
        let dir = self.dir().to_path_buf();
        let ev = |e: std::io::Error| RunError::Evidence(format!("the approval channel: {e}"));
        let rec = approvals::request_record(&dir, id).map_err(ev)?;
        let step = rec["step"].as_str().map(str::to_string);
        let a = self.approval(step.as_deref(), Some(&grant.call_sha256), &grant.approver, grant.granted)?;
        approvals::consume(&dir, id).map_err(ev)?;
        Ok(a)
    }

    /// Asks a human to approve this exact call (or finds the request already pending); returns its id.
    pub fn request_approval(&mut self, step: Option<&str>, tool: &str, arguments_json: &str, call_sha256: &str) -> Result<String, RunError> {
        let dir = self.dir().to_path_buf();
        let ev = |e: std::io::Error| RunError::Evidence(format!("the approval channel: {e}"));
        if let Some(p) = approvals::pending(&dir).map_err(ev)?.into_iter().find(|p| p.call_sha256 == call_sha256 && p.step.as_deref() == step) {
            return Ok(p.id);
        }
        approvals::request(&dir, step, tool, arguments_json, call_sha256).map_err(ev)
    }

    /// The command a human runs to approve the pending requests of this run.
    pub fn approve_command(&self, step: Option<&str>) -> String {
        format!("runbook-host approve {} {}", self.run_id(), step.unwrap_or("-"))
    }
}

/// The number of lines of an events file and the `h` of its last one (read from the line's fixed prefix;
/// a line without one gives None, and the full replay that follows names the problem).
fn tail_of(bytes: &[u8]) -> (u64, Option<&str>) {
    let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let last = &body[body.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)..];
    let h = last.strip_prefix(b"{\"h\":\"").and_then(|r| r.get(..64)).and_then(|h| std::str::from_utf8(h).ok());
    (lines, if bytes.is_empty() { None } else { h })
}
