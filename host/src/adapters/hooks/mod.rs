//! The hook adapter of every agent CLI (docs/spec/adapters.md; issue 30): one driver, and per client a
//! file that translates its payloads to a client-neutral [`HookEvent`] in the canonical tool vocabulary
//! (Claude Code's names and argument shapes) and renders the [`Answer`] in its own shape. The driver is a
//! thin translation between those events and [`Run`], in two modes that decide the same way, byte for byte:
//!
//! - **command** (`runbook-host hook`): one process per hook event. Between processes the run lives in
//!   its bundle; a process resumes it by a full replay checked link by link ([`Run::resume`]) under the
//!   session's file lock, so the events of one session are decided one at a time, in recorded order.
//! - **server** (`runbook-host hook serve`, [`server`]): one resident process per runs directory that
//!   keeps each session's run in memory and holds its lock while the session is open; Claude Code's
//!   `http` hooks POST the same payloads to it.
//!
//! ```text
//! <runs>/.hook/<session>.json      runbook-hook-session/v1: {schema, session_id, run_id, t0_ms, pins}
//! <runs>/.hook/<session>.lock      the session's lock file (made at SessionStart; a missing one denies)
//! <runs>/.hook/server/             the resident server's token, state and log (see [`server`])
//! ```
//!
//! The session state, its lock and its broken mark are behind [`Sessions`]: [`FileSessions`] (the files
//! above, what both modes use) or [`MemorySessions`]. [`MemoryHook`] drives the same decisions with
//! everything in memory (the sessions, each run's bundle in a [`MemoryStore`], the approval channel) and
//! each session's run resident between events, as the server keeps it: for tests and the fuzz targets.

pub mod claude;
pub mod cline;
pub mod codex;
pub mod copilot;
pub mod gemini;
pub mod opencode;
pub mod peer;
pub mod permissions;
pub mod qwen;
pub mod server;

use crate::bundle::{MemoryStore, SharedStore};
use crate::registry;
use crate::run::{Answer as RunAnswer, Checkpoint, Claim, ClientCall, Guard, Pin, Resumed, Run, RunError, RunOptions};
use crate::signatures::Signers;
use crate::{Coverage, DecisionKind, EndReason, Policy, Profile, Risk};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        /// The call as the client named it, where that is not the canonical form (kept in the record).
        client: Option<ClientCall>,
    },
    /// `failed`: the client reported the call as failed (its error is the result).
    PostToolUse {
        session: String,
        tool: String,
        response: Value,
        call_id: Option<String>,
        failed: bool,
        /// The tool as the client named it, where that is not the canonical name (kept in the record).
        client: Option<ClientCall>,
    },
    /// The client is about to ask its user whether a tool call may run (its own permission rules).
    PermissionRequest {
        session: String,
        tool: String,
        input: Value,
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
            | HookEvent::PermissionRequest { session, .. }
            | HookEvent::Stop { session, .. }
            | HookEvent::SessionEnd { session } => session,
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            HookEvent::SessionStart { .. } => "SessionStart",
            HookEvent::PreToolUse { .. } => "PreToolUse",
            HookEvent::PostToolUse { failed: false, .. } => "PostToolUse",
            HookEvent::PostToolUse { failed: true, .. } => "PostToolUseFailure",
            HookEvent::PermissionRequest { .. } => "PermissionRequest",
            HookEvent::Stop { .. } => "Stop",
            HookEvent::SessionEnd { .. } => "SessionEnd",
        }
    }
}

/// Which agent CLI the hook answers (issue 30). Their answers are written alike (Qwen Code reads Claude
/// Code's shapes); their payloads differ in the tool vocabulary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Client {
    #[default]
    Claude,
    Qwen,
    Copilot,
    Gemini,
    Codex,
    Opencode,
    Cline,
}

impl Client {
    /// Parses a payload; `event` is the event the command line names (Copilot's payloads do not). A tool
    /// call the adapter renamed keeps the client's own name and arguments (docs/spec/adapters.md#canonical-tool-names).
    pub fn parse(self, event: Option<&str>, bytes: &[u8]) -> Result<HookEvent, String> {
        let mut ev = self.parse_canonical(event, bytes)?;
        self.keep_client_call(&mut ev, bytes);
        Ok(ev)
    }

    /// The client's own tool name and arguments in a payload (where its hooks put them).
    fn own_call(self, bytes: &[u8]) -> Option<(String, Value)> {
        let v: Value = serde_json::from_slice(bytes).ok()?;
        let (name, args) = match self {
            // Cline's adapter names the client's call itself.
            Client::Claude | Client::Cline => return None,
            Client::Copilot => ("toolName", "toolArgs"),
            _ => ("tool_name", "tool_input"),
        };
        let args = match &v[args] {
            Value::String(s) => serde_json::from_str(s).ok()?,
            a => a.clone(),
        };
        Some((v[name].as_str()?.to_string(), args))
    }

    fn keep_client_call(self, ev: &mut HookEvent, bytes: &[u8]) {
        let (canonical, input, slot) = match ev {
            HookEvent::PreToolUse { tool, input, client, .. } => (tool.as_str(), Some(&*input), client),
            HookEvent::PostToolUse { tool, client, .. } => (tool.as_str(), None, client),
            _ => return,
        };
        let Some((own, args)) = self.own_call(bytes) else { return };
        let renamed = own != canonical || input.is_some_and(|i| *i != args);
        if renamed {
            *slot = Some(ClientCall { client: self.name().into(), tool: own, arguments: input.map(|_| args) });
        }
    }

    /// Parses a payload into the events it stands for: one, except Cline's (a call of several commands
    /// is one event per command; a task's end is its stop and its session's end).
    pub fn parse_all(self, event: Option<&str>, bytes: &[u8]) -> Result<Vec<HookEvent>, String> {
        match self {
            Client::Cline => cline::parse_all(bytes),
            _ => Ok(vec![self.parse(event, bytes)?]),
        }
    }

    fn parse_canonical(self, event: Option<&str>, bytes: &[u8]) -> Result<HookEvent, String> {
        match self {
            Client::Cline => {
                let mut evs = cline::parse_all(bytes)?;
                if evs.len() != 1 {
                    return Err("this Cline payload stands for several events (decide it with `parse_all`)".into());
                }
                Ok(evs.remove(0))
            }
            Client::Claude => claude::parse(bytes),
            Client::Qwen => qwen::parse(bytes),
            Client::Gemini => gemini::parse(bytes),
            Client::Codex => codex::parse(bytes),
            Client::Opencode => opencode::parse(bytes),
            Client::Copilot => {
                copilot::parse(event.ok_or("a Copilot hook names its event: `--event preToolUse` (see `hook --client copilot install`)")?, bytes)
            }
        }
    }
    /// The JSON written on stdout for an answer.
    pub fn render(self, event: &str, answer: &Answer) -> Option<Value> {
        match self {
            Client::Claude | Client::Qwen | Client::Codex => claude::render(event, answer),
            Client::Copilot => copilot::render(event, answer),
            Client::Gemini => gemini::render(event, answer),
            Client::Opencode => opencode::render(answer),
            Client::Cline => None,
        }
    }
    /// The client as `--client` names it.
    pub fn name(self) -> &'static str {
        match self {
            Client::Claude => "claude",
            Client::Qwen => "qwen",
            Client::Copilot => "copilot",
            Client::Gemini => "gemini",
            Client::Codex => "codex",
            Client::Opencode => "opencode",
            Client::Cline => "cline",
        }
    }
    /// What the hook prints on stdout besides its exit 2 when it fails closed: Copilot drops the stderr of
    /// an exit 2, so its deny decision carries the reason; the other clients read the reason on stderr.
    pub fn failure_answer(self, reason: &str) -> Option<Value> {
        match self {
            Client::Copilot => copilot::render("PreToolUse", &Answer::Deny(reason.to_string())),
            Client::Cline => Some(cline::failure_answer(reason)),
            _ => None,
        }
    }
    /// The client as the run's `agent` names it.
    pub fn agent(self) -> &'static str {
        match self {
            Client::Claude => "claude-code",
            Client::Qwen => "qwen-code",
            Client::Copilot => "copilot-cli",
            Client::Gemini => "gemini-cli",
            Client::Codex => "codex",
            Client::Opencode => "opencode",
            Client::Cline => "cline",
        }
    }
}

/// The command line a client whose hooks fail open (Qwen Code, Gemini CLI, Codex) runs for our hook: ours,
/// and on any failure to answer (the binary missing, a crash) an exit 2 with a reason, which each of them
/// takes as a deny (they run the tool on exit 127 or a signal). Our own denials already exit 2 with their
/// reason on stderr.
pub fn fail_closed(command: &str) -> String {
    format!("{command} || {{ echo 'runbook-host hook: no answer from the hook, so the call is denied' >&2; exit 2; }}")
}

/// Merges `hooks` (`{EVENT: [group, ...]}`, the shape Claude Code, Gemini CLI and Codex share) into a
/// settings object's `hooks`, after removing ours of an earlier install; ours go last in each event's
/// list, so the user's own groups keep their places (Codex trusts a hook by its index).
pub fn merge_hooks(settings: &mut Value, hooks: Value, events: &[&str]) -> Result<(), String> {
    remove_hooks(settings, events);
    let obj = settings.as_object_mut().ok_or("the settings file is not a JSON object")?;
    let all = obj.entry("hooks").or_insert_with(|| json!({})).as_object_mut().ok_or("`hooks` in the settings file is not an object")?;
    for (event, groups) in hooks.as_object().into_iter().flatten() {
        let list = all.entry(event.clone()).or_insert_with(|| json!([])).as_array_mut().ok_or(format!("`hooks.{event}` is not a list"))?;
        list.extend(groups.as_array().into_iter().flatten().cloned());
    }
    Ok(())
}

/// Removes every hook group of ours from `events` (whatever options it ran with), and a list or `hooks`
/// left empty by that; returns how many.
pub fn remove_hooks(settings: &mut Value, events: &[&str]) -> usize {
    let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) else { return 0 };
    let mut removed = 0;
    for event in events {
        if let Some(list) = hooks.get_mut(*event).and_then(Value::as_array_mut) {
            let before = list.len();
            list.retain(|g| !claude::ours(g));
            removed += before - list.len();
            if list.is_empty() && before > 0 {
                hooks.remove(*event);
            }
        }
    }
    if hooks.is_empty() && removed > 0 {
        settings.as_object_mut().map(|o| o.remove("hooks"));
    }
    removed
}

/// `args` with its keys renamed by `pairs` (`(client's, canonical)`), the others kept.
pub(crate) fn rename_keys(args: &Value, pairs: &[(&str, &str)]) -> Value {
    let mut out = serde_json::Map::new();
    for (k, v) in args.as_object().into_iter().flatten() {
        let k = pairs.iter().find(|(from, _)| from == k).map_or(k.as_str(), |(_, to)| to);
        out.insert(k.to_string(), v.clone());
    }
    Value::Object(out)
}

/// The canonical `mcp__SERVER__TOOL` of a client's MCP tool name `SERVER<sep>TOOL`, SERVER the longest of
/// the client's configured `servers` that fits (so `sep` within either cannot shift the split).
pub(crate) fn split_mcp(name: &str, servers: &[String], sep: u8) -> Option<String> {
    servers
        .iter()
        .filter(|s| name.len() > s.len() + 1 && name.starts_with(s.as_str()) && name.as_bytes()[s.len()] == sep)
        .max_by_key(|s| s.len())
        .map(|s| format!("mcp__{s}__{}", &name[s.len() + 1..]))
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
    /// Where the runbook resolves and what it must satisfy (a CA, a required signature).
    pub registry: registry::Settings,
    /// Signs each run's receipt (`receipt.dsse.json`).
    pub receipt_key: Option<ed25519_dalek::SigningKey>,
    /// Files the guard protects besides the runs and the registry: keys, CAs, the registry cache.
    pub guard_paths: Vec<PathBuf>,
    pub runs: PathBuf,
    pub profile: Profile,
    pub keep_working: bool,
    /// How long an event waits for the session's lock (another event of the session being decided)
    /// before it is denied.
    pub lock_timeout: Duration,
    /// Where approvals must be signed: the `allowed_signers` file of the keys that may sign them.
    pub allowed_signers: Option<PathBuf>,
    /// Accept software keys in `allowed_signers` (see [`Signers::load`]).
    pub allow_software_keys: bool,
    /// The tools the client allows at all, when given on the command line; else from the client's
    /// permission rules (see [`permissions`]).
    pub allowlist: Option<Vec<String>>,
    /// The client's settings files (deny rules remove tools from the claim's allowlist).
    pub settings: Vec<PathBuf>,
    /// The agent CLI whose hook this is.
    pub client: Client,
}

impl Config {
    /// A digest of every option that changes a decision: a server started with other options is not
    /// the server this configuration asks for (see [`server::ensure`]).
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let text = format!(
            "{:?}",
            (
                &self.runbook,
                &self.registry.registry,
                self.registry.ca_pem.iter().map(|c| crate::files::sha256_hex(c)).collect::<Vec<_>>(),
                self.registry.require_signature.iter().map(crate::signatures::dsse::key_id).collect::<Vec<_>>(),
                self.receipt_key.as_ref().map(|k| crate::signatures::dsse::key_id(&k.verifying_key())),
                &self.runs,
                self.profile,
                self.keep_working,
                self.lock_timeout,
                (&self.allowed_signers, self.allow_software_keys),
                &self.allowlist,
                (&self.settings, self.client)
            )
        );
        hex::encode(Sha256::digest(text.as_bytes()))
    }
}

/// Timings of one hook process's work (printed with RUNBOOK_HOOK_TIMING=1, read by the benchmark).
#[derive(Default, Debug)]
pub struct Timing {
    pub events_replayed: u64,
    pub restore_us: u128,
    pub chain_checked: u64,
    pub load_us: u128,
    pub decide_us: u128,
    /// Calls into the component while deciding the event.
    pub decide_calls: u64,
}

fn hook_dir(runs: &Path) -> PathBuf {
    runs.join(".hook")
}

/// The hook's directory under the runs directory; a symlink in its place is refused.
fn hook_dir_checked(runs: &Path, create: bool) -> Result<PathBuf> {
    let d = hook_dir(runs);
    if create {
        std::fs::create_dir_all(&d).context("cannot create the hook state directory")?;
    }
    match std::fs::symlink_metadata(&d) {
        Ok(m) if m.file_type().is_symlink() => bail!("{} is a symlink; the hook's state must be a directory of its own", d.display()),
        _ => Ok(d),
    }
}

fn open_nofollow(p: &Path, create: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true).custom_flags(libc::O_NOFOLLOW);
    if create {
        o.create(true).truncate(false);
    }
    o.open(p)
}

/// The session's lock, held until dropped. `create` only at SessionStart: a lock file that disappeared
/// later means someone tampered with the session's state, and the hook fails closed. The wait is bounded:
/// a lock held longer than `timeout` (a hung process, or one holding it on purpose) denies the event
/// rather than hang the client, which on a client without `onFailure: block` would let the call through.
fn lock(runs: &Path, session: &str, create: bool, timeout: Duration) -> Result<File> {
    let p = hook_dir_checked(runs, create)?.join(format!("{session}.lock"));
    let f = open_nofollow(&p, create)
        .with_context(|| format!("the session's lock file .hook/{session}.lock is missing, a symlink or unusable (was SessionStart run?)"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(std::fs::TryLockError::WouldBlock) => {
                bail!("the session's lock is still held after {} ms (another hook process of session `{session}` is hung?)", timeout.as_millis())
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e).context("cannot lock the session"),
        }
    }
}

/// [`crate::files::write_atomic_path`]: a new temporary file created exclusively (a planted file or symlink
/// at its name is refused) and a rename (which replaces a symlink at `path` itself, never its target).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::files::write_atomic_path(path, bytes, Some(0o600)).with_context(|| format!("cannot write {}", path.display()))
}

/// What the hook keeps of a session between its events (`.hook/<session>.json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionState {
    pub run_id: String,
    pub t0_ms: u64,
    pub pin: Pin,
}

/// The session store: each session's state, its lock and its mark as broken (see the module's doc).
pub trait Sessions {
    /// Refuses every event of a session marked broken.
    fn check_not_broken(&self, session: &str) -> Result<()>;
    /// The session's lock, held until the returned guard is dropped (`create`: at SessionStart).
    fn lock(&self, session: &str, create: bool, timeout: Duration) -> Result<SessionLock>;
    fn has_state(&self, session: &str) -> bool;
    fn load_state(&self, session: &str) -> Result<SessionState>;
    fn write_state(&self, session: &str, state: &SessionState) -> Result<()>;
    /// Marks the session broken (its evidence could not be written): every later event is refused.
    fn mark_broken(&self, session: &str);
}

/// A session's lock (a locked file, or nothing for a session store in one process's memory).
pub struct SessionLock(#[allow(dead_code)] Option<File>);

/// The session store of a runs directory: `<runs>/.hook/` (today's files, unchanged).
pub struct FileSessions<'a>(pub &'a Path);

impl Sessions for FileSessions<'_> {
    fn check_not_broken(&self, session: &str) -> Result<()> {
        check_not_broken(self.0, session)
    }
    fn lock(&self, session: &str, create: bool, timeout: Duration) -> Result<SessionLock> {
        lock(self.0, session, create, timeout).map(|f| SessionLock(Some(f)))
    }
    fn has_state(&self, session: &str) -> bool {
        has_state(self.0, session)
    }
    fn load_state(&self, session: &str) -> Result<SessionState> {
        load_state(self.0, session)
    }
    fn write_state(&self, session: &str, st: &SessionState) -> Result<()> {
        let mut state = serde_json::to_string_pretty(&json!({"schema": STATE_SCHEMA, "session_id": session, "run_id": st.run_id, "t0_ms": st.t0_ms,
            "document_sha256": st.pin.document_sha256, "chain_h0": st.pin.chain_h0}))?;
        state.push('\n');
        write_atomic(&state_path(self.0, session), state.as_bytes())
    }
    /// A session whose evidence could not be written (a full or failing disk) is over for good. In the
    /// process that saw it the run is broken already; the state is renamed aside so that every later process
    /// (the command hook's next event, a restarted server) refuses the session too, instead of resuming a run
    /// whose record has a hole: a tool's result missing, its step's checks never run. A rename needs no free
    /// space, so this works on the disk that just filled; the run's bundle says the rest (`verify`).
    fn mark_broken(&self, session: &str) {
        let _ = std::fs::rename(state_path(self.0, session), broken_path(self.0, session));
    }
}

/// The session store in memory: one process's sessions (no lock is needed: [`MemoryHook`] decides one
/// event at a time).
#[derive(Default)]
pub struct MemorySessions {
    states: BTreeMap<String, SessionState>,
    broken: BTreeMap<String, String>,
}

impl Sessions for MemorySessions {
    fn check_not_broken(&self, session: &str) -> Result<()> {
        if let Some(run) = self.broken.get(session) {
            bail!("session `{session}` is over: its evidence could not be written in run {run}; every later event of it is refused");
        }
        Ok(())
    }
    fn lock(&self, _session: &str, _create: bool, _timeout: Duration) -> Result<SessionLock> {
        Ok(SessionLock(None))
    }
    fn has_state(&self, session: &str) -> bool {
        self.states.contains_key(session)
    }
    fn load_state(&self, session: &str) -> Result<SessionState> {
        self.states.get(session).cloned().ok_or_else(|| anyhow!("no hook state for session `{session}` (was SessionStart run?)"))
    }
    fn write_state(&self, _session: &str, _state: &SessionState) -> Result<()> {
        bail!("a memory session store is written through MemoryHook")
    }
    fn mark_broken(&self, _session: &str) {}
}

fn load_state(runs: &Path, session: &str) -> Result<SessionState> {
    let p = state_path(runs, session);
    let bytes = crate::files::read_path_bounded(&p, crate::files::MAX_SMALL_FILE_BYTES)
        .with_context(|| format!("no hook state for session `{session}` (was SessionStart run?)"))?;
    let v: Value = serde_json::from_slice(&bytes).context("the hook state file is not JSON")?;
    if v["schema"] != STATE_SCHEMA || v["session_id"] != session {
        bail!("the hook state file of session `{session}` is not a {STATE_SCHEMA} of this session");
    }
    let run_id = v["run_id"].as_str().filter(|r| crate::files::is_safe_name(r)).ok_or_else(|| anyhow!("the hook state names no usable run"))?.to_string();
    let t0_ms = v["t0_ms"].as_u64().ok_or_else(|| anyhow!("the hook state has no t0_ms"))?;
    let hex =
        |k: &str| v[k].as_str().filter(|h| h.len() == 64).map(str::to_string).ok_or_else(|| anyhow!("the hook state of session `{session}` has no {k} pin"));
    let pin = Pin { document_sha256: hex("document_sha256")?, chain_h0: hex("chain_h0")? };
    Ok(SessionState { run_id, t0_ms, pin })
}

/// The driver's guard, and what names the hook's own configuration: the client's settings files (where
/// the hooks and the server's token are written), the token's variable and the server's URL path.
fn guard(cfg: &Config) -> Guard {
    let mut g = Guard::new(&cfg.runs, Some(&cfg.registry.registry));
    for p in &cfg.guard_paths {
        g.add_path(p);
    }
    for name in [".claude/settings", ".qwen/settings", copilot::HOOKS_FILE, server::TOKEN_ENV, server::HOOK_PATH] {
        g.add_name(name);
    }
    g
}

/// Resumes the run of `session` (see [`Run::resume`]).
pub fn resume(policy: Arc<Policy>, cfg: &Config, session: &str, timing: &mut Timing) -> Result<Run> {
    resume_from(policy, cfg, session, None, timing)
}

/// [`resume`], from the session's checkpoint in `checkpoints` when there is a usable one (the records
/// after it replayed), else by a full replay. Only for checkpoints out of the agent's reach (see
/// [`crate::run::Checkpoint`]): the separated mode's service.
pub fn resume_from(policy: Arc<Policy>, cfg: &Config, session: &str, checkpoints: Option<&Path>, timing: &mut Timing) -> Result<Run> {
    let t = Instant::now();
    let st = load_state(&cfg.runs, session)?;
    let cp = checkpoints.and_then(|d| read_checkpoint(d, session)).filter(|c| c.run_id == st.run_id);
    let from_checkpoint = cp.and_then(|cp| match Run::resume_at(policy.clone(), &cfg.runs, &cp, st.t0_ms, Some(&st.pin), guard(cfg)) {
        Ok(r) => Some(r),
        Err(e) => {
            // Not trusted blindly, not fatal either: the full replay below decides about the evidence.
            eprintln!("runbook-host: session {session}: its checkpoint is not used ({e}); replaying the run");
            None
        }
    });
    let (mut run, r) = match from_checkpoint {
        Some(r) => r,
        None => Run::resume(policy, &cfg.runs, &st.run_id, st.t0_ms, Some(&st.pin), guard(cfg))?,
    };
    if let Some(p) = &cfg.allowed_signers {
        run.require_signed_approvals(Signers::load(p, cfg.allow_software_keys)?)?;
    }
    if let Some(k) = &cfg.receipt_key {
        run.sign_receipts_with(k.clone())?;
    }
    timing.events_replayed = r.events;
    timing.chain_checked = r.links_checked;
    timing.restore_us = t.elapsed().as_micros();
    Ok(run)
}

fn checkpoint_path(dir: &Path, session: &str) -> PathBuf {
    dir.join(format!("{session}.json"))
}

fn read_checkpoint(dir: &Path, session: &str) -> Option<Checkpoint> {
    let bytes = crate::files::read_path_bounded(&checkpoint_path(dir, session), crate::files::MAX_EVIDENCE_BYTES).ok()?;
    Checkpoint::from_json(&bytes).map_err(|e| eprintln!("runbook-host: session {session}: its checkpoint is unreadable ({e})")).ok()
}

/// Writes the session's checkpoint into `dir` (replacing the last one by a rename). Not synced: a
/// checkpoint lost or torn by a crash only makes the next resume replay more.
pub fn write_checkpoint(dir: &Path, session: &str, run: &mut Run) -> Result<()> {
    let cp = run.checkpoint()?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(format!(".{session}.json.tmp"));
    std::fs::write(&tmp, cp.to_json()).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, checkpoint_path(dir, session)).with_context(|| format!("cannot write the checkpoint of session {session}"))?;
    Ok(())
}

/// Removes the session's checkpoint (its run is over).
pub fn remove_checkpoint(dir: &Path, session: &str) {
    let _ = std::fs::remove_file(checkpoint_path(dir, session));
}

/// Handles one event. Errors are the caller's to turn into a fail-closed answer (exit 2).
pub fn handle(policy: Arc<Policy>, cfg: &Config, ev: &HookEvent, timing: &mut Timing) -> Result<Answer> {
    handle_all(policy, cfg, std::slice::from_ref(ev), timing)
}

/// Handles the events of one payload (see [`Client::parse_all`]) in order, on one resume of the run: the
/// first deny or block is the answer (a call of several commands runs only when each is allowed), else
/// the last note. Cline starts its TaskStart hook without waiting for it, so its events wait (at most the
/// lock timeout) for the session's state that hook writes.
pub fn handle_all(policy: Arc<Policy>, cfg: &Config, evs: &[HookEvent], timing: &mut Timing) -> Result<Answer> {
    let session = match evs {
        [] => return Ok(Answer::Pass),
        [first, rest @ ..] => {
            if rest.iter().any(|e| e.session() != first.session()) {
                bail!("the events of one payload name several sessions");
            }
            first.session()
        }
    };
    if !crate::files::is_safe_name(session) {
        bail!("`{session}` is not a usable session id");
    }
    check_not_broken(&cfg.runs, session)?;
    if let [HookEvent::SessionStart { .. }] = evs {
        return start(policy, cfg, session);
    }
    if cfg.client == Client::Cline {
        let deadline = Instant::now() + cfg.lock_timeout;
        while !has_state(&cfg.runs, session) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _lock = lock(&cfg.runs, session, false, cfg.lock_timeout)?;
    let mut run = resume(policy, cfg, session, timing)?;
    let (t, calls) = (Instant::now(), crate::component_calls());
    let mut answer = Answer::Pass;
    for ev in evs {
        match decide(cfg, ev, &mut run, None)? {
            a @ (Answer::Deny(_) | Answer::Block(_)) => {
                answer = a;
                break;
            }
            Answer::Pass => {}
            note => answer = note,
        }
    }
    timing.decide_us = t.elapsed().as_micros();
    timing.decide_calls = crate::component_calls() - calls;
    Ok(answer)
}

fn agent_text(a: &RunAnswer) -> String {
    format!("runbook: {}", a.explanation)
}

/// The key under which the server remembers a call the module allowed (see [`decide`]).
fn call_key(tool: &str, input: &Value) -> String {
    format!("{tool}\u{0}{input}")
}

/// Decides one event on a run. `allowed`: the calls of this process's lifetime whose last PreToolUse
/// the module allowed (the server keeps it; a command process has none), which is all a
/// PermissionRequest is judged by: it records nothing, and a call the module did not allow, or that
/// this process never saw allowed, is denied (a server restarted since asks the agent to retry).
pub(crate) fn decide(cfg: &Config, ev: &HookEvent, run: &mut Run, allowed: Option<&mut BTreeSet<String>>) -> Result<Answer> {
    decide_with(cfg, &FileSessions(&cfg.runs), ev, run, allowed)
}

/// [`decide`], marking a session broken in `sessions`.
fn decide_with(cfg: &Config, sessions: &dyn Sessions, ev: &HookEvent, run: &mut Run, allowed: Option<&mut BTreeSet<String>>) -> Result<Answer> {
    let answer = decide_on(cfg, ev, run, allowed);
    if answer.is_err() && matches!(run.broken(), Some(RunError::Evidence(_))) {
        sessions.mark_broken(ev.session());
    }
    answer
}

/// Where a session whose evidence could not be written keeps its state ([`Sessions::mark_broken`]).
fn broken_path(runs: &Path, session: &str) -> PathBuf {
    hook_dir(runs).join(format!("{session}.broken.json"))
}

/// Refuses every event of a session marked broken, SessionStart included (a resumed or compacted
/// session must not begin its runbook again on the disk that failed it).
fn check_not_broken(runs: &Path, session: &str) -> Result<()> {
    let p = broken_path(runs, session);
    if std::fs::symlink_metadata(&p).is_ok() {
        let run = std::fs::read(&p).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()).and_then(|v| v["run_id"].as_str().map(str::to_string));
        bail!(
            "session `{session}` is over: its evidence could not be written (a full or failing disk) in run {}; every later event of it is refused. Free the disk, then start a new session (`runbook-host verify` names what the bundle lacks)",
            run.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

fn decide_on(cfg: &Config, ev: &HookEvent, run: &mut Run, mut allowed: Option<&mut BTreeSet<String>>) -> Result<Answer> {
    let finished =
        |run: &Run| format!("runbook: run {} is finished and its evidence is sealed; no further tool call is supervised in this session.", run.run_id());
    match ev {
        HookEvent::SessionStart { .. } => unreachable!("handled by start"),
        HookEvent::PreToolUse { tool, input, call_id, client, .. } => {
            if run.finished() {
                return Ok(Answer::Deny(finished(run)));
            }
            run.apply_answered_approval_for(tool, input)?;
            let a = run.invoke_from(tool, input, call_id.as_deref(), None, client.as_ref())?;
            if let Some(m) = allowed.as_deref_mut() {
                let key = call_key(tool, input);
                if a.kind() == DecisionKind::Allow {
                    m.insert(key);
                } else {
                    m.remove(&key);
                }
            }
            match a.kind() {
                DecisionKind::Allow => Ok(Answer::Pass),
                DecisionKind::NeedsApproval => {
                    let step = a.decision.step.clone();
                    let sha = match a.call_sha256.clone() {
                        Some(h) => h,
                        None => run.call_sha256(tool, input)?,
                    };
                    run.request_approval(step.as_deref(), tool, &input.to_string(), &sha)?;
                    Ok(Answer::Deny(format!(
                        "runbook: {} `{tool}` with these exact arguments (call sha256 {sha}) awaits a human's approval: a person runs `{}` in another terminal, then this same call is retried. Do not try another way around the gate.",
                        a.explanation,
                        run.approve_command(step.as_deref())
                    )))
                }
                _ => Ok(Answer::Deny(agent_text(&a))),
            }
        }
        HookEvent::PostToolUse { tool, response, call_id, failed, client, .. } => {
            if run.finished() {
                return Ok(Answer::Block(finished(run)));
            }
            let a = run.result_from(tool, response, *failed || claude::is_error(response), call_id.as_deref(), client.as_ref())?;
            if a.kind() == DecisionKind::Halt {
                let outcome = run.state()?.outcome.map(|o| format!(" The outcome is {}.", crate::wire::code(o))).unwrap_or_default();
                return Ok(Answer::Block(format!("{}{outcome} Stop and tell the user.", agent_text(&a))));
            }
            Ok(Answer::Pass)
        }
        HookEvent::PermissionRequest { tool, input, .. } => {
            if run.finished() {
                return Ok(Answer::Deny(finished(run)));
            }
            if allowed.is_some_and(|m| m.contains(&call_key(tool, input))) {
                // The module allowed this very call: the client's own prompt may go ahead.
                return Ok(Answer::Pass);
            }
            Ok(Answer::Deny(format!(
                "runbook: `{tool}` with these arguments was not allowed by the policy module in this session (a denied or gated call, or one it never saw); retry the call so that it is decided."
            )))
        }
        HookEvent::Stop { again, .. } => {
            if run.finished() {
                return Ok(Answer::Pass);
            }
            run.tick_if_due()?;
            // At Stop the model has given its answer (docs/spec/adapters.md#adapter-duties): the completion condition and
            // `final_output` checkpoints are judged from this event.
            if run.state()?.phase != crate::Phase::Over {
                run.final_output()?;
            }
            let st = run.state()?;
            if st.at_terminal || st.phase == crate::Phase::Over {
                let outcome = run.end(EndReason::Normal)?;
                return Ok(Answer::Note(format!("runbook: run {} ended: {}.", run.run_id(), crate::wire::outcome_sentence(run.policy(), outcome))));
            }
            let Some(step) = st.step else {
                return Ok(Answer::Note(format!("runbook: the final answer is recorded for run {}; the run is judged when the session ends.", run.run_id())));
            };
            let msg = format!("runbook: run {} is at step `{step}`, not at a terminal of the runbook, so the procedure is incomplete", run.run_id());
            if cfg.keep_working && !again {
                Ok(Answer::Block(format!("{msg}. Keep working towards a terminal of the runbook.")))
            } else {
                Ok(Answer::Note(format!("{msg}.")))
            }
        }
        HookEvent::SessionEnd { .. } => {
            if !run.finished() {
                run.end(EndReason::Normal)?;
            }
            Ok(Answer::Pass)
        }
    }
}

/// The tools the client allows at all: `--allowlist`, else the runbook's tools less those the client's
/// permission rules deny outright.
fn allowlist(cfg: &Config, envelope: &Value) -> Result<Vec<String>> {
    if let Some(a) = &cfg.allowlist {
        return Ok(a.clone());
    }
    let mut tools: Vec<String> =
        envelope["capabilities"].as_object().map(|c| c.values().filter_map(|v| v["tool"].as_str().map(str::to_string)).collect()).unwrap_or_default();
    tools.sort();
    tools.dedup();
    let deny = permissions::deny_rules(&cfg.settings).map_err(anyhow::Error::msg)?;
    Ok(permissions::allowed(&tools, &deny))
}

fn state_path(runs: &Path, session: &str) -> PathBuf {
    hook_dir(runs).join(format!("{session}.json"))
}

/// Whether the session has state (a run begun at an earlier SessionStart). A symlink in the state
/// file's place is not a session: it is replaced when the session starts, never followed.
fn has_state(runs: &Path, session: &str) -> bool {
    std::fs::symlink_metadata(state_path(runs, session)).is_ok_and(|m| m.is_file())
}

/// The sessions whose state this runs directory holds (`.hook/<session>.json`), sorted.
pub fn sessions(runs: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(hook_dir(runs))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).filter(|s| crate::files::is_safe_name(s)).map(str::to_string))
                .filter(|s| has_state(runs, s))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn start(policy: Arc<Policy>, cfg: &Config, session: &str) -> Result<Answer> {
    let _lock = lock(&cfg.runs, session, true, cfg.lock_timeout)?;
    if has_state(&cfg.runs, session) {
        // A resumed session (`--resume`, `/clear`, compaction) keeps its run.
        load_state(&cfg.runs, session)?;
        return Ok(Answer::Pass);
    }
    Ok(create(policy, cfg, session)?.0)
}

/// Begins the session's run (the caller holds the session's lock): resolves and pins the runbook,
/// claims, and writes the session's state. A refused start is an error (the client blocks).
fn create(policy: Arc<Policy>, cfg: &Config, session: &str) -> Result<(Answer, Run)> {
    let (answer, run, state) = create_at(policy, cfg, None, None, session)?;
    FileSessions(&cfg.runs).write_state(session, &state)?;
    Ok((answer, run))
}

/// [`create`]'s run, in `at` (a store and the run's options) rather than under `cfg.runs`, of `doc`
/// rather than `cfg.runbook` resolved; the session's state to keep is returned, not written.
fn create_at(
    policy: Arc<Policy>,
    cfg: &Config,
    at: Option<(SharedStore, RunOptions)>,
    doc: Option<&registry::Resolved>,
    session: &str,
) -> Result<(Answer, Run, SessionState)> {
    let reference = cfg.runbook.as_deref().ok_or_else(|| anyhow!("no runbook is configured: pass --runbook REF (or set RUNBOOK_HOOK_RUNBOOK)"))?;
    let doc = match doc {
        Some(d) => d.clone(),
        // Kept typed under anyhow: `downcast_ref::<RegistryError>()` tells a refusal from a fault.
        None => registry::resolve_with(reference, &cfg.registry)?,
    };
    if doc.signed_approvals && cfg.allowed_signers.is_none() {
        bail!("the registry requires signed approvals for {reference}: pass --allowed-signers FILE to the hook (`hook install --allowed-signers FILE`)");
    }
    let envelope = match policy.envelope(&doc.bytes)? {
        Ok(e) => e,
        Err(f) => bail!("the runbook {reference} does not lint clean ({} findings): run `{} lint` on it", f.len(), crate::invocation()),
    };
    let env_v: Value = serde_json::from_str(&envelope)?;
    let claim = Claim {
        profile: cfg.profile,
        allowlist: allowlist(cfg, &env_v)?,
        risk_ceiling: Risk::Irreversible,
        coverage: Coverage::Complete,
        agent: format!("{}:{session}", cfg.client.agent()),
        available: None,
    };
    // A signers file that cannot be used refuses the session before its run begins.
    let signers = cfg.allowed_signers.as_deref().map(|p| Signers::load(p, cfg.allow_software_keys)).transpose()?;
    let (mut run, a) = match at {
        None => Run::create_with(policy, &doc, claim, &cfg.runs, ADAPTER, guard(cfg), cfg.receipt_key.clone())?,
        Some((store, opts)) => Run::create_in(policy, &doc, claim, store, ADAPTER, guard(cfg), RunOptions { receipt_key: cfg.receipt_key.clone(), ..opts })?,
    };
    if let Some(sg) = signers {
        run.require_signed_approvals(sg)?;
    }
    if !a.allowed() {
        bail!("{} (run {}, runbook {reference})", a.explanation, run.run_id());
    }
    let state = SessionState { run_id: run.run_id().to_string(), t0_ms: run.t0_ms(), pin: run.pin() };
    let note = Answer::Note(format!(
        "runbook: supervising this session with {} (run {}, profile {}); the policy module decides every tool call.",
        doc.reference,
        run.run_id(),
        crate::wire::profile(cfg.profile)
    ));
    Ok((note, run, state))
}

/// The hook with everything in memory: the sessions ([`MemorySessions`]), each run's bundle (one
/// [`MemoryStore`] for all, as one runs directory), each run's approval channel, and each session's
/// [`Run`] resident between its events (as the resident server keeps it), so no event replays the run.
/// Decisions are [`decide`]'s, as in both production modes. What a resident run wrote can be replayed
/// from the store at any time ([`MemoryHook::replay`]): the check that the evidence always replays.
pub struct MemoryHook {
    pub store: MemoryStore,
    sessions: MemorySessions,
    runs: BTreeMap<String, Run>,
    /// The runs' clock (every run reads it; a manual one makes the bundles reproducible).
    pub clock: crate::clock::Clock,
    /// The document every session runs (instead of resolving `cfg.runbook`), when given.
    pub doc: Option<registry::Resolved>,
    created: u64,
}

impl MemoryHook {
    pub fn new(store: MemoryStore, clock: crate::clock::Clock, doc: Option<registry::Resolved>) -> MemoryHook {
        MemoryHook { store, sessions: MemorySessions::default(), runs: BTreeMap::new(), clock, doc, created: 0 }
    }

    /// The options of a run on this hook's store: its clock, a numbered run id (`run-1`, ...), no `git`.
    fn options(&mut self) -> RunOptions {
        self.created += 1;
        RunOptions {
            facts: crate::bundle::BundleFacts { clock: self.clock.clone(), ..Default::default() },
            run_id: Some(format!("run-{}", self.created)),
            ..Default::default()
        }
    }

    /// Handles one event as [`handle`] does.
    pub fn handle(&mut self, policy: Arc<Policy>, cfg: &Config, ev: &HookEvent) -> Result<Answer> {
        let session = ev.session();
        if !crate::files::is_safe_name(session) {
            bail!("`{session}` is not a usable session id");
        }
        self.sessions.check_not_broken(session)?;
        if let HookEvent::SessionStart { .. } = ev {
            if self.sessions.has_state(session) {
                return Ok(Answer::Pass);
            }
            let opts = self.options();
            let (note, run, state) = create_at(policy, cfg, Some((self.store.shared(), opts)), self.doc.as_ref(), session)?;
            self.sessions.states.insert(session.to_string(), state);
            self.runs.insert(session.to_string(), run);
            return Ok(note);
        }
        if !self.runs.contains_key(session) {
            let (run, _) = self.replay(policy, cfg, session)?;
            self.runs.insert(session.to_string(), run);
        }
        let run = self.runs.get_mut(session).expect("resident");
        let answer = decide_with(cfg, &self.sessions, ev, run, None);
        if answer.is_err() && matches!(run.broken(), Some(RunError::Evidence(_))) {
            self.sessions.broken.insert(session.to_string(), run.run_id().to_string());
            self.sessions.states.remove(session);
            self.runs.remove(session);
        }
        answer
    }

    /// The session's run resumed from the store by a full replay ([`Run::resume_in`], the pin checked),
    /// independent of the resident one: what a command-mode process would resume.
    pub fn replay(&self, policy: Arc<Policy>, cfg: &Config, session: &str) -> Result<(Run, Resumed)> {
        let st = self.sessions.load_state(session)?;
        let opts = RunOptions { facts: crate::bundle::BundleFacts { clock: self.clock.clone(), ..Default::default() }, ..Default::default() };
        let (run, r) = Run::resume_in(policy, self.store.shared(), &st.run_id, st.t0_ms, Some(&st.pin), guard(cfg), opts)?;
        Ok((run, r))
    }

    /// The session's resident run, if it has one.
    pub fn run(&mut self, session: &str) -> Option<&mut Run> {
        self.runs.get_mut(session)
    }

    /// Drops the session's resident run: its next event resumes it from the store (a full replay).
    pub fn evict(&mut self, session: &str) {
        self.runs.remove(session);
    }

    /// The session's state, if it has one.
    pub fn state(&self, session: &str) -> Option<SessionState> {
        self.sessions.states.get(session).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_hook_decides_with_its_run_resident_and_its_evidence_replays() {
        let tmp = tempfile::tempdir().unwrap();
        let doc_path = tmp.path().join("runbook.yaml");
        std::fs::write(&doc_path, include_bytes!("../../../../host/tests/claude/say-hello.yaml")).unwrap();
        let doc = registry::resolve(&doc_path.to_string_lossy(), "unused").unwrap();
        let cfg = Config {
            runbook: Some("runbook.yaml".into()),
            registry: registry::Settings::new("memory/registry"),
            receipt_key: None,
            guard_paths: Vec::new(),
            runs: "memory".into(),
            profile: Profile::R2,
            keep_working: false,
            lock_timeout: Duration::from_millis(100),
            allowed_signers: None,
            allow_software_keys: false,
            allowlist: None,
            settings: Vec::new(),
            client: Client::Claude,
        };
        let policy = Arc::clone(crate::files::shared_policy().unwrap());
        let store = MemoryStore::new();
        let mut h = MemoryHook::new(store.clone(), crate::clock::Clock::manual(1_780_000_000_000), Some(doc));
        let ev = |v: Value| claude::parse(v.to_string().as_bytes()).unwrap();
        let start = h.handle(Arc::clone(&policy), &cfg, &ev(json!({"session_id": "s", "hook_event_name": "SessionStart", "source": "startup"}))).unwrap();
        assert!(matches!(start, Answer::Note(ref m) if m.contains("supervising")), "{start:?}");
        let pre =
            json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "echo hello"}, "tool_use_id": "t1"});
        h.handle(Arc::clone(&policy), &cfg, &ev(pre)).unwrap();
        let run_id = h.state("s").unwrap().run_id;
        let recorded = h.run("s").unwrap().events_recorded();
        assert!(recorded >= 2, "the start and the call are recorded");
        let (again, r) = h.replay(Arc::clone(&policy), &cfg, "s").unwrap();
        assert_eq!((r.events, again.chain_head()), (recorded, h.run("s").unwrap().chain_head()));
        // Evicted, the next event resumes the run from the store.
        h.evict("s");
        h.handle(Arc::clone(&policy), &cfg, &ev(json!({"session_id": "s", "hook_event_name": "SessionEnd"}))).unwrap();
        assert!(h.run("s").unwrap().finished());
        assert!(store.get(&format!("{run_id}/receipt.json")).is_some(), "the receipt is in the store");
        assert!(!tmp.path().join("memory").exists() && !Path::new("memory").exists(), "nothing was written to disk");
    }

    #[test]
    fn a_renamed_call_keeps_the_clients_own_name_and_arguments() {
        let pre = json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "run_shell_command", "tool_input": {"command": "ls"}});
        let HookEvent::PreToolUse { tool, client, .. } = Client::Qwen.parse(None, pre.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!(tool, "Bash");
        assert_eq!(client, Some(ClientCall { client: "qwen".into(), tool: "run_shell_command".into(), arguments: Some(json!({"command": "ls"})) }));
        // Arguments renamed under a kept name, and a Copilot payload's arguments as a JSON string.
        let copilot = json!({"sessionId": "s", "toolName": "view", "toolArgs": "{\"path\":\"/a\"}"});
        let HookEvent::PreToolUse { input, client, .. } = Client::Copilot.parse(Some("preToolUse"), copilot.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!(input, json!({"file_path": "/a"}));
        assert_eq!(client.unwrap().arguments, Some(json!({"path": "/a"})), "the arguments as Copilot sent them (recorded by their hash)");
        // A result names the client's tool only; a call already canonical keeps nothing.
        let post = json!({"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "read_file", "tool_input": {}, "tool_response": "x"});
        let HookEvent::PostToolUse { client, .. } = Client::Qwen.parse(None, post.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!(client, Some(ClientCall { client: "qwen".into(), tool: "read_file".into(), arguments: None }));
        let codex = json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}});
        let HookEvent::PreToolUse { client, .. } = Client::Codex.parse(None, codex.to_string().as_bytes()).unwrap() else { panic!() };
        assert_eq!(client, None);
    }
}
