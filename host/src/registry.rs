//! Runbook registries (DESIGN 5 and 7.13): resolving `id@version` to pinned bytes, and writing a directory
//! registry.
//!
//! A registry is a directory, or an `http://` base URL serving the same layout, with `index.json`:
//!
//! ```text
//! {"schema":"runbook-registry-index/v1","runbooks":{"<id>":{"<version>":{"sha256":"<hex>","path":"<relative path>"}}}}
//! ```
//!
//! `registry add` writes documents under `<id>/<version>/runbook.yaml|json`. A local registry is opened as a
//! `cap-std` capability directory and every `path` of an index must be relative, without `..`, `.`, empty
//! components, backslashes or a drive, so nothing an index says can reach outside the registry (a symlink
//! out is refused by the capability too). An HTTP registry is fetched with a plain HTTP/1.1 GET (no TLS, no
//! redirects followed, bounded sizes and timeouts).
//!
//! [`resolve`] answers `id@version` only from the index (no search, no "latest"), and refuses bytes whose
//! sha256 is not the pin (`tampered`), an unknown id (`unknown-runbook`), an unknown version
//! (`unknown-version`), a registry it cannot read (`unreachable`) and a malformed index (`invalid-index`).
//! Any other reference naming an existing file is a local document of trust T1 (unpinned).

use crate::bundle::{open_or_create_dir, sha256_hex, shared_policy, write_atomic};
use cap_std::fs::Dir;
use serde_json::{json, Map, Value};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

pub const INDEX_SCHEMA: &str = "runbook-registry-index/v1";
/// The most an index may weigh.
pub const MAX_INDEX: usize = 16 << 20;
/// The most a document may weigh when read from a registry (the module itself refuses past 1 MiB).
pub const MAX_DOCUMENT: usize = 4 << 20;

/// Trust of a resolved document (DESIGN 7.12), assigned by the resolver, never by the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trust {
    /// A local file, unpinned.
    T1,
    /// Resolved from a registry with a pinned digest.
    T2,
}

impl Trust {
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::T1 => "T1",
            Trust::T2 => "T2",
        }
    }
}

/// A document and where it came from.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The exact bytes.
    pub bytes: Vec<u8>,
    /// Hex sha256 of `bytes`.
    pub sha256: String,
    /// `id@version`, or the file's name (its name only, never a directory).
    pub reference: String,
    /// The registry's pin (T2), equal to `sha256`; none for a local file.
    pub pinned_sha256: Option<String>,
    pub trust: Trust,
    /// `runbook.json` when the bytes are JSON (first non-blank byte `{`), else `runbook.yaml`.
    pub file_name: String,
    /// The registry requires this runbook's approvals to be signed (`"approvals": "signed"` in its index
    /// entry): a host refuses to run it without an `allowed_signers` file.
    pub signed_approvals: bool,
}

/// Why a reference did not resolve. `code` is one of `unknown-runbook`, `unknown-version`, `tampered`,
/// `unreachable`, `invalid-index`, `io`, and, from [`add`] only, `invalid-document` (lint errors or no
/// id/version) and `conflict` (a different document is already pinned at that id@version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryError {
    pub code: &'static str,
    pub message: String,
}

impl RegistryError {
    fn new(code: &'static str, message: impl Into<String>) -> RegistryError {
        RegistryError { code, message: message.into() }
    }
}

impl std::fmt::Display for RegistryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for RegistryError {}

/// The file name a document is stored under, by content.
pub fn file_name_for(bytes: &[u8]) -> &'static str {
    let b = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if b.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'{') {
        "runbook.json"
    } else {
        "runbook.yaml"
    }
}

/// Whether `s` is usable as an id or a version in `id@version` and as one path component.
fn is_component(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s != "." && s != ".." && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'))
}

/// `id@version` when `reference` has that shape.
pub fn parse_reference(reference: &str) -> Option<(&str, &str)> {
    let (id, version) = reference.split_once('@')?;
    (is_component(id) && is_component(version)).then_some((id, version))
}

/// Checks an index `path`: relative, `/`-separated, no `..`, `.`, empty component, backslash, drive or
/// control character.
pub fn check_index_path(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("an empty path".into());
    }
    if p.starts_with('/') || p.starts_with('~') || p.contains('\\') || p.contains(':') {
        return Err(format!("`{p}` is not a relative path"));
    }
    if p.chars().any(|c| c.is_control()) {
        return Err("a path with a control character".into());
    }
    for c in p.split('/') {
        if c.is_empty() || c == "." || c == ".." {
            return Err(format!("`{p}` has a `{c}` component"));
        }
    }
    Ok(())
}

/// Resolves a reference: `id@version` from `registry` (a directory or an `http://` base URL), pinned; any
/// other reference that names an existing file, as a local document (T1).
pub fn resolve(reference: &str, registry: &str) -> Result<Resolved, RegistryError> {
    let as_file = Path::new(reference);
    if let Some((id, version)) = parse_reference(reference) {
        // A file literally named like `id@version` is still resolved from the registry: a reference of that
        // shape is always pinned (a local file is named by a path with `/` or an extension without `@`).
        let source = Source::open(registry)?;
        // Which registry was looked in, for a person wondering why a runbook is not there.
        let named = |e: RegistryError| RegistryError { message: format!("{} (looked in {})", e.message, shown(registry)), ..e };
        let index = source.index().map_err(named)?;
        let entry = lookup(&index, id, version).map_err(named)?;
        let bytes = source.get(&entry.path)?;
        let sha = sha256_hex(&bytes);
        if sha != entry.sha256 {
            return Err(RegistryError::new("tampered", format!("`{reference}`: the document's sha256 is {sha}, the registry pins {}", entry.sha256)));
        }
        return Ok(Resolved {
            file_name: file_name_for(&bytes).into(),
            bytes,
            sha256: sha,
            reference: format!("{id}@{version}"),
            pinned_sha256: Some(entry.sha256),
            trust: Trust::T2,
            signed_approvals: entry.signed_approvals,
        });
    }
    if as_file.is_file() {
        let bytes = std::fs::read(as_file).map_err(|e| RegistryError::new("io", format!("cannot read `{reference}`: {e}")))?;
        let name = as_file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| "runbook".into());
        return Ok(Resolved {
            file_name: file_name_for(&bytes).into(),
            sha256: sha256_hex(&bytes),
            bytes,
            reference: name,
            pinned_sha256: None,
            trust: Trust::T1,
            signed_approvals: false,
        });
    }
    Err(RegistryError::new("unknown-runbook", format!("`{reference}` is neither `id@version` nor an existing file")))
}

/// A registry as a message names it: as given, and for a relative directory also where that is.
fn shown(registry: &str) -> String {
    let p = Path::new(registry);
    if registry.contains("://") || p.is_absolute() {
        return format!("the registry `{registry}`");
    }
    match std::path::absolute(p) {
        Ok(abs) => format!("the registry `{registry}` ({})", abs.display()),
        Err(_) => format!("the registry `{registry}`"),
    }
}

/// One pinned entry of an index.
#[derive(Clone, Debug)]
pub struct Entry {
    pub sha256: String,
    pub path: String,
    pub signed_approvals: bool,
}

/// Parses and checks an index: schema, shapes, hex pins, and every path relative and inside.
pub fn parse_index(bytes: &[u8]) -> Result<Value, RegistryError> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| RegistryError::new("invalid-index", format!("index.json is not JSON: {e}")))?;
    if v["schema"] != INDEX_SCHEMA {
        return Err(RegistryError::new("invalid-index", format!("index.json: `schema` must be `{INDEX_SCHEMA}`")));
    }
    let Some(runbooks) = v["runbooks"].as_object() else {
        return Err(RegistryError::new("invalid-index", "index.json: `runbooks` must be an object"));
    };
    for (id, versions) in runbooks {
        let Some(versions) = versions.as_object() else {
            return Err(RegistryError::new("invalid-index", format!("index.json: `{id}` must map versions to entries")));
        };
        for (version, e) in versions {
            let sha = e["sha256"].as_str().unwrap_or("");
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(RegistryError::new("invalid-index", format!("index.json: `{id}@{version}` has no lowercase hex sha256")));
            }
            let path = e["path"].as_str().ok_or_else(|| RegistryError::new("invalid-index", format!("index.json: `{id}@{version}` has no path")))?;
            check_index_path(path).map_err(|m| RegistryError::new("invalid-index", format!("index.json: `{id}@{version}`: {m}")))?;
            if !(e["approvals"].is_null() || e["approvals"] == "signed") {
                return Err(RegistryError::new("invalid-index", format!("index.json: `{id}@{version}`: `approvals` can only be \"signed\"")));
            }
        }
    }
    Ok(v)
}

fn lookup(index: &Value, id: &str, version: &str) -> Result<Entry, RegistryError> {
    let Some(versions) = index["runbooks"].get(id) else {
        return Err(RegistryError::new("unknown-runbook", format!("the registry has no runbook `{id}`")));
    };
    let Some(e) = versions.get(version) else {
        return Err(RegistryError::new("unknown-version", format!("the registry has no version `{version}` of `{id}`")));
    };
    Ok(Entry {
        sha256: e["sha256"].as_str().unwrap_or_default().to_string(),
        path: e["path"].as_str().unwrap_or_default().to_string(),
        signed_approvals: e["approvals"] == "signed",
    })
}

enum Source {
    Dir(Dir),
    Http(HttpBase),
}

impl Source {
    fn open(registry: &str) -> Result<Source, RegistryError> {
        if registry.starts_with("http://") {
            return Ok(Source::Http(HttpBase::parse(registry)?));
        }
        if registry.contains("://") {
            return Err(RegistryError::new("unreachable", format!("`{registry}`: only directories and http:// registries are supported")));
        }
        Dir::open_ambient_dir(registry, cap_std::ambient_authority())
            .map(Source::Dir)
            .map_err(|e| RegistryError::new("unreachable", format!("cannot open the registry `{registry}`: {e}")))
    }

    fn index(&self) -> Result<Value, RegistryError> {
        let bytes = match self {
            Source::Dir(d) => read_bounded(d, "index.json", MAX_INDEX).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    RegistryError::new("unreachable", "the registry has no index.json (`registry add FILE` creates it)")
                } else {
                    RegistryError::new("io", format!("index.json: {e}"))
                }
            })?,
            Source::Http(h) => h.get("index.json", MAX_INDEX).map_err(|e| match e {
                HttpError::Status(s) => RegistryError::new("unreachable", format!("the registry answered {s} for index.json")),
                HttpError::Io(m) => RegistryError::new("unreachable", m),
            })?,
        };
        parse_index(&bytes)
    }

    fn get(&self, path: &str) -> Result<Vec<u8>, RegistryError> {
        check_index_path(path).map_err(|m| RegistryError::new("invalid-index", m))?;
        match self {
            Source::Dir(d) => read_bounded(d, path, MAX_DOCUMENT).map_err(|e| RegistryError::new("io", format!("`{path}`: {e}"))),
            Source::Http(h) => h.get(path, MAX_DOCUMENT).map_err(|e| match e {
                HttpError::Status(s) => RegistryError::new("io", format!("the registry answered {s} for `{path}`")),
                HttpError::Io(m) => RegistryError::new("unreachable", m),
            }),
        }
    }
}

fn read_bounded(dir: &Dir, path: &str, max: usize) -> std::io::Result<Vec<u8>> {
    let f = dir.open(path)?;
    let mut v = Vec::new();
    f.take(max as u64 + 1).read_to_end(&mut v)?;
    if v.len() > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("larger than {max} bytes")));
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------------------
// Plain HTTP/1.1 GET.

struct HttpBase {
    host: String,
    port: u16,
    /// Ends with `/`.
    base_path: String,
}

enum HttpError {
    Status(u16),
    Io(String),
}

impl HttpBase {
    fn parse(url: &str) -> Result<HttpBase, RegistryError> {
        let rest = &url["http://".len()..];
        let (authority, path) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, "/".into()));
        let bad = || RegistryError::new("unreachable", format!("`{url}` is not a usable http:// URL"));
        if authority.is_empty() || authority.contains('@') || path.contains(['?', '#', ' ']) {
            return Err(bad());
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (h.to_string(), p.parse::<u16>().map_err(|_| bad())?),
            _ => (authority.to_string(), 80),
        };
        let base_path = if path.ends_with('/') { path } else { format!("{path}/") };
        Ok(HttpBase { host, port, base_path })
    }

    fn get(&self, rel: &str, max: usize) -> Result<Vec<u8>, HttpError> {
        use std::net::{TcpStream, ToSocketAddrs};
        let io = |e: std::io::Error| HttpError::Io(format!("the registry at {}:{} is unreachable: {e}", self.host, self.port));
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<_> = (host, self.port).to_socket_addrs().map_err(io)?.collect();
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let mut s = stream.ok_or_else(|| io(last))?;
        s.set_read_timeout(Some(Duration::from_secs(15))).map_err(io)?;
        s.set_write_timeout(Some(Duration::from_secs(15))).map_err(io)?;
        let host_header = if self.port == 80 { self.host.clone() } else { format!("{}:{}", self.host, self.port) };
        let req = format!(
            "GET {}{} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: runbook-host/{}\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            self.base_path,
            rel,
            env!("CARGO_PKG_VERSION")
        );
        s.write_all(req.as_bytes()).map_err(io)?;
        // Read until the answer is complete (Content-Length reached, the last chunk, or the end of the
        // stream), so a server that keeps the connection open does not hold us until the timeout.
        let limit = (max + 64 * 1024) * 2;
        let mut raw = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            if let Some(he) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&raw[..he]).to_ascii_lowercase();
                let body = &raw[he + 4..];
                let len = head.lines().find_map(|l| l.strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok()));
                let chunked = head.lines().any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
                if (chunked && body.ends_with(b"0\r\n\r\n") && dechunk(body).is_some()) || (!chunked && len.is_some_and(|n| body.len() >= n)) {
                    break;
                }
            }
            if raw.len() > limit {
                return Err(HttpError::Io(format!("`{rel}` is larger than {max} bytes")));
            }
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(e)),
            }
        }
        let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| HttpError::Io("the registry sent no complete HTTP head".into()))?;
        let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
        let body = &raw[head_end + 4..];
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let status: u16 =
            status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| HttpError::Io(format!("not an HTTP answer: `{status_line}`")))?;
        let mut chunked = false;
        let mut length: Option<usize> = None;
        for l in lines {
            if let Some((k, v)) = l.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                    chunked = true;
                } else if k == "content-length" {
                    length = v.parse().ok();
                }
            }
        }
        if status != 200 {
            return Err(HttpError::Status(status));
        }
        let body = if chunked {
            dechunk(body).ok_or_else(|| HttpError::Io("a malformed chunked body".into()))?
        } else if let Some(n) = length {
            if body.len() < n {
                return Err(HttpError::Io("the body is shorter than its Content-Length".into()));
            }
            body[..n].to_vec()
        } else {
            body.to_vec()
        };
        if body.len() > max {
            return Err(HttpError::Io(format!("`{rel}` is larger than {max} bytes")));
        }
        Ok(body)
    }
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        if b.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

// ---------------------------------------------------------------------------------------------------
// Writing a directory registry.

fn read_index_or_empty(dir: &Dir) -> Result<Value, RegistryError> {
    match read_bounded(dir, "index.json", MAX_INDEX) {
        Ok(b) => parse_index(&b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({"schema": INDEX_SCHEMA, "runbooks": {}})),
        Err(e) => Err(RegistryError::new("io", format!("index.json: {e}"))),
    }
}

/// Adds a document to a directory registry (created when missing): lints it with the module (refusing any
/// error), stores its exact bytes at `<id>/<version>/runbook.<ext>` and pins their sha256 in `index.json`.
/// Adding the same bytes again is a no-op; a different document at a pinned id@version is `conflict`.
/// Returns (id, version, sha256).
pub fn add(registry_dir: &Path, document: &Path) -> Result<(String, String, String), RegistryError> {
    let bytes = std::fs::read(document).map_err(|e| RegistryError::new("io", format!("cannot read `{}`: {e}", document.display())))?;
    add_bytes(registry_dir, &bytes)
}

/// Marks `id@version` in the directory registry as requiring signed approvals (`"approvals": "signed"`).
pub fn require_signed_approvals(registry_dir: &Path, id: &str, version: &str) -> Result<(), RegistryError> {
    let dir = open_or_create_dir(registry_dir).map_err(|e| RegistryError::new("io", format!("cannot open the registry: {e}")))?;
    let mut index = read_index_or_empty(&dir)?;
    let Some(e) = index["runbooks"].get_mut(id).and_then(|v| v.get_mut(version)).and_then(Value::as_object_mut) else {
        return Err(RegistryError::new("unknown-runbook", format!("the registry has no `{id}@{version}`")));
    };
    e.insert("approvals".into(), json!("signed"));
    let mut text = serde_json::to_string_pretty(&index).map_err(|e| RegistryError::new("io", e.to_string()))?;
    text.push('\n');
    write_atomic(&dir, "index.json", text.as_bytes()).map_err(|e| RegistryError::new("io", format!("index.json: {e}")))
}

/// [`add`] for bytes already in memory.
pub fn add_bytes(registry_dir: &Path, bytes: &[u8]) -> Result<(String, String, String), RegistryError> {
    let policy = shared_policy().map_err(|e| RegistryError::new("io", e.to_string()))?;
    let lint = policy.lint(bytes).map_err(|e| RegistryError::new("io", e.to_string()))?;
    if !lint.ok {
        let first = lint.findings.iter().find(|f| matches!(f.severity, crate::Severity::Error));
        let what = first.map(|f| format!("error[{}] at {}:{}: {}", f.code, f.line, f.column, f.message)).unwrap_or_default();
        return Err(RegistryError::new("invalid-document", format!("the document has lint errors; {what}")));
    }
    let envelope = match policy.envelope(bytes).map_err(|e| RegistryError::new("io", e.to_string()))? {
        Ok(e) => e,
        Err(_) => return Err(RegistryError::new("invalid-document", "the document has no complete model")),
    };
    let env: Value = serde_json::from_str(&envelope).map_err(|e| RegistryError::new("io", e.to_string()))?;
    let id = env["document"]["runbook_id"].as_str().unwrap_or("").to_string();
    let version = env["document"]["version"].as_str().unwrap_or("").to_string();
    if !is_component(&id) || !is_component(&version) {
        return Err(RegistryError::new("invalid-document", format!("`{id}@{version}` cannot name a registry entry (letters, digits, `.`, `_`, `-`, `+`)")));
    }
    let sha = sha256_hex(bytes);
    let ext = file_name_for(bytes);
    let rel = format!("{id}/{version}/{ext}");
    let dir = open_or_create_dir(registry_dir).map_err(|e| RegistryError::new("io", format!("cannot open the registry: {e}")))?;
    let mut index = read_index_or_empty(&dir)?;
    if let Some(e) = index["runbooks"].get(&id).and_then(|v| v.get(&version)) {
        if e["sha256"] == sha.as_str() {
            // Already pinned; make sure the bytes are there too.
            if dir.read(e["path"].as_str().unwrap_or("")).map(|b| sha256_hex(&b) == sha).unwrap_or(false) {
                return Ok((id, version, sha));
            }
        } else {
            return Err(RegistryError::new(
                "conflict",
                format!("`{id}@{version}` is already pinned to a different document ({})", e["sha256"].as_str().unwrap_or("")),
            ));
        }
    }
    let io = |e: std::io::Error| RegistryError::new("io", format!("`{rel}`: {e}"));
    dir.create_dir_all(format!("{id}/{version}")).map_err(io)?;
    let vdir = dir.open_dir(format!("{id}/{version}")).map_err(io)?;
    if let Ok(existing) = vdir.read(ext) {
        if existing != bytes {
            return Err(RegistryError::new("conflict", format!("`{rel}` already holds a different document")));
        }
    } else {
        write_atomic(&vdir, ext, bytes).map_err(io)?;
    }
    let runbooks = index["runbooks"].as_object_mut().expect("checked by parse_index");
    let versions = runbooks.entry(id.clone()).or_insert_with(|| Value::Object(Map::new()));
    versions.as_object_mut().expect("checked by parse_index").insert(version.clone(), json!({"sha256": sha, "path": rel}));
    let mut text = serde_json::to_string_pretty(&index).map_err(|e| RegistryError::new("io", e.to_string()))?;
    text.push('\n');
    write_atomic(&dir, "index.json", text.as_bytes()).map_err(|e| RegistryError::new("io", format!("index.json: {e}")))?;
    Ok((id, version, sha))
}

/// Every pinned (id, version, sha256) of a directory registry, sorted by id then version (as strings).
pub fn list(registry_dir: &Path) -> Result<Vec<(String, String, String)>, RegistryError> {
    let dir = Dir::open_ambient_dir(registry_dir, cap_std::ambient_authority())
        .map_err(|e| RegistryError::new("unreachable", format!("cannot open the registry: {e}")))?;
    let bytes = read_bounded(&dir, "index.json", MAX_INDEX).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            RegistryError::new("unreachable", "the registry has no index.json")
        } else {
            RegistryError::new("io", format!("index.json: {e}"))
        }
    })?;
    let index = parse_index(&bytes)?;
    let mut out = Vec::new();
    for (id, versions) in index["runbooks"].as_object().into_iter().flatten() {
        for (version, e) in versions.as_object().into_iter().flatten() {
            out.push((id.clone(), version.clone(), e["sha256"].as_str().unwrap_or("").to_string()));
        }
    }
    out.sort();
    Ok(out)
}
