//! `verify` of a run bundle (docs/spec/bundle.md#what-verify-checks and docs/spec/README.md#architecture), in the module: every consistency check a verifier makes of a
//! bundle's bytes, so the CLI, the packages and a browser verify with the same code. A host passes the
//! bundle's top-level entries in (it keeps file access, sizes and the bytes of signatures); the module
//! runs the checks in order, stopping at the first failure and naming its place (a file, or
//! `events.ndjson:N`):
//!
//! 1. `layout`: `run.json` is a `runbook-run-bundle/v1` with the fixed layout of relative artifact names;
//! 2. `files-present`: every artifact is there and a regular file;
//! 3. `receipt-form`: `receipt.json` is canonical JSON with exactly the `runbook-receipt/v1` keys;
//! 4. `relative-paths-only`: no absolute path in `run.json` or the receipt's own members (the report names
//!    no file: its strings are names the document, the claim, the agent or an approver chose);
//! 5. `document-sha256`: the document's sha256 agrees with `run.json`, the envelope, the report (and the
//!    registry pin, T2);
//! 6. `envelope`: the module's envelope of the document, byte for byte, and the chain's `h0`;
//!    `derivation` (a redacted derivative only): what `derivation.json` records;
//! 7. `hash-chain`: every `events.ndjson` line is the module's record of its texts and continues the chain
//!    (9.22), and a replay reproduces every decision line byte for byte;
//! 8. `replay-decisions` and `replay-report`: `report.json` is the replay's, byte for byte (a redacted
//!    derivative: `report-decisions`, the report against the recorded decisions);
//! 9. `signatures`: each signed answer answers one approval event, once, with that event's payload
//!    (9.19); the signature bytes are the host's to check ([`Verification::signed_answers`]);
//! 10. `shadow.ndjson` (a shadow run): each line names a recorded decision that did not allow the call;
//!     `traffic` (when `traffic.ndjson` is there): each line is the module's form, numbered from 1, and
//!     continues the traffic chain from `chain_h0` (9.29);
//! 11. `receipt`: its report, hashes, module, host and pins of every other file, byte for byte the
//!     module's receipt of these files, and `run.json`'s lifecycle.
//!
//! Then share safety: reasons a bundle is `local_only` (raw arguments, results, malformed lines verbatim,
//! an approval channel holding calls).
//!
//! [`Verifier`] runs them with `events.ndjson` in pieces (the CLI streams it), and [`verify`] is that with the
//! file whole: one implementation, whose memory grows with the run's state, not with its events.

use crate::audit;
use crate::bundle::{self, RECEIPT_SCHEMA, RUN_SCHEMA, SHADOW, SIGNATURES, TRAFFIC};
use crate::doc::sha256_hex;
use crate::jcs;
use crate::json;
use crate::supervisor::Session;
use crate::value::{json_eq, Node, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

pub const DERIVATION_SCHEMA: &str = "runbook-redacted-derivation/v1";
pub const REDACTION: &str = "digest-arguments-and-results/v1";
/// Every host whose bundles verify: the CLI, and the packages that embed the module in a client's process.
pub const KNOWN_HOSTS: [&str; 3] = ["runbook-host", "runbook-policy-python", "runbook-policy-js"];
const RECEIPT_KEYS: [&str; 7] = ["artifacts", "chain_head", "host", "module_sha256", "report", "report_sha256", "schema"];

/// One top-level entry of a bundle directory, as the host found it.
#[derive(Clone, Debug)]
pub enum Item {
    /// A regular file and its bytes.
    File(Vec<u8>),
    /// A directory and how many entries it holds.
    Dir(u32),
    /// Anything else (a symbolic link, a device): never read.
    Other,
}

/// What the verifier trusts beyond the bundle: the module that replays it (its sha256, which the host
/// measured when it loaded it) and the allowed signers it checks signed approvals against.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub module_sha256: String,
    /// The sha256 of the verifier's `allowed_signers`, when it gave one.
    pub signers_sha256: Option<String>,
}

/// A signed answer whose payload the module checked: the host checks the signature bytes (by the key
/// the signature carries, whose fingerprint must be `fingerprint`, and by its allowed signers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedAnswer {
    pub place: String,
    pub principal: String,
    pub message: String,
    pub signature: String,
    pub fingerprint: String,
}

/// What verification found.
#[derive(Clone, Debug, Default)]
pub struct Verification {
    /// The checks that passed, in order.
    pub checks: Vec<&'static str>,
    /// The first failure: its place and one sentence.
    pub failure: Option<(String, String)>,
    pub run_id: Option<String>,
    pub outcome: Option<String>,
    pub events: u64,
    /// Why the bundle is not share-ready (code, sentence); only when no check failed.
    pub reasons: Vec<(&'static str, String)>,
    pub warnings: Vec<String>,
    /// A redacted derivative: chain and receipt verified, not replayed.
    pub redacted: bool,
    /// A shadow run: how many calls the module did not allow ran anyway.
    pub shadow: Option<u64>,
    /// The signed answers whose payloads passed, for the host to check their signatures.
    pub signed_answers: Vec<SignedAnswer>,
    /// `run.json` announces a signature of the receipt, or `receipt.dsse.json` is there: the host must
    /// check it; a host that cannot must not pass the bundle.
    pub receipt_signed: bool,
}

type Failure = (String, String);

fn fail<T>(place: impl Into<String>, message: impl Into<String>) -> Result<T, Failure> {
    Err((place.into(), message.into()))
}

/// Runs every check on the bundle whose top-level entries are `entries` (`name`, what it is): a
/// [`Verifier`] given the whole of `events.ndjson` at once.
pub fn verify(entries: &[(String, Item)], options: &Options) -> Verification {
    Verifier::new(Cow::Borrowed(entries), options.clone()).finish()
}

/// [`verify`] with `events.ndjson` in pieces of any size (a line may span pieces), so that a verifier
/// holds the bundle's small files and one line of events at a time, never the events: `new` runs the
/// checks before the events (1 to 6), `push` the events check line by line as the bytes arrive, and
/// `finish` the rest, in order; the answer is [`verify`]'s for the same bytes. The events are the bytes of
/// the `events.ndjson` entry (empty when the host streams them) followed by every piece pushed.
pub struct Verifier<'a> {
    entries: Cow<'a, [(String, Item)]>,
    options: Options,
    v: Verification,
    /// What checks 1 to 6 established, or their failure.
    seen: Result<Seen, Failure>,
    events: Events,
}

impl<'a> Verifier<'a> {
    pub fn new(entries: Cow<'a, [(String, Item)]>, options: Options) -> Verifier<'a> {
        let mut v = Verification::default();
        let mut cx = Cx { entries: &entries, options: &options, v: &mut v };
        let seen = cx.before_events();
        let events = match &seen {
            Ok(s) => Events::start(&cx, s),
            Err(_) => Events::default(),
        };
        let mut me = Verifier { entries, options, v, seen, events };
        if let Some((_, Item::File(b))) = me.entries.iter().find(|(n, _)| n == "events.ndjson") {
            me.events.push(b);
        }
        me
    }

    /// The next piece of `events.ndjson`.
    pub fn push(&mut self, chunk: &[u8]) {
        self.events.push(chunk);
    }

    pub fn finish(self) -> Verification {
        let Verifier { entries, options, mut v, seen, mut events } = self;
        let mut cx = Cx { entries: &entries, options: &options, v: &mut v };
        let failure = match seen {
            Ok(mut s) => cx.after_events(&mut s, &mut events).err(),
            Err(f) => Some(f),
        };
        if failure.is_none() {
            v.reasons = share_safety(&events, &entries);
        }
        v.failure = failure;
        v
    }
}

struct Cx<'a> {
    entries: &'a [(String, Item)],
    options: &'a Options,
    v: &'a mut Verification,
}

// Small accessors over the module's JSON nodes.

fn get<'a>(n: &'a Node, path: &[&str]) -> Option<&'a Node> {
    let mut cur = n;
    for k in path {
        cur = cur.get(k)?;
    }
    Some(cur)
}

fn str_at<'a>(n: &'a Node, path: &[&str]) -> Option<&'a str> {
    get(n, path).and_then(Node::as_str)
}

fn u64_of(n: Option<&Node>) -> Option<u64> {
    match n.map(|n| &n.value) {
        Some(Value::Num(x)) => x.as_u64(),
        _ => None,
    }
}

fn is_null(n: Option<&Node>) -> bool {
    matches!(n.map(|n| &n.value), None | Some(Value::Null))
}

fn same(a: Option<&Node>, b: Option<&Node>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => json_eq(a, b),
        (a, b) => is_null(a) && is_null(b),
    }
}

/// The value as a verifier shows it in a sentence (`null` when absent).
fn shown(n: Option<&Node>) -> String {
    n.map(jcs::to_string).unwrap_or_else(|| "null".into())
}

fn keys(n: &Node) -> Vec<&str> {
    match &n.value {
        Value::Obj(m) => m.iter().map(|m| m.key.as_str()).collect(),
        _ => Vec::new(),
    }
}

fn utf8<'a>(name: &str, bytes: &'a [u8]) -> Result<&'a str, Failure> {
    std::str::from_utf8(bytes).or_else(|_| fail(name, "not UTF-8"))
}

/// JSON text, refusing an object with a key twice (readers disagree on which one counts).
fn parse(name: &str, bytes: &[u8]) -> Result<Node, Failure> {
    let p = json::parse(utf8(name, bytes)?);
    match (p.node, p.issues.first()) {
        (Some(n), None) => Ok(n),
        (_, Some(i)) => fail(name, format!("not JSON: {} at line {}, column {}", i.message, i.pos.line, i.pos.column)),
        (None, None) => fail(name, "not JSON"),
    }
}

/// `2026-12-01T10:00:00.000Z`: what every time in a bundle looks like.
fn is_rfc3339_ms(t: &str) -> bool {
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b[i].is_ascii_digit());
    b.len() == 24
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..23)
        && b[23] == b'Z'
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// An absolute path (or a home-relative or file: one) of any common system.
fn looks_absolute(s: &str) -> bool {
    let b = s.as_bytes();
    s.starts_with('/')
        || s.starts_with('~')
        || s.starts_with("\\\\")
        || s.starts_with("file:")
        || (b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b[2] == b'\\' || b[2] == b'/'))
}

fn find_absolute(n: &Node, at: &str) -> Option<String> {
    match &n.value {
        Value::Str(s) if looks_absolute(s) => Some(at.to_string()),
        Value::Arr(a) => a.iter().enumerate().find_map(|(i, x)| find_absolute(x, &format!("{at}/{i}"))),
        Value::Obj(o) => {
            o.iter().find_map(|m| if looks_absolute(&m.key) { Some(format!("{at}/{}", m.key)) } else { find_absolute(&m.value, &format!("{at}/{}", m.key)) })
        }
        _ => None,
    }
}

/// One parsed line of `events.ndjson`: the exact texts recorded.
pub struct EventRecord {
    pub h: String,
    pub event_line: String,
    pub decision_line: String,
}

/// The raw line a record embeds (a JSON string holds a line that is not one JSON object).
fn unembed(text: &str) -> Option<String> {
    if text.trim_start().starts_with('"') {
        match json::parse(text).node.map(|n| n.value) {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    } else {
        Some(text.to_string())
    }
}

/// The end (exclusive) of the JSON value starting at `i` in compact JSON text.
fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    fn skip_string(b: &[u8], mut i: usize) -> Option<usize> {
        i += 1;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
        None
    }
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = skip_string(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => None,
    }
}

/// Parses one line of `events.ndjson` (without its newline). The one allowed form: the line must be
/// exactly the record the module composes of the texts it holds.
pub fn parse_event_record(line: &str) -> Result<EventRecord, String> {
    const PRE: &str = "{\"h\":\"";
    let rest = line.strip_prefix(PRE).ok_or("a line must start with {\"h\":\"")?;
    if rest.len() < 64 || !rest.as_bytes()[..64].iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
        return Err("`h` must be 64 lowercase hex digits".into());
    }
    let h = rest[..64].to_string();
    let rest = rest[64..].strip_prefix("\",\"decision\":").ok_or("`decision` must follow `h`")?;
    let end = skip_value(rest.as_bytes(), 0).ok_or("`decision` is not JSON")?;
    let decision_text = &rest[..end];
    let rest = rest[end..].strip_prefix(",\"event\":").ok_or("`event` must follow `decision`")?;
    let event_text = rest.strip_suffix('}').ok_or("a line must end with }")?;
    let p = json::parse(line);
    if p.node.is_none() {
        return Err("the line is not JSON".into());
    }
    let decision_line = unembed(decision_text).ok_or("`decision` is not a JSON object or string")?;
    let event_line = unembed(event_text).ok_or("`event` is not a JSON object or string")?;
    let composed = bundle::record_line(&h, &event_line, &decision_line, None);
    if composed.strip_suffix('\n') != Some(line) {
        return Err("a value is not stored in its one allowed form".into());
    }
    Ok(EventRecord { h, event_line, decision_line })
}

/// Reads `events.ndjson` bytes into records; the error names the 1-based line.
pub fn read_events(bytes: &[u8]) -> Result<Vec<EventRecord>, (usize, String)> {
    let mut records = Records::default();
    let mut out = Vec::new();
    records.push(bytes, &mut |_, r| out.push(r));
    records.end().map(|_| out)
}

/// `events.ndjson` read as its bytes arrive, in pieces of any size: each whole line as a record, in order,
/// while every line so far is one; the rules of the file as a whole (one UTF-8 text, a final newline)
/// and which failure counts first are [`Records::end`]'s.
#[derive(Default)]
struct Records {
    /// The start of a line whose newline has not arrived yet.
    partial: Vec<u8>,
    /// Whole lines so far.
    lines: u64,
    /// The first line that is not UTF-8.
    not_utf8: Option<u64>,
    /// The first line not in its one allowed form, and why.
    malformed: Option<(u64, String)>,
}

impl Records {
    /// Splits `chunk` into lines, calling `each` with every record and its line number (from 1) until
    /// the first line that is not one.
    fn push(&mut self, mut chunk: &[u8], each: &mut dyn FnMut(u64, EventRecord)) {
        while let Some(i) = chunk.iter().position(|b| *b == b'\n') {
            if self.partial.is_empty() {
                self.line(&chunk[..i], each);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&chunk[..i]);
                self.line(&line, each);
                line.clear();
                self.partial = line;
            }
            chunk = &chunk[i + 1..];
        }
        self.partial.extend_from_slice(chunk);
    }

    fn line(&mut self, bytes: &[u8], each: &mut dyn FnMut(u64, EventRecord)) {
        self.lines += 1;
        if self.not_utf8.is_some() {
            return;
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            self.not_utf8 = Some(self.lines);
            return;
        };
        if self.malformed.is_some() {
            return;
        }
        match parse_event_record(text) {
            Ok(r) => each(self.lines, r),
            Err(m) => self.malformed = Some((self.lines, m)),
        }
    }

    /// How many records the file holds, or its failure and the 1-based line: bytes that are not UTF-8
    /// anywhere come first (the file is one text), then a last line without its newline, then the first
    /// line not in its one allowed form.
    fn end(&mut self) -> Result<u64, (usize, String)> {
        let last = self.lines + 1;
        if self.not_utf8.is_none() && std::str::from_utf8(&self.partial).is_err() {
            self.not_utf8 = Some(last);
        }
        if let Some(n) = self.not_utf8 {
            return Err((n as usize, "not UTF-8".to_string()));
        }
        if !self.partial.is_empty() {
            return Err((last as usize, "the last line does not end with a newline".to_string()));
        }
        if let Some((n, m)) = &self.malformed {
            return Err((*n as usize, m.clone()));
        }
        Ok(self.lines)
    }
}

/// What the events check keeps of `events.ndjson` as it streams past: the file's digest, the line being
/// read, the chain's head, the replaying session and its first failure, and of particular events only
/// what a later check needs (the approval events a signature names, the decisions a shadow run lists,
/// whether any event holds raw text; for a redacted derivative, what its report is checked against),
/// never the lines themselves.
#[derive(Default)]
struct Events {
    /// False when a check before the events failed: the events are then not read.
    on: bool,
    sha: Sha256,
    records: Records,
    head: String,
    /// None for a redacted derivative, which is not replayed.
    session: Option<Session>,
    failure: Option<Failure>,
    /// A redacted derivative's decisions, which its report is checked against.
    decisions_recorded: audit::Decisions,
    /// The `seq` of every line of signatures.ndjson.
    signed: BTreeSet<u64>,
    /// Whether the signatures check looks at approval events at all.
    approvals_wanted: bool,
    /// The approval events (and decisions) at the positions signatures.ndjson names.
    approvals: BTreeMap<u64, (Node, Node)>,
    /// The first approval event whose decision's `seq` no signature names: that `seq`, as shown.
    unsigned: Option<String>,
    /// The `seq` of every line of shadow.ndjson, and the first recorded decision of each.
    shadowed: BTreeSet<u64>,
    decisions: BTreeMap<u64, Option<Node>>,
    /// Share safety: raw arguments, raw results, malformed event text.
    raw: (bool, bool, bool),
}

/// The `seq` of every line of the entry `name` that has one.
fn seqs(entries: &[(String, Item)], name: &str) -> BTreeSet<u64> {
    match entries.iter().find(|(n, _)| n == name) {
        Some((_, Item::File(b))) => String::from_utf8_lossy(b).lines().filter_map(|l| u64_of(json::parse(l).node.as_ref()?.get("seq"))).collect(),
        _ => BTreeSet::new(),
    }
}

impl Events {
    fn start(cx: &Cx, s: &Seen) -> Events {
        let redacted = s.derivation.is_some();
        let signed = seqs(cx.entries, SIGNATURES);
        Events {
            on: true,
            head: s.h0.clone(),
            session: (!redacted).then(|| Session::new(cx.file(&s.doc_file))),
            approvals_wanted: !signed.is_empty() || signatures_required(s.run.as_ref().expect("layout")),
            signed,
            shadowed: seqs(cx.entries, SHADOW),
            ..Default::default()
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if !self.on {
            return;
        }
        self.sha.update(chunk);
        let mut records = std::mem::take(&mut self.records);
        records.push(chunk, &mut |n, r| self.record(n, r));
        self.records = records;
    }

    /// One record: its link (and decision, replayed), then what later checks keep of it.
    fn record(&mut self, n: u64, r: EventRecord) {
        if self.failure.is_some() {
            return;
        }
        let place = || format!("events.ndjson:{n}");
        match &mut self.session {
            None => {
                let next = crate::chain::link(&self.head, &r.event_line, &r.decision_line, true);
                if next != r.h {
                    self.failure = Some((place(), format!("the hash chain breaks: `h` is {}, the chain gives {next}", r.h)));
                    return;
                }
                self.head = next;
            }
            Some(session) => {
                let (decision_line, link) = session.replay_line(&r.event_line, &self.head);
                if link != r.h {
                    self.failure = Some((place(), format!("the hash chain breaks: `h` is {}, the chain gives {link}", r.h)));
                    return;
                }
                self.head = link;
                if decision_line != r.decision_line {
                    self.failure = Some((place(), format!("the replay decides {decision_line}, the bundle records {}", r.decision_line)));
                    return;
                }
            }
        }
        self.raw.2 |= !r.event_line.trim_start().starts_with('{');
        // Parsing the event is most of this: only when something is still to be learnt from it.
        let mut approval = false;
        let mut e = None;
        if !(self.raw.0 && self.raw.1) || self.approvals_wanted {
            let ev = json::parse(&r.event_line).node.unwrap_or_else(null);
            self.raw.0 |= ev.get("arguments").is_some() && !is_digest(ev.get("arguments"));
            self.raw.1 |= ev.get("result").is_some() && !is_digest(ev.get("result"));
            approval = self.approvals_wanted && str_at(&ev, &["type"]) == Some("approval");
            e = Some(ev);
        }
        if approval || !self.shadowed.is_empty() {
            let d = json::parse(&r.decision_line).node.unwrap_or_else(null);
            let seq = u64_of(d.get("seq"));
            if let Some(q) = seq.filter(|q| self.shadowed.contains(q)) {
                self.decisions.entry(q).or_insert_with(|| d.get("decision").cloned());
            }
            if approval {
                if self.unsigned.is_none() && !seq.is_some_and(|q| self.signed.contains(&q)) {
                    self.unsigned = Some(shown(d.get("seq")));
                }
                if let Some(e) = e.filter(|_| self.signed.contains(&(n - 1))) {
                    self.approvals.insert(n - 1, (e, d));
                }
            }
        }
        if self.session.is_none() {
            self.decisions_recorded.push(&r.event_line, &r.decision_line);
        }
    }
}

/// What the checks have read and established so far, handed from each numbered check to the next.
/// What the checks have read and established so far, handed from each numbered check to the next (the
/// files' bytes stay in the entries: [`Cx::file`]).
#[derive(Default)]
struct Seen {
    run: Option<Node>,
    run_id: String,
    doc_file: String,
    has_envelope: bool,
    env_v: Option<Node>,
    report: Option<Node>,
    receipt: Option<Node>,
    derivation: Option<Node>,
    h0: String,
    /// The sha256 of the events the receipt pins (the source's, for a redacted derivative).
    events_source_sha: String,
    head: String,
    /// Which of signatures.ndjson, shadow.ndjson and traffic.ndjson the receipt must pin.
    signatures: bool,
    shadow: bool,
    traffic: bool,
}

fn null() -> Node {
    Node::new(Value::Null)
}

impl<'a> Cx<'a> {
    fn pass(&mut self, id: &'static str) {
        self.v.checks.push(id);
    }

    fn entry(&self, name: &str) -> Option<&'a Item> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, i)| i)
    }

    fn read(&self, name: &str) -> Result<&'a [u8], Failure> {
        match self.entry(name) {
            Some(Item::File(b)) => Ok(b),
            Some(_) => fail(name, "not a regular file"),
            None => fail(name, "missing"),
        }
    }

    /// The bytes of a file the checks found present (empty for anything else).
    fn file(&self, name: &str) -> &'a [u8] {
        match self.entry(name) {
            Some(Item::File(b)) => b,
            _ => &[],
        }
    }

    fn envelope_bytes(&self, s: &Seen) -> Option<&'a [u8]> {
        s.has_envelope.then(|| self.file("envelope.json"))
    }

    fn before_events(&mut self) -> Result<Seen, Failure> {
        let mut s = self.layout()?;
        self.presence(&mut s)?;
        self.receipt_form(&mut s)?;
        self.relative_paths_only(&mut s)?;
        self.document_sha256(&mut s)?;
        self.envelope(&mut s)?;
        Ok(s)
    }

    fn after_events(&mut self, s: &mut Seen, events: &mut Events) -> Result<(), Failure> {
        s.events_source_sha = format!("{:x}", std::mem::take(&mut events.sha).finalize());
        self.derivation(s)?;
        self.events(s, events)?;
        self.report(s, events)?;
        self.signatures(s, events)?;
        self.shadow(s, events)?;
        self.traffic(s)?;
        self.receipt(s)
    }

    /// 1. The manifest and its layout.
    fn layout(&mut self) -> Result<Seen, Failure> {
        let run_bytes = self.read("run.json")?;
        let run = parse("run.json", run_bytes)?;
        if str_at(&run, &["schema"]) != Some(RUN_SCHEMA) {
            return fail("run.json", format!("`schema` is not `{RUN_SCHEMA}`"));
        }
        let Some(run_id) = str_at(&run, &["run_id"]).filter(|s| bundle::is_safe_name(s)) else {
            return fail("run.json", "`run_id` is missing or not a plain name");
        };
        let run_id = run_id.to_string();
        self.v.run_id = Some(run_id.clone());
        self.v.receipt_signed = !is_null(run.get("receipt_signature")) || self.entry(bundle::RECEIPT_SIGNATURE).is_some();
        let a = get(&run, &["artifacts"]);
        let art = |k: &str| a.and_then(|a| a.get(k));
        let doc_file = match art("document").and_then(Node::as_str) {
            Some(f @ ("runbook.yaml" | "runbook.json")) => f.to_string(),
            _ => return fail("run.json", "`artifacts.document` must be `runbook.yaml` or `runbook.json`"),
        };
        let has_envelope = match art("envelope").map(|n| &n.value) {
            None | Some(Value::Null) => false,
            Some(Value::Str(s)) if s == "envelope.json" => true,
            _ => return fail("run.json", "`artifacts.envelope` must be `envelope.json` or null"),
        };
        for (k, f) in [("run", "run.json"), ("events", "events.ndjson"), ("report", "report.json"), ("receipt", "receipt.json")] {
            if art(k).and_then(Node::as_str) != Some(f) {
                return fail("run.json", format!("`artifacts.{k}` must be the relative path `{f}`"));
            }
        }
        if a.map(keys).map(|k| k.len()) != Some(6) {
            return fail("run.json", "`artifacts` names an unknown artifact");
        }
        if str_at(&run, &["document", "file"]) != Some(doc_file.as_str()) {
            return fail("run.json", "`document.file` is not the document artifact");
        }
        self.pass("layout");
        Ok(Seen { run: Some(run), run_id, doc_file, has_envelope, ..Default::default() })
    }

    /// 2. Presence.
    fn presence(&mut self, s: &mut Seen) -> Result<(), Failure> {
        self.read(&s.doc_file)?;
        if s.has_envelope {
            self.read("envelope.json")?;
        }
        self.read("events.ndjson")?;
        let run = s.run.as_ref().expect("layout");
        match self.read("report.json") {
            Ok(_) => {}
            // Why there is no report, as run.json says: so an auditor tells a run its host could not end
            // (a trap, a full disk) from one still running or killed.
            Err((place, m)) if m == "missing" => {
                if let Some(code) = get(run, &["ended_without_report"]).filter(|c| !is_null(Some(c))) {
                    return fail(place, format!("missing: the run ended without a report ({}): nothing vouches for its outcome", code.as_str().unwrap_or("?")));
                }
                let ended =
                    matches!(get(run, &["lifecycle"]).map(|l| &l.value), Some(Value::Arr(l)) if l.iter().any(|e| str_at(e, &["event"]) == Some("ended")));
                if !ended {
                    return fail(place, "missing: the run has not ended (it is still running, or its host was stopped before it could end it)");
                }
                return fail(place, m);
            }
            Err(f) => return Err(f),
        }
        self.read("receipt.json")?;
        // A redacted derivative (`export --redact`) carries derivation.json: its chain and receipt verify,
        // its events cannot be replayed.
        s.derivation = match self.entry("derivation.json") {
            Some(_) => Some(parse("derivation.json", self.read("derivation.json")?)?),
            None => None,
        };
        self.pass("files-present");
        Ok(())
    }

    /// 3. The receipt's form.
    fn receipt_form(&mut self, s: &mut Seen) -> Result<(), Failure> {
        let text = utf8("receipt.json", self.file("receipt.json"))?;
        let receipt = parse("receipt.json", self.file("receipt.json"))?;
        if jcs::to_string(&receipt) != text {
            return fail("receipt.json", "not canonical JSON (RFC 8785)");
        }
        if keys(&receipt) != RECEIPT_KEYS {
            return fail("receipt.json", format!("the keys must be exactly {}", RECEIPT_KEYS.join(", ")));
        }
        if str_at(&receipt, &["schema"]) != Some(RECEIPT_SCHEMA) {
            return fail("receipt.json", format!("`schema` is not `{RECEIPT_SCHEMA}`"));
        }
        s.receipt = Some(receipt);
        self.pass("receipt-form");
        Ok(())
    }

    /// 4. No absolute path in what the host writes about the bundle: `run.json` and the receipt's members
    /// other than `report`. The report (alone or inside the receipt) is not scanned: it names no file, and
    /// its strings are codes, digests and names someone else chose: a tool an agent called (`/etc/passwd`
    /// is a tool name an agent can call), an approver, the document's ids. Scanning them let an agent make
    /// its own run's bundle fail here; replay checks the report byte for byte instead (checks 8 and 11).
    fn relative_paths_only(&mut self, s: &mut Seen) -> Result<(), Failure> {
        s.report = Some(parse("report.json", self.file("report.json"))?);
        if let Some(at) = s.run.as_ref().and_then(|v| find_absolute(v, "")) {
            return fail("run.json", format!("an absolute path at {at}"));
        }
        if let Some(Value::Obj(o)) = s.receipt.as_ref().map(|v| &v.value) {
            for m in o.iter().filter(|m| m.key != "report") {
                if let Some(at) = find_absolute(&m.value, &format!("/{}", m.key)) {
                    return fail("receipt.json", format!("an absolute path at {at}"));
                }
            }
        }
        self.pass("relative-paths-only");
        Ok(())
    }

    /// 5. The document's hash, everywhere it is named.
    fn document_sha256(&mut self, s: &mut Seen) -> Result<(), Failure> {
        let doc_sha = sha256_hex(self.file(&s.doc_file));
        s.env_v = match self.envelope_bytes(s) {
            Some(e) => Some(parse("envelope.json", e)?),
            None => None,
        };
        let (run, report) = (s.run.as_ref().expect("layout"), s.report.as_ref().expect("read"));
        let report_doc_sha = str_at(report, &["document", "sha256"]).unwrap_or("");
        let env_doc_sha = s.env_v.as_ref().map(|e| str_at(e, &["document", "sha256"]).unwrap_or("").to_string());
        let run_doc_sha = str_at(run, &["document", "sha256"]).unwrap_or("");
        // Name the odd one out: the document when every record agrees against it.
        let others = [Some(report_doc_sha), env_doc_sha.as_deref(), Some(run_doc_sha)];
        if others.iter().flatten().all(|x| *x != doc_sha) {
            return fail(&s.doc_file, format!("its sha256 is {doc_sha}; run.json, the envelope and the report name {run_doc_sha}"));
        }
        if let Some(e) = &env_doc_sha {
            if *e != doc_sha {
                return fail("envelope.json", format!("names the document sha256 {e}, not {doc_sha}"));
            }
        }
        if report_doc_sha != doc_sha {
            return fail("report.json", format!("names the document sha256 {report_doc_sha}, not {doc_sha}"));
        }
        if run_doc_sha != doc_sha {
            return fail("run.json", format!("`document.sha256` is {run_doc_sha}, not {doc_sha}"));
        }
        let pinned = get(run, &["document", "pinned_sha256"]);
        match str_at(run, &["document", "trust"]) {
            Some("T1") if is_null(pinned) => {}
            Some("T2") if pinned.and_then(Node::as_str) == Some(doc_sha.as_str()) => {}
            Some("T2") => return fail("run.json", "`document.pinned_sha256` is not the document's sha256"),
            _ => return fail("run.json", "`document.trust` must be T1 (unpinned) or T2 (pinned)"),
        }
        self.pass("document-sha256");
        Ok(())
    }

    /// 6. The envelope: the module's, byte for byte, and the chain's start.
    fn envelope(&mut self, s: &mut Seen) -> Result<(), Failure> {
        // The instance's memo: the session of this check's replay analyses the same bytes.
        let a = crate::doc::analysis_of(self.file(&s.doc_file));
        let env_sha = match (self.envelope_bytes(s), a.envelope_text()) {
            (Some(e), Some(d)) => {
                if e != d.as_bytes() {
                    return fail("envelope.json", "not the module's envelope of the document, byte for byte");
                }
                // The bytes are the derived envelope's: its sha256 is the analysis'.
                a.envelope_sha256().map(str::to_string)
            }
            (None, None) => None,
            (None, Some(_)) => return fail("run.json", "the document has an envelope, but the bundle records none"),
            (Some(_), None) => return fail("envelope.json", "the document has no complete model, so no envelope"),
        };
        let (run, report) = (s.run.as_ref().expect("layout"), s.report.as_ref().expect("read"));
        if let Some(ev) = &s.env_v {
            for k in ["runbook_id", "version"] {
                if !same(get(run, &["document", k]), get(ev, &["document", k])) {
                    return fail("run.json", format!("`document.{k}` is not the envelope's"));
                }
            }
        }
        if str_at(report, &["envelope_sha256"]) != env_sha.as_deref() {
            return fail("report.json", "`envelope_sha256` is not the envelope's sha256");
        }
        if str_at(run, &["envelope_sha256"]) != env_sha.as_deref() {
            return fail("run.json", "`envelope_sha256` is not the envelope's sha256");
        }
        // The chain's start by the one statement of its rule (the bundle writer's and the resume's).
        s.h0 = crate::bundle::h0_of(&a).to_string();
        if str_at(run, &["chain_h0"]) != Some(s.h0.as_str()) {
            return fail("run.json", "`chain_h0` is not the chain's start");
        }
        self.pass("envelope");
        Ok(())
    }

    /// 6b. The derivation of a redacted derivative.
    fn derivation(&mut self, s: &mut Seen) -> Result<(), Failure> {
        let Some(d) = s.derivation.clone() else { return Ok(()) };
        self.v.redacted = true;
        if str_at(&d, &["schema"]) != Some(DERIVATION_SCHEMA) || str_at(&d, &["transformation"]) != Some(REDACTION) {
            return fail("derivation.json", format!("not a {DERIVATION_SCHEMA} of `{REDACTION}`"));
        }
        if str_at(&d, &["source_run_id"]) != Some(s.run_id.as_str()) {
            return fail("derivation.json", "`source_run_id` is not the bundle's run id");
        }
        // Its own bytes are pinned nowhere: it says exactly what its schema allows and nothing else, and
        // every file it names is in the bundle with the digest it gives.
        fn sorted(n: &Node) -> Vec<&str> {
            let mut k = keys(n);
            k.sort_unstable();
            k
        }
        if sorted(&d) != ["created_at", "files", "schema", "source_run_id", "transformation"] {
            return fail("derivation.json", "the keys must be exactly schema, source_run_id, created_at, transformation, files");
        }
        if !str_at(&d, &["created_at"]).is_some_and(is_rfc3339_ms) {
            return fail("derivation.json", "`created_at` is not a UTC RFC 3339 time with milliseconds");
        }
        let files: &[Node] = match get(&d, &["files"]).map(|f| &f.value) {
            Some(Value::Arr(f)) => f,
            _ => &[],
        };
        let paths: Vec<&str> = files.iter().map(|f| str_at(f, &["path"]).unwrap_or("")).collect();
        if files.is_empty() || !paths.windows(2).all(|w| w[0] < w[1]) {
            return fail("derivation.json", "`files` must be sorted by path, each path once");
        }
        for f in files {
            let path = str_at(f, &["path"]).unwrap_or("");
            let (allowed, want): (bool, &[&str]) = match str_at(f, &["action"]) {
                Some("copied") => {
                    (!path.ends_with('/') && path != "events.ndjson" && path != "derivation.json", &["action", "output_sha256", "path", "source_sha256"])
                }
                Some("redacted") => (path == "events.ndjson", &["action", "output_sha256", "path", "source_sha256"]),
                Some("omitted") => (
                    matches!(path, "pending/" | "approvals/" | "consumed/") && str_at(f, &["reason"]).is_some_and(|r| !r.is_empty()),
                    &["action", "path", "reason"],
                ),
                _ => (false, &[]),
            };
            if !allowed || sorted(f) != want {
                return fail("derivation.json", format!("`files` entry `{path}` is not one a redaction writes"));
            }
            if str_at(f, &["action"]) == Some("copied") {
                let sha = sha256_hex(self.read(path)?);
                if str_at(f, &["source_sha256"]) != Some(sha.as_str()) || str_at(f, &["output_sha256"]) != Some(sha.as_str()) {
                    return fail(path, "not the copy derivation.json records");
                }
            }
        }
        let mut copied: Vec<(&str, &[u8])> = vec![
            ("run.json", self.file("run.json")),
            (&s.doc_file, self.file(&s.doc_file)),
            ("report.json", self.file("report.json")),
            ("receipt.json", self.file("receipt.json")),
        ];
        if let Some(e) = self.envelope_bytes(s) {
            copied.push(("envelope.json", e));
        }
        for (name, bytes) in copied {
            let sha = sha256_hex(bytes);
            let e = files.iter().find(|f| str_at(f, &["path"]) == Some(name));
            let ok = e.is_some_and(|e| {
                str_at(e, &["action"]) == Some("copied")
                    && str_at(e, &["source_sha256"]) == Some(sha.as_str())
                    && str_at(e, &["output_sha256"]) == Some(sha.as_str())
            });
            if !ok {
                return fail(name, "not the copy derivation.json records");
            }
        }
        let Some(ev) = files.iter().find(|f| str_at(f, &["path"]) == Some("events.ndjson") && str_at(f, &["action"]) == Some("redacted")) else {
            return fail("derivation.json", "records no redacted events.ndjson");
        };
        if str_at(ev, &["output_sha256"]) != Some(s.events_source_sha.as_str()) {
            return fail("events.ndjson", "not the redacted events derivation.json records");
        }
        let Some(src) = str_at(ev, &["source_sha256"]).filter(|x| is_hex64(x)) else {
            return fail("derivation.json", "no source sha256 of events.ndjson");
        };
        s.events_source_sha = src.to_string();
        self.pass("derivation");
        Ok(())
    }

    /// 7. Events: shape, chain, replay (the link and the decision together), as [`Events`] read them.
    fn events(&mut self, s: &mut Seen, events: &mut Events) -> Result<(), Failure> {
        self.v.events = events.records.end().or_else(|(n, m)| fail(format!("events.ndjson:{n}"), m))?;
        if let Some(f) = events.failure.take() {
            return Err(f);
        }
        s.head = std::mem::take(&mut events.head);
        self.pass("hash-chain");
        Ok(())
    }

    /// 8. The report: the replay's, byte for byte (a redacted derivative's: against its decisions).
    fn report(&mut self, s: &Seen, events: &mut Events) -> Result<(), Failure> {
        let report_bytes = self.file("report.json");
        if self.v.redacted {
            // A redacted derivative cannot be replayed, so its report is held against what its chained
            // lines say (the refusals, every deviation and approval, the event count, the outcome and
            // terminal): a report relabelled and its hashes fixed up, the decisions left, is refused.
            let text = utf8("report.json", report_bytes)?;
            std::mem::take(&mut events.decisions_recorded).check(self.file(&s.doc_file), text)?;
            self.pass("report-decisions");
        } else {
            self.pass("replay-decisions");
            if events.session.as_ref().map(Session::report).as_deref().map(str::as_bytes) != Some(report_bytes) {
                return fail("report.json", "not the replay's report, byte for byte");
            }
            self.pass("replay-report");
        }
        let report = s.report.as_ref().expect("read");
        self.v.outcome = str_at(report, &["outcome"]).map(str::to_string);
        if let Some(r) = str_at(report, &["run_id"]).filter(|r| *r != s.run_id) {
            self.v.warnings.push(format!("the start claim's run_id `{r}` is not the bundle's `{}`", s.run_id));
        }
        Ok(())
    }

    /// 9. Signed approvals (`signatures.ndjson`): each line answers the approval event at its `seq`, which
    /// the module accepted (its ledger lets a request be answered once), with that event's payload (run,
    /// request, step, call, answer) and approver. A run that required signatures has one for every
    /// approval event. The signature bytes are the host's to check.
    fn signatures(&mut self, s: &mut Seen, events: &Events) -> Result<(), Failure> {
        let run = s.run.as_ref().expect("layout");
        let required = signatures_required(run);
        let bytes: &[u8] = match self.entry(SIGNATURES) {
            Some(_) => self.read(SIGNATURES)?,
            None if !required => return Ok(()),
            None => &[],
        };
        s.signatures = true;
        if let (Some(trusted), Some(sha)) = (&self.options.signers_sha256, str_at(run, &["approvals", "allowed_signers_sha256"])) {
            if sha != trusted {
                return fail("run.json", format!("the run's approvals were signed under another allowed_signers (sha256 {sha})"));
            }
        }
        let text = utf8(SIGNATURES, bytes)?;
        let mut signed_seqs = Vec::new();
        let mut signed_requests: Vec<u64> = Vec::new();
        for (i, l) in text.lines().enumerate() {
            let place = format!("{SIGNATURES}:{}", i + 1);
            let v = parse(&place, l.as_bytes())?;
            let Some(seq) = u64_of(v.get("seq")) else { return fail(place, "no `seq`") };
            let Some((e, d)) = events.approvals.get(&seq).filter(|(e, _)| str_at(e, &["type"]) == Some("approval")) else {
                return fail(place, format!("`seq` {seq} is not an approval event"));
            };
            let granted = matches!(e.get("granted").map(|n| &n.value), Some(Value::Bool(true)));
            let sha = str_at(e, &["call_sha256"]).unwrap_or("");
            let Some(request) = u64_of(e.get("request")) else {
                return fail(place, format!("approval event {seq} names no request, so no signature can answer it"));
            };
            if str_at(d, &["decision"]) != Some("allow") {
                return fail(place, format!("approval event {seq} was refused by the module ({}): a signature answers a request once", shown(d.get("reason"))));
            }
            if signed_requests.contains(&request) {
                return fail(place, format!("a second signature answers request {request}"));
            }
            signed_requests.push(request);
            let message = crate::approval_payload(&s.run_id, request, str_at(e, &["step"]), sha, granted);
            if str_at(&v, &["message"]) != Some(message.as_str()) || u64_of(v.get("request")) != Some(request) {
                return fail(place, format!("the signed message is not approval event {seq}'s (run, request, step, call, answer)"));
            }
            let principal = str_at(&v, &["principal"]).unwrap_or("");
            if str_at(e, &["approver"]) != Some(principal) {
                return fail(place, format!("approval event {seq} names `{}`, the signature `{principal}`", str_at(e, &["approver"]).unwrap_or("")));
            }
            self.v.signed_answers.push(SignedAnswer {
                place,
                principal: principal.to_string(),
                message,
                signature: str_at(&v, &["signature"]).unwrap_or("").to_string(),
                fingerprint: str_at(&v, &["fingerprint"]).unwrap_or("").to_string(),
            });
            signed_seqs.push(seq);
        }
        // Every line answered its event, so the lines' seqs are `events.signed`, against which the first
        // approval event no line answers was found.
        debug_assert!(signed_seqs.iter().all(|q| events.signed.contains(q)));
        if let (true, Some(seq)) = (required, &events.unsigned) {
            return fail("events.ndjson", format!("approval event {seq} is not signed, and this run's approvals must be"));
        }
        self.pass("signatures");
        Ok(())
    }

    /// 10. A shadow run (`run.json` `mode: shadow`): `shadow.ndjson` is there, and each of its lines names
    /// a recorded decision that did not allow the call. An enforced run has no such file.
    fn shadow(&mut self, s: &mut Seen, events: &Events) -> Result<(), Failure> {
        let run = s.run.as_ref().expect("layout");
        let is_shadow = match get(run, &["mode"]).map(|m| &m.value) {
            None | Some(Value::Null) => false,
            Some(Value::Str(m)) if m == "shadow" => true,
            _ => return fail("run.json", format!("`mode` is {}: only \"shadow\" (or no `mode`) is known", shown(get(run, &["mode"])))),
        };
        let present = self.entry(SHADOW).is_some();
        if !is_shadow {
            if present {
                return fail(SHADOW, "present in a run that run.json does not mark as shadow");
            }
            return Ok(());
        }
        if !present {
            return fail(SHADOW, "missing: run.json marks the run as shadow");
        }
        let bytes = self.read(SHADOW)?;
        let text = utf8(SHADOW, bytes)?;
        let mut n = 0;
        for (i, line) in text.lines().enumerate() {
            let place = format!("{SHADOW}:{}", i + 1);
            let v = parse(&place, line.as_bytes())?;
            let Some(seq) = u64_of(v.get("seq")) else { return fail(place, "no `seq`") };
            let recorded = events.decisions.get(&seq).map(Option::as_ref);
            match recorded {
                Some(Some(d)) if d.as_str() != Some("allow") && same(Some(d), v.get("decision")) => {}
                Some(d) => return fail(place, format!("names seq {seq} as `{}`, but its recorded decision is {}", shown(v.get("decision")), shown(d))),
                None => return fail(place, format!("names seq {seq}, which no recorded decision has")),
            }
            n += 1;
        }
        s.shadow = true;
        self.v.shadow = Some(n);
        Ok(())
    }

    /// 10. The traffic besides tool calls (`traffic.ndjson`, 9.29), when there is any: each line holds
    /// exactly the module's members, is numbered from 1 and continues the traffic chain from `chain_h0`
    /// (the receipt pins the file, so a line dropped from the end shows there).
    fn traffic(&mut self, s: &mut Seen) -> Result<(), Failure> {
        if self.entry(TRAFFIC).is_none() {
            return Ok(());
        }
        let bytes = self.read(TRAFFIC)?;
        let text = utf8(TRAFFIC, bytes)?;
        if !text.is_empty() && !text.ends_with('\n') {
            return fail(TRAFFIC, "the last line is not whole (no final newline)");
        }
        let mut prev = s.h0.clone();
        for (i, line) in text.lines().enumerate() {
            let place = format!("{TRAFFIC}:{}", i + 1);
            let v = parse(&place, line.as_bytes())?;
            if keys(&v) != bundle::TRAFFIC_KEYS {
                return fail(place, format!("its members are not exactly {}", bundle::TRAFFIC_KEYS.join(", ")));
            }
            if u64_of(v.get("n")) != Some(i as u64 + 1) {
                return fail(place, format!("`n` is {}, not {}", shown(v.get("n")), i + 1));
            }
            let mut unlinked = v.clone();
            if let Value::Obj(m) = &mut unlinked.value {
                m.retain(|m| m.key != "link");
            }
            let link = bundle::traffic_link(&prev, &unlinked);
            if str_at(&v, &["link"]) != Some(link.as_str()) {
                return fail(place, "`link` does not continue the traffic chain (a line changed, dropped or moved)");
            }
            if jcs::to_string(&v) != line {
                return fail(place, "not in the module's one canonical form (RFC 8785)");
            }
            prev = link;
        }
        s.traffic = true;
        self.pass("traffic");
        Ok(())
    }

    /// 11. The receipt's content, then the pins of every file (run.json last).
    fn receipt(&mut self, s: &Seen) -> Result<(), Failure> {
        let (run_bytes, report_bytes) = (self.file("run.json"), self.file("report.json"));
        let (receipt, run, report, h) = (s.receipt.as_ref().expect("form"), s.run.as_ref().expect("layout"), s.report.as_ref().expect("read"), &s.head);
        if receipt.get("report").map(jcs::to_string).as_deref().map(str::as_bytes) != Some(report_bytes) {
            return fail("receipt.json", "`report` is not report.json");
        }
        if str_at(receipt, &["report_sha256"]) != Some(sha256_hex(report_bytes).as_str()) {
            return fail("receipt.json", "`report_sha256` is not report.json's sha256");
        }
        if str_at(receipt, &["chain_head"]) != Some(h.as_str()) {
            return fail("receipt.json", format!("`chain_head` is not the chain's head {h}"));
        }
        let module = &self.options.module_sha256;
        if str_at(receipt, &["module_sha256"]) != Some(module.as_str()) {
            return fail(
                "receipt.json",
                format!("`module_sha256` is {}, but this host embeds (and replayed with) {module}", shown(receipt.get("module_sha256"))),
            );
        }
        let host = receipt.get("host");
        let known = host.and_then(|h| str_at(h, &["name"])).is_some_and(|n| KNOWN_HOSTS.contains(&n));
        if !known || host.map(keys).map(|k| k.len()) != Some(2) || host.and_then(|h| str_at(h, &["version"])).is_none() {
            return fail("receipt.json", format!("`host` must be {{name, version}} with a name of {}", KNOWN_HOSTS.join(", ")));
        }
        let mut files: Vec<(&str, String)> =
            vec![(&s.doc_file, sha256_hex(self.file(&s.doc_file))), ("events.ndjson", s.events_source_sha.clone()), ("report.json", sha256_hex(report_bytes))];
        if let Some(e) = self.envelope_bytes(s) {
            files.push(("envelope.json", sha256_hex(e)));
        }
        let pins: &[crate::value::Member] = match receipt.get("artifacts").map(|a| &a.value) {
            Some(Value::Obj(m)) => m,
            _ => &[],
        };
        let pin = |name: &str| pins.iter().find(|m| m.key == name).and_then(|m| m.value.as_str());
        if s.signatures {
            let b = self.file(SIGNATURES);
            if !b.is_empty() || pins.iter().any(|m| m.key == SIGNATURES) {
                files.push((SIGNATURES, sha256_hex(b)));
            }
        }
        if s.shadow {
            files.push((SHADOW, sha256_hex(self.file(SHADOW))));
        }
        if s.traffic {
            files.push((TRAFFIC, sha256_hex(self.file(TRAFFIC))));
        }
        if pins.len() != files.len() + 1 {
            return fail("receipt.json", "`artifacts` does not pin exactly the bundle's other files");
        }
        for (name, sha) in &files {
            if pin(name) != Some(sha.as_str()) {
                let place = if *name == "events.ndjson" && self.v.redacted { "derivation.json" } else { "receipt.json" };
                return fail(place, format!("`artifacts` of receipt.json does not pin {name}'s sha256"));
            }
        }
        // run.json is the receipt's: from here on, a disagreement between them is the receipt's.
        let run_sha = sha256_hex(run_bytes);
        match pin("run.json") {
            Some(p) if p == run_sha => {}
            Some(p) => return fail("run.json", format!("its sha256 is {run_sha}, receipt.json pins {p}")),
            None => return fail("receipt.json", "`artifacts` does not pin run.json"),
        }
        if !same(run.get("module_sha256"), receipt.get("module_sha256")) {
            return fail("run.json", "`module_sha256` is not the receipt's");
        }
        if !same(run.get("host"), receipt.get("host")) {
            return fail("receipt.json", "`host` is not the host run.json records");
        }
        if !same(run.get("outcome"), report.get("outcome")) {
            return fail("run.json", "`outcome` is not the report's");
        }
        // The receipt's bytes are the module's composition of these very files: anything the checks above
        // do not name (an extra member, another order, another number form) is caught here.
        let hashes = jcs::obj_owned(files.iter().filter(|(n, _)| *n != "report.json").map(|(n, sha)| (n.to_string(), jcs::s(sha))).collect());
        let run_text = String::from_utf8_lossy(run_bytes);
        let report_text = String::from_utf8_lossy(report_bytes);
        let receipt_text = String::from_utf8_lossy(self.file("receipt.json"));
        if let Err(why) = bundle::check_receipt(&run_text, &report_text, h, &jcs::to_string(&hashes), &receipt_text) {
            return fail("receipt.json", format!("it is not the policy module's receipt of this bundle: {why}"));
        }
        let lifecycle: &[Node] = match run.get("lifecycle").map(|l| &l.value) {
            Some(Value::Arr(l)) => l,
            _ => &[],
        };
        let ok_time = |e: &Node| str_at(e, &["at"]).is_some_and(|t| t.len() >= 20 && t.ends_with('Z') && t.as_bytes()[10] == b'T');
        if lifecycle.first().and_then(|e| str_at(e, &["event"])) != Some("created")
            || lifecycle.last().and_then(|e| str_at(e, &["event"])) != Some("ended")
            || !lifecycle.iter().all(ok_time)
        {
            return fail("run.json", "`lifecycle` must run from `created` to `ended`, each with a UTC RFC 3339 time");
        }
        self.pass("receipt");
        Ok(())
    }
}

/// `run.json` says the run's approvals had to be signed.
fn signatures_required(run: &Node) -> bool {
    matches!(get(run, &["approvals", "signed"]).map(|n| &n.value), Some(Value::Bool(true)))
}

fn is_digest(n: Option<&Node>) -> bool {
    n.and_then(Node::as_str).is_some_and(is_hex64)
}

/// Why a verified bundle is `local_only` rather than `share_ready`.
fn share_safety(events: &Events, entries: &[(String, Item)]) -> Vec<(&'static str, String)> {
    let mut reasons = Vec::new();
    let (args, results, raw) = events.raw;
    if args {
        reasons.push(("RAW_TOOL_ARGUMENTS", "events.ndjson holds raw tool arguments".to_string()));
    }
    if results {
        reasons.push(("RAW_TOOL_RESULTS", "events.ndjson holds raw tool results".to_string()));
    }
    if raw {
        reasons.push(("RAW_EVENT_TEXT", "events.ndjson holds malformed event lines verbatim".to_string()));
    }
    let channel = ["pending", "approvals", "consumed"].iter().any(|d| entries.iter().any(|(n, i)| n == d && matches!(i, Item::Dir(c) if *c > 0)));
    if channel {
        reasons.push(("APPROVAL_REQUESTS", "the approval channel (pending/, approvals/, consumed/) holds requested calls and their arguments".to_string()));
    }
    reasons
}

/// A redacted derivative of the finished bundle whose top-level entries are `entries` (docs/spec/bundle.md#share-safety-and-redaction):
/// the effects that write `<run-id>/` under an output root: every file copied as it is but
/// `events.ndjson`, whose events are stored in their chain form (arguments and results replaced by the
/// hex sha256 of their JCS, so the chain, the decisions and the receipt still verify), and
/// `derivation.json`, which records each file's digests and the approval channel omitted. `at`: Unix
/// milliseconds, the derivation's `created_at`.
pub fn redact(entries: &[(String, Item)], at: u64) -> Result<Vec<bundle::Effect>, String> {
    let file = |name: &str| match entries.iter().find(|(n, _)| n == name).map(|(_, i)| i) {
        Some(Item::File(b)) => Ok(Some(b.as_slice())),
        Some(_) => Err(format!("{name}: not a regular file")),
        None => Ok(None),
    };
    if entries.iter().any(|(n, _)| n == "derivation.json") {
        return Err("this bundle is already a redacted derivative".into());
    }
    let run_bytes = file("run.json")?.ok_or("run.json: missing")?;
    let run = parse("run.json", run_bytes).map_err(|(p, m)| format!("{p}: {m}"))?;
    let run_id = str_at(&run, &["run_id"]).filter(|r| bundle::is_safe_name(r)).ok_or("run.json has no usable run_id")?;
    let doc_file = match str_at(&run, &["artifacts", "document"]) {
        Some(f @ ("runbook.yaml" | "runbook.json")) => f,
        _ => return Err("run.json names no document".into()),
    };
    let mut copy = vec!["run.json", doc_file, "report.json", "receipt.json"];
    if str_at(&run, &["artifacts", "envelope"]).is_some() {
        copy.push("envelope.json");
    }
    // Signed answers, a shadow run's list and the traffic besides tool calls hold hashes only; the
    // receipt's signature still holds over the copied receipt.
    for f in [SIGNATURES, SHADOW, TRAFFIC, bundle::RECEIPT_SIGNATURE] {
        if matches!(file(f)?, Some(_)) {
            copy.push(f);
        }
    }
    let mut effects = vec![bundle::Effect { op: bundle::Op::CreateDir, path: run_id.to_string(), bytes: Vec::new() }];
    let mut files: Vec<(String, Node)> = Vec::new();
    let entry = |path: &str, action: &str, src: &str, out: &str| {
        jcs::obj(vec![("path", jcs::s(path)), ("action", jcs::s(action)), ("source_sha256", jcs::s(src)), ("output_sha256", jcs::s(out))])
    };
    for f in copy {
        let bytes = file(f)?.ok_or_else(|| format!("{f}: missing"))?;
        let sha = sha256_hex(bytes);
        files.push((f.to_string(), entry(f, "copied", &sha, &sha)));
        effects.push(bundle::Effect { op: bundle::Op::Write, path: format!("{run_id}/{f}"), bytes: bytes.to_vec() });
    }
    let source = file("events.ndjson")?.ok_or("events.ndjson: missing")?;
    let records = read_events(source).map_err(|(n, m)| format!("events.ndjson:{n}: {m}"))?;
    let mut redacted = String::new();
    for r in &records {
        redacted.push_str(&bundle::record_line(&r.h, &crate::chain::redacted_line(&r.event_line), &r.decision_line, None));
    }
    files.push(("events.ndjson".into(), entry("events.ndjson", "redacted", &sha256_hex(source), &sha256_hex(redacted.as_bytes()))));
    effects.push(bundle::Effect { op: bundle::Op::Write, path: format!("{run_id}/events.ndjson"), bytes: redacted.into_bytes() });
    for d in ["pending", "approvals", "consumed"] {
        if entries.iter().any(|(n, i)| n == d && matches!(i, Item::Dir(_))) {
            let path = format!("{d}/");
            let omitted =
                jcs::obj(vec![("path", jcs::s(&path)), ("action", jcs::s("omitted")), ("reason", jcs::s("the approval channel holds call arguments"))]);
            files.push((path, omitted));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let derivation = jcs::obj(vec![
        ("schema", jcs::s(DERIVATION_SCHEMA)),
        ("source_run_id", jcs::s(run_id)),
        ("created_at", jcs::s(&bundle::rfc3339_ms(at))),
        ("transformation", jcs::s(REDACTION)),
        ("files", jcs::arr(files.into_iter().map(|(_, n)| n).collect())),
    ]);
    effects.push(bundle::Effect { op: bundle::Op::Write, path: format!("{run_id}/derivation.json"), bytes: bundle::pretty(&derivation).into_bytes() });
    Ok(effects)
}

/// What a replay of a recorded run established (resume).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    /// The chain's head after the last record.
    pub head: String,
    pub events: u64,
    /// The last event's `at` (a run the module accepted never goes back in time).
    pub last_at: u64,
}

/// Replays the records of `events.ndjson` (`bytes`) into `session`, from the link `h0`: every record must
/// be in its one allowed form, continue the chain and be decided as recorded. The error names the line.
pub fn replay_events(session: &mut Session, bytes: &[u8], h0: &str) -> Result<Replayed, Failure> {
    let records = read_events(bytes).or_else(|(n, m)| fail(format!("events.ndjson:{n}"), m))?;
    let mut head = h0.to_string();
    for (i, r) in records.iter().enumerate() {
        let (decision_line, link) = session.replay_line(&r.event_line, &head);
        if link != r.h {
            return fail(format!("events.ndjson:{}", i + 1), "the hash chain is broken");
        }
        if decision_line != r.decision_line {
            return fail(format!("events.ndjson:{}", i + 1), "the module decides this event differently than recorded");
        }
        head = link;
    }
    let last_at = records.last().and_then(|r| json::parse(&r.event_line).node).and_then(|n| u64_of(n.get("at"))).unwrap_or(0);
    Ok(Replayed { head, events: records.len() as u64, last_at })
}

/// The signed answers a run that requires signed approvals must hold so far (resume): one for every
/// approval event the module did not halt on, found in `signatures.ndjson` by its `seq`, with the payload
/// made from the event as the module judged it (the request it names, which the ledger lets be answered
/// once), never from what the signature line says. The host checks each signature's bytes against its
/// allowed signers for the event's approver. The error names the approval event no line answers.
pub fn signed_history(run_id: &str, events: &[u8], signatures: &[u8]) -> Result<Vec<SignedAnswer>, Failure> {
    let records = read_events(events).or_else(|(n, m)| fail(format!("events.ndjson:{n}"), m))?;
    let lines: Vec<Node> = String::from_utf8_lossy(signatures).lines().filter_map(|l| json::parse(l).node).collect();
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if r.decision_line.starts_with("{\"decision\":\"halt\"") {
            continue;
        }
        let Some(e) = json::parse(&r.event_line).node.filter(|e| str_at(e, &["type"]) == Some("approval")) else { continue };
        let place = format!("events.ndjson:{}", i + 1);
        let unsigned = || fail(place.clone(), "an approval no key of the allowed signers signed");
        let Some(line) = lines.iter().find(|l| u64_of(l.get("seq")) == Some(i as u64)) else { return unsigned() };
        let (Some(request), Some(sha)) = (u64_of(e.get("request")), str_at(&e, &["call_sha256"])) else { return unsigned() };
        let granted = matches!(e.get("granted").map(|n| &n.value), Some(Value::Bool(true)));
        out.push(SignedAnswer {
            place: place.clone(),
            principal: str_at(&e, &["approver"]).unwrap_or("").to_string(),
            message: crate::approval_payload(run_id, request, str_at(&e, &["step"]), sha, granted),
            signature: str_at(line, &["signature"]).unwrap_or("").to_string(),
            fingerprint: str_at(line, &["fingerprint"]).unwrap_or("").to_string(),
        });
    }
    Ok(out)
}
