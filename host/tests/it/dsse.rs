//! Behaviour of the DSSE / in-toto module, including interop with the openssl command line.

use crate::common::{self, Tmp};
use std::path::Path;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey};
use runbook_host::signatures::dsse::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const NOW: i64 = 1_780_000_000; // 2026-05-28

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

fn doc_sha() -> String {
    sha(b"# runbook\nstep one\n")
}

fn subjects() -> Vec<Subject> {
    vec![Subject { name: "runbook.md".into(), sha256: doc_sha() }]
}

fn signed(k: &SigningKey, predicate: Value) -> Vec<u8> {
    sign_statement(k, &subjects(), DOCUMENT_PREDICATE, predicate)
}

fn parse(env: &[u8]) -> Value {
    serde_json::from_slice(env).unwrap()
}

fn payload_of(env: &[u8]) -> Vec<u8> {
    STANDARD.decode(parse(env)["payload"].as_str().unwrap()).unwrap()
}

/// An envelope around arbitrary payload bytes, signed over their PAE, for statements sign_statement would never make.
fn sign_raw(k: &SigningKey, payload: &[u8]) -> Vec<u8> {
    let sig = k.sign(&pae(PAYLOAD_TYPE, payload));
    let env = json!({
        "payloadType": PAYLOAD_TYPE,
        "payload": STANDARD.encode(payload),
        "signatures": [{"keyid": key_id(&k.verifying_key()), "sig": STANDARD.encode(sig.to_bytes())}],
    });
    env.to_string().into_bytes()
}

fn statement(predicate_type: &str, digest: &str, predicate: Value) -> Vec<u8> {
    json!({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "runbook.md", "digest": {"sha256": digest}}],
        "predicateType": predicate_type,
        "predicate": predicate,
    })
    .to_string()
    .into_bytes()
}

fn verify(env: &[u8], k: &SigningKey) -> Result<Verified, DsseError> {
    verify_envelope(env, &[k.verifying_key()], &doc_sha(), DOCUMENT_PREDICATE, NOW)
}

fn code(r: Result<Verified, DsseError>) -> DsseError {
    match r {
        Ok(_) => panic!("expected an error, envelope verified"),
        Err(e) => e,
    }
}

fn with(env: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v = parse(env);
    f(&mut v);
    v.to_string().into_bytes()
}

#[test]
fn round_trip() {
    let k = key(1);
    let env = signed(&k, json!({"note": "ok", "expires": rfc3339(NOW + 60)}));
    assert!(env.ends_with(b"}\n") && !env[..env.len() - 1].contains(&b'\n'), "compact JSON + newline");
    let v = verify(&env, &k).unwrap();
    assert_eq!(v.key_id, key_id(&k.verifying_key()));
    assert_eq!(v.predicate["note"], "ok");
    assert_eq!(v.statement["_type"], STATEMENT_TYPE);
    assert_eq!(v.statement["subject"][0]["digest"]["sha256"], doc_sha().as_str());
    let e = parse(&env);
    assert_eq!(e["payloadType"], PAYLOAD_TYPE);
    assert_eq!(e["signatures"][0]["keyid"], key_id(&k.verifying_key()).as_str());
    // The documented key order, so the payload reads the same whatever serde_json features are on.
    let payload = String::from_utf8(payload_of(&env)).unwrap();
    let pos = |s: &str| payload.find(s).unwrap();
    assert!(pos("\"_type\"") < pos("\"subject\"") && pos("\"subject\"") < pos("\"predicateType\"") && pos("\"predicateType\"") < pos("\"predicate\":"));
}

#[test]
fn several_subjects_and_trusted_keys() {
    let (k, other) = (key(1), key(2));
    let subs = vec![Subject { name: "a".into(), sha256: sha(b"a") }, Subject { name: "b".into(), sha256: sha(b"b") }];
    let env = sign_statement(&k, &subs, RECEIPT_PREDICATE, json!({}));
    let v = verify_envelope(&env, &[other.verifying_key(), k.verifying_key()], &sha(b"b"), RECEIPT_PREDICATE, NOW).unwrap();
    assert_eq!(v.key_id, key_id(&k.verifying_key()));
}

#[test]
fn tampered_payload_is_invalid() {
    let k = key(1);
    let env = signed(&k, json!({"allow": false}));
    let forged = String::from_utf8(payload_of(&env)).unwrap().replace("false", "true ");
    let env = with(&env, |v| v["payload"] = json!(STANDARD.encode(forged)));
    let e = code(verify(&env, &k));
    assert_eq!(e.kind, DsseErrorKind::Invalid, "{e}");
    assert!(e.message.contains(&key_id(&k.verifying_key())), "{e}");
}

#[test]
fn tampered_signature_is_invalid() {
    let k = key(1);
    let env = signed(&k, json!({}));
    let env = with(&env, |v| {
        let mut sig = STANDARD.decode(v["signatures"][0]["sig"].as_str().unwrap()).unwrap();
        sig[10] ^= 1;
        v["signatures"][0]["sig"] = json!(STANDARD.encode(sig));
    });
    assert_eq!(code(verify(&env, &k)).kind, DsseErrorKind::Invalid);
    // A signature of the wrong length under a trusted keyid is invalid too, not a crash.
    let env = with(&env, |v| v["signatures"][0]["sig"] = json!(STANDARD.encode([1u8; 10])));
    assert_eq!(code(verify(&env, &k)).kind, DsseErrorKind::Invalid);
}

#[test]
fn payload_type_is_bound_by_the_signature() {
    // Signed over another payload type, relabelled: the PAE differs, so it must not verify.
    let k = key(1);
    let payload = statement(DOCUMENT_PREDICATE, &doc_sha(), json!({}));
    let sig = k.sign(&pae("application/json", &payload));
    let env = json!({"payloadType": PAYLOAD_TYPE, "payload": STANDARD.encode(&payload),
        "signatures": [{"keyid": key_id(&k.verifying_key()), "sig": STANDARD.encode(sig.to_bytes())}]});
    assert_eq!(code(verify(env.to_string().as_bytes(), &k)).kind, DsseErrorKind::Invalid);
}

#[test]
fn another_key_is_untrusted() {
    let (k, other) = (key(1), key(2));
    let env = signed(&other, json!({}));
    let e = code(verify(&env, &k));
    assert_eq!(e.kind, DsseErrorKind::Untrusted, "{e}");
    assert!(e.message.contains(&key_id(&other.verifying_key())) && e.message.contains(&key_id(&k.verifying_key())), "{e}");
    assert_eq!(code(verify_envelope(&env, &[], &doc_sha(), DOCUMENT_PREDICATE, NOW)).kind, DsseErrorKind::Untrusted);
}

#[test]
fn keyid_is_only_a_hint() {
    let (k, other) = (key(1), key(2));
    // Unset or foreign keyid, but made by the trusted key: accepted.
    for keyid in [json!(""), json!("some-other-tool:abc"), Value::Null] {
        let env = with(&signed(&k, json!({})), |v| match &keyid {
            Value::Null => {
                v["signatures"][0].as_object_mut().unwrap().remove("keyid");
            }
            id => v["signatures"][0]["keyid"] = id.clone(),
        });
        assert_eq!(verify(&env, &k).unwrap().key_id, key_id(&k.verifying_key()), "keyid {keyid}");
    }
    // An unset keyid was checked against the trusted key and failed: invalid, not untrusted.
    let env = with(&signed(&other, json!({})), |v| v["signatures"][0]["keyid"] = json!(""));
    assert_eq!(code(verify(&env, &k)).kind, DsseErrorKind::Invalid);
    // One good signature among bad ones is enough.
    let good_env = signed(&k, json!({}));
    let good = parse(&good_env);
    let env = with(&good_env, |v| {
        let bad = json!({"keyid": key_id(&other.verifying_key()), "sig": STANDARD.encode([0u8; 64])});
        v["signatures"] = json!([bad, good["signatures"][0].clone()]);
    });
    assert!(verify(&env, &k).is_ok());
}

#[test]
fn wrong_subject_is_mismatch() {
    let k = key(1);
    let env = sign_statement(&k, &[Subject { name: "other.md".into(), sha256: sha(b"other") }], DOCUMENT_PREDICATE, json!({}));
    let e = code(verify(&env, &k));
    assert_eq!(e.kind, DsseErrorKind::Mismatch, "{e}");
    assert!(e.message.contains(&sha(b"other")) && e.message.contains(&doc_sha()) && e.message.contains("other.md"), "{e}");
}

#[test]
fn digest_compare_is_exact_lowercase() {
    let k = key(1);
    let upper = doc_sha().to_uppercase();
    let env = sign_statement(&k, &[Subject { name: "runbook.md".into(), sha256: upper.clone() }], DOCUMENT_PREDICATE, json!({}));
    assert_eq!(code(verify(&env, &k)).kind, DsseErrorKind::Mismatch);
    let env = signed(&k, json!({}));
    let e = code(verify_envelope(&env, &[k.verifying_key()], &upper, DOCUMENT_PREDICATE, NOW));
    assert_eq!(e.kind, DsseErrorKind::Mismatch);
    assert!(e.message.contains("not 64 lowercase hex"), "{e}");
}

#[test]
fn wrong_predicate_type_is_mismatch() {
    let k = key(1);
    let env = sign_statement(&k, &subjects(), MODULE_PREDICATE, json!({}));
    let e = code(verify(&env, &k));
    assert_eq!(e.kind, DsseErrorKind::Mismatch, "{e}");
    assert!(e.message.contains(MODULE_PREDICATE) && e.message.contains(DOCUMENT_PREDICATE), "{e}");
}

#[test]
fn expired_is_expired() {
    let k = key(1);
    let env = signed(&k, json!({"expires": rfc3339(NOW - 1)}));
    let e = code(verify(&env, &k));
    assert_eq!(e.kind, DsseErrorKind::Expired, "{e}");
    assert!(e.message.contains(&rfc3339(NOW - 1)) && e.message.contains(&rfc3339(NOW)), "{e}");
    // Expiry is exclusive: at the instant itself it is over.
    assert_eq!(code(verify(&signed(&k, json!({"expires": rfc3339(NOW)})), &k)).kind, DsseErrorKind::Expired);
    assert!(verify(&signed(&k, json!({"expires": rfc3339(NOW + 1)})), &k).is_ok());
    // Offsets other than Z are RFC 3339 too.
    assert!(verify(&signed(&k, json!({"expires": "2999-01-01T00:00:00+02:00"})), &k).is_ok());
}

#[test]
fn malformed_expires_is_malformed() {
    let k = key(1);
    for bad in [json!("tomorrow"), json!("2026-12-01"), json!(1_900_000_000), json!(null)] {
        let e = code(verify(&signed(&k, json!({ "expires": bad })), &k));
        assert_eq!(e.kind, DsseErrorKind::Malformed, "{bad}: {e}");
        assert!(e.message.contains("expires"), "{e}");
    }
}

#[test]
fn malformed_envelopes() {
    let k = key(1);
    let good = signed(&k, json!({}));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not JSON", b"this is not json".to_vec(), "not DSSE envelope JSON"),
        ("empty", Vec::new(), "not DSSE envelope JSON"),
        ("JSON array", b"[]".to_vec(), "not DSSE envelope JSON"),
        ("no payloadType", with(&good, |v| drop(v.as_object_mut().unwrap().remove("payloadType"))), "payloadType"),
        ("wrong payloadType", with(&good, |v| v["payloadType"] = json!("application/json")), "application/json"),
        ("bad base64 payload", with(&good, |v| v["payload"] = json!("!!not base64!!")), "payload is not base64"),
        ("bad base64 sig", with(&good, |v| v["signatures"][0]["sig"] = json!("@@@@")), "is not base64"),
        ("no signatures", with(&good, |v| v["signatures"] = json!([])), "no signatures"),
        ("signatures missing", with(&good, |v| drop(v.as_object_mut().unwrap().remove("signatures"))), "signatures"),
        ("too many signatures", with(&good, |v| v["signatures"] = json!(vec![v["signatures"][0].clone(); 33])), "33 signatures"),
        ("too large", [&good[..good.len() - 1], &vec![b' '; 1 << 20][..]].concat(), "bytes"),
    ];
    for (what, env, needle) in cases {
        let e = code(verify(&env, &k));
        assert_eq!(e.kind, DsseErrorKind::Malformed, "{what}: {e}");
        assert!(e.message.contains(needle), "{what}: {e}");
    }
}

#[test]
fn signed_payload_that_is_not_a_statement_is_malformed() {
    let k = key(1);
    let v01 = statement(DOCUMENT_PREDICATE, &doc_sha(), json!({}));
    let v01 = String::from_utf8(v01).unwrap().replace("Statement/v1", "Statement/v0.1");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"hello".to_vec()),
        ("not an object", b"[1,2]".to_vec()),
        ("in-toto v0.1", v01.into_bytes()),
        ("no subject", json!({"_type": STATEMENT_TYPE, "predicateType": DOCUMENT_PREDICATE}).to_string().into_bytes()),
        ("empty subject", json!({"_type": STATEMENT_TYPE, "subject": [], "predicateType": DOCUMENT_PREDICATE}).to_string().into_bytes()),
        ("no predicateType", json!({"_type": STATEMENT_TYPE, "subject": [{"digest": {"sha256": doc_sha()}}]}).to_string().into_bytes()),
        ("predicate not object", statement(DOCUMENT_PREDICATE, &doc_sha(), json!("x"))),
    ];
    for (what, payload) in cases {
        let e = code(verify(&sign_raw(&k, &payload), &k));
        assert_eq!(e.kind, DsseErrorKind::Malformed, "{what}: {e}");
    }
    // And the same helper does produce envelopes that verify, so the cases above fail for their own reason.
    assert!(verify(&sign_raw(&k, &statement(DOCUMENT_PREDICATE, &doc_sha(), json!({}))), &k).is_ok());
}

#[test]
fn checks_run_in_documented_order() {
    let (k, other) = (key(1), key(2));
    let everything_wrong = sign_statement(&other, &[Subject { name: "x".into(), sha256: sha(b"x") }], MODULE_PREDICATE, json!({"expires": rfc3339(0)}));
    assert_eq!(code(verify(&everything_wrong, &k)).kind, DsseErrorKind::Untrusted);
    // Wrong payloadType beats a bad signature.
    let env = with(&everything_wrong, |v| v["payloadType"] = json!("text/plain"));
    assert_eq!(code(verify(&env, &k)).kind, DsseErrorKind::Malformed);
    // A statement that is not in-toto, but untrusted: untrusted first.
    assert_eq!(code(verify(&sign_raw(&other, b"[]"), &k)).kind, DsseErrorKind::Untrusted);
    let mismatch_and_expired = sign_statement(&k, &[Subject { name: "x".into(), sha256: sha(b"x") }], MODULE_PREDICATE, json!({"expires": rfc3339(0)}));
    assert_eq!(code(verify(&mismatch_and_expired, &k)).kind, DsseErrorKind::Mismatch);
    // Predicate type is checked before the subject.
    let e = code(verify(&mismatch_and_expired, &k));
    assert!(e.message.contains("predicateType"), "{e}");
    let tampered_and_expired = with(&signed(&k, json!({"expires": rfc3339(0)})), |v| {
        let p = String::from_utf8(STANDARD.decode(v["payload"].as_str().unwrap()).unwrap()).unwrap();
        v["payload"] = json!(STANDARD.encode(p.replace("runbook.md", "runbook.mx")));
    });
    assert_eq!(code(verify(&tampered_and_expired, &k)).kind, DsseErrorKind::Invalid);
}

#[test]
fn url_safe_unpadded_base64_is_accepted() {
    let k = key(1);
    let env = with(&signed(&k, json!({"x": "???>>>"})), |v| {
        let raw = STANDARD.decode(v["payload"].as_str().unwrap()).unwrap();
        let url = URL_SAFE_NO_PAD.encode(raw);
        assert!(url.contains(['-', '_']), "payload should exercise the URL-safe alphabet");
        v["payload"] = json!(url);
        let sig = STANDARD.decode(v["signatures"][0]["sig"].as_str().unwrap()).unwrap();
        v["signatures"][0]["sig"] = json!(URL_SAFE_NO_PAD.encode(sig));
    });
    assert!(verify(&env, &k).is_ok());
}

#[test]
fn pem_round_trip() {
    let k = generate().unwrap();
    assert_ne!(k.to_bytes(), generate().unwrap().to_bytes());
    let private = private_pem(&k);
    let public = public_pem(&k.verifying_key());
    assert!(private.starts_with("-----BEGIN PRIVATE KEY-----\n") && private.ends_with("-----END PRIVATE KEY-----\n"));
    assert!(public.starts_with("-----BEGIN PUBLIC KEY-----\n") && public.ends_with("-----END PUBLIC KEY-----\n"));
    assert_eq!(read_private(&private).unwrap().to_bytes(), k.to_bytes());
    assert_eq!(read_public(&public).unwrap(), k.verifying_key());
    assert_eq!(read_public(&private).unwrap(), k.verifying_key(), "a private key file serves as a public one");
    assert_eq!(read_private(&private.replace('\n', "\r\n")).unwrap().to_bytes(), k.to_bytes());
}

#[test]
fn wrong_pem_is_malformed() {
    let k = key(3);
    let e = read_private(&public_pem(&k.verifying_key())).unwrap_err();
    assert_eq!(e.kind, DsseErrorKind::Malformed);
    assert!(e.message.contains("PUBLIC KEY") && e.message.contains("BEGIN PRIVATE KEY"), "{e}");
    for text in
        ["", "not a pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "-----BEGIN PUBLIC KEY-----\n!!\n-----END PUBLIC KEY-----\n"]
    {
        assert_eq!(read_private(text).unwrap_err().kind, DsseErrorKind::Malformed, "{text:?}");
        assert_eq!(read_public(text).unwrap_err().kind, DsseErrorKind::Malformed, "{text:?}");
    }
    let e = read_private("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n").unwrap_err();
    assert!(e.message.contains("ENCRYPTED"), "{e}");
    let e = read_public("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n").unwrap_err();
    assert!(e.message.contains("OPENSSH PRIVATE KEY"), "{e}");
}

// ---- interop with the openssl command line ----

fn openssl(dir: &Path, args: &[&str]) -> std::process::Output {
    let out =
        common::cmd("openssl").args(args).current_dir(dir).output().unwrap_or_else(|e| panic!("cannot run openssl (it is needed for the interop tests): {e}"));
    out
}

fn openssl_ok(dir: &Path, args: &[&str]) {
    let out = openssl(dir, args);
    assert!(out.status.success(), "openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

#[test]
fn openssl_keys_are_read_and_written_identically() {
    let dir = Tmp::new("dsse-openssl");
    let d = dir.path();
    openssl_ok(d, &["genpkey", "-algorithm", "ed25519", "-out", "k.pem"]);
    openssl_ok(d, &["pkey", "-in", "k.pem", "-pubout", "-out", "pub.pem"]);
    openssl_ok(d, &["pkey", "-in", "k.pem", "-pubout", "-outform", "DER", "-out", "pub.der"]);
    let k = read_private(&read(d, "k.pem")).unwrap();
    let public = read_public(&read(d, "pub.pem")).unwrap();
    assert_eq!(public, k.verifying_key());
    assert_eq!(read_public(&read(d, "k.pem")).unwrap(), public);
    // Byte-for-byte the formats openssl writes.
    assert_eq!(private_pem(&k), read(d, "k.pem"));
    assert_eq!(public_pem(&public), read(d, "pub.pem"));
    // key_id is reproducible with openssl + sha256sum.
    assert_eq!(key_id(&public), format!("sha256:{}", sha(&std::fs::read(d.join("pub.der")).unwrap())));
    // And openssl reads ours.
    let ours = generate().unwrap();
    std::fs::write(d.join("ours.pem"), private_pem(&ours)).unwrap();
    openssl_ok(d, &["pkey", "-in", "ours.pem", "-pubout", "-out", "ours.pub"]);
    assert_eq!(read(d, "ours.pub"), public_pem(&ours.verifying_key()));
    // A key of another algorithm, in the right PEM wrapper, is refused.
    openssl_ok(d, &["genpkey", "-algorithm", "ed448", "-out", "k448.pem"]);
    assert_eq!(read_private(&read(d, "k448.pem")).unwrap_err().kind, DsseErrorKind::Malformed);
    openssl_ok(d, &["pkey", "-in", "k448.pem", "-pubout", "-out", "p448.pem"]);
    assert_eq!(read_public(&read(d, "p448.pem")).unwrap_err().kind, DsseErrorKind::Malformed);
}

#[test]
fn openssl_signature_verifies_in_our_envelope() {
    let dir = Tmp::new("dsse-openssl");
    let d = dir.path();
    openssl_ok(d, &["genpkey", "-algorithm", "ed25519", "-out", "k.pem"]);
    let public = read_public(&read(d, "k.pem")).unwrap();
    let payload = statement(DOCUMENT_PREDICATE, &doc_sha(), json!({"by": "openssl"}));
    std::fs::write(d.join("pae.bin"), pae(PAYLOAD_TYPE, &payload)).unwrap();
    openssl_ok(d, &["pkeyutl", "-sign", "-inkey", "k.pem", "-rawin", "-in", "pae.bin", "-out", "sig.bin"]);
    let sig = std::fs::read(d.join("sig.bin")).unwrap();
    let env = json!({"payloadType": PAYLOAD_TYPE, "payload": STANDARD.encode(&payload),
        "signatures": [{"keyid": key_id(&public), "sig": STANDARD.encode(&sig)}]});
    let v = verify_envelope(env.to_string().as_bytes(), &[public], &doc_sha(), DOCUMENT_PREDICATE, NOW).unwrap();
    assert_eq!(v.predicate["by"], "openssl");
    // Signed over the bare payload instead of the PAE: must not verify.
    std::fs::write(d.join("bare.bin"), &payload).unwrap();
    openssl_ok(d, &["pkeyutl", "-sign", "-inkey", "k.pem", "-rawin", "-in", "bare.bin", "-out", "bare.sig"]);
    let env = with(env.to_string().as_bytes(), |v| v["signatures"][0]["sig"] = json!(STANDARD.encode(std::fs::read(d.join("bare.sig")).unwrap())));
    assert_eq!(code(verify_envelope(&env, &[public], &doc_sha(), DOCUMENT_PREDICATE, NOW)).kind, DsseErrorKind::Invalid);
}

#[test]
fn our_envelope_verifies_with_openssl() {
    let dir = Tmp::new("dsse-openssl");
    let d = dir.path();
    let k = generate().unwrap();
    std::fs::write(d.join("pub.pem"), public_pem(&k.verifying_key())).unwrap();
    let env = parse(&signed(&k, json!({"expires": rfc3339(NOW + 3600)})));
    let payload = STANDARD.decode(env["payload"].as_str().unwrap()).unwrap();
    std::fs::write(d.join("pae.bin"), pae(env["payloadType"].as_str().unwrap(), &payload)).unwrap();
    std::fs::write(d.join("sig.bin"), STANDARD.decode(env["signatures"][0]["sig"].as_str().unwrap()).unwrap()).unwrap();
    let args = ["pkeyutl", "-verify", "-pubin", "-inkey", "pub.pem", "-rawin", "-in", "pae.bin", "-sigfile", "sig.bin"];
    let out = openssl(d, &args);
    assert!(out.status.success(), "openssl rejected our signature: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // The check can fail: openssl refuses the same signature over other bytes.
    std::fs::write(d.join("pae.bin"), pae(PAYLOAD_TYPE, b"something else")).unwrap();
    assert!(!openssl(d, &args).status.success(), "openssl accepted a signature over other bytes");
}
