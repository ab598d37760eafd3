//! Fail-closed verification of a run bundle (DESIGN 5, seed 002), as a library: `runbook-host verify`
//! prints what [`verify_dir_with`] finds, and the fuzz target `verify` feeds it mutated bundles. Checks, in
//! order, stopping at the first failure and naming its place (a file, or `events.ndjson:N`):
//!
//! 1. `run.json` parses, is a `runbook-run-bundle/v1` with the fixed layout of relative artifact names;
//! 2. every artifact is present (and a regular file inside the bundle: the directory is a `cap-std`
//!    capability, so no name can reach outside it);
//! 3. `receipt.json` is canonical JSON with exactly the `runbook-receipt/v1` keys;
//! 4. no absolute path in `run.json`, the report or the receipt;
//! 5. the document's sha256 agrees with `run.json`, the envelope, the report (and the registry pin, T2);
//! 6. `envelope.json` is the module's envelope of the document, byte for byte, and its sha256 is the one
//!    `run.json` and the report name;
//! 7. `events.ndjson`: every line has the documented shape and its `h` continues the chain (9.22), and a
//!    replay of its events through the embedded module reproduces every decision line byte for byte;
//! 8. `report.json` is the replay's report byte for byte;
//! 9. the receipt: its report is `report.json`, `report_sha256`, `chain_head`, `module_sha256` (the module
//!    that replayed it), the host, and its `artifacts` pins of every other file (`run.json` last).
//!
//! Then share safety: `blocked` when a check failed, `local_only` when raw tool arguments or results (or
//! approval requests, which hold arguments) are inside, else `share_ready`.

use crate::bundle::{self, sha256_hex};
use cap_std::fs::Dir;
use serde_json::{json, Value};

/// Checks the receipt's signature (`receipt.dsse.json`): against `keys` when given (and then one is
/// required), else against the key `run.json` names when it announces one. Returns the signer's key id and
/// whether it was one of `keys`.
pub fn receipt_signature(dir: &Dir, keys: &[ed25519_dalek::VerifyingKey]) -> Result<Option<(String, bool)>, Failure> {
    let run: Value = parse_json("run.json", &read(dir, "run.json")?)?;
    let announced = &run["receipt_signature"];
    let envelope = match dir.read(bundle::RECEIPT_SIGNATURE) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return fail(bundle::RECEIPT_SIGNATURE, e.to_string()),
    };
    let Some(envelope) = envelope else {
        if !announced.is_null() {
            return fail(bundle::RECEIPT_SIGNATURE, "missing: run.json says the receipt was signed (`receipt_signature`), and the signature is gone");
        }
        if !keys.is_empty() {
            return fail(bundle::RECEIPT_SIGNATURE, "missing: the receipt is not signed, and --key requires a signature");
        }
        return Ok(None);
    };
    let (trusted, given) = if keys.is_empty() {
        let pem = announced["public_key"].as_str().ok_or_else(|| Failure {
            place: "run.json".into(),
            message: format!("{} is present but run.json names no `receipt_signature.public_key`", bundle::RECEIPT_SIGNATURE),
        })?;
        (vec![crate::dsse::read_public(pem).map_err(|e| Failure { place: "run.json".into(), message: format!("`receipt_signature.public_key`: {e}") })?], false)
    } else {
        (keys.to_vec(), true)
    };
    let receipt = read(dir, "receipt.json")?;
    let v = crate::dsse::verify_envelope(&envelope, &trusted, &sha256_hex(&receipt), crate::dsse::RECEIPT_PREDICATE, i64::MIN)
        .map_err(|e| Failure { place: bundle::RECEIPT_SIGNATURE.into(), message: format!("{}: {}", e.code, e.message) })?;
    if let Some(id) = announced["key_id"].as_str() {
        if id != v.key_id {
            return fail("run.json", format!("`receipt_signature.key_id` is {id}, the receipt is signed by {}", v.key_id));
        }
    }
    // DSSE leaves a signature's keyid unauthenticated and lets an envelope carry more signatures than the
    // one that verifies; a receipt's envelope is the host's own, written with exactly one signature named
    // by its key: anything else in it is something nobody signed.
    let sigs = parse_json_strict(bundle::RECEIPT_SIGNATURE, &envelope)?;
    let sigs = sigs["signatures"].as_array().cloned().unwrap_or_default();
    if sigs.len() != 1 || sigs[0]["keyid"] != v.key_id.as_str() {
        return fail(bundle::RECEIPT_SIGNATURE, format!("a receipt's envelope holds exactly one signature, with keyid {}", v.key_id));
    }
    Ok(Some((v.key_id, given)))
}

pub const VERIFY_SCHEMA: &str = "runbook-verify-result/v1";

/// A failed check: where, and why.
#[derive(Debug)]
pub struct Failure {
    pub place: String,
    pub message: String,
}

fn fail<T>(place: impl Into<String>, message: impl Into<String>) -> Result<T, Failure> {
    Err(Failure { place: place.into(), message: message.into() })
}

/// What verification found.
pub struct Outcome {
    pub checks: Vec<(&'static str, bool)>,
    pub failure: Option<Failure>,
    pub run_id: Option<String>,
    pub outcome: Option<String>,
    pub events: usize,
    pub reasons: Vec<(&'static str, String)>,
    pub warnings: Vec<String>,
    /// A redacted derivative: chain and receipt verified, not replayed.
    pub redacted: bool,
    /// Signed approvals checked, and whether against the verifier's `--allowed-signers`.
    pub signed: (usize, bool),
    /// A shadow run (`run --mode shadow`): how many calls the module did not allow ran anyway.
    pub shadow: Option<usize>,
    /// The receipt's signer (its key id) and whether it was one of the keys given ([`verify_bundle`]).
    pub receipt_signed: Option<(String, bool)>,
}

/// Everything `runbook-host verify` checks: [`verify_dir_with`] and then, when that passed, the receipt's
/// signature ([`receipt_signature`]; listed as the check `receipt-signature` only where there is one to
/// check or `keys` asked for one).
pub fn verify_bundle(dir: &Dir, signers: Option<crate::run::Signers>, keys: &[ed25519_dalek::VerifyingKey]) -> Outcome {
    let mut o = verify_dir_with(dir, signers);
    if o.failure.is_none() {
        match receipt_signature(dir, keys) {
            Ok(s) => o.receipt_signed = s,
            Err(f) => o.failure = Some(f),
        }
        if o.receipt_signed.is_some() || o.failure.is_some() {
            o.checks.push(("receipt-signature", o.failure.is_none()));
        }
    }
    o
}

struct Ctx {
    checks: Vec<(&'static str, bool)>,
    run_id: Option<String>,
    outcome: Option<String>,
    events: usize,
    reasons: Vec<(&'static str, String)>,
    warnings: Vec<String>,
    redacted: bool,
    /// The signers the verifier trusts (`--allowed-signers`), if any.
    signers: Option<crate::run::Signers>,
    /// Signed approvals checked, and whether against the trusted signers.
    signed: (usize, bool),
    shadow: Option<usize>,
}

impl Ctx {
    fn pass(&mut self, id: &'static str) {
        self.checks.push((id, true));
    }
}

fn read(dir: &Dir, name: &str) -> Result<Vec<u8>, Failure> {
    match dir.symlink_metadata(name) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return fail(name, "not a regular file"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return fail(name, "missing"),
        Err(e) => return fail(name, format!("cannot be read: {e}")),
    }
    dir.read(name).or_else(|e| fail(name, format!("cannot be read: {e}")))
}

fn parse_json(name: &str, bytes: &[u8]) -> Result<Value, Failure> {
    serde_json::from_slice(bytes).or_else(|e| fail(name, format!("not JSON: {e}")))
}

/// [`parse_json`], refusing an object with a key twice (serde_json keeps the last; another reader may
/// keep the first): for a file whose bytes nothing pins.
fn parse_json_strict(name: &str, bytes: &[u8]) -> Result<Value, Failure> {
    struct Strict(Value);
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Value;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
            Ok(v.into())
        }
        fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
            Ok(v.into())
        }
        fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
            Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
        }
        fn visit_str<E>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_string()))
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            let mut out = Vec::new();
            while let Some(Strict(v)) = a.next_element()? {
                out.push(v);
            }
            Ok(Value::Array(out))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            let mut out = serde_json::Map::new();
            while let Some(k) = a.next_key::<String>()? {
                if out.contains_key(&k) {
                    return Err(serde::de::Error::custom(format!("the key `{k}` appears twice")));
                }
                let Strict(v) = a.next_value()?;
                out.insert(k, v);
            }
            Ok(Value::Object(out))
        }
    }
    impl<'de> serde::Deserialize<'de> for Strict {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
            d.deserialize_any(V).map(Strict)
        }
    }
    serde_json::from_slice::<Strict>(bytes).map(|s| s.0).or_else(|e| fail(name, format!("not JSON: {e}")))
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

fn find_absolute(v: &Value, at: &str) -> Option<String> {
    match v {
        Value::String(s) if looks_absolute(s) => Some(at.to_string()),
        Value::Array(a) => a.iter().enumerate().find_map(|(i, x)| find_absolute(x, &format!("{at}/{i}"))),
        Value::Object(o) => o.iter().find_map(|(k, x)| if looks_absolute(k) { Some(format!("{at}/{k}")) } else { find_absolute(x, &format!("{at}/{k}")) }),
        _ => None,
    }
}

const RECEIPT_KEYS: [&str; 7] = ["artifacts", "chain_head", "host", "module_sha256", "report", "report_sha256", "schema"];

/// Runs every check on the bundle in `dir`.
pub fn verify_dir(dir: &Dir) -> Outcome {
    verify_dir_with(dir, None)
}

/// [`verify_dir`], checking signed approvals against the signers the verifier trusts.
pub fn verify_dir_with(dir: &Dir, signers: Option<crate::run::Signers>) -> Outcome {
    let mut cx = Ctx {
        checks: Vec::new(),
        run_id: None,
        outcome: None,
        events: 0,
        reasons: Vec::new(),
        warnings: Vec::new(),
        redacted: false,
        signers,
        signed: (0, false),
        shadow: None,
    };
    let failure = checks(dir, &mut cx).err();
    if failure.is_none() {
        share_safety(dir, &mut cx);
    }
    Outcome {
        checks: cx.checks,
        failure,
        run_id: cx.run_id,
        outcome: cx.outcome,
        events: cx.events,
        reasons: cx.reasons,
        warnings: cx.warnings,
        redacted: cx.redacted,
        signed: cx.signed,
        shadow: cx.shadow,
        receipt_signed: None,
    }
}

/// What the checks have read and established so far, handed from each numbered check to the next.
struct Seen {
    run_bytes: Vec<u8>,
    run: Value,
    run_id: String,
    doc_file: String,
    has_envelope: bool,
    doc: Vec<u8>,
    envelope: Option<Vec<u8>>,
    env_v: Option<Value>,
    events_bytes: Vec<u8>,
    report_bytes: Vec<u8>,
    report: Value,
    receipt_bytes: Vec<u8>,
    receipt_text: String,
    receipt: Value,
    derivation: Option<Value>,
    doc_sha: String,
    h0: String,
    /// The sha256 of the events the receipt pins (the source's, for a redacted derivative).
    events_source_sha: String,
    /// The chain's head after check 7.
    head: String,
    /// Every event and its decision, parsed (check 8 holds a redacted report against them).
    records: Vec<(Value, Value)>,
    /// The recorded lines as written (event, decision), for the module's checks of a redacted derivative.
    lines: Vec<(String, String)>,
    /// `signatures.ndjson`, when the bundle has it or its run required signed approvals.
    signatures: Option<Vec<u8>>,
    /// `shadow.ndjson`, in a shadow run's bundle.
    shadow: Option<Vec<u8>>,
}

fn pins_file(receipt: &Value, name: &str) -> bool {
    receipt["artifacts"].get(name).is_some()
}

fn checks(dir: &Dir, cx: &mut Ctx) -> Result<(), Failure> {
    let policy = crate::bundle::shared_policy().or_else(|e| fail("(module)", e.to_string()))?;
    let mut s = layout(dir, cx)?;
    presence(dir, cx, &mut s)?;
    receipt_form(cx, &mut s)?;
    relative_paths_only(cx, &mut s)?;
    document_sha256(cx, &mut s)?;
    envelope(policy, cx, &mut s)?;
    derivation(dir, cx, &mut s)?;
    let session = events(policy, cx, &mut s)?;
    report(cx, &s, session)?;
    signatures(dir, cx, &mut s)?;
    shadow(dir, cx, &mut s)?;
    receipt(cx, &s)
}

/// A shadow run (`run.json` `mode: shadow`): `shadow.ndjson` is there, and each of its lines names a
/// recorded decision that did not allow the call (its seq, its decision). An enforced run has no such file.
fn shadow(dir: &Dir, cx: &mut Ctx, s: &mut Seen) -> Result<(), Failure> {
    let is_shadow = match &s.run["mode"] {
        Value::Null => false,
        Value::String(m) if m == "shadow" => true,
        m => return fail("run.json", format!("`mode` is {m}: only \"shadow\" (or no `mode`) is known")),
    };
    let present = dir.symlink_metadata(bundle::SHADOW).is_ok();
    if !is_shadow {
        if present {
            return fail(bundle::SHADOW, "present in a run that run.json does not mark as shadow");
        }
        return Ok(());
    }
    if !present {
        return fail(bundle::SHADOW, "missing: run.json marks the run as shadow");
    }
    let bytes = read(dir, bundle::SHADOW)?;
    let text = std::str::from_utf8(&bytes).or_else(|_| fail(bundle::SHADOW, "not UTF-8"))?;
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let place = format!("{}:{}", bundle::SHADOW, i + 1);
        let v: Value = serde_json::from_str(line).or_else(|e| fail(&place, format!("not JSON: {e}")))?;
        let seq = v["seq"].as_u64().ok_or_else(|| Failure { place: place.clone(), message: "no `seq`".into() })?;
        let recorded = s.records.iter().find(|(_, d)| d["seq"].as_u64() == Some(seq)).map(|(_, d)| d["decision"].clone());
        match recorded {
            Some(d) if d != "allow" && d == v["decision"] => {}
            Some(d) => return fail(&place, format!("names seq {seq} as `{}`, but its recorded decision is {d}", v["decision"])),
            None => return fail(&place, format!("names seq {seq}, which no recorded decision has")),
        }
        n += 1;
    }
    s.shadow = Some(bytes);
    cx.shadow = Some(n);
    Ok(())
}

/// 1. The manifest and its layout.
fn layout(dir: &Dir, cx: &mut Ctx) -> Result<Seen, Failure> {
    let run_bytes = read(dir, "run.json")?;
    let run = parse_json("run.json", &run_bytes)?;
    if run["schema"] != bundle::RUN_SCHEMA {
        return fail("run.json", format!("`schema` is not `{}`", bundle::RUN_SCHEMA));
    }
    let run_id = run["run_id"].as_str().filter(|s| bundle::is_safe_name(s));
    let Some(run_id) = run_id else { return fail("run.json", "`run_id` is missing or not a plain name") };
    let run_id = run_id.to_string();
    cx.run_id = Some(run_id.clone());
    let a = &run["artifacts"];
    let doc_file = match a["document"].as_str() {
        Some(f @ ("runbook.yaml" | "runbook.json")) => f.to_string(),
        _ => return fail("run.json", "`artifacts.document` must be `runbook.yaml` or `runbook.json`"),
    };
    let has_envelope = match &a["envelope"] {
        Value::Null => false,
        Value::String(s) if s == "envelope.json" => true,
        _ => return fail("run.json", "`artifacts.envelope` must be `envelope.json` or null"),
    };
    for (k, f) in [("run", "run.json"), ("events", "events.ndjson"), ("report", "report.json"), ("receipt", "receipt.json")] {
        if a[k] != f {
            return fail("run.json", format!("`artifacts.{k}` must be the relative path `{f}`"));
        }
    }
    if a.as_object().map(|o| o.len()) != Some(6) {
        return fail("run.json", "`artifacts` names an unknown artifact");
    }
    if run["document"]["file"] != doc_file.as_str() {
        return fail("run.json", "`document.file` is not the document artifact");
    }
    cx.pass("layout");
    Ok(Seen {
        run_bytes,
        run,
        run_id,
        doc_file,
        has_envelope,
        doc: Vec::new(),
        envelope: None,
        env_v: None,
        events_bytes: Vec::new(),
        report_bytes: Vec::new(),
        report: Value::Null,
        receipt_bytes: Vec::new(),
        receipt_text: String::new(),
        receipt: Value::Null,
        derivation: None,
        doc_sha: String::new(),
        h0: String::new(),
        events_source_sha: String::new(),
        head: String::new(),
        records: Vec::new(),
        lines: Vec::new(),
        signatures: None,
        shadow: None,
    })
}

/// 2. Presence.
fn presence(dir: &Dir, cx: &mut Ctx, s: &mut Seen) -> Result<(), Failure> {
    s.doc = read(dir, &s.doc_file)?;
    s.envelope = if s.has_envelope { Some(read(dir, "envelope.json")?) } else { None };
    s.events_bytes = read(dir, "events.ndjson")?;
    s.report_bytes = read(dir, "report.json").map_err(|f| match (f.message.as_str(), s.run.get("ended_without_report")) {
        // Why there is no report, as run.json says: so an auditor tells a run its host could not end
        // (a trap, a full disk) from one still running or killed.
        ("missing", Some(code)) => Failure {
            place: f.place,
            message: format!("missing: the run ended without a report ({}): nothing vouches for its outcome", code.as_str().unwrap_or("?")),
        },
        ("missing", None) if !s.run["lifecycle"].as_array().is_some_and(|l| l.iter().any(|e| e["event"] == "ended")) => {
            Failure { place: f.place, message: "missing: the run has not ended (it is still running, or its host was stopped before it could end it)".into() }
        }
        _ => f,
    })?;
    s.receipt_bytes = read(dir, "receipt.json")?;
    // A redacted derivative (`export --redact`) carries derivation.json: its chain and receipt verify, its
    // events cannot be replayed.
    s.derivation = match dir.symlink_metadata("derivation.json") {
        Ok(_) => Some(parse_json_strict("derivation.json", &read(dir, "derivation.json")?)?),
        Err(_) => None,
    };
    cx.pass("files-present");
    Ok(())
}

/// 3. The receipt's form.
fn receipt_form(cx: &mut Ctx, s: &mut Seen) -> Result<(), Failure> {
    s.receipt_text = std::str::from_utf8(&s.receipt_bytes).or_else(|_| fail("receipt.json", "not UTF-8"))?.to_string();
    s.receipt = parse_json("receipt.json", &s.receipt_bytes)?;
    let policy = crate::bundle::shared_policy().or_else(|e| fail("(module)", e.to_string()))?;
    match policy.canonicalize(&s.receipt_text) {
        Ok(Ok(c)) if c == s.receipt_text => {}
        _ => return fail("receipt.json", "not canonical JSON (RFC 8785)"),
    }
    let keys: Vec<&str> = s.receipt.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
    if keys != RECEIPT_KEYS {
        return fail("receipt.json", format!("the keys must be exactly {}", RECEIPT_KEYS.join(", ")));
    }
    if s.receipt["schema"] != bundle::RECEIPT_SCHEMA {
        return fail("receipt.json", format!("`schema` is not `{}`", bundle::RECEIPT_SCHEMA));
    }
    cx.pass("receipt-form");
    Ok(())
}

/// 4. No absolute path in the bundle's own metadata.
fn relative_paths_only(cx: &mut Ctx, s: &mut Seen) -> Result<(), Failure> {
    s.report = parse_json("report.json", &s.report_bytes)?;
    for (name, v) in [("run.json", &s.run), ("report.json", &s.report), ("receipt.json", &s.receipt)] {
        if let Some(at) = find_absolute(v, "") {
            return fail(name, format!("an absolute path at {at}"));
        }
    }
    cx.pass("relative-paths-only");
    Ok(())
}

/// 5. The document's hash, everywhere it is named.
fn document_sha256(cx: &mut Ctx, s: &mut Seen) -> Result<(), Failure> {
    let doc_sha = sha256_hex(&s.doc);
    s.env_v = match &s.envelope {
        Some(e) => Some(parse_json("envelope.json", e)?),
        None => None,
    };
    let (run, report) = (&s.run, &s.report);
    let report_doc_sha = report["document"]["sha256"].as_str().unwrap_or("");
    let env_doc_sha = s.env_v.as_ref().map(|e| e["document"]["sha256"].as_str().unwrap_or("").to_string());
    let run_doc_sha = run["document"]["sha256"].as_str().unwrap_or("");
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
    match (run["document"]["trust"].as_str(), &run["document"]["pinned_sha256"]) {
        (Some("T1"), Value::Null) => {}
        (Some("T2"), Value::String(p)) if *p == doc_sha => {}
        (Some("T2"), _) => return fail("run.json", "`document.pinned_sha256` is not the document's sha256"),
        _ => return fail("run.json", "`document.trust` must be T1 (unpinned) or T2 (pinned)"),
    }
    s.doc_sha = doc_sha;
    cx.pass("document-sha256");
    Ok(())
}

/// 6. The envelope: the module's, byte for byte, and the chain's start.
fn envelope(policy: &crate::Policy, cx: &mut Ctx, s: &mut Seen) -> Result<(), Failure> {
    let derived = policy.envelope(&s.doc).or_else(|e| fail("(module)", e.to_string()))?;
    let env_sha = match (&s.envelope, derived) {
        (Some(e), Ok(d)) => {
            if e.as_slice() != d.as_bytes() {
                return fail("envelope.json", "not the module's envelope of the document, byte for byte");
            }
            Some(sha256_hex(e))
        }
        (None, Err(_)) => None,
        (None, Ok(_)) => return fail("run.json", "the document has an envelope, but the bundle records none"),
        (Some(_), Err(_)) => return fail("envelope.json", "the document has no complete model, so no envelope"),
    };
    if let Some(ev) = &s.env_v {
        for k in ["runbook_id", "version"] {
            if s.run["document"][k] != ev["document"][k] {
                return fail("run.json", format!("`document.{k}` is not the envelope's"));
            }
        }
    }
    if s.report["envelope_sha256"].as_str() != env_sha.as_deref() {
        return fail("report.json", "`envelope_sha256` is not the envelope's sha256");
    }
    if s.run["envelope_sha256"].as_str() != env_sha.as_deref() {
        return fail("run.json", "`envelope_sha256` is not the envelope's sha256");
    }
    s.h0 = bundle::chain_h0(s.envelope.as_deref().map(|e| std::str::from_utf8(e).unwrap_or("")), &s.doc_sha);
    if s.run["chain_h0"] != s.h0.as_str() {
        return fail("run.json", "`chain_h0` is not the chain's start");
    }
    cx.pass("envelope");
    Ok(())
}

/// 6b. The derivation of a redacted derivative.
fn derivation(dir: &Dir, cx: &mut Ctx, s: &mut Seen) -> Result<(), Failure> {
    s.events_source_sha = sha256_hex(&s.events_bytes);
    let Some(d) = &s.derivation else { return Ok(()) };
    cx.redacted = true;
    if d["schema"] != bundle::DERIVATION_SCHEMA || d["transformation"] != bundle::REDACTION {
        return fail("derivation.json", format!("not a {} of `{}`", bundle::DERIVATION_SCHEMA, bundle::REDACTION));
    }
    if d["source_run_id"] != s.run_id.as_str() {
        return fail("derivation.json", "`source_run_id` is not the bundle's run id");
    }
    // Its own bytes are pinned nowhere: it says exactly what its schema allows and nothing else (no key a
    // reader could take for a claim verify never checked, no duplicate key read one way here and another
    // way elsewhere), and every file it names is in the bundle with the digest it gives.
    fn keys(v: &Value) -> std::collections::BTreeSet<&str> {
        v.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default()
    }
    if keys(d) != ["created_at", "files", "schema", "source_run_id", "transformation"].into() {
        return fail("derivation.json", "the keys must be exactly schema, source_run_id, created_at, transformation, files");
    }
    if !d["created_at"].as_str().is_some_and(is_rfc3339_ms) {
        return fail("derivation.json", "`created_at` is not a UTC RFC 3339 time with milliseconds");
    }
    let files = d["files"].as_array().cloned().unwrap_or_default();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap_or("")).collect();
    if files.is_empty() || !paths.windows(2).all(|w| w[0] < w[1]) {
        return fail("derivation.json", "`files` must be sorted by path, each path once");
    }
    for f in &files {
        let path = f["path"].as_str().unwrap_or("");
        let (allowed, want): (bool, &[&str]) = match f["action"].as_str() {
            Some("copied") => {
                (!path.ends_with('/') && path != "events.ndjson" && path != "derivation.json", &["action", "output_sha256", "path", "source_sha256"])
            }
            Some("redacted") => (path == "events.ndjson", &["action", "output_sha256", "path", "source_sha256"]),
            Some("omitted") => {
                (matches!(path, "pending/" | "approvals/" | "consumed/") && f["reason"].as_str().is_some_and(|r| !r.is_empty()), &["action", "path", "reason"])
            }
            _ => (false, &[]),
        };
        if !allowed || keys(f) != want.iter().copied().collect() {
            return fail("derivation.json", format!("`files` entry `{path}` is not one a redaction writes"));
        }
        if f["action"] == "copied" {
            let bytes = read(dir, path)?;
            let sha = sha256_hex(&bytes);
            if f["source_sha256"] != sha.as_str() || f["output_sha256"] != sha.as_str() {
                return fail(path, "not the copy derivation.json records");
            }
        }
    }
    let mut copied: Vec<(&str, &[u8])> =
        vec![("run.json", &s.run_bytes), (&s.doc_file, &s.doc), ("report.json", &s.report_bytes), ("receipt.json", &s.receipt_bytes)];
    if let Some(e) = &s.envelope {
        copied.push(("envelope.json", e));
    }
    for (name, bytes) in copied {
        let e = files.iter().find(|f| f["path"] == name);
        let sha = sha256_hex(bytes);
        if !e.is_some_and(|e| e["action"] == "copied" && e["source_sha256"] == sha.as_str() && e["output_sha256"] == sha.as_str()) {
            return fail(name, "not the copy derivation.json records");
        }
    }
    let Some(ev) = files.iter().find(|f| f["path"] == "events.ndjson" && f["action"] == "redacted") else {
        return fail("derivation.json", "records no redacted events.ndjson");
    };
    if ev["output_sha256"] != s.events_source_sha.as_str() {
        return fail("events.ndjson", "not the redacted events derivation.json records");
    }
    s.events_source_sha = ev["source_sha256"]
        .as_str()
        .filter(|x| is_hex64(x))
        .ok_or(Failure { place: "derivation.json".into(), message: "no source sha256 of events.ndjson".into() })?
        .to_string();
    cx.pass("derivation");
    Ok(())
}

/// 7. Events: shape, chain, replay (one call into the module a line: the link and the decision together).
fn events(policy: &crate::Policy, cx: &mut Ctx, s: &mut Seen) -> Result<crate::Session, Failure> {
    let records = bundle::read_events(&s.events_bytes).or_else(|(n, m)| fail(format!("events.ndjson:{n}"), m))?;
    cx.events = records.len();
    let mut h = s.h0.clone();
    let mut session = policy.session(&s.doc).or_else(|e| fail("(module)", e.to_string()))?;
    for (n, r) in records.iter().enumerate() {
        let place = format!("events.ndjson:{}", n + 1);
        if cx.redacted {
            let next = bundle::chain_next_redacted(policy, &h, &r.event_line, &r.decision_line).or_else(|e| fail("(module)", e.to_string()))?;
            if next != r.h {
                return fail(place, format!("the hash chain breaks: `h` is {}, the chain gives {next}", r.h));
            }
            h = next;
            s.records.push((serde_json::from_str(&r.event_line).unwrap_or_default(), serde_json::from_str(&r.decision_line).unwrap_or_default()));
            s.lines.push((r.event_line.clone(), r.decision_line.clone()));
            continue;
        }
        let (decision_line, link) =
            session.replay_line(&r.event_line, &h).or_else(|t| fail("(module)", format!("the policy module trapped: {}", t.message)))?;
        if link != r.h {
            return fail(place, format!("the hash chain breaks: `h` is {}, the chain gives {link}", r.h));
        }
        h = link;
        if decision_line != r.decision_line {
            return fail(place, format!("the replay decides {decision_line}, the bundle records {}", r.decision_line));
        }
        s.records.push((serde_json::from_str(&r.event_line).unwrap_or_default(), serde_json::from_str(&r.decision_line).unwrap_or_default()));
    }
    s.head = h;
    cx.pass("hash-chain");
    Ok(session)
}

/// 8. The report: the replay's, byte for byte.
fn report(cx: &mut Ctx, s: &Seen, mut session: crate::Session) -> Result<(), Failure> {
    if cx.redacted {
        // A redacted derivative cannot be replayed, so the module holds its report against what its
        // chained lines say: the refusals of the start, every deviation, every approval event and whether
        // it was accepted, the event count, and the outcome and terminal the decision that ended the run
        // implies. A report relabelled by someone who rewrote it and fixed up its hashes, without
        // rewriting the decisions, is refused there.
        let policy = crate::bundle::shared_policy().or_else(|e| fail("(module)", e.to_string()))?;
        let report_text = String::from_utf8_lossy(&s.report_bytes);
        match policy.check_report(&s.doc, &s.lines, &report_text) {
            Ok(Ok(())) => {}
            Ok(Err((place, why))) => return fail(place, why),
            Err(e) => return fail("(module)", e.to_string()),
        }
        cx.pass("report-decisions");
    } else {
        cx.pass("replay-decisions");
        let replayed = match session.report() {
            Ok(r) => r,
            Err(e) => return fail("events.ndjson", format!("the module cannot make a report of this run: {e}")),
        };
        if replayed.as_bytes() != s.report_bytes.as_slice() {
            return fail("report.json", "not the replay's report, byte for byte");
        }
        cx.pass("replay-report");
    }
    cx.outcome = s.report["outcome"].as_str().map(str::to_string);
    if s.report["run_id"].as_str().is_some_and(|r| r != s.run_id) {
        cx.warnings.push(format!("the start claim's run_id `{}` is not the bundle's `{}`", s.report["run_id"].as_str().unwrap_or(""), s.run_id));
    }
    Ok(())
}

/// 8c. Signed approvals (`signatures.ndjson`): each line answers the approval event at its `seq` (the
/// message is that event's run, request, step, call and answer; the approver is the signing principal)
/// and its SSH signature verifies, by the key it carries and, with `--allowed-signers`, by a key of that
/// file. A run that required signatures has one for every approval event.
fn signatures(dir: &Dir, cx: &mut Ctx, s: &mut Seen) -> Result<(), Failure> {
    use crate::{approvals, sshsig};
    let required = s.run["approvals"]["signed"] == true;
    let bytes = match dir.symlink_metadata(bundle::SIGNATURES) {
        Ok(_) => read(dir, bundle::SIGNATURES)?,
        Err(_) if !required => return Ok(()),
        Err(_) => Vec::new(),
    };
    s.signatures = Some(bytes.clone());
    if let Some(t) = &cx.signers {
        match s.run["approvals"]["allowed_signers_sha256"].as_str() {
            Some(sha) if sha != t.sha256 => return fail("run.json", format!("the run's approvals were signed under another allowed_signers (sha256 {sha})")),
            _ => {}
        }
    }
    let text = std::str::from_utf8(&bytes).or_else(|_| fail(bundle::SIGNATURES, "not UTF-8"))?;
    let mut signed_seqs = Vec::new();
    let mut signed_requests: Vec<u64> = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let place = format!("{}:{}", bundle::SIGNATURES, i + 1);
        let v: Value = serde_json::from_str(l).or_else(|e| fail(&place, format!("not JSON: {e}")))?;
        let seq = v["seq"].as_u64().ok_or_else(|| Failure { place: place.clone(), message: "no `seq`".into() })?;
        let Some((e, d)) = s.records.get(seq as usize).filter(|(e, _)| e["type"] == "approval") else {
            return fail(place, format!("`seq` {seq} is not an approval event"));
        };
        let (granted, sha) = (e["granted"].as_bool().unwrap_or(false), e["call_sha256"].as_str().unwrap_or(""));
        // The payload is the module's, from the approval event as recorded: the request it names (DESIGN
        // 9.19), which the module's ledger lets be answered once (a copy of an answer is refused on replay).
        let Some(request) = e["request"].as_u64() else {
            return fail(place, format!("approval event {seq} names no request, so no signature can answer it"));
        };
        if d["decision"] != "allow" {
            return fail(place, format!("approval event {seq} was refused by the module ({}): a signature answers a request once", d["reason"]));
        }
        if signed_requests.contains(&request) {
            return fail(place, format!("a second signature answers request {request}"));
        }
        signed_requests.push(request);
        let message = approvals::signed_message(&s.run_id, request, e["step"].as_str(), sha, granted).or_else(|e| fail("(module)", e.to_string()))?;
        if v["message"] != message.as_str() || v["request"].as_u64() != Some(request) {
            return fail(place, format!("the signed message is not approval event {seq}'s (run, request, step, call, answer)"));
        }
        let (principal, armored) = (v["principal"].as_str().unwrap_or(""), v["signature"].as_str().unwrap_or(""));
        if e["approver"] != principal {
            return fail(place, format!("approval event {seq} names `{}`, the signature `{principal}`", e["approver"].as_str().unwrap_or("")));
        }
        let own = sshsig::signer_of(armored).and_then(|key| sshsig::AllowedSigners::parse(&format!("\"{}\" {key}", principal.replace('"', ""))));
        let checked = own.and_then(|a| sshsig::verify(&a, None, approvals::SIGNATURE_NAMESPACE, message.as_bytes(), armored, u64::MAX / 2));
        let checked = checked.or_else(|e| fail(&place, format!("the signature does not verify: {e}")))?;
        if v["fingerprint"] != checked.fingerprint.as_str() {
            return fail(place, "`fingerprint` is not the signing key's");
        }
        if let Some(t) = &cx.signers {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
            sshsig::verify(&t.set, Some(principal), approvals::SIGNATURE_NAMESPACE, message.as_bytes(), armored, now)
                .or_else(|e| fail(&place, format!("not signed by a key of --allowed-signers: {e}")))?;
        }
        signed_seqs.push(seq);
    }
    if required {
        for (e, d) in &s.records {
            if e["type"] == "approval" && !d["seq"].as_u64().is_some_and(|q| signed_seqs.contains(&q)) {
                return fail("events.ndjson", format!("approval event {} is not signed, and this run's approvals must be", d["seq"]));
            }
        }
    }
    cx.signed = (signed_seqs.len(), cx.signers.is_some());
    cx.pass("signatures");
    Ok(())
}

/// 9. The receipt's content, then the pins of every file (run.json last).
fn receipt(cx: &mut Ctx, s: &Seen) -> Result<(), Failure> {
    let (receipt, run, report, h) = (&s.receipt, &s.run, &s.report, &s.head);
    let members = bundle::canonical_members(&s.receipt_text).unwrap_or_default();
    let embedded = members.iter().find(|(k, _)| *k == "\"report\"").map(|(_, v)| *v).unwrap_or("");
    if embedded.as_bytes() != s.report_bytes.as_slice() {
        return fail("receipt.json", "`report` is not report.json");
    }
    if receipt["report_sha256"] != sha256_hex(&s.report_bytes).as_str() {
        return fail("receipt.json", "`report_sha256` is not report.json's sha256");
    }
    if receipt["chain_head"] != h.as_str() {
        return fail("receipt.json", format!("`chain_head` is not the chain's head {h}"));
    }
    let module = crate::module_sha256();
    if receipt["module_sha256"] != module {
        return fail("receipt.json", format!("`module_sha256` is {}, but this host embeds (and replayed with) {module}", receipt["module_sha256"]));
    }
    let known = receipt["host"]["name"].as_str().is_some_and(|n| bundle::KNOWN_HOSTS.contains(&n));
    if !known || receipt["host"].as_object().map(|o| o.len()) != Some(2) || !receipt["host"]["version"].is_string() {
        return fail("receipt.json", format!("`host` must be {{name, version}} with a name of {}", bundle::KNOWN_HOSTS.join(", ")));
    }
    let mut files: Vec<(&str, String)> =
        vec![(&s.doc_file, sha256_hex(&s.doc)), ("events.ndjson", s.events_source_sha.clone()), ("report.json", sha256_hex(&s.report_bytes))];
    if let Some(e) = &s.envelope {
        files.push(("envelope.json", sha256_hex(e)));
    }
    if let Some(b) = &s.signatures {
        if !b.is_empty() || pins_file(receipt, bundle::SIGNATURES) {
            files.push((bundle::SIGNATURES, sha256_hex(b)));
        }
    }
    if let Some(b) = &s.shadow {
        files.push((bundle::SHADOW, sha256_hex(b)));
    }
    let pins = receipt["artifacts"].as_object().cloned().unwrap_or_default();
    if pins.len() != files.len() + 1 {
        return fail("receipt.json", "`artifacts` does not pin exactly the bundle's other files");
    }
    for (name, sha) in &files {
        if pins.get(*name).and_then(Value::as_str) != Some(sha.as_str()) {
            let place = if *name == "events.ndjson" && cx.redacted { "derivation.json" } else { "receipt.json" };
            return fail(place, format!("`artifacts` of receipt.json does not pin {name}'s sha256"));
        }
    }
    // run.json is the receipt's: from here on, a disagreement between them is the receipt's.
    match pins.get("run.json").and_then(Value::as_str) {
        Some(p) if *p == sha256_hex(&s.run_bytes) => {}
        Some(p) => return fail("run.json", format!("its sha256 is {}, receipt.json pins {p}", sha256_hex(&s.run_bytes))),
        None => return fail("receipt.json", "`artifacts` does not pin run.json"),
    }
    if run["module_sha256"] != receipt["module_sha256"] {
        return fail("run.json", "`module_sha256` is not the receipt's");
    }
    if run["host"] != receipt["host"] {
        return fail("receipt.json", "`host` is not the host run.json records");
    }
    if run["outcome"] != report["outcome"] {
        return fail("run.json", "`outcome` is not the report's");
    }
    // The receipt's bytes are the module's composition of these very files (DESIGN 5, 11): anything the
    // checks above do not name (an extra member, another order, another number form) is caught here.
    let hashes: serde_json::Map<String, Value> = files.iter().filter(|(n, _)| *n != "report.json").map(|(n, sha)| (n.to_string(), json!(sha))).collect();
    let run_text = String::from_utf8_lossy(&s.run_bytes);
    let report_text = String::from_utf8_lossy(&s.report_bytes);
    let policy = bundle::shared_policy().map_err(|e| Failure { place: "receipt.json".into(), message: e.to_string() })?;
    match policy.check_receipt(&run_text, &report_text, h, &Value::Object(hashes).to_string(), &s.receipt_text) {
        Ok(Ok(())) => {}
        Ok(Err(why)) => return fail("receipt.json", format!("it is not the policy module's receipt of this bundle: {why}")),
        Err(e) => return fail("receipt.json", format!("the policy module could not check it: {e}")),
    }
    let lifecycle = run["lifecycle"].as_array().cloned().unwrap_or_default();
    let ok_time = |v: &Value| v.as_str().is_some_and(|t| t.len() >= 20 && t.ends_with('Z') && t.as_bytes()[10] == b'T');
    if lifecycle.first().map(|e| &e["event"]) != Some(&json!("created"))
        || lifecycle.last().map(|e| &e["event"]) != Some(&json!("ended"))
        || !lifecycle.iter().all(|e| ok_time(&e["at"]))
    {
        return fail("run.json", "`lifecycle` must run from `created` to `ended`, each with a UTC RFC 3339 time");
    }
    cx.pass("receipt");
    Ok(())
}

fn is_digest(v: &Value) -> bool {
    v.as_str().is_some_and(is_hex64)
}

fn share_safety(dir: &Dir, cx: &mut Ctx) {
    let events = dir.read("events.ndjson").unwrap_or_default();
    let (mut args, mut results) = (false, false);
    for r in bundle::read_events(&events).unwrap_or_default() {
        let Ok(v) = serde_json::from_str::<Value>(&r.event_line) else { continue };
        if v.get("arguments").is_some_and(|a| !is_digest(a)) {
            args = true;
        }
        if v.get("result").is_some_and(|a| !is_digest(a)) {
            results = true;
        }
    }
    if args {
        cx.reasons.push(("RAW_TOOL_ARGUMENTS", "events.ndjson holds raw tool arguments".into()));
    }
    if results {
        cx.reasons.push(("RAW_TOOL_RESULTS", "events.ndjson holds raw tool results".into()));
    }
    if bundle::read_events(&events).unwrap_or_default().iter().any(|r| !r.event_line.trim_start().starts_with('{')) {
        cx.reasons.push(("RAW_EVENT_TEXT", "events.ndjson holds malformed event lines verbatim".into()));
    }
    for d in ["pending", "approvals", "consumed"] {
        if dir.read_dir(d).map(|mut it| it.next().is_some()).unwrap_or(false) {
            cx.reasons.push(("APPROVAL_REQUESTS", "the approval channel (pending/, approvals/, consumed/) holds requested calls and their arguments".into()));
            break;
        }
    }
}
