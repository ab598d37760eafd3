//! Embeds the runbook policy component with wasmtime, for the `runbook-host` CLI and other Rust hosts.
//!
//! Every decision comes from the component; this crate only loads it, bounds it and moves bytes in and
//! out. One [`Policy`] holds one engine and one pre-instantiated component; each [`Session`] and each
//! [`Verifier`] has an instance in its own store that nothing else uses while it lives (one a cleanly ended
//! session or verification left, or a new one; never one that trapped), and the stateless document calls
//! share one; fuel and a memory cap are a backstop (the module enforces its own limits first, so a
//! backstop never changes an answer, only turns a fault into a fail-closed halt with reason `host-trap`).

// The layers, lowest first; a module uses only those above it in this list (docs/layout.md):
// files, clock, wire, faults, diag (no crate module) -> signatures, net -> registry -> bundle -> run ->
// web, adapters, service. The CLI (src/cli/, in the binary) is on top of all of them.
pub mod adapters;
pub mod bundle;
pub mod clock;
pub mod facts;
pub mod faults;
pub mod files;
pub mod net;
pub mod private;
pub mod registry;
pub mod run;
pub mod service;
pub mod signatures;
pub mod web;
pub mod wire;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use wasmtime::component::{Component, Linker, ResourceAny};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};

mod bindings {
    wasmtime::component::bindgen!({ path: "../wit", world: "runbook-policy" });
}

pub use bindings::exports::runbook::policy::policy::{
    Approval, ApprovalRequest, BundleItem, Coverage, Decision, DecisionKind, Deviation, Effect, EffectOp, EndReason, Event, EventKind, Finding, Invoke,
    Leaving, LintReport, Outcome, Phase, Profile, Reason, Recorded, Refusal, Replayed, Risk, RunState, Severity, SignedAnswer, StartClaim, Structure,
    ToolResult, Verdict, Verification,
};
use bindings::RunbookPolicyPre;

/// The component's bytes, built from `guest/` by this crate's build script.
pub const COMPONENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/runbook_policy.wasm"));

/// The WIT the component implements.
pub const WIT: &str = include_str!("../../wit/policy.wit");

/// Fuel for one call into the component: far above what the module's own limits allow a call to use.
pub const FUEL_PER_CALL: u64 = 20_000_000_000;

/// The most linear memory one instance may grow to.
pub const MEMORY_CAP: usize = 1 << 30;

std::thread_local! {
    /// Calls into the component made on this thread (every export, constructors included): what the
    /// tests hold the one-call-per-event design to. Per thread, because concurrent sessions (the hook
    /// server, the test harness's parallel tests) each decide on their own thread.
    static CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many calls into the component this thread has made so far.
pub fn component_calls() -> u64 {
    CALLS.with(|c| c.get())
}

fn count_call() {
    CALLS.with(|c| c.set(c.get() + 1));
}

/// Hex SHA-256 of [`COMPONENT`], computed by the build script (a unit test checks it against the bytes).
pub fn module_sha256() -> &'static str {
    env!("RUNBOOK_MODULE_SHA256")
}

/// The name of the binary, as a person types it when it is on `PATH`.
pub const BIN_NAME: &str = "runbook-host";

/// How a person runs this very binary from a shell: `runbook-host` when the first `runbook-host` on
/// `PATH` is this executable (same canonical path), else the absolute path of the executable, quoted for
/// a POSIX shell when it needs it. Every message that tells a person to run a command of this CLI
/// (`approve`, `lint`, ...) names it this way, so that the command it prints can be pasted as it is.
pub fn invocation() -> &'static str {
    static INVOCATION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    INVOCATION.get_or_init(|| invocation_for(std::env::current_exe().ok().as_deref(), std::env::var_os("PATH").as_deref()))
}

/// [`invocation`] for a given executable and `PATH` value.
pub fn invocation_for(exe: Option<&Path>, path: Option<&std::ffi::OsStr>) -> String {
    let Some(exe) = exe else { return BIN_NAME.to_string() };
    let exe = exe.canonicalize().unwrap_or_else(|_| exe.to_path_buf());
    if let Some(path) = path {
        // A relative entry (`.`, or an empty one) depends on the directory the person types in, which
        // need not be this process's: only absolute entries are looked at.
        for dir in std::env::split_paths(path).filter(|d| d.is_absolute()) {
            let candidate = dir.join(BIN_NAME);
            if !is_executable_file(&candidate) {
                continue;
            }
            // The first one found is the one a shell runs: if it is another binary, the name will not do.
            if candidate.canonicalize().is_ok_and(|c| c == exe) {
                return BIN_NAME.to_string();
            }
            break;
        }
    }
    shell_quote(&exe.to_string_lossy())
}

fn is_executable_file(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `s` as one word of a POSIX shell command line: as it is when it holds only characters no shell
/// treats specially, else in single quotes.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./@=:,+".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// What went wrong in the host, as opposed to a decision of the module.
#[non_exhaustive]
#[derive(Debug)]
pub enum HostError {
    /// The engine could not be set up or the component not compiled or loaded.
    Load(String),
    /// The component trapped or ran out of a host bound: the run halts with `host-trap`.
    Trap(String),
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Load(m) => write!(f, "cannot load the policy module: {m}"),
            HostError::Trap(m) => write!(f, "the policy module trapped: {m}"),
        }
    }
}

impl std::error::Error for HostError {}

fn trap(e: wasmtime::Error) -> HostError {
    HostError::Trap(format!("{e:#}"))
}

struct HostState {
    limits: StoreLimits,
    /// The largest linear memory the store has grown to, in bytes: an instance that grew past
    /// [`IDLE_MEMORY_BYTES`] is not kept for another session or verification.
    memory: usize,
}

impl wasmtime::ResourceLimiter for HostState {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let grow = self.limits.memory_growing(current, desired, maximum)?;
        if grow {
            self.memory = self.memory.max(desired);
        }
        Ok(grow)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }
}

/// Host-side bounds on every call into the component. They are a backstop: the module's own limits
/// (docs/spec/runbook.md#limits) come first, so with the defaults no accepted input ever reaches them.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub fuel_per_call: u64,
    pub memory_cap: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { fuel_per_call: FUEL_PER_CALL, memory_cap: MEMORY_CAP }
    }
}

/// The loaded policy module.
pub struct Policy {
    engine: Engine,
    pre: RunbookPolicyPre<HostState>,
    limits: Limits,
    /// One instance for the stateless functions (lint, envelope, canonicalize, ...), made on first use and
    /// reused: they keep nothing between calls but allocator state, and a new instance per call cost more
    /// than the call (a hook process makes a dozen). Dropped after a trap, so a trapped instance never
    /// answers again.
    util: Mutex<Option<(Store<HostState>, bindings::RunbookPolicy)>>,
    /// The last envelopes derived, keyed by the document's exact bytes: a run derives its document's
    /// envelope when it is resolved, again when it starts or resumes, and a resident server for every run
    /// of the same runbook; the envelope is a function of the bytes and this module alone.
    envelopes: Mutex<Vec<(Vec<u8>, Result<String, Vec<Finding>>)>>,
    /// Instances that cleanly ended sessions and verifications left, for the next ones ([`give_back`]).
    idle: Arc<Idle>,
}

type Idle = Mutex<Vec<(Store<HostState>, bindings::RunbookPolicy)>>;

/// How many instances [`Policy`] keeps for later sessions, the most memory one may have grown to, and the
/// most all of them may hold together: an instance's linear memory never shrinks, so one a large run grew
/// is dropped rather than kept. Sixteen, because a resident hook server or a proxy ends sessions in
/// bursts, and each new session beyond the kept ones pays a new instance (about 69 µs) and a fresh
/// analysis of its document (about 110 µs for a 4.6 KB runbook; docs/robustness.md). The module starts at
/// 1.1 MiB of linear memory, so the total bound only bites when instances grew.
const IDLE: usize = 16;
const IDLE_MEMORY_BYTES: usize = 32 << 20;
const IDLE_TOTAL_BYTES: usize = 64 << 20;

/// How many envelopes [`Policy`] keeps, and the largest document it keeps one for: the memo holds at most
/// this many copies of documents this size (a runbook is a few kilobytes; the module's own limit is 1 MiB).
const ENVELOPE_MEMO: usize = 8;
const ENVELOPE_MEMO_BYTES: usize = 256 << 10;

/// Where precompiled code is cached: `$RUNBOOK_HOST_CACHE`, else `$XDG_CACHE_HOME/runbook-host`, else
/// `~/.cache/runbook-host`. None disables the cache.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("RUNBOOK_HOST_CACHE") {
        return (!d.is_empty()).then(|| PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("runbook-host"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/runbook-host"))
}

pub fn engine_config() -> Config {
    let mut config = Config::new();
    // Determinism checklist: NaN canonicalization, fuel, capped memory; the component has no imports.
    config.cranelift_nan_canonicalization(true);
    config.consume_fuel(true);
    config.wasm_component_model(true);
    config.max_wasm_stack(1 << 20);
    // Small reservations keep a new store cheap; the module never needs more than MEMORY_CAP.
    config.memory_reservation(1 << 32);
    config
}

impl Policy {
    /// Loads the embedded component, from the precompiled cache when it has it.
    pub fn load() -> Result<Policy, HostError> {
        Policy::load_with_cache(default_cache_dir().as_deref())
    }

    pub fn load_with_cache(cache: Option<&Path>) -> Result<Policy, HostError> {
        Policy::load_with(cache, Limits::default())
    }

    pub fn load_with(cache: Option<&Path>, limits: Limits) -> Result<Policy, HostError> {
        let engine = Engine::new(&engine_config()).map_err(|e| HostError::Load(format!("{e:#}")))?;
        let component = load_component(&engine, cache)?;
        let linker: Linker<HostState> = Linker::new(&engine);
        let pre = linker.instantiate_pre(&component).map_err(|e| HostError::Load(format!("{e:#}")))?;
        let pre = RunbookPolicyPre::new(pre).map_err(|e| HostError::Load(format!("{e:#}")))?;
        Ok(Policy { engine, pre, limits, util: Mutex::new(None), envelopes: Mutex::new(Vec::new()), idle: Arc::new(Mutex::new(Vec::new())) })
    }

    fn instance(&self) -> Result<(Store<HostState>, bindings::RunbookPolicy), HostError> {
        // Making an instance and calling its constructor (or restore) is one call.
        count_call();
        let mut store = Store::new(&self.engine, HostState { limits: StoreLimitsBuilder::new().memory_size(self.limits.memory_cap).build(), memory: 0 });
        store.limiter(|s| s);
        store.set_fuel(self.limits.fuel_per_call).map_err(trap)?;
        let inst = self.pre.instantiate(&mut store).map_err(trap)?;
        Ok((store, inst))
    }

    /// Runs `f` on the shared instance for stateless calls, with a fresh fuel budget.
    fn with_util<R>(&self, f: impl FnOnce(&mut Store<HostState>, &bindings::RunbookPolicy) -> wasmtime::Result<R>) -> Result<R, HostError> {
        let mut util = self.util.lock().unwrap_or_else(|e| e.into_inner());
        if util.is_none() {
            *util = Some(self.instance()?);
        }
        let (store, inst) = util.as_mut().expect("made above");
        count_call();
        store.set_fuel(self.limits.fuel_per_call).map_err(trap)?;
        let r = f(store, inst);
        if r.is_err() {
            *util = None;
        }
        r.map_err(trap)
    }

    /// Lints a document.
    pub fn lint(&self, document: &[u8]) -> Result<LintReport, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_lint(store, document))
    }

    /// The canonical envelope, or the findings that prevent it. Repeated documents are answered from a
    /// small memo of the last ones derived (a trap is never kept: it is derived again next time).
    pub fn envelope(&self, document: &[u8]) -> Result<Result<String, Vec<Finding>>, HostError> {
        let memo = || self.envelopes.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut m = memo();
            if let Some(i) = m.iter().position(|(d, _)| d == document) {
                // Most recently used last, so the oldest is the one dropped.
                let entry = m.remove(i);
                let r = entry.1.clone();
                m.push(entry);
                return Ok(r);
            }
        }
        // Not held while the module derives: another thread's call is not kept waiting on it.
        let r = self.derive_envelope(document)?;
        if document.len() <= ENVELOPE_MEMO_BYTES {
            let mut m = memo();
            if m.iter().any(|(d, _)| d == document) {
                return Ok(r); // another thread derived it meanwhile
            }
            if m.len() == ENVELOPE_MEMO {
                drop(m.remove(0));
            }
            m.push((document.to_vec(), r.clone()));
        }
        Ok(r)
    }

    /// [`Policy::envelope`] derived by the module every time, never from the memo: what a benchmark or a
    /// differential test of the module means by "the envelope".
    pub fn derive_envelope(&self, document: &[u8]) -> Result<Result<String, Vec<Finding>>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_envelope(store, document))
    }

    pub fn call_sha256(&self, tool: &str, arguments_json: &str) -> Result<Result<String, String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_call_sha256(store, tool, arguments_json))
    }

    /// The exact text a human signs to answer approval request `request` (docs/spec/run.md#approvals-bound-to-a-call; WIT `approval-payload`).
    pub fn approval_payload(&self, run_id: &str, request: u64, step: Option<&str>, call_sha256: &str, granted: bool) -> Result<String, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_approval_payload(store, run_id, request, step, call_sha256, granted))
    }

    pub fn canonicalize(&self, json: &str) -> Result<Result<String, String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_canonicalize(store, json))
    }

    pub fn encode_event(&self, event: &Event) -> Result<Result<String, String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_encode_event(store, event))
    }

    /// The hash-chain link of docs/spec/bundle.md#the-hash-chain (see the WIT's `chain-link`).
    pub fn chain_link(&self, prev: &str, event_line: &str, decision_line: &str, digested: bool) -> Result<String, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_chain_link(store, prev, event_line, decision_line, digested))
    }

    /// `verify`'s check of a report against the recorded run (WIT `check-report`): `Err((place, why))`.
    pub fn check_report(&self, document: &[u8], records: &[(String, String)], report: &str) -> Result<Result<(), (String, String)>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_check_report(store, document, records, report))
    }

    /// The line a redacted derivative records in place of `event_line` (WIT `redact-line`).
    pub fn redact_line(&self, event_line: &str) -> Result<String, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_redact_line(store, event_line))
    }

    /// A new run's bundle, as effects (WIT `bundle-create`); the error names the fact that is wrong.
    pub fn bundle_create(&self, document: &[u8], facts: &str) -> Result<Result<Vec<Effect>, String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_bundle_create(store, document, facts))
    }

    /// One change to `run.json`, as effects (WIT `bundle-change`).
    pub fn bundle_change(&self, manifest: &str, change: &str) -> Result<Result<Vec<Effect>, String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_bundle_change(store, manifest, change))
    }

    /// The end of a run, as effects (WIT `bundle-end`).
    pub fn bundle_end(&self, manifest: &str, report: Option<&str>, facts: &str) -> Result<Result<Vec<Effect>, String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_bundle_end(store, manifest, report, facts))
    }

    /// `verify`'s check of `receipt.json` against the bundle's files (WIT `check-receipt`).
    pub fn check_receipt(&self, run_json: &str, report: &str, chain_head: &str, hashes: &str, receipt: &str) -> Result<Result<(), String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_check_receipt(store, run_json, report, chain_head, hashes, receipt))
    }

    /// The signed answers a run requiring signed approvals must hold so far (WIT `signed-history`).
    pub fn signed_history(&self, run_id: &str, events: &[u8], signatures: &[u8]) -> Result<Result<Vec<SignedAnswer>, (String, String)>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_signed_history(store, run_id, events, signatures))
    }

    /// The effects that write a redacted derivative of a finished bundle (WIT `bundle-redact`).
    pub fn bundle_redact(&self, entries: &[(String, BundleItem)], at: u64) -> Result<Result<Vec<Effect>, String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_bundle_redact(store, entries, at))
    }

    /// The refusals a `start` claim gets whatever tools turn out to be offered (WIT `admission-preflight`).
    pub fn admission_preflight(&self, document: &[u8], claim: &StartClaim) -> Result<Vec<Refusal>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_admission_preflight(store, document, claim))
    }

    /// Every consistency check of a run bundle (WIT `verify-bundle`): `entries` are its top-level
    /// entries, `module_sha256` this module's, `signers_sha256` the verifier's allowed signers'.
    pub fn verify_bundle(&self, entries: &[(String, BundleItem)], module_sha256: &str, signers_sha256: Option<&str>) -> Result<Verification, HostError> {
        let (mut store, inst, _) = self.verification_instance(entries)?;
        count_call();
        let v = inst.runbook_policy_policy().call_verify_bundle(&mut store, entries, module_sha256, signers_sha256).map_err(trap);
        give_back(&Arc::downgrade(&self.idle), store, inst, None, self.limits.fuel_per_call, v.is_err());
        v
    }

    /// [`Policy::verify_bundle`] with `events.ndjson` pushed in pieces (WIT `verifier`), so that the
    /// module's memory holds a piece and a line, not the events: `entries` as for `verify_bundle`, the
    /// `events.ndjson` file's bytes being the first piece (empty when they are all pushed).
    pub fn verifier(&self, entries: &[(String, BundleItem)], module_sha256: &str, signers_sha256: Option<&str>) -> Result<Verifier, HostError> {
        let (mut store, inst, bytes) = self.verification_instance(entries)?;
        let handle = inst.runbook_policy_policy().verifier().call_constructor(&mut store, entries, module_sha256, signers_sha256).map_err(trap)?;
        Ok(Verifier { store: Some(store), inst: Some(inst), handle, fuel: self.limits.fuel_per_call, bytes, trapped: false, idle: Arc::downgrade(&self.idle) })
    }

    /// An instance for a verification of `entries`, and how many bytes they hold: not the shared instance
    /// (a verification holds the bundle and replays every event, so its fuel grows with the bundle) but a
    /// kept one, where the document's analysis often is already, given back when it ends cleanly.
    fn verification_instance(&self, entries: &[(String, BundleItem)]) -> Result<(Store<HostState>, bindings::RunbookPolicy, u64), HostError> {
        let bytes: u64 = entries.iter().map(|(n, i)| (n.len() + if let BundleItem::File(b) = i { b.len() } else { 0 }) as u64).sum();
        let (mut store, inst) = self.kept_instance()?;
        store.set_fuel(self.limits.fuel_per_call.saturating_mul(1 + (bytes >> 20))).map_err(trap)?;
        Ok((store, inst, bytes))
    }

    /// The `events.ndjson` record of an event line and its decision line (WIT `record-line`).
    pub fn record_line(&self, link: &str, event_line: &str, decision_line: &str) -> Result<String, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_record_line(store, link, event_line, decision_line))
    }

    /// A line of `signatures.ndjson` (WIT `signature-line`).
    #[allow(clippy::too_many_arguments)]
    pub fn signature_line(
        &self,
        seq: u64,
        request: u64,
        channel_id: &str,
        message: &str,
        signature: &str,
        principal: &str,
        fingerprint: &str,
    ) -> Result<String, HostError> {
        self.with_util(|store, inst| {
            inst.runbook_policy_policy().call_signature_line(store, seq, request, channel_id, message, signature, principal, fingerprint)
        })
    }

    /// A line of `shadow.ndjson` (WIT `shadow-line`).
    pub fn shadow_line(&self, seq: u64, tool: &str, call_sha256: &str, decision: &str) -> Result<String, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_shadow_line(store, seq, tool, call_sha256, decision))
    }

    /// A line of `traffic.ndjson` and its link (WIT `traffic-line`, docs/spec/adapters.md#mcp-beyond-tools).
    pub fn traffic_line(&self, prev: &str, entry: &str) -> Result<Result<(String, String), String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_traffic_line(store, prev, entry))
    }

    /// The guard's matching rule (WIT `guard-names`, docs/spec/run.md#guarded-calls).
    pub fn guard_names(&self, tool: &str, arguments: &str, needles: &[String]) -> Result<bool, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_guard_names(store, tool, arguments, needles))
    }

    /// The git state of a run's `source`, counts only (WIT `git-state`).
    pub fn git_state(&self, exit_code: Option<i32>, porcelain: &[u8]) -> Result<String, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_git_state(store, exit_code, porcelain))
    }

    /// The module's sentence for a wire code of a kind (`reason`, `refusal`, `lint`, ...).
    pub fn explain(&self, kind: &str, code: &str) -> Result<Option<String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_explain(store, kind, code))
    }

    /// The document's prose (see the WIT), or None when it does not parse.
    pub fn prose(&self, document: &[u8]) -> Result<Option<String>, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_prose(store, document))
    }

    pub fn version(&self) -> Result<String, HostError> {
        self.with_util(|store, inst| inst.runbook_policy_policy().call_version(store))
    }

    /// How many instances ended sessions and verifications left for the next ones (at most [`IDLE`]); for tests.
    #[doc(hidden)]
    pub fn kept_instances(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Starts a supervised run of `document`, on an instance a cleanly ended session left when there is
    /// one: the module's memo of the documents analysed there saves parsing the same runbook again.
    pub fn session(&self, document: &[u8]) -> Result<Session, HostError> {
        let (mut store, inst) = self.kept_instance()?;
        let handle = inst.runbook_policy_policy().session().call_constructor(&mut store, document).map_err(trap)?;
        Ok(self.live_session(store, inst, handle))
    }

    fn live_session(&self, store: Store<HostState>, inst: bindings::RunbookPolicy, handle: ResourceAny) -> Session {
        Session { store: Some(store), inst: Some(inst), handle, events: 0, trapped: None, fuel: self.limits.fuel_per_call, idle: Arc::downgrade(&self.idle) }
    }

    /// An instance for a new session or verification: one a cleanly ended session or verification left (it
    /// holds the module's memo of the documents it analysed, so a session of the same runbook does not parse
    /// it again), else a new one.
    fn kept_instance(&self) -> Result<(Store<HostState>, bindings::RunbookPolicy), HostError> {
        let kept = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let Some((mut store, inst)) = kept else { return self.instance() };
        count_call();
        store.set_fuel(self.limits.fuel_per_call).map_err(trap)?;
        Ok((store, inst))
    }

    /// A session of `document` in the state `snapshot` describes (see [`Session::snapshot`]): it answers
    /// every later event exactly as the session the snapshot was taken of. The inner error is the module's
    /// refusal of the snapshot, naming the field; the outer one a trap.
    pub fn restore(&self, document: &[u8], snapshot: &str) -> Result<Result<Session, String>, HostError> {
        let (mut store, inst) = self.kept_instance()?;
        let handle = match inst.runbook_policy_policy().session().call_restore(&mut store, document, snapshot).map_err(trap)? {
            Ok(h) => h,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let mut session = self.live_session(store, inst, handle);
        // The host numbers the lines it writes itself after a trap, so it needs the count the run is at.
        session.events = session.state()?.events;
        Ok(Ok(session))
    }
}

/// The compiled-module cache (issue 28, F10): `<module>-<engine>.cwasm` and its sha256 in
/// `<same>.cwasm.sha256`. Precompiled code is machine code this process runs, so it is loaded only from a
/// directory and a file that are this user's own ([`private`]) and only when its bytes hash to the recorded
/// digest; anything else is compiled again from the embedded bytes, and a directory that is not own is never
/// written to. The digest lives beside the code, so it catches a planted or altered file, not an agent of
/// this user that rewrites both (it could rewrite the binary too: docs/security.md).
fn load_component(engine: &Engine, cache: Option<&Path>) -> Result<Component, HostError> {
    use std::hash::{Hash, Hasher};
    let compile = || Component::new(engine, COMPONENT).map_err(|e| HostError::Load(format!("{e:#}")));
    let Some(dir) = cache else { return compile() };
    if let Err(why) = private::check_dir(dir) {
        eprintln!("runbook-host: the compiled-module cache is not used: {why}");
        return compile();
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    env!("CARGO_PKG_VERSION").hash(&mut h);
    let name = format!("{}-{:016x}.cwasm", &module_sha256()[..16], h.finish());
    let (path, digest_path) = (dir.join(&name), dir.join(format!("{name}.sha256")));
    match cached_code(&path, &digest_path) {
        Ok(Some(bytes)) => {
            // SAFETY: these bytes are ones this host serialized for this component and engine configuration:
            // the file and its digest are this user's own and the bytes hash to the digest. Bytes that do not
            // load are compiled again below.
            if let Ok(c) = unsafe { Component::deserialize(engine, &bytes) } {
                return Ok(c);
            }
        }
        Ok(None) => {}
        Err(why) => eprintln!("runbook-host: the compiled module in the cache is not used ({why}); compiled again"),
    }
    let component = compile()?;
    if let Ok(bytes) = component.serialize() {
        let _ = store_code(dir, &path, &digest_path, &bytes);
    }
    Ok(component)
}

/// The most a compiled module may be (it is a few MiB).
const MAX_COMPILED_BYTES: u64 = 256 << 20;

/// The cached code when there is some: None when either file is missing, Err when it must not be used.
fn cached_code(path: &Path, digest_path: &Path) -> Result<Option<Vec<u8>>, String> {
    let digest = match private::read_own(digest_path, 64) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let bytes = match private::read_own(path, MAX_COMPILED_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let actual = crate::files::sha256_hex(&bytes);
    if digest != actual.as_bytes() {
        return Err(format!("`{}` hashes to {actual}, not to the digest recorded for it", path.display()));
    }
    Ok(Some(bytes))
}

/// Writes the code and then its digest, each to a private temporary file renamed into place.
fn store_code(dir: &Path, path: &Path, digest_path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let write = |to: &Path, b: &[u8]| -> std::io::Result<()> {
        let tmp = dir.join(format!(".{}.{}.tmp", to.file_name().unwrap().to_string_lossy(), std::process::id()));
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        std::io::Write::write_all(&mut f, b)?;
        std::fs::rename(&tmp, to)
    };
    write(path, bytes)?;
    write(digest_path, crate::files::sha256_hex(bytes).as_bytes())
}

/// The module trapped (now or before): the decision the host records in its place, and the trap.
#[derive(Clone, Debug)]
pub struct Trapped {
    pub decision: Decision,
    pub message: String,
}

impl Trapped {
    /// The canonical decision line for [`Trapped::decision`] (9.16's keys, in RFC 8785 order).
    pub fn decision_line(&self) -> String {
        let reason = match self.decision.reason {
            Some(Reason::HostTrap) => "host-trap",
            _ => "halted",
        };
        format!(r#"{{"decision":"halt","deviation":null,"reason":"{reason}","refusals":[],"seq":{},"step":null}}"#, self.decision.seq)
    }
}

/// A bundle's verification in progress ([`Policy::verifier`]), in an instance no other call uses meanwhile
/// (given back for later sessions and verifications as a [`Session`]'s is).
pub struct Verifier {
    store: Option<Store<HostState>>,
    inst: Option<bindings::RunbookPolicy>,
    handle: ResourceAny,
    fuel: u64,
    /// Bytes given so far.
    bytes: u64,
    /// Whether a call failed: the instance is then never given back.
    trapped: bool,
    idle: Weak<Idle>,
}

impl Verifier {
    fn refuel(&mut self) -> Result<(), HostError> {
        count_call();
        // A piece may end a line that began many pieces before, so fuel grows with all the bytes given so
        // far, as verify_bundle's with the whole bundle.
        live(&mut self.store).set_fuel(self.fuel.saturating_mul(1 + (self.bytes >> 20))).map_err(trap)
    }

    /// The next piece of `events.ndjson`, of any size.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), HostError> {
        self.bytes += chunk.len() as u64;
        self.refuel()?;
        let r = live_inst(&self.inst).runbook_policy_policy().verifier().call_push(live(&mut self.store), self.handle, chunk).map_err(trap);
        self.trapped |= r.is_err();
        r
    }

    /// What every check found: exactly what `verify_bundle` finds for the same bytes.
    pub fn finish(mut self) -> Result<Verification, HostError> {
        self.refuel()?;
        let r = live_inst(&self.inst).runbook_policy_policy().verifier().call_finish(live(&mut self.store), self.handle).map_err(trap);
        self.trapped |= r.is_err();
        r
    }
}

impl Drop for Verifier {
    fn drop(&mut self) {
        let (Some(store), Some(inst)) = (self.store.take(), self.inst.take()) else { return };
        give_back(&self.idle, store, inst, Some(self.handle), self.fuel, self.trapped);
    }
}

/// Keeps an instance a session or a verification used for a later one, when it ended cleanly: never
/// after a trap (the instance refuses to be entered again, and the `resource_drop` below fails), never
/// one whose memory grew past [`IDLE_MEMORY_BYTES`], at most [`IDLE`] of them and at most
/// [`IDLE_TOTAL_BYTES`] of memory among them. The run or the verification (`handle`) is dropped in the
/// module first, so what a later user finds is the module's memo of documents, nothing of this one.
fn give_back(idle: &Weak<Idle>, mut store: Store<HostState>, inst: bindings::RunbookPolicy, handle: Option<ResourceAny>, fuel: u64, trapped: bool) {
    let Some(idle) = idle.upgrade() else { return };
    if trapped || store.data().memory > IDLE_MEMORY_BYTES {
        return;
    }
    if store.set_fuel(fuel).is_err() || handle.is_some_and(|h| h.resource_drop(&mut store).is_err()) {
        return;
    }
    let mut idle = idle.lock().unwrap_or_else(|e| e.into_inner());
    let held: usize = idle.iter().map(|(s, _)| s.data().memory).sum();
    if idle.len() < IDLE && held + store.data().memory <= IDLE_TOTAL_BYTES {
        idle.push((store, inst));
    }
}

/// One supervised run. Decisions come from the component; after a trap every event answers `halt`.
pub struct Session {
    /// The instance, taken only by `drop` (to keep it for a later session): `Some` while the session lives.
    store: Option<Store<HostState>>,
    inst: Option<bindings::RunbookPolicy>,
    handle: ResourceAny,
    events: u64,
    trapped: Option<String>,
    fuel: u64,
    /// Where a cleanly ended session leaves its instance ([`Policy::session`]).
    idle: Weak<Idle>,
}

/// A session's or verifier's store, while it lives.
fn live(store: &mut Option<Store<HostState>>) -> &mut Store<HostState> {
    store.as_mut().expect("a session's instance is taken only when it is dropped")
}

/// A session's or verifier's instance, while it lives.
fn live_inst(inst: &Option<bindings::RunbookPolicy>) -> &bindings::RunbookPolicy {
    inst.as_ref().expect("a session's instance is taken only when it is dropped")
}

impl Drop for Session {
    /// Keeps the instance for a later session ([`give_back`]).
    fn drop(&mut self) {
        let (Some(store), Some(inst)) = (self.store.take(), self.inst.take()) else { return };
        give_back(&self.idle, store, inst, Some(self.handle), self.fuel, self.trapped.is_some());
    }
}

impl Session {
    fn refuel(&mut self) -> Result<(), HostError> {
        count_call();
        live(&mut self.store).set_fuel(self.fuel).map_err(trap)
    }

    /// Whether the component trapped (the run is halted with `host-trap`).
    pub fn trapped(&self) -> Option<&str> {
        self.trapped.as_deref()
    }

    /// The decision line the host writes when the component cannot answer (9.16: reason `host-trap`).
    fn trap_line(&self, seq: u64, first: bool) -> String {
        let reason = if first { "host-trap" } else { "halted" };
        format!(r#"{{"decision":"halt","deviation":null,"reason":"{reason}","refusals":[],"seq":{seq},"step":null}}"#)
    }

    /// One event line in, one canonical decision line out.
    pub fn handle_line(&mut self, line: &str) -> String {
        let seq = self.events;
        self.events += 1;
        if self.trapped.is_some() {
            return self.trap_line(seq, false);
        }
        let r = self
            .refuel()
            .and_then(|_| live_inst(&self.inst).runbook_policy_policy().session().call_handle_line(live(&mut self.store), self.handle, line).map_err(trap));
        match r {
            Ok(d) => d,
            Err(e) => {
                self.trapped = Some(e.to_string());
                self.trap_line(seq, true)
            }
        }
    }

    /// What the host records when the module cannot answer: the decision of 9.16 (`host-trap`, then
    /// `halted`), its line, and the link the module would have computed is computed by the caller.
    fn trap_decision(&self, seq: u64, first: bool) -> Decision {
        Decision {
            seq,
            kind: DecisionKind::Halt,
            step: None,
            deviation: None,
            reason: Some(if first { Reason::HostTrap } else { Reason::Halted }),
            refusals: Vec::new(),
        }
    }

    /// One event in, everything the host records and answers out, in one call into the module: the
    /// canonical event line, the decision and its line, the chain link from `prev`, and the sentence.
    /// After a trap, `Err` carries the `host-trap` (then `halted`) decision line the host records itself;
    /// with no module to compute the link, such a line ends the chain's trust and the run halts.
    pub fn feed(&mut self, event: &Event, prev: &str) -> Result<Recorded, Trapped> {
        self.call_feed(prev, |s, prev| live_inst(&s.inst).runbook_policy_policy().session().call_feed(live(&mut s.store), s.handle, event, prev))
    }

    /// [`Session::feed`] for an event line read from a file (replay, verify).
    pub fn feed_line(&mut self, line: &str, prev: &str) -> Result<Recorded, Trapped> {
        self.call_feed(prev, |s, prev| live_inst(&s.inst).runbook_policy_policy().session().call_feed_line(live(&mut s.store), s.handle, line, prev))
    }

    /// The replay path (resume, verify): the decision line and the link of one recorded line, in one
    /// call, without the sentence and the state.
    pub fn replay_line(&mut self, line: &str, prev: &str) -> Result<(String, String), Trapped> {
        self.call_feed(prev, |s, prev| live_inst(&s.inst).runbook_policy_policy().session().call_replay_line(live(&mut s.store), s.handle, line, prev))
    }

    /// The resume path (WIT `session.replay-events`): every record of `events.ndjson` replayed into this
    /// new session from `h0`, each checked (form, link, decision) by the module. `Err(Ok((place, why)))`
    /// when a record does not check out; `Err(Err(_))` when the module trapped.
    pub fn replay_events(&mut self, events: &[u8], h0: &str) -> Result<Result<Replayed, (String, String)>, HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        // One call replays the whole run: its fuel grows with the records.
        count_call();
        live(&mut self.store).set_fuel(self.fuel.saturating_mul(1 + (events.len() as u64 >> 16))).map_err(trap)?;
        let r = live_inst(&self.inst).runbook_policy_policy().session().call_replay_events(live(&mut self.store), self.handle, events, h0).map_err(trap)?;
        if let Ok(replayed) = &r {
            // A restored session (see `Run::resume_at`) replays only the records after its snapshot.
            self.events += replayed.events;
        }
        Ok(r)
    }

    /// One event into the module, numbered by the host; after a trap, the decision the host records.
    fn call_feed<T>(&mut self, prev: &str, f: impl FnOnce(&mut Session, &str) -> wasmtime::Result<T>) -> Result<T, Trapped> {
        let seq = self.events;
        self.events += 1;
        if let Some(t) = &self.trapped {
            return Err(Trapped { decision: self.trap_decision(seq, false), message: t.clone() });
        }
        let r = self.refuel().map_err(|e| wasmtime::Error::msg(e.to_string())).and_then(|_| f(self, prev));
        match r {
            Ok(rec) => Ok(rec),
            Err(e) => {
                let message = format!("{e:#}");
                self.trapped = Some(message.clone());
                Err(Trapped { decision: self.trap_decision(seq, true), message })
            }
        }
    }

    /// The resume path's first check (WIT `session.chain-start`, docs/spec/bundle.md#resuming-a-run): that
    /// `run_json` is a run of this session's document and, with `pin`, the pinned one. `Ok(Ok(h0))`, the
    /// link [`Session::replay_events`] starts from; `Ok(Err((file, why)))` when it is not.
    pub fn chain_start(&mut self, run_json: &str, pin: Option<(&str, &str)>) -> Result<Result<String, (String, String)>, HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        self.refuel()?;
        live_inst(&self.inst).runbook_policy_policy().session().call_chain_start(live(&mut self.store), self.handle, run_json, pin).map_err(trap)
    }

    /// The typed state (step, scope, outcome, next deadline, ...).
    pub fn state(&mut self) -> Result<RunState, HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        self.refuel()?;
        live_inst(&self.inst).runbook_policy_policy().session().call_state(live(&mut self.store), self.handle).map_err(trap)
    }

    /// The typed path.
    pub fn handle(&mut self, event: &Event) -> Decision {
        let seq = self.events;
        self.events += 1;
        if self.trapped.is_some() {
            return self.trap_decision(seq, false);
        }
        let r = self
            .refuel()
            .and_then(|_| live_inst(&self.inst).runbook_policy_policy().session().call_handle(live(&mut self.store), self.handle, event).map_err(trap));
        match r {
            Ok(d) => d,
            Err(e) => {
                self.trapped = Some(e.to_string());
                self.trap_decision(seq, true)
            }
        }
    }

    /// The run report (canonical JSON). Fails when the component trapped: a report it cannot vouch for is
    /// never made up by the host.
    pub fn report(&mut self) -> Result<String, HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        self.refuel()?;
        live_inst(&self.inst).runbook_policy_policy().session().call_report(live(&mut self.store), self.handle).map_err(trap)
    }

    /// Sets the guard's needles (WIT `set-guard`, docs/spec/run.md#guarded-calls): a typed `invoke` naming one is fed as guarded.
    pub fn set_guard(&mut self, needles: &[String]) -> Result<(), HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        self.refuel()?;
        live_inst(&self.inst).runbook_policy_policy().session().call_set_guard(live(&mut self.store), self.handle, needles).map_err(trap)
    }

    /// Which of `offered` the client may see now (WIT `visible-tools`).
    pub fn visible_tools(&mut self, offered: &[String], whole_allowlist: bool) -> Result<Vec<String>, HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        self.refuel()?;
        live_inst(&self.inst).runbook_policy_policy().session().call_visible_tools(live(&mut self.store), self.handle, offered, whole_allowlist).map_err(trap)
    }

    /// How the run ends when its client leaves (WIT `leaving`, docs/spec/adapters.md#adapter-duties).
    pub fn leaving(&mut self, calls_in_flight: u32, last_call_timed_out: bool) -> Result<Leaving, HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        self.refuel()?;
        live_inst(&self.inst)
            .runbook_policy_policy()
            .session()
            .call_leaving(live(&mut self.store), self.handle, calls_in_flight, last_call_timed_out)
            .map_err(trap)
    }

    /// The exit code of a process that ran this run (WIT `exit-code`).
    pub fn exit_code(&mut self, shadow: bool) -> Result<u8, HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        self.refuel()?;
        live_inst(&self.inst).runbook_policy_policy().session().call_exit_code(live(&mut self.store), self.handle, shadow).map_err(trap)
    }

    /// The session's whole state as canonical JSON (`runbook-session-snapshot/v1`), for
    /// [`Policy::restore`] in another process. Fails when the component trapped, now or before.
    pub fn snapshot(&mut self) -> Result<String, HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        self.refuel()?;
        let r = live_inst(&self.inst).runbook_policy_policy().session().call_snapshot(live(&mut self.store), self.handle).map_err(trap);
        if let Err(e) = &r {
            // A trapped instance cannot be trusted with the next event either.
            self.trapped = Some(e.to_string());
        }
        r
    }

    pub fn status(&mut self) -> Result<String, HostError> {
        if let Some(t) = &self.trapped {
            return Err(HostError::Trap(t.clone()));
        }
        self.refuel()?;
        live_inst(&self.inst).runbook_policy_policy().session().call_status(live(&mut self.store), self.handle).map_err(trap)
    }

    pub fn is_over(&mut self) -> bool {
        if self.trapped.is_some() {
            return true;
        }
        self.refuel().is_err() || live_inst(&self.inst).runbook_policy_policy().session().call_is_over(live(&mut self.store), self.handle).unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    #[test]
    fn the_build_time_module_sha256_is_the_sha256_of_the_embedded_bytes() {
        assert_eq!(super::module_sha256(), hex::encode(Sha256::digest(super::COMPONENT)));
    }

    #[test]
    fn invocation_is_the_name_only_when_path_finds_this_very_binary() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("runbook-host-invocation-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for sub in ["bin", "on-path", "other", "with space"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let exe = d.join("bin/runbook-host");
        std::fs::write(&exe, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&exe, d.join("on-path/runbook-host")).unwrap();
        std::fs::write(d.join("other/runbook-host"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(d.join("other/runbook-host"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = |dirs: &[&str]| std::env::join_paths(dirs.iter().map(|s| d.join(s))).unwrap();
        let abs = exe.canonicalize().unwrap().to_string_lossy().into_owned();
        // On PATH through a symlink: the name.
        assert_eq!(super::invocation_for(Some(&exe), Some(&path(&["on-path"]))), "runbook-host");
        // Not on PATH, or another `runbook-host` first: the absolute path.
        assert_eq!(super::invocation_for(Some(&exe), Some(&path(&["other", "on-path"]))), abs);
        assert_eq!(super::invocation_for(Some(&exe), None), abs);
        // A path a shell would split is quoted.
        let spaced = d.join("with space/runbook-host");
        std::fs::copy(&exe, &spaced).unwrap();
        let shown = super::invocation_for(Some(&spaced), Some(&path(&["on-path"])));
        assert_eq!(shown, format!("'{}'", spaced.canonicalize().unwrap().display()));
        assert_eq!(super::shell_quote("it's"), r"'it'\''s'");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_trap_in_a_stateless_call_does_not_poison_the_next() {
        // A memory cap that a 32 MiB document cannot fit under: that lint traps, the shared instance is
        // dropped, and the next call of the same policy answers from a fresh one.
        let p = super::Policy::load_with(None, super::Limits { fuel_per_call: super::FUEL_PER_CALL, memory_cap: 24 << 20 }).unwrap();
        assert_eq!(p.canonicalize("{\"b\":1,\"a\":2}").unwrap().unwrap(), "{\"a\":2,\"b\":1}");
        let big = vec![b'#'; 32 << 20];
        assert!(matches!(p.lint(&big), Err(super::HostError::Trap(_))));
        assert!(p.util.lock().unwrap().is_none(), "the trapped instance is dropped");
        assert_eq!(p.canonicalize("[1.0,{\"z\":null,\"a\":[]}]").unwrap().unwrap(), "[1,{\"a\":[],\"z\":null}]");
        assert!(p.lint(b"id: x\n").unwrap().findings.iter().any(|f| f.code == "missing-field"));
    }
}
