//! The runbook document: parsing either dialect (seed 001 checkpoint manifests and step/capability
//! procedures) into a typed model, and every lint finding with its place in the source (docs/spec/runbook.md).

use crate::codes::LintCode;
use crate::json::{self, ParseIssue};
use crate::predicate::{Op, Pred, OPS};
use crate::value::{escape_token, parse_pointer, Node, Pos, Value};
use crate::yaml;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

/// The module's own limits (docs/spec/runbook.md#limits).
pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;
pub const MAX_STEPS: usize = 10_000;
pub const MAX_CAPABILITIES: usize = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub code: &'static str,
    pub severity: Severity,
    pub pos: Pos,
    pub pointer: String,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Risk {
    ReadOnly,
    Mutating,
    Destructive,
    Irreversible,
}

impl Risk {
    pub const ALL: [(&'static str, Risk); 4] =
        [("read-only", Risk::ReadOnly), ("mutating", Risk::Mutating), ("destructive", Risk::Destructive), ("irreversible", Risk::Irreversible)];
    pub fn as_str(self) -> &'static str {
        Risk::ALL.iter().find(|(_, r)| *r == self).map(|(n, _)| *n).unwrap_or("?")
    }
    pub fn parse(s: &str) -> Option<Risk> {
        Risk::ALL.iter().find(|(n, _)| *n == s).map(|(_, r)| *r)
    }
    pub fn is_destructive(self) -> bool {
        self >= Risk::Destructive
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Profile {
    R0,
    R1,
    R2,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::R0 => "R0",
            Profile::R1 => "R1",
            Profile::R2 => "R2",
        }
    }
    pub fn parse(s: &str) -> Option<Profile> {
        match s {
            "R0" => Some(Profile::R0),
            "R1" => Some(Profile::R1),
            "R2" => Some(Profile::R2),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    HumanOnly,
    HumanWithAgent,
    AgentAutonomous,
}

impl Execution {
    pub fn as_str(self) -> &'static str {
        match self {
            Execution::HumanOnly => "human-only",
            Execution::HumanWithAgent => "human-with-agent",
            Execution::AgentAutonomous => "agent-autonomous",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Structure {
    P0,
    P1,
    P2,
}

impl Structure {
    pub fn as_str(self) -> &'static str {
        match self {
            Structure::P0 => "P0",
            Structure::P1 => "P1",
            Structure::P2 => "P2",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Capability {
    pub name: String,
    pub tool: String,
    /// Resolved: a capability without `risk` is `mutating`.
    pub risk: Risk,
    pub when: Option<Pred>,
    /// Where it is declared: `/capabilities/<i>`, or for a seed 001 manifest without `capabilities` the
    /// `/checkpoints/<k>/match/tool` that names it.
    pub pointer: String,
}

#[derive(Clone, Debug)]
pub struct Retry {
    pub to: String,
    pub max: u64,
}

#[derive(Clone, Debug)]
pub struct Step {
    pub id: String,
    pub pos: Pos,
    pub pointer: String,
    /// Capability names as written.
    pub tools: Vec<String>,
    pub risk: Option<Risk>,
    pub requires_approval: bool,
    pub assert: Option<Vec<Pred>>,
    pub observe: Option<String>,
    pub next: Option<String>,
    pub on_fail: Option<String>,
    pub retry: Option<Retry>,
    /// The step's prose (`body`, `expect`), kept only to be shown: it never decides anything.
    pub body: Option<String>,
    pub expect: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub id: String,
    pub kind: String,
    pub required: bool,
    pub match_tool: Option<String>,
    pub condition: Option<String>,
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prerequisite {
    ToolAvailable(String),
    Runbook { id: String, version: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionCondition {
    FinalOutput,
    Terminal,
}

/// The typed document, built best-effort even when findings say it is invalid.
#[derive(Clone, Debug, Default)]
pub struct Doc {
    pub runbook_id: Option<String>,
    pub version: Option<String>,
    /// The runbook's prose, kept only to be shown.
    pub title: Option<String>,
    pub description: Option<String>,
    pub advisory: bool,
    pub report_only: bool,
    pub execution: Option<Execution>,
    pub min_profile: Option<Profile>,
    pub capabilities: Vec<Capability>,
    pub steps: Vec<Step>,
    pub terminals: Vec<String>,
    pub checkpoints: Vec<Checkpoint>,
    pub completion: Option<CompletionCondition>,
    pub receipt: bool,
    pub prerequisites: Vec<Prerequisite>,
}

/// Everything derived from a document's bytes: the model, the findings and the facts the envelope and the
/// supervisor share, computed once.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub sha256: String,
    /// False when the bytes did not parse into a mapping at all.
    pub parsed: bool,
    pub doc: Doc,
    pub findings: Vec<Finding>,
    /// For each step: indices into `doc.capabilities` of its declared tools, in document order.
    pub step_caps: Vec<Vec<usize>>,
    /// For each step: the resolved `next` (default: the following step).
    pub step_next: Vec<Option<String>>,
    pub step_risk: Vec<Risk>,
    pub step_gated: Vec<bool>,
    /// For each step: the capability indices whose results its `assert` judges.
    pub step_observe: Vec<Vec<usize>>,
    pub undeclared: Vec<(String, String)>,
    /// Step id to its (first) position.
    pub index: BTreeMap<String, usize>,
    pub structure: Structure,
    pub implied_profile: Profile,
    pub destructive: bool,
    pub max_risk: Risk,
    /// The envelope's canonical text (None: the document has none) and that text's sha256, each derived the
    /// first time it is asked for and then kept with the analysis, so that a memoised analysis
    /// ([`analysis_of`]) derives them once for every bundle, report and verification of its document.
    envelope: OnceLock<Option<String>>,
    envelope_sha256: OnceLock<Option<String>>,
}

impl Analysis {
    /// The canonical envelope ([`crate::envelope::envelope_of`]), derived on first use.
    pub fn envelope_text(&self) -> Option<&str> {
        self.envelope.get_or_init(|| crate::envelope::envelope_of(self)).as_deref()
    }

    /// The sha256 of [`Analysis::envelope_text`], the chain's `h0` when there is an envelope.
    pub fn envelope_sha256(&self) -> Option<&str> {
        self.envelope_sha256.get_or_init(|| self.envelope_text().map(|e| sha256_hex(e.as_bytes()))).as_deref()
    }

    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    pub fn step_index(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    pub fn is_terminal(&self, id: &str) -> bool {
        self.doc.terminals.iter().any(|t| t == id)
    }

    /// The effective minimum profile and whether it was declared (7.3).
    pub fn min_profile(&self) -> (Profile, bool) {
        match self.doc.min_profile {
            Some(p) if p >= self.implied_profile => (p, true),
            _ => (self.implied_profile, false),
        }
    }

    pub fn completion(&self) -> CompletionCondition {
        self.doc.completion.unwrap_or(if self.doc.steps.is_empty() { CompletionCondition::FinalOutput } else { CompletionCondition::Terminal })
    }

    /// Whether a run must end at a terminal (7.4).
    pub fn needs_terminal(&self) -> bool {
        !self.doc.steps.is_empty() || !self.doc.terminals.is_empty()
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 0xf) as usize] as char);
    }
    s
}

/// Parses a document in JSON (when its first non-blank character is `{` or `[`) or YAML.
pub fn parse_source(text: &str) -> json::Parsed {
    if text.trim_start().starts_with(['{', '[']) {
        json::parse(text)
    } else {
        yaml::parse(text)
    }
}

struct Ctx {
    findings: Vec<Finding>,
    /// "Did you mean" against document-sized lists costs a distance per candidate: bounded, so that a
    /// document full of misspellings stays cheap (the module's answers never depend on a host's fuel).
    suggestions_left: u32,
}

impl Ctx {
    fn push(&mut self, code: LintCode, severity: Severity, pos: Pos, pointer: &str, message: String) {
        self.findings.push(Finding { code: code.as_str(), severity, pos, pointer: pointer.to_string(), message });
    }
    fn error(&mut self, code: LintCode, pos: Pos, pointer: &str, message: String) {
        self.push(code, Severity::Error, pos, pointer, message);
    }
    fn suggest<'a>(&mut self, word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
        if self.suggestions_left == 0 {
            return String::new();
        }
        self.suggestions_left -= 1;
        did_you_mean(word, candidates)
    }
    fn warn(&mut self, code: LintCode, pos: Pos, pointer: &str, message: String) {
        self.push(code, Severity::Warning, pos, pointer, message);
    }
}

fn ptr(base: &str, key: &str) -> String {
    format!("{base}/{}", escape_token(key))
}

/// Levenshtein distance over Unicode scalar values, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// `; did you mean `x`?` for the closest candidate, when one is close enough.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let limit = (word.chars().count() / 3).max(1);
    let mut best: Option<(usize, &str)> = None;
    let len = word.chars().count();
    for c in candidates {
        if c.chars().count().abs_diff(len) > limit {
            continue;
        }
        let d = distance(word, c);
        if d <= limit && best.is_none_or(|(bd, bc)| d < bd || (d == bd && c < bc)) {
            best = Some((d, c));
        }
    }
    match best {
        Some((_, c)) => format!("; did you mean `{c}`?"),
        None => String::new(),
    }
}

/// Checks that `node` is a mapping with only the given fields (plus `x-` extensions), reporting the rest.
fn check_fields(ctx: &mut Ctx, node: &Node, pointer: &str, allowed: &[&str], what: &str) -> bool {
    let Value::Obj(members) = &node.value else {
        ctx.error(LintCode::WrongType, node.pos, pointer, format!("{what} must be a mapping, found {}", node.type_name()));
        return false;
    };
    for m in members {
        if m.key.starts_with("x-") || allowed.contains(&m.key.as_str()) {
            continue;
        }
        let hint = did_you_mean(&m.key, allowed.iter().copied());
        ctx.error(LintCode::UnknownField, m.key_pos, &ptr(pointer, &m.key), format!("unknown field `{}` in {what}{hint}", m.key));
    }
    true
}

fn get_str(ctx: &mut Ctx, node: &Node, key: &str, pointer: &str) -> Option<String> {
    let v = node.get(key)?;
    match &v.value {
        Value::Str(s) => Some(s.clone()),
        _ => {
            ctx.error(LintCode::WrongType, v.pos, &ptr(pointer, key), format!("`{key}` must be a string, found {}", v.type_name()));
            None
        }
    }
}

fn get_bool(ctx: &mut Ctx, node: &Node, key: &str, pointer: &str) -> Option<bool> {
    let v = node.get(key)?;
    match &v.value {
        Value::Bool(b) => Some(*b),
        _ => {
            ctx.error(LintCode::WrongType, v.pos, &ptr(pointer, key), format!("`{key}` must be true or false, found {}", v.type_name()));
            None
        }
    }
}

fn get_enum<T: Copy>(ctx: &mut Ctx, node: &Node, key: &str, pointer: &str, options: &[(&str, T)]) -> Option<T> {
    let v = node.get(key)?;
    let s = get_str(ctx, node, key, pointer)?;
    match options.iter().find(|(n, _)| *n == s) {
        Some((_, t)) => Some(*t),
        None => {
            let names: Vec<String> = options.iter().map(|(n, _)| format!("`{n}`")).collect();
            let hint = did_you_mean(&s, options.iter().map(|(n, _)| *n));
            ctx.error(LintCode::InvalidValue, v.pos, &ptr(pointer, key), format!("`{key}` must be one of {}, found `{s}`{hint}", names.join(", ")));
            None
        }
    }
}

fn require(ctx: &mut Ctx, node: &Node, key: &str, pointer: &str, what: &str) -> bool {
    if node.get(key).is_some() {
        return true;
    }
    ctx.error(LintCode::MissingField, node.pos, pointer, format!("{what} needs `{key}`"));
    false
}

fn list<'a>(ctx: &mut Ctx, node: &'a Node, key: &str, pointer: &str) -> Option<&'a [Node]> {
    let v = node.get(key)?;
    match &v.value {
        Value::Arr(items) => Some(items),
        _ => {
            ctx.error(LintCode::WrongType, v.pos, &ptr(pointer, key), format!("`{key}` must be a list, found {}", v.type_name()));
            None
        }
    }
}

pub fn valid_runbook_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-'))
}

pub fn valid_step_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-'))
}

/// Semantic Versioning 2.0.0.
pub fn valid_semver(s: &str) -> bool {
    let (core, rest) = match s.find(['-', '+']) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let nums: Vec<&str> = core.split('.').collect();
    let numeric = |p: &str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) && (p == "0" || !p.starts_with('0'));
    if nums.len() != 3 || !nums.iter().all(|p| numeric(p)) {
        return false;
    }
    let (pre, build) = match rest.find('+') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let ident_ok = |p: &str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
    if let Some(pre) = pre.strip_prefix('-') {
        if !pre.split('.').all(|p| ident_ok(p) && (!p.bytes().all(|c| c.is_ascii_digit()) || numeric(p))) {
            return false;
        }
    } else if !pre.is_empty() {
        return false;
    }
    if let Some(build) = build {
        if !build.split('.').all(ident_ok) {
            return false;
        }
    }
    true
}

const ROOT_FIELDS: &[&str] = &[
    "runbook_id",
    "version",
    "title",
    "description",
    "mode",
    "failure_policy",
    "execution",
    "min_runtime_profile",
    "capabilities",
    "steps",
    "terminals",
    "checkpoints",
    "completion",
    "prerequisites",
];
const CAP_FIELDS: &[&str] = &["name", "tool", "risk", "when"];
const STEP_FIELDS: &[&str] = &["id", "tool", "tools", "risk", "requires_approval", "body", "expect", "assert", "observe", "next", "on_fail", "retry"];
const PROFILES: [(&str, Profile); 3] = [("R0", Profile::R0), ("R1", Profile::R1), ("R2", Profile::R2)];

/// Line and column of a byte offset (column in Unicode scalar values).
fn pos_at(text: &str, offset: usize) -> Pos {
    let before = &text[..offset];
    let line = before.matches('\n').count() as u32 + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    Pos { line, column: before[line_start..].chars().count() as u32 + 1 }
}

fn issue_to_finding(i: ParseIssue) -> Finding {
    Finding { code: i.code, severity: Severity::Error, pos: i.pos, pointer: i.pointer, message: i.message }
}

/// How many analyses an instance keeps, and the largest document it keeps one for (a runbook is a few
/// kilobytes; [`MAX_DOCUMENT_BYTES`] is the most a document may be).
const MEMO: usize = 8;
const MEMO_BYTES: usize = 256 << 10;

thread_local! {
    /// The last documents this instance analysed, most recently used last. A host calls the module with
    /// the same document many times in a run (its envelope, the bundle's creation, the session, a replay,
    /// a check of the report) and a resident host for every run of the same runbook; the analysis is a
    /// function of the bytes alone, so a kept one answers exactly as a new one would.
    static ANALYSES: RefCell<Vec<(Vec<u8>, Arc<Analysis>)>> = const { RefCell::new(Vec::new()) };
}

/// The analysis of a document's exact bytes, from this instance's memo when it analysed them lately.
pub fn analysis_of(bytes: &[u8]) -> Arc<Analysis> {
    let kept = ANALYSES.with_borrow_mut(|m| {
        let i = m.iter().position(|(d, _)| d == bytes)?;
        let entry = m.remove(i);
        let a = Arc::clone(&entry.1);
        m.push(entry);
        Some(a)
    });
    if let Some(a) = kept {
        return a;
    }
    let a = Arc::new(analyze(bytes));
    if bytes.len() <= MEMO_BYTES {
        ANALYSES.with_borrow_mut(|m| {
            if m.len() == MEMO {
                drop(m.remove(0));
            }
            m.push((bytes.to_vec(), Arc::clone(&a)));
        });
    }
    a
}

/// Parses and lints a document's exact bytes (every time: [`analysis_of`] is the memoised form).
pub fn analyze(bytes: &[u8]) -> Analysis {
    let sha256 = sha256_hex(bytes);
    let mut ctx = Ctx { findings: Vec::new(), suggestions_left: 32 };
    let mut a = Analysis {
        sha256,
        parsed: false,
        doc: Doc::default(),
        findings: Vec::new(),
        step_caps: Vec::new(),
        step_next: Vec::new(),
        step_risk: Vec::new(),
        step_gated: Vec::new(),
        step_observe: Vec::new(),
        undeclared: Vec::new(),
        index: BTreeMap::new(),
        structure: Structure::P0,
        implied_profile: Profile::R0,
        destructive: false,
        max_risk: Risk::ReadOnly,
        envelope: OnceLock::new(),
        envelope_sha256: OnceLock::new(),
    };
    let start = Pos { line: 1, column: 1 };
    if bytes.len() > MAX_DOCUMENT_BYTES {
        ctx.error(LintCode::Limit, start, "", format!("the document is {} bytes; the limit is {MAX_DOCUMENT_BYTES}", bytes.len()));
        a.findings = ctx.findings;
        return a;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let valid = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or("");
            ctx.error(LintCode::ParseError, pos_at(valid, valid.len()), "", "the document is not valid UTF-8".into());
            a.findings = ctx.findings;
            return a;
        }
    };
    let parsed = parse_source(text);
    for issue in parsed.issues {
        ctx.findings.push(issue_to_finding(issue));
    }
    let Some(root) = parsed.node else {
        a.findings = ctx.findings;
        sort_findings(&mut a.findings);
        return a;
    };
    if !check_fields(&mut ctx, &root, "", ROOT_FIELDS, "the runbook") {
        a.findings = ctx.findings;
        sort_findings(&mut a.findings);
        return a;
    }
    a.parsed = true;
    build_doc(&mut ctx, &root, &mut a);
    derive(&mut ctx, &root, &mut a);
    a.findings = ctx.findings;
    sort_findings(&mut a.findings);
    a
}

pub fn sort_findings(f: &mut Vec<Finding>) {
    crate::sort::sort_by(f, |x, y| (x.pos.line, x.pos.column, x.code, &x.pointer, &x.message).cmp(&(y.pos.line, y.pos.column, y.code, &y.pointer, &y.message)));
}

fn build_doc(ctx: &mut Ctx, root: &Node, a: &mut Analysis) {
    let d = &mut a.doc;
    if require(ctx, root, "runbook_id", "", "the runbook") {
        if let Some(id) = get_str(ctx, root, "runbook_id", "") {
            if !valid_runbook_id(&id) {
                let v = root.get("runbook_id").unwrap();
                ctx.error(
                    LintCode::InvalidId,
                    v.pos,
                    "/runbook_id",
                    format!("`{id}` is not a valid runbook id (lowercase letters, digits, `.`, `_`, `-`; at most 128)"),
                );
            }
            d.runbook_id = Some(id);
        }
    }
    if require(ctx, root, "version", "", "the runbook") {
        if let Some(v) = get_str(ctx, root, "version", "") {
            if !valid_semver(&v) {
                let n = root.get("version").unwrap();
                ctx.error(LintCode::InvalidId, n.pos, "/version", format!("`{v}` is not a semantic version such as `1.2.0`"));
            }
            d.version = Some(v);
        }
    }
    d.title = get_str(ctx, root, "title", "");
    d.description = get_str(ctx, root, "description", "");
    d.advisory = get_enum(ctx, root, "mode", "", &[("required", false), ("advisory", true)]).unwrap_or(false);
    d.report_only = get_enum(ctx, root, "failure_policy", "", &[("fail_closed", false), ("report_only", true)]).unwrap_or(false);
    if d.report_only && !d.advisory {
        let n = root.get("failure_policy").unwrap();
        ctx.error(LintCode::ReportOnlyRequiresAdvisory, n.pos, "/failure_policy", "`report_only` is allowed only with `mode: advisory`".into());
    }
    d.execution = get_enum(
        ctx,
        root,
        "execution",
        "",
        &[("human-only", Execution::HumanOnly), ("human-with-agent", Execution::HumanWithAgent), ("agent-autonomous", Execution::AgentAutonomous)],
    );
    d.min_profile = get_enum(ctx, root, "min_runtime_profile", "", &PROFILES);

    // Capabilities.
    let mut cap_nodes: Vec<(Pos, String)> = Vec::new();
    let caps_declared = root.get("capabilities").is_some();
    if let Some(items) = list(ctx, root, "capabilities", "") {
        if items.len() > MAX_CAPABILITIES {
            ctx.error(
                LintCode::Limit,
                root.get("capabilities").unwrap().pos,
                "/capabilities",
                format!("{} capabilities; the limit is {MAX_CAPABILITIES}", items.len()),
            );
        }
        for (i, item) in items.iter().enumerate().take(MAX_CAPABILITIES) {
            let p = format!("/capabilities/{i}");
            if let Value::Str(tool) = &item.value {
                cap_nodes.push((item.pos, p.clone()));
                d.capabilities.push(Capability { name: tool.clone(), tool: tool.clone(), risk: Risk::Mutating, when: None, pointer: p });
                continue;
            }
            if !check_fields(ctx, item, &p, CAP_FIELDS, "a capability") {
                continue;
            }
            if !require(ctx, item, "tool", &p, "a capability") {
                continue;
            }
            let Some(tool) = get_str(ctx, item, "tool", &p) else { continue };
            let name = get_str(ctx, item, "name", &p).unwrap_or_else(|| tool.clone());
            let risk = get_enum(ctx, item, "risk", &p, &Risk::ALL).unwrap_or(Risk::Mutating);
            let when = item.get("when").and_then(|w| predicate(ctx, w, &ptr(&p, "when"), true));
            cap_nodes.push((item.get("name").map(|n| n.pos).unwrap_or(item.pos), p.clone()));
            d.capabilities.push(Capability { name, tool, risk, when, pointer: p });
        }
    }
    for i in 0..d.capabilities.len() {
        if d.capabilities[..i].iter().any(|c| c.name == d.capabilities[i].name) {
            let (pos, p) = &cap_nodes[i];
            ctx.error(LintCode::DuplicateId, *pos, p, format!("capability `{}` is declared twice", d.capabilities[i].name));
        }
    }

    // Terminals.
    if let Some(items) = list(ctx, root, "terminals", "") {
        for (i, item) in items.iter().enumerate() {
            let p = format!("/terminals/{i}");
            match &item.value {
                Value::Str(t) => {
                    if !valid_step_id(t) {
                        ctx.error(LintCode::InvalidId, item.pos, &p, format!("`{t}` is not a valid terminal name (lowercase letters, digits, `_`, `-`)"));
                    }
                    if d.terminals.contains(t) {
                        ctx.error(LintCode::DuplicateId, item.pos, &p, format!("terminal `{t}` is listed twice"));
                    } else {
                        d.terminals.push(t.clone());
                    }
                }
                _ => ctx.error(LintCode::WrongType, item.pos, &p, format!("a terminal must be a string, found {}", item.type_name())),
            }
        }
    }

    // Checkpoints (seed 001).
    if let Some(items) = list(ctx, root, "checkpoints", "") {
        for (i, item) in items.iter().enumerate() {
            let p = format!("/checkpoints/{i}");
            if !check_fields(ctx, item, &p, &["id", "kind", "required", "match", "condition", "timeout_ms"], "a checkpoint") {
                continue;
            }
            let has_id = require(ctx, item, "id", &p, "a checkpoint");
            let has_kind = require(ctx, item, "kind", &p, "a checkpoint");
            let id = get_str(ctx, item, "id", &p);
            let kind = get_enum(ctx, item, "kind", &p, &[("tool_call", "tool_call"), ("condition", "condition")]);
            let required = get_bool(ctx, item, "required", &p).unwrap_or(true);
            let mut match_tool = None;
            if let Some(m) = item.get("match") {
                let mp = ptr(&p, "match");
                if check_fields(ctx, m, &mp, &["tool"], "a checkpoint match") && require(ctx, m, "tool", &mp, "a checkpoint match") {
                    match_tool = get_str(ctx, m, "tool", &mp);
                }
            }
            let condition = get_enum(ctx, item, "condition", &p, &[("final_output", "final_output")]).map(str::to_string);
            let timeout_ms = item.get("timeout_ms").and_then(|t| match &t.value {
                Value::Num(n) if n.as_u64().is_some() => n.as_u64(),
                _ => {
                    ctx.error(
                        LintCode::WrongType,
                        t.pos,
                        &ptr(&p, "timeout_ms"),
                        format!("`timeout_ms` must be a whole number of milliseconds, found {}", t.type_name()),
                    );
                    None
                }
            });
            match kind {
                Some("tool_call") if item.get("match").is_none() => {
                    ctx.error(LintCode::MissingField, item.pos, &p, "a `tool_call` checkpoint needs `match: {tool}`".into())
                }
                Some("condition") if item.get("condition").is_none() => {
                    ctx.error(LintCode::MissingField, item.pos, &p, "a `condition` checkpoint needs `condition`".into())
                }
                _ => {}
            }
            if let (true, true, Some(id), Some(kind)) = (has_id, has_kind, id, kind) {
                if d.checkpoints.iter().any(|c| c.id == id) {
                    ctx.error(LintCode::DuplicateId, item.get("id").unwrap().pos, &ptr(&p, "id"), format!("checkpoint `{id}` is declared twice"));
                    continue;
                }
                d.checkpoints.push(Checkpoint { id, kind: kind.to_string(), required, match_tool, condition, timeout_ms });
            }
        }
    }
    // Seed 001 manifests: without `capabilities`, the tools the checkpoints match are the declared tools.
    if !caps_declared {
        for (k, c) in d.checkpoints.iter().enumerate() {
            if let Some(t) = &c.match_tool {
                if !d.capabilities.iter().any(|x| &x.name == t) {
                    let pointer = format!("/checkpoints/{k}/match/tool");
                    d.capabilities.push(Capability { name: t.clone(), tool: t.clone(), risk: Risk::Mutating, when: None, pointer });
                }
            }
        }
    }

    if let Some(c) = root.get("completion") {
        if check_fields(ctx, c, "/completion", &["condition", "receipt"], "`completion`") {
            d.completion = get_enum(
                ctx,
                c,
                "condition",
                "/completion",
                &[("final_output", CompletionCondition::FinalOutput), ("terminal", CompletionCondition::Terminal)],
            );
            d.receipt = get_bool(ctx, c, "receipt", "/completion").unwrap_or(false);
        }
    }

    if let Some(items) = list(ctx, root, "prerequisites", "") {
        for (i, item) in items.iter().enumerate() {
            let p = format!("/prerequisites/{i}");
            // The fields a prerequisite may have depend on its kind, so check `kind` first.
            if !matches!(item.value, Value::Obj(_)) {
                check_fields(ctx, item, &p, &[], "a prerequisite");
                continue;
            }
            if !require(ctx, item, "kind", &p, "a prerequisite") {
                check_fields(ctx, item, &p, &["kind", "tool", "runbook_id", "version"], "a prerequisite");
                continue;
            }
            match get_enum(ctx, item, "kind", &p, &[("tool_available", 0), ("runbook", 1)]) {
                Some(0) => {
                    check_fields(ctx, item, &p, &["kind", "tool"], "a `tool_available` prerequisite");
                    if require(ctx, item, "tool", &p, "a `tool_available` prerequisite") {
                        if let Some(t) = get_str(ctx, item, "tool", &p) {
                            d.prerequisites.push(Prerequisite::ToolAvailable(t));
                        }
                    }
                }
                Some(_) => {
                    check_fields(ctx, item, &p, &["kind", "runbook_id", "version"], "a `runbook` prerequisite");
                    let ok = require(ctx, item, "runbook_id", &p, "a `runbook` prerequisite") & require(ctx, item, "version", &p, "a `runbook` prerequisite");
                    if let (true, Some(id), Some(version)) = (ok, get_str(ctx, item, "runbook_id", &p), get_str(ctx, item, "version", &p)) {
                        if !valid_runbook_id(&id) {
                            ctx.error(
                                LintCode::InvalidId,
                                item.get("runbook_id").unwrap().pos,
                                &ptr(&p, "runbook_id"),
                                format!("`{id}` is not a valid runbook id"),
                            );
                        }
                        if !valid_semver(&version) {
                            ctx.error(
                                LintCode::InvalidId,
                                item.get("version").unwrap().pos,
                                &ptr(&p, "version"),
                                format!("`{version}` is not a semantic version such as `1.2.0`"),
                            );
                        }
                        d.prerequisites.push(Prerequisite::Runbook { id, version });
                    }
                }
                None => {
                    check_fields(ctx, item, &p, &["kind", "tool", "runbook_id", "version"], "a prerequisite");
                }
            }
        }
    }

    // Steps.
    if let Some(items) = list(ctx, root, "steps", "") {
        if items.len() > MAX_STEPS {
            ctx.error(LintCode::Limit, root.get("steps").unwrap().pos, "/steps", format!("{} steps; the limit is {MAX_STEPS}", items.len()));
        }
        for (i, item) in items.iter().enumerate().take(MAX_STEPS) {
            let p = format!("/steps/{i}");
            if !check_fields(ctx, item, &p, STEP_FIELDS, "a step") {
                continue;
            }
            if !require(ctx, item, "id", &p, "a step") {
                continue;
            }
            let Some(id) = get_str(ctx, item, "id", &p) else { continue };
            let id_node = item.get("id").unwrap();
            if !valid_step_id(&id) {
                ctx.error(LintCode::InvalidId, id_node.pos, &ptr(&p, "id"), format!("`{id}` is not a valid step id (lowercase letters, digits, `_`, `-`)"));
            }
            if a.index.contains_key(&id) {
                ctx.error(LintCode::DuplicateId, id_node.pos, &ptr(&p, "id"), format!("step `{id}` is declared twice"));
            } else {
                a.index.insert(id.clone(), d.steps.len());
            }
            let mut tools = Vec::new();
            if item.get("tool").is_some() && item.get("tools").is_some() {
                ctx.error(LintCode::ConflictingFields, item.get("tools").unwrap().pos, &ptr(&p, "tools"), "a step has `tool` or `tools`, not both".into());
            }
            if let Some(t) = get_str(ctx, item, "tool", &p) {
                tools.push(t);
            }
            if let Some(ts) = list(ctx, item, "tools", &p) {
                for (j, t) in ts.iter().enumerate() {
                    match &t.value {
                        Value::Str(s) => tools.push(s.clone()),
                        _ => ctx.error(LintCode::WrongType, t.pos, &format!("{p}/tools/{j}"), format!("a tool must be a string, found {}", t.type_name())),
                    }
                }
            }
            let risk = get_enum(ctx, item, "risk", &p, &Risk::ALL);
            let requires_approval = get_bool(ctx, item, "requires_approval", &p).unwrap_or(false);
            let body = get_str(ctx, item, "body", &p);
            let expect = get_str(ctx, item, "expect", &p);
            let assert = item.get("assert").and_then(|n| {
                let ap = ptr(&p, "assert");
                match &n.value {
                    Value::Arr(parts) if !parts.is_empty() => {
                        let preds: Vec<Pred> = parts.iter().enumerate().filter_map(|(k, x)| predicate(ctx, x, &format!("{ap}/{k}"), false)).collect();
                        (preds.len() == parts.len()).then_some(preds)
                    }
                    Value::Arr(_) => {
                        ctx.error(LintCode::InvalidPredicate, n.pos, &ap, "`assert` must hold at least one predicate".into());
                        None
                    }
                    _ => {
                        ctx.error(LintCode::WrongType, n.pos, &ap, format!("`assert` must be a list of predicates, found {}", n.type_name()));
                        None
                    }
                }
            });
            let observe = get_str(ctx, item, "observe", &p);
            let next = get_str(ctx, item, "next", &p);
            let on_fail = get_str(ctx, item, "on_fail", &p);
            let retry = item.get("retry").and_then(|r| {
                let rp = ptr(&p, "retry");
                if !check_fields(ctx, r, &rp, &["to", "max"], "`retry`") || !require(ctx, r, "max", &rp, "`retry`") {
                    return None;
                }
                let to = get_str(ctx, r, "to", &rp).unwrap_or_else(|| id.clone());
                let m = r.get("max").unwrap();
                let max = match &m.value {
                    Value::Num(n) => match n.as_u64() {
                        Some(v) if (1..=100).contains(&v) => Some(v),
                        _ => {
                            ctx.error(
                                LintCode::BudgetOutOfRange,
                                m.pos,
                                &ptr(&rp, "max"),
                                format!("`retry.max` must be a whole number from 1 to 100, found `{}`", n.canonical()),
                            );
                            None
                        }
                    },
                    _ => {
                        ctx.error(LintCode::WrongType, m.pos, &ptr(&rp, "max"), format!("`retry.max` must be a number, found {}", m.type_name()));
                        None
                    }
                };
                Some(Retry { to, max: max.unwrap_or(0) })
            });
            d.steps.push(Step { id, pos: id_node.pos, pointer: p, tools, risk, requires_approval, assert, observe, next, on_fail, retry, body, expect });
        }
    }
}

/// Parses a predicate. `in_when` applies the stricter rules for `when` (9.20).
fn predicate(ctx: &mut Ctx, node: &Node, p: &str, in_when: bool) -> Option<Pred> {
    let Value::Obj(members) = &node.value else {
        ctx.error(LintCode::InvalidPredicate, node.pos, p, format!("a predicate must be a mapping, found {}", node.type_name()));
        return None;
    };
    let combinator = ["all", "any", "not"].iter().find(|k| node.get(k).is_some()).copied();
    if let Some(k) = combinator {
        let real: Vec<&str> = members.iter().filter(|m| !m.key.starts_with("x-")).map(|m| m.key.as_str()).collect();
        if real.len() != 1 {
            ctx.error(LintCode::InvalidPredicate, node.pos, p, format!("a predicate with `{k}` has no other fields"));
            return None;
        }
        let inner = node.get(k).unwrap();
        let ip = ptr(p, k);
        if k == "not" {
            return predicate(ctx, inner, &ip, in_when).map(|x| Pred::Not(Box::new(x)));
        }
        let Value::Arr(parts) = &inner.value else {
            ctx.error(LintCode::InvalidPredicate, inner.pos, &ip, format!("`{k}` takes a list of predicates, found {}", inner.type_name()));
            return None;
        };
        if parts.is_empty() {
            ctx.error(LintCode::InvalidPredicate, inner.pos, &ip, format!("`{k}` takes at least one predicate"));
            return None;
        }
        let preds: Vec<Pred> = parts.iter().enumerate().filter_map(|(i, x)| predicate(ctx, x, &format!("{ip}/{i}"), in_when)).collect();
        if preds.len() != parts.len() {
            return None;
        }
        return Some(if k == "all" { Pred::All(preds) } else { Pred::Any(preds) });
    }
    if !check_fields(ctx, node, p, &["path", "op", "value"], "a predicate") {
        return None;
    }
    let has_path = require(ctx, node, "path", p, "a predicate");
    let has_op = require(ctx, node, "op", p, "a predicate");
    if !(has_path && has_op) {
        return None;
    }
    let path = get_str(ctx, node, "path", p)?;
    let Some(tokens) = parse_pointer(&path) else {
        ctx.error(
            LintCode::InvalidPointer,
            node.get("path").unwrap().pos,
            &ptr(p, "path"),
            format!("`{path}` is not a JSON Pointer (it starts with `/`, and `~` is written `~0` or `~1`)"),
        );
        return None;
    };
    let op = get_enum(ctx, node, "op", p, &OPS)?;
    let value = node.get("value");
    let op_pos = node.get("op").unwrap().pos;
    match (op, value) {
        (Op::Exists | Op::Absent, Some(v)) => {
            ctx.error(LintCode::InvalidPredicate, v.pos, &ptr(p, "value"), format!("`{}` takes no `value`", op.name()));
            return None;
        }
        (Op::Exists | Op::Absent, None) => {}
        (_, None) => {
            ctx.error(LintCode::InvalidPredicate, op_pos, p, format!("`{}` needs a `value`", op.name()));
            return None;
        }
        (_, Some(v)) => {
            let ok = match op {
                Op::In => matches!(v.value, Value::Arr(_)),
                Op::Matches => matches!(v.value, Value::Str(_)),
                Op::Lt | Op::Lte | Op::Gt | Op::Gte => matches!(v.value, Value::Num(_)),
                Op::LenEq | Op::LenLte | Op::LenGte => matches!(&v.value, Value::Num(n) if n.as_u64().is_some()),
                _ => true,
            };
            if !ok {
                let want = match op {
                    Op::In => "a list",
                    Op::Matches => "a string (a regular expression)",
                    Op::LenEq | Op::LenLte | Op::LenGte => "a whole number",
                    _ => "a number",
                };
                ctx.error(LintCode::InvalidPredicate, v.pos, &ptr(p, "value"), format!("`{}` compares with {want}, found {}", op.name(), v.type_name()));
                return None;
            }
        }
    }
    let mut regex = None;
    if op == Op::Matches {
        let v = value.unwrap();
        let pattern = v.as_str().unwrap_or_default();
        // In `when` a pattern grants, so it must match the whole value: besides the lint below, it is
        // compiled as `\A(?:...)\z`, so neither an alternation (`^a$|b`) nor a multi-line flag (`(?m)`)
        // can widen it past the anchors it shows.
        let source = if in_when { format!("\\A(?:{pattern})\\z") } else { pattern.to_string() };
        // The pattern must also be a regular expression on its own: `^a)|(b$` is not, but wrapped it
        // becomes `\A(?:^a)|(b$)\z`, which lets anything that starts with `a` through.
        let alone = if in_when { regex_lite::RegexBuilder::new(pattern).size_limit(1 << 20).build().err() } else { None };
        match alone.map_or_else(|| regex_lite::RegexBuilder::new(&source).size_limit(1 << 20).build(), Err) {
            Ok(r) => regex = Some(r),
            Err(e) => {
                let detail = e.to_string();
                let first = detail.lines().find(|l| l.starts_with("error")).or(detail.lines().last()).unwrap_or("");
                ctx.error(LintCode::InvalidRegex, v.pos, &ptr(p, "value"), format!("`{pattern}` is not a valid regular expression: {}", first.trim()));
                return None;
            }
        }
        if in_when && !anchored_branches(pattern) {
            ctx.error(
                LintCode::UnanchoredWhen,
                v.pos,
                &ptr(p, "value"),
                format!(
                    "a `matches` in `when` grants access, so it must be anchored at both ends: `^{}$`",
                    pattern.trim_start_matches('^').trim_end_matches('$')
                ),
            );
        }
        if in_when && crate::when::parse(pattern).is_ok_and(|hir| crate::when::flag_argument(&hir)) {
            ctx.warn(
                LintCode::FlagArgument,
                v.pos,
                &ptr(p, "value"),
                format!(
                    "`{pattern}` lets an argument start with `-`, so a call can pass a flag (`-oyaml`, `--all-namespaces`) where a name is meant; start each argument with a class without `-`, such as `[a-z0-9][a-z0-9.-]*`"
                ),
            );
        }
    }
    Some(Pred::Cmp { path, tokens, op, value: value.cloned(), regex })
}

/// Whether every top-level branch of a pattern starts with `^` and ends with an unescaped `$`, so that
/// `^a$|b` (which grants anything containing `b`) is not mistaken for an anchored pattern.
fn anchored_branches(pattern: &str) -> bool {
    let mut branches = Vec::new();
    let (mut depth, mut in_class, mut escaped, mut start) = (0i32, false, false, 0usize);
    for (i, c) in pattern.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => depth += 1,
            ')' if !in_class => depth -= 1,
            '|' if !in_class && depth == 0 => {
                branches.push(&pattern[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    branches.push(&pattern[start..]);
    branches.iter().all(|b| {
        let trailing_backslashes = b.strip_suffix('$').map(|x| x.len() - x.trim_end_matches('\\').len());
        b.starts_with('^') && trailing_backslashes.is_some_and(|n| n % 2 == 0)
    })
}

/// Derived facts and the lints that need the whole document.
fn derive(ctx: &mut Ctx, root: &Node, a: &mut Analysis) {
    let d = &a.doc;
    let cap_names: Vec<&str> = d.capabilities.iter().map(|c| c.name.as_str()).collect();
    let step_ids: Vec<&str> = d.steps.iter().map(|s| s.id.as_str()).collect();
    let route_targets: Vec<&str> = step_ids.iter().chain(d.terminals.iter().map(|t| t.as_str()).collect::<Vec<_>>().iter()).copied().collect();
    let target_set: BTreeSet<&str> = route_targets.iter().copied().collect();
    let mut cap_index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in d.capabilities.iter().enumerate() {
        cap_index.entry(c.name.as_str()).or_insert(i);
    }

    for t in &d.terminals {
        if let Some(s) = d.steps.iter().find(|s| &s.id == t) {
            ctx.error(LintCode::NameCollision, s.pos, &ptr(&s.pointer, "id"), format!("`{t}` is both a step and a terminal"));
        }
    }

    let mut undeclared = Vec::new();
    for (i, s) in d.steps.iter().enumerate() {
        let mut caps = Vec::new();
        let step_node = root.pointer(&["steps".to_string(), i.to_string()]);
        for (j, t) in s.tools.iter().enumerate() {
            match cap_index.get(t.as_str()).copied() {
                Some(ci) => {
                    if !caps.contains(&ci) {
                        caps.push(ci);
                    }
                }
                None => {
                    let (pos, p) = match step_node.and_then(|n| n.get("tool")) {
                        Some(n) if s.tools.len() == 1 && step_node.and_then(|n| n.get("tools")).is_none() => (n.pos, ptr(&s.pointer, "tool")),
                        _ => (
                            step_node.and_then(|n| n.get("tools")).and_then(|n| n.pointer(&[j.to_string()])).map(|n| n.pos).unwrap_or(s.pos),
                            format!("{}/tools/{j}", s.pointer),
                        ),
                    };
                    let hint = ctx.suggest(t, cap_names.iter().copied());
                    ctx.error(LintCode::UndeclaredTool, pos, &p, format!("step `{}` names `{t}`, which no capability declares{hint}", s.id));
                    undeclared.push((s.id.clone(), t.clone()));
                }
            }
        }
        // Document order (9.18): a call that two of the step's capabilities match is the one declared first.
        crate::sort::sort(&mut caps);
        a.step_caps.push(caps);
        let field_pos = |k: &str| step_node.and_then(|n| n.get(k)).map(|n| n.pos).unwrap_or(s.pos);
        for (k, target) in [("next", &s.next), ("on_fail", &s.on_fail)] {
            if let Some(t) = target {
                if !target_set.contains(t.as_str()) {
                    let hint = ctx.suggest(t, route_targets.iter().copied());
                    ctx.error(
                        LintCode::UnknownRoute,
                        field_pos(k),
                        &ptr(&s.pointer, k),
                        format!("`{k}` goes to `{t}`, which is neither a step nor a terminal{hint}"),
                    );
                }
            }
        }
        if let Some(r) = &s.retry {
            if !a.index.contains_key(r.to.as_str()) {
                let hint = ctx.suggest(&r.to, step_ids.iter().copied());
                let pos = step_node.and_then(|n| n.get("retry")).and_then(|n| n.get("to")).map(|n| n.pos).unwrap_or(field_pos("retry"));
                ctx.error(LintCode::UnknownRoute, pos, &format!("{}/retry/to", s.pointer), format!("`retry.to` goes to `{}`, which is not a step{hint}", r.to));
            }
        }
        let next = s.next.clone().or_else(|| d.steps.get(i + 1).map(|n| n.id.clone()));
        if next.is_none() {
            ctx.error(
                LintCode::MissingRoute,
                s.pos,
                &ptr(&s.pointer, "id"),
                format!("the last step `{}` has no `next`: name the terminal where a run ends", s.id),
            );
        }
        a.step_next.push(next);
        // Observation.
        let observe: Vec<usize> = match &s.observe {
            Some(o) => match a.step_caps[i].iter().find(|ci| d.capabilities[**ci].name == *o) {
                Some(ci) => vec![*ci],
                None => {
                    ctx.error(
                        LintCode::AmbiguousObservation,
                        field_pos("observe"),
                        &ptr(&s.pointer, "observe"),
                        format!("`observe` names `{o}`, which is not one of step `{}`'s tools", s.id),
                    );
                    Vec::new()
                }
            },
            None => {
                if s.assert.is_some() && a.step_caps[i].len() > 1 {
                    ctx.error(
                        LintCode::AmbiguousObservation,
                        field_pos("assert"),
                        &ptr(&s.pointer, "assert"),
                        format!("step `{}` has several tools: say with `observe` which one's result the `assert` judges", s.id),
                    );
                }
                a.step_caps[i].clone()
            }
        };
        a.step_observe.push(observe);
        let mut risk = s.risk.unwrap_or(Risk::ReadOnly);
        for ci in &a.step_caps[i] {
            risk = risk.max(d.capabilities[*ci].risk);
        }
        a.step_risk.push(risk);
        a.step_gated.push(s.requires_approval || risk.is_destructive());
    }
    a.undeclared = undeclared;

    if !d.steps.is_empty() {
        graph_lints(ctx, a, root);
    }

    // Risk and profiles (7.2, 7.3).
    let in_scope: Vec<Risk> = if d.steps.is_empty() { a.doc.capabilities.iter().map(|c| c.risk).collect() } else { a.step_risk.clone() };
    a.max_risk = in_scope.iter().copied().max().unwrap_or(Risk::ReadOnly);
    a.destructive = a.max_risk.is_destructive();
    a.implied_profile = if a.destructive {
        Profile::R2
    } else if a.doc.execution == Some(Execution::AgentAutonomous) {
        Profile::R1
    } else {
        Profile::R0
    };
    if let Some(declared) = a.doc.min_profile {
        let pos = root.get("min_runtime_profile").map(|n| n.pos).unwrap_or_default();
        if a.doc.execution == Some(Execution::AgentAutonomous) && declared == Profile::R0 {
            ctx.error(
                LintCode::AutonomousAtR0,
                pos,
                "/min_runtime_profile",
                "`agent-autonomous` execution cannot run at `R0`: nothing would stand between the agent and the tools".into(),
            );
        } else if declared < a.implied_profile {
            ctx.error(
                LintCode::MinProfileBelowImplied,
                pos,
                "/min_runtime_profile",
                format!("`min_runtime_profile` is `{}` but the runbook implies `{}`", declared.as_str(), a.implied_profile.as_str()),
            );
        }
    }
    shell_lints(ctx, root, a);

    // Structure (reported, never declared).
    let steps_name_tools = a.doc.steps.iter().any(|s| !s.tools.is_empty());
    let route_errors = ctx.findings.iter().any(|f| matches!(f.code, "unknown-route" | "missing-route" | "undeclared-tool"));
    let p1 = steps_name_tools && a.doc.steps.iter().all(|s| !s.tools.is_empty()) && !route_errors;
    a.structure = if !p1 {
        Structure::P0
    } else if a.doc.steps.iter().all(|s| s.assert.is_some()) {
        Structure::P2
    } else {
        Structure::P1
    };
}

/// `unconstrained-shell` (docs/spec/runbook.md#tight-conditions): a shell capability ([`crate::when::is_shell_tool`]) whose `when`
/// does not pin the command line ([`crate::when::loose`]) can run anything. That is an error, which also
/// withholds the envelope (`envelope::BLOCKING`), in a runbook with a gated step or a destructive or
/// irreversible capability, and a warning elsewhere. A `when` that did not parse has its own error
/// (`invalid-regex`, `invalid-predicate`, ...) and none here.
fn shell_lints(ctx: &mut Ctx, root: &Node, a: &Analysis) {
    use crate::when::Loose;
    let d = &a.doc;
    let strict = a.step_gated.iter().any(|g| *g) || d.capabilities.iter().any(|c| c.risk.is_destructive());
    for c in &d.capabilities {
        if !crate::when::is_shell_tool(&c.tool) {
            continue;
        }
        let node = parse_pointer(&c.pointer).and_then(|t| root.pointer(&t));
        if c.when.is_none() && node.and_then(|n| n.get("when")).is_some() {
            continue;
        }
        let Some(why) = crate::when::loose(c.when.as_ref()) else { continue };
        let (pos, pointer) = (node.map(|n| n.pos).unwrap_or_default(), c.pointer.as_str());
        let what = match &why {
            Loose::NoWhen => "has no `when`, so the agent can run any command".to_string(),
            Loose::Unpinned => "has a `when` that does not pin the command line (a way for it to pass has no `equals`, `in` or `matches` on the command argument, `/command`), so the agent can run any command".to_string(),
            Loose::Admits { pointer: at, pattern, byte } => {
                let ch = match byte {
                    b'\n' => "a newline".to_string(),
                    b'\r' => "a carriage return".to_string(),
                    0 => "NUL".to_string(),
                    b => format!("`{}`", *b as char),
                };
                format!("has a `when` pattern `{pattern}` (`{pointer}/when{at}`) that can match {ch}, so the agent can run any command")
            }
            Loose::Unreadable { pointer: at, pattern, why } => {
                format!("has a `when` pattern `{pattern}` (`{pointer}/when{at}`) that cannot be checked ({why}), so it counts as letting the agent run any command")
            }
        };
        let cap = if c.name == c.tool { format!("shell capability `{}`", c.name) } else { format!("shell capability `{}` (tool `{}`)", c.name, c.tool) };
        let fix = "pin the command with `equals`, `in`, or an anchored `matches` that admits no shell metacharacter";
        if strict {
            ctx.error(
                LintCode::UnconstrainedShell,
                pos,
                pointer,
                format!("{cap} {what}: an error in a runbook with a gated step or a destructive capability; {fix}"),
            );
        } else {
            ctx.warn(LintCode::UnconstrainedShell, pos, pointer, format!("{cap} {what}; {fix}"));
        }
    }
}

fn graph_lints(ctx: &mut Ctx, a: &Analysis, root: &Node) {
    let d = &a.doc;
    let n = d.steps.len();
    let idx = |id: &str| a.index.get(id).copied();
    let field_pos = |i: usize, k: &str| root.pointer(&["steps".to_string(), i.to_string(), k.to_string()]).map(|x| x.pos).unwrap_or(d.steps[i].pos);
    if d.terminals.is_empty() {
        let pos = root.get("steps").map(|x| x.pos).unwrap_or_default();
        ctx.error(LintCode::NoTerminal, pos, "/steps", "the runbook has steps but no `terminals`: a run must know where it may end".into());
    }
    // Unbudgeted edges: `next` and `on_fail`. A cycle made of them alone can loop forever.
    let edges: Vec<Vec<(usize, &'static str)>> = (0..n)
        .map(|i| {
            let mut e = Vec::new();
            if let Some(t) = a.step_next[i].as_deref().and_then(idx) {
                e.push((t, "next"));
            }
            if let Some(t) = d.steps[i].on_fail.as_deref().and_then(idx) {
                e.push((t, "on_fail"));
            }
            e
        })
        .collect();
    // Iterative DFS with colours; report each back edge once.
    let mut colour = vec![0u8; n];
    for s in 0..n {
        if colour[s] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(s, 0)];
        colour[s] = 1;
        while let Some((v, k)) = stack.pop() {
            if k < edges[v].len() {
                stack.push((v, k + 1));
                let (w, field) = edges[v][k];
                if colour[w] == 1 {
                    let p = if field == "next" && d.steps[v].next.is_none() { ptr(&d.steps[v].pointer, "id") } else { ptr(&d.steps[v].pointer, field) };
                    let pos = if d.steps[v].next.is_none() && field == "next" { d.steps[v].pos } else { field_pos(v, field) };
                    ctx.error(
                        LintCode::UnbudgetedCycle,
                        pos,
                        &p,
                        format!(
                            "`{field}` from `{}` back to `{}` makes a loop with no retry budget; use `retry: {{to: {}, max: N}}`",
                            d.steps[v].id, d.steps[w].id, d.steps[w].id
                        ),
                    );
                } else if colour[w] == 0 {
                    colour[w] = 1;
                    stack.push((w, 0));
                }
            } else {
                colour[v] = 2;
            }
        }
    }
    // Reachability from the first step along every route, retries included.
    let mut seen = vec![false; n];
    let mut reaches_terminal = false;
    let mut work = vec![0usize];
    seen[0] = true;
    while let Some(v) = work.pop() {
        let s = &d.steps[v];
        let targets = [a.step_next[v].as_deref(), s.on_fail.as_deref(), s.retry.as_ref().map(|r| r.to.as_str())];
        for t in targets.into_iter().flatten() {
            if a.is_terminal(t) {
                reaches_terminal = true;
            }
            if let Some(w) = idx(t) {
                if !seen[w] {
                    seen[w] = true;
                    work.push(w);
                }
            }
        }
    }
    if !d.terminals.is_empty() && !reaches_terminal {
        let pos = root.get("terminals").map(|x| x.pos).unwrap_or_default();
        ctx.error(LintCode::NoTerminal, pos, "/terminals", "no route from the first step reaches a terminal".into());
    }
    for i in 0..n {
        if !seen[i] && a.index.get(&d.steps[i].id) == Some(&i) {
            ctx.warn(LintCode::UnreachableStep, d.steps[i].pos, &ptr(&d.steps[i].pointer, "id"), format!("no route reaches step `{}`", d.steps[i].id));
        }
    }
}
