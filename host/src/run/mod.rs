//! The run driver: one supervised run of one document, as every adapter drives it (docs/spec/README.md#architecture).
//!
//! A [`Run`] owns the module session, the bundle writer, the run's clock, the guard of docs/spec/run.md#guarded-calls and
//! the approval channel of its bundle. Each event is one method; each method makes one call into the
//! module (`feed`: the canonical event line, the decision, the chain link and a sentence come back
//! together), records the event and its decision durably (fsync) and only then returns an [`Answer`].
//! An adapter (the MCP proxy, the Claude Code hook, an embedder's own loop) translates its client's
//! protocol to these methods and the answers back, and decides nothing itself.
//!
//! Fail closed: when the bundle cannot be written or the module traps, the run is broken: the call that
//! caused it gets an error (the adapter blocks it), every later one too, and the bundle is ended without a
//! report (`verify` refuses it) when the module cannot vouch for one.

use crate::bundle::{Bundle, BundleFacts, SharedStore};
use crate::clock::Clock;
use crate::registry::Resolved;
use crate::signatures::Signers;
use crate::{
    Approval, Coverage, Decision, DecisionKind, EndReason, Event, EventKind, Invoke, Outcome, Phase, Policy, Profile, Recorded, Risk, RunState, Session,
    StartClaim, ToolResult, Verdict,
};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

pub mod approvals;
mod checkpoint;
#[cfg(test)]
mod store_tests;
pub use checkpoint::{Checkpoint, CHECKPOINT_SCHEMA};

/// Why a run cannot go on, grouped by whose fault it is.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The evidence cannot be written or read (disk, permissions): the host's environment.
    Evidence(String),
    /// The recorded evidence does not replay to what the module decides (edited, truncated, forged):
    /// which run, where and why, as the module names them.
    Tampered(Tampering),
    /// The policy module trapped or could not be loaded.
    Module(String),
    /// The run is already over and its bundle finished.
    Finished(String),
    /// An input refused before it reached the module (an approval the host never asked for, or one
    /// without a valid signature where signatures are required); nothing is recorded and the run goes on.
    Refused(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Evidence(m) => write!(f, "the run's evidence cannot be written or read: {m}"),
            RunError::Tampered(t) => write!(f, "the run's evidence does not check out: {t}"),
            RunError::Module(m) => write!(f, "the policy module failed: {m}"),
            RunError::Finished(m) | RunError::Refused(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for RunError {}

/// Where a run's evidence fails to check out. `place` is the file or record (`events.ndjson:N`,
/// `run.json`, the document's file, `checkpoint`), `reason` why; the packages' `RunTampered` carries the
/// same two (Python `place` and `reason`, JavaScript `place` and `detail`), so a caller matches fields,
/// never a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tampering {
    pub run_id: String,
    pub place: String,
    pub reason: String,
}

impl Tampering {
    pub fn new(run_id: &str, place: impl Into<String>, reason: impl Into<String>) -> Tampering {
        Tampering { run_id: run_id.to_string(), place: place.into(), reason: reason.into() }
    }
}

impl std::fmt::Display for Tampering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "run {}: {}: {}", self.run_id, self.place, self.reason)
    }
}

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
    /// For a `needs-approval` call: the hash an approval bound to it names (docs/spec/run.md#approvals-bound-to-a-call).
    pub call_sha256: Option<String>,
}

impl Answer {
    pub fn kind(&self) -> DecisionKind {
        self.decision.kind
    }
    pub fn allowed(&self) -> bool {
        self.decision.kind == DecisionKind::Allow
    }
}

/// What names the run's evidence, the approval channel, the registry or the host itself (docs/spec/run.md#guarded-calls):
/// one list of needles and one matching rule for every adapter.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    needles: Vec<String>,
}

impl Guard {
    /// The host binary (its name and the absolute path of this process's executable), the runs directory
    /// and, when it is a local directory, the registry.
    pub fn new(runs: &Path, registry: Option<&str>) -> Guard {
        Guard::for_host(std::env::current_exe().ok().as_deref(), runs, registry)
    }

    /// [`Guard::new`] for a host whose executable the embedder names (`exe`: where the binary agents
    /// must not reach lives, when it is not this process, or None for a library with no binary).
    pub fn for_host(exe: Option<&Path>, runs: &Path, registry: Option<&str>) -> Guard {
        let mut g = Guard { needles: vec!["runbook-host".to_string()] };
        if let Some(exe) = exe {
            g.add_path(exe);
        }
        g.add_path(runs);
        if let Some(r) = registry.filter(|r| !r.contains("://")) {
            g.add_path(Path::new(r));
        }
        g
    }

    /// Adds a path in the forms an agent may write it: as given (without a leading `./`), absolute, and
    /// relative to the current directory when it lies under it (an installed hook names its paths
    /// absolutely; the agent, working in the project, writes `.runbook/runs`). A form of 3 characters or
    /// fewer would match innocent text, so it is not added.
    pub fn add_path(&mut self, p: &Path) {
        let given = p.to_string_lossy();
        let given = given.trim_start_matches("./").trim_end_matches('/').to_string();
        let mut forms = vec![given];
        // Resolved once each (every run start builds a guard; each resolution is a system call a component).
        let canonical = p.canonicalize().ok();
        if let Some(c) = &canonical {
            forms.push(c.to_string_lossy().into_owned());
        }
        if p.is_absolute() {
            let cwd = std::env::current_dir().ok();
            for base in cwd.iter().flat_map(|d| [Some(d.clone()), d.canonicalize().ok()]).flatten() {
                for full in [Some(p.to_path_buf()), canonical.clone()].into_iter().flatten() {
                    if let Ok(rel) = full.strip_prefix(&base) {
                        forms.push(rel.to_string_lossy().into_owned());
                    }
                }
            }
        }
        for f in forms {
            if f.len() > 3 && !self.needles.contains(&f) {
                self.needles.push(f);
            }
        }
    }

    /// Adds a literal needle (a name that is not a path: an environment variable, a URL path).
    pub fn add_name(&mut self, name: &str) {
        if name.len() > 3 && !self.needles.iter().any(|n| n == name) {
            self.needles.push(name.to_string());
        }
    }

    /// The needles, in every form added: the module applies its one matching rule to them (the
    /// session's `set-guard`, the policy's `guard-names`).
    pub fn needles(&self) -> &[String] {
        &self.needles
    }
}

/// A tool call or result as its client named it, where an adapter mapped it to the canonical vocabulary
/// (docs/spec/adapters.md#canonical-tool-names): recorded on the event as `x-client` `{client, tool, call_sha256?}` (the hash of the
/// client's own tool and arguments, on a call).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientCall {
    /// The client as `hook --client` names it.
    pub client: String,
    pub tool: String,
    /// The call's arguments as the client sent them (None on a result).
    pub arguments: Option<Value>,
}

/// What a resumed run must still be, kept by the adapter outside the bundle when the run began (the
/// hook's session state): the document's sha256 and the chain's `h0`. A bundle whose document was
/// swapped, even with `run.json` edited to match, is refused as tampered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    pub document_sha256: String,
    pub chain_h0: String,
}

impl Pin {
    /// The pin as the module's `chain-start` takes it.
    pub fn pair(&self) -> (&str, &str) {
        (&self.document_sha256, &self.chain_h0)
    }
}

/// How a run was resumed (for timing and tests).
#[derive(Clone, Debug, Default)]
pub struct Resumed {
    pub events: u64,
    /// Links recomputed by the module (every recorded event's).
    pub links_checked: u64,
}

/// How a run is created beyond its document and claim.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Signs the receipt at the end (`receipt.dsse.json`).
    pub receipt_key: Option<ed25519_dalek::SigningKey>,
    /// Shadow mode (`--mode shadow`): the module decides and everything is recorded, but the driver
    /// blocks nothing; run.json says `"mode": "shadow"` and the calls that ran against a decision are
    /// listed in `shadow.ndjson`. A shadow run is never enforcement evidence.
    pub shadow: bool,
    /// The run's clock (by default the wall clock), its id (by default a new random one), the host's name
    /// and version and the git state: fixed by tests and the conformance vectors, so that every host
    /// writes the same bundle for the same session.
    pub facts: BundleFacts,
    pub run_id: Option<String>,
    /// The approval channel; by default the run directory's files on disk ([`approvals::DirChannel`]) and a
    /// new [`approvals::MemoryChannel`] for a run on a memory store.
    pub approvals: Option<approvals::SharedChannel>,
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
    /// The module's state after the last event (each `feed` returns it), so acting on it costs no call.
    state: Option<RunState>,
    /// Where approvals must be signed: the keys that may sign them.
    signers: Option<Signers>,
    clock: Clock,
    /// The number and link of the last line of `traffic.ndjson` (read from the bundle at the first record).
    traffic: Option<(u64, String)>,
    /// Where approval requests go and a human's answers come from.
    approvals: approvals::SharedChannel,
}

/// The approval channel of a run in `bundle`: `given`, else the run directory's files on disk, else memory.
fn channel_for(bundle: &Bundle, given: Option<approvals::SharedChannel>) -> approvals::SharedChannel {
    given.unwrap_or_else(|| {
        if bundle.store().on_disk() {
            Arc::new(approvals::DirChannel(bundle.dir().to_path_buf()))
        } else {
            Arc::new(approvals::MemoryChannel::new())
        }
    })
}

/// One exchange of MCP traffic besides tool calls, as the proxy passed it on (docs/spec/adapters.md#mcp-beyond-tools).
pub struct Traffic<'a> {
    /// `to-server` (the client's request) or `to-client` (a server's request to the client).
    pub direction: &'a str,
    pub server: Option<&'a str>,
    pub method: &'a str,
    pub params: &'a Value,
    /// The answer, or the JSON-RPC error code it was refused with.
    pub answer: Result<&'a Value, i64>,
}

impl Run {
    /// Creates the bundle under `runs` and feeds the `start` claim. A refused run is a run too: its bundle
    /// is finished (outcome `refused`) and the returned answer is the `halt` with the refusals; nothing
    /// else may be fed to it.
    pub fn create(policy: Arc<Policy>, doc: &Resolved, claim: Claim, runs: &Path, adapter: &str, guard: Guard) -> Result<(Run, Answer), RunError> {
        Run::create_with(policy, doc, claim, runs, adapter, guard, None)
    }

    /// [`Run::create`], with the receipt signed by `receipt_key` at the end (`receipt.dsse.json`; run.json
    /// names the key from the start, so a refused run's receipt is signed too).
    pub fn create_with(
        policy: Arc<Policy>,
        doc: &Resolved,
        claim: Claim,
        runs: &Path,
        adapter: &str,
        guard: Guard,
        receipt_key: Option<ed25519_dalek::SigningKey>,
    ) -> Result<(Run, Answer), RunError> {
        Run::create_opts(policy, doc, claim, runs, adapter, guard, RunOptions { receipt_key, ..Default::default() })
    }

    /// [`Run::create`] with every option: a signed receipt, shadow mode.
    pub fn create_opts(
        policy: Arc<Policy>,
        doc: &Resolved,
        claim: Claim,
        runs: &Path,
        adapter: &str,
        guard: Guard,
        opts: RunOptions,
    ) -> Result<(Run, Answer), RunError> {
        Run::create_at(policy, doc, claim, Err(runs), adapter, guard, opts)
    }

    /// [`Run::create_opts`] in `store` (a directory or memory, [`crate::bundle::Store`]): the runs root's
    /// `latest.json` and `history.ndjson` are the store's too. On a memory store no `git` is run (the
    /// facts' `git`, else `unavailable`) and the approval channel is `opts.approvals`, else a new
    /// [`approvals::MemoryChannel`]; give `opts.facts.clock` and `opts.run_id` for a run that reads no
    /// clock and draws no random id.
    pub fn create_in(
        policy: Arc<Policy>,
        doc: &Resolved,
        claim: Claim,
        store: SharedStore,
        adapter: &str,
        guard: Guard,
        opts: RunOptions,
    ) -> Result<(Run, Answer), RunError> {
        Run::create_at(policy, doc, claim, Ok(store), adapter, guard, opts)
    }

    fn create_at(
        policy: Arc<Policy>,
        doc: &Resolved,
        claim: Claim,
        at: Result<SharedStore, &Path>,
        adapter: &str,
        mut guard: Guard,
        opts: RunOptions,
    ) -> Result<(Run, Answer), RunError> {
        let run_id = match opts.run_id {
            Some(id) => id,
            None => crate::files::new_run_id().map_err(|e| RunError::Evidence(e.to_string()))?,
        };
        let clock = opts.facts.clock.clone();
        let (created, runs) = match at {
            Err(runs) => (Bundle::create_with(runs, &run_id, doc, crate::module_sha256(), adapter, &opts.facts), runs.to_path_buf()),
            Ok(store) => {
                let runs = store.root().to_path_buf();
                (Bundle::create_in(store, &run_id, doc, crate::module_sha256(), adapter, &opts.facts), runs)
            }
        };
        let mut bundle = created.map_err(|e| RunError::Evidence(format!("cannot create the run bundle under {}: {e}", runs.display())))?;
        if let Some(key) = opts.receipt_key {
            bundle.sign_receipts_with(key).map_err(|e| RunError::Evidence(format!("run.json: {e}")))?;
        }
        if opts.shadow {
            bundle.set_shadow().map_err(|e| RunError::Evidence(format!("run.json: {e}")))?;
        }
        guard.add_path(bundle.dir());
        let mut session = policy.session(&doc.bytes)?;
        session.set_guard(guard.needles())?;
        let t0_ms = clock.now_ms();
        let approvals = channel_for(&bundle, opts.approvals);
        let mut run = Run { policy, session, bundle, guard, t0_ms, last_at: 0, broken: None, state: None, signers: None, clock, traffic: None, approvals };
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
        if let Err(e) = run.bundle.admitted(admitted) {
            run.end_unwritable();
            return Err(run.break_with(RunError::Evidence(e.to_string())));
        }
        if !admitted {
            run.finish()?;
        }
        Ok((run, answer))
    }

    /// Reopens the run `run_id` under `runs` in another process by replaying every recorded event, each
    /// chain link and decision checked by the module. Nothing read back from the run directory is trusted
    /// without that check: the chain's `h0` is derived again from the document (never read from
    /// `run.json`), and when the adapter kept a [`Pin`] when the run began, the document and `h0` must be
    /// the pinned ones. `t0_ms` is the run's wall-clock start.
    pub fn resume(policy: Arc<Policy>, runs: &Path, run_id: &str, t0_ms: u64, pin: Option<&Pin>, guard: Guard) -> Result<(Run, Resumed), RunError> {
        let b = Bundle::open(runs, run_id).map_err(|e| RunError::Evidence(format!("run {run_id}: {e}")))?;
        Run::resume_bundle(policy, b, t0_ms, pin, guard, RunOptions::default())
    }

    /// [`Run::resume`] of the run `run_id` in `store`, by the same full replay; the run reads
    /// `opts.facts.clock` and uses `opts.approvals` (by default as [`Run::create_in`] chooses).
    pub fn resume_in(
        policy: Arc<Policy>,
        store: SharedStore,
        run_id: &str,
        t0_ms: u64,
        pin: Option<&Pin>,
        guard: Guard,
        opts: RunOptions,
    ) -> Result<(Run, Resumed), RunError> {
        let b = Bundle::open_in(store, run_id).map_err(|e| RunError::Evidence(format!("run {run_id}: {e}")))?;
        Run::resume_bundle(policy, b, t0_ms, pin, guard, opts)
    }

    fn resume_bundle(policy: Arc<Policy>, mut b: Bundle, t0_ms: u64, pin: Option<&Pin>, guard: Guard, opts: RunOptions) -> Result<(Run, Resumed), RunError> {
        let run_id = b.run_id().to_string();
        let run_id = run_id.as_str();
        let ev = |e: std::io::Error| RunError::Evidence(format!("run {run_id}: {e}"));
        let tampered = |(place, why): (String, String)| RunError::Tampered(Tampering::new(run_id, place, why));
        let doc = b.document_unchecked().map_err(ev)?;
        let mut session = policy.session(&doc)?;
        // The module checks that run.json (and the pin) name this document and derives the chain's start.
        let h0 = session.chain_start(b.manifest_text(), pin.map(Pin::pair))?.map_err(tampered)?;
        let bytes = b.events_bytes().map_err(ev)?;
        // The module checks every record (its form, its link, its decision) in one call.
        let replayed = session.replay_events(&bytes, &h0)?.map_err(tampered)?;
        let (head, last_at, n) = (replayed.head, replayed.last_at, replayed.events);
        b.resume_chain(head, n);
        let mut guard = guard;
        guard.add_path(b.dir());
        session.set_guard(guard.needles())?;
        let resumed = Resumed { events: n, links_checked: n };
        let approvals = channel_for(&b, opts.approvals);
        let clock = opts.facts.clock;
        b.set_clock(clock.clone());
        let run = Run { policy, session, bundle: b, guard, t0_ms, last_at, broken: None, state: None, signers: None, clock, traffic: None, approvals };
        Ok((run, resumed))
    }

    /// From now on, only approvals signed by a key of `signers` are fed. A new run records the file's
    /// sha256 in `run.json`; a resumed run must be given the same file (a changed one is tampering).
    pub fn require_signed_approvals(&mut self, signers: Signers) -> Result<(), RunError> {
        let recorded = self.bundle.manifest().get("approvals").and_then(|a| a["allowed_signers_sha256"].as_str()).map(str::to_string);
        match recorded {
            Some(sha) if sha != signers.sha256 => {
                return Err(RunError::Tampered(Tampering::new(
                    self.run_id(),
                    "run.json",
                    format!("the allowed signers file changed since the run began (sha256 {}, recorded {sha})", signers.sha256),
                )))
            }
            Some(_) => {}
            None if self.finished() => {}
            None => self.bundle.require_signed_approvals(&signers.sha256).map_err(|e| self.break_with(RunError::Evidence(e.to_string())))?,
        }
        self.check_signed_history(&signers)?;
        self.signers = Some(signers);
        Ok(())
    }

    /// Every approval the module judged so far is signed by a key of `signers`: an approval event
    /// written into `events.ndjson` by anyone else (with its link recomputed, so the replay accepts it)
    /// has no signature to show, and the run is refused as tampered before the next call.
    fn check_signed_history(&self, signers: &Signers) -> Result<(), RunError> {
        let ev = |e: std::io::Error| RunError::Evidence(format!("run {}: {e}", self.run_id()));
        let tampered = |place: String, why: String| RunError::Tampered(Tampering::new(self.run_id(), place, why));
        let bytes = self.bundle.events_bytes().map_err(ev)?;
        if !bytes.windows(10).any(|w| w == b"\"approval\"") {
            return Ok(());
        }
        let signatures = self.bundle.signatures_bytes().map_err(ev)?;
        // Which answers the run must hold, and the payload each signs, are the module's (from the events as
        // it judged them); the signature bytes are checked here, against the allowed signers.
        let answers = self.policy.signed_history(self.run_id(), &bytes, &signatures)?.map_err(|(place, why)| tampered(place, why))?;
        for a in answers {
            signers
                .check(Some(&a.principal), a.message.as_bytes(), &a.signature, &self.clock)
                .map_err(|_| tampered(a.place.clone(), "an approval no key of the allowed signers signed".into()))?;
        }
        Ok(())
    }

    /// Whether this is a shadow run (the driver blocks nothing).
    pub fn is_shadow(&self) -> bool {
        self.bundle.is_shadow()
    }

    /// Records, before the driver forwards it, a call of a shadow run that the module did not allow
    /// (`seq` and `decision` are the module's recorded decision for it): `shadow.ndjson` gets the decision's `seq`, the
    /// tool, the call's hash and the decision. The module never hears of the call again (its result is not
    /// fed: the module did not let it run), so the replay of `events.ndjson` stays exact.
    pub fn record_shadow_forward(&mut self, tool: &str, arguments: &Value, seq: u64, decision: &str) -> Result<(), RunError> {
        if !self.is_shadow() {
            return Err(RunError::Evidence("only a shadow run forwards a call the module did not allow".into()));
        }
        let call_sha256 = self.call_sha256(tool, arguments)?;
        let line = self.policy.shadow_line(seq, tool, &call_sha256, decision)?;
        self.bundle.append_shadow(&line).map_err(|e| self.break_with(RunError::Evidence(format!("shadow.ndjson: {e}"))))
    }

    /// Records one exchange of traffic besides tool calls in `traffic.ndjson` (the module's line: digests
    /// of the params and the answer, chained), after it was answered. Not an event: the module decides
    /// nothing about it and the replay of `events.ndjson` never sees it.
    pub fn record_traffic(&mut self, t: &Traffic) -> Result<(), RunError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let (n, prev) = match self.traffic.take() {
            Some(tail) => tail,
            None => self.bundle.traffic_tail().map_err(|e| self.break_with(RunError::Evidence(format!("traffic.ndjson: {e}"))))?,
        };
        let at = self.clock.now_ms().saturating_sub(self.t0_ms);
        let mut entry = json!({"n": n + 1, "at": at, "direction": t.direction, "server": t.server, "method": t.method, "params": t.params});
        match t.answer {
            Ok(a) => entry["answer"] = a.clone(),
            Err(code) => entry["error_code"] = json!(code),
        }
        let (line, link) = self.policy.traffic_line(&prev, &entry.to_string())?.map_err(|e| RunError::Evidence(format!("traffic.ndjson: {e}")))?;
        self.bundle.append_traffic(&line).map_err(|e| self.break_with(RunError::Evidence(format!("traffic.ndjson: {e}"))))?;
        self.traffic = Some((n + 1, link));
        Ok(())
    }

    /// Signs this run's receipt with `key` when it ends (a run reopened by another process: the hook).
    pub fn sign_receipts_with(&mut self, key: ed25519_dalek::SigningKey) -> Result<(), RunError> {
        self.bundle.sign_receipts_with(key).map_err(|e| RunError::Evidence(format!("run.json: {e}")))
    }

    pub fn signed_approvals_required(&self) -> bool {
        self.bundle.manifest().get("approvals").is_some_and(|a| a["signed"] == true)
    }

    /// The pin an adapter keeps outside the bundle, to resume this run later (see [`Pin`]).
    pub fn pin(&self) -> Pin {
        let m = self.bundle.manifest();
        Pin {
            document_sha256: m["document"]["sha256"].as_str().unwrap_or_default().to_string(),
            chain_h0: m["chain_h0"].as_str().unwrap_or_default().to_string(),
        }
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

    /// The store the run's bundle lives in.
    pub fn store(&self) -> &SharedStore {
        self.bundle.store()
    }

    /// The run's approval channel (requests it asked, answers it reads).
    pub fn approval_channel(&self) -> &approvals::SharedChannel {
        &self.approvals
    }

    /// The chain's head: the link of the last recorded event (`h0` before any).
    pub fn chain_head(&self) -> &str {
        self.bundle.chain_head()
    }

    /// The run's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
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
        let at = self.clock.now_ms().saturating_sub(self.t0_ms).max(self.last_at);
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
        self.check_open()?;
        let event = Event { at: self.now_at(), kind };
        self.feed_with(|session, prev| session.feed(&event, prev))
    }

    /// Feeds one raw event line exactly as given (the wire path: a client's line that may be malformed,
    /// which the module then halts on, `malformed-event`); recorded as any event is.
    pub fn feed_line(&mut self, line: &str) -> Result<Answer, RunError> {
        self.check_open()?;
        self.feed_with(|session, prev| session.feed_line(line, prev))
    }

    fn check_open(&self) -> Result<(), RunError> {
        if let Some(b) = &self.broken {
            return Err(b.clone());
        }
        if self.bundle.is_finished() {
            return Err(RunError::Finished(format!("run {} is over and its evidence is sealed; start a new run", self.run_id())));
        }
        Ok(())
    }

    fn feed_with(&mut self, call: impl FnOnce(&mut Session, &str) -> Result<Recorded, crate::Trapped>) -> Result<Answer, RunError> {
        let prev = self.bundle.chain_head().to_string();
        let rec: Recorded = match call(&mut self.session, &prev) {
            Ok(r) => r,
            Err(trapped) => {
                // No module to vouch for a report or a link: the bundle ends without one (verify refuses it).
                let _ = self.bundle.end_without_report("host-trap");
                return Err(self.break_with(RunError::Module(trapped.message)));
            }
        };
        if let Err(e) = self.bundle.append_record(&rec.event_line, &rec.record_line, &rec.link) {
            // The event was decided but cannot be recorded: nothing more is decided, and the bundle is
            // marked ended without a report where the disk still takes it (run.json says why; verify
            // refuses the bundle and names it).
            self.end_unwritable();
            return Err(self.break_with(RunError::Evidence(format!("cannot record the event: {e}"))));
        }
        self.state = Some(rec.state);
        Ok(Answer { decision: rec.decision, explanation: rec.explanation, call_sha256: None })
    }

    /// A tool call. The guard is applied by the module (its needles were set on the session), for every
    /// adapter alike.
    pub fn invoke(&mut self, tool: &str, arguments: &Value, call_id: Option<&str>, step: Option<&str>) -> Result<Answer, RunError> {
        self.invoke_from(tool, arguments, call_id, step, None)
    }

    /// A tool call an adapter mapped from its client's own vocabulary (docs/spec/adapters.md#canonical-tool-names): decided on the
    /// canonical `tool` and `arguments`, with `client`'s own name and arguments kept in the record.
    pub fn invoke_from(
        &mut self,
        tool: &str,
        arguments: &Value,
        call_id: Option<&str>,
        step: Option<&str>,
        client: Option<&ClientCall>,
    ) -> Result<Answer, RunError> {
        let mut invoke = Invoke {
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            call_id: call_id.map(str::to_string),
            step: step.map(str::to_string),
            guard: false,
        };
        let mut a = match client {
            None => self.feed(EventKind::Invoke(invoke))?,
            Some(c) => {
                // The wire path records its line as given, so the guard the typed path completes in the
                // module is asked of the module here.
                invoke.guard = self.policy.guard_names(tool, &invoke.arguments, self.guard.needles())?;
                self.feed_from(EventKind::Invoke(invoke), c)?
            }
        };
        if a.kind() == DecisionKind::NeedsApproval {
            a.call_sha256 = Some(self.call_sha256(tool, arguments)?);
        }
        Ok(a)
    }

    /// The module's pending request (its ledger, docs/spec/run.md#approvals-bound-to-a-call) for this exact call in the current step,
    /// oldest first: the `seq` of the `needs-approval` decision a human's answer names. None when the
    /// module asked for no approval of that call in this visit, or an answer used the request up: only
    /// then may an answer be fed (`approve` shows only these).
    pub fn request_for(&mut self, step: Option<&str>, call_sha256: &str) -> Result<Option<u64>, RunError> {
        let state = self.state()?;
        if state.step.as_deref() != step {
            return Ok(None);
        }
        Ok(state.approval_requests.iter().find(|r| r.call_sha256 == call_sha256).map(|r| r.seq))
    }

    /// A tool's result (`result` is what the adapter observes, docs/spec/adapters.md#observations-per-adapter).
    pub fn result(&mut self, tool: &str, result: &Value, is_error: bool, call_id: Option<&str>) -> Result<Answer, RunError> {
        self.result_from(tool, result, is_error, call_id, None)
    }

    /// A tool's result under its canonical name, `client` naming the tool as the client did.
    pub fn result_from(&mut self, tool: &str, result: &Value, is_error: bool, call_id: Option<&str>, client: Option<&ClientCall>) -> Result<Answer, RunError> {
        let kind = EventKind::Result(ToolResult { tool: tool.to_string(), result: result.to_string(), is_error, call_id: call_id.map(str::to_string) });
        match client {
            None => self.feed(kind),
            Some(c) => self.feed_from(kind, c),
        }
    }

    /// Feeds a typed event with the client's own call beside it: the module's line for the event with
    /// an `x-client` member (an extension every reader ignores in deciding, docs/spec/adapters.md#canonical-tool-names), made canonical
    /// by the module and fed on the wire path, so the record holds it and the chain covers it. The
    /// client's arguments enter as their call hash (`call_sha256` of the client's tool and arguments,
    /// 9.19), never in clear: the chain and a redacted derivative digest only the event's top-level
    /// `arguments` (9.22), and the canonical ones already hold the same values.
    fn feed_from(&mut self, kind: EventKind, client: &ClientCall) -> Result<Answer, RunError> {
        self.check_open()?;
        let module = |what: &str, e: String| RunError::Module(format!("{what}: {e}"));
        let mut x = serde_json::Map::new();
        x.insert("client".into(), Value::String(client.client.clone()));
        x.insert("tool".into(), Value::String(client.tool.clone()));
        if let Some(a) = &client.arguments {
            x.insert("call_sha256".into(), Value::String(self.call_sha256(&client.tool, a)?));
        }
        let event = Event { at: self.now_at(), kind };
        let line = self.policy.encode_event(&event)?.map_err(|e| module("the event could not be encoded", e))?;
        let mut v: Value = serde_json::from_str(&line).map_err(|e| module("the module's event line is not JSON", e.to_string()))?;
        v["x-client"] = Value::Object(x);
        let line = self.policy.canonicalize(&v.to_string())?.map_err(|e| module("the event could not be made canonical", e))?;
        self.feed_line(&line)
    }

    /// An approval an embedder obtained itself (the adapters use [`Run::apply_grant`]). Refused where
    /// approvals must be signed: only a signed answer through the approval channel counts there.
    pub fn approval(&mut self, step: Option<&str>, call_sha256: Option<&str>, approver: &str, granted: bool) -> Result<Answer, RunError> {
        if self.signers.is_some() || self.signed_approvals_required() {
            return Err(RunError::Refused("this run's approvals must be signed: answer through the approval channel (`runbook-host approve --sign`)".into()));
        }
        // The module names the request a call-bound answer answers (its ledger, 9.19).
        self.feed_approval(step, call_sha256, approver, granted, None)
    }

    fn feed_approval(
        &mut self,
        step: Option<&str>,
        call_sha256: Option<&str>,
        approver: &str,
        granted: bool,
        request: Option<u64>,
    ) -> Result<Answer, RunError> {
        self.feed(EventKind::Approval(Approval {
            step: step.map(str::to_string),
            call_sha256: call_sha256.map(str::to_string),
            approver: approver.to_string(),
            granted,
            request,
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
            Some(d) if self.clock.now_ms() >= d => self.tick().map(Some),
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
        for p in self.approvals.pending().unwrap_or_default() {
            let _ = self.approvals.consume(&p.id);
        }
        let report = self.session.report()?;
        if let Err(e) = self.bundle.finish(&report) {
            self.end_unwritable();
            return Err(self.break_with(RunError::Evidence(format!("cannot finish the bundle: {e}"))));
        }
        Ok(())
    }

    /// After a write of the evidence failed: the bundle is ended without a report where the disk still
    /// takes it (run.json says `ended_without_report: bundle-unwritable`, and verify names it), unless
    /// its receipt was written already (the receipt pins run.json: rewriting it would turn a finished
    /// bundle into one that fails as altered).
    fn end_unwritable(&mut self) {
        if !self.bundle.is_finished() && !self.bundle.has_receipt() {
            let _ = self.bundle.end_without_report("bundle-unwritable");
        }
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

    /// Which of `offered` (the tools behind the adapter, in their order) the client may see now: the
    /// module's rule (none once the run is over; every declared tool at R0 or with `whole_allowlist`;
    /// else the current step's).
    pub fn visible_tools(&mut self, offered: &[String], whole_allowlist: bool) -> Result<Vec<String>, RunError> {
        if let Some(b) = &self.broken {
            return Err(b.clone());
        }
        Ok(self.session.visible_tools(offered, whole_allowlist)?)
    }

    /// How the run ends when its client leaves (the module's rule, docs/spec/adapters.md#adapter-duties): the end reason, and
    /// whether `final_output` comes first.
    pub fn leaving(&mut self, calls_in_flight: u32, last_call_timed_out: bool) -> Result<(EndReason, bool), RunError> {
        let l = self.session.leaving(calls_in_flight, last_call_timed_out)?;
        Ok((l.reason, l.final_output))
    }

    /// The exit code of the process that ran this run (the module's rule: 0 only when it completed, 3 for
    /// a shadow run, else 1).
    pub fn exit_code(&mut self) -> Result<u8, RunError> {
        let shadow = self.is_shadow();
        Ok(self.session.exit_code(shadow)?)
    }

    // The approval channel of this run's bundle (see [`crate::run::approvals`]).

    /// When a human answered an approval request for this exact call, feeds that answer (an `approval`
    /// event) and consumes the request, so the call that follows is decided with it.
    pub fn apply_answered_approval(&mut self, call_sha256: &str) -> Result<Option<Answer>, RunError> {
        let ev = |e: std::io::Error| RunError::Evidence(format!("the approval channel: {e}"));
        let Some((id, grant)) = self.approvals.answered_for(call_sha256).map_err(ev)? else { return Ok(None) };
        match self.apply_grant(&id, &grant) {
            Ok(a) => Ok(Some(a)),
            // Not an answer the host can use: the call is decided without it (and stays gated).
            Err(RunError::Refused(m)) => {
                eprintln!("runbook-host: {m}");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Before a call is decided: when a human answered a request for this exact call (a retry after a
    /// gated call), feeds that answer first. Guarded calls never consume an approval. Costs a call into
    /// the module (the call's hash) only while some request is pending.
    pub fn apply_answered_approval_for(&mut self, tool: &str, arguments: &Value) -> Result<Option<Answer>, RunError> {
        if !self.approvals.any_requests() || self.policy.guard_names(tool, &arguments.to_string(), self.guard.needles())? {
            return Ok(None);
        }
        let sha = self.call_sha256(tool, arguments)?;
        self.apply_answered_approval(&sha)
    }

    /// The hash an approval bound to this call names (docs/spec/run.md#approvals-bound-to-a-call), from the module.
    pub fn call_sha256(&self, tool: &str, arguments: &Value) -> Result<String, RunError> {
        self.policy.call_sha256(tool, &arguments.to_string())?.map_err(|e| RunError::Module(format!("the call could not be hashed: {e}")))
    }

    /// Feeds a human's answer to the request `id` and consumes the request.
    /// Only an answer to a request the host issued is fed: the module must have answered `needs-approval`
    /// to this exact call in the current step (a request or an answer written by anyone else into the
    /// run directory is refused, [`RunError::Refused`], and stays unconsumed).
    pub fn apply_grant(&mut self, id: &str, grant: &approvals::Grant) -> Result<Answer, RunError> {
        let ev = |e: std::io::Error| RunError::Evidence(format!("the approval channel: {e}"));
        let rec = self.approvals.request_record(id).map_err(ev)?;
        let step = rec["step"].as_str().map(str::to_string);
        let Some(request) = self.request_for(step.as_deref(), &grant.call_sha256)? else {
            return Err(RunError::Refused(format!(
                "the answer to request {id} is refused: the policy module has no pending request for that call (sha256 {}) in the current step",
                grant.call_sha256
            )));
        };
        // Where approvals must be signed, the approver is the principal whose key signed, nobody else.
        let signed = match (&self.signers, self.signed_approvals_required()) {
            (Some(signers), _) => {
                let message = approvals::signed_message(self.run_id(), request, step.as_deref(), &grant.call_sha256, grant.granted)
                    .map_err(|e| RunError::Evidence(format!("the approval's payload: {e}")))?;
                let sig = grant.signature.as_deref().ok_or_else(|| {
                    RunError::Refused(format!(
                        "the answer to request {id} is not signed, and this run's approvals must be signed ({} approve --sign KEY)",
                        crate::invocation()
                    ))
                })?;
                let v = signers
                    .check(None, message.as_bytes(), sig, &self.clock)
                    .map_err(|e| RunError::Refused(format!("the answer to request {id} is refused: {e}")))?;
                Some((message, sig.to_string(), v))
            }
            (None, true) => {
                return Err(RunError::Refused(format!(
                    "the answer to request {id} cannot be checked: this run's approvals must be signed, and no allowed signers file was given"
                )))
            }
            (None, false) => None,
        };
        let approver = signed.as_ref().map(|(_, _, v)| v.principal.clone()).unwrap_or_else(|| grant.approver.clone());
        let a = self.feed_approval(step.as_deref(), Some(&grant.call_sha256), &approver, grant.granted, Some(request))?;
        if let Some((message, signature, v)) = signed {
            let line = self.policy.signature_line(a.decision.seq, request, id, &message, &signature, &v.principal, &v.fingerprint)?;
            self.bundle.append_signature(&line).map_err(|e| self.break_with(RunError::Evidence(format!("cannot record the approval's signature: {e}"))))?;
        }
        self.approvals.consume(id).map_err(ev)?;
        Ok(a)
    }

    /// Asks a human to approve this exact call (or finds the request already pending); returns its id.
    pub fn request_approval(&mut self, step: Option<&str>, tool: &str, arguments_json: &str, call_sha256: &str) -> Result<String, RunError> {
        let ev = |e: std::io::Error| RunError::Evidence(format!("the approval channel: {e}"));
        if let Some(p) = self.approvals.pending().map_err(ev)?.into_iter().find(|p| p.call_sha256 == call_sha256 && p.step.as_deref() == step) {
            return Ok(p.id);
        }
        self.approvals.request(step, tool, arguments_json, call_sha256).map_err(ev)
    }

    /// The command a human runs to approve the pending requests of this run, naming this binary the way
    /// the human can run it ([`crate::invocation`]) and the runs directory unless it is `approve`'s default.
    pub fn approve_command(&self, step: Option<&str>) -> String {
        let runs = self.dir().parent().filter(|r| *r != Path::new(".runbook/runs") && !r.as_os_str().is_empty());
        let runs = runs.map(|r| format!(" --runs {}", crate::shell_quote(&r.to_string_lossy()))).unwrap_or_default();
        format!("{} approve {} {}{runs}", crate::invocation(), self.run_id(), crate::shell_quote(step.unwrap_or("-")))
    }
}
