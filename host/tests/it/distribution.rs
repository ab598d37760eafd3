//! Past one machine (issue "Past one machine"): documents from an HTTPS registry and from a real OCI
//! registry (Debian's `docker-registry` on loopback, TLS from a test CA, htpasswd), the cache that lets a
//! pinned document run while the registry is down, DSSE signatures required of documents, and receipts
//! signed by the host and checked by `verify --key`. Every refusal is asserted by its code and message.

use crate::common::mcp::{everything, text, work, Client, BIN};
use crate::common::oci_registry::{make_certificates, Registry, PASSWORD, USER};
use crate::common::{self, repo, Tmp};
use runbook_host::registry::https::Cache;
use runbook_host::registry::{self, Settings, Trust};
use runbook_host::signatures::dsse;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

fn example(name: &str) -> Vec<u8> {
    std::fs::read(repo().join("examples").join(name).join("runbook.yaml")).unwrap()
}

fn tmp(tag: &str) -> Tmp {
    Tmp::new(&format!("dist-{tag}"))
}

/// Settings for `registry` with a cache of the test's own and no credentials from the environment.
fn settings(registry: &str, cache: &Path) -> Settings {
    let mut s = Settings::new(registry);
    s.cache = Some(Cache { root: cache.to_path_buf() });
    s.oci_username = None;
    s.oci_password = None;
    s
}

fn cli(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = common::cmd(BIN);
    c.args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn out(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A key pair written by `runbook-host keygen`: (private, public).
fn keygen(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let k = dir.join(name);
    let o = cli(&["keygen", "--out", k.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", out(&o));
    (k.clone(), PathBuf::from(format!("{}.pub", k.display())))
}

fn public(p: &Path) -> ed25519_dalek::VerifyingKey {
    dsse::read_public(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn sign(file: &Path, key: &Path, extra: &[&str]) {
    let mut args = vec!["sign", file.to_str().unwrap(), "--key", key.to_str().unwrap()];
    args.extend(extra);
    let o = cli(&args, &[]);
    assert!(o.status.success(), "{}", out(&o));
}

/// The test client in front of `env K=V... runbook-host run REF ARGS -- SERVER...` (the proxy's own environment).
fn proxy_env(w: &common::mcp::Work, name: &str, reference: &str, args: &[&str], servers: &[Vec<String>], envs: &[(&str, &str)]) -> Client {
    let mut cmd = vec!["env".to_string()];
    cmd.extend(envs.iter().map(|(k, v)| format!("{k}={v}")));
    cmd.extend([BIN.to_string(), "run".into(), reference.to_string()]);
    cmd.extend(args.iter().map(|s| s.to_string()));
    for s in servers {
        cmd.push("--".into());
        cmd.extend(s.iter().cloned());
    }
    Client::new(w, name, cmd)
}

#[test]
fn keys_interoperate_with_openssl_and_keygen_never_overwrites() {
    let d = tmp("keys");
    let (k, p) = keygen(d.path(), "k.pem");
    let meta = std::fs::metadata(&k).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);
    // openssl derives the same public key from our private key.
    let o = common::cmd("openssl").args(["pkey", "-in", k.to_str().unwrap(), "-pubout"]).output().unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8(o.stdout).unwrap(), std::fs::read_to_string(&p).unwrap());
    // A second keygen to the same place is refused and leaves the key as it was.
    let before = std::fs::read(&k).unwrap();
    let o = cli(&["keygen", "--out", k.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(out(&o).contains("already exists"), "{}", out(&o));
    assert_eq!(std::fs::read(&k).unwrap(), before);
}

#[test]
fn a_required_signature_on_a_local_file_and_in_a_directory_registry() {
    let d = tmp("sig");
    let (k, kp) = keygen(d.path(), "k.pem");
    let (_o, op) = keygen(d.path(), "other.pem");
    let doc = d.path().join("rotate.yaml");
    std::fs::write(&doc, example("rotate-credentials")).unwrap();
    let cache = d.path().join("cache");
    let mut s = settings("unused", &cache);
    s.require_signature = vec![public(&kp)];
    let r = doc.to_str().unwrap();
    // No signature beside it.
    let e = registry::resolve_with(r, &s).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::SignatureMissing, "{e}");
    assert!(e.message.contains("rotate.yaml.dsse.json"), "{e}");
    // Signed: it resolves, and the provenance names the key.
    sign(&doc, &k, &["--expires", "1h"]);
    let ok = registry::resolve_with(r, &s).unwrap();
    assert_eq!(ok.provenance.signed_by.as_deref(), Some(dsse::key_id(&public(&kp)).as_str()));
    assert!(ok.provenance.signature_expires.is_some());
    // Another key only.
    s.require_signature = vec![public(&op)];
    assert_eq!(registry::resolve_with(r, &s).unwrap_err().kind, registry::RegistryErrorKind::Signature(dsse::DsseErrorKind::Untrusted));
    s.require_signature = vec![public(&op), public(&kp)];
    assert!(registry::resolve_with(r, &s).is_ok(), "any one of the keys given");
    // The document changed after signing: the signature no longer names it.
    s.require_signature = vec![public(&kp)];
    let mut b = std::fs::read(&doc).unwrap();
    b.extend_from_slice(b"\n# an extra line\n");
    std::fs::write(&doc, &b).unwrap();
    let e = registry::resolve_with(r, &s).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Signature(dsse::DsseErrorKind::Mismatch), "{e}");
    // Expired: signed with a lifetime already past (made with the library: the CLI takes only a duration ahead).
    let key = dsse::read_private(&std::fs::read_to_string(&k).unwrap()).unwrap();
    let sha = runbook_host::files::sha256_hex(&b);
    let env = dsse::sign_statement(
        &key,
        &[dsse::Subject { name: "rotate.yaml".into(), sha256: sha }],
        dsse::DOCUMENT_PREDICATE,
        json!({"expires": "2020-01-01T00:00:00Z"}),
    );
    std::fs::write(d.path().join("rotate.yaml.dsse.json"), env).unwrap();
    let e = registry::resolve_with(r, &s).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Signature(dsse::DsseErrorKind::Expired), "{e}");
    assert!(e.message.contains("2020-01-01T00:00:00Z"), "{e}");
    // Malformed.
    std::fs::write(d.path().join("rotate.yaml.dsse.json"), b"{\"payloadType\":").unwrap();
    assert_eq!(registry::resolve_with(r, &s).unwrap_err().kind, registry::RegistryErrorKind::Signature(dsse::DsseErrorKind::Malformed));

    // A registry that requires signatures takes only signed documents, and keeps the signature.
    let reg = d.path().join("reg");
    let unsigned = d.path().join("unsigned.yaml");
    std::fs::write(&unsigned, example("incident-rollback")).unwrap();
    let o = cli(&["registry", "add", unsigned.to_str().unwrap(), "--registry", reg.to_str().unwrap(), "--require-signature", kp.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("signature-missing"), "{}", out(&o));
    assert!(!reg.join("index.json").exists(), "nothing is written for a refused document");
    sign(&unsigned, &k, &[]);
    let o = cli(&["registry", "add", unsigned.to_str().unwrap(), "--registry", reg.to_str().unwrap(), "--require-signature", kp.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", out(&o));
    let index: Value = serde_json::from_slice(&std::fs::read(reg.join("index.json")).unwrap()).unwrap();
    let entry = &index["runbooks"]["incident-rollback"];
    let (version, e) = entry.as_object().unwrap().iter().next().unwrap();
    assert_eq!(e["signature"], format!("{}.dsse.json", e["path"].as_str().unwrap()));
    let mut s = settings(reg.to_str().unwrap(), &cache);
    s.require_signature = vec![public(&kp)];
    let r = registry::resolve_with(&format!("incident-rollback@{version}"), &s).unwrap();
    assert_eq!((r.trust, r.provenance.kind), (Trust::T2, "directory"));
    // The stored signature is checked too: replaced by one of another key, refused.
    s.require_signature = vec![public(&op)];
    assert_eq!(
        registry::resolve_with(&format!("incident-rollback@{version}"), &s).unwrap_err().kind,
        registry::RegistryErrorKind::Signature(dsse::DsseErrorKind::Untrusted)
    );
}

/// The HTTPS directory registry (tests/fixtures/https_registry.py) and its request log.
struct Https {
    child: Child,
    base: String,
    log: PathBuf,
    ca: Vec<u8>,
    /// Holds the certificates and the log while the server runs.
    dir: Tmp,
}

impl Drop for Https {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Https {
    fn start(root: &Path) -> Https {
        let dir = tmp("https");
        let ca = make_certificates(dir.path());
        let port_file = dir.path().join("port");
        let log = dir.path().join("requests.log");
        let child = common::cmd("python3")
            .arg(repo().join("host/tests/fixtures/https_registry.py"))
            .args(["--root", root.to_str().unwrap(), "--cert"])
            .arg(dir.path().join("server.crt"))
            .arg("--key")
            .arg(dir.path().join("server.key"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .spawn()
            .unwrap();
        let t = Instant::now();
        while !port_file.exists() {
            assert!(t.elapsed() < Duration::from_secs(20), "the HTTPS registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let port = std::fs::read_to_string(&port_file).unwrap();
        Https { child, base: format!("https://127.0.0.1:{port}"), log, ca, dir }
    }

    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(str::to_string).collect()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Stores bytes in a registry cache as the host does; their sha256.
fn c_put(cache: &Path, bytes: &[u8]) -> String {
    Cache { root: cache.to_path_buf() }.put_blob(bytes).unwrap()
}

#[test]
fn an_https_registry_with_its_cache_offline_and_the_transport_rules() {
    let d = tmp("httpsreg");
    let reg = d.path().join("reg");
    for ex in ["rotate-credentials", "incident-rollback"] {
        let f = d.path().join(format!("{ex}.yaml"));
        std::fs::write(&f, example(ex)).unwrap();
        assert!(registry::add(&reg, &f).is_ok());
    }
    let mut srv = Https::start(&reg);
    let cache = d.path().join("cache");
    let url = format!("{}/base", srv.base);
    // The test CA is not among the system's roots: refused, with the reason.
    let e = registry::resolve_with("rotate-credentials@1.3.0", &settings(&url, &cache)).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Unreachable, "{e}");
    assert!(e.message.contains("certificate") || e.message.contains("UnknownIssuer"), "{e}");
    let mut s = settings(&url, &cache);
    s.ca_pem = vec![srv.ca.clone()];
    // Cold: the index and the document are fetched.
    let r = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap();
    assert_eq!((r.trust, r.provenance.kind, r.provenance.from_cache.as_deref()), (Trust::T2, "https", None));
    assert_eq!(r.bytes, example("rotate-credentials"));
    assert_eq!(r.provenance.registry.as_deref(), Some(url.as_str()));
    // Warm: the index is fetched whole (never revalidated: issue 28, F5), the document comes from the
    // cache by its pin.
    let before = srv.requests().len();
    registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap();
    let new: Vec<String> = srv.requests()[before..].to_vec();
    assert_eq!(new.len(), 1, "{new:?}");
    assert!(new[0].starts_with("GET /base/index.json 200"), "{new:?}");

    // Issue 28, F5: a planted index in the cache (its URL entry keeping the registry's ETag) that pins a
    // planted document without `requires_approval`. While the registry answers, neither is used: the
    // registry's own index pins the registry's document.
    let index_url = format!("{url}/index.json");
    let entry_path = cache.join("urls").join(format!("{}.json", runbook_host::files::sha256_hex(index_url.as_bytes())));
    let entry: Value = serde_json::from_slice(&std::fs::read(&entry_path).unwrap()).unwrap();
    let real = example("rotate-credentials");
    let planted_doc = String::from_utf8(real.clone()).unwrap().replace("requires_approval: true", "requires_approval: false");
    assert_ne!(planted_doc.as_bytes(), &real[..]);
    let planted_sha = c_put(&cache, planted_doc.as_bytes());
    let real_index = std::fs::read_to_string(reg.join("index.json")).unwrap();
    let planted_index = real_index.replace(&runbook_host::files::sha256_hex(&real), &planted_sha);
    assert_ne!(planted_index, real_index);
    let planted_index_sha = c_put(&cache, planted_index.as_bytes());
    let planted_entry = json!({"url": index_url, "etag": entry["etag"], "sha256": planted_index_sha, "fetched_at": entry["fetched_at"]});
    std::fs::write(&entry_path, planted_entry.to_string()).unwrap();
    let r = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap();
    assert_eq!(r.bytes, real, "the registry's document, not the planted one");
    assert_eq!(r.provenance.from_cache, None);
    // A cache directory other users can write is not used at all: the document is fetched again.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(cache.join("blobs"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let before = srv.requests().len();
        let r = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap();
        assert_eq!(r.bytes, real);
        assert!(srv.requests()[before..].iter().any(|l| l.starts_with("GET /base/rotate-credentials/1.3.0/runbook.yaml 200")), "{:?}", srv.requests());
        std::fs::set_permissions(cache.join("blobs"), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    // Put the registry's index back for what follows (the offline stand-in).
    registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap();
    // The registry goes down: the pinned, cached document still runs, and says it came from the cache.
    srv.stop();
    let r = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap();
    let why = r.provenance.from_cache.clone().unwrap();
    assert!(why.contains("unreachable"), "{why}");
    // ... but a version whose bytes were never fetched does not.
    let e = registry::resolve_with("incident-rollback@2.0.1", &s).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Unreachable, "{e}");
    assert!(e.message.contains("not in the cache"), "{e}");
    // ... nor anything once the cached index is older than allowed offline.
    s.offline_max_age = -1;
    let e = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap_err();
    assert!(e.message.contains("allowed offline"), "{e}");
    // ... nor anything without a cache.
    let mut no_cache = s.clone();
    no_cache.cache = None;
    no_cache.offline_max_age = registry::DEFAULT_OFFLINE_MAX_AGE;
    let e = registry::resolve_with("rotate-credentials@1.3.0", &no_cache).unwrap_err();
    assert!(e.message.contains("no copy of its index is cached"), "{e}");

    // A cached document altered on disk is never used: it no longer hashes to its name.
    let srv = Https::start(&reg);
    let mut s = settings(&format!("{}/base", srv.base), &cache);
    s.ca_pem = vec![srv.ca.clone()];
    let blob = cache.join("blobs/sha256").join(runbook_host::files::sha256_hex(&example("rotate-credentials")));
    std::fs::write(&blob, b"steps: []\n").unwrap();
    let r = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap();
    assert_eq!(r.bytes, example("rotate-credentials"), "fetched again, not read from the altered cache");
    assert!(srv.requests().iter().any(|l| l.starts_with("GET /base/rotate-credentials/1.3.0/runbook.yaml 200")));

    // The transport rules.
    let e = registry::resolve_with("x@1", &settings("http://registry.invalid/base", &cache)).unwrap_err();
    assert!(e.message.contains("only allowed to a loopback address"), "{e}");
    for (path, why) in [("downgrade", "down to"), ("loop", "redirect")] {
        let mut s = settings(&format!("{}/{path}", srv.base), &cache);
        s.ca_pem = vec![srv.ca.clone()];
        let e = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap_err();
        assert!(e.message.contains(why), "{path}: {e}");
    }
    let mut s = settings(&format!("{}/big", srv.base), &cache);
    s.ca_pem = vec![srv.ca.clone()];
    let e = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap_err();
    assert!(e.message.contains("larger than"), "{e}");
    assert!(srv.dir.path().is_dir());
}

#[test]
fn an_oci_registry_push_pull_index_moved_tag_tamper_auth_tls_and_down() {
    let d = tmp("oci");
    let mut reg = Registry::start(true, true);
    let ca = d.path().join("ca.pem");
    std::fs::write(&ca, &reg.ca_pem).unwrap();
    let cache = d.path().join("cache");
    let creds = [("RUNBOOK_REGISTRY_USERNAME", USER), ("RUNBOOK_REGISTRY_PASSWORD", PASSWORD), ("RUNBOOK_HOST_CACHE", cache.to_str().unwrap())];
    let doc = d.path().join("rotate.yaml");
    std::fs::write(&doc, example("rotate-credentials")).unwrap();
    let prefix = format!("oci://{}/runbooks", reg.addr);
    let mut s = settings(&prefix, &cache);
    s.ca_pem = vec![reg.ca_pem.clone()];
    s.oci_username = Some(USER.into());
    s.oci_password = Some(PASSWORD.into());

    // Without credentials: refused with the registry's answer.
    let o = cli(&["registry", "push", doc.to_str().unwrap(), "--registry", &prefix, "--registry-ca", ca.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains("auth-failed"), "{}", out(&o));
    // Without the CA: a TLS failure.
    let o = cli(&["registry", "push", doc.to_str().unwrap(), "--registry", &prefix], &creds);
    assert!(out(&o).contains("tls-failed"), "{}", out(&o));
    // Published: pushed to PREFIX/<id>:<version> and pinned in the index.
    let o = cli(&["registry", "push", doc.to_str().unwrap(), "--registry", &prefix, "--registry-ca", ca.to_str().unwrap(), "--format", "json"], &creds);
    assert!(o.status.success(), "{}", out(&o));
    let pushed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(pushed["sha256"], runbook_host::files::sha256_hex(&example("rotate-credentials")));
    let r = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap();
    assert_eq!((r.trust, r.provenance.kind, r.bytes.clone()), (Trust::T2, "oci", example("rotate-credentials")));
    // By digest (pinned) and by tag (not a pin).
    let by_digest = pushed["reference"].as_str().unwrap().to_string();
    let r = registry::resolve_with(&by_digest, &s).unwrap();
    assert_eq!((r.trust, r.reference.as_str()), (Trust::T2, "rotate-credentials@1.3.0"));
    // Issue 28, F5, for a digest: the cache once mapped the reference to a blob by an entry naming it, so a
    // planted entry and blob ran as pinned. Now the cache is read through the pin alone (the manifest by
    // its digest, then the layer it names): the planted pair is never used, online or with the registry down.
    let planted = String::from_utf8(example("rotate-credentials")).unwrap().replace("requires_approval: true", "requires_approval: false");
    let planted_sha = c_put(&cache, planted.as_bytes());
    Cache { root: cache.clone() }.put_url_entry(&by_digest, None, &planted_sha, runbook_host::registry::https::now_unix()).unwrap();
    assert_eq!(registry::resolve_with(&by_digest, &s).unwrap().bytes, example("rotate-credentials"));
    let by_tag = format!("oci://{}/runbooks/rotate-credentials:1.3.0", reg.addr);
    let r = registry::resolve_with(&by_tag, &s).unwrap();
    assert_eq!((r.trust, r.pinned_sha256.clone()), (Trust::T1, None));
    // Another document pushed over the same tag: the index's pin still resolves to the pinned bytes, the
    // tag to the new ones, and a second publish of another document at that id@version is a conflict.
    let other = d.path().join("other.yaml");
    std::fs::write(&other, String::from_utf8(example("rotate-credentials")).unwrap().replace("Rotate", "Rotate (moved)")).unwrap();
    let o = cli(&["registry", "push", other.to_str().unwrap(), &by_tag, "--registry-ca", ca.to_str().unwrap()], &creds);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap().bytes, example("rotate-credentials"));
    assert_ne!(registry::resolve_with(&by_tag, &s).unwrap().bytes, example("rotate-credentials"));
    let o = cli(&["registry", "push", other.to_str().unwrap(), "--registry", &prefix, "--registry-ca", ca.to_str().unwrap()], &creds);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("conflict"), "{}", out(&o));

    // The registry goes down: the pinned reference and id@version run from the cache, a tag does not.
    reg.stop();
    let r = registry::resolve_with(&by_digest, &s).unwrap();
    assert!(r.provenance.from_cache.is_some());
    assert_eq!(r.bytes, example("rotate-credentials"), "the pinned bytes, not the planted ones");
    let r = registry::resolve_with("rotate-credentials@1.3.0", &s).unwrap();
    assert!(r.provenance.from_cache.as_deref().unwrap().contains("unreachable"), "{:?}", r.provenance);
    let e = registry::resolve_with(&by_tag, &s).unwrap_err();
    assert!(e.message.contains("a tag is not a pin"), "{e}");
    reg.restart();

    // Tampered in the registry's storage: the layer no longer hashes to its digest. A fresh cache, so the
    // bytes must come from the registry.
    let blob = runbook_host::files::sha256_hex(&example("rotate-credentials"));
    let data = reg.storage.join("docker/registry/v2/blobs/sha256").join(&blob[..2]).join(&blob).join("data");
    std::fs::write(&data, String::from_utf8(example("rotate-credentials")).unwrap().replace("1.3.0", "1.3.1")).unwrap();
    let mut fresh = s.clone();
    fresh.cache = Some(Cache { root: d.path().join("cache2") });
    let e = registry::resolve_with("rotate-credentials@1.3.0", &fresh).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Tampered, "{e}");
    let e = registry::resolve_with(&by_digest, &fresh).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Tampered, "{e}");
    assert!(!d.path().join("cache2/blobs/sha256").join(&blob).exists(), "nothing tampered lands in the cache");
}

/// The whole path in front of a real MCP server: a signed document published to the OCI registry, run by
/// `id@version` with a signature required, the receipt signed, `verify --key` passing with the right key
/// and failing with another, and the receipt's signature removed: refused even without `--key`.
#[test]
fn a_signed_document_from_oci_runs_and_its_signed_receipt_verifies() {
    let w = work("dist-e2e");
    let reg = Registry::start(true, true);
    let ca = w.dir.join("ca.pem");
    std::fs::write(&ca, &reg.ca_pem).unwrap();
    let cache = w.dir.join("cache");
    let creds = [("RUNBOOK_REGISTRY_USERNAME", USER), ("RUNBOOK_REGISTRY_PASSWORD", PASSWORD), ("RUNBOOK_HOST_CACHE", cache.to_str().unwrap())];
    let (k, kp) = keygen(&w.dir, "signer.pem");
    let (_other, op) = keygen(&w.dir, "other.pem");
    let (rk, rkp) = keygen(&w.dir, "host.pem");
    let doc = w.dir.join("echo-only.json");
    std::fs::copy(common::mcp::runbook("echo-only.json"), &doc).unwrap();
    sign(&doc, &k, &[]);
    let prefix = format!("oci://{}/team", reg.addr);
    let o = cli(
        &["registry", "push", doc.to_str().unwrap(), "--registry", &prefix, "--registry-ca", ca.to_str().unwrap(), "--require-signature", kp.to_str().unwrap()],
        &creds,
    );
    assert!(o.status.success(), "{}", out(&o));
    assert!(out(&o).contains("with its signature"), "{}", out(&o));

    // Required signature by another key: refused before any server starts or any tool runs.
    let args = |key: &Path| -> Vec<String> {
        ["--registry", &prefix, "--registry-ca", ca.to_str().unwrap(), "--require-signature", key.to_str().unwrap(), "--signing-key", rk.to_str().unwrap()]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let refused_args = args(&op);
    let refused: Vec<&str> = refused_args.iter().map(String::as_str).collect();
    let mut c = proxy_env(&w, "test-agent", "echo-only@1.0.0", &refused, &[everything()], &creds);
    let r = c.ask(json!({"op": "init"}));
    assert_eq!(r["ok"], false, "{r}");
    assert!(r.to_string().contains("signature-untrusted"), "{r}");
    c.close();
    assert!(w.run_dirs().is_empty(), "a refused document leaves no run");

    let ok_args = args(&kp);
    let ok: Vec<&str> = ok_args.iter().map(String::as_str).collect();
    let mut c = proxy_env(&w, "test-agent", "echo-only@1.0.0", &ok, &[everything()], &creds);
    c.init();
    assert_eq!(text(&c.call("echo", json!({"message": "from oci"}))), "Echo: from oci");
    assert_eq!(c.close(), Some(0));
    let run_dir = w.latest();
    let run: Value = serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    let p = &run["document"]["provenance"];
    assert_eq!((p["kind"].as_str(), p["signed_by"].as_str()), (Some("oci"), Some(dsse::key_id(&public(&kp)).as_str())), "{p}");
    assert_eq!(run["receipt_signature"]["key_id"], dsse::key_id(&public(&rkp)));
    assert!(run_dir.join("receipt.dsse.json").is_file());

    let verify = |extra: &[&str]| {
        let mut a = vec!["verify", run_dir.to_str().unwrap()];
        a.extend(extra);
        cli(&a, &[])
    };
    let o = verify(&["--key", rkp.to_str().unwrap()]);
    assert!(o.status.success(), "{}", out(&o));
    assert!(out(&o).contains("receipt signed by sha256:"), "{}", out(&o));
    let o = verify(&["--key", op.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("signature-untrusted"), "{}", out(&o));
    // A receipt edited after signing: the signature no longer names it (the receipt check itself fails first).
    let envelope = std::fs::read(run_dir.join("receipt.dsse.json")).unwrap();
    std::fs::remove_file(run_dir.join("receipt.dsse.json")).unwrap();
    let o = verify(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("the signature is gone"), "{}", out(&o));
    // What DSSE leaves unsigned in an envelope (a signature's keyid, further signatures) is refused in a
    // receipt's: the host writes exactly one signature, named by its key (found by the verify fuzz target).
    let env_v: Value = serde_json::from_slice(&envelope).unwrap();
    let mut renamed = env_v.clone();
    renamed["signatures"][0]["keyid"] = "ops-team-approved".into();
    let mut doubled = env_v.clone();
    let extra = json!({"keyid": "someone", "sig": env_v["signatures"][0]["sig"].clone()});
    doubled["signatures"].as_array_mut().unwrap().push(extra);
    for (what, v) in [("a keyid changed", renamed), ("a second signature", doubled)] {
        std::fs::write(run_dir.join("receipt.dsse.json"), v.to_string()).unwrap();
        let o = verify(&[]);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", out(&o));
        assert!(out(&o).contains("exactly one signature"), "{what}: {}", out(&o));
    }
    std::fs::write(run_dir.join("receipt.dsse.json"), &envelope).unwrap();
    assert!(verify(&[]).status.success());

    // The evidence into the registry the team already runs (the redacted derivative, its signed receipt
    // with it), and back: `verify oci://...` pulls every file by digest and verifies.
    let target = format!("oci://{}/evidence/runs:latest", reg.addr);
    let redacted = w.dir.join("redacted");
    let o = cli(
        &["export", run_dir.to_str().unwrap(), "--out", redacted.to_str().unwrap(), "--to", &target, "--registry-ca", ca.to_str().unwrap(), "--format", "json"],
        &creds,
    );
    assert!(o.status.success(), "{}", out(&o));
    let pushed = serde_json::from_slice::<Value>(&o.stdout).unwrap()["pushed"].as_str().unwrap().to_string();
    assert!(pushed.contains("@sha256:"), "{pushed}");
    let o = cli(&["verify", &pushed, "--registry-ca", ca.to_str().unwrap(), "--key", rkp.to_str().unwrap()], &creds);
    assert!(o.status.success(), "{}", out(&o));
    assert!(out(&o).contains("receipt signed by"), "{}", out(&o));
    let o = cli(&["verify", &pushed, "--registry-ca", ca.to_str().unwrap(), "--key", op.to_str().unwrap()], &creds);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    // The receipt altered in the registry's storage: refused before anything is verified.
    let receipt = std::fs::read(redacted.join(run_dir.file_name().unwrap()).join("receipt.json")).unwrap();
    let sha = runbook_host::files::sha256_hex(&receipt);
    let data = reg.storage.join("docker/registry/v2/blobs/sha256").join(&sha[..2]).join(&sha).join("data");
    let mut altered = receipt.clone();
    altered[10] ^= 1;
    std::fs::write(&data, &altered).unwrap();
    let o = cli(&["verify", &pushed, "--registry-ca", ca.to_str().unwrap()], &creds);
    assert_ne!(o.status.code(), Some(0), "{}", out(&o));
    assert!(out(&o).contains("tampered") || out(&o).contains("digest"), "{}", out(&o));
}

/// The guard (docs/spec/run.md#guarded-calls) keeps what the host trusts and signs with out of the agent's
/// calls: the receipt key, the keys a document must be signed by, the registry CA and the registry cache (a
/// forged cached index would stand in for a registry that is down). Named in a call, each is denied as
/// `guarded`.
#[test]
fn the_guard_keeps_keys_cas_and_the_cache_out_of_reach() {
    let w = work("dist-guard");
    let (k, kp) = keygen(&w.dir, "signer.pem");
    let (rk, _) = keygen(&w.dir, "host.pem");
    let doc = w.dir.join("echo-only.json");
    std::fs::copy(common::mcp::runbook("echo-only.json"), &doc).unwrap();
    sign(&doc, &k, &[]);
    let ca = w.dir.join("some-ca.pem");
    std::fs::write(&ca, make_certificates(&w.dir)).unwrap();
    let cache = w.dir.join("the-cache");
    let args = ["--require-signature", kp.to_str().unwrap(), "--signing-key", rk.to_str().unwrap(), "--registry-ca", ca.to_str().unwrap()];
    let mut c = proxy_env(&w, "test-agent", doc.to_str().unwrap(), &args, &[everything()], &[("RUNBOOK_HOST_CACHE", cache.to_str().unwrap())]);
    c.init();
    assert_eq!(text(&c.call("echo", json!({"message": "hello"}))), "Echo: hello");
    for p in [&rk, &kp, &ca, &cache.join("blobs/sha256")] {
        let r = c.call("echo", json!({"message": format!("cat {}", p.display())}));
        common::mcp::assert_blocked(&r, "undeclared-tool");
        assert!(text(&r).contains("runbook-host itself"), "{}: {r}", p.display());
    }
    // Relative to the working directory, as an agent in the project writes it.
    let r = c.call("echo", json!({"message": "cat ./host.pem"}));
    assert!(text(&r).contains("runbook-host itself"), "{r}");
    c.close();
    let ev = common::mcp::events(&w.latest());
    assert_eq!(ev.iter().filter(|(e, d)| e["guard"] == true && d["reason"] == "guarded").count(), 5);
    w.verify_all();
}
