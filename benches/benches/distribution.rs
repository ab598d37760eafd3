//! Registries, the cache and signed receipts (issue 11): what resolving a runbook costs from each kind of
//! registry, what checking a signature adds, and what `verify` of a signed receipt costs.
//!
//! Resolution of `rotate-credentials@1.3.0` (examples/rotate-credentials/runbook.yaml) with the library
//! (`registry::resolve_with`), one whole resolution an iteration (group `distribution_resolve`):
//! - `directory`: a local directory registry written by `registry::add` (the baseline);
//! - `oci-cold`: an OCI registry (Debian's `docker-registry`, plain HTTP on loopback, started by the bench;
//!   the document published with `oci_registry::publish`) and a fresh, empty cache directory each iteration
//!   (made outside the timing): the index pulled, the document pulled, both written to the cache;
//! - `oci-warm`: the cache filled: the index pulled again (and written to the cache again), the document
//!   read from the cache by its pin;
//! - `oci-digest-warm`: `oci+http://HOST/runbooks/rotate-credentials@sha256:<manifest digest>`, pinned and
//!   cached: no request to the registry at all (checked in the registry's access log);
//! - `directory-signed`, `oci-warm-signed`, `oci-digest-warm-signed`: the same with `require_signature` set
//!   (a key from `dsse::generate()`, the document signed with `dsse::sign_statement(.., DOCUMENT_PREDICATE,
//!   ..)`, stored beside it in the directory registry and pushed with it to the OCI registry);
//! - diagnostics: `oci-no-cache` (no cache at all: both pulls, nothing written), `oci-pull-index` (one
//!   `oci::pull`, the unit a resolution is made of), `http-floor-2-gets` (the index's manifest and blob
//!   fetched with ureq over one new connection: the registry's and loopback HTTP's share of a pull),
//!   `http-floor-pull-requests` (the same with the three `GET /v2/` a pull also sends),
//!   `document-id` (lint + envelope through the component, which a resolution by digest runs to label the
//!   document).
//!
//! `runbook-host verify` as a whole process (group `distribution_verify`) on a bundle made once with the
//! library: `Run::create_with(.., Some(receipt key))` on host/tests/mcp/runbooks/echo-only.json, 500
//! `echo` invoke + result pairs, then `end` (1,002 events): `signed-with-key` (`verify --key KEY.pub`),
//! `signed-no-key` (the same bundle, the key run.json names), `unsigned` (a bundle made the same way without
//! a receipt key). The sizes of the signed bundle's files are printed (not timed).
//!
//! Every resolution is checked once outside the timing (the bytes hash to the document's sha256, its trust,
//! its provenance, the requests it made); every verify must exit 0 (and says `ok` with 1,002 events, checked
//! once). Nothing about timings is asserted.
//!
//! Run by `cargo bench -p runbook-benches --bench distribution` (it does nothing under `cargo test`).
//! Needs `/usr/bin/docker-registry` (`apt-get install docker-registry`) for the OCI lines and a release
//! `runbook-host` for the verify lines (`cargo build --release -p runbook-host`; `target/release/runbook-host`,
//! the one under `$CARGO_TARGET_DIR/release`, or `$RUNBOOK_HOST_BIN`); without either, those lines are
//! skipped with a message. Not run in CI.

use criterion::{black_box, BatchSize, Criterion, SamplingMode};
use runbook_benches::scratch_dir;
use runbook_host::files::sha256_hex;
use runbook_host::registry::https::{self as fetch, Cache};
use runbook_host::registry::oci as oci_registry;
use runbook_host::registry::oci::client::{self as oci, OciRef};
use runbook_host::registry::{self, Resolved, Settings, Trust};
use runbook_host::run::{Answer, Claim, Guard, Run};
use runbook_host::signatures::dsse;
use runbook_host::{Coverage, EndReason, Policy, Profile, Risk};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const REFERENCE: &str = "rotate-credentials@1.3.0";
/// Invoke + result pairs in the verified bundle (with `start` and `end`: 1,002 events).
const PAIRS: usize = 500;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `$RUNBOOK_HOST_BIN`, else `target/release/runbook-host`, else the release build of the target directory
/// this bench was built in (`$CARGO_TARGET_DIR`).
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("RUNBOOK_HOST_BIN") {
        return PathBuf::from(p);
    }
    let default = root().join("target/release/runbook-host");
    if default.is_file() {
        return default;
    }
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target directory").join("release").join("runbook-host")
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_else(|_| "?".into())
}

/// Settings for `registry` with the given cache (or none) and no credentials from the environment.
fn settings(registry: &str, cache: Option<&Path>) -> Settings {
    let mut s = Settings::new(registry);
    s.cache = cache.map(|c| Cache { root: c.to_path_buf() });
    s.oci_username = None;
    s.oci_password = None;
    s
}

/// Resolves once, outside the timing, and checks what came back: the document's exact bytes, the trust,
/// where they came from and, with a key required, who signed them.
fn resolve_checked(what: &str, reference: &str, s: &Settings, want: &[u8], kind: &str, from_cache: bool) -> Resolved {
    let r = registry::resolve_with(reference, s).unwrap_or_else(|e| panic!("{what}: {e}"));
    let sha = sha256_hex(want);
    assert_eq!(sha256_hex(&r.bytes), sha, "{what}: the resolved bytes' sha256");
    assert_eq!(r.sha256, sha, "{what}");
    assert_eq!(r.bytes, want, "{what}");
    assert_eq!((r.trust, r.pinned_sha256.as_deref()), (Trust::T2, Some(sha.as_str())), "{what}: pinned");
    assert_eq!(r.provenance.kind, kind, "{what}: {:?}", r.provenance);
    assert_eq!(r.provenance.from_cache.is_some(), from_cache, "{what}: {:?}", r.provenance);
    if let Some(k) = s.require_signature.first() {
        assert_eq!(r.provenance.signed_by.as_deref(), Some(dsse::key_id(k).as_str()), "{what}: signed by");
    }
    r
}

// ---------------------------------------------------------------------------------------------------
// The OCI registry

/// Debian's `docker-registry` (the CNCF distribution server) on a free loopback port, plain HTTP, no auth,
/// its storage under `dir`; its access log (one line a request) in `dir/registry.log`.
struct OciRegistry {
    addr: String,
    log: PathBuf,
    child: Child,
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry_binary() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("docker-registry"))
        .chain([PathBuf::from("/usr/bin/docker-registry")])
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// The status line of `GET /v2/` (HTTP/1.0, one connection), or why there is none.
fn probe(addr: &str) -> Result<String, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
    write!(s, "GET /v2/ HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    Ok(answer.lines().next().unwrap_or("").to_string())
}

impl OciRegistry {
    fn start(bin: &Path, dir: &Path) -> OciRegistry {
        let storage = dir.join("storage");
        std::fs::create_dir_all(&storage).expect("the registry's storage directory");
        let log = dir.join("registry.log");
        let mut last = String::new();
        // The port is found by binding :0 and released just before the registry binds it; a lost race is retried.
        for _ in 0..3 {
            let addr = format!("127.0.0.1:{}", free_port());
            let config = format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  \
                 maintenance:\n    uploadpurging:\n      enabled: false\nhttp:\n  addr: {addr}\n  secret: runbook-bench-secret\n",
                storage.display()
            );
            std::fs::write(dir.join("config.yml"), config).expect("config.yml");
            let out = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("the registry's log");
            let child = Command::new(bin)
                .arg("serve")
                .arg(dir.join("config.yml"))
                .stdin(Stdio::null())
                .stdout(out.try_clone().expect("the registry's log"))
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
            let mut reg = OciRegistry { addr, log: log.clone(), child };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(status)) = reg.child.try_wait() {
                    last = format!("it exited with {status}");
                    break;
                }
                match probe(&reg.addr) {
                    Ok(line) if line.contains(" 200") => return reg,
                    Ok(line) => last = line,
                    Err(e) => last = e,
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("docker-registry did not start ({last}); its log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    }

    /// The access log's requests so far, as `METHOD PATH STATUS` (digests shortened).
    fn requests(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                // 127.0.0.1 - - [date] "GET /v2/... HTTP/1.1" 200 123 "" "agent"
                let (_, rest) = l.split_once("] \"")?;
                let (request, after) = rest.split_once('"')?;
                let mut words = request.split_whitespace();
                let (method, path) = (words.next()?, words.next()?);
                let status = after.split_whitespace().next().unwrap_or("?");
                Some(format!("{method} {} {status}", shorten(path)))
            })
            .collect()
    }

    /// The requests `f` made, read from the access log (which the registry writes after answering).
    fn requests_of<T>(&self, f: impl FnOnce() -> T) -> (T, Vec<String>) {
        std::thread::sleep(Duration::from_millis(200));
        let before = self.requests().len();
        let out = f();
        std::thread::sleep(Duration::from_millis(200));
        (out, self.requests()[before..].to_vec())
    }
}

/// `sha256:` + the first 12 hex digits of every digest in a path.
fn shorten(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(i) = rest.find("sha256:") {
        let (head, tail) = rest.split_at(i + 7);
        out.push_str(head);
        let hex = tail.bytes().take_while(u8::is_ascii_hexdigit).count();
        out.push_str(&tail[..hex.min(12)]);
        if hex > 12 {
            out.push('…');
        }
        rest = &tail[hex..];
    }
    out.push_str(rest);
    out
}

fn print_requests(what: &str, reqs: &[String]) {
    eprintln!("requests to the registry, {what}: {}{}", reqs.len(), if reqs.is_empty() { String::new() } else { format!(": {}", reqs.join(", ")) });
}

// ---------------------------------------------------------------------------------------------------
// Bundles for verify

fn claim() -> Claim {
    Claim {
        profile: Profile::R1,
        allowlist: vec!["echo".into()],
        risk_ceiling: Risk::ReadOnly,
        coverage: Coverage::Complete,
        agent: "bench".into(),
        available: None,
    }
}

/// Fills a new run of echo-only.json (made by `Run::create_with`, with or without a receipt key): `PAIRS`
/// allowed echo invoke + result pairs, then end. Its directory.
fn fill_bundle((mut run, answer): (Run, Answer)) -> PathBuf {
    assert!(answer.allowed(), "the run is admitted: {}", answer.explanation);
    for i in 0..PAIRS {
        let id = format!("c{i}");
        let a = run.invoke("echo", &json!({"message": format!("message {i}")}), Some(&id), None).expect("invoke");
        assert!(a.allowed(), "echo {i} allowed: {}", a.explanation);
        run.result("echo", &json!({"content": [{"type": "text", "text": format!("Echo: message {i}")}]}), false, Some(&id)).expect("result");
    }
    run.end(EndReason::Normal).expect("end");
    run.dir().to_path_buf()
}

fn files(dir: &Path) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read the bundle").flatten() {
            let m = e.metadata().expect("metadata");
            if m.is_dir() {
                stack.push(e.path());
            } else {
                v.push((e.path().strip_prefix(dir).unwrap().display().to_string(), m.len()));
            }
        }
    }
    v.sort();
    v
}

fn verify_cmd(bin: &Path, cache: &Path, bundle: &Path, key: Option<&Path>) -> Command {
    let mut c = Command::new(bin);
    c.arg("verify");
    if let Some(k) = key {
        c.arg("--key").arg(k);
    }
    c.arg(bundle).env("RUNBOOK_HOST_CACHE", cache).stdin(Stdio::null());
    c
}

/// Once, outside the timing: `verify --format json` says ok with every event, and the plain output says
/// who signed the receipt.
fn verify_checked(bin: &Path, cache: &Path, bundle: &Path, key: Option<&Path>, signed: &str) {
    let o = verify_cmd(bin, cache, bundle, key).arg("--format").arg("json").output().expect("run runbook-host verify");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "verify {} exited {:?}:\n{text}{}", bundle.display(), o.status.code(), String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("verify: not JSON ({e}): {text}"));
    assert_eq!(v["ok"], true, "{text}");
    assert_eq!(v["events"].as_u64(), Some(2 * PAIRS as u64 + 2), "{text}");
    let o = verify_cmd(bin, cache, bundle, key).output().expect("run runbook-host verify");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{text}");
    assert!(text.contains(signed), "verify says `{signed}`: {text}");
    assert_eq!(text.contains("receipt signed by"), bundle.join("receipt.dsse.json").is_file(), "{text}");
}

// ---------------------------------------------------------------------------------------------------

fn distribution(c: &mut Criterion) {
    let dir = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "distribution");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the scratch directory");
    let doc = std::fs::read(root().join("examples/rotate-credentials/runbook.yaml")).expect("the example");
    let sha = sha256_hex(&doc);
    let signer = dsse::generate().expect("a key");
    let trusted = vec![signer.verifying_key()];
    let envelope = dsse::sign_statement(
        &signer,
        &[dsse::Subject { name: "runbook.yaml".into(), sha256: sha.clone() }],
        dsse::DOCUMENT_PREDICATE,
        json!({"signed_at": dsse::rfc3339(fetch::now_unix())}),
    );
    let signed = |mut s: Settings| {
        s.require_signature = trusted.clone();
        s
    };

    // Two directory registries: the document alone, and the document with its signature beside it.
    let plain_dir = dir.join("registry-plain");
    let signed_dir = dir.join("registry-signed");
    for (reg, with_signature) in [(&plain_dir, false), (&signed_dir, true)] {
        let src = dir.join(if with_signature { "signed" } else { "plain" });
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("runbook.yaml"), &doc).unwrap();
        if with_signature {
            std::fs::write(src.join(format!("runbook.yaml{}", registry::SIGNATURE_SUFFIX)), &envelope).unwrap();
        }
        let (id, version, pinned) = registry::add(reg, &src.join("runbook.yaml")).expect("registry add");
        assert_eq!((format!("{id}@{version}"), pinned.as_str()), (REFERENCE.to_string(), sha.as_str()));
    }
    let dir_plain = settings(plain_dir.to_str().unwrap(), None);
    let dir_signed = signed(settings(signed_dir.to_str().unwrap(), None));
    resolve_checked("directory", REFERENCE, &dir_plain, &doc, "directory", false);
    resolve_checked("directory-signed", REFERENCE, &dir_signed, &doc, "directory", false);

    let mut g = c.benchmark_group("distribution_resolve");
    g.sampling_mode(SamplingMode::Flat).sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    g.bench_function("directory", |b| b.iter(|| black_box(registry::resolve_with(REFERENCE, &dir_plain).expect("resolve"))));
    g.bench_function("directory-signed", |b| b.iter(|| black_box(registry::resolve_with(REFERENCE, &dir_signed).expect("resolve"))));
    g.bench_function("document-id", |b| b.iter(|| black_box(registry::document_id(&doc).expect("document id"))));

    let oci_dir = dir.join("oci");
    match registry_binary() {
        None => eprintln!(
            "distribution: OCI lines SKIPPED: no docker-registry on PATH or at /usr/bin/docker-registry \
             (`apt-get install docker-registry` runs them)"
        ),
        Some(bin) => {
            std::fs::create_dir_all(&oci_dir).unwrap();
            let reg = OciRegistry::start(&bin, &oci_dir);
            let prefix = format!("oci+http://{}/runbooks", reg.addr);
            let pushed = oci_registry::publish(&doc, &prefix, Some(&envelope), &settings(&prefix, None)).expect("publish to the OCI registry");
            assert_eq!(pushed.sha256, sha);
            assert!(pushed.signature_digest.is_some(), "the signature was pushed");
            let by_digest = format!("{prefix}/rotate-credentials@{}", pushed.manifest_digest);
            eprintln!("published {REFERENCE} to {prefix} (manifest {}); by digest: {by_digest}", pushed.manifest_digest);

            // Once each, outside the timing: the bytes, the provenance and the requests made.
            let cold_root = dir.join("caches-cold");
            let (_, reqs) = reg.requests_of(|| resolve_checked("oci-cold", REFERENCE, &settings(&prefix, Some(&cold_root.join("check"))), &doc, "oci", false));
            print_requests("oci-cold", &reqs);
            let warm = dir.join("cache-warm");
            let oci_warm = settings(&prefix, Some(&warm));
            resolve_checked("oci-warm (filling the cache)", REFERENCE, &oci_warm, &doc, "oci", false);
            let (_, reqs) = reg.requests_of(|| resolve_checked("oci-warm", REFERENCE, &oci_warm, &doc, "oci", false));
            print_requests("oci-warm", &reqs);
            let oci_none = settings(&prefix, None);
            let (_, reqs) = reg.requests_of(|| resolve_checked("oci-no-cache", REFERENCE, &oci_none, &doc, "oci", false));
            print_requests("oci-no-cache", &reqs);
            let digest_cache = dir.join("cache-digest");
            let oci_digest = settings(&prefix, Some(&digest_cache));
            let (_, reqs) = reg.requests_of(|| resolve_checked("oci-digest (filling the cache)", &by_digest, &oci_digest, &doc, "oci", false));
            print_requests("oci-digest, first (cache empty)", &reqs);
            let (r, reqs) = reg.requests_of(|| resolve_checked("oci-digest-warm", &by_digest, &oci_digest, &doc, "oci", true));
            assert!(reqs.is_empty(), "a pinned, cached digest asks the registry nothing: {reqs:?}");
            assert_eq!(r.reference, REFERENCE);
            print_requests("oci-digest-warm", &reqs);
            let oci_warm_signed = signed(oci_warm.clone());
            let (_, reqs) = reg.requests_of(|| resolve_checked("oci-warm-signed", REFERENCE, &oci_warm_signed, &doc, "oci", false));
            print_requests("oci-warm-signed", &reqs);
            let oci_digest_signed = signed(oci_digest.clone());
            let (_, reqs) = reg.requests_of(|| resolve_checked("oci-digest-warm-signed", &by_digest, &oci_digest_signed, &doc, "oci", true));
            print_requests("oci-digest-warm-signed", &reqs);
            let index_ref = OciRef::parse(&format!("{prefix}:index")).expect("the index reference");
            let index = oci::pull(&index_ref, oci_registry::INDEX_ARTIFACT_TYPE, oci_registry::INDEX_LAYER, registry::MAX_INDEX, &oci::Options::default())
                .expect("pull the index");
            let v: Value = serde_json::from_slice(&index.bytes).expect("the index is JSON");
            assert_eq!(v["runbooks"]["rotate-credentials"]["1.3.0"]["sha256"], sha.as_str());
            let v2_url = format!("http://{}/v2/", reg.addr);
            let manifest_url = format!("http://{}/v2/runbooks/manifests/index", reg.addr);
            let blob_url = format!("http://{}/v2/runbooks/blobs/{}", reg.addr, index.layer_digest);
            // The GETs of one pull by ureq on one new connection: with `pings`, the three `GET /v2/` a pull
            // sends too (see the request lines printed above), else the manifest and the blob only.
            let gets = |pings: bool| {
                let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
                let ping = || {
                    if pings {
                        agent.get(&v2_url).call().expect("GET /v2/").body_mut().read_to_vec().unwrap();
                    }
                };
                ping();
                ping();
                let m =
                    agent.get(&manifest_url).header("Accept", oci::OCI_MANIFEST_MEDIA_TYPE).call().expect("GET the manifest").body_mut().read_to_vec().unwrap();
                ping();
                let b = agent.get(&blob_url).call().expect("GET the blob").body_mut().read_to_vec().unwrap();
                (m, b)
            };
            for pings in [false, true] {
                let ((m, b), reqs) = reg.requests_of(|| gets(pings));
                assert_eq!(format!("sha256:{}", sha256_hex(&m)), index.manifest_digest);
                assert_eq!(b, index.bytes);
                print_requests(if pings { "http-floor-pull-requests" } else { "http-floor-2-gets" }, &reqs);
            }
            let (_, reqs) = reg.requests_of(|| {
                oci::pull(&index_ref, oci_registry::INDEX_ARTIFACT_TYPE, oci_registry::INDEX_LAYER, registry::MAX_INDEX, &oci::Options::default()).unwrap()
            });
            print_requests("oci-pull-index", &reqs);

            let mut n = 0u64;
            g.bench_function("oci-cold", |b| {
                b.iter_batched(
                    || {
                        n += 1;
                        settings(&prefix, Some(&cold_root.join(n.to_string())))
                    },
                    |s| black_box(registry::resolve_with(REFERENCE, &s).expect("resolve")),
                    BatchSize::PerIteration,
                )
            });
            g.bench_function("oci-warm", |b| b.iter(|| black_box(registry::resolve_with(REFERENCE, &oci_warm).expect("resolve"))));
            g.bench_function("oci-digest-warm", |b| b.iter(|| black_box(registry::resolve_with(&by_digest, &oci_digest).expect("resolve"))));
            g.bench_function("oci-warm-signed", |b| b.iter(|| black_box(registry::resolve_with(REFERENCE, &oci_warm_signed).expect("resolve"))));
            g.bench_function("oci-digest-warm-signed", |b| b.iter(|| black_box(registry::resolve_with(&by_digest, &oci_digest_signed).expect("resolve"))));
            g.bench_function("oci-no-cache", |b| b.iter(|| black_box(registry::resolve_with(REFERENCE, &oci_none).expect("resolve"))));
            g.bench_function("oci-pull-index", |b| {
                b.iter(|| {
                    black_box(
                        oci::pull(&index_ref, oci_registry::INDEX_ARTIFACT_TYPE, oci_registry::INDEX_LAYER, registry::MAX_INDEX, &oci::Options::default())
                            .expect("pull"),
                    )
                })
            });
            g.bench_function("http-floor-2-gets", |b| b.iter(|| black_box(gets(false))));
            g.bench_function("http-floor-pull-requests", |b| b.iter(|| black_box(gets(true))));
            eprintln!("oci-cold used {n} fresh cache directories");
            drop(reg);
        }
    }
    g.finish();

    // verify of a signed 1,002-event bundle, with and without --key, and of an unsigned one.
    let bin = binary();
    if !bin.is_file() {
        eprintln!(
            "distribution: verify lines SKIPPED, no release binary at {}; build it with `cargo build --release -p runbook-host` \
             (or point RUNBOOK_HOST_BIN at one)",
            bin.display()
        );
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let p = Arc::new(Policy::load().expect("the component loads"));
    let echo = registry::resolve(root().join("host/tests/mcp/runbooks/echo-only.json").to_str().unwrap(), "unused-registry").expect("echo-only.json");
    let host_key = dsse::generate().expect("a key");
    let public = dir.join("host.pub");
    std::fs::write(&public, dsse::public_pem(&host_key.verifying_key())).unwrap();
    let t = Instant::now();
    let (signed_runs, unsigned_runs) = (dir.join("runs-signed"), dir.join("runs-unsigned"));
    let signed_bundle =
        fill_bundle(Run::create_with(Arc::clone(&p), &echo, claim(), &signed_runs, "bench", Guard::new(&signed_runs, None), Some(host_key)).expect("a run"));
    let unsigned_bundle =
        fill_bundle(Run::create_with(Arc::clone(&p), &echo, claim(), &unsigned_runs, "bench", Guard::new(&unsigned_runs, None), None).expect("a run"));
    eprintln!("two bundles of {} events written in {:.1} s (fdatasync each event)", 2 * PAIRS + 2, t.elapsed().as_secs_f64());
    for (name, b) in [("signed", &signed_bundle), ("unsigned", &unsigned_bundle)] {
        let f = files(b);
        let total: u64 = f.iter().map(|x| x.1).sum();
        let list: Vec<String> = f.iter().map(|(n, s)| format!("{n} {s}")).collect();
        eprintln!("{name} bundle: {total} bytes in {} files: {}", f.len(), list.join(", "));
    }
    assert!(signed_bundle.join("receipt.dsse.json").is_file() && !unsigned_bundle.join("receipt.dsse.json").exists());
    let cache = dir.join("host-cache");
    verify_checked(&bin, &cache, &signed_bundle, Some(&public), "a key given with --key");
    verify_checked(&bin, &cache, &signed_bundle, None, "the key run.json names");
    verify_checked(&bin, &cache, &unsigned_bundle, None, &format!("({} events", 2 * PAIRS + 2));

    let mut g = c.benchmark_group("distribution_verify");
    g.sampling_mode(SamplingMode::Flat).sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for (name, bundle, key) in
        [("signed-with-key", &signed_bundle, Some(public.as_path())), ("signed-no-key", &signed_bundle, None), ("unsigned", &unsigned_bundle, None)]
    {
        g.bench_function(name, |b| {
            b.iter(|| {
                let status = verify_cmd(&bin, &cache, bundle, key).stdout(Stdio::null()).stderr(Stdio::null()).status().expect("run runbook-host verify");
                assert!(status.success(), "verify {name} exited {status}");
            })
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("distribution: not run under `cargo test`; `cargo bench -p runbook-benches --bench distribution` runs it");
        return;
    }
    let t = Instant::now();
    eprintln!("load average at the start: {}", loadavg());
    let mut c = Criterion::default().configure_from_args();
    distribution(&mut c);
    c.final_summary();
    eprintln!("load average at the end: {}; the whole bench took {:.0} s", loadavg(), t.elapsed().as_secs_f64());
}
