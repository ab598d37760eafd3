//! Every verdict is cross-checked against `ssh-keygen -Y verify` (openssh-client
//! must be installed; CI: `apt-get install -y openssh-client`). Keys are made
//! with `ssh-keygen` in a temp dir; FIDO (-sk) signatures, which need hardware
//! to make, are forged here from their wire format and checked by ssh-keygen too.

use crate::common::{self, Tmp};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64ct::{Base64, Encoding};
use runbook_host::signatures::sshsig::{self, AllowedSigners, SigError, Verified};
use ssh_key::sha2::{Digest, Sha256, Sha512};

const NOW: u64 = 1_700_000_000;
const NOW_STR: &str = "20231114221320Z"; // NOW as ssh-keygen's -Overify-time
const NS: &str = "runbook-approval@example.com";
const MSG: &[u8] = b"approve call 42: deploy build 1234 to staging\n";

struct Lab {
    dir: Tmp,
}

struct Key {
    path: PathBuf,
    /// `keytype base64`, as it goes into allowed_signers.
    public: String,
    /// `SHA256:...` as printed by `ssh-keygen -l`.
    fingerprint: String,
}

fn ssh_keygen() -> Command {
    let mut cmd = common::cmd("ssh-keygen");
    cmd.env("TZ", "UTC"); // we read timestamps without Z as UTC
    cmd
}

fn run(mut cmd: Command, stdin: &[u8]) -> std::process::Output {
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("ssh-keygen not found: apt-get install -y openssh-client");
    // ssh-keygen may exit without reading stdin (e.g. unreadable signature).
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

impl Lab {
    fn new() -> Self {
        Lab { dir: Tmp::new("sshsig") }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn key(&self, name: &str, key_type: &str) -> Key {
        let path = self.path(name);
        let mut cmd = ssh_keygen();
        cmd.args(["-q", "-t", key_type, "-N", "", "-C", name, "-f"]).arg(&path);
        let out = run(cmd, b"");
        assert!(out.status.success(), "ssh-keygen -t {key_type}: {out:?}");
        let pub_path = path.with_extension("pub");
        let public = std::fs::read_to_string(&pub_path).unwrap();
        let public = public.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        let mut cmd = ssh_keygen();
        cmd.arg("-lf").arg(&pub_path);
        let out = run(cmd, b"");
        let listing = String::from_utf8(out.stdout).unwrap();
        let fingerprint = listing.split_whitespace().nth(1).unwrap().to_string();
        assert!(fingerprint.starts_with("SHA256:"), "{listing}");
        Key { path, public, fingerprint }
    }

    fn sign(&self, key: &Key, namespace: &str, msg: &[u8]) -> String {
        sshsig::sign_with_ssh_keygen(&key.path, namespace, msg).unwrap()
    }

    /// Whether `ssh-keygen -Y verify` accepts, at time NOW.
    fn ssh_keygen_accepts(&self, allowed: &str, principal: &str, ns: &str, msg: &[u8], sig: &str) -> bool {
        self.ssh_keygen_verify(allowed, principal, ns, msg, sig).status.success()
    }

    fn ssh_keygen_verify(&self, allowed: &str, principal: &str, ns: &str, msg: &[u8], sig: &str) -> std::process::Output {
        let (allowed_path, sig_path) = (self.path("allowed_signers"), self.path("msg.sig"));
        std::fs::write(&allowed_path, allowed).unwrap();
        std::fs::write(&sig_path, sig).unwrap();
        let mut cmd = ssh_keygen();
        cmd.args(["-Y", "verify", "-I", principal, "-n", ns]).arg(format!("-Overify-time={NOW_STR}")).arg("-f").arg(&allowed_path).arg("-s").arg(&sig_path);
        run(cmd, msg)
    }

    /// Verifies with both this module and ssh-keygen, asserts they agree, and
    /// returns this module's verdict.
    fn check(&self, allowed: &str, principal: &str, ns: &str, msg: &[u8], sig: &str) -> Result<Verified, SigError> {
        let ours = AllowedSigners::parse(allowed).and_then(|a| sshsig::verify(&a, Some(principal), ns, msg, sig, NOW));
        let theirs = self.ssh_keygen_accepts(allowed, principal, ns, msg, sig);
        assert_eq!(ours.is_ok(), theirs, "disagreement: ours {ours:?}, ssh-keygen accepted: {theirs}\nallowed_signers:\n{allowed}");
        ours
    }
}

fn ok(key: &Key, principal: &str, result: Result<Verified, SigError>) -> Verified {
    let v = result.unwrap();
    assert_eq!(v.principal, principal);
    assert_eq!(v.fingerprint, key.fingerprint);
    v
}

#[test]
fn good_ed25519_signature() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    assert!(sig.starts_with("-----BEGIN SSH SIGNATURE-----"), "{sig}");
    let allowed = format!("alice@example.com {}\n", alice.public);
    let v = ok(&alice, "alice@example.com", lab.check(&allowed, "alice@example.com", NS, MSG, &sig));
    assert_eq!(v.key_type, "ssh-ed25519");
    assert_eq!(v.line, 1);
}

#[test]
fn good_ecdsa_p256_signature_and_sha256_hash() {
    let lab = Lab::new();
    let bob = lab.key("bob", "ecdsa"); // ssh-keygen's default ecdsa size is P-256
    let allowed = format!("bob@example.com {}\n", bob.public);
    let sig = lab.sign(&bob, NS, MSG);
    let v = ok(&bob, "bob@example.com", lab.check(&allowed, "bob@example.com", NS, MSG, &sig));
    assert_eq!(v.key_type, "ecdsa-sha2-nistp256");

    // ssh-keygen hashes with sha512 unless told otherwise; sha256 must work too.
    let mut cmd = ssh_keygen();
    cmd.args(["-Y", "sign", "-Ohashalg=sha256", "-n", NS, "-f"]).arg(&bob.path);
    let sig256 = String::from_utf8(run(cmd, MSG).stdout).unwrap();
    assert_ne!(sig256, sig);
    ok(&bob, "bob@example.com", lab.check(&allowed, "bob@example.com", NS, MSG, &sig256));
}

#[test]
fn message_changed_by_one_byte() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    let allowed = format!("alice@example.com {}\n", alice.public);
    let mut changed = MSG.to_vec();
    changed[8] ^= 1; // "call 42" -> "call 52"
    let err = lab.check(&allowed, "alice@example.com", NS, &changed, &sig).unwrap_err();
    assert_eq!(err, SigError::BadSignature);
    assert!(lab.check(&allowed, "alice@example.com", NS, b"", &sig).is_err());
}

#[test]
fn wrong_namespace() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let sig = lab.sign(&alice, "git", MSG);
    let allowed = format!("alice@example.com {}\n", alice.public);
    let err = lab.check(&allowed, "alice@example.com", NS, MSG, &sig).unwrap_err();
    assert_eq!(err, SigError::WrongNamespace { expected: NS.into(), found: "git".into() });
    assert!(err.to_string().contains("\"git\""), "{err}");
}

#[test]
fn key_not_in_file() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let mallory = lab.key("mallory", "ed25519");
    let sig = lab.sign(&mallory, NS, MSG);
    let allowed = format!("alice@example.com {}\n", alice.public);
    let err = lab.check(&allowed, "alice@example.com", NS, MSG, &sig).unwrap_err();
    assert_eq!(err, SigError::UnknownKey { fingerprint: mallory.fingerprint.clone() });
    // An empty file trusts nobody.
    let err = lab.check("", "alice@example.com", NS, MSG, &sig).unwrap_err();
    assert!(matches!(err, SigError::UnknownKey { .. }), "{err:?}");
}

#[test]
fn principal_mismatch() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let bob = lab.key("bob", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    let allowed = format!("alice@example.com {}\nbob@example.com {}\n", alice.public, bob.public);
    ok(&alice, "alice@example.com", lab.check(&allowed, "alice@example.com", NS, MSG, &sig));
    let err = lab.check(&allowed, "bob@example.com", NS, MSG, &sig).unwrap_err();
    assert_eq!(err, SigError::PrincipalMismatch { principal: "bob@example.com".into(), fingerprint: alice.fingerprint.clone() });
    // Principals are matched whole, case-sensitively.
    assert!(lab.check(&allowed, "alice@example.co", NS, MSG, &sig).is_err());
    assert!(lab.check(&allowed, "Alice@example.com", NS, MSG, &sig).is_err());
}

#[test]
fn principal_lists_and_wildcards() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    let cases = [
        ("ops@example.com,alice@example.com", "alice@example.com", true),
        ("ops@example.com,alice@example.com", "ops@example.com", true),
        ("ops@example.com,alice@example.com", "eve@example.com", false),
        ("*@example.com", "alice@example.com", true),
        ("*@example.com", "alice@example.org", false),
        ("*@example.com", "alice@evil.example.com", false),
        ("*@*example.com", "alice@evil.example.com", true),
        ("alice@example.???", "alice@example.com", true),
        ("alice@example.???", "alice@example.co", false),
        ("a*e@*", "alice@example.com", true),
        ("*", "anyone", true),
        ("!mallory@example.com,*@example.com", "alice@example.com", true),
        ("!mallory@example.com,*@example.com", "mallory@example.com", false),
        ("*@example.com,!mallory@example.com", "mallory@example.com", false),
        ("\"alice@example.com\"", "alice@example.com", true),
    ];
    for (patterns, principal, expected) in cases {
        let allowed = format!("{patterns} {}\n", alice.public);
        let result = lab.check(&allowed, principal, NS, MSG, &sig);
        assert_eq!(result.is_ok(), expected, "{patterns} vs {principal}: {result:?}");
        if expected {
            ok(&alice, principal, result);
        }
    }
}

#[test]
fn no_principal_given_returns_first_listed() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let bob = lab.key("bob", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    let allowed = AllowedSigners::parse(&format!("bob@example.com {}\n!root,alice@example.com,admin@example.com {}\n", bob.public, alice.public)).unwrap();
    let v = sshsig::verify(&allowed, None, NS, MSG, &sig, NOW).unwrap();
    assert_eq!((v.principal.as_str(), v.line), ("alice@example.com", 2));
}

#[test]
fn namespaces_option() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    let excluded = format!("alice@example.com namespaces=\"git,file\" {}\n", alice.public);
    let err = lab.check(&excluded, "alice@example.com", NS, MSG, &sig).unwrap_err();
    assert_eq!(err, SigError::NamespaceNotAllowed { namespace: NS.into(), line: 1 });

    for allowing in ["git,runbook-*", "runbook-approval@example.com", "*"] {
        let allowed = format!("alice@example.com NameSpaces=\"{allowing}\" {}\n", alice.public);
        ok(&alice, "alice@example.com", lab.check(&allowed, "alice@example.com", NS, MSG, &sig));
    }

    // A later line for the same key may allow what an earlier one does not.
    let two_lines = format!("{excluded}alice@example.com namespaces=\"runbook-*\" {}\n", alice.public);
    let v = ok(&alice, "alice@example.com", lab.check(&two_lines, "alice@example.com", NS, MSG, &sig));
    assert_eq!(v.line, 2);
}

#[test]
fn valid_after_and_valid_before() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    let line = |opts: &str| format!("alice@example.com {opts} {}\n", alice.public);
    let verdict = |opts: &str| lab.check(&line(opts), "alice@example.com", NS, MSG, &sig);

    assert_eq!(verdict("valid-before=\"20231114\"").unwrap_err(), SigError::Expired { line: 1 });
    assert_eq!(verdict("valid-after=\"20231115Z\"").unwrap_err(), SigError::NotYetValid { line: 1 });
    // Boundaries: both ends are inclusive, to the second.
    verdict(&format!("valid-before=\"{NOW_STR}\"")).unwrap();
    verdict(&format!("valid-after=\"{NOW_STR}\"")).unwrap();
    assert!(verdict("valid-before=\"20231114221319Z\"").is_err());
    assert!(verdict("valid-after=\"20231114221321\"").is_err());
    assert!(verdict("valid-before=\"202311142213\"").is_err());
    verdict("valid-before=\"202311142214Z\"").unwrap();
    verdict("valid-before=\"202311142214z\"").unwrap();
    // Leap day and a window around NOW.
    verdict("valid-after=\"20200229\",valid-before=\"20240229000000Z\"").unwrap();
    verdict("namespaces=\"runbook-*\",VALID-AFTER=\"19991231\"").unwrap();

    let err = verdict("valid-before=\"20231114\"").unwrap_err();
    assert!(err.to_string().contains("expired"), "{err}");
}

#[test]
fn malformed_lines_name_the_line() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    let key = &alice.public;
    let base64 = key.split(' ').nth(1).unwrap();
    let bad_lines = [
        "alice@example.com".to_string(),
        "alice@example.com ssh-ed25519".to_string(),
        "alice@example.com ssh-ed25519 AAAAnot-base64!".to_string(),
        format!("alice@example.com ssh-ed25519 {}", &base64[..base64.len() - 8]),
        format!("alice@example.com ecdsa-sha2-nistp256 {base64}"),
        format!("alice@example.com frobnicate=\"1\" {key}"),
        format!("alice@example.com valid-before=20300101 {key}"),
        format!("alice@example.com valid-before=\"20231340\" {key}"),
        format!("alice@example.com valid-before=\"2023111\" {key}"),
        format!("alice@example.com valid-after=\"20240101\",valid-before=\"20230101\" {key}"),
        format!("alice@example.com namespaces=\"a\",namespaces=\"b\" {key}"),
        format!("alice@example.com namespaces=\"a\", {key}"),
        format!("alice@example.com namespaces=\"a {key}"),
    ];
    for bad in bad_lines {
        // ssh-keygen names the same line as bad (it logs "FILE:3: ..." and
        // refuses when no other line matches)...
        let allowed = format!("# approvers\n\n{bad}\n");
        let out = lab.ssh_keygen_verify(&allowed, "alice@example.com", NS, MSG, &sig);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("allowed_signers:3:"), "{bad}: {stderr}");
        let err = lab.check(&allowed, "alice@example.com", NS, MSG, &sig).unwrap_err();
        assert!(matches!(err, SigError::Malformed { line: 3, .. }), "{bad}: {err:?}");
        assert!(err.to_string().starts_with("allowed_signers line 3: "), "{err}");
        // ...but skips it and goes on to later lines, where we refuse the whole file.
        let with_good_line = format!("{allowed}alice@example.com {key}\n");
        assert!(lab.ssh_keygen_accepts(&with_good_line, "alice@example.com", NS, MSG, &sig), "{bad}");
        assert_eq!(AllowedSigners::parse(&with_good_line).unwrap_err(), err);
    }
}

#[test]
fn comments_blank_lines_and_key_comments_are_fine() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    let allowed = format!(
        "# approvers for runbook\n\n   # indented comment\n\t\nalice@example.com\t namespaces=\"runbook-*\"   {}  alice's yubikey (desk)\n",
        alice.public
    );
    assert_eq!(AllowedSigners::parse(&allowed).unwrap().len(), 1);
    let v = ok(&alice, "alice@example.com", lab.check(&allowed, "alice@example.com", NS, MSG, &sig));
    assert_eq!(v.line, 5);
}

#[test]
fn cert_authority_lines_do_not_authorise() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let sig = lab.sign(&alice, NS, MSG);
    let allowed = format!("*@example.com cert-authority {}\n", alice.public);
    let err = lab.check(&allowed, "alice@example.com", NS, MSG, &sig).unwrap_err();
    assert_eq!(err, SigError::CertAuthorityOnly { line: 1 });
    assert!(err.to_string().contains("certificate"), "{err}");
}

#[test]
fn garbage_armor() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let good = lab.sign(&alice, NS, MSG);
    let allowed = format!("alice@example.com {}\n", alice.public);
    // One base64 character in the middle of the blob changed.
    let mut flipped = good.clone().into_bytes();
    let i = flipped.len() / 2;
    flipped[i] = if flipped[i] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    let cases = [
        "".to_string(),
        "hello".to_string(),
        "-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n".to_string(),
        "-----BEGIN SSH SIGNATURE-----\n!!!!\n-----END SSH SIGNATURE-----\n".to_string(),
        good.replace("SSH SIGNATURE", "OPENSSH PRIVATE KEY"),
        good.lines().take(3).collect::<Vec<_>>().join("\n"), // truncated
        flipped,
    ];
    for armored in cases {
        let err = lab.check(&allowed, "alice@example.com", NS, MSG, &armored).unwrap_err();
        assert!(matches!(err, SigError::NotArmored(_) | SigError::BadSignature), "{armored}: {err:?}");
    }
    let err = lab.check(&allowed, "alice@example.com", NS, MSG, "hello").unwrap_err();
    assert!(matches!(err, SigError::NotArmored(_)), "{err:?}");
}

#[test]
fn sign_with_ssh_keygen_round_trip_and_errors() {
    let lab = Lab::new();
    let alice = lab.key("alice", "ed25519");
    let allowed = AllowedSigners::parse(&format!("alice@example.com {}\n", alice.public)).unwrap();
    let big = vec![b'x'; 1 << 20]; // larger than a pipe buffer
    for msg in [MSG, b"", &big[..]] {
        let sig = sshsig::sign_with_ssh_keygen(&alice.path, NS, msg).unwrap();
        sshsig::verify(&allowed, Some("alice@example.com"), NS, msg, &sig, NOW).unwrap();
    }
    // Signing with only the public key works via ssh-agent; with no agent it fails cleanly.
    let missing = sshsig::sign_with_ssh_keygen(Path::new("/nonexistent/key"), NS, MSG).unwrap_err();
    assert!(matches!(&missing, SigError::Io(m) if m.contains("ssh-keygen -Y sign failed")), "{missing:?}");
}

#[test]
fn rsa_is_refused_as_unsupported() {
    // A known limitation: ssh-keygen accepts this, we refuse it clearly.
    let lab = Lab::new();
    let carol = lab.key("carol", "rsa");
    let sig = lab.sign(&carol, NS, MSG);
    let allowed = format!("carol@example.com {}\n", carol.public);
    assert!(lab.ssh_keygen_accepts(&allowed, "carol@example.com", NS, MSG, &sig));
    let parsed = AllowedSigners::parse(&allowed).unwrap(); // RSA lines still parse
    let err = sshsig::verify(&parsed, Some("carol@example.com"), NS, MSG, &sig, NOW).unwrap_err();
    assert_eq!(err, SigError::UnsupportedKeyType { key_type: "ssh-rsa".into() });
}

// ---- FIDO (-sk) keys, forged in their wire format ----

#[derive(Clone, Copy)]
enum Sk {
    Ed25519,
    EcdsaP256,
}

fn put_string(out: &mut Vec<u8>, data: &[u8]) {
    out.extend((data.len() as u32).to_be_bytes());
    out.extend(data);
}

fn put_mpint(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut v: Vec<u8> = bytes.iter().copied().skip_while(|&b| b == 0).collect();
    if v.first().is_some_and(|&b| b & 0x80 != 0) {
        v.insert(0, 0);
    }
    put_string(out, &v);
}

/// What ssh-keygen writes for an sk key whose authenticator returned `flags`
/// (0x01 = user touched it). Returns (allowed_signers key, armored signature).
fn forge_sk(kind: Sk, application: &str, ns: &str, msg: &[u8], flags: u8) -> (String, String) {
    let counter = 42u32.to_be_bytes();
    let mut signed = b"SSHSIG".to_vec();
    put_string(&mut signed, ns.as_bytes());
    put_string(&mut signed, b"");
    put_string(&mut signed, b"sha512");
    put_string(&mut signed, &Sha512::digest(msg));
    // The authenticator signs sha256(application) || flags || counter || sha256(data).
    let mut authenticator_data = Sha256::digest(application).to_vec();
    authenticator_data.push(flags);
    authenticator_data.extend(counter);
    authenticator_data.extend(Sha256::digest(&signed));

    let (alg, mut public, raw_sig) = match kind {
        Sk::Ed25519 => {
            use ed25519_dalek::Signer;
            let sk = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
            let mut public = Vec::new();
            put_string(&mut public, b"sk-ssh-ed25519@openssh.com");
            put_string(&mut public, sk.verifying_key().as_bytes());
            let sig = sk.sign(&authenticator_data).to_bytes().to_vec();
            ("sk-ssh-ed25519@openssh.com", public, sig)
        }
        Sk::EcdsaP256 => {
            use p256::ecdsa::signature::Signer;
            let sk = p256::ecdsa::SigningKey::from_slice(&[7; 32]).unwrap();
            let mut public = Vec::new();
            put_string(&mut public, b"sk-ecdsa-sha2-nistp256@openssh.com");
            put_string(&mut public, b"nistp256");
            put_string(&mut public, sk.verifying_key().to_encoded_point(false).as_bytes());
            let sig: p256::ecdsa::Signature = sk.sign(&authenticator_data);
            let mut raw = Vec::new();
            put_mpint(&mut raw, &sig.r().to_bytes());
            put_mpint(&mut raw, &sig.s().to_bytes());
            ("sk-ecdsa-sha2-nistp256@openssh.com", public, raw)
        }
    };
    put_string(&mut public, application.as_bytes());

    let mut sig = Vec::new();
    put_string(&mut sig, alg.as_bytes());
    put_string(&mut sig, &raw_sig);
    sig.push(flags);
    sig.extend(counter);

    let mut blob = b"SSHSIG".to_vec();
    blob.extend(1u32.to_be_bytes());
    put_string(&mut blob, &public);
    put_string(&mut blob, ns.as_bytes());
    put_string(&mut blob, b"");
    put_string(&mut blob, b"sha512");
    put_string(&mut blob, &sig);
    let b64 = Base64::encode_string(&blob);
    let body: Vec<&str> = b64.as_bytes().chunks(70).map(|c| std::str::from_utf8(c).unwrap()).collect();
    let armored = format!("-----BEGIN SSH SIGNATURE-----\n{}\n-----END SSH SIGNATURE-----\n", body.join("\n"));
    (format!("{alg} {}", Base64::encode_string(&public)), armored)
}

#[test]
fn fido_sk_keys_touched() {
    let lab = Lab::new();
    for (kind, key_type) in [(Sk::Ed25519, "sk-ssh-ed25519@openssh.com"), (Sk::EcdsaP256, "sk-ecdsa-sha2-nistp256@openssh.com")] {
        let (public, sig) = forge_sk(kind, "ssh:", NS, MSG, 0x01);
        let allowed = format!("alice@example.com {public} alice's security key\n");
        let v = lab.check(&allowed, "alice@example.com", NS, MSG, &sig).unwrap();
        assert_eq!(v.key_type, key_type);
        // The fingerprint is ssh-keygen's.
        let key_file = lab.path("sk.pub");
        std::fs::write(&key_file, format!("{public}\n")).unwrap();
        let mut cmd = ssh_keygen();
        cmd.arg("-lf").arg(&key_file);
        let listing = String::from_utf8(run(cmd, b"").stdout).unwrap();
        assert_eq!(listing.split_whitespace().nth(1), Some(v.fingerprint.as_str()), "{listing}");

        let mut changed = MSG.to_vec();
        changed[0] ^= 1;
        assert_eq!(lab.check(&allowed, "alice@example.com", NS, &changed, &sig).unwrap_err(), SigError::BadSignature);
        assert!(lab.check(&allowed, "bob@example.com", NS, MSG, &sig).is_err());

        // The application string is part of the key: another one is another key.
        let (other_app_key, _) = forge_sk(kind, "ssh:other", NS, MSG, 0x01);
        let other = format!("alice@example.com {other_app_key}\n");
        let err = lab.check(&other, "alice@example.com", NS, MSG, &sig).unwrap_err();
        assert!(matches!(err, SigError::UnknownKey { .. }), "{err:?}");
    }
}

#[test]
fn fido_sk_signature_without_touch_is_refused() {
    // Deliberately stricter than ssh-keygen, which accepts it.
    let lab = Lab::new();
    for kind in [Sk::Ed25519, Sk::EcdsaP256] {
        let (public, sig) = forge_sk(kind, "ssh:", NS, MSG, 0x00);
        let allowed = format!("alice@example.com {public}\n");
        assert!(lab.ssh_keygen_accepts(&allowed, "alice@example.com", NS, MSG, &sig));
        let parsed = AllowedSigners::parse(&allowed).unwrap();
        let err = sshsig::verify(&parsed, Some("alice@example.com"), NS, MSG, &sig, NOW).unwrap_err();
        assert!(matches!(err, SigError::UserPresenceMissing { .. }), "{err:?}");
        // With user verification (0x04) but no presence bit, still refused.
        let (_, sig) = forge_sk(kind, "ssh:", NS, MSG, 0x04);
        let err = sshsig::verify(&parsed, Some("alice@example.com"), NS, MSG, &sig, NOW).unwrap_err();
        assert!(matches!(err, SigError::UserPresenceMissing { .. }), "{err:?}");
        // Touched + verified (0x05) is fine.
        let (_, sig) = forge_sk(kind, "ssh:", NS, MSG, 0x05);
        sshsig::verify(&parsed, Some("alice@example.com"), NS, MSG, &sig, NOW).unwrap();
    }
}
