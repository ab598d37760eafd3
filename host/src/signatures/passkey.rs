//! Passkey approvals (WebAuthn): a human answers a gated call in the browser, and the answer is signed by
//! a passkey whose challenge is the approval payload itself (docs/spec/run.md#signed-answers).
//!
//! A passkey is kept in the same `allowed_signers` file as SSH keys, as an OpenSSH security-key line whose
//! application is the WebAuthn relying party (`localhost`), which is what OpenSSH's own
//! `webauthn-sk-ecdsa-sha2-nistp256@openssh.com` signatures bind it to:
//!
//! ```text
//! alice namespaces="runbook-approval@runbook-host" sk-ecdsa-sha2-nistp256@openssh.com AAAA… passkey:<credential id, base64url>
//! ```
//!
//! An answer carries an armored assertion ([`ARMOR_BEGIN`]): the key, the authenticator data, the client
//! data and the signature, exactly as the browser returned them. [`verify`] checks it the way
//! [`crate::signatures::sshsig::verify`] checks an SSH signature (the two share the allowed-signers rules) plus what
//! WebAuthn adds (Level 3, §7.2): the client data is a `webauthn.get` whose challenge is the payload's
//! bytes, from an origin of the relying party and not cross-origin; the authenticator data names that
//! relying party; the user was present **and verified** (a PIN or a biometric, not only a touch); the
//! signature (ES256 or Ed25519) covers `authenticatorData || SHA-256(clientDataJSON)`.
//!
//! What this does not stop: whoever can write the allowed-signers file can add a passkey of their own,
//! and a software authenticator (Chromium's virtual one, driven by a script) asserts "user verified"
//! without a person. The file must be out of the agent's reach (separated mode), and the registered
//! passkey one that lives in an authenticator the agent cannot drive.

use crate::signatures::sshsig::{SigError, Verified};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use ssh_key::public::{Ed25519PublicKey, KeyData, SkEcdsaSha2NistP256, SkEd25519};
use ssh_key::{HashAlg, PublicKey};

pub const ARMOR_BEGIN: &str = "-----BEGIN RUNBOOK PASSKEY ASSERTION-----";
pub const ARMOR_END: &str = "-----END RUNBOOK PASSKEY ASSERTION-----";
/// The relying party of every passkey this host registers: browsers accept `localhost` (an IP address
/// is not a valid relying-party id), and it is always this machine.
pub const RP_ID: &str = "localhost";
/// The comment that names a passkey's credential id on its allowed-signers line.
pub const CREDENTIAL_PREFIX: &str = "passkey:";

/// A WebAuthn assertion as the browser returned it, with the public key of the credential that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assertion {
    /// `keytype base64` of the signing key, as on its allowed-signers line.
    pub public_key: String,
    pub authenticator_data: Vec<u8>,
    pub client_data_json: Vec<u8>,
    pub signature: Vec<u8>,
}

pub fn is_armored(text: &str) -> bool {
    text.trim_start().starts_with(ARMOR_BEGIN)
}

impl Assertion {
    /// The armored text kept in an approval's `signature` field and in the bundle's `signatures.ndjson`.
    pub fn armor(&self) -> String {
        let body = json!({
            "public_key": self.public_key,
            "authenticator_data": URL_SAFE_NO_PAD.encode(&self.authenticator_data),
            "client_data_json": URL_SAFE_NO_PAD.encode(&self.client_data_json),
            "signature": URL_SAFE_NO_PAD.encode(&self.signature),
        });
        let b64 = STANDARD.encode(body.to_string());
        let mut out = String::from(ARMOR_BEGIN);
        for chunk in b64.as_bytes().chunks(70) {
            out.push('\n');
            out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        }
        out.push('\n');
        out.push_str(ARMOR_END);
        out.push('\n');
        out
    }

    pub fn parse(armored: &str) -> Result<Self, SigError> {
        let bad = |why: &str| SigError::NotArmored(format!("passkey assertion: {why}"));
        let inner = armored.trim().strip_prefix(ARMOR_BEGIN).and_then(|r| r.strip_suffix(ARMOR_END)).ok_or_else(|| bad("no armor"))?;
        let b64: String = inner.split_whitespace().collect();
        let bytes = STANDARD.decode(b64).map_err(|_| bad("not base64"))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad("not JSON"))?;
        let field = |k: &str| v[k].as_str().ok_or_else(|| bad(&format!("`{k}` is missing")));
        let bin = |k: &str| field(k).and_then(|s| URL_SAFE_NO_PAD.decode(s).map_err(|_| bad(&format!("`{k}` is not base64url"))));
        Ok(Self {
            public_key: field("public_key")?.to_string(),
            authenticator_data: bin("authenticator_data")?,
            client_data_json: bin("client_data_json")?,
            signature: bin("signature")?,
        })
    }
}

/// The key data of `keytype base64` (an allowed-signers key), when it is a key a passkey can be.
pub fn key_data(public_key: &str) -> Result<KeyData, SigError> {
    let key = PublicKey::from_openssh(public_key.trim()).map_err(|e| SigError::NotArmored(format!("passkey assertion: the key: {e}")))?;
    match key.key_data() {
        k @ (KeyData::SkEcdsaSha2NistP256(_) | KeyData::SkEd25519(_)) => Ok(k.clone()),
        other => Err(SigError::UnsupportedKeyType { key_type: other.algorithm().to_string() }),
    }
}

fn application(key: &KeyData) -> &str {
    match key {
        KeyData::SkEcdsaSha2NistP256(k) => k.application(),
        KeyData::SkEd25519(k) => k.application(),
        _ => "",
    }
}

/// Whether `origin` (the client data's) belongs to relying party `rp`: `https://rp[:port]`, or for
/// `localhost`, which browsers treat as a secure context, `http://localhost[:port]`.
fn origin_of_rp(origin: &str, rp: &str) -> bool {
    let rest = if rp == "localhost" { origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) } else { origin.strip_prefix("https://") };
    let Some(rest) = rest else { return false };
    match rest.strip_prefix(rp) {
        Some("") => true,
        Some(port) => port.strip_prefix(':').is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// The authenticator data's flags: user present, user verified.
const UP: u8 = 0x01;
const UV: u8 = 0x04;

/// The client data of a `kind` ceremony (`webauthn.get`, `webauthn.create`) for `challenge`, made on a
/// page of relying party `rp`, not in a frame of another site.
pub fn check_client_data(client_data_json: &[u8], kind: &str, challenge: &[u8], rp: &str) -> Result<(), SigError> {
    let cd: Value = serde_json::from_slice(client_data_json).map_err(|_| SigError::NotArmored("passkey assertion: the client data is not JSON".into()))?;
    if cd["type"] != kind {
        return Err(SigError::NotArmored(format!("passkey assertion: the client data's type is {}, not {kind}", cd["type"])));
    }
    // The challenge is the payload itself: an assertion made for another request, run or answer names
    // other bytes and is refused here, before the signature is looked at.
    if cd["challenge"].as_str() != Some(URL_SAFE_NO_PAD.encode(challenge).as_str()) {
        return Err(SigError::BadSignature);
    }
    let origin = cd["origin"].as_str().unwrap_or("");
    if !origin_of_rp(origin, rp) {
        return Err(SigError::NotArmored(format!("passkey assertion: made on {origin:?}, not a page of {rp}")));
    }
    if cd["crossOrigin"] == true || !cd["topOrigin"].is_null() {
        return Err(SigError::NotArmored("passkey assertion: made in a frame of another site".into()));
    }
    Ok(())
}

/// The authenticator data names relying party `rp`, and its flags say the user was present and verified.
pub fn check_authenticator_data(ad: &[u8], rp: &str, fingerprint: &str) -> Result<(), SigError> {
    if ad.len() < 37 {
        return Err(SigError::NotArmored("passkey assertion: the authenticator data is short".into()));
    }
    if ad[..32] != Sha256::digest(rp.as_bytes())[..] {
        return Err(SigError::NotArmored(format!("passkey assertion: the authenticator signed for another relying party than {rp}")));
    }
    let flags = ad[32];
    if flags & UP == 0 {
        return Err(SigError::UserPresenceMissing { fingerprint: fingerprint.into() });
    }
    if flags & UV == 0 {
        return Err(SigError::UserVerificationMissing { fingerprint: fingerprint.into() });
    }
    Ok(())
}

/// Checks the WebAuthn ceremony and the signature of `a` over `challenge` (the bytes the page passed as
/// `publicKey.challenge`), made by the key `a` names, for a `kind` ceremony (`webauthn.get`, or
/// `webauthn.create` at registration). Returns the key.
pub fn check_ceremony(a: &Assertion, kind: &str, challenge: &[u8]) -> Result<KeyData, SigError> {
    let key = key_data(&a.public_key)?;
    let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
    let rp = application(&key);
    check_client_data(&a.client_data_json, kind, challenge, rp)?;
    check_authenticator_data(&a.authenticator_data, rp, &fingerprint)?;
    let ad = &a.authenticator_data;
    let mut signed = ad.clone();
    signed.extend_from_slice(&Sha256::digest(&a.client_data_json));
    let ok = match &key {
        KeyData::SkEcdsaSha2NistP256(k) => {
            use p256::ecdsa::signature::Verifier;
            let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(k.ec_point().as_bytes()).map_err(|_| SigError::BadSignature)?;
            let sig = p256::ecdsa::Signature::from_der(&a.signature).map_err(|_| SigError::BadSignature)?;
            vk.verify(&signed, &sig).is_ok()
        }
        KeyData::SkEd25519(k) => {
            let vk = ed25519_dalek::VerifyingKey::from_bytes(&k.public_key().0).map_err(|_| SigError::BadSignature)?;
            let sig = ed25519_dalek::Signature::from_slice(&a.signature).map_err(|_| SigError::BadSignature)?;
            vk.verify_strict(&signed, &sig).is_ok()
        }
        _ => false,
    };
    if ok {
        Ok(key)
    } else {
        Err(SigError::BadSignature)
    }
}

/// Verifies a passkey answer (`armored`) to `message` in `namespace` against the allowed signers, with the
/// same rules (principal, `namespaces=`, validity) as an SSH signature.
pub fn verify(
    allowed: &crate::signatures::sshsig::AllowedSigners,
    principal: Option<&str>,
    namespace: &str,
    message: &[u8],
    armored: &str,
    now_unix: u64,
) -> Result<Verified, SigError> {
    // A passkey signs only approvals: the payload's first line names what it is.
    if namespace != crate::signatures::SIGNATURE_NAMESPACE {
        return Err(SigError::WrongNamespace { expected: namespace.into(), found: crate::signatures::SIGNATURE_NAMESPACE.into() });
    }
    let a = Assertion::parse(armored)?;
    let key = check_ceremony(&a, "webauthn.get", message)?;
    allowed.authorise(&key, principal, namespace, now_unix)
}

/// The public key a passkey assertion names (`keytype base64`).
pub fn signer_of(armored: &str) -> Result<String, SigError> {
    let a = Assertion::parse(armored)?;
    let key = key_data(&a.public_key)?;
    PublicKey::from(key).to_openssh().map_err(|e| SigError::NotArmored(e.to_string()))
}

/// The allowed-signers key of a credential's public key as the browser gives it (`getPublicKey()`:
/// SubjectPublicKeyInfo DER) with its COSE algorithm (-7 ES256, -8 EdDSA).
pub fn key_from_spki(spki_der: &[u8], alg: i64) -> Result<KeyData, String> {
    match alg {
        -7 => {
            use p256::pkcs8::DecodePublicKey;
            let pk = p256::PublicKey::from_public_key_der(spki_der).map_err(|e| format!("not a P-256 public key: {e}"))?;
            let point = p256::elliptic_curve::sec1::ToEncodedPoint::to_encoded_point(&pk, false);
            Ok(KeyData::SkEcdsaSha2NistP256(SkEcdsaSha2NistP256::new(point, RP_ID)))
        }
        -8 => {
            use ed25519_dalek::pkcs8::DecodePublicKey;
            let vk = ed25519_dalek::VerifyingKey::from_public_key_der(spki_der).map_err(|e| format!("not an Ed25519 public key: {e}"))?;
            Ok(KeyData::SkEd25519(SkEd25519::new(Ed25519PublicKey(vk.to_bytes()), RP_ID)))
        }
        other => Err(format!("COSE algorithm {other} is not supported (ES256 -7 and EdDSA -8 are)")),
    }
}

/// A principal an allowed-signers line can hold as one literal name (no pattern, no quoting).
pub fn check_principal(principal: &str) -> Result<(), String> {
    if principal.is_empty()
        || principal.contains(|c: char| c.is_whitespace() || matches!(c, '"' | ',' | '*' | '?' | '!') || c.is_control())
        || principal.starts_with('#')
    {
        return Err(format!("`{principal}` cannot be a principal (no spaces, quotes, commas, patterns, or a leading #)"));
    }
    Ok(())
}

/// The allowed-signers line of a passkey: `principal namespaces="…" keytype base64 passkey:<id>`.
pub fn signers_line(principal: &str, key: &KeyData, credential_id: &[u8]) -> Result<String, String> {
    check_principal(principal)?;
    let key = PublicKey::from(key.clone()).to_openssh().map_err(|e| e.to_string())?;
    Ok(format!("{principal} namespaces=\"{}\" {key} {CREDENTIAL_PREFIX}{}", crate::signatures::SIGNATURE_NAMESPACE, URL_SAFE_NO_PAD.encode(credential_id)))
}

/// The passkeys of an allowed-signers text: (credential id, `keytype base64`) of each line whose comment
/// names one, so the approval page can ask the browser for exactly those credentials.
pub fn credentials(allowed_signers: &str) -> Vec<(Vec<u8>, String)> {
    let mut out = Vec::new();
    for line in allowed_signers.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(pos) = fields.iter().position(|f| f.starts_with("sk-")) else { continue };
        let (Some(b64), Some(comment)) = (fields.get(pos + 1), fields.get(pos + 2)) else { continue };
        let Some(id) = comment.strip_prefix(CREDENTIAL_PREFIX).and_then(|s| URL_SAFE_NO_PAD.decode(s).ok()) else { continue };
        out.push((id, format!("{} {b64}", fields[pos])));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_of_localhost() {
        assert!(origin_of_rp("http://localhost:8123", "localhost"));
        assert!(origin_of_rp("http://localhost", "localhost"));
        assert!(!origin_of_rp("http://localhost.evil.example:80", "localhost"));
        assert!(!origin_of_rp("http://127.0.0.1:8123", "localhost"));
        assert!(!origin_of_rp("http://localhost:", "localhost"));
        assert!(!origin_of_rp("http://example.com", "example.com"));
        assert!(origin_of_rp("https://example.com:8443", "example.com"));
    }

    #[test]
    fn armor_round_trips() {
        let a = Assertion { public_key: "k".into(), authenticator_data: vec![1, 2], client_data_json: b"{}".to_vec(), signature: vec![3] };
        assert_eq!(Assertion::parse(&a.armor()).unwrap(), a);
        assert!(Assertion::parse("-----BEGIN RUNBOOK PASSKEY ASSERTION-----\n!!\n-----END RUNBOOK PASSKEY ASSERTION-----").is_err());
    }

    /// An assertion as an authenticator would make it, by a fixed P-256 key, with the given parts.
    fn forge(challenge: &[u8], origin: &str, rp: &str, flags: u8, kind: &str) -> (Assertion, String) {
        use p256::ecdsa::signature::Signer;
        let sk = p256::ecdsa::SigningKey::from_bytes(&[7u8; 32].into()).unwrap();
        let point = sk.verifying_key().to_encoded_point(false);
        let key = KeyData::SkEcdsaSha2NistP256(SkEcdsaSha2NistP256::new(point, RP_ID));
        let public_key = PublicKey::from(key.clone()).to_openssh().unwrap();
        let cd = json!({"type": kind, "challenge": URL_SAFE_NO_PAD.encode(challenge), "origin": origin, "crossOrigin": false}).to_string().into_bytes();
        let mut ad = Sha256::digest(rp.as_bytes()).to_vec();
        ad.push(flags);
        ad.extend_from_slice(&[0, 0, 0, 1]);
        let mut signed = ad.clone();
        signed.extend_from_slice(&Sha256::digest(&cd));
        let sig: p256::ecdsa::Signature = sk.sign(&signed);
        let line = format!("alice namespaces=\"{}\" {public_key} passkey:AQID", crate::signatures::SIGNATURE_NAMESPACE);
        (Assertion { public_key, authenticator_data: ad, client_data_json: cd, signature: sig.to_der().as_bytes().to_vec() }, line)
    }

    fn check(a: &Assertion, line: &str, message: &[u8]) -> Result<Verified, SigError> {
        let allowed = crate::signatures::sshsig::AllowedSigners::parse(line).unwrap();
        crate::signatures::sshsig::verify(&allowed, None, crate::signatures::SIGNATURE_NAMESPACE, message, &a.armor(), 0)
    }

    #[test]
    fn an_assertion_over_the_payload_with_user_verification_verifies_and_nothing_else_does() {
        let msg = b"runbook-approval/v2\nrun r-1\nrequest 3\nstep s\ncall_sha256 ab\nanswer approve\n";
        let (a, line) = forge(msg, "http://localhost:8123", "localhost", UP | UV, "webauthn.get");
        let v = check(&a, &line, msg).unwrap();
        assert_eq!(v.principal, "alice");
        assert_eq!(credentials(&line), vec![(vec![1, 2, 3], a.public_key.clone())]);
        // Another request's payload, the other answer.
        assert_eq!(check(&a, &line, b"runbook-approval/v2\nrun r-1\nrequest 4\n"), Err(SigError::BadSignature));
        // No user verification; no user presence.
        let (b, _) = forge(msg, "http://localhost:8123", "localhost", UP, "webauthn.get");
        assert!(matches!(check(&b, &line, msg), Err(SigError::UserVerificationMissing { .. })));
        let (b, _) = forge(msg, "http://localhost:8123", "localhost", UV, "webauthn.get");
        assert!(matches!(check(&b, &line, msg), Err(SigError::UserPresenceMissing { .. })));
        // Made on another site, for another relying party, or as a registration.
        for (origin, rp, kind) in [
            ("http://evil.example:80", "localhost", "webauthn.get"),
            ("http://localhost:1", "evil.example", "webauthn.get"),
            ("http://localhost:1", "localhost", "webauthn.create"),
        ] {
            let (b, _) = forge(msg, origin, rp, UP | UV, kind);
            assert!(check(&b, &line, msg).is_err(), "{origin} {rp} {kind}");
        }
        // A flipped byte of the authenticator data (the signature no longer covers it).
        let mut b = a.clone();
        b.authenticator_data[36] ^= 1;
        assert_eq!(check(&b, &line, msg), Err(SigError::BadSignature));
        // A passkey not in the file; a file that limits it to another namespace.
        assert!(matches!(check(&a, "# empty\n", msg), Err(SigError::UnknownKey { .. })));
        let other_ns = line.replace(crate::signatures::SIGNATURE_NAMESPACE, "file");
        assert!(matches!(check(&a, &other_ns, msg), Err(SigError::NamespaceNotAllowed { .. })));
        // A passkey signs approvals only.
        let allowed = crate::signatures::sshsig::AllowedSigners::parse(&line).unwrap();
        assert!(matches!(crate::signatures::sshsig::verify(&allowed, None, "git", msg, &a.armor(), 0), Err(SigError::WrongNamespace { .. })));
    }
}
