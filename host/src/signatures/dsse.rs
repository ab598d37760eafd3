//! DSSE envelopes carrying in-toto Statement v1, signed with ed25519.
//!
//! runbook-host signs what it emits (signed documents, receipts, policy modules) in the
//! envelope format that supply-chain tools already read: a DSSE envelope
//! (<https://github.com/secure-systems-lab/dsse>, `payloadType` `application/vnd.in-toto+json`)
//! around an in-toto Statement v1 (<https://github.com/in-toto/attestation>) whose subject is
//! the sha256 of the thing signed. That way cosign, in-toto verifiers or a ten-line script can
//! check our output without knowing anything about runbook-host.
//!
//! Keys are plain ed25519 in the PEM formats openssl uses (PKCS#8 `PRIVATE KEY`, SPKI
//! `PUBLIC KEY`), so an operator can make, inspect and rotate them with `openssl genpkey` /
//! `openssl pkey` instead of a tool of ours.
//!
//! Verification is deliberately ordered (shape, signature, statement, subject/type, expiry) so
//! the same bad envelope always yields the same error code, and every message says what was
//! expected and what was found.

use std::fmt;

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// Predicate types used by runbook-host.
pub const DOCUMENT_PREDICATE: &str = "urn:runbook-host:signed-document:v1";
pub const RECEIPT_PREDICATE: &str = "urn:runbook-host:receipt:v1";
pub const MODULE_PREDICATE: &str = "urn:runbook-host:policy-module:v1";

/// Envelopes are small JSON documents; refusing big ones up front bounds the work an
/// attacker-supplied file can cause.
const MAX_ENVELOPE_BYTES: usize = 1 << 20;
/// DSSE allows several signatures; a cap keeps a crafted envelope from making us run
/// thousands of ed25519 verifications.
const MAX_SIGNATURES: usize = 32;
/// How many subject digests an error message lists before eliding the rest.
const MAX_LISTED: usize = 8;

/// DER prefixes of an ed25519 key (RFC 8410): with them, encoding is infallible and byte-for-byte
/// what openssl writes (PKCS#8 v1 without the optional public key, SPKI with no parameters).
const PKCS8_PREFIX: [u8; 16] = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
const SPKI_PREFIX: [u8; 12] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];

/// The DSSE spec allows standard or URL-safe base64; other producers may also drop padding.
const B64_STD_LENIENT: GeneralPurpose =
    GeneralPurpose::new(&alphabet::STANDARD, GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent));
const B64_URL_LENIENT: GeneralPurpose =
    GeneralPurpose::new(&alphabet::URL_SAFE, GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent));

/// Why an envelope or a key was refused; [`DsseErrorKind::code`] is its stable wire code.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DsseErrorKind {
    /// `signature-malformed`: not an envelope, a statement, a key or a time this module reads.
    Malformed,
    /// `signature-keygen`: the operating system gave no random bytes for a key.
    Keygen,
    /// `signature-invalid`: a trusted key's signature does not verify over the payload.
    Invalid,
    /// `signature-untrusted`: no signature by a trusted key.
    Untrusted,
    /// `signature-mismatch`: the statement is not about the bytes (or the predicate) asked for.
    Mismatch,
    /// `signature-expired`: the predicate's `expires` has passed.
    Expired,
}

impl DsseErrorKind {
    /// The wire code, as messages and the CLI's JSON print it.
    pub fn code(&self) -> &'static str {
        match self {
            DsseErrorKind::Malformed => "signature-malformed",
            DsseErrorKind::Keygen => "signature-keygen",
            DsseErrorKind::Invalid => "signature-invalid",
            DsseErrorKind::Untrusted => "signature-untrusted",
            DsseErrorKind::Mismatch => "signature-mismatch",
            DsseErrorKind::Expired => "signature-expired",
        }
    }
}

impl fmt::Display for DsseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DsseError {
    pub kind: DsseErrorKind,
    pub message: String,
}

impl fmt::Display for DsseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for DsseError {}

fn err(kind: DsseErrorKind, message: impl Into<String>) -> DsseError {
    DsseError { kind, message: message.into() }
}

fn malformed(message: impl Into<String>) -> DsseError {
    err(DsseErrorKind::Malformed, message)
}

/// Makes a fresh signing key from the operating system's random source.
pub fn generate() -> Result<SigningKey, DsseError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| err(DsseErrorKind::Keygen, format!("cannot get 32 random bytes from the operating system: {e}")))?;
    Ok(SigningKey::from_bytes(&seed))
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    // Base64 output is ASCII, so splitting bytes never cuts a character.
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// PKCS#8 `-----BEGIN PRIVATE KEY-----`, as `openssl genpkey -algorithm ed25519` writes it.
pub fn private_pem(key: &SigningKey) -> String {
    let mut der = PKCS8_PREFIX.to_vec();
    der.extend_from_slice(&key.to_bytes());
    pem_encode("PRIVATE KEY", &der)
}

fn spki_der(key: &VerifyingKey) -> Vec<u8> {
    let mut der = SPKI_PREFIX.to_vec();
    der.extend_from_slice(key.as_bytes());
    der
}

/// SPKI `-----BEGIN PUBLIC KEY-----`, as `openssl pkey -pubout` writes it.
pub fn public_pem(key: &VerifyingKey) -> String {
    pem_encode("PUBLIC KEY", &spki_der(key))
}

/// The first PEM block of `pem`: its label and the text from BEGIN to the end of END, so
/// comments or blank lines around the block (common in hand-kept key files) do not matter.
fn pem_block(pem: &str) -> Option<(&str, &str)> {
    let start = pem.find("-----BEGIN ")?;
    let rest = &pem[start + "-----BEGIN ".len()..];
    let label = &rest[..rest.find("-----")?];
    let end_marker = format!("-----END {label}-----");
    let end = pem[start..].find(&end_marker)? + start + end_marker.len();
    Some((label, &pem[start..end]))
}

fn describe_label(pem: &str) -> String {
    match pem_block(pem) {
        Some((label, _)) => format!("a \"{label}\" PEM block"),
        None => "no complete PEM block".to_string(),
    }
}

/// Reads an ed25519 private key from PKCS#8 PEM (what `openssl genpkey -algorithm ed25519` writes).
pub fn read_private(pem: &str) -> Result<SigningKey, DsseError> {
    match pem_block(pem) {
        Some(("PRIVATE KEY", block)) => {
            SigningKey::from_pkcs8_pem(block).map_err(|e| malformed(format!("PRIVATE KEY PEM is not an ed25519 PKCS#8 private key: {e}")))
        }
        Some(("ENCRYPTED PRIVATE KEY", _)) => Err(malformed(
            "expected an unencrypted ed25519 private key (-----BEGIN PRIVATE KEY-----), found an ENCRYPTED PRIVATE KEY; \
             decrypt it with `openssl pkey -in KEY -out PLAIN`",
        )),
        _ => Err(malformed(format!(
            "expected an ed25519 private key in PKCS#8 PEM (-----BEGIN PRIVATE KEY-----, as `openssl genpkey -algorithm ed25519` writes), found {}",
            describe_label(pem)
        ))),
    }
}

/// Reads an ed25519 public key from SPKI PEM; a PKCS#8 private key PEM is accepted too and its
/// public half used, so one key file can be handed to both sides in a pinch.
pub fn read_public(pem: &str) -> Result<VerifyingKey, DsseError> {
    match pem_block(pem) {
        Some(("PUBLIC KEY", block)) => {
            VerifyingKey::from_public_key_pem(block).map_err(|e| malformed(format!("PUBLIC KEY PEM is not an ed25519 public key: {e}")))
        }
        Some(("PRIVATE KEY" | "ENCRYPTED PRIVATE KEY", _)) => read_private(pem).map(|k| k.verifying_key()),
        _ => Err(malformed(format!(
            "expected an ed25519 public key in SPKI PEM (-----BEGIN PUBLIC KEY-----, as `openssl pkey -pubout` writes), found {}",
            describe_label(pem)
        ))),
    }
}

/// `sha256:` + hex of the SPKI DER, i.e. `openssl pkey -pubin -outform DER | sha256sum`, so an
/// operator can compute it without us.
pub fn key_id(key: &VerifyingKey) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(spki_der(key))))
}

/// DSSE v1 pre-authentication encoding: signing this instead of the bare payload binds the
/// payload type into the signature.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {} {} ", payload_type.len(), payload_type, payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

pub struct Subject {
    pub name: String,
    pub sha256: String,
}

/// JSON text of a string, escaped. Composing JSON by hand keeps key order fixed (as documented)
/// whether or not serde_json's `preserve_order` feature is on somewhere in the build.
fn js(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Builds the in-toto Statement {"_type","subject":[{"name","digest":{"sha256"}}],"predicateType","predicate"} as compact JSON,
/// signs its PAE, returns the envelope {"payloadType","payload":base64std,"signatures":[{"keyid","sig":base64std}]} as compact JSON bytes followed by "\n".
pub fn sign_statement(key: &SigningKey, subjects: &[Subject], predicate_type: &str, predicate: serde_json::Value) -> Vec<u8> {
    let subject_json: Vec<String> = subjects.iter().map(|s| format!("{{\"name\":{},\"digest\":{{\"sha256\":{}}}}}", js(&s.name), js(&s.sha256))).collect();
    let statement = format!(
        "{{\"_type\":{},\"subject\":[{}],\"predicateType\":{},\"predicate\":{}}}",
        js(STATEMENT_TYPE),
        subject_json.join(","),
        js(predicate_type),
        predicate
    );
    sign_payload(key, statement.as_bytes())
}

/// Signs an in-toto Statement's exact bytes (composed by the module, as a receipt's is) and returns the
/// DSSE envelope {"payloadType","payload":base64std,"signatures":[{"keyid","sig":base64std}]} as compact
/// JSON bytes followed by "\n".
pub fn sign_payload(key: &SigningKey, statement: &[u8]) -> Vec<u8> {
    let sig = key.sign(&pae(PAYLOAD_TYPE, statement));
    let envelope = format!(
        "{{\"payloadType\":{},\"payload\":{},\"signatures\":[{{\"keyid\":{},\"sig\":{}}}]}}\n",
        js(PAYLOAD_TYPE),
        js(&STANDARD.encode(statement)),
        js(&key_id(&key.verifying_key())),
        js(&STANDARD.encode(sig.to_bytes()))
    );
    envelope.into_bytes()
}

pub struct Verified {
    pub key_id: String,
    pub statement: serde_json::Value,
    pub predicate: serde_json::Value,
}

/// The envelope as the DSSE spec defines it: unknown fields ignored, `keyid` optional.
#[derive(Deserialize)]
struct EnvelopeIn {
    #[serde(rename = "payloadType")]
    payload_type: String,
    payload: String,
    signatures: Vec<SignatureIn>,
}

#[derive(Deserialize)]
struct SignatureIn {
    #[serde(default)]
    keyid: String,
    sig: String,
}

fn b64_decode(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    B64_STD_LENIENT.decode(s).or_else(|e| B64_URL_LENIENT.decode(s).map_err(|_| e))
}

fn is_lower_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        return "none".to_string();
    }
    let mut out = items.iter().take(MAX_LISTED).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > MAX_LISTED {
        out.push_str(&format!(", and {} more", items.len() - MAX_LISTED));
    }
    out
}

/// Verifies an envelope: parses it (bounded: refuse envelopes over 1 MiB), requires payloadType == PAYLOAD_TYPE,
/// at least one signature made by one of `trusted` that verifies (ed25519 verify_strict over pae()),
/// statement _type == STATEMENT_TYPE, predicateType == expected_predicate, a subject whose digest.sha256 equals
/// expected_sha256 (case-insensitive hex compare is NOT allowed: require lowercase 64-hex), and if predicate has
/// "expires" (RFC 3339 string) it must be > now_unix (seconds). A malformed "expires" is signature-malformed.
pub fn verify_envelope(
    envelope: &[u8],
    trusted: &[VerifyingKey],
    expected_sha256: &str,
    expected_predicate: &str,
    now_unix: i64,
) -> Result<Verified, DsseError> {
    // 1. Shape of the envelope.
    if envelope.len() > MAX_ENVELOPE_BYTES {
        return Err(malformed(format!("envelope is {} bytes; at most {MAX_ENVELOPE_BYTES} bytes are accepted", envelope.len())));
    }
    let env: EnvelopeIn = serde_json::from_slice(envelope).map_err(|e| malformed(format!("envelope is not DSSE envelope JSON: {e}")))?;
    if env.payload_type != PAYLOAD_TYPE {
        return Err(malformed(format!("payloadType is {}, expected {}", js(&env.payload_type), js(PAYLOAD_TYPE))));
    }
    let payload = b64_decode(&env.payload).map_err(|e| malformed(format!("payload is not base64: {e}")))?;
    if env.signatures.is_empty() {
        return Err(malformed("envelope has no signatures"));
    }
    if env.signatures.len() > MAX_SIGNATURES {
        return Err(malformed(format!("envelope has {} signatures; at most {MAX_SIGNATURES} are accepted", env.signatures.len())));
    }
    let mut sigs = Vec::with_capacity(env.signatures.len());
    for (i, s) in env.signatures.iter().enumerate() {
        let bytes = b64_decode(&s.sig).map_err(|e| malformed(format!("signature {i} (keyid {}) is not base64: {e}", js(&s.keyid))))?;
        sigs.push((s.keyid.as_str(), bytes));
    }

    // 2. Signatures. The keyid is only a hint (the spec says not to rely on it), so a signature whose
    // keyid we do not know is still tried against every trusted key; but only a failure of a signature
    // that claims a trusted key (or claims none) means tampering rather than "signed by someone else".
    let msg = pae(PAYLOAD_TYPE, &payload);
    let trusted_ids: Vec<String> = trusted.iter().map(key_id).collect();
    let mut signer: Option<usize> = None;
    let mut invalid: Vec<String> = Vec::new();
    'sigs: for (i, (keyid, bytes)) in sigs.iter().enumerate() {
        let named = trusted_ids.iter().position(|t| t == keyid);
        let candidates: Vec<usize> = match named {
            Some(k) => vec![k],
            None => (0..trusted.len()).collect(),
        };
        // A signature that is not 64 bytes cannot verify under any ed25519 key.
        if let Ok(sig) = Signature::from_slice(bytes) {
            for k in candidates {
                if trusted[k].verify_strict(&msg, &sig).is_ok() {
                    signer = Some(k);
                    break 'sigs;
                }
            }
        }
        if named.is_some() || (keyid.is_empty() && !trusted.is_empty()) {
            invalid.push(format!("signature {i} (keyid {})", if keyid.is_empty() { "unset".to_string() } else { keyid.to_string() }));
        }
    }
    let signer = match signer {
        Some(k) => k,
        None if !invalid.is_empty() => {
            return Err(err(
                DsseErrorKind::Invalid,
                format!(
                    "{} does not verify over the envelope's payload: the payload or signature was altered, or it was made over other bytes",
                    list(&invalid)
                ),
            ))
        }
        None => {
            let found: Vec<String> = sigs.iter().map(|(k, _)| if k.is_empty() { "unset".to_string() } else { k.to_string() }).collect();
            return Err(err(
                DsseErrorKind::Untrusted,
                format!("no signature by a trusted key: envelope key ids [{}], trusted key ids [{}]", list(&found), list(&trusted_ids)),
            ));
        }
    };

    // 3. The payload must be an in-toto Statement v1.
    let statement: Value = serde_json::from_slice(&payload).map_err(|e| malformed(format!("payload is not JSON: {e}")))?;
    let obj = statement.as_object().ok_or_else(|| malformed("payload is not a JSON object (an in-toto Statement)"))?;
    match obj.get("_type") {
        Some(Value::String(t)) if t == STATEMENT_TYPE => {}
        other => {
            let found = other.map_or("missing".to_string(), Value::to_string);
            return Err(malformed(format!("statement _type is {found}, expected {} (in-toto Statement v1)", js(STATEMENT_TYPE))));
        }
    }
    let predicate_type = match obj.get("predicateType") {
        Some(Value::String(t)) => t.as_str(),
        other => return Err(malformed(format!("statement predicateType is {}, expected a string", other.map_or("missing".to_string(), Value::to_string)))),
    };
    let subjects = match obj.get("subject") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => return Err(malformed("statement subject is not a non-empty array")),
    };
    let predicate = match obj.get("predicate") {
        None => Value::Null,
        Some(p @ Value::Object(_)) => p.clone(),
        Some(other) => return Err(malformed(format!("statement predicate is {other}, expected a JSON object"))),
    };

    // 4. It must be about this document, for this purpose.
    if predicate_type != expected_predicate {
        return Err(err(DsseErrorKind::Mismatch, format!("predicateType is {}, expected {}", js(predicate_type), js(expected_predicate))));
    }
    let digests: Vec<Option<&str>> = subjects.iter().map(|s| s.get("digest").and_then(|d| d.get("sha256")).and_then(Value::as_str)).collect();
    // Exact compare, and only against well-formed lowercase hex: there is one spelling of a digest.
    if !(is_lower_hex64(expected_sha256) && digests.contains(&Some(expected_sha256))) {
        let found: Vec<String> = subjects
            .iter()
            .zip(&digests)
            .map(|(s, d)| {
                let name = s.get("name").and_then(Value::as_str).unwrap_or("");
                format!("{} sha256={}", js(name), d.unwrap_or("(none)"))
            })
            .collect();
        let note = if is_lower_hex64(expected_sha256) { "" } else { " (which is not 64 lowercase hex digits, so nothing can match)" };
        return Err(err(DsseErrorKind::Mismatch, format!("no subject has the document's sha256 {expected_sha256}{note}; subjects found: {}", list(&found))));
    }

    // 5. Still in force.
    if let Some(expires) = predicate.get("expires") {
        let text = expires.as_str().ok_or_else(|| malformed(format!("predicate expires is {expires}, expected an RFC 3339 string")))?;
        let at = OffsetDateTime::parse(text, &Rfc3339)
            .map_err(|e| malformed(format!("predicate expires {} is not an RFC 3339 time: {e}", js(text))))?
            .unix_timestamp();
        if at <= now_unix {
            return Err(err(DsseErrorKind::Expired, format!("signature expired at {} (now is {})", rfc3339(at), rfc3339(now_unix))));
        }
    }

    Ok(Verified { key_id: trusted_ids[signer].clone(), statement, predicate })
}

/// Parses a duration like "30d", "12h", "90m", "3600s" into seconds (for --expires); error message names the input.
pub fn parse_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("invalid duration {}: expected a positive whole number followed by s, m, h or d (e.g. 30d, 12h, 90m, 3600s)", js(s));
    let split = s.len().checked_sub(1).ok_or_else(bad)?;
    let (digits, unit) = (s.get(..split).ok_or_else(bad)?, s.get(split..).ok_or_else(bad)?);
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: i64 = digits.parse().map_err(|_| format!("duration {} is too long", js(s)))?;
    if n == 0 {
        return Err(bad());
    }
    n.checked_mul(per).ok_or_else(|| format!("duration {} is too long", js(s)))
}

/// RFC 3339 UTC ("2026-12-01T21:00:00Z") of unix seconds.
pub fn rfc3339(unix: i64) -> String {
    // RFC 3339 has four-digit years only; clamp so the function cannot fail.
    const MIN: i64 = -62_167_219_200; // 0000-01-01T00:00:00Z
    const MAX: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    OffsetDateTime::from_unix_timestamp(unix.clamp(MIN, MAX)).ok().and_then(|t| t.format(&Rfc3339).ok()).unwrap_or_else(|| format!("@{unix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind's wire code: a renamed code fails here, not silently in a consumer.
    #[test]
    fn kind_codes() {
        use DsseErrorKind::*;
        let table = [
            (Malformed, "signature-malformed"),
            (Keygen, "signature-keygen"),
            (Invalid, "signature-invalid"),
            (Untrusted, "signature-untrusted"),
            (Mismatch, "signature-mismatch"),
            (Expired, "signature-expired"),
        ];
        for (kind, code) in table {
            assert_eq!(kind.code(), code);
            assert_eq!(kind.to_string(), code);
        }
    }

    #[test]
    fn pae_matches_spec_example() {
        assert_eq!(pae("http://example.com/HelloWorld", b"hello world"), b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec());
    }

    #[test]
    fn rfc3339_formats_utc_and_clamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_158_800), "2026-12-01T21:00:00Z");
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339(i64::MIN), "0000-01-01T00:00:00Z");
    }

    #[test]
    fn parse_duration_units_and_errors() {
        assert_eq!(parse_duration("30d"), Ok(30 * 86_400));
        assert_eq!(parse_duration("12h"), Ok(12 * 3600));
        assert_eq!(parse_duration("90m"), Ok(5400));
        assert_eq!(parse_duration("3600s"), Ok(3600));
        for bad in ["", "d", "30", "30x", "-5d", "+5d", " 5d", "0s", "1.5h", "5dd", "5é"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&js(bad)), "{bad:?}: {e}");
        }
        assert!(parse_duration("99999999999999999999d").unwrap_err().contains("too long"));
        assert!(parse_duration("999999999999999999d").unwrap_err().contains("too long"));
    }

    #[test]
    fn key_id_is_sha256_of_spki() {
        let k = SigningKey::from_bytes(&[7u8; 32]).verifying_key();
        let id = key_id(&k);
        assert_eq!(id, format!("sha256:{}", hex::encode(Sha256::digest(spki_der(&k)))));
        assert!(is_lower_hex64(id.trim_start_matches("sha256:")));
    }

    #[test]
    fn pem_block_tolerates_surrounding_text() {
        let key = SigningKey::from_bytes(&[9u8; 32]);
        let wrapped = format!("# operator key\n\n{}\ntrailing\n", private_pem(&key));
        assert_eq!(read_private(&wrapped).unwrap().to_bytes(), key.to_bytes());
        assert_eq!(read_public(&format!("  \n{}", public_pem(&key.verifying_key()))).unwrap(), key.verifying_key());
    }
}
