//! Fail-closed verification of a run bundle (docs/spec/bundle.md#what-verify-checks, seed 002), as a library: `runbook-host verify`
//! prints what [`verify_bundle`] finds, and the fuzz target `verify` feeds it mutated bundles.
//!
//! Every consistency check is the module's (WIT `verifier`, the streaming form of `verify-bundle`,
//! `guest/src/verify.rs`), so the packages and a browser verify with the same code. The host keeps what needs a file system or a key: it reads
//! the bundle's top-level entries through a [`Source`] (a directory through a `cap-std` capability: no name
//! reaches outside it, symbolic links are passed as "not a regular file", never followed; or a run's files
//! in a memory store, [`MemoryBundle`]), bounds how much it reads, checks the bytes of every SSH signature
//! the module found answering a request, and the receipt's DSSE signature.

use crate::bundle::{self, sha256_hex};
use crate::{BundleItem, SignedAnswer};
use cap_std::fs::Dir;
use serde_json::Value;
use std::collections::BTreeMap;

/// What a bundle's top-level entry is, as verify lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file of this many bytes.
    File(u64),
    /// A directory holding this many entries.
    Directory(u32),
    /// Anything else (a symbolic link): never read.
    Other,
}

/// Where verify reads a bundle from: a directory ([`Dir`]) or one run's files in memory ([`MemoryBundle`]).
/// The checks do not depend on which: the module sees the same entries and bytes either way.
pub trait Source {
    /// The top-level entries, in any order (a name that is not UTF-8 is left out).
    fn listing(&self) -> Result<Vec<(String, Kind)>, Failure>;
    /// The bytes of `name`, which must be a regular file ("missing", "not a regular file" otherwise).
    fn read(&self, name: &str) -> Result<Vec<u8>, Failure>;
    /// Whether there is an entry `name`, of any kind.
    fn has(&self, name: &str) -> Result<bool, Failure>;
    /// The regular file `name`, to read in pieces.
    fn open(&self, name: &str) -> Result<Box<dyn std::io::Read + '_>, Failure>;
}

impl Source for Dir {
    fn listing(&self) -> Result<Vec<(String, Kind)>, Failure> {
        let mut out = Vec::new();
        for entry in self.entries().or_else(|e| fail(".", format!("cannot be listed: {e}")))? {
            let entry = entry.or_else(|e| fail(".", format!("cannot be listed: {e}")))?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            let meta = self.symlink_metadata(&name).or_else(|e| fail(&name, format!("cannot be read: {e}")))?;
            let kind = if meta.is_file() {
                Kind::File(meta.len())
            } else if meta.is_dir() {
                let n = self.read_dir(&name).map(|it| it.count()).unwrap_or(0);
                Kind::Directory(u32::try_from(n).unwrap_or(u32::MAX))
            } else {
                Kind::Other
            };
            out.push((name, kind));
        }
        Ok(out)
    }
    fn read(&self, name: &str) -> Result<Vec<u8>, Failure> {
        match self.symlink_metadata(name) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return fail(name, "not a regular file"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return fail(name, "missing"),
            Err(e) => return fail(name, format!("cannot be read: {e}")),
        }
        Dir::read(self, name).or_else(|e| fail(name, format!("cannot be read: {e}")))
    }
    fn has(&self, name: &str) -> Result<bool, Failure> {
        match self.symlink_metadata(name) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => fail(name, format!("cannot be read: {e}")),
        }
    }
    fn open(&self, name: &str) -> Result<Box<dyn std::io::Read + '_>, Failure> {
        Ok(Box::new(Dir::open(self, name).or_else(|e| fail(name, format!("cannot be read: {e}")))?))
    }
}

/// One run's bundle held in memory, its files by name (a memory store holds a run's files and no
/// directory in it: [`crate::bundle::MemoryStore::bundle`]). `verify` reads it as it reads the same files
/// in a directory, without writing them anywhere.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryBundle(pub BTreeMap<String, Vec<u8>>);

impl Source for MemoryBundle {
    fn listing(&self) -> Result<Vec<(String, Kind)>, Failure> {
        Ok(self.0.iter().map(|(n, b)| (n.clone(), Kind::File(b.len() as u64))).collect())
    }
    fn read(&self, name: &str) -> Result<Vec<u8>, Failure> {
        self.0.get(name).cloned().map_or_else(|| fail(name, "missing"), Ok)
    }
    fn has(&self, name: &str) -> Result<bool, Failure> {
        Ok(self.0.contains_key(name))
    }
    fn open(&self, name: &str) -> Result<Box<dyn std::io::Read + '_>, Failure> {
        self.0.get(name).map_or_else(|| fail(name, "missing"), |b| Ok(Box::new(b.as_slice()) as Box<dyn std::io::Read>))
    }
}

/// Checks the receipt's signature (`receipt.dsse.json`): against `keys` when given (and then one is
/// required), else against the key `run.json` names when it announces one. Returns the signer's key id and
/// whether it was one of `keys`.
pub fn receipt_signature(dir: &dyn Source, keys: &[ed25519_dalek::VerifyingKey]) -> Result<Option<(String, bool)>, Failure> {
    let run: Value = parse_json("run.json", &dir.read("run.json")?)?;
    let announced = &run["receipt_signature"];
    let envelope = if dir.has(bundle::RECEIPT_SIGNATURE)? { Some(dir.read(bundle::RECEIPT_SIGNATURE)?) } else { None };
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
        (
            vec![crate::signatures::dsse::read_public(pem)
                .map_err(|e| Failure { place: "run.json".into(), message: format!("`receipt_signature.public_key`: {e}") })?],
            false,
        )
    } else {
        (keys.to_vec(), true)
    };
    let receipt = dir.read("receipt.json")?;
    let v = crate::signatures::dsse::verify_envelope(&envelope, &trusted, &sha256_hex(&receipt), crate::signatures::dsse::RECEIPT_PREDICATE, i64::MIN)
        .map_err(|e| Failure { place: bundle::RECEIPT_SIGNATURE.into(), message: format!("{}: {}", e.kind, e.message) })?;
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
    pub checks: Vec<(String, bool)>,
    pub failure: Option<Failure>,
    pub run_id: Option<String>,
    pub outcome: Option<String>,
    pub events: usize,
    pub reasons: Vec<(String, String)>,
    pub warnings: Vec<String>,
    /// A redacted derivative: chain and receipt verified, not replayed.
    pub redacted: bool,
    /// Signed approvals checked, and whether against the verifier's `--allowed-signers`.
    pub signed: (usize, bool),
    /// Who signed each of those answers, in order: where, the principal, the key's kind and fingerprint.
    pub signers: Vec<Signer>,
    /// A shadow run (`run --mode shadow`): how many calls the module did not allow ran anyway.
    pub shadow: Option<usize>,
    /// The receipt's signer (its key id) and whether it was one of the keys given ([`verify_bundle`]).
    pub receipt_signed: Option<(String, bool)>,
}

/// One signed answer's signer, as `verify` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signer {
    /// The answer's line (`signatures.ndjson:N`).
    pub place: String,
    pub principal: String,
    /// `passkey` (a WebAuthn assertion, crate::signatures::passkey) or `ssh` (an SSH signature).
    pub kind: &'static str,
    pub fingerprint: String,
}

/// Everything `runbook-host verify` checks: [`verify_dir_with`] and then, when that passed, the receipt's
/// signature ([`receipt_signature`]; listed as the check `receipt-signature` only where there is one to
/// check or `keys` asked for one).
pub fn verify_bundle(dir: &dyn Source, signers: Option<crate::signatures::Signers>, keys: &[ed25519_dalek::VerifyingKey]) -> Outcome {
    let mut o = verify_dir_with(dir, signers);
    if o.failure.is_none() {
        match receipt_signature(dir, keys) {
            Ok(s) => o.receipt_signed = s,
            Err(f) => o.failure = Some(f),
        }
        if o.receipt_signed.is_some() || o.failure.is_some() {
            o.checks.push(("receipt-signature".into(), o.failure.is_none()));
        }
    }
    o
}

/// How much of a bundle verify reads, in all: a bundle is a document, its envelope, a report and one line
/// per event; anything larger is refused, not read. (`events.ndjson` is read in pieces, so what the
/// module holds at once is the other files, a piece and a line, within [`crate::MEMORY_CAP`].)
pub const MAX_BUNDLE_BYTES: u64 = 256 << 20;

/// The bundle's top-level entries as the module's `verify-bundle` takes them: regular files with their
/// bytes, directories with how many entries they hold, anything else (a symbolic link) unread.
pub fn entries(dir: &dyn Source) -> Result<Vec<(String, BundleItem)>, Failure> {
    list(dir, false).map(|(e, _)| e)
}

/// How much of `events.ndjson` verify reads and hands the module at a time: the module holds one piece
/// and the line being read, never the events.
pub const EVENTS_CHUNK: usize = 1 << 20;

/// [`entries`]; with `stream`, `events.ndjson` (a regular file) is listed empty and left to be read in
/// pieces, and the second value is how many of its bytes the bound lets verify read.
fn list(dir: &dyn Source, stream: bool) -> Result<(Vec<(String, BundleItem)>, u64), Failure> {
    let mut out = Vec::new();
    let mut total = 0u64;
    for (name, kind) in dir.listing()? {
        let item = match kind {
            Kind::File(len) => {
                total = total.saturating_add(len);
                if total > MAX_BUNDLE_BYTES {
                    return fail(&name, format!("the bundle holds more than {MAX_BUNDLE_BYTES} bytes, which verify does not read"));
                }
                if stream && name == "events.ndjson" {
                    BundleItem::File(Vec::new())
                } else {
                    BundleItem::File(dir.read(&name)?)
                }
            }
            Kind::Directory(n) => BundleItem::Directory(n),
            Kind::Other => BundleItem::Other,
        };
        out.push((name, item));
    }
    // The order a directory lists its entries in is the file system's; the module's answer must not be.
    out.sort_by(|a, b| a.0.cmp(&b.0));
    let others: u64 = out.iter().map(|(_, i)| if let BundleItem::File(b) = i { b.len() as u64 } else { 0 }).sum();
    Ok((out, MAX_BUNDLE_BYTES.saturating_sub(others)))
}

/// The module's verification of the bundle in `dir` whose entries are `entries` (`events.ndjson` listed
/// empty): the events read through `dir` in pieces of [`EVENTS_CHUNK`] bytes, at most `bound` of them.
fn verification(dir: &dyn Source, entries: &[(String, BundleItem)], bound: u64, signers_sha256: Option<&str>) -> Result<crate::Verification, Failure> {
    use std::io::Read;
    let module = |e: crate::HostError| Failure { place: "(module)".into(), message: e.to_string() };
    let policy = bundle::shared_policy().map_err(module)?;
    let mut verifier = policy.verifier(entries, crate::module_sha256(), signers_sha256).map_err(module)?;
    if entries.iter().any(|(n, i)| n == "events.ndjson" && matches!(i, BundleItem::File(_))) {
        let file = dir.open("events.ndjson")?;
        // One byte past the bound shows a file that grew past it since it was listed.
        let mut file = file.take(bound.saturating_add(1));
        let mut piece = vec![0u8; EVENTS_CHUNK];
        let mut read = 0u64;
        loop {
            let n = match file.read(&mut piece) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return fail("events.ndjson", format!("cannot be read: {e}")),
            };
            read += n as u64;
            if read > bound {
                return fail("events.ndjson", format!("the bundle holds more than {MAX_BUNDLE_BYTES} bytes, which verify does not read"));
            }
            verifier.push(&piece[..n]).map_err(module)?;
        }
    }
    verifier.finish().map_err(module)
}

/// [`entries`] of the bundle directory at `path`.
pub fn entries_at(path: &std::path::Path) -> Result<Vec<(String, BundleItem)>, Failure> {
    let dir = Dir::open_ambient_dir(path, cap_std::ambient_authority()).or_else(|e| fail(".", format!("cannot be opened: {e}")))?;
    entries(&dir)
}

/// Runs every check on the bundle in `dir`.
pub fn verify_dir(dir: &dyn Source) -> Outcome {
    verify_dir_with(dir, None)
}

/// [`verify_dir`], checking signed approvals against the signers the verifier trusts.
pub fn verify_dir_with(dir: &dyn Source, signers: Option<crate::signatures::Signers>) -> Outcome {
    let mut o = Outcome {
        checks: Vec::new(),
        failure: None,
        run_id: None,
        outcome: None,
        events: 0,
        reasons: Vec::new(),
        warnings: Vec::new(),
        redacted: false,
        signed: (0, signers.is_some()),
        signers: Vec::new(),
        shadow: None,
        receipt_signed: None,
    };
    let v = match list(dir, true).and_then(|(entries, bound)| verification(dir, &entries, bound, signers.as_ref().map(|s| s.sha256.as_str()))) {
        Ok(v) => v,
        Err(f) => {
            o.failure = Some(f);
            return o;
        }
    };
    o.checks = v.checks.into_iter().map(|c| (c, true)).collect();
    o.failure = v.failure.map(|(place, message)| Failure { place, message });
    o.run_id = v.run_id;
    o.outcome = v.outcome;
    o.events = v.events as usize;
    o.reasons = v.reasons;
    o.warnings = v.warnings;
    o.redacted = v.redacted;
    o.shadow = v.shadow.map(|n| n as usize);
    // The signature bytes of each answer whose payload the module accepted: a failure here comes before
    // any the module found later (the checks run in order and stop at the first).
    for a in &v.signed_answers {
        if let Err(f) = signature_bytes(a, signers.as_ref()) {
            o.checks.truncate(o.checks.iter().position(|(c, _)| c == "signatures").unwrap_or(o.checks.len()));
            o.failure = Some(f);
            o.reasons.clear();
            return o;
        }
    }
    if o.checks.iter().any(|(c, _)| c == "signatures") {
        o.signed.0 = v.signed_answers.len();
        o.signers = v
            .signed_answers
            .iter()
            .map(|a| Signer {
                place: a.place.clone(),
                principal: a.principal.clone(),
                kind: if crate::signatures::passkey::is_armored(&a.signature) { "passkey" } else { "ssh" },
                fingerprint: a.fingerprint.clone(),
            })
            .collect();
    }
    o
}

/// One signed answer's SSH signature: by the key it carries (whose fingerprint the line records) and,
/// with `--allowed-signers`, by a key of that file for that principal.
fn signature_bytes(a: &SignedAnswer, signers: Option<&crate::signatures::Signers>) -> Result<(), Failure> {
    use crate::signatures::sshsig;
    let own = sshsig::signer_of(&a.signature).and_then(|key| sshsig::AllowedSigners::parse(&format!("\"{}\" {key}", a.principal.replace('"', ""))));
    // The key the answer carries is checked without a validity window (it has none); the allowed
    // signers' windows are checked at `clock`'s time.
    let checked = own.and_then(|s| sshsig::verify(&s, None, crate::signatures::SIGNATURE_NAMESPACE, a.message.as_bytes(), &a.signature, u64::MAX / 2));
    let checked = checked.or_else(|e| fail(&a.place, format!("the signature does not verify: {e}")))?;
    if a.fingerprint != checked.fingerprint {
        return fail(&a.place, "`fingerprint` is not the signing key's");
    }
    if let Some(t) = signers {
        t.check(Some(&a.principal), a.message.as_bytes(), &a.signature, &crate::clock::Clock::system())
            .or_else(|e| fail(&a.place, format!("not signed by a key of --allowed-signers: {e}")))?;
    }
    Ok(())
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
