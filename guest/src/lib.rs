//! The runbook policy core.
//!
//! Fully deterministic and sans-IO: it reads no file, no clock, no randomness and no environment, and its
//! data holds no floats (numbers are exact decimals). The host passes time in with every event. Given the
//! same document bytes and the same events, every build of this crate (native, or the WebAssembly
//! component every other host loads) gives the same bytes out.
//!
//! The surface, in call order:
//! - [`lint`] and [`envelope`] look at a document alone;
//! - [`Session::new`] takes a document, [`Session::handle`] / [`Session::handle_line`] take one event each
//!   (the `start` claim first) and return its decision, [`Session::report`] gives the run report;
//! - [`Session::snapshot`] and [`Session::restore`] carry a session's state across processes.

pub mod audit;
pub mod bundle;
pub mod chain;
pub mod codes;
pub mod doc;
pub mod envelope;
pub mod event;
pub mod jcs;
pub mod json;
pub mod predicate;
mod sort;
pub mod supervisor;
#[cfg(feature = "testgen")]
pub mod testgen;
pub mod value;
pub mod verify;
pub mod when;
pub mod yaml;

#[cfg(target_arch = "wasm32")]
mod component;

pub use doc::{Finding, Severity, Structure};
pub use event::{Decision, Event};
pub use supervisor::{Outcome, Recorded, RunPhase, RunState, Session};

/// What `lint` reports for a document.
#[derive(Clone, Debug)]
pub struct LintReport {
    pub sha256: String,
    pub findings: Vec<Finding>,
    pub structure: Option<Structure>,
}

impl LintReport {
    pub fn ok(&self) -> bool {
        !self.findings.iter().any(|f| f.severity == Severity::Error)
    }
}

/// Parses and lints a document.
pub fn lint(document: &[u8]) -> LintReport {
    let a = doc::analyze(document);
    LintReport { structure: a.parsed.then_some(a.structure), sha256: a.sha256, findings: a.findings }
}

/// The canonical `runbook-policy-envelope/v1`, or the findings that leave the document without a model.
/// Derived from the bytes every time (what a benchmark of the envelope measures); the calls a run repeats
/// (its session, its bundle, a replay) take the instance's memo instead ([`doc::analysis_of`]).
pub fn envelope(document: &[u8]) -> Result<String, Vec<Finding>> {
    envelope_from(&doc::analyze(document))
}

/// [`envelope`] of an analysis already made.
pub fn envelope_from(a: &doc::Analysis) -> Result<String, Vec<Finding>> {
    match a.envelope_text() {
        Some(e) => Ok(e.to_string()),
        // Only the findings that leave the document without a model; `lint` reports the rest.
        None => {
            Err(a.findings.iter().filter(|f| f.severity == Severity::Error && supervisor::BLOCKING.iter().any(|c| c.as_str() == f.code)).cloned().collect())
        }
    }
}

/// The document's prose as canonical JSON, for hosts that show it (an MCP client's `runbook_status`): the
/// runbook's `title` and `description`, and each step's `body` and `expect`, only the keys present:
/// `{"runbook":{..},"steps":{"<id>":{..}}}`. None when the document does not parse. Prose is data to show,
/// never a decision input. From the instance's memo: a proxy asks for it at every status request.
pub fn prose(document: &[u8]) -> Option<String> {
    use jcs::{obj_owned, s};
    let a = doc::analysis_of(document);
    if !a.parsed {
        return None;
    }
    let d = &a.doc;
    let pick = |pairs: &[(&str, &Option<String>)]| obj_owned(pairs.iter().filter_map(|(k, v)| v.as_deref().map(|t| (k.to_string(), s(t)))).collect());
    let runbook = pick(&[("title", &d.title), ("description", &d.description)]);
    // A duplicated id (a lint error) keeps its first step, so the object has unique keys.
    let mut seen = std::collections::BTreeSet::new();
    let steps = obj_owned(
        d.steps.iter().filter(|st| seen.insert(st.id.as_str())).map(|st| (st.id.clone(), pick(&[("body", &st.body), ("expect", &st.expect)]))).collect(),
    );
    Some(jcs::to_string(&obj_owned(vec![("runbook".to_string(), runbook), ("steps".to_string(), steps)])))
}

/// The hash an approval bound to one call names (docs/spec/run.md#approvals-bound-to-a-call).
pub fn call_sha256(tool: &str, arguments_json: &str) -> Result<String, String> {
    let p = json::parse(arguments_json);
    match (p.node, p.issues.first()) {
        (Some(n), None) => match jcs::has_inexact(&n).then(|| jcs::first_inexact(&n)).flatten() {
            // 9.28: such a call is denied before it runs, so no approval may ever name it.
            Some(at) => Err(format!("arguments: the number at `{at}` is not exact (it has no canonical form of its own)")),
            None => Ok(event::call_sha256(tool, &n)),
        },
        (_, Some(i)) => Err(format!("arguments: {} at column {}", i.message, i.pos.column)),
        (None, None) => Err("arguments: not JSON".into()),
    }
}

/// The exact text a human signs to answer one approval request (docs/spec/run.md#approvals-bound-to-a-call): the run, the request (the
/// `seq` of the module's `needs-approval` decision), the step, the call's hash and the answer, one a line,
/// so that a signature answers that one request of that one run and nothing else.
pub fn approval_payload(run_id: &str, request: u64, step: Option<&str>, call_sha256: &str, granted: bool) -> String {
    format!(
        "runbook-approval/v2\nrun {run_id}\nrequest {request}\nstep {}\ncall_sha256 {call_sha256}\nanswer {}\n",
        step.unwrap_or("-"),
        if granted { "approve" } else { "deny" }
    )
}

/// RFC 8785 canonical form of JSON text.
pub fn canonicalize(json_text: &str) -> Result<String, String> {
    let p = json::parse(json_text);
    match (p.node, p.issues.first()) {
        (Some(n), None) => Ok(jcs::to_string(&n)),
        (_, Some(i)) => Err(format!("{} at line {}, column {}", i.message, i.pos.line, i.pos.column)),
        (None, None) => Err("not JSON".into()),
    }
}

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
