//! The bytes of a run bundle (docs/spec/bundle.md and docs/spec/README.md#architecture): every file of a bundle but the document's own bytes is
//! composed here, from facts the host passes in (the run id, times, the working directory's git state, the
//! host's name and version, the hashes of files it wrote). A host carries out the returned [`Effect`]s in
//! order (create the directory, write a file atomically, append a whole record, sign) and composes
//! nothing, so every host writes the same bundle, byte for byte.
//!
//! Paths in effects are relative to the runs root (`latest.json`, `history.ndjson`, `<run-id>/run.json`).
//! `run.json` and `latest.json` are pretty-printed with sorted keys (two-space indent, a final newline);
//! history, signature and shadow lines are compact JSON with sorted keys and a newline; the receipt is
//! RFC 8785. Numbers are written as the host wrote them (facts hold only counts).

use crate::doc::sha256_hex;
use crate::jcs::{self, arr, b, null, obj, s};
use crate::json;
use crate::value::{Member, Node, Pos, Value};

pub const RUN_SCHEMA: &str = "runbook-run-bundle/v1";
pub const RECEIPT_SCHEMA: &str = "runbook-receipt/v1";
pub const LATEST_SCHEMA: &str = "runbook-latest-run/v1";
pub const HISTORY_SCHEMA: &str = "runbook-run-history-entry/v1";
pub const SIGNATURES: &str = "signatures.ndjson";
pub const SHADOW: &str = "shadow.ndjson";
pub const TRAFFIC: &str = "traffic.ndjson";
pub const RECEIPT_SIGNATURE: &str = "receipt.dsse.json";
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const RECEIPT_PREDICATE: &str = "urn:runbook-host:receipt:v1";

/// What a host does with an effect's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Create the directory `path` (a new run's); an existing one is an error.
    CreateDir,
    /// Replace the file atomically (a temporary file, fsync, rename).
    Write,
    /// Append the bytes as one whole record and fsync (create the file when missing).
    Append,
    /// Sign the bytes (an in-toto Statement) with the host's receipt key and write the DSSE envelope at
    /// `path`.
    Sign,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effect {
    pub op: Op,
    pub path: String,
    pub bytes: Vec<u8>,
}

fn write(path: String, bytes: impl Into<Vec<u8>>) -> Effect {
    Effect { op: Op::Write, path, bytes: bytes.into() }
}

fn append(path: String, bytes: impl Into<Vec<u8>>) -> Effect {
    Effect { op: Op::Append, path, bytes: bytes.into() }
}

// ---------------------------------------------------------------------------------------------------
// Serialization: serde_json's `to_string_pretty` and `to_string` of a map with sorted keys.

/// Pretty JSON with keys in byte order, two-space indent, and a newline.
pub fn pretty(node: &Node) -> String {
    let mut out = String::new();
    write_pretty(node, 0, &mut out);
    out.push('\n');
    out
}

fn sorted(members: &[Member]) -> Vec<&Member> {
    let mut v: Vec<&Member> = members.iter().collect();
    crate::sort::sort_by(&mut v, |a, b| a.key.as_bytes().cmp(b.key.as_bytes()));
    v
}

fn write_pretty(node: &Node, indent: usize, out: &mut String) {
    let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
    match &node.value {
        Value::Obj(m) if !m.is_empty() => {
            out.push_str("{\n");
            for (i, m) in sorted(m).into_iter().enumerate() {
                if i > 0 {
                    out.push_str(",\n");
                }
                pad(out, indent + 2);
                jcs::write_str(&m.key, out);
                out.push_str(": ");
                write_pretty(&m.value, indent + 2, out);
            }
            out.push('\n');
            pad(out, indent);
            out.push('}');
        }
        Value::Arr(items) if !items.is_empty() => {
            out.push_str("[\n");
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(",\n");
                }
                pad(out, indent + 2);
                write_pretty(it, indent + 2, out);
            }
            out.push('\n');
            pad(out, indent);
            out.push(']');
        }
        _ => write_compact(node, out),
    }
}

/// Compact JSON with keys in byte order (numbers as written).
pub fn compact(node: &Node) -> String {
    let mut out = String::new();
    write_compact(node, &mut out);
    out
}

fn write_compact(node: &Node, out: &mut String) {
    match &node.value {
        Value::Obj(m) => {
            out.push('{');
            for (i, m) in sorted(m).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                jcs::write_str(&m.key, out);
                out.push(':');
                write_compact(&m.value, out);
            }
            out.push('}');
        }
        Value::Arr(items) => {
            out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_compact(it, out);
            }
            out.push(']');
        }
        Value::Num(n) => out.push_str(n.inexact_text().unwrap_or(n.canonical())),
        _ => jcs::write(node, out),
    }
}

fn line(node: &Node) -> String {
    let mut l = compact(node);
    l.push('\n');
    l
}

// ---------------------------------------------------------------------------------------------------
// events.ndjson.

/// The text stored under a key of an `events.ndjson` record: the line itself when it is one JSON object
/// (the module's parser, no duplicate keys) without a newline, else the JSON string holding the line.
pub fn embed(raw: &str, out: &mut String) {
    if is_object_line(raw) {
        out.push_str(raw);
    } else {
        jcs::write_str(raw, out);
    }
}

fn is_object_line(raw: &str) -> bool {
    raw.len() <= crate::event::MAX_EVENT_BYTES && raw.trim_start().starts_with('{') && !raw.contains('\n') && {
        let p = json::parse(raw);
        p.issues.is_empty() && p.node.is_some_and(|n| matches!(n.value, Value::Obj(_)))
    }
}

/// One record of `events.ndjson`: `{"h":..,"decision":..,"event":..}` and a newline. `event_is_object`
/// says the caller already knows the event line is one JSON object (the module wrote or parsed it).
pub fn record_line(link: &str, event_line: &str, decision_line: &str, event_is_object: Option<bool>) -> String {
    let mut out = String::with_capacity(event_line.len() + decision_line.len() + 96);
    out.push_str("{\"h\":\"");
    out.push_str(link);
    out.push_str("\",\"decision\":");
    // The module's own canonical line: always one object.
    out.push_str(decision_line);
    out.push_str(",\"event\":");
    match event_is_object {
        Some(true) if !event_line.contains('\n') => out.push_str(event_line),
        Some(_) => jcs::write_str(event_line, &mut out),
        None => embed(event_line, &mut out),
    }
    out.push_str("}\n");
    out
}

// ---------------------------------------------------------------------------------------------------
// Small rules every host shares.

/// The file name a document is stored under, by content: `runbook.json` when its first byte that is not
/// ASCII white space (after a UTF-8 BOM) is `{`, else `runbook.yaml`.
pub fn document_file(document: &[u8]) -> &'static str {
    let b = document.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(document);
    if b.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'{') {
        "runbook.json"
    } else {
        "runbook.yaml"
    }
}

/// The chain's `h0` (docs/spec/bundle.md#the-hash-chain): the sha256 of the document's envelope, or of the document when it has
/// none.
pub fn chain_h0(document: &[u8]) -> String {
    h0_of(&crate::doc::analysis_of(document)).to_string()
}

/// [`chain_h0`] of an analysis: the one statement of the rule, for `bundle-create`, resume and verify.
pub fn h0_of(a: &crate::doc::Analysis) -> &str {
    a.envelope_sha256().unwrap_or(&a.sha256)
}

/// The resume path's first check (WIT `session.chain-start`, docs/spec/bundle.md#resuming-a-run): that
/// `run_json` is a run of the analysed document (its `document.sha256` is the document's, its `chain_h0`
/// the chain's start derived from the document) and, with a `pin` kept out of the agent's reach when the
/// run began (the document's sha256, `h0`), that it names the same two. `h0`, or the file and why not.
pub fn chain_start(a: &crate::doc::Analysis, run_json: &str, pin: Option<(&str, &str)>) -> Result<String, (String, String)> {
    let m = json::parse(run_json).node.filter(|n| matches!(n.value, Value::Obj(_)));
    let Some(m) = m else {
        return Err(("run.json".into(), "is not a JSON object".into()));
    };
    let at = |path: &[&str]| path.iter().try_fold(&m, |n, k| n.get(k)).and_then(Node::as_str);
    let Some(doc_file) = at(&["artifacts", "document"]).filter(|f| matches!(*f, "runbook.yaml" | "runbook.json")) else {
        return Err(("run.json".into(), "`artifacts.document` is not runbook.yaml or runbook.json".into()));
    };
    if at(&["document", "sha256"]) != Some(a.sha256.as_str()) {
        return Err((doc_file.into(), "the document's sha256 is not run.json's".into()));
    }
    let h0 = h0_of(a);
    if at(&["chain_h0"]) != Some(h0) {
        return Err(("run.json".into(), format!("chain_h0 is not the digest of its document's envelope ({h0})")));
    }
    if let Some((doc_sha, pinned_h0)) = pin {
        if doc_sha != a.sha256 || pinned_h0 != h0 {
            return Err((doc_file.into(), format!("the document is not the one pinned when the run began (sha256 {}, pinned {doc_sha})", a.sha256)));
        }
    }
    Ok(h0.to_string())
}

/// A reference as a bundle may hold it: `id@version` as is, a file by its last path component only (no
/// absolute path is ever written into a bundle).
pub fn public_reference(reference: &str) -> String {
    if reference.contains('/') || reference.contains('\\') {
        reference.replace('\\', "/").trim_end_matches('/').rsplit('/').next().unwrap_or("").to_string()
    } else {
        reference.to_string()
    }
}

/// What an adapter sees, as published in `run.json` (its exact blind spots come from the `start` claim).
pub fn adapter_sees(adapter: &str) -> &'static str {
    match adapter {
        "mcp-proxy" => "MCP tool calls only",
        "hook" => "every tool invocation of the agent CLI, shell included",
        "library" => "what the embedding client feeds",
        "claude-agent-sdk" => "every tool call the Claude Agent SDK's agent loop sends through its hooks",
        "pydantic-ai" => "tool calls through the wrapped toolsets of a Pydantic AI agent",
        "openai-agents" => "tool calls through the wrapped function tools of an OpenAI Agents SDK agent",
        "langgraph" => "tool calls through the wrapped tools of a LangGraph graph",
        "google-adk" => "tool calls of a Google ADK agent through its tool callbacks",
        "ai-sdk" => "tool calls through the wrapped tools of a Vercel AI SDK call",
        "replay" => "a recorded event stream",
        _ => "unknown",
    }
}

/// Whether `name` is a safe single path component for an id (run id, approval id): ASCII letters, digits,
/// `.`, `_`, `-`, not starting with `.`, at most 128 bytes.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 128 && !name.starts_with('.') && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The guard's matching rule (docs/spec/run.md#guarded-calls): whether the tool name, or any string of the arguments (an
/// object's keys included), contains one of `needles`. Arguments that are not JSON are matched as text.
pub fn guard_names(tool: &str, arguments: &str, needles: &[String]) -> bool {
    match json::parse(arguments).node {
        Some(n) => names_any(tool, &n, needles),
        None => needles.iter().any(|n| !n.is_empty() && (tool.contains(n.as_str()) || arguments.contains(n.as_str()))),
    }
}

/// [`guard_names`] of parsed arguments (what a session with needles applies to every typed `invoke`).
pub fn names_any(tool: &str, arguments: &Node, needles: &[String]) -> bool {
    fn any(v: &Node, hit: &dyn Fn(&str) -> bool) -> bool {
        match &v.value {
            Value::Str(s) => hit(s),
            Value::Arr(a) => a.iter().any(|x| any(x, hit)),
            Value::Obj(o) => o.iter().any(|m| hit(&m.key) || any(&m.value, hit)),
            _ => false,
        }
    }
    let hit = |s: &str| needles.iter().any(|n| !n.is_empty() && s.contains(n.as_str()));
    hit(tool) || any(arguments, &hit)
}

/// The working directory's git state as counts only (never a branch, a file name or a path), from the
/// exit code of `git status --porcelain=v1 -z` (None: it did not run or did not finish) and its output.
pub fn git_state(exit_code: Option<i32>, porcelain: &[u8]) -> String {
    let node = match exit_code {
        Some(0) => {
            let (mut staged, mut unstaged, mut untracked, mut total) = (0u64, 0u64, 0u64, 0u64);
            let mut fields = porcelain.split(|b| *b == 0).filter(|f| !f.is_empty());
            while let Some(f) = fields.next() {
                if f.len() < 3 {
                    continue;
                }
                let (x, y) = (f[0], f[1]);
                total += 1;
                if x == b'?' {
                    untracked += 1;
                    continue;
                }
                if x != b' ' {
                    staged += 1;
                }
                if y != b' ' {
                    unstaged += 1;
                }
                if x == b'R' || x == b'C' {
                    fields.next(); // the rename's source
                }
            }
            obj(vec![
                ("status", s(if total == 0 { "clean" } else { "dirty" })),
                ("staged", jcs::n(staged)),
                ("unstaged", jcs::n(unstaged)),
                ("untracked", jcs::n(untracked)),
                ("total", jcs::n(total)),
            ])
        }
        Some(128) => obj(vec![("status", s("not-a-checkout"))]),
        _ => obj(vec![("status", s("unavailable"))]),
    };
    compact(&node)
}

/// Unix milliseconds as UTC RFC 3339 with milliseconds (`2026-11-30T12:34:56.789Z`), proleptic
/// Gregorian (the civil-from-days algorithm), so every host writes a time alike.
pub fn rfc3339_ms(ms: u64) -> String {
    let (secs, milli) = (ms / 1000, ms % 1000);
    let (days, sod) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

// ---------------------------------------------------------------------------------------------------
// Facts.

struct Facts(Node);

impl Facts {
    fn parse(what: &str, text: &str) -> Result<Facts, String> {
        let p = json::parse(text);
        match (p.node, p.issues.first()) {
            (Some(n @ Node { value: Value::Obj(_), .. }), None) => Ok(Facts(n)),
            (_, Some(i)) => Err(format!("{what}: {} at line {}, column {}", i.message, i.pos.line, i.pos.column)),
            _ => Err(format!("{what}: not a JSON object")),
        }
    }

    fn get(&self, key: &str) -> Option<&Node> {
        self.0.get(key).filter(|n| !matches!(n.value, Value::Null))
    }

    fn str(&self, what: &str, key: &str) -> Result<&str, String> {
        match self.get(key).map(|n| &n.value) {
            Some(Value::Str(v)) => Ok(v),
            _ => Err(format!("{what}: `{key}` must be a string")),
        }
    }

    /// A time fact: Unix milliseconds, written into the bundle as UTC RFC 3339 with milliseconds.
    fn at(&self, what: &str, key: &str) -> Result<String, String> {
        match self.get(key).map(|n| &n.value) {
            Some(Value::Num(n)) => n.as_u64().map(rfc3339_ms).ok_or_else(|| format!("{what}: `{key}` must be Unix milliseconds")),
            _ => Err(format!("{what}: `{key}` must be Unix milliseconds")),
        }
    }

    fn opt_str(&self, what: &str, key: &str) -> Result<Option<&str>, String> {
        match self.get(key).map(|n| &n.value) {
            None => Ok(None),
            Some(Value::Str(v)) => Ok(Some(v)),
            _ => Err(format!("{what}: `{key}` must be a string or null")),
        }
    }

    /// A member passed through as given (an object or null).
    fn object_or_null(&self, what: &str, key: &str) -> Result<Node, String> {
        match self.get(key) {
            None => Ok(null()),
            Some(n @ Node { value: Value::Obj(_), .. }) => Ok(n.clone()),
            Some(_) => Err(format!("{what}: `{key}` must be an object or null")),
        }
    }
}

fn set(node: &mut Node, key: &str, value: Node) {
    if let Value::Obj(members) = &mut node.value {
        match members.iter_mut().find(|m| m.key == key) {
            Some(m) => m.value = value,
            None => members.push(Member { key: key.to_string(), key_pos: Pos::default(), value }),
        }
    }
}

fn receipt_key(what: &str, k: &Node) -> Result<Node, String> {
    let f = Facts(k.clone());
    Ok(obj(vec![("file", s(RECEIPT_SIGNATURE)), ("key_id", s(f.str(what, "key_id")?)), ("public_key", s(f.str(what, "public_key")?))]))
}

fn latest(run_id: &str, at: &str) -> Node {
    obj(vec![("schema", s(LATEST_SCHEMA)), ("run_id", s(run_id)), ("path", s(run_id)), ("updated_at", s(at))])
}

// ---------------------------------------------------------------------------------------------------
// The bundle's life: create, change, end.

/// A new run's bundle. `facts`: `{run_id, at, reference, trust, pinned_sha256?, provenance?, module_sha256,
/// host: {name, version}, adapter, git, shadow?, receipt_key?: {key_id, public_key}}`. The effects create
/// `<run_id>/` with the document's bytes, `envelope.json` (when the document has one), an empty
/// `events.ndjson` (and `shadow.ndjson` for a shadow run), `run.json`, then point `latest.json` at the run
/// and append its `created` line to `history.ndjson`.
pub fn create(document: &[u8], facts: &str) -> Result<Vec<Effect>, String> {
    const W: &str = "bundle facts";
    let f = Facts::parse(W, facts)?;
    let run_id = f.str(W, "run_id")?;
    if !is_safe_name(run_id) {
        return Err(format!("{W}: `{run_id}` is not a usable run id"));
    }
    let at = &f.at(W, "at")?;
    let reference = public_reference(f.str(W, "reference")?);
    let trust = f.str(W, "trust")?;
    let adapter = f.str(W, "adapter")?;
    let module_sha256 = f.str(W, "module_sha256")?;
    let host = Facts(f.object_or_null(W, "host")?);
    let (host_name, host_version) = (host.str("bundle facts host", "name")?, host.str("bundle facts host", "version")?);
    let git = f.object_or_null(W, "git")?;
    let provenance = f.object_or_null(W, "provenance")?;
    let pinned = f.opt_str(W, "pinned_sha256")?;
    let shadow = matches!(f.get("shadow").map(|n| &n.value), Some(Value::Bool(true)));

    let doc_file = document_file(document);
    // The memoised analysis: its sha256, envelope and the envelope's sha256 are derived once per document.
    let a = crate::doc::analysis_of(document);
    let sha = a.sha256.clone();
    let envelope = a.envelope_text();
    // The envelope's `document.runbook_id` and `document.version` (docs/spec/envelope.md), or null without one.
    let (runbook_id, version) = match envelope {
        Some(_) => (jcs::opt_s(a.doc.runbook_id.as_deref()), jcs::opt_s(a.doc.version.as_deref())),
        None => (null(), null()),
    };
    let envelope_sha = a.envelope_sha256().map(str::to_string);
    let h0 = h0_of(&a).to_string();

    let mut manifest = obj(vec![
        ("schema", s(RUN_SCHEMA)),
        ("run_id", s(run_id)),
        (
            "artifacts",
            obj(vec![
                ("run", s("run.json")),
                ("document", s(doc_file)),
                ("envelope", if envelope.is_some() { s("envelope.json") } else { null() }),
                ("events", s("events.ndjson")),
                ("report", s("report.json")),
                ("receipt", s("receipt.json")),
            ]),
        ),
        ("channels", obj(vec![("pending", s("pending")), ("approvals", s("approvals")), ("consumed", s("consumed"))])),
        (
            "document",
            obj(vec![
                ("reference", s(&reference)),
                ("trust", s(trust)),
                ("sha256", s(&sha)),
                ("pinned_sha256", jcs::opt_s(pinned)),
                ("file", s(doc_file)),
                ("runbook_id", runbook_id),
                ("version", version),
                ("provenance", provenance),
            ]),
        ),
        ("envelope_sha256", jcs::opt_s(envelope_sha.as_deref())),
        ("chain_h0", s(&h0)),
        ("module_sha256", s(module_sha256)),
        ("host", obj(vec![("name", s(host_name)), ("version", s(host_version))])),
        ("adapter", obj(vec![("name", s(adapter)), ("sees", s(adapter_sees(adapter))), ("coverage", null())])),
        ("lifecycle", arr(vec![obj(vec![("event", s("created")), ("at", s(at))])])),
        ("outcome", null()),
        ("source", obj(vec![("git", git)])),
    ]);
    if let Some(k) = f.get("receipt_key") {
        set(&mut manifest, "receipt_signature", receipt_key("bundle facts receipt_key", k)?);
    }
    if shadow {
        set(&mut manifest, "mode", s("shadow"));
    }

    let dir = |name: &str| format!("{run_id}/{name}");
    let mut out = vec![Effect { op: Op::CreateDir, path: run_id.to_string(), bytes: Vec::new() }, write(dir(doc_file), document)];
    if let Some(e) = &envelope {
        out.push(write(dir("envelope.json"), e.as_bytes()));
    }
    out.push(write(dir("events.ndjson"), Vec::new()));
    if shadow {
        out.push(write(dir(SHADOW), Vec::new()));
    }
    out.push(write(dir("run.json"), pretty(&manifest)));
    out.push(write("latest.json".into(), pretty(&latest(run_id, at))));
    let history = obj(vec![
        ("schema", s(HISTORY_SCHEMA)),
        ("event", s("created")),
        ("run_id", s(run_id)),
        ("at", s(at)),
        ("path", s(run_id)),
        ("reference", s(&reference)),
        ("trust", s(trust)),
        ("adapter", s(adapter)),
    ]);
    out.push(append("history.ndjson".into(), line(&history)));
    Ok(out)
}

fn parse_manifest(manifest: &str) -> Result<(Node, String), String> {
    let m = Facts::parse("run.json", manifest)?;
    if m.str("run.json", "schema")? != RUN_SCHEMA {
        return Err(format!("run.json: `schema` is not {RUN_SCHEMA}"));
    }
    let run_id = m.str("run.json", "run_id")?.to_string();
    if !is_safe_name(&run_id) {
        return Err(format!("run.json: `{run_id}` is not a usable run id"));
    }
    Ok((m.0, run_id))
}

fn push_lifecycle(manifest: &mut Node, event: &str, at: &str) {
    if let Value::Obj(members) = &mut manifest.value {
        if let Some(Member { value: Node { value: Value::Arr(l), .. }, .. }) = members.iter_mut().find(|m| m.key == "lifecycle") {
            l.push(obj(vec![("event", s(event)), ("at", s(at))]));
        }
    }
}

/// One change to a bundle's `run.json` (`manifest`, its bytes as last written). `change` is one of
/// `{"lifecycle": "admitted"|"refused", "at", "start"?: <the start event line, whose coverage run.json
/// publishes>}`, `{"approvals_signed": <allowed signers' sha256>}`, `{"receipt_key": {key_id, public_key}}`,
/// `{"shadow": true}`.
pub fn change(manifest: &str, change: &str) -> Result<Vec<Effect>, String> {
    const W: &str = "bundle change";
    let (mut m, run_id) = parse_manifest(manifest)?;
    let c = Facts::parse(W, change)?;
    let mut out = Vec::new();
    if let Some(event) = c.opt_str(W, "lifecycle")? {
        if !matches!(event, "admitted" | "refused") {
            return Err(format!("{W}: `lifecycle` must be admitted or refused"));
        }
        if let Some(start) = c.opt_str(W, "start")? {
            let start = json::parse(start).node.filter(|n| n.get("type").is_some_and(|t| matches!(&t.value, Value::Str(v) if v == "start")));
            let coverage = start.and_then(|n| n.get("coverage").cloned()).unwrap_or_else(null);
            if let Some(Node { value: Value::Obj(a), .. }) = m.get("adapter").cloned() {
                let mut a = Node::new(Value::Obj(a));
                set(&mut a, "coverage", coverage);
                set(&mut m, "adapter", a);
            }
        }
        push_lifecycle(&mut m, event, &c.at(W, "at")?);
    } else if let Some(sha) = c.opt_str(W, "approvals_signed")? {
        set(&mut m, "approvals", obj(vec![("signed", b(true)), ("allowed_signers_sha256", s(sha))]));
    } else if let Some(k) = c.get("receipt_key") {
        set(&mut m, "receipt_signature", receipt_key("bundle change receipt_key", k)?);
    } else if matches!(c.get("shadow").map(|n| &n.value), Some(Value::Bool(true))) {
        if m.get("mode").is_none() {
            out.push(write(format!("{run_id}/{SHADOW}"), Vec::new()));
        }
        set(&mut m, "mode", s("shadow"));
    } else {
        return Err(format!("{W}: no change this module knows"));
    }
    out.push(write(format!("{run_id}/run.json"), pretty(&m)));
    Ok(out)
}

/// The end of a run. `report`: the module's report (None: the run ends without one, e.g. the module
/// trapped; `facts.ended_without_report` names why). `facts`: `{at, chain_head, hashes: {<file>: sha256}
/// (the document, `envelope.json`, `events.ndjson` and, when present, `signatures.ndjson` and
/// `shadow.ndjson`, as the host wrote them), latest?: <latest.json's text>, ended_without_report?}`. The
/// effects write `report.json`, `run.json` (ended, outcome), `receipt.json` (pinning every other file),
/// the receipt's signature when run.json names a key, `latest.json` when it still names this run, and the
/// `ended` line of `history.ndjson`.
pub fn end(manifest: &str, report: Option<&str>, facts: &str) -> Result<Vec<Effect>, String> {
    const W: &str = "bundle end facts";
    let (mut m, run_id) = parse_manifest(manifest)?;
    if m.get("outcome").is_some_and(|o| !matches!(o.value, Value::Null)) || m.get("ended_without_report").is_some() {
        return Err("run.json: the run has already ended".into());
    }
    let f = Facts::parse(W, facts)?;
    let at = &f.at(W, "at")?;
    let dir = |name: &str| format!("{run_id}/{name}");
    let mut out = Vec::new();
    push_lifecycle(&mut m, "ended", at);
    let mut history = obj(vec![("schema", s(HISTORY_SCHEMA)), ("event", s("ended")), ("run_id", s(&run_id)), ("at", s(at)), ("path", s(&run_id))]);
    match report {
        Some(report) => {
            let r = Facts::parse("the report", report)?;
            let outcome = r.get("outcome").cloned().unwrap_or_else(null);
            set(&mut m, "outcome", outcome.clone());
            let run_json = pretty(&m);
            let hashes = Facts(f.object_or_null(W, "hashes")?);
            let receipt = receipt_of(&m, &run_json, report, &r.0, f.str(W, "chain_head")?, &hashes)?;
            let (host, module_sha256) = (m.get("host").cloned().unwrap_or_else(null), m.get("module_sha256").cloned().unwrap_or_else(null));
            out.push(write(dir("report.json"), report.as_bytes()));
            out.push(write(dir("run.json"), run_json));
            if m.get("receipt_signature").is_some() {
                let predicate =
                    obj(vec![("run_id", s(&run_id)), ("outcome", outcome.clone()), ("host", host), ("module_sha256", module_sha256), ("signed_at", s(at))]);
                let mut st = String::from("{\"_type\":");
                jcs::write_str(STATEMENT_TYPE, &mut st);
                st.push_str(",\"subject\":[");
                for (i, (name, sha)) in [("receipt.json", sha256_hex(receipt.as_bytes())), ("report.json", sha256_hex(report.as_bytes()))].iter().enumerate() {
                    if i > 0 {
                        st.push(',');
                    }
                    st.push_str("{\"name\":");
                    jcs::write_str(name, &mut st);
                    st.push_str(",\"digest\":{\"sha256\":");
                    jcs::write_str(sha, &mut st);
                    st.push_str("}}");
                }
                st.push_str("],\"predicateType\":");
                jcs::write_str(RECEIPT_PREDICATE, &mut st);
                st.push_str(",\"predicate\":");
                st.push_str(&compact(&predicate));
                st.push('}');
                out.push(write(dir("receipt.json"), receipt));
                out.push(Effect { op: Op::Sign, path: dir(RECEIPT_SIGNATURE), bytes: st.into_bytes() });
            } else {
                out.push(write(dir("receipt.json"), receipt));
            }
            set(&mut history, "outcome", outcome);
        }
        None => {
            let code = f.str(W, "ended_without_report")?;
            set(&mut m, "ended_without_report", s(code));
            out.push(write(dir("run.json"), pretty(&m)));
            set(&mut history, "outcome", null());
            set(&mut history, "ended_without_report", s(code));
        }
    }
    let latest_names_me = f
        .opt_str(W, "latest")?
        .and_then(|t| json::parse(t).node)
        .and_then(|n| n.get("run_id").cloned())
        .is_some_and(|id| matches!(&id.value, Value::Str(v) if *v == run_id));
    if latest_names_me {
        out.push(write("latest.json".into(), pretty(&latest(&run_id, at))));
    }
    out.push(append("history.ndjson".into(), line(&history)));
    Ok(out)
}

/// `receipt.json` (RFC 8785) of an ended run: `manifest` is the final `run.json` (`run_json` its text),
/// `hashes` the sha256 of the bundle's other files as written.
fn receipt_of(manifest: &Node, run_json: &str, report: &str, report_node: &Node, chain_head: &str, hashes: &Facts) -> Result<String, String> {
    const H: &str = "receipt hashes";
    let doc_file = match manifest.get("artifacts").and_then(|a| a.get("document")).map(|d| &d.value) {
        Some(Value::Str(v)) => v.clone(),
        _ => return Err("run.json names no document".into()),
    };
    let mut artifacts = vec![("run.json".to_string(), s(&sha256_hex(run_json.as_bytes()))), ("report.json".to_string(), s(&sha256_hex(report.as_bytes())))];
    let has_envelope = manifest.get("artifacts").and_then(|a| a.get("envelope")).is_some_and(|e| matches!(e.value, Value::Str(_)));
    let mut required = vec![doc_file.as_str(), "events.ndjson"];
    if has_envelope {
        required.push("envelope.json");
    }
    for name in required {
        artifacts.push((name.to_string(), s(hashes.str(H, name)?)));
    }
    for name in [SIGNATURES, SHADOW, TRAFFIC] {
        if let Some(h) = hashes.opt_str(H, name)? {
            artifacts.push((name.to_string(), s(h)));
        }
    }
    let receipt = obj(vec![
        ("artifacts", jcs::obj_owned(artifacts)),
        ("chain_head", s(chain_head)),
        ("host", manifest.get("host").cloned().unwrap_or_else(null)),
        ("module_sha256", manifest.get("module_sha256").cloned().unwrap_or_else(null)),
        ("report", report_node.clone()),
        ("report_sha256", s(&sha256_hex(report.as_bytes()))),
        ("schema", s(RECEIPT_SCHEMA)),
    ]);
    Ok(jcs::to_string_record(&receipt))
}

/// `verify`'s check of a receipt (docs/spec/bundle.md#what-verify-checks): whether `receipt` is, byte for byte, the receipt the module
/// writes for this `run.json` (its final text), `report`, chain head and the hashes of the other files as
/// found (`{<file>: sha256}`). The error says what differs.
pub fn check_receipt(run_json: &str, report: &str, chain_head: &str, hashes: &str, receipt: &str) -> Result<(), String> {
    let m = Facts::parse("run.json", run_json)?;
    let r = Facts::parse("report.json", report)?;
    let h = Facts::parse("receipt hashes", hashes)?;
    let want = receipt_of(&m.0, run_json, report, &r.0, chain_head, &h)?;
    if want == receipt {
        return Ok(());
    }
    let got = json::parse(receipt).node.ok_or("receipt.json is not JSON")?;
    let want_node = json::parse(&want).node.ok_or("the module's receipt is not JSON")?;
    for key in ["schema", "host", "module_sha256", "report_sha256", "report", "chain_head", "artifacts"] {
        let (a, b) = (want_node.get(key).map(jcs::to_string), got.get(key).map(jcs::to_string));
        if a != b {
            return Err(format!("`{key}` is not what this bundle's files give ({})", a.unwrap_or_default()));
        }
    }
    Err("receipt.json is not in its one canonical form (RFC 8785) or holds other members".into())
}

/// One line of `signatures.ndjson`: a signed answer to one approval request (docs/spec/run.md#approvals-bound-to-a-call).
pub fn signature_line(seq: u64, request: u64, channel_id: &str, message: &str, signature: &str, principal: &str, fingerprint: &str) -> String {
    line(&obj(vec![
        ("seq", jcs::n(seq)),
        ("request", jcs::n(request)),
        ("channel_id", s(channel_id)),
        ("message", s(message)),
        ("signature", s(signature)),
        ("principal", s(principal)),
        ("fingerprint", s(fingerprint)),
    ]))
}

/// One line of `shadow.ndjson`: a call of a shadow run forwarded although the module did not allow it.
pub fn shadow_line(seq: u64, tool: &str, call_sha256: &str, decision: &str) -> String {
    line(&obj(vec![("seq", jcs::n(seq)), ("tool", s(tool)), ("call_sha256", s(call_sha256)), ("decision", s(decision)), ("forwarded", b(true))]))
}

/// The members of a `traffic.ndjson` line, in byte order.
pub const TRAFFIC_KEYS: [&str; 9] = ["answer_sha256", "at", "direction", "error_code", "link", "method", "n", "params_sha256", "server"];

/// The link of a `traffic.ndjson` line (docs/spec/adapters.md#mcp-beyond-tools): `sha256(prev || JCS(the line without its link))`,
/// `prev` the previous line's link, or run.json's `chain_h0` for the first line.
pub fn traffic_link(prev: &str, unlinked: &Node) -> String {
    let mut text = String::from(prev);
    text.push_str(&jcs::to_string(unlinked));
    sha256_hex(text.as_bytes())
}

/// One line of `traffic.ndjson` and its link: MCP traffic besides tool calls that a proxy passed on and
/// the module does not decide (a resource read, a prompt, a completion, a log level, a server's sampling,
/// elicitation or roots request to the client). `entry`: `{n, at, direction: "to-server"|"to-client",
/// server: <name>|null, method, params: <any JSON>, answer?: <any JSON>, error_code?: <integer>}`. The line
/// holds digests, never the content: `params_sha256` and `answer_sha256` (null when the request failed)
/// are the hex sha256 of their JCS, so the file is safe to share and a holder of the content can show
/// which it was; the lines chain (`link`), so none can be dropped or reordered unseen.
pub fn traffic_line(prev: &str, entry: &str) -> Result<(String, String), String> {
    const W: &str = "traffic entry";
    let f = Facts::parse(W, entry)?;
    let count = |key: &str| match f.get(key).map(|n| &n.value) {
        Some(Value::Num(x)) => x.as_u64().ok_or_else(|| format!("{W}: `{key}` must be a non-negative integer")),
        _ => Err(format!("{W}: `{key}` must be a non-negative integer")),
    };
    let direction = f.str(W, "direction")?;
    if !matches!(direction, "to-server" | "to-client") {
        return Err(format!("{W}: `direction` must be \"to-server\" or \"to-client\""));
    }
    let params = f.0.get("params").ok_or_else(|| format!("{W}: `params` is missing"))?;
    let error_code = match f.get("error_code").map(|n| &n.value) {
        None => null(),
        // An integer (JSON-RPC codes are negative): its canonical text has no fraction or exponent.
        Some(Value::Num(x)) if x.canonical().trim_start_matches('-').bytes().all(|c| c.is_ascii_digit()) => f.get("error_code").cloned().unwrap_or_else(null),
        Some(_) => return Err(format!("{W}: `error_code` must be an integer")),
    };
    // An answer may itself be null (an empty result), so its presence is what counts.
    let answer = match (f.0.get("answer"), is_null_node(&error_code)) {
        (Some(a), true) => s(&crate::chain::value_digest(a)),
        (None, false) => null(),
        _ => return Err(format!("{W}: exactly one of `answer` and `error_code`")),
    };
    let unlinked = obj(vec![
        ("answer_sha256", answer),
        ("at", jcs::n(count("at")?)),
        ("direction", s(direction)),
        ("error_code", error_code),
        ("method", s(f.str(W, "method")?)),
        ("n", jcs::n(count("n")?)),
        ("params_sha256", s(&crate::chain::value_digest(params))),
        ("server", f.opt_str(W, "server")?.map(s).unwrap_or_else(null)),
    ]);
    let link = traffic_link(prev, &unlinked);
    let mut linked = unlinked;
    set(&mut linked, "link", s(&link));
    let mut line = jcs::to_string(&linked);
    line.push('\n');
    Ok((line, link))
}

fn is_null_node(n: &Node) -> bool {
    matches!(n.value, Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_lines_hold_digests_and_chain() {
        let (l1, h1) = traffic_line(
            "h0",
            r#"{"n":1,"at":5,"direction":"to-server","server":"s","method":"resources/read","params":{"uri":"a://b"},"answer":{"contents":[]}}"#,
        )
        .unwrap();
        assert!(!l1.contains("a://b") && l1.ends_with('\n'), "{l1}");
        let node = json::parse(&l1).node.unwrap();
        let keys: Vec<&str> = match &node.value {
            Value::Obj(m) => m.iter().map(|m| m.key.as_str()).collect(),
            _ => vec![],
        };
        assert_eq!(keys, TRAFFIC_KEYS);
        let (_, h2) =
            traffic_line(&h1, r#"{"n":2,"at":6,"direction":"to-client","server":null,"method":"sampling/createMessage","params":{},"error_code":-32601}"#)
                .unwrap();
        assert_ne!(h1, h2);
        assert!(traffic_line("h0", r#"{"n":1,"at":5,"direction":"sideways","method":"x","params":{}}"#).is_err());
        let (empty, _) =
            traffic_line("h0", r#"{"n":1,"at":5,"direction":"to-server","server":null,"method":"logging/setLevel","params":{},"answer":null}"#).unwrap();
        assert!(empty.contains(&format!("\"answer_sha256\":\"{}\"", sha256_hex(b"null"))), "{empty}");
        assert!(traffic_line("h0", r#"{"n":1,"at":5,"direction":"to-server","method":"x","params":{},"answer":{},"error_code":1}"#).is_err());
    }

    const DOC: &str = "{\"runbook\":\"x\"}";

    fn facts() -> String {
        r#"{"run_id":"r-1","at":1764633600000,"reference":"/abs/path/runbook.json","trust":"T1","pinned_sha256":null,
            "provenance":{"kind":"file"},"module_sha256":"m","host":{"name":"h","version":"1"},"adapter":"hook",
            "git":{"status":"clean","staged":0}}"#
            .to_string()
    }

    #[test]
    fn pretty_is_serde_pretty_with_sorted_keys() {
        let n = json::parse(r#"{"b":[1,{"y":null,"x":"a\u0001"}],"a":{},"c":[]}"#).node.unwrap();
        assert_eq!(pretty(&n), "{\n  \"a\": {},\n  \"b\": [\n    1,\n    {\n      \"x\": \"a\\u0001\",\n      \"y\": null\n    }\n  ],\n  \"c\": []\n}\n");
    }

    #[test]
    fn a_created_bundle_names_no_absolute_path_and_points_latest_at_itself() {
        let e = create(DOC.as_bytes(), &facts()).unwrap();
        let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["r-1", "r-1/runbook.json", "r-1/events.ndjson", "r-1/run.json", "latest.json", "history.ndjson"]);
        let run = String::from_utf8(e[3].bytes.clone()).unwrap();
        assert!(run.contains("\"reference\": \"runbook.json\"") && !run.contains("/abs"), "{run}");
        assert!(create(DOC.as_bytes(), &facts().replace("r-1", "../x")).is_err());
        assert!(create(DOC.as_bytes(), "{}").unwrap_err().contains("run_id"));
    }

    #[test]
    fn chain_start_accepts_its_own_run_and_names_each_mismatch() {
        let e = create(DOC.as_bytes(), &facts()).unwrap();
        let run = String::from_utf8(e[3].bytes.clone()).unwrap();
        let a = crate::doc::analysis_of(DOC.as_bytes());
        let h0 = chain_start(&a, &run, None).unwrap();
        assert_eq!(h0, chain_h0(DOC.as_bytes()));
        assert_eq!(chain_start(&a, &run, Some((&a.sha256, &h0))).unwrap(), h0);
        // Another document's analysis: its sha256 is not run.json's.
        let other = crate::doc::analysis_of(b"{\"runbook\":\"y\"}");
        assert_eq!(chain_start(&other, &run, None).unwrap_err(), ("runbook.json".into(), "the document's sha256 is not run.json's".into()));
        // A chain_h0 the agent rewrote.
        let forged = run.replace(&format!("\"chain_h0\": \"{h0}\""), &format!("\"chain_h0\": \"{}\"", "0".repeat(64)));
        assert_ne!(forged, run);
        let (place, why) = chain_start(&a, &forged, None).unwrap_err();
        assert!(place == "run.json" && why.contains(&h0), "{place}: {why}");
        // A pin of another run.
        let (place, why) = chain_start(&a, &run, Some((&"1".repeat(64), &h0))).unwrap_err();
        assert!(place == "runbook.json" && why.contains("not the one pinned"), "{place}: {why}");
        assert!(chain_start(&a, &run, Some((&a.sha256, &"1".repeat(64)))).is_err());
        // Not run.json's form.
        assert_eq!(chain_start(&a, "[]", None).unwrap_err().0, "run.json");
        assert_eq!(chain_start(&a, &run.replace("\"runbook.json\"", "\"../x\""), None).unwrap_err().0, "run.json");
    }

    #[test]
    fn the_end_pins_every_file_and_refuses_a_second_end() {
        let e = create(DOC.as_bytes(), &facts()).unwrap();
        let run = String::from_utf8(e[3].bytes.clone()).unwrap();
        let facts = r#"{"at":0,"chain_head":"c","hashes":{"runbook.json":"d","events.ndjson":"e"},"latest":"{\"run_id\":\"r-1\"}"}"#;
        let end_e = end(&run, Some(r#"{"outcome":"completed"}"#), facts).unwrap();
        let paths: Vec<&str> = end_e.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["r-1/report.json", "r-1/run.json", "r-1/receipt.json", "latest.json", "history.ndjson"]);
        let ended = String::from_utf8(end_e[1].bytes.clone()).unwrap();
        assert!(end(&ended, Some("{}"), facts).is_err());
        assert!(end(&run, Some("{}"), r#"{"at":0,"chain_head":"c","hashes":{}}"#).unwrap_err().contains("runbook.json"));
    }

    #[test]
    fn times_are_utc_rfc3339_with_milliseconds() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_764_633_600_000), "2025-12-02T00:00:00.000Z");
        assert_eq!(rfc3339_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn records_embed_only_object_lines() {
        assert_eq!(record_line("h", "x", "{\"d\":1}", None), "{\"h\":\"h\",\"decision\":{\"d\":1},\"event\":\"x\"}\n");
        assert_eq!(record_line("h", "\"x\"", "{}", None), "{\"h\":\"h\",\"decision\":{},\"event\":\"\\\"x\\\"\"}\n");
        assert_eq!(record_line("h", "{\"a\":1}", "{}", None), "{\"h\":\"h\",\"decision\":{},\"event\":{\"a\":1}}\n");
        assert_eq!(record_line("h", "{\"a\":1,\"a\":2}", "{}", None), "{\"h\":\"h\",\"decision\":{},\"event\":\"{\\\"a\\\":1,\\\"a\\\":2}\"}\n");
    }

    #[test]
    fn guard_matches_keys_values_and_the_tool() {
        let needles = vec![".runbook/runs".to_string()];
        assert!(guard_names("Bash", r#"{"command":"cat .runbook/runs/x"}"#, &needles));
        assert!(guard_names("Bash", r#"{".runbook/runs":1}"#, &needles));
        assert!(!guard_names("Bash", r#"{"command":"ls"}"#, &needles));
        assert!(guard_names("Bash", "not json .runbook/runs", &needles));
    }
}
