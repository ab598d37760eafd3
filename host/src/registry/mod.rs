//! Runbook registries (docs/spec/registry.md#pinning-and-tamper-detection and docs/spec/registry.md#index-layout): resolving `id@version` to pinned bytes, and writing a directory
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

use crate::files::{open_or_create_dir, sha256_hex, shared_policy, write_atomic};
use crate::signatures::dsse;

pub mod https;
pub mod oci;

use cap_std::fs::Dir;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

pub const INDEX_SCHEMA: &str = "runbook-registry-index/v1";
/// The most an index may weigh.
pub const MAX_INDEX: usize = 16 << 20;
/// The most a document may weigh when read from a registry (the module itself refuses past 1 MiB).
pub const MAX_DOCUMENT: usize = 4 << 20;

/// Trust of a resolved document (docs/spec/registry.md#trust-levels), assigned by the resolver, never by the document.
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
    /// Where the bytes came from (recorded in the run's `run.json`).
    pub provenance: Provenance,
    /// The document's DSSE envelope, when it has one (checked only when a signature is required).
    pub signature: Option<Vec<u8>>,
    /// Where a signature was looked for, for the message when it is missing.
    pub signature_where: String,
}

/// Why a reference did not resolve (or a document was not added); [`RegistryErrorKind::code`] is the
/// stable code the CLI prints and writes in its JSON.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistryErrorKind {
    /// `unknown-runbook`: the registry has no such id (or no such OCI reference).
    UnknownRunbook,
    /// `unknown-version`: the id is there, that version is not.
    UnknownVersion,
    /// `tampered`: the bytes do not match their pin.
    Tampered,
    /// `unreachable`: the registry could not be reached, or refused.
    Unreachable,
    /// `invalid-index`: the index (or what it names) is not one this host reads.
    InvalidIndex,
    /// `io`: reading or writing failed.
    Io,
    /// `invalid-document` (from [`add`] only): lint errors, or no id/version.
    InvalidDocument,
    /// `conflict` (from [`add`] only): a different document is already pinned at that id@version.
    Conflict,
    /// `signature-missing`: a signature is required and there is none.
    SignatureMissing,
    /// `signature-*`: the signature did not check out (the DSSE check's own code).
    Signature(dsse::DsseErrorKind),
}

impl RegistryErrorKind {
    pub fn code(&self) -> &'static str {
        match self {
            RegistryErrorKind::UnknownRunbook => "unknown-runbook",
            RegistryErrorKind::UnknownVersion => "unknown-version",
            RegistryErrorKind::Tampered => "tampered",
            RegistryErrorKind::Unreachable => "unreachable",
            RegistryErrorKind::InvalidIndex => "invalid-index",
            RegistryErrorKind::Io => "io",
            RegistryErrorKind::InvalidDocument => "invalid-document",
            RegistryErrorKind::Conflict => "conflict",
            RegistryErrorKind::SignatureMissing => "signature-missing",
            RegistryErrorKind::Signature(k) => k.code(),
        }
    }

    /// Whether the document was found wanting (refused on its merits: the CLI's exit 1), as opposed to
    /// the registry or the disk failing (exit 2).
    pub fn is_refusal(&self) -> bool {
        use RegistryErrorKind::*;
        match self {
            InvalidDocument | Conflict | InvalidIndex | Tampered | SignatureMissing | Signature(_) => true,
            UnknownRunbook | UnknownVersion | Unreachable | Io => false,
        }
    }
}

impl std::fmt::Display for RegistryErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

impl From<dsse::DsseErrorKind> for RegistryErrorKind {
    fn from(k: dsse::DsseErrorKind) -> RegistryErrorKind {
        RegistryErrorKind::Signature(k)
    }
}

/// Why a reference did not resolve: its kind and a message that names what was looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryError {
    pub kind: RegistryErrorKind,
    pub message: String,
}

impl RegistryError {
    pub fn new(kind: impl Into<RegistryErrorKind>, message: impl Into<String>) -> RegistryError {
        RegistryError { kind: kind.into(), message: message.into() }
    }
}

impl std::fmt::Display for RegistryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
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

/// How to resolve: where the registry is and what a resolution must satisfy.
#[derive(Clone, Debug)]
pub struct Settings {
    /// A directory, an `https://` base URL (`http://` on loopback only) or an `oci://HOST/PREFIX`.
    pub registry: String,
    /// CA certificates (PEM) trusted besides the system's, for `https://` and `oci://` registries.
    pub ca_pem: Vec<Vec<u8>>,
    /// When not empty, a document runs only with a DSSE signature by one of these keys (`--require-signature`).
    pub require_signature: Vec<ed25519_dalek::VerifyingKey>,
    /// The content-addressed cache of registry bytes (none: no cache, nothing runs offline).
    pub cache: Option<https::Cache>,
    /// How old a cached index may be when it stands in for a registry that is down (seconds).
    pub offline_max_age: i64,
    /// Credentials for `oci://` registries (`RUNBOOK_REGISTRY_USERNAME` / `RUNBOOK_REGISTRY_PASSWORD`).
    pub oci_username: Option<String>,
    pub oci_password: Option<String>,
}

/// A cached index stands in for a registry that is down for at most a day by default: long enough to ride
/// out an outage, short enough that a revoked version stops running everywhere within a day.
pub const DEFAULT_OFFLINE_MAX_AGE: i64 = 24 * 3600;

impl Settings {
    /// The registry with the default cache, no extra CA and no signature required.
    pub fn new(registry: &str) -> Settings {
        Settings {
            registry: registry.to_string(),
            ca_pem: Vec::new(),
            require_signature: Vec::new(),
            cache: https::Cache::default_location(),
            offline_max_age: DEFAULT_OFFLINE_MAX_AGE,
            oci_username: std::env::var("RUNBOOK_REGISTRY_USERNAME").ok().filter(|v| !v.is_empty()),
            oci_password: std::env::var("RUNBOOK_REGISTRY_PASSWORD").ok(),
        }
    }
}

/// Where the bytes came from, for the run's evidence (`run.json` `document.source`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provenance {
    /// `file`, `directory`, `https`, `http` (loopback) or `oci`.
    pub kind: &'static str,
    /// A URL registry as given (never a directory's path: no absolute path enters a bundle).
    pub registry: Option<String>,
    /// Why cached bytes stood in for the registry, when they did.
    pub from_cache: Option<String>,
    /// The key id of the signature checked (`--require-signature`), and its expiry when it has one.
    pub signed_by: Option<String>,
    pub signature_expires: Option<String>,
}

impl Provenance {
    pub fn to_json(&self) -> Value {
        json!({
            "kind": self.kind,
            "registry": self.registry,
            "from_cache": self.from_cache,
            "signed_by": self.signed_by,
            "signature_expires": self.signature_expires,
        })
    }
}

/// Resolves a reference with the default [`Settings`] for `registry`.
pub fn resolve(reference: &str, registry: &str) -> Result<Resolved, RegistryError> {
    resolve_with(reference, &Settings::new(registry))
}

/// Resolves a reference: `id@version` from the registry, pinned; `oci://...` directly from an OCI registry
/// (pinned when it names a digest); any other reference that names an existing file, as a local document
/// (T1). When the settings require a signature, a document without a valid one is refused here, before
/// anything runs.
pub fn resolve_with(reference: &str, settings: &Settings) -> Result<Resolved, RegistryError> {
    let mut r = resolve_unsigned(reference, settings)?;
    if !settings.require_signature.is_empty() {
        let envelope = r.signature.take().ok_or_else(|| {
            RegistryError::new(
                RegistryErrorKind::SignatureMissing,
                format!("`{reference}` has no signature, and a signature is required ({})", r.signature_where),
            )
        })?;
        let v = dsse::verify_envelope(&envelope, &settings.require_signature, &r.sha256, dsse::DOCUMENT_PREDICATE, https::now_unix())
            .map_err(|e| RegistryError::new(e.kind, format!("`{reference}`: {}", e.message)))?;
        r.provenance.signed_by = Some(v.key_id);
        r.provenance.signature_expires = v.predicate["expires"].as_str().map(str::to_string);
        r.signature = Some(envelope);
    }
    Ok(r)
}

fn resolve_unsigned(reference: &str, settings: &Settings) -> Result<Resolved, RegistryError> {
    let registry = settings.registry.as_str();
    let as_file = Path::new(reference);
    if reference.starts_with("oci://") || reference.starts_with("oci+http://") {
        return oci::resolve_ref(reference, settings);
    }
    if let Some((id, version)) = parse_reference(reference) {
        // A file literally named like `id@version` is still resolved from the registry: a reference of that
        // shape is always pinned (a local file is named by a path with `/` or an extension without `@`).
        if registry.starts_with("oci://") || registry.starts_with("oci+http://") {
            return oci::resolve_pinned(id, version, settings);
        }
        let source = Source::open(settings)?;
        // Which registry was looked in, for a person wondering why a runbook is not there.
        let named = |e: RegistryError| RegistryError { message: format!("{} (looked in {})", e.message, shown(registry)), ..e };
        let (index, mut provenance) = source.index().map_err(named)?;
        let entry = lookup(&index, id, version).map_err(named)?;
        let bytes = source.get(&entry.path, &entry.sha256, &mut provenance)?;
        let sha = sha256_hex(&bytes);
        if sha != entry.sha256 {
            return Err(RegistryError::new(
                RegistryErrorKind::Tampered,
                format!("`{reference}`: the document's sha256 is {sha}, the registry pins {}", entry.sha256),
            ));
        }
        let (signature, signature_where) = match &entry.signature {
            Some(p) => (source.get_signature(p, &mut provenance)?, format!("the registry's `{p}`")),
            None => (None, "the registry's index names no signature for it".to_string()),
        };
        return Ok(Resolved {
            file_name: file_name_for(&bytes).into(),
            bytes,
            sha256: sha,
            reference: format!("{id}@{version}"),
            pinned_sha256: Some(entry.sha256),
            trust: Trust::T2,
            signed_approvals: entry.signed_approvals,
            provenance,
            signature,
            signature_where,
        });
    }
    if as_file.is_file() {
        let bytes = crate::files::read_path_bounded(as_file, MAX_DOCUMENT as u64)
            .map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("cannot read `{reference}`: {e}")))?;
        let name = as_file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| "runbook".into());
        // A local document's signature is the file beside it, `<file>.dsse.json` (what `runbook-host sign` writes).
        let sidecar = PathBuf::from(format!("{reference}{SIGNATURE_SUFFIX}"));
        let signature = read_signature_file(&sidecar)?;
        return Ok(Resolved {
            file_name: file_name_for(&bytes).into(),
            sha256: sha256_hex(&bytes),
            bytes,
            reference: name.clone(),
            pinned_sha256: None,
            trust: Trust::T1,
            signed_approvals: false,
            provenance: Provenance { kind: "file", ..Default::default() },
            signature,
            signature_where: format!("no `{name}{SIGNATURE_SUFFIX}` beside it"),
        });
    }
    Err(RegistryError::new(RegistryErrorKind::UnknownRunbook, format!("`{reference}` is neither `id@version`, an `oci://` reference nor an existing file")))
}

/// A signature file's name beside its document.
pub const SIGNATURE_SUFFIX: &str = ".dsse.json";

fn read_signature_file(path: &Path) -> Result<Option<Vec<u8>>, RegistryError> {
    match crate::files::read_path_bounded(path, MAX_SIGNATURE as u64) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(RegistryError::new(
            RegistryErrorKind::Signature(dsse::DsseErrorKind::Malformed),
            format!("`{}` is larger than {MAX_SIGNATURE} bytes", path.display()),
        )),
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RegistryError::new(RegistryErrorKind::Io, format!("cannot read `{}`: {e}", path.display()))),
    }
}

/// The most a signature envelope may weigh.
pub const MAX_SIGNATURE: usize = 1 << 20;

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
    /// The path of its DSSE envelope (`"signature"`), when the registry holds one.
    pub signature: Option<String>,
}

/// Parses and checks an index: schema, shapes, hex pins, and every path relative and inside.
pub fn parse_index(bytes: &[u8]) -> Result<Value, RegistryError> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| RegistryError::new(RegistryErrorKind::InvalidIndex, format!("index.json is not JSON: {e}")))?;
    if v["schema"] != INDEX_SCHEMA {
        return Err(RegistryError::new(RegistryErrorKind::InvalidIndex, format!("index.json: `schema` must be `{INDEX_SCHEMA}`")));
    }
    let Some(runbooks) = v["runbooks"].as_object() else {
        return Err(RegistryError::new(RegistryErrorKind::InvalidIndex, "index.json: `runbooks` must be an object"));
    };
    for (id, versions) in runbooks {
        let Some(versions) = versions.as_object() else {
            return Err(RegistryError::new(RegistryErrorKind::InvalidIndex, format!("index.json: `{id}` must map versions to entries")));
        };
        for (version, e) in versions {
            let sha = e["sha256"].as_str().unwrap_or("");
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(RegistryError::new(RegistryErrorKind::InvalidIndex, format!("index.json: `{id}@{version}` has no lowercase hex sha256")));
            }
            let path =
                e["path"].as_str().ok_or_else(|| RegistryError::new(RegistryErrorKind::InvalidIndex, format!("index.json: `{id}@{version}` has no path")))?;
            check_index_path(path).map_err(|m| RegistryError::new(RegistryErrorKind::InvalidIndex, format!("index.json: `{id}@{version}`: {m}")))?;
            match &e["signature"] {
                Value::Null => {}
                Value::String(p) => check_index_path(p)
                    .map_err(|m| RegistryError::new(RegistryErrorKind::InvalidIndex, format!("index.json: `{id}@{version}` signature: {m}")))?,
                _ => return Err(RegistryError::new(RegistryErrorKind::InvalidIndex, format!("index.json: `{id}@{version}`: `signature` must be a path"))),
            }
            if !(e["approvals"].is_null() || e["approvals"] == "signed") {
                return Err(RegistryError::new(RegistryErrorKind::InvalidIndex, format!("index.json: `{id}@{version}`: `approvals` can only be \"signed\"")));
            }
        }
    }
    Ok(v)
}

fn lookup(index: &Value, id: &str, version: &str) -> Result<Entry, RegistryError> {
    let Some(versions) = index["runbooks"].get(id) else {
        return Err(RegistryError::new(RegistryErrorKind::UnknownRunbook, format!("the registry has no runbook `{id}`")));
    };
    let Some(e) = versions.get(version) else {
        return Err(RegistryError::new(RegistryErrorKind::UnknownVersion, format!("the registry has no version `{version}` of `{id}`")));
    };
    Ok(Entry {
        sha256: e["sha256"].as_str().unwrap_or_default().to_string(),
        path: e["path"].as_str().unwrap_or_default().to_string(),
        signed_approvals: e["approvals"] == "signed",
        signature: e["signature"].as_str().map(str::to_string),
    })
}

enum Source {
    Dir(Dir),
    Url { base: String, client: reqwest::Client, cache: Option<https::Cache>, max_age: i64 },
}

impl Source {
    fn open(settings: &Settings) -> Result<Source, RegistryError> {
        let registry = settings.registry.as_str();
        if registry.starts_with("http://") || registry.starts_with("https://") {
            https::check_url(registry).map_err(|e| RegistryError::new(RegistryErrorKind::Unreachable, e.message))?;
            let client = https::client(&settings.ca_pem).map_err(|e| RegistryError::new(RegistryErrorKind::Unreachable, e.message))?;
            let base = if registry.ends_with('/') { registry.to_string() } else { format!("{registry}/") };
            return Ok(Source::Url { base, client, cache: settings.cache.clone(), max_age: settings.offline_max_age });
        }
        if registry.contains("://") {
            return Err(RegistryError::new(
                RegistryErrorKind::Unreachable,
                format!("`{registry}`: a registry is a directory, an https:// URL (http:// on loopback) or oci://HOST/PREFIX"),
            ));
        }
        Dir::open_ambient_dir(registry, cap_std::ambient_authority())
            .map(Source::Dir)
            .map_err(|e| RegistryError::new(RegistryErrorKind::Unreachable, format!("cannot open the registry `{registry}`: {e}")))
    }

    /// The parsed index and the provenance so far. A URL registry's index is fetched whole every time;
    /// only when the registry cannot be reached, a cached index younger than the allowed age stands in, and the
    /// provenance says so.
    fn index(&self) -> Result<(Value, Provenance), RegistryError> {
        match self {
            Source::Dir(d) => {
                let bytes = read_bounded(d, "index.json", MAX_INDEX).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        RegistryError::new(RegistryErrorKind::Unreachable, "the registry has no index.json (`registry add FILE` creates it)")
                    } else {
                        RegistryError::new(RegistryErrorKind::Io, format!("index.json: {e}"))
                    }
                })?;
                Ok((parse_index(&bytes)?, Provenance { kind: "directory", ..Default::default() }))
            }
            Source::Url { base, client, cache, max_age } => {
                let url = format!("{base}index.json");
                let mut provenance = Provenance {
                    kind: if base.starts_with("https://") { "https" } else { "http" },
                    registry: Some(base.trim_end_matches('/').to_string()),
                    ..Default::default()
                };
                let prior = cache.as_ref().and_then(|c| https::cached(c, &url));
                let now = https::now_unix();
                // The index is always fetched whole while the registry answers: what pins a document is the
                // registry's index, never a cached one (a cached index stands in only while it is down).
                match https::get(client, &url, MAX_INDEX) {
                    Ok(https::Got(bytes, etag)) => {
                        let index = parse_index(&bytes)?;
                        if let Some(c) = cache {
                            // Only a valid index is remembered; a cache that cannot be written costs a later fetch.
                            if let Ok(sha) = c.put_blob(&bytes) {
                                let _ = c.put_url_entry(&url, etag.as_deref(), &sha, now);
                            }
                        }
                        Ok((index, provenance))
                    }
                    Err(e) if https::is_down(&e) => {
                        let Some((bytes, _, at)) = prior else {
                            return Err(RegistryError::new(RegistryErrorKind::Unreachable, format!("{} (and no copy of its index is cached)", e.message)));
                        };
                        let age = now - at;
                        if age > *max_age {
                            return Err(RegistryError::new(
                                RegistryErrorKind::Unreachable,
                                format!("{} (the cached index is {age} s old, more than the {max_age} s allowed offline)", e.message),
                            ));
                        }
                        provenance.from_cache = Some(format!("the registry was unreachable; its index as fetched {age} s before ({})", e.message));
                        Ok((parse_index(&bytes)?, provenance))
                    }
                    Err(e) if matches!(e.kind, https::FetchErrorKind::Status | https::FetchErrorKind::NotFound) => {
                        Err(RegistryError::new(RegistryErrorKind::Unreachable, format!("the registry has no usable index.json: {}", e.message)))
                    }
                    Err(e) => Err(RegistryError::new(RegistryErrorKind::Unreachable, e.message)),
                }
            }
        }
    }

    /// A pinned document: from the cache when its bytes are there (they are named by the pin), else fetched
    /// and then cached only when they match it.
    fn get(&self, path: &str, pin: &str, provenance: &mut Provenance) -> Result<Vec<u8>, RegistryError> {
        check_index_path(path).map_err(|m| RegistryError::new(RegistryErrorKind::InvalidIndex, m))?;
        match self {
            Source::Dir(d) => read_bounded(d, path, MAX_DOCUMENT).map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("`{path}`: {e}"))),
            Source::Url { base, client, cache, .. } => {
                if let Some(b) = cache.as_ref().and_then(|c| c.blob(pin)) {
                    return Ok(b);
                }
                if provenance.from_cache.is_some() {
                    return Err(RegistryError::new(
                        RegistryErrorKind::Unreachable,
                        format!("the registry is unreachable and `{path}` (sha256 {pin}) is not in the cache"),
                    ));
                }
                match https::get(client, &format!("{base}{path}"), MAX_DOCUMENT) {
                    Ok(https::Got(b, _)) => {
                        if sha256_hex(&b) == pin {
                            if let Some(c) = cache {
                                let _ = c.put_blob(&b);
                            }
                        }
                        Ok(b)
                    }
                    Err(e) if matches!(e.kind, https::FetchErrorKind::Status | https::FetchErrorKind::NotFound | https::FetchErrorKind::TooLarge) => {
                        Err(RegistryError::new(RegistryErrorKind::Io, e.message))
                    }
                    Err(e) => Err(RegistryError::new(RegistryErrorKind::Unreachable, e.message)),
                }
            }
        }
    }

    /// A document's signature envelope at `path` in the registry (none when it is not there).
    fn get_signature(&self, path: &str, provenance: &mut Provenance) -> Result<Option<Vec<u8>>, RegistryError> {
        check_index_path(path).map_err(|m| RegistryError::new(RegistryErrorKind::InvalidIndex, m))?;
        match self {
            Source::Dir(d) => match read_bounded(d, path, MAX_SIGNATURE) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(RegistryError::new(RegistryErrorKind::Io, format!("`{path}`: {e}"))),
            },
            Source::Url { base, client, cache, .. } => {
                let url = format!("{base}{path}");
                // A signature is not content-addressed by the pin: cache it by URL, used only offline.
                if provenance.from_cache.is_some() {
                    return Ok(cache.as_ref().and_then(|c| https::cached(c, &url)).map(|c| c.0));
                }
                match https::get(client, &url, MAX_SIGNATURE) {
                    Ok(https::Got(b, etag)) => {
                        if let Some(c) = cache {
                            if let Ok(sha) = c.put_blob(&b) {
                                let _ = c.put_url_entry(&url, etag.as_deref(), &sha, https::now_unix());
                            }
                        }
                        Ok(Some(b))
                    }
                    Err(e) if e.kind == https::FetchErrorKind::NotFound => Ok(None),
                    Err(e) => Err(RegistryError::new(RegistryErrorKind::Unreachable, e.message)),
                }
            }
        }
    }
}

fn read_bounded(dir: &Dir, path: &str, max: usize) -> std::io::Result<Vec<u8>> {
    crate::files::read_bounded(dir, path, max as u64)
}

// ---------------------------------------------------------------------------------------------------
// Writing a directory registry.

fn read_index_or_empty(dir: &Dir) -> Result<Value, RegistryError> {
    match read_bounded(dir, "index.json", MAX_INDEX) {
        Ok(b) => parse_index(&b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({"schema": INDEX_SCHEMA, "runbooks": {}})),
        Err(e) => Err(RegistryError::new(RegistryErrorKind::Io, format!("index.json: {e}"))),
    }
}

/// Adds a document to a directory registry (created when missing): lints it with the module (refusing any
/// error), stores its exact bytes at `<id>/<version>/runbook.<ext>` and pins their sha256 in `index.json`.
/// Adding the same bytes again is a no-op; a different document at a pinned id@version is `conflict`.
/// Returns (id, version, sha256).
pub fn add(registry_dir: &Path, document: &Path) -> Result<(String, String, String), RegistryError> {
    add_checked(registry_dir, document, &[])
}

/// [`add`], also storing the document's signature (`<file>.dsse.json` beside it, when there is one) next to
/// it in the registry, named by the index entry's `signature`. With `require` not empty, the registry takes
/// only a document signed by one of those keys (checked before anything is written).
pub fn add_checked(registry_dir: &Path, document: &Path, require: &[ed25519_dalek::VerifyingKey]) -> Result<(String, String, String), RegistryError> {
    let bytes = crate::files::read_path_bounded(document, MAX_DOCUMENT as u64)
        .map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("cannot read `{}`: {e}", document.display())))?;
    let sidecar = PathBuf::from(format!("{}{SIGNATURE_SUFFIX}", document.display()));
    let signature = read_signature_file(&sidecar)?;
    if !require.is_empty() {
        let env = signature.as_ref().ok_or_else(|| {
            RegistryError::new(
                RegistryErrorKind::SignatureMissing,
                format!("`{}` has no signature beside it (`{}`), and this registry requires one", document.display(), sidecar.display()),
            )
        })?;
        dsse::verify_envelope(env, require, &sha256_hex(&bytes), dsse::DOCUMENT_PREDICATE, https::now_unix())
            .map_err(|e| RegistryError::new(e.kind, format!("`{}`: {}", sidecar.display(), e.message)))?;
    }
    let (id, version, sha) = add_bytes(registry_dir, &bytes)?;
    if let Some(env) = signature {
        store_signature(registry_dir, &id, &version, &env)?;
    }
    Ok((id, version, sha))
}

/// Stores a DSSE envelope for `id@version` beside its document and names it in the index.
pub fn store_signature(registry_dir: &Path, id: &str, version: &str, envelope: &[u8]) -> Result<(), RegistryError> {
    let dir = open_or_create_dir(registry_dir).map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("cannot open the registry: {e}")))?;
    let mut index = read_index_or_empty(&dir)?;
    let Some(e) = index["runbooks"].get_mut(id).and_then(|v| v.get_mut(version)).and_then(Value::as_object_mut) else {
        return Err(RegistryError::new(RegistryErrorKind::UnknownRunbook, format!("the registry has no `{id}@{version}`")));
    };
    let rel = format!("{}{SIGNATURE_SUFFIX}", e["path"].as_str().unwrap_or_default());
    check_index_path(&rel).map_err(|m| RegistryError::new(RegistryErrorKind::InvalidIndex, m))?;
    let (parent, name) = rel.rsplit_once('/').unwrap_or((".", rel.as_str()));
    let io = |e: std::io::Error| RegistryError::new(RegistryErrorKind::Io, format!("`{rel}`: {e}"));
    write_atomic(&dir.open_dir(parent).map_err(io)?, name, envelope).map_err(io)?;
    e.insert("signature".into(), json!(rel));
    let mut text = serde_json::to_string_pretty(&index).map_err(|e| RegistryError::new(RegistryErrorKind::Io, e.to_string()))?;
    text.push('\n');
    write_atomic(&dir, "index.json", text.as_bytes()).map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("index.json: {e}")))
}

/// Marks `id@version` in the directory registry as requiring signed approvals (`"approvals": "signed"`).
pub fn require_signed_approvals(registry_dir: &Path, id: &str, version: &str) -> Result<(), RegistryError> {
    let dir = open_or_create_dir(registry_dir).map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("cannot open the registry: {e}")))?;
    let mut index = read_index_or_empty(&dir)?;
    let Some(e) = index["runbooks"].get_mut(id).and_then(|v| v.get_mut(version)).and_then(Value::as_object_mut) else {
        return Err(RegistryError::new(RegistryErrorKind::UnknownRunbook, format!("the registry has no `{id}@{version}`")));
    };
    e.insert("approvals".into(), json!("signed"));
    let mut text = serde_json::to_string_pretty(&index).map_err(|e| RegistryError::new(RegistryErrorKind::Io, e.to_string()))?;
    text.push('\n');
    write_atomic(&dir, "index.json", text.as_bytes()).map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("index.json: {e}")))
}

/// A document's id and version, from its envelope; lint errors, no model, or an id or version that cannot
/// name a registry entry are `invalid-document`.
pub fn document_id(bytes: &[u8]) -> Result<(String, String), RegistryError> {
    let policy = shared_policy().map_err(|e| RegistryError::new(RegistryErrorKind::Io, e.to_string()))?;
    let lint = policy.lint(bytes).map_err(|e| RegistryError::new(RegistryErrorKind::Io, e.to_string()))?;
    if !lint.ok {
        let first = lint.findings.iter().find(|f| matches!(f.severity, crate::Severity::Error));
        let what = first.map(|f| format!("error[{}] at {}:{}: {}", f.code, f.line, f.column, f.message)).unwrap_or_default();
        return Err(RegistryError::new(RegistryErrorKind::InvalidDocument, format!("the document has lint errors; {what}")));
    }
    let envelope = match policy.envelope(bytes).map_err(|e| RegistryError::new(RegistryErrorKind::Io, e.to_string()))? {
        Ok(e) => e,
        Err(_) => return Err(RegistryError::new(RegistryErrorKind::InvalidDocument, "the document has no complete model")),
    };
    let env: Value = serde_json::from_str(&envelope).map_err(|e| RegistryError::new(RegistryErrorKind::Io, e.to_string()))?;
    let id = env["document"]["runbook_id"].as_str().unwrap_or("").to_string();
    let version = env["document"]["version"].as_str().unwrap_or("").to_string();
    if !is_component(&id) || !is_component(&version) {
        return Err(RegistryError::new(
            RegistryErrorKind::InvalidDocument,
            format!("`{id}@{version}` cannot name a registry entry (letters, digits, `.`, `_`, `-`, `+`)"),
        ));
    }
    Ok((id, version))
}

/// [`add`] for bytes already in memory.
pub fn add_bytes(registry_dir: &Path, bytes: &[u8]) -> Result<(String, String, String), RegistryError> {
    let (id, version) = document_id(bytes)?;
    let sha = sha256_hex(bytes);
    let ext = file_name_for(bytes);
    let rel = format!("{id}/{version}/{ext}");
    let dir = open_or_create_dir(registry_dir).map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("cannot open the registry: {e}")))?;
    let mut index = read_index_or_empty(&dir)?;
    if let Some(e) = index["runbooks"].get(&id).and_then(|v| v.get(&version)) {
        if e["sha256"] == sha.as_str() {
            // Already pinned; make sure the bytes are there too.
            if dir.read(e["path"].as_str().unwrap_or("")).map(|b| sha256_hex(&b) == sha).unwrap_or(false) {
                return Ok((id, version, sha));
            }
        } else {
            return Err(RegistryError::new(
                RegistryErrorKind::Conflict,
                format!("`{id}@{version}` is already pinned to a different document ({})", e["sha256"].as_str().unwrap_or("")),
            ));
        }
    }
    let io = |e: std::io::Error| RegistryError::new(RegistryErrorKind::Io, format!("`{rel}`: {e}"));
    dir.create_dir_all(format!("{id}/{version}")).map_err(io)?;
    let vdir = dir.open_dir(format!("{id}/{version}")).map_err(io)?;
    if let Ok(existing) = vdir.read(ext) {
        if existing != bytes {
            return Err(RegistryError::new(RegistryErrorKind::Conflict, format!("`{rel}` already holds a different document")));
        }
    } else {
        write_atomic(&vdir, ext, bytes).map_err(io)?;
    }
    let runbooks = index["runbooks"].as_object_mut().expect("checked by parse_index");
    let versions = runbooks.entry(id.clone()).or_insert_with(|| Value::Object(Map::new()));
    versions.as_object_mut().expect("checked by parse_index").insert(version.clone(), json!({"sha256": sha, "path": rel}));
    let mut text = serde_json::to_string_pretty(&index).map_err(|e| RegistryError::new(RegistryErrorKind::Io, e.to_string()))?;
    text.push('\n');
    write_atomic(&dir, "index.json", text.as_bytes()).map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("index.json: {e}")))?;
    Ok((id, version, sha))
}

/// Every pinned (id, version, sha256) of a directory registry, sorted by id then version (as strings).
pub fn list(registry_dir: &Path) -> Result<Vec<(String, String, String)>, RegistryError> {
    let dir = Dir::open_ambient_dir(registry_dir, cap_std::ambient_authority())
        .map_err(|e| RegistryError::new(RegistryErrorKind::Unreachable, format!("cannot open the registry: {e}")))?;
    let bytes = read_bounded(&dir, "index.json", MAX_INDEX).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            RegistryError::new(RegistryErrorKind::Unreachable, "the registry has no index.json")
        } else {
            RegistryError::new(RegistryErrorKind::Io, format!("index.json: {e}"))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind's code (what `registry --format json` writes): a renamed code fails here.
    #[test]
    fn kind_codes() {
        use dsse::DsseErrorKind as D;
        use RegistryErrorKind::*;
        let table = [
            (UnknownRunbook, "unknown-runbook"),
            (UnknownVersion, "unknown-version"),
            (Tampered, "tampered"),
            (Unreachable, "unreachable"),
            (InvalidIndex, "invalid-index"),
            (Io, "io"),
            (InvalidDocument, "invalid-document"),
            (Conflict, "conflict"),
            (SignatureMissing, "signature-missing"),
            (Signature(D::Malformed), "signature-malformed"),
            (Signature(D::Invalid), "signature-invalid"),
            (Signature(D::Untrusted), "signature-untrusted"),
            (Signature(D::Mismatch), "signature-mismatch"),
            (Signature(D::Expired), "signature-expired"),
            (Signature(D::Keygen), "signature-keygen"),
        ];
        for (kind, code) in table {
            assert_eq!(kind.code(), code);
            assert_eq!(RegistryError::new(kind, "m").to_string(), format!("{code}: m"));
            // The CLI's exit status: 1 for a refused document (every signature failure among them).
            assert_eq!(
                kind.is_refusal(),
                matches!(code, "invalid-document" | "conflict" | "invalid-index" | "tampered") || code.starts_with("signature-"),
                "{code}"
            );
        }
    }
}
