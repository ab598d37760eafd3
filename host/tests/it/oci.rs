//! Tests of `oci::{push, pull, resolve_digest, OciRef}` against a real distribution registry (see
//! common/oci_registry.rs): round trips, and each failure a user can meet, asserted by the code and
//! by the message they would read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::oci_registry::{hang_server, Registry, PASSWORD, USER};
use runbook_host::registry::oci::client::{pull, push, resolve_digest, Artifact, OciError, OciErrorKind, OciRef, Options};
use sha2::{Digest as _, Sha256};

const ARTIFACT_TYPE: &str = "application/vnd.runbook-host.runbook.v1";
const LAYER_TYPE: &str = "application/vnd.runbook-host.runbook.v1+yaml";
const MAX: usize = 1 << 20;

fn opts(registry: &Registry) -> Options {
    Options {
        extra_ca_pem: if registry.tls { vec![registry.ca_pem.clone()] } else { Vec::new() },
        username: Some(USER.into()),
        password: Some(PASSWORD.into()),
        timeout: Duration::from_secs(10),
    }
}

fn reference(s: &str) -> OciRef {
    OciRef::parse(s).unwrap_or_else(|e| panic!("{s} should parse: {e}"))
}

fn artifact(bytes: &[u8]) -> Artifact<'_> {
    Artifact { artifact_type: ARTIFACT_TYPE, layer_media_type: LAYER_TYPE, bytes, annotations: BTreeMap::new() }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Asserts the failure's code and that its message names the reference; returns it for more checks.
#[track_caller]
fn expect_err<T: std::fmt::Debug>(result: Result<T, OciError>, kind: OciErrorKind, named: &OciRef) -> OciError {
    let err = result.expect_err(&format!("expected a {kind} error"));
    // Shown with --nocapture, to read what a user would.
    eprintln!("{err}");
    assert_eq!(err.kind, kind, "wrong kind; message: {}", err.message);
    assert!(err.message.contains(&named.to_string()), "message does not name {named}: {}", err.message);
    err
}

#[track_caller]
fn assert_mentions(err: &OciError, words: &[&str]) {
    for word in words {
        assert!(err.message.contains(word), "message should mention {word:?}: {}", err.message);
    }
}

fn blob_file(registry: &Registry, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
    registry.storage.join("docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
}

#[test]
fn push_then_pull_round_trips_bytes_and_annotations() {
    let registry = Registry::start(true, true);
    let o = opts(&registry);
    let tagged = reference(&registry.url("runbooks/deploy:v1"));
    let bytes = b"steps:\n  - run: echo hello\n".to_vec();
    let annotations: BTreeMap<String, String> =
        [("org.opencontainers.image.title", "deploy.yaml"), ("dev.runbook-host.signer", "ci")].map(|(k, v)| (k.into(), v.into())).into();
    let digest = push(&tagged, &Artifact { annotations: annotations.clone(), ..artifact(&bytes) }, &o).expect("push");
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");

    let by_digest_written = reference(&format!("oci://{}/runbooks/deploy@{digest}", registry.addr));
    for r in [&tagged, &tagged.with_digest(&digest), &by_digest_written] {
        let pulled = pull(r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o).unwrap_or_else(|e| panic!("pull {r}: {e}"));
        assert_eq!(pulled.bytes, bytes, "{r}");
        assert_eq!(pulled.annotations, annotations, "{r}");
        assert_eq!(pulled.manifest_digest, digest, "{r}");
        assert_eq!(pulled.layer_digest, sha256(&bytes), "{r}");
    }
    assert_eq!(resolve_digest(&tagged, &o).expect("resolve"), digest);
}

#[test]
fn plain_http_round_trip_to_a_loopback_registry() {
    let registry = Registry::start(false, false);
    let o = Options::default();
    let tagged = reference(&registry.url("rb/plain:v1"));
    assert!(tagged.plain_http);
    let digest = push(&tagged, &artifact(b"plain"), &o).expect("push over http");
    assert_eq!(pull(&tagged.with_digest(&digest), ARTIFACT_TYPE, LAYER_TYPE, MAX, &o).expect("pull").bytes, b"plain");
}

#[test]
fn pull_of_another_artifact_type_is_wrong_type() {
    let registry = Registry::start(false, true);
    let o = opts(&registry);
    let r = reference(&registry.url("rb/typed:v1"));
    push(&r, &artifact(b"x: 1\n"), &o).expect("push");

    let err = expect_err(pull(&r, "application/vnd.example.policy.v1", LAYER_TYPE, MAX, &o), OciErrorKind::WrongType, &r);
    assert_mentions(&err, &[ARTIFACT_TYPE, "application/vnd.example.policy.v1"]);
    let err = expect_err(pull(&r, ARTIFACT_TYPE, "application/json", MAX, &o), OciErrorKind::WrongType, &r);
    assert_mentions(&err, &[LAYER_TYPE, "application/json"]);
}

#[test]
fn moved_tag_changes_the_digest_and_old_digest_still_pulls_old_bytes() {
    let registry = Registry::start(true, true);
    let o = opts(&registry);
    let tag = reference(&registry.url("rb/moving:stable"));
    let old = push(&tag, &artifact(b"version: 1\n"), &o).expect("push old");
    assert_eq!(resolve_digest(&tag, &o).expect("resolve before"), old);
    let new = push(&tag, &artifact(b"version: 2\n"), &o).expect("push new");
    let resolved = resolve_digest(&tag, &o).expect("resolve after");
    assert_ne!(resolved, old);
    assert_eq!(resolved, new);

    assert_eq!(pull(&tag.with_digest(&old), ARTIFACT_TYPE, LAYER_TYPE, MAX, &o).expect("old by digest").bytes, b"version: 1\n");
    assert_eq!(pull(&tag, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o).expect("by tag").bytes, b"version: 2\n");
}

#[test]
fn tampered_blob_in_registry_storage_is_digest_mismatch() {
    let registry = Registry::start(false, true);
    let o = opts(&registry);
    let r = reference(&registry.url("rb/tamper:v1"));
    let bytes = b"run: deploy --safe\n".to_vec();
    let digest = push(&r, &artifact(&bytes), &o).expect("push");

    let data = blob_file(&registry, &sha256(&bytes));
    assert_eq!(std::fs::read(&data).expect("blob data file"), bytes);
    // Same length, so only the hash can tell.
    std::fs::write(&data, b"run: deploy --YOLO\n").expect("tamper");

    for pinned in [r.clone(), r.with_digest(&digest)] {
        let err = expect_err(pull(&pinned, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o), OciErrorKind::DigestMismatch, &pinned);
        assert_mentions(&err, &["downloading the layer", &sha256(&bytes)]);
    }
}

#[test]
fn tampered_manifest_in_registry_storage_is_digest_mismatch() {
    let registry = Registry::start(false, true);
    let o = opts(&registry);
    let r = reference(&registry.url("rb/tamper-manifest:v1"));
    let a = Artifact { annotations: [("note".to_string(), "aaaa".to_string())].into(), ..artifact(b"x") };
    let digest = push(&r, &a, &o).expect("push");

    let data = blob_file(&registry, &digest);
    let manifest = String::from_utf8(std::fs::read(&data).expect("manifest data file")).expect("utf8");
    // Still valid JSON of the same length, so the registry serves it as it would a genuine manifest.
    std::fs::write(&data, manifest.replace("aaaa", "bbbb")).expect("tamper");

    let pinned = r.with_digest(&digest);
    let err = expect_err(pull(&pinned, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o), OciErrorKind::DigestMismatch, &pinned);
    assert_mentions(&err, &[&digest]);
    expect_err(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o), OciErrorKind::DigestMismatch, &r);
}

#[test]
fn layer_larger_than_max_bytes_is_too_large() {
    let registry = Registry::start(false, true);
    let o = opts(&registry);
    let r = reference(&registry.url("rb/big:v1"));
    let bytes = vec![b'x'; 1000];
    push(&r, &artifact(&bytes), &o).expect("push");

    let err = expect_err(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, 999, &o), OciErrorKind::TooLarge, &r);
    assert_mentions(&err, &["1000", "999"]);
    assert_eq!(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, 1000, &o).expect("exactly max_bytes").bytes, bytes);
}

#[test]
fn missing_or_wrong_credentials_are_auth_failed() {
    let registry = Registry::start(true, true);
    let good = opts(&registry);
    let r = reference(&registry.url("rb/private:v1"));
    push(&r, &artifact(b"secret runbook"), &good).expect("push with credentials");

    let anonymous = Options { username: None, password: None, ..good.clone() };
    let wrong = Options { password: Some("not-the-password".into()), ..good.clone() };
    for o in [&anonymous, &wrong] {
        let err = expect_err(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, o), OciErrorKind::AuthFailed, &r);
        assert_mentions(&err, &["401"]);
        expect_err(resolve_digest(&r, o), OciErrorKind::AuthFailed, &r);
        expect_err(push(&r, &artifact(b"overwrite"), o), OciErrorKind::AuthFailed, &r);
    }
    let half = Options { password: None, ..good.clone() };
    let err = expect_err(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &half), OciErrorKind::AuthFailed, &r);
    assert_mentions(&err, &["no password"]);
    // Nothing was overwritten by the refused pushes.
    assert_eq!(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &good).expect("pull").bytes, b"secret runbook");
}

#[test]
fn registry_ca_not_given_is_tls_failed() {
    let registry = Registry::start(false, true);
    let r = reference(&registry.url("rb/tls:v1"));
    let no_ca = Options { extra_ca_pem: Vec::new(), ..opts(&registry) };
    let err = expect_err(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &no_ca), OciErrorKind::TlsFailed, &r);
    assert_mentions(&err, &["certificate"]);

    let other = Registry::start(false, true);
    let wrong_ca = Options { extra_ca_pem: vec![other.ca_pem.clone()], ..opts(&registry) };
    expect_err(push(&r, &artifact(b"x"), &wrong_ca), OciErrorKind::TlsFailed, &r);

    let not_pem = Options { extra_ca_pem: vec![b"not a certificate".to_vec()], ..opts(&registry) };
    expect_err(resolve_digest(&r, &not_pem), OciErrorKind::TlsFailed, &r);
}

#[test]
fn https_to_a_plain_http_registry_is_tls_failed() {
    let registry = Registry::start(false, false);
    let r = reference(&format!("oci://{}/rb/x:v1", registry.addr));
    expect_err(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &Options::default()), OciErrorKind::TlsFailed, &r);
}

#[test]
fn plain_http_to_a_tls_registry_fails_cleanly() {
    let registry = Registry::start(false, true);
    let o = opts(&registry);
    let https = reference(&registry.url("rb/x:v1"));
    push(&https, &artifact(b"x"), &o).expect("push");

    let r = reference(&format!("oci+http://{}/rb/x:v1", registry.addr));
    let err = expect_err(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o), OciErrorKind::RegistryError, &r);
    assert_mentions(&err, &["400", "write oci:// instead of oci+http://"]);
}

#[test]
fn stopped_registry_is_unreachable_and_restart_serves_the_same_storage() {
    let mut registry = Registry::start(false, true);
    let o = opts(&registry);
    let r = reference(&registry.url("rb/durable:v1"));
    let digest = push(&r, &artifact(b"kept"), &o).expect("push");
    registry.stop();

    let err = expect_err(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o), OciErrorKind::Unreachable, &r);
    assert_mentions(&err, &["connect"]);
    expect_err(resolve_digest(&r, &o), OciErrorKind::Unreachable, &r);

    registry.restart();
    assert_eq!(resolve_digest(&r, &o).expect("resolve after restart"), digest);
}

#[test]
fn registry_that_never_answers_times_out() {
    let (addr, _server) = hang_server();
    let o = Options { timeout: Duration::from_secs(2), ..Options::default() };
    for r in [reference(&format!("oci://{addr}/rb/x:v1")), reference(&format!("oci+http://{addr}/rb/x:v1"))] {
        let started = Instant::now();
        let err = expect_err(pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o), OciErrorKind::Timeout, &r);
        let took = started.elapsed();
        assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(10), "{r} took {took:?}: {err}");
    }
}

#[test]
fn unknown_tag_repository_or_digest_is_not_found() {
    let registry = Registry::start(true, true);
    let o = opts(&registry);
    let known = reference(&registry.url("rb/known:v1"));
    push(&known, &artifact(b"x"), &o).expect("push");

    let unknown_tag = reference(&registry.url("rb/known:v2"));
    let err = expect_err(pull(&unknown_tag, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o), OciErrorKind::NotFound, &unknown_tag);
    assert_mentions(&err, &["MANIFEST_UNKNOWN"]);
    expect_err(resolve_digest(&unknown_tag, &o), OciErrorKind::NotFound, &unknown_tag);

    let unknown_repo = reference(&registry.url("rb/never-pushed:v1"));
    expect_err(pull(&unknown_repo, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o), OciErrorKind::NotFound, &unknown_repo);
    let unknown_digest = known.with_digest(&sha256(b"never pushed"));
    expect_err(pull(&unknown_digest, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o), OciErrorKind::NotFound, &unknown_digest);
}

#[test]
fn blocking_api_works_inside_a_tokio_runtime() {
    let registry = Registry::start(false, true);
    let o = opts(&registry);
    let r = reference(&registry.url("rb/in-runtime:v1"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let pulled = runtime.block_on(async {
        push(&r, &artifact(b"from async"), &o).expect("push");
        pull(&r, ARTIFACT_TYPE, LAYER_TYPE, MAX, &o).expect("pull")
    });
    assert_eq!(pulled.bytes, b"from async");
}

#[test]
fn push_needs_a_tag_and_no_digest() {
    // Refused before any connection, so the address need not exist.
    let by_digest = reference(&format!("oci://127.0.0.1:9/rb/x@{}", sha256(b"x")));
    expect_err(push(&by_digest, &artifact(b"x"), &Options::default()), OciErrorKind::InvalidReference, &by_digest);
    let both = reference(&format!("oci://127.0.0.1:9/rb/x:v1@{}", sha256(b"x")));
    expect_err(push(&both, &artifact(b"x"), &Options::default()), OciErrorKind::InvalidReference, &both);
}

#[test]
fn parse_accepts_good_references() {
    let d = sha256(b"manifest");
    let r = reference("oci://registry.example.com/runbooks/deploy:v1");
    assert_eq!(
        r,
        OciRef { registry: "registry.example.com".into(), repository: "runbooks/deploy".into(), tag: Some("v1".into()), digest: None, plain_http: false }
    );
    assert!(!r.is_loopback());

    let r = reference(&format!("oci://127.0.0.1:5000/a/b/c@{d}"));
    assert_eq!((r.registry.as_str(), r.repository.as_str(), r.tag.as_deref(), r.digest.as_deref()), ("127.0.0.1:5000", "a/b/c", None, Some(&*d)));
    assert!(r.is_loopback());

    let r = reference(&format!("oci://ghcr.io/org/repo:1.2.3@{d}"));
    assert_eq!((r.tag.as_deref(), r.digest.as_deref()), (Some("1.2.3"), Some(&*d)));

    let r = reference("oci+http://localhost:5000/x:y");
    assert!(r.plain_http && r.is_loopback());
    for good in [
        "oci+http://127.0.0.1/x:y",
        "oci+http://127.9.8.7:80/x:y",
        "oci+http://[::1]:5000/x:y",
        "oci://[::1]/x:y",
        "oci://host/a.b_c__d-e--f/g0:_Tag-1.x",
        "oci://my-registry.local:443/team/runbooks/db-failover:2024.06",
    ] {
        assert_eq!(reference(good).to_string(), good, "round trip");
    }
    let pinned = reference("oci://h/x:v1").with_digest(&d);
    assert_eq!(pinned.to_string(), format!("oci://h/x:v1@{d}"));
    assert_eq!(reference(&pinned.to_string()), pinned);
}

#[test]
fn parse_rejects_bad_references() {
    let d = sha256(b"manifest");
    let cases: Vec<(String, &str)> = vec![
        ("".into(), "oci://"),
        ("registry.example.com/x:y".into(), "oci://"),
        ("https://registry.example.com/x:y".into(), "oci://"),
        ("oci://registry.example.com".into(), "no repository"),
        ("oci://h/x".into(), "implicit :latest"),
        ("oci://h/:v1".into(), "empty"),
        ("oci://h/Runbooks:v1".into(), "lowercase"),
        ("oci://h/x//y:v1".into(), "invalid component"),
        ("oci://h/-x:v1".into(), "invalid component"),
        ("oci://h/x_:v1".into(), "invalid component"),
        ("oci://h/x...y:v1".into(), "invalid component"),
        ("oci://h/x:".into(), "tag"),
        ("oci://h/x:-v1".into(), "tag"),
        ("oci://h/x:v 1".into(), "tag"),
        (format!("oci://h/x:{}", "a".repeat(129)), "tag"),
        ("oci://h/x@sha256:abc".into(), "digest"),
        (format!("oci://h/x@{}", d.to_uppercase()), "digest"),
        (format!("oci://h/x@md5:{}", &d[7..39]), "digest"),
        ("oci://h:0/x:v1".into(), "port"),
        ("oci://h:99999/x:v1".into(), "port"),
        ("oci://h:/x:v1".into(), "port"),
        ("oci://h:p/x:v1".into(), "port"),
        ("oci://user:pw@h/x:v1".into(), "credentials"),
        ("oci://-h/x:v1".into(), "registry host"),
        ("oci://[::1/x:v1".into(), "unclosed"),
        ("oci://[nope]:5000/x:v1".into(), "IPv6"),
        ("oci+http://registry.example.com/x:v1".into(), "loopback"),
        ("oci+http://192.0.2.1:5000/x:v1".into(), "loopback"),
        ("oci+http://127.0.0.1.nip.example/x:v1".into(), "loopback"),
    ];
    for (input, why) in cases {
        let err = OciRef::parse(&input).expect_err(&format!("{input:?} should be rejected"));
        assert_eq!(err.kind, OciErrorKind::InvalidReference, "{input:?}: {err}");
        assert!(err.message.contains(&format!("{input:?}")), "message should quote the input: {}", err.message);
        assert!(err.message.contains(why), "{input:?}: message should mention {why:?}: {}", err.message);
    }
}

#[test]
fn options_default_and_debug_hide_the_password() {
    let o = Options::default();
    assert_eq!(o.timeout, Duration::from_secs(30));
    assert!(o.username.is_none() && o.password.is_none());
    let shown = format!("{:?}", Options { username: Some(USER.into()), password: Some(PASSWORD.into()), ..o });
    assert!(shown.contains(USER) && !shown.contains(PASSWORD), "{shown}");
}
