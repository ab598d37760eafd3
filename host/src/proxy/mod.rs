//! The MCP stdio proxy behind `runbook-host run` (DESIGN 5, 9.23, 9.24).
//!
//! To the client it is one MCP server over stdio (rmcp's server over standard input and output); it starts
//! the MCP servers as children (rmcp's client over `TokioChildProcess`). Every decision comes from the policy
//! module: the proxy turns what it sees into events (`start`, `invoke`, `result`, `approval`, `advance`,
//! `tick`, `final_output`, `end`), feeds them to one session, records each event and its decision in the run
//! bundle as it happens, and acts on the decision: forward, answer a tool error naming the deviation, hold the
//! call for a human's approval, or answer `runbook_failed`.
//!
//! What it cannot see: anything that is not an MCP tool call through it (its coverage is `["shell"]`), so a
//! runbook with destructive or irreversible work is refused by admission (seed 000).

mod handler;
mod status;
mod upstream;

use runbook_host::bundle::{self, Bundle};
use runbook_host::registry::{self, Resolved};
use runbook_host::{Coverage, EndReason, Event, EventKind, Policy, Profile, Risk, Session, StartClaim};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub use upstream::Upstream;

/// What `runbook-host run` was asked to do.
pub struct Config {
    pub reference: String,
    pub registry: String,
    pub runs: PathBuf,
    pub agent: Option<String>,
    pub approval_timeout: Duration,
    pub profile: Profile,
    pub risk_ceiling: Risk,
    pub list_allowlist: bool,
    pub servers: Vec<ServerSpec>,
}

pub struct ServerSpec {
    pub name: Option<String>,
    pub argv: Vec<String>,
}

/// The adapter's name in the bundle, and what it cannot see (published in the `start` claim).
pub const ADAPTER: &str = "mcp-proxy";
pub const BLIND_TO: &str = "shell";

/// One decision line, parsed (DESIGN 9.16).
#[derive(Clone, Debug, Deserialize)]
pub struct Dec {
    pub seq: u64,
    pub decision: String,
    pub step: Option<String>,
    pub deviation: Option<String>,
    pub reason: Option<String>,
    #[serde(default)]
    pub refusals: Vec<String>,
}

/// A refusal before anything ran: `runbook_failed:<code>` and a sentence for the person reading logs.
#[derive(Clone, Debug)]
pub struct Failure {
    pub code: String,
    pub message: String,
}

impl Failure {
    pub fn text(&self) -> String {
        format!("runbook_failed:{}", self.code)
    }
}

/// The run's state: the session, the bundle, the clock. Held under one lock, never across an await, so
/// events reach the module and the bundle in one order with non-decreasing `at`.
pub struct RunState {
    pub session: Session,
    pub bundle: Option<Bundle>,
    pub t0: Option<Instant>,
    pub last_at: u64,
    pub run_id: Option<String>,
    pub agent: Option<String>,
    /// Set once the `start` claim was fed: None while not started; Some(Err) when refused or broken.
    pub started: Option<Result<(), Failure>>,
    /// The host could not record or the module trapped: every call answers `runbook_failed`.
    pub broken: Option<Failure>,
    pub ended: Option<u8>,
    /// The tool names last shown to the client (for `notifications/tools/list_changed`).
    pub last_listed: Option<Vec<String>>,
}

/// Everything the handler shares.
pub struct Shared {
    pub policy: Arc<Policy>,
    pub doc: Resolved,
    pub envelope: Option<Value>,
    pub envelope_text: Option<String>,
    pub upstream: Upstream,
    pub profile: Profile,
    pub risk_ceiling: Risk,
    pub list_allowlist: bool,
    pub agent_override: Option<String>,
    pub approval_timeout: Duration,
    pub runs: PathBuf,
    /// Strings that, inside a call's arguments, name the run directory, the registry or this binary (9.20).
    pub guards: Mutex<Vec<String>>,
    pub run: Mutex<RunState>,
    pub client: Mutex<Option<rmcp::Peer<rmcp::RoleServer>>>,
    /// Requests that began and that got an answer: the difference is what is in flight.
    pub requests_begun: AtomicU64,
    pub requests_answered: AtomicU64,
    /// The client used the `initialize` handshake (and so receives `notifications/tools/list_changed`);
    /// a client on the handshake-less lifecycle is shown the allowlist instead.
    pub initialized: AtomicBool,
    /// The last supervised call was answered `needs-approval` after waiting in vain (end reason
    /// `approval-timeout` if the client leaves next).
    pub last_call_timed_out: AtomicBool,
    /// Approval requests whose answer was fed to the module.
    pub applied: Mutex<std::collections::HashSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn profile_str(p: Profile) -> &'static str {
    match p {
        Profile::R0 => "R0",
        Profile::R1 => "R1",
        Profile::R2 => "R2",
    }
}

impl Shared {
    pub fn lock_run(&self) -> MutexGuard<'_, RunState> {
        lock(&self.run)
    }

    /// Feeds one event to the module and records it with its decision. A failure to record is fatal for
    /// the run (fail closed): the call that caused it is not forwarded and every later one answers
    /// `runbook_failed:host-error`.
    pub fn feed(&self, run: &mut RunState, kind: EventKind) -> Result<Dec, Failure> {
        if let Some(b) = &run.broken {
            return Err(b.clone());
        }
        let elapsed = run.t0.map(|t| t.elapsed().as_millis() as u64).unwrap_or(0);
        let at = elapsed.max(run.last_at);
        run.last_at = at;
        let event = Event { at, kind };
        let line = match self.policy.encode_event(&event) {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => return Err(Failure { code: "host-error".into(), message: format!("the event could not be encoded: {e}") }),
            Err(e) => return Err(self.break_run(run, format!("{e}"))),
        };
        let decision_line = run.session.handle_line(&line);
        if let Some(b) = run.bundle.as_mut() {
            if let Err(e) = b.record(&line, &decision_line) {
                return Err(self.break_run(run, format!("the run bundle could not be written: {e}")));
            }
        }
        let dec: Dec =
            serde_json::from_str(&decision_line).map_err(|e| self.break_run(run, format!("the module answered something that is not a decision: {e}")))?;
        if dec.reason.as_deref() == Some("host-trap") {
            return Err(self.break_run(run, "the policy module trapped".into()));
        }
        Ok(dec)
    }

    fn break_run(&self, run: &mut RunState, message: String) -> Failure {
        eprintln!("runbook-host run: {message}");
        let f = Failure { code: "host-error".into(), message };
        run.broken = Some(f.clone());
        f
    }

    /// The module's `status` (canonical JSON), parsed.
    pub fn status(&self, run: &mut RunState) -> Option<Value> {
        run.session.status().ok().and_then(|s| serde_json::from_str(&s).ok())
    }

    /// `runbook_failed:<outcome or reason>` once the run is over without completing, else None.
    pub fn failed_text(&self, run: &mut RunState, reason: Option<&str>) -> Option<String> {
        if let Some(b) = &run.broken {
            return Some(b.text());
        }
        if let Some(Err(f)) = &run.started {
            return Some(f.text());
        }
        if !run.session.is_over() {
            return None;
        }
        let outcome = self.status(run).and_then(|s| s["outcome"].as_str().map(str::to_string));
        match outcome {
            Some(o) if o == "completed" => None,
            Some(o) => Some(format!("runbook_failed:{o}")),
            None => Some(format!("runbook_failed:{}", reason.unwrap_or("halted"))),
        }
    }

    /// Starts the run once the agent is known (the client's `initialize`, or its first request): creates
    /// the bundle and feeds the `start` claim. Answers the refusal when admission refuses.
    pub fn ensure_started(self: &Arc<Self>, client_name: Option<&str>) -> Result<(), Failure> {
        let mut run = self.lock_run();
        if let Some(r) = &run.started {
            return r.clone();
        }
        let agent = self.agent_override.clone().or_else(|| client_name.filter(|n| !n.is_empty()).map(str::to_string)).unwrap_or_else(|| "mcp-client".into());
        let run_id = bundle::new_run_id();
        let b = match Bundle::create(&self.runs, &run_id, &self.doc, self.envelope_text.as_deref(), runbook_host::module_sha256(), ADAPTER) {
            Ok(b) => b,
            Err(e) => {
                let f = Failure { code: "bundle-unwritable".into(), message: format!("cannot create the run bundle under {}: {e}", self.runs.display()) };
                eprintln!("runbook-host run: {}", f.message);
                run.started = Some(Err(f.clone()));
                return Err(f);
            }
        };
        self.add_guard_paths(b.dir());
        run.bundle = Some(b);
        run.run_id = Some(run_id.clone());
        run.agent = Some(agent.clone());
        run.t0 = Some(Instant::now());
        let names = self.upstream.names();
        let claim = StartClaim {
            run_id,
            profile: self.profile,
            allowlist: names.clone(),
            risk_ceiling: self.risk_ceiling,
            coverage: Coverage::Blind(vec![BLIND_TO.to_string()]),
            agent,
            available: Some(names),
        };
        let result = match self.feed(&mut run, EventKind::Start(claim)) {
            Ok(d) if d.decision == "allow" => Ok(()),
            Ok(d) => {
                let refusals = if d.refusals.is_empty() { d.reason.clone().unwrap_or_else(|| "refused".into()) } else { d.refusals.join(",") };
                Err(Failure { code: format!("refused:{refusals}"), message: format!("admission refused the run: {}", explain_refusals(&d.refusals)) })
            }
            Err(f) => Err(f),
        };
        let admitted = result.is_ok();
        if let Some(b) = run.bundle.as_mut() {
            if let Err(e) = b.admitted(admitted) {
                let f = self.break_run(&mut run, format!("the run bundle could not be written: {e}"));
                run.started = Some(Err(f.clone()));
                return Err(f);
            }
        }
        if let Err(f) = &result {
            eprintln!("runbook-host run: {}: {}", f.text(), f.message);
            // A refused run never ran: its bundle ends now, with the module's report (outcome `refused`).
            if let Ok(report) = run.session.report() {
                if let Some(b) = run.bundle.as_mut() {
                    let _ = b.finish(&report);
                }
            }
            run.ended = Some(1);
        } else if let Some(b) = &run.bundle {
            eprintln!(
                "runbook-host run: run {} of {} ({}, trust {}) admitted at {}; bundle {}",
                b.run_id(),
                self.doc.reference,
                &self.doc.sha256[..12],
                self.doc.trust.as_str(),
                profile_str(self.profile),
                b.dir().display()
            );
        }
        run.started = Some(result.clone());
        // What the client is shown from now on, so that any change is announced.
        let shown = self.visible_tool_names(&mut run);
        run.last_listed = Some(shown);
        drop(run);
        if result.is_ok() {
            self.schedule_deadlines();
        }
        result
    }

    fn add_guard_paths(&self, run_dir: &Path) {
        let mut g = lock(&self.guards);
        let mut add = |p: &Path| {
            // As given (only when it reads as a path: a bare word would match innocent text), and absolute.
            let s = p.to_string_lossy().to_string();
            if s.len() > 3 && s.contains('/') && !g.contains(&s) {
                g.push(s);
            }
            if let Ok(c) = p.canonicalize() {
                let s = c.to_string_lossy().to_string();
                if s.len() > 3 && !g.contains(&s) {
                    g.push(s);
                }
            }
        };
        add(run_dir);
        add(&self.runs);
    }

    /// Whether a call names the run directory, the registry or the `runbook-host` binary (9.20).
    pub fn guarded(&self, arguments: &Value) -> bool {
        runbook_host::bundle::names_any(arguments, &lock(&self.guards))
    }

    /// A `tick` at each checkpoint deadline, so a checkpoint that times out fails the run then, not at the
    /// next call (DESIGN 9.21: the module judges deadlines by each event's `at`).
    fn schedule_deadlines(self: &Arc<Self>) {
        let Some(env) = &self.envelope else { return };
        let Some(cps) = env["checkpoints"].as_array() else { return };
        let t0 = match self.lock_run().t0 {
            Some(t) => t,
            None => return,
        };
        for cp in cps {
            let Some(ms) = cp["timeout_ms"].as_u64() else { continue };
            let me = Arc::clone(self);
            let when = t0 + Duration::from_millis(ms.saturating_add(1));
            tokio::spawn(async move {
                tokio::time::sleep_until(tokio::time::Instant::from_std(when)).await;
                {
                    let mut run = me.lock_run();
                    if run.ended.is_some() || run.broken.is_some() || run.session.is_over() {
                        return;
                    }
                    // Wait until the clock has passed the deadline in the module's terms too.
                    let _ = me.feed(&mut run, EventKind::Tick);
                }
                me.after_event().await;
            });
        }
    }

    /// After any event: when the tools the client should see changed, say so.
    pub async fn after_event(&self) {
        let changed = {
            let mut run = self.lock_run();
            let now = self.visible_tool_names(&mut run);
            let changed = run.last_listed.as_ref().is_some_and(|l| *l != now);
            if changed {
                run.last_listed = Some(now);
            }
            changed
        };
        if changed {
            let peer = lock(&self.client).clone();
            if let Some(p) = peer {
                let _ = p.notify_tool_list_changed().await;
            }
        }
    }

    /// The server tools the client is shown: the current step's scope (or every declared tool with
    /// `--list allowlist` and at R0), none once the run is over or refused.
    pub fn visible_tool_names(&self, run: &mut RunState) -> Vec<String> {
        if !matches!(run.started, Some(Ok(()))) || run.broken.is_some() || run.session.is_over() {
            return Vec::new();
        }
        let Some(env) = &self.envelope else { return Vec::new() };
        let caps = &env["capabilities"];
        let tools_of = |names: &mut dyn Iterator<Item = &str>| -> Vec<String> { names.filter_map(|c| caps[c]["tool"].as_str().map(str::to_string)).collect() };
        let allowlist = self.list_allowlist || self.profile == Profile::R0 || !self.initialized.load(Ordering::SeqCst);
        let wanted: Vec<String> = if allowlist {
            caps.as_object().map(|o| o.values().filter_map(|c| c["tool"].as_str().map(str::to_string)).collect()).unwrap_or_default()
        } else {
            let status = self.status(run).unwrap_or(Value::Null);
            let scope: Vec<&str> = status["scope"].as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default();
            tools_of(&mut scope.into_iter())
        };
        self.upstream.names().into_iter().filter(|n| wanted.contains(n)).collect()
    }

    /// Ends the run: `final_output` first on a clean client shutdown (9.24), then `end {reason}`, the
    /// report, the bundle's end. Returns the exit code: 0 only when the outcome is `completed`.
    pub fn end_run(&self, reason: EndReason, final_output: bool) -> u8 {
        let mut run = self.lock_run();
        if let Some(code) = run.ended {
            return code;
        }
        let code = match &run.started {
            Some(Ok(())) => {
                if run.broken.is_none() {
                    if final_output && !run.session.is_over() {
                        let _ = self.feed(&mut run, EventKind::FinalOutput);
                    }
                    let _ = self.feed(&mut run, EventKind::End(reason));
                }
                // A run that ended has nothing left for a human to approve.
                if let Some(dir) = self.run_dir(&run) {
                    for p in runbook_host::approvals::pending(&dir).unwrap_or_default() {
                        let _ = runbook_host::approvals::withdraw(&dir, &p.id);
                    }
                }
                match run.session.report() {
                    Ok(report) => {
                        let outcome = serde_json::from_str::<Value>(&report).ok().and_then(|r| r["outcome"].as_str().map(str::to_string)).unwrap_or_default();
                        if let Some(b) = run.bundle.as_mut() {
                            if let Err(e) = b.finish(&report) {
                                eprintln!("runbook-host run: the run bundle could not be finished: {e}");
                            }
                            eprintln!(
                                "runbook-host run: run {} ended ({}): outcome {outcome}; bundle {}",
                                b.run_id(),
                                end_reason_str(reason),
                                b.dir().display()
                            );
                        }
                        if outcome == "completed" && run.broken.is_none() {
                            0
                        } else {
                            1
                        }
                    }
                    Err(e) => {
                        eprintln!("runbook-host run: no report: {e}");
                        1
                    }
                }
            }
            _ => 1,
        };
        run.ended = Some(code);
        code
    }

    /// The approval command a human runs for this run.
    pub fn approve_command(&self, run: &RunState, step: Option<&str>) -> String {
        let id = run.run_id.clone().unwrap_or_default();
        let runs = if self.runs == Path::new(".runbook/runs") { String::new() } else { format!(" --runs {}", self.runs.display()) };
        format!("runbook-host approve {id} {}{runs}", step.unwrap_or("-"))
    }

    pub fn run_dir(&self, run: &RunState) -> Option<PathBuf> {
        run.bundle.as_ref().map(|b| b.dir().to_path_buf())
    }
}

pub fn end_reason_str(r: EndReason) -> &'static str {
    match r {
        EndReason::Normal => "normal",
        EndReason::ClientClosed => "client-closed",
        EndReason::ServerExited => "server-exited",
        EndReason::Interrupted => "interrupted",
        EndReason::ApprovalTimeout => "approval-timeout",
    }
}

fn explain_refusals(codes: &[String]) -> String {
    let parts: Vec<String> = codes
        .iter()
        .map(|c| {
            let why = match c.as_str() {
                "autonomous-at-r0" => "an agent-autonomous runbook needs at least R1",
                "capability-not-allowed" => "the runbook declares a tool that none of the servers provides",
                "coverage-incomplete" => {
                    "destructive or irreversible work needs an adapter that sees every invocation; the MCP proxy cannot see the shell (use the tool-call hook)"
                }
                "invalid-document" => "the document has lint errors (run `runbook-host lint`)",
                "prerequisite-unmet" => "a prerequisite is not available",
                "profile-too-low" => "the runbook's minimum profile is above the one claimed (try --profile R2)",
                "risk-above-ceiling" => "the runbook reaches a risk above --risk-ceiling",
                _ => "",
            };
            if why.is_empty() {
                c.clone()
            } else {
                format!("{c} ({why})")
            }
        })
        .collect();
    if parts.is_empty() {
        "refused".into()
    } else {
        parts.join("; ")
    }
}

/// Runs the proxy until the client leaves, a server exits or a signal arrives; returns the exit code.
pub async fn main(config: Config) -> u8 {
    // Resolve first: a document that does not resolve, or is tampered with, runs nothing (no server starts).
    let doc = match tokio::task::spawn_blocking({
        let (r, g) = (config.reference.clone(), config.registry.clone());
        move || registry::resolve(&r, &g)
    })
    .await
    {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return refuse(Failure { code: e.code.to_string(), message: e.message }).await,
        Err(e) => return refuse(Failure { code: "host-error".into(), message: e.to_string() }).await,
    };
    let policy = match tokio::task::spawn_blocking(Policy::load).await {
        Ok(Ok(p)) => Arc::new(p),
        Ok(Err(e)) => return refuse(Failure { code: "host-error".into(), message: e.to_string() }).await,
        Err(e) => return refuse(Failure { code: "host-error".into(), message: e.to_string() }).await,
    };
    let envelope_text = match policy.envelope(&doc.bytes) {
        Ok(Ok(e)) => Some(e),
        Ok(Err(_)) => None,
        Err(e) => return refuse(Failure { code: "host-error".into(), message: e.to_string() }).await,
    };
    let session = match policy.session(&doc.bytes) {
        Ok(s) => s,
        Err(e) => return refuse(Failure { code: "host-error".into(), message: e.to_string() }).await,
    };
    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel();
    let upstream = match Upstream::start(&config.servers, exit_tx).await {
        Ok(u) => u,
        Err(m) => return refuse(Failure { code: "server-unavailable".into(), message: m }).await,
    };
    // What a call may not name (9.20): the registry and this binary, by path and, for the binary, by
    // name; the run directory is added when the run starts.
    let mut guards = Vec::new();
    if !config.registry.starts_with("http://") && !config.registry.starts_with("https://") {
        guards.push(config.registry.clone());
        if let Ok(c) = Path::new(&config.registry).canonicalize() {
            guards.push(c.to_string_lossy().into_owned());
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        guards.push(exe.to_string_lossy().into_owned());
    }
    guards.retain(|g| g.len() > 3 && g.contains('/'));
    guards.push("runbook-host".to_string());
    let shared = Arc::new(Shared {
        envelope: envelope_text.as_deref().and_then(|e| serde_json::from_str(e).ok()),
        envelope_text,
        policy,
        doc,
        upstream,
        profile: config.profile,
        risk_ceiling: config.risk_ceiling,
        list_allowlist: config.list_allowlist,
        agent_override: config.agent.clone(),
        approval_timeout: config.approval_timeout,
        runs: config.runs.clone(),
        guards: Mutex::new(guards),
        run: Mutex::new(RunState {
            session,
            bundle: None,
            t0: None,
            last_at: 0,
            run_id: None,
            agent: None,
            started: None,
            broken: None,
            ended: None,
            last_listed: None,
        }),
        client: Mutex::new(None),
        requests_begun: AtomicU64::new(0),
        requests_answered: AtomicU64::new(0),
        initialized: AtomicBool::new(false),
        last_call_timed_out: AtomicBool::new(false),
        applied: Mutex::new(Default::default()),
    });

    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let signalled = async {
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
    };
    tokio::pin!(signalled);

    let handler = handler::Proxy { shared: Arc::clone(&shared) };
    let serving = rmcp::serve_server(handler, rmcp::transport::stdio());
    tokio::pin!(serving);
    // Until the client has initialized: it may also leave, a server may die, or a signal arrive.
    let running = tokio::select! {
        r = &mut serving => r,
        Some(i) = exit_rx.recv() => {
            eprintln!("runbook-host run: server `{}` exited before the client initialized", shared.upstream.servers[i].name);
            shared.upstream.shutdown(Duration::from_secs(5)).await;
            return 1;
        }
        _ = &mut signalled => {
            shared.upstream.shutdown(Duration::from_secs(5)).await;
            return 1;
        }
    };
    let running = match running {
        Ok(r) => r,
        Err(e) => {
            // An `initialize` answered with `runbook_failed` (admission refused), or a client that left.
            let code = {
                let run = shared.lock_run();
                match &run.started {
                    Some(Err(_)) => None,
                    _ => Some(()),
                }
            };
            if code.is_some() {
                eprintln!("runbook-host run: the client did not initialize: {e}");
                shared.end_run(EndReason::ClientClosed, false);
            }
            shared.upstream.shutdown(Duration::from_secs(5)).await;
            return 1;
        }
    };
    let reason = tokio::select! {
        _ = running.waiting() => {
            // Standard input closed. A clean shutdown has nothing in flight; a client that vanished
            // mid-call is `client-closed`.
            let begun = shared.requests_begun.load(Ordering::SeqCst);
            let answered = shared.requests_answered.load(Ordering::SeqCst);
            if begun != answered {
                (EndReason::ClientClosed, false)
            } else if shared.last_call_timed_out.load(Ordering::SeqCst) {
                // The agent left after a gated call waited in vain for a human.
                (EndReason::ApprovalTimeout, true)
            } else {
                (EndReason::Normal, true)
            }
        }
        Some(i) = exit_rx.recv() => {
            eprintln!("runbook-host run: server `{}` exited", shared.upstream.servers[i].name);
            (EndReason::ServerExited, false)
        }
        _ = &mut signalled => (EndReason::Interrupted, false),
    };
    let code = shared.end_run(reason.0, reason.1);
    shared.upstream.shutdown(Duration::from_secs(5)).await;
    code
}

/// Before any server started: answer the client's `initialize` (or first request) with
/// `runbook_failed:<code>`, then exit 1.
async fn refuse(failure: Failure) -> u8 {
    eprintln!("runbook-host run: {}: {}", failure.text(), failure.message);
    let handler = handler::Refusal { failure };
    // `initialize` is answered with the failure (serve then returns an error); a client on the
    // handshake-less lifecycle gets it on each request, for a while.
    if let Ok(running) = rmcp::serve_server(handler, rmcp::transport::stdio()).await {
        let _ = tokio::time::timeout(Duration::from_secs(10), running.waiting()).await;
    }
    1
}
