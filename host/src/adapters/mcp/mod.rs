//! The MCP proxy behind `runbook-host run` (docs/spec/adapters.md#the-mcp-proxy, #observations-per-adapter and #adapter-duties).
//!
//! To the client it is one MCP server over stdio (rmcp's server over standard input and output), or over
//! Streamable HTTP with `--listen` (`http`); it starts the MCP servers as children (rmcp's client over
//! `TokioChildProcess`) or reaches them by URL (`upstream`). Every decision comes from the policy
//! module: the proxy turns what it sees into events (`start`, `invoke`, `result`, `approval`, `advance`,
//! `tick`, `final_output`, `end`), feeds them to one session, records each event and its decision in the run
//! bundle as it happens, and acts on the decision: forward, answer a tool error naming the deviation, hold the
//! call for a human's approval, or answer `runbook_failed`.
//!
//! What it cannot see: anything that is not an MCP tool call through it (its coverage is `["shell"]`), so a
//! runbook with destructive or irreversible work is refused by admission (seed 000).

mod clients;
pub mod config;
mod handler;
mod http;
pub mod passthrough;
mod status;
mod upstream;

use crate::registry::RegistryErrorKind;
use crate::registry::{self, Resolved};
use crate::run::{Answer, Claim, Guard, Run, RunError};
use crate::signatures::Signers;
use crate::{wire, Coverage, DecisionKind, Deviation, EndReason, Outcome, Phase, Policy, Profile, Reason, Refusal, Risk};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

pub use upstream::{Said, Upstream};

/// What `runbook-host run` was asked to do.
pub struct Config {
    pub reference: String,
    /// Where `reference` resolves and what it must satisfy (a CA, a required signature).
    pub registry: registry::Settings,
    /// Signs each run's receipt (`receipt.dsse.json`).
    pub receipt_key: Option<ed25519_dalek::SigningKey>,
    /// Shadow mode (`--mode shadow`): decide and record everything, block nothing (see [`crate::run::RunOptions`]).
    pub shadow: bool,
    /// Files the guard protects besides the runs and the registry: keys, CAs, the registry cache.
    pub guard_paths: Vec<PathBuf>,
    pub runs: PathBuf,
    pub agent: Option<String>,
    pub approval_timeout: Duration,
    /// `--approve-via elicitation`: a gated call's client is asked for the approval too.
    pub approve_via_elicitation: bool,
    pub profile: Profile,
    pub risk_ceiling: Risk,
    pub list_allowlist: bool,
    pub servers: Vec<ServerSpec>,
    /// Where approvals must be signed: the keys that may sign them (loaded before anything starts).
    pub signers: Option<Signers>,
    /// Serve MCP over Streamable HTTP at this address instead of over stdio.
    pub listen: Option<SocketAddr>,
    /// PEM certificates trusted beside the system's roots for servers given by `https://` URL.
    pub upstream_ca: Vec<Vec<u8>>,
    /// How long a server may take to start: to answer `initialize` and list its tools.
    pub start_timeout: Duration,
    /// How long a forwarded call may take at its server.
    pub call_timeout: Duration,
    /// Over HTTP: a session without a request for this long is closed, and its run ends `client-closed`.
    pub session_idle: Duration,
    /// The parts of MCP besides tools passed through (every one but those `run --block` names).
    pub pass_through: Vec<passthrough::Kind>,
}

/// The kinds passed through: every one but those `run --block` names (`all`: none).
pub fn passed_kinds(blocked: &[String]) -> Vec<passthrough::Kind> {
    use passthrough::Kind;
    let all = [
        ("resources", Kind::Resources),
        ("prompts", Kind::Prompts),
        ("completions", Kind::Completions),
        ("logging", Kind::Logging),
        ("sampling", Kind::Sampling),
        ("elicitation", Kind::Elicitation),
        ("roots", Kind::Roots),
    ];
    all.iter().filter(|(n, _)| !blocked.iter().any(|x| x == n || x == "all")).map(|(_, k)| *k).collect()
}

/// One server behind the proxy: a command it starts (`argv`, `env`), a URL it reaches over Streamable
/// HTTP (`url`, with the `headers` the user gave, such as a token of the proxy's own), or a server in this
/// very process at the other end of an in-memory pipe (`stream`: embedders, tests, fuzzing).
#[derive(Debug, Clone, Default)]
pub struct ServerSpec {
    pub name: Option<String>,
    pub argv: Vec<String>,
    /// Environment variables set for the server (from a configuration file's `env`).
    pub env: Vec<(String, String)>,
    pub url: Option<String>,
    pub headers: Vec<(String, String)>,
    pub stream: Option<ServerStream>,
}

/// The proxy's end of a pipe to an MCP server the embedder runs (newline-delimited JSON-RPC, as over
/// stdio). Taken by the first [`Upstream::start`] that uses it: one pipe, one connection.
#[derive(Clone, Default)]
pub struct ServerStream(Arc<Mutex<Option<tokio::io::DuplexStream>>>);

impl ServerStream {
    pub fn new(stream: tokio::io::DuplexStream) -> ServerStream {
        ServerStream(Arc::new(Mutex::new(Some(stream))))
    }

    pub(crate) fn take(&self) -> Option<tokio::io::DuplexStream> {
        lock(&self.0).take()
    }
}

impl std::fmt::Debug for ServerStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerStream")
    }
}

/// The adapter's name in the bundle, and what it cannot see (published in the `start` claim).
pub const ADAPTER: &str = "mcp-proxy";
pub const BLIND_TO: &str = "shell";

/// The module's answer in the proxy's terms: its typed decision and the module's sentence. The wire
/// codes are made only where they are shown ([`Dec::reason_code`], [`Dec::deviation_code`]).
#[derive(Clone, Debug)]
pub struct Dec {
    pub seq: u64,
    pub decision: DecisionKind,
    pub step: Option<String>,
    pub deviation: Option<Deviation>,
    pub reason: Option<Reason>,
    pub refusals: Vec<Refusal>,
    pub explanation: String,
}

impl From<Answer> for Dec {
    fn from(a: Answer) -> Dec {
        let d = a.decision;
        Dec { seq: d.seq, decision: d.kind, step: d.step, deviation: d.deviation, reason: d.reason, refusals: d.refusals, explanation: a.explanation }
    }
}

impl Dec {
    /// The reason's wire code (`assert-failed`), when there is one.
    pub fn reason_code(&self) -> Option<String> {
        self.reason.map(wire::code)
    }

    /// The deviation's wire code (`out-of-scope`), when there is one.
    pub fn deviation_code(&self) -> Option<String> {
        self.deviation.map(wire::code)
    }
}

/// Why the proxy answers `runbook_failed:<code>` ([`FailureKind::code`]) instead of the traffic.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// `run-ended`: the run is over and its bundle finished.
    RunEnded,
    /// `approval-refused`: an approval the host never asked for, or unsigned where signatures are
    /// required; nothing was recorded and the run goes on.
    ApprovalRefused,
    /// `bundle-unwritable`: the evidence cannot be written (a full or failing disk).
    BundleUnwritable,
    /// `host-error`: the host or the module failed.
    HostError,
    /// `refused:<codes>`: admission refused the run; the refusals' codes (or the reason's), joined by commas.
    Refused(String),
    /// The document did not resolve: the registry's code (`unknown-runbook`, `signature-missing`, ...).
    Registry(RegistryErrorKind),
    /// `signed-approvals-required`: the registry requires signed approvals and no signers were given.
    SignedApprovalsRequired,
    /// `approval-channel-refused`: `--approve-via elicitation` cannot be honoured for this run.
    ApprovalChannelRefused,
    /// `listen-failed`: the address to listen on could not be taken.
    ListenFailed,
    /// `server-unavailable`: a server behind the proxy did not start.
    ServerUnavailable,
}

impl FailureKind {
    /// The code after `runbook_failed:`, and the `runbook_failed` of the MCP error's data.
    pub fn code(&self) -> String {
        match self {
            FailureKind::RunEnded => "run-ended".into(),
            FailureKind::ApprovalRefused => "approval-refused".into(),
            FailureKind::BundleUnwritable => "bundle-unwritable".into(),
            FailureKind::HostError => "host-error".into(),
            FailureKind::Refused(codes) => format!("refused:{codes}"),
            FailureKind::Registry(k) => k.code().into(),
            FailureKind::SignedApprovalsRequired => "signed-approvals-required".into(),
            FailureKind::ApprovalChannelRefused => "approval-channel-refused".into(),
            FailureKind::ListenFailed => "listen-failed".into(),
            FailureKind::ServerUnavailable => "server-unavailable".into(),
        }
    }
}

/// A refusal before anything ran: `runbook_failed:<code>` and a sentence for the person reading logs.
#[derive(Clone, Debug)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Failure {
        Failure { kind, message: message.into() }
    }

    pub fn text(&self) -> String {
        format!("runbook_failed:{}", self.kind.code())
    }
}

impl From<RunError> for Failure {
    fn from(e: RunError) -> Failure {
        let kind = match e {
            RunError::Finished(_) => FailureKind::RunEnded,
            RunError::Refused(_) => FailureKind::ApprovalRefused,
            // The evidence cannot be written (a full or failing disk): said as such, so an operator
            // looks at the disk, not at the agent.
            RunError::Evidence(_) => FailureKind::BundleUnwritable,
            RunError::Tampered(_) | RunError::Module(_) => FailureKind::HostError,
        };
        Failure { kind, message: e.to_string() }
    }
}

/// The proxy's run: the driver once the client is known, and what only the proxy tracks (what the
/// client was last shown). Held under one lock, never across an await, so events reach the module and the
/// bundle in one order with non-decreasing `at`.
pub struct RunState {
    pub run: Option<Run>,
    pub agent: Option<String>,
    /// Set once the `start` claim was fed: None while not started; Some(Err) when refused or broken.
    pub started: Option<Result<(), Failure>>,
    pub ended: Option<u8>,
    /// The tool names last shown to the client (for `notifications/tools/list_changed`).
    pub last_listed: Option<Vec<String>>,
}

/// What every run of one proxy shares: the document, the module, the servers, the options.
pub struct Base {
    pub policy: Arc<Policy>,
    pub doc: Resolved,
    pub envelope: Option<Value>,
    pub upstream: Upstream,
    pub profile: Profile,
    pub risk_ceiling: Risk,
    pub list_allowlist: bool,
    pub agent_override: Option<String>,
    pub approval_timeout: Duration,
    /// `--approve-via elicitation` (see `handler::Proxy::ask_approval`).
    pub approve_via_elicitation: bool,
    pub signers: Option<Signers>,
    pub runs: PathBuf,
    /// Where the runs' bundles go instead of `runs` (a [`crate::bundle::MemoryStore`]: tests and the fuzz
    /// target); `runs` then only names it. Held approvals still poll the run directory's files, which a
    /// memory run does not have: a gated call there is answered at once as unusable.
    pub store: Option<crate::bundle::SharedStore>,
    pub registry: String,
    pub receipt_key: Option<ed25519_dalek::SigningKey>,
    pub shadow: bool,
    pub guard_paths: Vec<PathBuf>,
    pub session_idle: Duration,
}

/// One run: over stdio the proxy's only one; over HTTP one per MCP session (2025-11-25), plus one shared by
/// the requests that come without a session (2026-07-28).
pub struct Shared {
    pub base: Arc<Base>,
    pub run: Mutex<RunState>,
    pub client: Mutex<Option<rmcp::Peer<rmcp::RoleServer>>>,
    /// Requests that began and that got an answer: the difference is what is in flight.
    pub requests_begun: AtomicU64,
    pub requests_answered: AtomicU64,
    /// When the last request began (ms since the epoch): a session closed after `--session-idle` of
    /// silence ends as `client-closed`.
    pub last_request_ms: AtomicU64,
    /// The client used the `initialize` handshake (and so receives `notifications/tools/list_changed`);
    /// a client on the handshake-less lifecycle is shown the allowlist instead.
    pub initialized: AtomicBool,
    /// The last supervised call was answered `needs-approval` after waiting in vain (end reason
    /// `approval-timeout` if the client leaves next).
    pub last_call_timed_out: AtomicBool,
    /// Approval requests whose answer was fed to the module.
    pub applied: Mutex<std::collections::BTreeSet<String>>,
    /// Woken after every event, so the deadline timer looks at the run's next deadline again.
    pub deadline_changed: Notify,
}

impl std::ops::Deref for Shared {
    type Target = Base;
    fn deref(&self) -> &Base {
        &self.base
    }
}

/// Every run a proxy opened, so that what a server says reaches each, and each is ended when the proxy stops.
pub struct Hub {
    pub base: Arc<Base>,
    runs: Mutex<Vec<Arc<Shared>>>,
    stateless: OnceLock<Arc<Shared>>,
    /// The worst exit code of the runs already let go (their sessions ended): the proxy's exit code
    /// counts them too (0 only when every run completed).
    let_go: std::sync::atomic::AtomicU8,
}

impl Hub {
    pub fn new(base: Arc<Base>) -> Arc<Hub> {
        Arc::new(Hub { base, runs: Mutex::new(Vec::new()), stateless: OnceLock::new(), let_go: Default::default() })
    }

    /// A new run (not started: the bundle is made at the client's first request).
    pub fn open(&self) -> Arc<Shared> {
        let s = Arc::new(Shared {
            base: Arc::clone(&self.base),
            run: Mutex::new(RunState { run: None, agent: None, started: None, ended: None, last_listed: None }),
            client: Mutex::new(None),
            requests_begun: AtomicU64::new(0),
            requests_answered: AtomicU64::new(0),
            last_request_ms: AtomicU64::new(crate::clock::now_ms()),
            initialized: AtomicBool::new(false),
            last_call_timed_out: AtomicBool::new(false),
            applied: Mutex::new(Default::default()),
            deadline_changed: Notify::new(),
        });
        let mut runs = lock(&self.runs);
        // Runs that ended are let go (their bundles are complete).
        runs.retain(|r| {
            let ended = lock(&r.run).ended;
            self.let_go(ended);
            ended.is_none()
        });
        runs.push(Arc::clone(&s));
        s
    }

    /// A run that ended is no longer the hub's to end or to tell.
    pub fn forget(&self, run: &Arc<Shared>) {
        self.let_go(lock(&run.run).ended);
        lock(&self.runs).retain(|r| !Arc::ptr_eq(r, run));
    }

    fn let_go(&self, ended: Option<u8>) {
        if let Some(code) = ended {
            self.let_go.fetch_max(code, Ordering::SeqCst);
        }
    }

    /// The run of the requests that carry no session (2026-07-28 has none): one per proxy.
    pub fn stateless(&self) -> &Arc<Shared> {
        self.stateless.get_or_init(|| self.open())
    }

    fn all(&self) -> Vec<Arc<Shared>> {
        lock(&self.runs).clone()
    }

    /// A server's tools changed: each run looks again at what its client is shown.
    pub async fn tools_changed(&self) {
        for r in self.all() {
            r.after_event().await;
        }
    }

    /// Ends every run still open; the exit code is 0 only when each run that started completed.
    pub fn end_all(&self, reason: EndReason, final_output: bool) -> u8 {
        let mut code = self.let_go.load(Ordering::SeqCst);
        for r in self.all() {
            code = code.max(r.end_run(reason, final_output));
        }
        code
    }
}

/// Waits for a server's connection to close, acting on what servers say meanwhile.
async fn next_exit(said: &mut mpsc::UnboundedReceiver<Said>, hub: &Hub) -> usize {
    loop {
        match said.recv().await {
            Some(Said::Exited(i)) => return i,
            Some(Said::ToolsChanged(i)) => {
                eprintln!("runbook-host run: server `{}` changed its tools", hub.base.upstream.servers[i].name);
                hub.tools_changed().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// Runs `f`, which waits for the disk (an event is recorded and synced before its answer), without taking
/// a runtime worker with it: the other sessions' calls go on meanwhile, and their fdatasyncs run at the
/// same time (ext4 joins concurrent ones into one journal commit) instead of queueing behind two workers.
pub(crate) fn off_runtime<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn profile_str(p: Profile) -> String {
    wire::profile(p)
}

impl Shared {
    pub fn lock_run(&self) -> MutexGuard<'_, RunState> {
        lock(&self.run)
    }

    /// Records one exchange of traffic besides tool calls in the run's `traffic.ndjson`. A run that has
    /// not begun or has ended records nothing (there is no bundle to hold it); one whose evidence cannot
    /// be written fails, and the caller answers the failure instead of the traffic (fail closed).
    pub fn record_traffic(&self, t: &crate::run::Traffic) -> Result<(), Failure> {
        let mut st = self.lock_run();
        if st.ended.is_some() {
            return Ok(());
        }
        match st.run.as_mut() {
            Some(run) => off_runtime(|| run.record_traffic(t)).map_err(Failure::from),
            None => Ok(()),
        }
    }

    /// Feeds one event through the run driver. A run that cannot record, or a module that trapped, is
    /// broken for good (fail closed): the call that caused it is not forwarded and every later one
    /// answers `runbook_failed:host-error`.
    pub fn drive(&self, st: &mut RunState, f: impl FnOnce(&mut Run) -> Result<Answer, RunError>) -> Result<Dec, Failure> {
        let Some(run) = st.run.as_mut() else { return Err(Failure::new(FailureKind::HostError, "the run has not started")) };
        match off_runtime(|| f(run)) {
            Ok(a) => Ok(Dec::from(a)),
            Err(e) => {
                let f = Failure::from(e);
                eprintln!("runbook-host run: {}", f.message);
                Err(f)
            }
        }
    }

    /// The module's typed state, as the JSON `runbook_status` shows.
    pub fn status(&self, st: &mut RunState) -> Option<Value> {
        let s = st.run.as_mut()?.state().ok()?;
        Some(json!({
            "phase": wire::code(s.phase), "step": s.step, "scope": s.scope, "gated": s.gated, "approved": s.approved,
            "awaiting_verdict": s.awaiting_verdict, "outcome": s.outcome.map(wire::code), "events": s.events,
        }))
    }

    /// `runbook_failed:<outcome or reason>` once the run is over without completing, else None.
    /// Whether the run was admitted, is not broken and has ended (its outcome decided): what a shadow
    /// proxy forwards past.
    pub fn over_not_broken(&self, st: &mut RunState) -> bool {
        matches!(st.started, Some(Ok(()))) && st.run.as_mut().is_some_and(|r| r.broken().is_none() && r.state().is_ok_and(|s| s.phase == Phase::Over))
    }

    pub fn failed_text(&self, st: &mut RunState, reason: Option<&str>) -> Option<String> {
        if let Some(Err(f)) = &st.started {
            return Some(f.text());
        }
        let run = st.run.as_mut()?;
        if let Some(b) = run.broken() {
            return Some(Failure::from(b.clone()).text());
        }
        let state = run.state().ok()?;
        if state.phase != Phase::Over {
            return None;
        }
        match state.outcome {
            Some(Outcome::Completed) => None,
            Some(o) => Some(format!("runbook_failed:{}", wire::code(o))),
            None => Some(format!("runbook_failed:{}", reason.unwrap_or("halted"))),
        }
    }

    /// Starts the run once the agent is known (the client's `initialize`, or its first request): creates
    /// the bundle and feeds the `start` claim. Answers the refusal when admission refuses.
    pub fn ensure_started(self: &Arc<Self>, client_name: Option<&str>) -> Result<(), Failure> {
        let mut st = self.lock_run();
        if let Some(r) = &st.started {
            return r.clone();
        }
        let agent = self.agent_override.clone().or_else(|| client_name.filter(|n| !n.is_empty()).map(str::to_string)).unwrap_or_else(|| "mcp-client".into());
        let names = self.upstream.names();
        let claim = Claim {
            profile: self.profile,
            allowlist: names.clone(),
            risk_ceiling: self.risk_ceiling,
            coverage: Coverage::Blind(vec![BLIND_TO.to_string()]),
            agent: agent.clone(),
            available: Some(names),
        };
        st.agent = Some(agent);
        let mut guard = Guard::new(&self.runs, Some(&self.registry));
        for p in &self.guard_paths {
            guard.add_path(p);
        }
        let opts = crate::run::RunOptions { receipt_key: self.receipt_key.clone(), shadow: self.shadow, ..Default::default() };
        let created = match &self.store {
            None => Run::create_opts(Arc::clone(&self.policy), &self.doc, claim, &self.runs, ADAPTER, guard, opts),
            Some(store) => Run::create_in(Arc::clone(&self.policy), &self.doc, claim, Arc::clone(store), ADAPTER, guard, opts),
        };
        let result = match created {
            Err(e @ RunError::Evidence(_)) => Err(Failure::new(FailureKind::BundleUnwritable, e.to_string())),
            Err(e) => Err(Failure::from(e)),
            Ok((mut run, a)) => {
                if let Some(sg) = &self.signers {
                    if let Err(e) = run.require_signed_approvals(sg.clone()) {
                        eprintln!("runbook-host run: {e}");
                    }
                }
                let admitted = a.allowed();
                let dir = run.dir().display().to_string();
                let run_id = run.run_id().to_string();
                st.run = Some(run);
                if admitted {
                    eprintln!(
                        "runbook-host run: run {run_id} of {} ({}, trust {}) admitted at {}; bundle {dir}",
                        self.doc.reference,
                        &self.doc.sha256[..12],
                        self.doc.trust.as_str(),
                        profile_str(self.profile),
                    );
                    Ok(())
                } else {
                    let d = Dec::from(a);
                    let codes = if d.refusals.is_empty() {
                        d.reason_code().unwrap_or_else(|| "refused".into())
                    } else {
                        d.refusals.iter().map(|r| wire::code(*r)).collect::<Vec<_>>().join(",")
                    };
                    Err(Failure::new(FailureKind::Refused(codes), format!("{} (run {run_id}; {})", d.explanation, refusal_hint(&d.refusals))))
                }
            }
        };
        if let Err(f) = &result {
            eprintln!("runbook-host run: {}: {}", f.text(), f.message);
            st.ended = Some(1);
        }
        st.started = Some(result.clone());
        // What the client is shown from now on, so that any change is announced.
        let shown = self.visible_tool_names(&mut st);
        st.last_listed = Some(shown);
        drop(st);
        if result.is_ok() {
            self.spawn_deadline_timer();
        }
        result
    }

    /// One timer for the run's checkpoint deadlines: it sleeps until the module's next deadline and then
    /// feeds a `tick`, so a checkpoint that times out fails the run then, not at the next call (9.21).
    fn spawn_deadline_timer(self: &Arc<Self>) {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let next = {
                    let mut st = me.lock_run();
                    if st.ended.is_some() {
                        return;
                    }
                    match st.run.as_mut() {
                        Some(r) => r.next_deadline_ms().ok().flatten(),
                        None => return,
                    }
                };
                let Some(at) = next else {
                    me.deadline_changed.notified().await;
                    continue;
                };
                let wait = Duration::from_millis(at.saturating_sub(crate::clock::now_ms()));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {
                        let ticked = {
                            let mut st = me.lock_run();
                            if st.ended.is_some() {
                                return;
                            }
                            st.run.as_mut().map(|r| r.tick_if_due())
                        };
                        if let Some(Err(_)) = ticked {
                            return;
                        }
                        me.after_event().await;
                    }
                    _ = me.deadline_changed.notified() => {}
                }
            }
        });
    }

    /// After any event: when the tools the client should see changed, say so.
    pub async fn after_event(&self) {
        self.deadline_changed.notify_one();
        let changed = {
            let mut st = self.lock_run();
            let now = self.visible_tool_names(&mut st);
            let changed = st.last_listed.as_ref().is_some_and(|l| *l != now);
            if changed {
                st.last_listed = Some(now);
            }
            changed
        };
        if changed {
            let peer = lock(&self.client).clone();
            if let Some(p) = peer {
                let _ = p.notify_tool_list_changed().await;
            }
            self.upstream.clients.tools_changed(self as *const Shared as usize).await;
        }
    }

    /// The server tools the client is shown: the current step's scope (or every declared tool with
    /// `--list allowlist` and at R0), none once the run is over or refused.
    pub fn visible_tool_names(&self, st: &mut RunState) -> Vec<String> {
        if !matches!(st.started, Some(Ok(()))) {
            return Vec::new();
        }
        let Some(run) = st.run.as_mut() else { return Vec::new() };
        if self.shadow && run.broken().is_none() {
            // A shadow proxy hides nothing: every server's tool, whatever the step.
            return self.upstream.names();
        }
        // The module's rule (none once over; every declared tool at R0 or when the whole allowlist is
        // listed; else the step's); the proxy lists the whole allowlist before `initialized`, or by option.
        let whole = self.list_allowlist || !self.initialized.load(Ordering::SeqCst);
        run.visible_tools(&self.upstream.names(), whole).unwrap_or_default()
    }

    /// Ends the run: `final_output` first on a clean client shutdown (9.24), then `end {reason}`, the
    /// report, the bundle's end. Returns the exit code: 0 only when the outcome is `completed`.
    pub fn end_run(&self, reason: EndReason, final_output: bool) -> u8 {
        let mut st = self.lock_run();
        if let Some(code) = st.ended {
            return code;
        }
        let admitted = matches!(st.started, Some(Ok(())));
        let code = match st.run.as_mut().filter(|_| admitted) {
            Some(run) => {
                if final_output && run.state().is_ok_and(|s| s.phase != Phase::Over) {
                    let _ = run.final_output();
                }
                match run.end(reason) {
                    Ok(outcome) => {
                        eprintln!(
                            "runbook-host run: run {} ended ({}): outcome {}; bundle {}",
                            run.run_id(),
                            wire::code(reason),
                            wire::outcome_sentence(&self.policy, outcome),
                            run.dir().display()
                        );
                        if self.shadow {
                            eprintln!("runbook-host run: a SHADOW run: nothing was blocked; the calls the module did not allow that ran are in shadow.ndjson (exit 3)");
                        }
                        // The module's rule: 0 only when completed; a shadow run never exits 0 (3).
                        run.exit_code().unwrap_or(1)
                    }
                    Err(e) => {
                        eprintln!("runbook-host run: run {} could not end cleanly: {e}", run.run_id());
                        1
                    }
                }
            }
            _ => 1,
        };
        st.ended = Some(code);
        drop(st);
        // The deadline timer sees the run ended, and stops.
        self.deadline_changed.notify_one();
        code
    }

    /// How the run ends when its client leaves: nothing in flight is a clean shutdown (`final_output`
    /// first); a client that vanished mid-call is `client-closed`; one that left after a gated call
    /// waited in vain for a human is `approval-timeout`.
    pub fn leave_reason(&self) -> (EndReason, bool) {
        let begun = self.requests_begun.load(Ordering::SeqCst);
        let answered = self.requests_answered.load(Ordering::SeqCst);
        let in_flight = u32::try_from(begun.saturating_sub(answered)).unwrap_or(u32::MAX);
        let timed_out = self.last_call_timed_out.load(Ordering::SeqCst);
        match self.lock_run().run.as_mut().map(|r| r.leaving(in_flight, timed_out)) {
            Some(Ok(l)) => l,
            // No run, or a module that can no longer answer: nothing more is fed, as for a client that vanished.
            _ => (EndReason::ClientClosed, false),
        }
    }

    /// The approval command a human runs for this run.
    pub fn approve_command(&self, st: &RunState, step: Option<&str>) -> String {
        st.run.as_ref().map(|r| r.approve_command(step)).unwrap_or_default()
    }

    pub fn run_dir(&self, st: &RunState) -> Option<PathBuf> {
        st.run.as_ref().map(|r| r.dir().to_path_buf())
    }

    /// The run's approval channel (its directory's files, or memory for a run on a memory store): where
    /// the proxy asks, polls and writes a client's answer, so that the handler never assumes a disk.
    pub fn approval_channel(&self, st: &RunState) -> Option<crate::run::approvals::SharedChannel> {
        st.run.as_ref().map(|r| Arc::clone(r.approval_channel()))
    }
}

/// What the proxy can say beyond the module's sentence: which of its own options changes a refusal.
fn refusal_hint(refusals: &[Refusal]) -> String {
    let hints: Vec<String> = refusals
        .iter()
        .filter_map(|r| match r {
            Refusal::CoverageIncomplete => Some("the MCP proxy cannot see the shell; destructive work needs the tool-call hook".to_string()),
            Refusal::ProfileTooLow => Some("try --profile R2".into()),
            Refusal::RiskAboveCeiling => Some("see --risk-ceiling".into()),
            Refusal::CapabilityNotAllowed => Some("no server behind the proxy provides a tool the runbook needs".into()),
            Refusal::InvalidDocument => Some(format!("run `{} lint` on the runbook", crate::invocation())),
            Refusal::AutonomousAtR0 | Refusal::PrerequisiteUnmet => None,
        })
        .collect();
    if hints.is_empty() {
        "nothing ran".into()
    } else {
        format!("{}; nothing ran", hints.join("; "))
    }
}

/// The refusals admission gives a run of `document` before any server has started, asked of the module
/// with the claim the proxy will make (its profile and risk ceiling, blind to the shell). Which refusals
/// stand before the servers' tools are known is the module's rule (WIT `admission-preflight`); the rest
/// are judged at `initialize`. Any refusal here would be the same there, so the proxy says it now and
/// starts nothing.
pub fn refusals_before_servers(policy: &Policy, document: &[u8], profile: Profile, risk_ceiling: Risk) -> Result<Vec<Refusal>, crate::HostError> {
    let claim = crate::StartClaim {
        run_id: "preflight".into(),
        profile,
        allowlist: vec!["*".into()],
        risk_ceiling,
        coverage: Coverage::Blind(vec![BLIND_TO.to_string()]),
        agent: "mcp-client".into(),
        available: None,
    };
    policy.admission_preflight(document, &claim)
}

/// Runs the proxy until the client leaves (stdio), a server exits or a signal arrives; returns the exit code.
pub async fn main(config: Config) -> u8 {
    let listen = config.listen.is_some();
    // Resolve first: a document that does not resolve, or is tampered with, runs nothing (no server starts).
    let doc = match tokio::task::spawn_blocking({
        let (r, g) = (config.reference.clone(), config.registry.clone());
        move || registry::resolve_with(&r, &g)
    })
    .await
    {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return refuse(listen, Failure::new(FailureKind::Registry(e.kind), e.message)).await,
        Err(e) => return refuse(listen, Failure::new(FailureKind::HostError, e.to_string())).await,
    };
    if doc.signed_approvals && config.signers.is_none() {
        let message = format!("the registry requires signed approvals for {}: pass --allowed-signers FILE", doc.reference);
        return refuse(listen, Failure::new(FailureKind::SignedApprovalsRequired, message)).await;
    }
    // An answer through the client is not a signature, and a withheld elicitation cannot carry it: a run
    // that could not honour `--approve-via elicitation` is refused before anything starts.
    if config.approve_via_elicitation {
        let why = if doc.signed_approvals || config.signers.is_some() {
            Some("this run's approvals must be signed, and an answer through the client is not a signature (approve with `runbook-host approve --sign KEY`)")
        } else if !config.pass_through.contains(&passthrough::Kind::Elicitation) {
            Some("`--block` withholds elicitation, the channel it needs")
        } else {
            None
        };
        if let Some(why) = why {
            let message = format!("--approve-via elicitation cannot be used for {}: {why}", doc.reference);
            return refuse(listen, Failure::new(FailureKind::ApprovalChannelRefused, message)).await;
        }
    }
    let policy = match tokio::task::spawn_blocking(|| crate::files::shared_policy().map(Arc::clone)).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return refuse(listen, Failure::new(FailureKind::HostError, e.to_string())).await,
        Err(e) => return refuse(listen, Failure::new(FailureKind::HostError, e.to_string())).await,
    };
    let envelope = match policy.envelope(&doc.bytes) {
        Ok(Ok(e)) => serde_json::from_str(&e).ok(),
        Ok(Err(_)) => None,
        Err(e) => return refuse(listen, Failure::new(FailureKind::HostError, e.to_string())).await,
    };
    // A run admission would refuse whatever the servers offer (destructive work behind a proxy that cannot
    // see the shell, a profile too low, a risk above the ceiling): said now, before any server starts.
    match refusals_before_servers(&policy, &doc.bytes, config.profile, config.risk_ceiling) {
        Ok(refusals) if !refusals.is_empty() => {
            let codes: Vec<String> = refusals.iter().map(|r| wire::code(*r)).collect();
            let sentences: Vec<String> = codes.iter().filter_map(|c| policy.explain("refusal", c).ok().flatten()).collect();
            let message = format!("{} ({}; no server was started)", sentences.join("; "), refusal_hint(&refusals));
            return refuse(listen, Failure::new(FailureKind::Refused(codes.join(",")), message)).await;
        }
        Ok(_) => {}
        Err(e) => return refuse(listen, Failure::new(FailureKind::HostError, e.to_string())).await,
    }
    // The address is taken before any server starts, so a port in use costs nothing.
    let listener = match config.listen {
        Some(addr) => match http::bind(addr).await {
            Ok(l) => Some(l),
            Err(m) => return refuse(listen, Failure::new(FailureKind::ListenFailed, m)).await,
        },
        None => None,
    };
    let (said_tx, said_rx) = mpsc::unbounded_channel();
    let upstream =
        match Upstream::start(&config.servers, &config.upstream_ca, config.start_timeout, config.call_timeout, config.pass_through.clone(), said_tx).await {
            Ok(u) => u,
            Err(m) => return refuse(listen, Failure::new(FailureKind::ServerUnavailable, m)).await,
        };
    let base = Arc::new(Base {
        envelope,
        policy,
        doc,
        upstream,
        profile: config.profile,
        risk_ceiling: config.risk_ceiling,
        list_allowlist: config.list_allowlist,
        agent_override: config.agent.clone(),
        approval_timeout: config.approval_timeout,
        approve_via_elicitation: config.approve_via_elicitation,
        signers: config.signers.clone(),
        runs: config.runs.clone(),
        store: None,
        registry: config.registry.registry.clone(),
        receipt_key: config.receipt_key.clone(),
        shadow: config.shadow,
        guard_paths: config.guard_paths.clone(),
        session_idle: config.session_idle,
    });
    let hub = Hub::new(base);
    match listener {
        Some(l) => http::serve(hub, l, said_rx).await,
        None => stdio(hub, said_rx).await,
    }
}

/// SIGINT or SIGTERM, whichever comes first.
pub(crate) async fn signalled() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigint = signal(SignalKind::interrupt()).ok();
    let mut sigterm = signal(SignalKind::terminate()).ok();
    match (&mut sigint, &mut sigterm) {
        (Some(a), Some(b)) => tokio::select! { _ = a.recv() => {}, _ = b.recv() => {} },
        (Some(a), None) => {
            a.recv().await;
        }
        (None, Some(b)) => {
            b.recv().await;
        }
        (None, None) => std::future::pending::<()>().await,
    }
}

/// The proxy over stdio: one client, one run.
async fn stdio(hub: Arc<Hub>, mut said: mpsc::UnboundedReceiver<Said>) -> u8 {
    let shared = hub.open();
    let upstream = &hub.base.upstream;
    let signal = signalled();
    tokio::pin!(signal);
    let handler = handler::Proxy::fixed(Arc::clone(&shared));
    let serving = rmcp::serve_server(handler, rmcp::transport::stdio());
    tokio::pin!(serving);
    // Until the client has initialized: it may also leave, a server may die, or a signal arrive.
    let running = tokio::select! {
        r = &mut serving => r,
        i = next_exit(&mut said, &hub) => {
            eprintln!("runbook-host run: server `{}` exited before the client initialized", upstream.servers[i].name);
            upstream.shutdown(Duration::from_secs(5)).await;
            return 1;
        }
        _ = &mut signal => {
            upstream.shutdown(Duration::from_secs(5)).await;
            return 1;
        }
    };
    let running = match running {
        Ok(r) => r,
        Err(e) => {
            // An `initialize` answered with `runbook_failed` (admission refused), or a client that left.
            let refused = matches!(shared.lock_run().started, Some(Err(_)));
            if !refused {
                eprintln!("runbook-host run: the client did not initialize: {e}");
                shared.end_run(EndReason::ClientClosed, false);
            }
            upstream.shutdown(Duration::from_secs(5)).await;
            return 1;
        }
    };
    let reason = tokio::select! {
        // Standard input closed.
        _ = running.waiting() => shared.leave_reason(),
        i = next_exit(&mut said, &hub) => {
            eprintln!("runbook-host run: server `{}` exited", upstream.servers[i].name);
            (EndReason::ServerExited, false)
        }
        _ = &mut signal => (EndReason::Interrupted, false),
    };
    let code = shared.end_run(reason.0, reason.1);
    upstream.shutdown(Duration::from_secs(5)).await;
    code
}

/// One client over a byte stream, as over stdio but watching neither signals nor the servers' exits (the
/// fuzz target `mcp` drives the proxy through an in-memory pipe with it): serves until the client closes
/// its side, then ends the run. The exit code, and the run's bundle directory when a run was made.
pub async fn serve_stream<R, W>(hub: &Hub, read: R, write: W) -> (u8, Option<PathBuf>)
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let shared = hub.open();
    let handler = handler::Proxy::fixed(Arc::clone(&shared));
    let code = match rmcp::serve_server(handler, (read, write)).await {
        Ok(running) => {
            let _ = running.waiting().await;
            let (reason, final_output) = shared.leave_reason();
            shared.end_run(reason, final_output)
        }
        Err(_) if matches!(shared.lock_run().started, Some(Err(_))) => 1,
        Err(_) => shared.end_run(EndReason::ClientClosed, false),
    };
    let dir = shared.run_dir(&shared.lock_run());
    hub.forget(&shared);
    (code, dir)
}

/// Before any server started: answer the client's `initialize` (or first request) with
/// `runbook_failed:<code>`, then exit 1. Over HTTP nothing listens yet: the message is all.
async fn refuse(listen: bool, failure: Failure) -> u8 {
    eprintln!("runbook-host run: {}: {}", failure.text(), failure.message);
    if listen {
        return 1;
    }
    let handler = handler::Refusal { failure };
    // `initialize` is answered with the failure (serve then returns an error); a client on the
    // handshake-less lifecycle gets it on each request, for a while.
    if let Ok(running) = rmcp::serve_server(handler, rmcp::transport::stdio()).await {
        let _ = tokio::time::timeout(Duration::from_secs(10), running.waiting()).await;
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signatures::dsse::DsseErrorKind;

    /// Every failure's `runbook_failed:<code>` (clients and the tests read it): a renamed code fails here.
    #[test]
    fn failure_codes() {
        use FailureKind::*;
        let table = [
            (RunEnded, "run-ended"),
            (ApprovalRefused, "approval-refused"),
            (BundleUnwritable, "bundle-unwritable"),
            (HostError, "host-error"),
            (Refused("coverage-incomplete,profile-too-low".into()), "refused:coverage-incomplete,profile-too-low"),
            (Registry(RegistryErrorKind::UnknownRunbook), "unknown-runbook"),
            (Registry(RegistryErrorKind::Signature(DsseErrorKind::Untrusted)), "signature-untrusted"),
            (SignedApprovalsRequired, "signed-approvals-required"),
            (ApprovalChannelRefused, "approval-channel-refused"),
            (ListenFailed, "listen-failed"),
            (ServerUnavailable, "server-unavailable"),
        ];
        for (kind, code) in table {
            assert_eq!(kind.code(), code);
            assert_eq!(Failure::new(kind, "m").text(), format!("runbook_failed:{code}"));
        }
    }

    /// A run error's failure: approval-refused is its own kind (the gate stays shut, the run goes on).
    #[test]
    fn run_errors_as_failures() {
        let kind = |e: RunError| Failure::from(e).kind;
        assert_eq!(kind(RunError::Refused("x".into())), FailureKind::ApprovalRefused);
        assert_eq!(kind(RunError::Finished("x".into())), FailureKind::RunEnded);
        assert_eq!(kind(RunError::Evidence("x".into())), FailureKind::BundleUnwritable);
        assert_eq!(kind(RunError::Tampered(crate::run::Tampering::new("r", "run.json", "x"))), FailureKind::HostError);
        assert_eq!(kind(RunError::Module("x".into())), FailureKind::HostError);
    }
}
