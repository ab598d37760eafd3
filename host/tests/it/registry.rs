//! Registries (docs/spec/registry.md): `registry add`/`list`, pinned resolution of `id@version` from a
//! directory and from an HTTP registry (served here by a small std::net thread), tamper detection, unknown
//! ids and versions, unreachable registries, and indexes whose paths try to leave the registry.

use crate::common::{self, repo, Tmp, BIN};
use runbook_host::registry::{self, Trust};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;

fn fixture(p: &str) -> PathBuf {
    repo().join("host/tests/fixtures/registry").join(p)
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A registry with the hello fixture and two bundled examples.
fn filled(tag: &str) -> Tmp {
    let t = Tmp::new(tag);
    let reg = t.0.join("reg");
    registry::add(&reg, &fixture("good/hello/1.0.0/runbook.yaml")).unwrap();
    registry::add(&reg, &repo().join("examples/rotate-credentials/runbook.yaml")).unwrap();
    registry::add(&reg, &repo().join("examples/executive-snapshot/runbook.json")).unwrap();
    t
}

#[test]
fn add_list_resolve() {
    let t = filled("alr");
    let reg = t.0.join("reg");
    let doc = std::fs::read(repo().join("examples/rotate-credentials/runbook.yaml")).unwrap();
    let listed = registry::list(&reg).unwrap();
    assert_eq!(listed.iter().map(|(i, v, _)| format!("{i}@{v}")).collect::<Vec<_>>(), ["executive-snapshot@4.2.0", "hello@1.0.0", "rotate-credentials@1.3.0"]);
    assert_eq!(listed[2].2, sha(&doc));

    // The layout of docs/spec/registry.md#index-layout, relative paths only.
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(reg.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["schema"], "runbook-registry-index/v1");
    assert_eq!(index["runbooks"]["rotate-credentials"]["1.3.0"]["path"], "rotate-credentials/1.3.0/runbook.yaml");
    assert_eq!(index["runbooks"]["executive-snapshot"]["4.2.0"]["path"], "executive-snapshot/4.2.0/runbook.json");
    assert_eq!(std::fs::read(reg.join("rotate-credentials/1.3.0/runbook.yaml")).unwrap(), doc);

    let r = registry::resolve("rotate-credentials@1.3.0", s(&reg)).unwrap();
    assert_eq!(r.trust, Trust::T2);
    assert_eq!(r.bytes, doc);
    assert_eq!(r.sha256, sha(&doc));
    assert_eq!(r.pinned_sha256.as_deref(), Some(sha(&doc).as_str()));
    assert_eq!(r.reference, "rotate-credentials@1.3.0");
    assert_eq!(r.file_name, "runbook.yaml");
    let r = registry::resolve("executive-snapshot@4.2.0", s(&reg)).unwrap();
    assert_eq!(r.file_name, "runbook.json");

    // Adding the same bytes again changes nothing.
    let before = std::fs::read(reg.join("index.json")).unwrap();
    let again = registry::add(&reg, &repo().join("examples/rotate-credentials/runbook.yaml")).unwrap();
    assert_eq!(again, ("rotate-credentials".into(), "1.3.0".into(), sha(&doc)));
    assert_eq!(std::fs::read(reg.join("index.json")).unwrap(), before);
}

#[test]
fn a_local_file_is_t1_and_unpinned() {
    let path = repo().join("examples/rotate-credentials/runbook.yaml");
    let r = registry::resolve(s(&path), "no-such-registry").unwrap();
    assert_eq!(r.trust, Trust::T1);
    assert_eq!(r.pinned_sha256, None);
    assert_eq!(r.reference, "runbook.yaml", "a file is named by its name only, never a directory");
    assert_eq!(r.sha256, sha(&std::fs::read(&path).unwrap()));
    let e = registry::resolve("no/such/file.yaml", "no-such-registry").unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::UnknownRunbook);
}

#[test]
fn add_refuses_lint_errors_and_a_different_document_at_a_pinned_version() {
    let t = filled("refuse");
    let reg = t.0.join("reg");
    let e = registry::add(&reg, &repo().join("examples/broken/runbook.yaml")).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::InvalidDocument, "{e}");
    // Same id@version, one changed byte of prose: refused, the pinned bytes stay.
    let mut doc = std::fs::read(fixture("good/hello/1.0.0/runbook.yaml")).unwrap();
    let at = doc.windows(9).position(|w| w == b"Say hello").unwrap();
    doc[at] = b's';
    let other = t.0.join("hello-changed.yaml");
    std::fs::write(&other, &doc).unwrap();
    let e = registry::add(&reg, &other).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Conflict, "{e}");
    let r = registry::resolve("hello@1.0.0", s(&reg)).unwrap();
    assert_eq!(r.bytes, std::fs::read(fixture("good/hello/1.0.0/runbook.yaml")).unwrap());
}

#[test]
fn a_tampered_document_is_refused() {
    let t = filled("tamper");
    let reg = t.0.join("reg");
    let p = reg.join("rotate-credentials/1.3.0/runbook.yaml");
    let mut b = std::fs::read(&p).unwrap();
    let n = b.len() / 2;
    b[n] ^= 0x01;
    std::fs::write(&p, &b).unwrap();
    let e = registry::resolve("rotate-credentials@1.3.0", s(&reg)).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Tampered, "{e}");
    // The others still resolve.
    registry::resolve("hello@1.0.0", s(&reg)).unwrap();
}

#[test]
fn unknown_runbook_and_unknown_version() {
    let t = filled("unknown");
    let reg = t.0.join("reg");
    assert_eq!(registry::resolve("no-such-runbook@1.0.0", s(&reg)).unwrap_err().kind, registry::RegistryErrorKind::UnknownRunbook);
    assert_eq!(registry::resolve("hello@9.9.9", s(&reg)).unwrap_err().kind, registry::RegistryErrorKind::UnknownVersion);
    // A registry that is not there, or has no index, cannot be reached.
    assert_eq!(registry::resolve("hello@1.0.0", s(&t.0.join("nowhere"))).unwrap_err().kind, registry::RegistryErrorKind::Unreachable);
    std::fs::create_dir_all(t.0.join("empty")).unwrap();
    assert_eq!(registry::resolve("hello@1.0.0", s(&t.0.join("empty"))).unwrap_err().kind, registry::RegistryErrorKind::Unreachable);
}

#[test]
fn index_paths_cannot_leave_the_registry() {
    for name in ["dotdot", "absolute", "backslash"] {
        let e = registry::resolve("escape@1.0.0", s(&fixture(name))).unwrap_err();
        assert_eq!(e.kind, registry::RegistryErrorKind::InvalidIndex, "{name}: {e}");
    }
    for name in ["bad-schema", "bad-pin"] {
        let e = registry::resolve("hello@1.0.0", s(&fixture(name))).unwrap_err();
        assert_eq!(e.kind, registry::RegistryErrorKind::InvalidIndex, "{name}: {e}");
    }
    for p in ["../x", "/x", "a/../b", "a//b", "./a", "a\\b", "C:/x", "~/x", ""] {
        assert!(registry::check_index_path(p).is_err(), "{p:?} accepted");
    }
    registry::check_index_path("hello/1.0.0/runbook.yaml").unwrap();
}

#[cfg(unix)]
#[test]
fn a_symlink_out_of_the_registry_is_not_followed() {
    let t = Tmp::new("symlink");
    let reg = t.0.join("reg");
    std::fs::create_dir_all(reg.join("hello/1.0.0")).unwrap();
    let outside = t.0.join("outside.yaml");
    let doc = std::fs::read(fixture("good/hello/1.0.0/runbook.yaml")).unwrap();
    std::fs::write(&outside, &doc).unwrap();
    std::os::unix::fs::symlink(&outside, reg.join("hello/1.0.0/runbook.yaml")).unwrap();
    std::fs::write(
        reg.join("index.json"),
        format!(
            r#"{{"schema":"runbook-registry-index/v1","runbooks":{{"hello":{{"1.0.0":{{"sha256":"{}","path":"hello/1.0.0/runbook.yaml"}}}}}}}}"#,
            sha(&doc)
        ),
    )
    .unwrap();
    let e = registry::resolve("hello@1.0.0", s(&reg)).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Io, "{e}");
}

/// Serves `root` over plain HTTP/1.1 on 127.0.0.1 until the process ends; `chunked` answers with
/// `Transfer-Encoding: chunked`. Returns the base URL.
fn serve(root: PathBuf, chunked: bool) -> String {
    serve_with(root, chunked, false)
}

/// `keep_open`: the server ignores `Connection: close` and holds each connection open after answering.
fn serve_with(root: PathBuf, chunked: bool, keep_open: bool) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut first = String::new();
            if r.read_line(&mut first).is_err() {
                continue;
            }
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
            }
            let path = first.split(' ').nth(1).unwrap_or("/").trim_start_matches("/base/").to_string();
            let body = if path.contains("..") { None } else { std::fs::read(root.join(&path)).ok() };
            let _ = match body {
                Some(b) if chunked => {
                    let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
                    for part in b.chunks(100) {
                        out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                        out.extend_from_slice(part);
                        out.extend_from_slice(b"\r\n");
                    }
                    out.extend_from_slice(b"0\r\n\r\n");
                    c.write_all(&out)
                }
                Some(b) => c.write_all(&[format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", b.len()).as_bytes(), &b[..]].concat()),
                None => c.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            };
            if keep_open {
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_secs(30));
                    drop(c);
                });
            }
        }
    });
    format!("http://127.0.0.1:{port}/base")
}

#[test]
fn an_http_registry_resolves_pinned() {
    let t = filled("http");
    let reg = t.0.join("reg");
    let doc = std::fs::read(repo().join("examples/rotate-credentials/runbook.yaml")).unwrap();
    for chunked in [false, true] {
        let url = serve(reg.clone(), chunked);
        let r = registry::resolve("rotate-credentials@1.3.0", &url).unwrap();
        assert_eq!((r.trust, r.bytes.as_slice(), r.reference.as_str()), (Trust::T2, doc.as_slice(), "rotate-credentials@1.3.0"));
        assert_eq!(registry::resolve("hello@1.0.0", &format!("{url}/")).unwrap().trust, Trust::T2);
        assert_eq!(registry::resolve("hello@2.0.0", &url).unwrap_err().kind, registry::RegistryErrorKind::UnknownVersion);
        assert_eq!(registry::resolve("nope@1.0.0", &url).unwrap_err().kind, registry::RegistryErrorKind::UnknownRunbook);
    }
    // A server that keeps connections open is read to the end of its answer, not to a timeout.
    for chunked in [false, true] {
        let url = serve_with(reg.clone(), chunked, true);
        let started = std::time::Instant::now();
        assert_eq!(registry::resolve("hello@1.0.0", &url).unwrap().trust, Trust::T2);
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "waited for the connection to close");
    }
    // Tampered on the server: refused.
    let p = reg.join("hello/1.0.0/runbook.yaml");
    let mut b = std::fs::read(&p).unwrap();
    b[3] ^= 0x20;
    std::fs::write(&p, &b).unwrap();
    let url = serve(reg.clone(), false);
    let mut no_cache = registry::Settings::new(&url);
    no_cache.cache = None;
    assert_eq!(registry::resolve_with("hello@1.0.0", &no_cache).unwrap_err().kind, registry::RegistryErrorKind::Tampered);
    // With a cache, the pinned bytes fetched before are used (by their sha256): the tampered copy is never read.
    let cache = t.0.join("cache");
    let mut cached = registry::Settings::new(&url);
    cached.cache = Some(runbook_host::registry::https::Cache { root: cache.clone() });
    let mut original = b.clone();
    original[3] ^= 0x20;
    assert_eq!(runbook_host::registry::https::Cache { root: cache.clone() }.put_blob(&original).unwrap(), runbook_host::files::sha256_hex(&original));
    assert_eq!(registry::resolve_with("hello@1.0.0", &cached).unwrap().bytes, original);
    // An HTTP registry without an index is unreachable.
    let url = serve(t.0.join("nothing-here"), false);
    assert_eq!(registry::resolve("hello@1.0.0", &url).unwrap_err().kind, registry::RegistryErrorKind::Unreachable);
}

#[test]
fn an_unreachable_http_registry_is_refused() {
    // A port nobody listens on: bind, read the port, close.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = registry::resolve("hello@1.0.0", &format!("http://127.0.0.1:{port}/")).unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Unreachable, "{e}");
    let e = registry::resolve("hello@1.0.0", "https://registry.invalid/").unwrap_err();
    assert_eq!(e.kind, registry::RegistryErrorKind::Unreachable, "{e}");
}

#[test]
fn the_cli_adds_and_lists() {
    let t = Tmp::new("cli");
    let run = |args: &[&str]| {
        let o = common::cmd(BIN).args(args).current_dir(&t.0).stdin(Stdio::null()).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let hello = fixture("good/hello/1.0.0/runbook.yaml");
    let (code, out, err) = run(&["registry", "add", s(&hello)]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("hello@1.0.0"), "{out}");
    assert!(t.0.join(".runbook/registry/hello/1.0.0/runbook.yaml").is_file(), "the default registry is .runbook/registry");
    let (code, out, _) = run(&["registry", "list", "--format", "json"]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["id"], "hello");
    assert_eq!(v[0]["sha256"], sha(&std::fs::read(&hello).unwrap()));
    let (code, out, _) = run(&["registry", "list"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("hello@1.0.0") && out.contains("sha256:"), "{out}");
    let broken = repo().join("examples/broken/runbook.yaml");
    let (code, _, err) = run(&["registry", "add", s(&broken), "--registry", "other"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("invalid-document"), "{err}");
    // Nothing in the index is absolute.
    let index = std::fs::read_to_string(t.0.join(".runbook/registry/index.json")).unwrap();
    assert!(!index.contains(s(&t.0)), "{index}");
    let mut sink = String::new();
    let _ = std::io::empty().read_to_string(&mut sink);
}
