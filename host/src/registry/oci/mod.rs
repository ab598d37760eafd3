//! Runbook documents, their signatures and the policy component in OCI registries (issue "Past one
//! machine"), on top of [`crate::registry::client::client`].
//!
//! # Layout (the media types other tools read)
//! - A **document** is an OCI image manifest with `artifactType` [`DOCUMENT_ARTIFACT_TYPE`], the empty
//!   config, and one layer of media type [`DOCUMENT_LAYER`] holding the document's exact bytes (YAML or
//!   JSON, as written), so the layer's digest *is* the document's sha256. Annotations:
//!   `org.opencontainers.image.title` (`runbook.yaml` or `runbook.json`), [`ANNOTATION_ID`],
//!   [`ANNOTATION_VERSION`].
//! - Its **signature** (a DSSE envelope, crate::signatures::dsse) is an artifact of type [`SIGNATURE_ARTIFACT_TYPE`] with
//!   one [`DSSE_LAYER`] layer, in the same repository under the tag `sha256-<document sha256>.dsse` (the
//!   tag scheme cosign uses, which needs no referrers API from the registry).
//! - `id@version` resolves through an **index** artifact, `oci://HOST/PREFIX:index` ([`INDEX_ARTIFACT_TYPE`],
//!   one [`INDEX_LAYER`] layer): the JSON of a directory registry's `index.json`
//!   (`runbook-registry-index/v1`), each entry's `path` being `<id>/<tag>` (the document's repository under
//!   PREFIX and its tag) and `manifest` the manifest digest it was pushed as. The pin is the entry's
//!   `sha256`; the document is pulled by manifest digest, so a tag moved afterwards changes nothing.
//! - The **component** is an artifact of type [`MODULE_ARTIFACT_TYPE`] with one `application/wasm` layer.
//!
//! # Trust
//! A reference with a digest (`oci://H/R@sha256:...`) is pinned (T2): the manifest must hash to it and the
//! layer to the manifest's digest. A tag alone is not a pin (T1: it runs, recorded as unpinned, and never
//! while the registry is down). Pinned bytes are cached by sha256 ([`crate::registry::https::Cache`]) and a pinned
//! reference resolves from the cache without asking the registry at all.

pub mod client;

use crate::files::sha256_hex;
use crate::registry::https as fetch;
use crate::registry::{self, Provenance, RegistryError, RegistryErrorKind, Resolved, Settings, Trust, MAX_DOCUMENT, MAX_INDEX, MAX_SIGNATURE};
use client::{OciError, OciErrorKind, OciRef};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

pub const DOCUMENT_ARTIFACT_TYPE: &str = "application/vnd.runbook-host.document.v1";
pub const DOCUMENT_LAYER: &str = "application/vnd.runbook-host.document.layer.v1";
pub const SIGNATURE_ARTIFACT_TYPE: &str = "application/vnd.runbook-host.signature.v1";
pub const DSSE_LAYER: &str = "application/vnd.dsse.envelope.v1+json";
pub const INDEX_ARTIFACT_TYPE: &str = "application/vnd.runbook-host.index.v1";
pub const INDEX_LAYER: &str = "application/vnd.runbook-host.index.v1+json";
pub const MODULE_ARTIFACT_TYPE: &str = "application/vnd.runbook-host.policy-module.v1";
pub const MODULE_LAYER: &str = "application/wasm";
pub const ANNOTATION_ID: &str = "runbook-host.runbook.id";
pub const ANNOTATION_VERSION: &str = "runbook-host.runbook.version";
const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";
/// The component may weigh this much (it is under 1 MiB today).
pub const MAX_MODULE: usize = 32 << 20;

fn options(settings: &Settings) -> client::Options {
    client::Options {
        extra_ca_pem: settings.ca_pem.clone(),
        username: settings.oci_username.clone(),
        password: settings.oci_password.clone(),
        ..Default::default()
    }
}

/// An OCI failure as a registry error: the registry could not be reached (`unreachable`), or answered with
/// bytes that do not match what was asked (`tampered`), or refused (`unreachable`, with its code in the
/// message).
fn from_oci(e: OciError) -> RegistryError {
    let kind = match e.kind {
        OciErrorKind::DigestMismatch => RegistryErrorKind::Tampered,
        OciErrorKind::NotFound | OciErrorKind::InvalidReference => RegistryErrorKind::UnknownRunbook,
        OciErrorKind::WrongType | OciErrorKind::TooLarge => RegistryErrorKind::InvalidIndex,
        OciErrorKind::AuthFailed | OciErrorKind::TlsFailed | OciErrorKind::Timeout | OciErrorKind::Unreachable | OciErrorKind::RegistryError => {
            RegistryErrorKind::Unreachable
        }
    };
    RegistryError { kind, message: format!("{} ({})", e.message, e.kind) }
}

/// Whether an OCI failure means the registry could not be reached at all (cached pins may stand in).
fn is_down(e: &OciError) -> bool {
    matches!(e.kind, OciErrorKind::Unreachable | OciErrorKind::Timeout)
}

/// The tag under which a document's signature is stored.
pub fn signature_tag(document_sha256: &str) -> String {
    format!("sha256-{document_sha256}.dsse")
}

/// Resolves `oci://HOST/REPO:TAG` or `oci://HOST/REPO@sha256:...` (docs/spec/registry.md#trust-levels: a digest is a pin, a tag is not).
pub fn resolve_ref(reference: &str, settings: &Settings) -> Result<Resolved, RegistryError> {
    let r = OciRef::parse(reference).map_err(from_oci)?;
    let opts = options(settings);
    let key = r.to_string();
    let cache = settings.cache.as_ref();
    let mut provenance = Provenance { kind: "oci", registry: Some(key.clone()), ..Default::default() };
    // A digest names immutable bytes: when they are in the cache, the registry need not be asked.
    let cached = r.digest.as_deref().and_then(|d| cache.and_then(|c| cached_document(c, d)));
    let (bytes, annotations) = match cached {
        Some(bytes) => (bytes, None),
        None => match client::pull(&r, DOCUMENT_ARTIFACT_TYPE, DOCUMENT_LAYER, MAX_DOCUMENT, &opts) {
            Ok(p) => {
                if let (Some(c), Some(d)) = (cache, &r.digest) {
                    // The manifest under its own digest (the pin) and the layer under its: the cache is read back
                    // through the pin alone, each step hashed again (issue 28, F5).
                    if d.strip_prefix("sha256:") == Some(sha256_hex(&p.manifest).as_str()) {
                        let _ = c.put_blob(&p.bytes).and_then(|_| c.put_blob(&p.manifest));
                    }
                }
                (p.bytes, Some(p.annotations))
            }
            Err(e) if is_down(&e) && r.digest.is_none() => {
                return Err(RegistryError::new(
                    RegistryErrorKind::Unreachable,
                    format!("{} ({}); a tag is not a pin, so nothing cached stands in for it: name the document by digest", e.message, e.kind),
                ))
            }
            Err(e) if is_down(&e) => {
                return Err(RegistryError::new(RegistryErrorKind::Unreachable, format!("{} ({}), and the document is not in the cache", e.message, e.kind)))
            }
            Err(e) => return Err(from_oci(e)),
        },
    };
    let sha = sha256_hex(&bytes);
    // The label is the document's own id@version (never the registry's annotations, which whoever can push
    // may set to anything).
    let label = registry::document_id(&bytes).map(|(i, v)| format!("{i}@{v}")).unwrap_or_else(|_| registry::file_name_for(&bytes).to_string());
    let pinned = r.digest.is_some();
    let signature = if settings.require_signature.is_empty() { None } else { pull_signature(&r, &sha, &opts, cache, &mut provenance)? };
    if annotations.is_none() {
        provenance.from_cache = Some("pinned by digest: the bytes were in the cache, the registry was not asked".into());
    }
    Ok(Resolved {
        file_name: registry::file_name_for(&bytes).into(),
        bytes,
        sha256: sha.clone(),
        reference: label,
        pinned_sha256: pinned.then_some(sha),
        trust: if pinned { Trust::T2 } else { Trust::T1 },
        signed_approvals: false,
        provenance,
        signature,
        signature_where: format!("no `{}` in {}", signature_tag("<sha256>"), r.repository),
    })
}

/// A digest-pinned document from the cache: its manifest by the pin, then the layer the manifest names, each
/// read only when it hashes to its name. Nothing else in the cache (an entry naming a URL, a planted blob)
/// can decide which bytes run as pinned.
fn cached_document(c: &fetch::Cache, digest: &str) -> Option<Vec<u8>> {
    let manifest = c.blob(digest.strip_prefix("sha256:")?)?;
    let m: serde_json::Value = serde_json::from_slice(&manifest).ok()?;
    let layer = client::check_manifest(&m, DOCUMENT_ARTIFACT_TYPE, DOCUMENT_LAYER).ok()?;
    c.blob(layer.digest.strip_prefix("sha256:")?)
}

/// A document's signature from its repository (none when there is none); from the cache when the
/// registry is down.
fn pull_signature(
    r: &OciRef,
    sha: &str,
    opts: &client::Options,
    cache: Option<&fetch::Cache>,
    provenance: &mut Provenance,
) -> Result<Option<Vec<u8>>, RegistryError> {
    let sig_ref = OciRef { tag: Some(signature_tag(sha)), digest: None, ..r.clone() };
    let key = sig_ref.to_string();
    match client::pull(&sig_ref, SIGNATURE_ARTIFACT_TYPE, DSSE_LAYER, MAX_SIGNATURE, opts) {
        Ok(p) => {
            if let Some(c) = cache {
                if let Ok(s) = c.put_blob(&p.bytes) {
                    let _ = c.put_url_entry(&key, None, &s, fetch::now_unix());
                }
            }
            Ok(Some(p.bytes))
        }
        Err(e) if e.kind == OciErrorKind::NotFound => Ok(None),
        Err(e) if is_down(&e) => {
            let got = cache.and_then(|c| fetch::cached(c, &key)).map(|c| c.0);
            if got.is_some() && provenance.from_cache.is_none() {
                provenance.from_cache = Some(format!("the signature from the cache: the registry was unreachable ({})", e.message));
            }
            Ok(got)
        }
        Err(e) => Err(from_oci(e)),
    }
}

/// The index reference of an `oci://HOST/PREFIX` registry.
fn index_ref(registry: &str) -> Result<OciRef, RegistryError> {
    OciRef::parse(&format!("{}:index", registry.trim_end_matches('/'))).map_err(|e| {
        RegistryError::new(RegistryErrorKind::Unreachable, format!("`{registry}` is not a usable OCI registry prefix (oci://HOST/PREFIX): {}", e.message))
    })
}

/// A version as an OCI tag (`+` is not allowed in tags).
fn version_tag(version: &str) -> String {
    version.replace('+', "_")
}

/// `id@version` through the registry's index artifact, pinned by the index; the document by manifest digest.
pub fn resolve_pinned(id: &str, version: &str, settings: &Settings) -> Result<Resolved, RegistryError> {
    let ir = index_ref(&settings.registry)?;
    let opts = options(settings);
    let cache = settings.cache.as_ref();
    let key = ir.to_string();
    let mut provenance = Provenance { kind: "oci", registry: Some(settings.registry.clone()), ..Default::default() };
    let named = |e: RegistryError| RegistryError { message: format!("{} (looked in the registry `{}`)", e.message, settings.registry), ..e };
    let index = match client::pull(&ir, INDEX_ARTIFACT_TYPE, INDEX_LAYER, MAX_INDEX, &opts) {
        Ok(p) => {
            let index = registry::parse_index(&p.bytes)?;
            if let Some(c) = cache {
                if let Ok(sha) = c.put_blob(&p.bytes) {
                    let _ = c.put_url_entry(&key, None, &sha, fetch::now_unix());
                }
            }
            index
        }
        Err(e) if is_down(&e) => {
            let Some((bytes, _, at)) = cache.and_then(|c| fetch::cached(c, &key)) else {
                return Err(named(RegistryError::new(
                    RegistryErrorKind::Unreachable,
                    format!("{} ({}), and no copy of its index is cached", e.message, e.kind),
                )));
            };
            let age = fetch::now_unix() - at;
            if age > settings.offline_max_age {
                return Err(named(RegistryError::new(
                    RegistryErrorKind::Unreachable,
                    format!("{} ({}); the cached index is {age} s old, more than the {} s allowed offline", e.message, e.kind, settings.offline_max_age),
                )));
            }
            provenance.from_cache = Some(format!("the registry was unreachable; its index as pulled {age} s before ({})", e.message));
            registry::parse_index(&bytes)?
        }
        Err(e) if e.kind == OciErrorKind::NotFound => {
            return Err(named(RegistryError::new(RegistryErrorKind::Unreachable, format!("the registry has no index ({})", e.message))))
        }
        Err(e) => return Err(named(from_oci(e))),
    };
    let Some(versions) = index["runbooks"].get(id) else {
        return Err(named(RegistryError::new(RegistryErrorKind::UnknownRunbook, format!("the registry has no runbook `{id}`"))));
    };
    let Some(entry) = versions.get(version) else {
        return Err(named(RegistryError::new(RegistryErrorKind::UnknownVersion, format!("the registry has no version `{version}` of `{id}`"))));
    };
    let pin = entry["sha256"].as_str().unwrap_or_default().to_string();
    let manifest = entry["manifest"]
        .as_str()
        .ok_or_else(|| RegistryError::new(RegistryErrorKind::InvalidIndex, format!("the index entry of `{id}@{version}` has no `manifest` digest")))?;
    let doc_ref = OciRef::parse(&format!("{}/{id}@{manifest}", settings.registry.trim_end_matches('/'))).map_err(from_oci)?;
    let bytes = match cache.and_then(|c| c.blob(&pin)) {
        Some(b) => b,
        None if provenance.from_cache.is_some() => {
            return Err(RegistryError::new(
                RegistryErrorKind::Unreachable,
                format!("the registry is unreachable and `{id}@{version}` (sha256 {pin}) is not in the cache"),
            ))
        }
        None => {
            let p = client::pull(&doc_ref, DOCUMENT_ARTIFACT_TYPE, DOCUMENT_LAYER, MAX_DOCUMENT, &opts).map_err(from_oci)?;
            if sha256_hex(&p.bytes) == pin {
                if let Some(c) = cache {
                    let _ = c.put_blob(&p.bytes);
                }
            }
            p.bytes
        }
    };
    let sha = sha256_hex(&bytes);
    if sha != pin {
        return Err(RegistryError::new(
            RegistryErrorKind::Tampered,
            format!("`{id}@{version}`: the document's sha256 is {sha}, the registry's index pins {pin}"),
        ));
    }
    let signature = if settings.require_signature.is_empty() { None } else { pull_signature(&doc_ref, &sha, &opts, cache, &mut provenance)? };
    Ok(Resolved {
        file_name: registry::file_name_for(&bytes).into(),
        bytes,
        sha256: sha,
        reference: format!("{id}@{version}"),
        pinned_sha256: Some(pin),
        trust: Trust::T2,
        signed_approvals: entry["approvals"] == "signed",
        provenance,
        signature,
        signature_where: format!("no `{}` in {}/{id}", signature_tag("<sha256>"), settings.registry),
    })
}

/// What a push did: the reference pushed and its manifest digest, and the signature's, when one was pushed.
#[derive(Clone, Debug)]
pub struct Pushed {
    pub reference: String,
    pub manifest_digest: String,
    pub sha256: String,
    pub signature_digest: Option<String>,
    pub id: Option<String>,
    pub version: Option<String>,
}

/// Pushes a document (and its DSSE envelope, when given) to `oci://HOST/REPO:TAG`.
pub fn push_document(bytes: &[u8], target: &str, signature: Option<&[u8]>, settings: &Settings) -> Result<Pushed, RegistryError> {
    let r = OciRef::parse(target).map_err(from_oci)?;
    if r.tag.is_none() || r.digest.is_some() {
        return Err(RegistryError::new(
            RegistryErrorKind::Unreachable,
            format!("`{target}`: push to a tag (oci://HOST/REPO:TAG); a digest is what a push produces"),
        ));
    }
    let (id, version) = registry::document_id(bytes)?;
    push_at(bytes, &r, signature, &options(settings), &id, &version)
}

fn push_at(bytes: &[u8], r: &OciRef, signature: Option<&[u8]>, opts: &client::Options, id: &str, version: &str) -> Result<Pushed, RegistryError> {
    let sha = sha256_hex(bytes);
    let mut annotations = BTreeMap::new();
    annotations.insert(ANNOTATION_TITLE.to_string(), registry::file_name_for(bytes).to_string());
    annotations.insert(ANNOTATION_ID.to_string(), id.to_string());
    annotations.insert(ANNOTATION_VERSION.to_string(), version.to_string());
    let artifact = client::Artifact { artifact_type: DOCUMENT_ARTIFACT_TYPE, layer_media_type: DOCUMENT_LAYER, bytes, annotations };
    let manifest_digest = client::push(r, &artifact, opts).map_err(from_oci)?;
    let signature_digest = match signature {
        Some(env) => {
            let sr = OciRef { tag: Some(signature_tag(&sha)), digest: None, ..r.clone() };
            let mut a = BTreeMap::new();
            a.insert(ANNOTATION_TITLE.to_string(), format!("{}{}", registry::file_name_for(bytes), registry::SIGNATURE_SUFFIX));
            let art = client::Artifact { artifact_type: SIGNATURE_ARTIFACT_TYPE, layer_media_type: DSSE_LAYER, bytes: env, annotations: a };
            Some(client::push(&sr, &art, opts).map_err(from_oci)?)
        }
        None => None,
    };
    Ok(Pushed {
        reference: r.with_digest(&manifest_digest).to_string(),
        manifest_digest,
        sha256: sha,
        signature_digest,
        id: Some(id.to_string()),
        version: Some(version.to_string()),
    })
}

/// Publishes a document to an OCI registry prefix: pushes it to `PREFIX/<id>:<version>` (with its
/// signature) and pins it in the index artifact `PREFIX:index`. A different document already pinned at
/// that id@version is `conflict` (nothing is pushed to the index then). Two publishers at once: the last
/// index push wins, so publish from one place (a CI job), as with a directory registry.
pub fn publish(bytes: &[u8], registry_prefix: &str, signature: Option<&[u8]>, settings: &Settings) -> Result<Pushed, RegistryError> {
    let (id, version) = registry::document_id(bytes)?;
    let ir = index_ref(registry_prefix)?;
    let opts = options(settings);
    let sha = sha256_hex(bytes);
    let mut index = match client::pull(&ir, INDEX_ARTIFACT_TYPE, INDEX_LAYER, MAX_INDEX, &opts) {
        Ok(p) => registry::parse_index(&p.bytes)?,
        Err(e) if e.kind == OciErrorKind::NotFound => json!({"schema": registry::INDEX_SCHEMA, "runbooks": {}}),
        Err(e) => return Err(from_oci(e)),
    };
    if let Some(e) = index["runbooks"].get(&id).and_then(|v| v.get(&version)) {
        if e["sha256"] != sha.as_str() {
            return Err(RegistryError::new(
                RegistryErrorKind::Conflict,
                format!("`{id}@{version}` is already pinned to a different document ({})", e["sha256"].as_str().unwrap_or("")),
            ));
        }
    }
    let tag = version_tag(&version);
    let doc_ref = OciRef::parse(&format!("{}/{id}:{tag}", registry_prefix.trim_end_matches('/'))).map_err(|e| {
        RegistryError::new(RegistryErrorKind::InvalidDocument, format!("`{id}@{version}` cannot name an OCI repository and tag: {}", e.message))
    })?;
    let pushed = push_at(bytes, &doc_ref, signature, &opts, &id, &version)?;
    let runbooks = index["runbooks"].as_object_mut().expect("checked by parse_index");
    let versions = runbooks.entry(id.clone()).or_insert_with(|| Value::Object(Map::new()));
    let mut entry = json!({"sha256": sha, "path": format!("{id}/{tag}"), "manifest": pushed.manifest_digest});
    if let Some(old) = versions.get(&version) {
        if old["approvals"] == "signed" {
            entry["approvals"] = json!("signed");
        }
    }
    versions.as_object_mut().expect("checked by parse_index").insert(version.clone(), entry);
    let mut text = serde_json::to_string_pretty(&index).map_err(|e| RegistryError::new(RegistryErrorKind::Io, e.to_string()))?;
    text.push('\n');
    let art = client::Artifact { artifact_type: INDEX_ARTIFACT_TYPE, layer_media_type: INDEX_LAYER, bytes: text.as_bytes(), annotations: BTreeMap::new() };
    client::push(&ir, &art, &opts).map_err(from_oci)?;
    Ok(pushed)
}

/// Pushes the policy component (its exact bytes) to `oci://HOST/REPO:TAG`, with its signature when given.
pub fn push_module(bytes: &[u8], target: &str, signature: Option<&[u8]>, settings: &Settings) -> Result<Pushed, RegistryError> {
    let r = OciRef::parse(target).map_err(from_oci)?;
    let opts = options(settings);
    let sha = sha256_hex(bytes);
    let mut annotations = BTreeMap::new();
    annotations.insert(ANNOTATION_TITLE.to_string(), "policy.wasm".to_string());
    let art = client::Artifact { artifact_type: MODULE_ARTIFACT_TYPE, layer_media_type: MODULE_LAYER, bytes, annotations };
    let manifest_digest = client::push(&r, &art, &opts).map_err(from_oci)?;
    let signature_digest = match signature {
        Some(env) => {
            let sr = OciRef { tag: Some(signature_tag(&sha)), digest: None, ..r.clone() };
            let art = client::Artifact { artifact_type: SIGNATURE_ARTIFACT_TYPE, layer_media_type: DSSE_LAYER, bytes: env, annotations: BTreeMap::new() };
            Some(client::push(&sr, &art, &opts).map_err(from_oci)?)
        }
        None => None,
    };
    Ok(Pushed { reference: r.with_digest(&manifest_digest).to_string(), manifest_digest, sha256: sha, signature_digest, id: None, version: None })
}

/// Pulls the component from `oci://...` (by digest, to get exactly the bytes that decide).
pub fn pull_module(reference: &str, settings: &Settings) -> Result<Vec<u8>, RegistryError> {
    let r = OciRef::parse(reference).map_err(from_oci)?;
    Ok(client::pull(&r, MODULE_ARTIFACT_TYPE, MODULE_LAYER, MAX_MODULE, &options(settings)).map_err(from_oci)?.bytes)
}

pub const EVIDENCE_ARTIFACT_TYPE: &str = "application/vnd.runbook-host.evidence.v1";
pub const EVIDENCE_LAYER: &str = "application/vnd.runbook-host.evidence.file.v1";
/// At most this many files and bytes in an evidence artifact pulled back.
pub const MAX_EVIDENCE_FILES: usize = 64;
pub const MAX_EVIDENCE_BYTES: usize = 1 << 30;

/// A file name an evidence artifact may carry: one plain component of the bundle's own names.
fn evidence_name_ok(n: &str) -> bool {
    !n.is_empty() && n.len() <= 64 && !n.starts_with('.') && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Pushes a (verified) bundle directory's files, a layer each (named by `org.opencontainers.image.title`), as
/// an artifact of type [`EVIDENCE_ARTIFACT_TYPE`] to `oci://HOST/REPO:TAG`. Subdirectories (the approval
/// channel) are not evidence and are left out.
pub fn push_evidence(dir: &std::path::Path, target: &str, settings: &Settings) -> Result<Pushed, RegistryError> {
    let r = OciRef::parse(target).map_err(from_oci)?;
    let io = |e: std::io::Error| RegistryError::new(RegistryErrorKind::Io, format!("`{}`: {e}", dir.display()));
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        let e = e.map_err(io)?;
        if !e.file_type().map_err(io)?.is_file() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        if !evidence_name_ok(&name) {
            continue;
        }
        files.push((name, std::fs::read(e.path()).map_err(io)?));
    }
    files.sort();
    let run: Value = files.iter().find(|(n, _)| n == "run.json").and_then(|(_, b)| serde_json::from_slice(b).ok()).unwrap_or(Value::Null);
    let layers: Vec<client::Layer> = files
        .iter()
        .map(|(n, b)| client::Layer { media_type: EVIDENCE_LAYER, bytes: b, annotations: BTreeMap::from([(ANNOTATION_TITLE.to_string(), n.clone())]) })
        .collect();
    let mut annotations = BTreeMap::new();
    if let Some(id) = run["run_id"].as_str() {
        annotations.insert("runbook-host.run.id".to_string(), id.to_string());
    }
    if let Some(o) = run["outcome"].as_str() {
        annotations.insert("runbook-host.run.outcome".to_string(), o.to_string());
    }
    let receipt = files.iter().find(|(n, _)| n == "receipt.json").map(|(_, b)| sha256_hex(b)).unwrap_or_default();
    let manifest_digest = client::push_layers(&r, EVIDENCE_ARTIFACT_TYPE, &layers, &annotations, &options(settings)).map_err(from_oci)?;
    Ok(Pushed {
        reference: r.with_digest(&manifest_digest).to_string(),
        manifest_digest,
        sha256: receipt,
        signature_digest: None,
        id: run["run_id"].as_str().map(str::to_string),
        version: None,
    })
}

/// Pulls an evidence artifact into `into` (an empty directory), each layer to the file its title names
/// (one plain name, no duplicates): what `verify oci://...` then verifies. Returns the manifest digest.
pub fn pull_evidence(reference: &str, into: &std::path::Path, settings: &Settings) -> Result<String, RegistryError> {
    let r = OciRef::parse(reference).map_err(from_oci)?;
    let p = client::pull_layers(&r, EVIDENCE_ARTIFACT_TYPE, EVIDENCE_LAYER, MAX_EVIDENCE_FILES, MAX_EVIDENCE_BYTES, &options(settings)).map_err(from_oci)?;
    let mut seen = std::collections::BTreeSet::new();
    for (ann, bytes) in &p.layers {
        let name = ann.get(ANNOTATION_TITLE).map(String::as_str).unwrap_or("");
        if !evidence_name_ok(name) || !seen.insert(name.to_string()) {
            return Err(RegistryError::new(
                RegistryErrorKind::Tampered,
                format!("{reference}: a layer is named {name:?}: not one plain file name, or named twice"),
            ));
        }
        std::fs::write(into.join(name), bytes).map_err(|e| RegistryError::new(RegistryErrorKind::Io, format!("`{name}`: {e}")))?;
    }
    Ok(p.manifest_digest)
}
