//! Pushing and pulling single-blob artifacts (runbooks and their bundles) to and from an OCI registry.
//!
//! runbook-host stores what it enforces in ordinary OCI registries, so this module wraps the async
//! `oci-client` crate behind a small blocking API for the host's sync code. A registry is not trusted:
//! every manifest and blob is re-hashed here, sizes are bounded before and during download, and the
//! artifact's type is checked, whatever `oci-client` already verified. Errors carry a stable `code`
//! for callers and a message that names the reference, for the person reading it.

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol, LayerDescriptor};
use oci_client::errors::{DigestError, OciDistributionError, OciEnvelope, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use reqwest::header::HeaderValue;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

/// Media type of the manifests this module writes and accepts.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of the OCI empty descriptor used as the config of an artifact.
pub const OCI_EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
const EMPTY_JSON: &[u8] = b"{}";
/// Registries commonly refuse manifests over 4 MiB; a bigger one is not ours and is not worth parsing.
const MAX_MANIFEST_BYTES: usize = 4 << 20;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const USER_AGENT: &str = concat!("runbook-host/", env!("CARGO_PKG_VERSION"));
const ENV_USERNAME: &str = "RUNBOOK_REGISTRY_USERNAME";
const ENV_PASSWORD: &str = "RUNBOOK_REGISTRY_PASSWORD";

/// A parsed `oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]` (or `oci+http://` for a loopback registry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciRef {
    /// `host[:port]`; an IPv6 host is written in brackets.
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:<64 lowercase hex>`.
    pub digest: Option<String>,
    /// Written `oci+http://`: plain HTTP, which is only ever allowed for a loopback registry.
    pub plain_http: bool,
}

/// What went wrong with a registry; [`OciErrorKind::code`] is its stable code.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OciErrorKind {
    /// `invalid-reference`: not an `oci://` reference this module accepts (or not one a push takes).
    InvalidReference,
    /// `auth-failed`: the registry refused the credentials, or half of them are set.
    AuthFailed,
    /// `not-found`: no such repository, tag, manifest or blob.
    NotFound,
    /// `digest-mismatch`: bytes that do not hash to the digest they were asked for or declared with.
    DigestMismatch,
    /// `wrong-type`: an artifact or layer of another type than asked for.
    WrongType,
    /// `too-large`: more bytes (or layers) than allowed.
    TooLarge,
    /// `tls-failed`: the TLS handshake failed, or the extra CA certificates are unusable.
    TlsFailed,
    /// `timeout`: the registry did not answer in time.
    Timeout,
    /// `unreachable`: no connection to the registry.
    Unreachable,
    /// `registry-error`: any other failure of the registry or of its answer.
    RegistryError,
}

impl OciErrorKind {
    pub fn code(&self) -> &'static str {
        match self {
            OciErrorKind::InvalidReference => "invalid-reference",
            OciErrorKind::AuthFailed => "auth-failed",
            OciErrorKind::NotFound => "not-found",
            OciErrorKind::DigestMismatch => "digest-mismatch",
            OciErrorKind::WrongType => "wrong-type",
            OciErrorKind::TooLarge => "too-large",
            OciErrorKind::TlsFailed => "tls-failed",
            OciErrorKind::Timeout => "timeout",
            OciErrorKind::Unreachable => "unreachable",
            OciErrorKind::RegistryError => "registry-error",
        }
    }
}

impl fmt::Display for OciErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A failure: its kind and a message that names the reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciError {
    pub kind: OciErrorKind,
    pub message: String,
}

impl OciError {
    fn new(kind: OciErrorKind, message: impl Into<String>) -> OciError {
        OciError { kind, message: message.into() }
    }
}

impl fmt::Display for OciError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl StdError for OciError {}

/// How to reach a registry. `Default` gives no extra CA, anonymous access and a 30 s per-request timeout.
#[derive(Clone)]
pub struct Options {
    /// PEM certificates (one or several per entry) trusted in addition to the system roots.
    pub extra_ca_pem: Vec<Vec<u8>>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Applies to connecting (TLS included) and to each read; zero means the default.
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options { extra_ca_pem: Vec::new(), username: None, password: None, timeout: DEFAULT_TIMEOUT }
    }
}

// Hand-written so that a logged Options never shows the password.
impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("extra_ca_pem", &format_args!("{} entries", self.extra_ca_pem.len()))
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Options {
    /// username/password from RUNBOOK_REGISTRY_USERNAME / RUNBOOK_REGISTRY_PASSWORD when set
    pub fn from_env() -> Options {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Options { username: var(ENV_USERNAME), password: var(ENV_PASSWORD), ..Options::default() }
    }
}

/// What `push` uploads: `bytes` become the single layer of an OCI image manifest.
pub struct Artifact<'a> {
    pub artifact_type: &'a str,
    pub layer_media_type: &'a str,
    pub bytes: &'a [u8],
    pub annotations: BTreeMap<String, String>,
}

/// What `pull` returns: the verified layer bytes and the manifest's annotations.
#[derive(Clone, Debug)]
pub struct Pulled {
    pub bytes: Vec<u8>,
    /// The manifest's exact bytes (they hash to `manifest_digest`): what a cache keeps to find the layer again
    /// by a pin, without trusting anything but the pin.
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
    pub layer_digest: String,
    pub annotations: BTreeMap<String, String>,
}

impl OciRef {
    /// Parses `oci://HOST[:PORT]/REPO[/MORE]:TAG`, `oci://HOST/REPO@sha256:HEX` or both (`REPO:TAG@sha256:HEX`).
    /// A tag or a digest is required: there is no implicit `latest`. `oci+http://` is accepted for loopback hosts only.
    pub fn parse(s: &str) -> Result<OciRef, OciError> {
        let bad = |why: &str| OciError::new(OciErrorKind::InvalidReference, format!("invalid OCI reference {s:?}: {why}"));
        let (plain_http, rest) = if let Some(rest) = s.strip_prefix("oci+http://") {
            (true, rest)
        } else if let Some(rest) = s.strip_prefix("oci://") {
            (false, rest)
        } else {
            return Err(bad("it must start with oci:// (or oci+http:// for a registry on this machine's loopback)"));
        };
        let (registry, path) = rest.split_once('/').ok_or_else(|| bad("no repository after the registry host"))?;
        let (name_and_tag, digest) = match path.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (path, None),
        };
        // A ':' after the last '/' starts the tag; a ':' before it would be in the host, already split off.
        let last_component = name_and_tag.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match name_and_tag[last_component..].find(':') {
            Some(i) => (&name_and_tag[..last_component + i], Some(&name_and_tag[last_component + i + 1..])),
            None => (name_and_tag, None),
        };
        let r = OciRef {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_string),
            plain_http,
        };
        r.check().map_err(|why| bad(&why))?;
        Ok(r)
    }

    /// The same reference pinned to manifest digest `d` (the tag is kept for display only).
    pub fn with_digest(&self, d: &str) -> OciRef {
        OciRef { digest: Some(d.to_string()), ..self.clone() }
    }

    /// Whether the registry host is 127.0.0.0/8, ::1 or localhost.
    pub fn is_loopback(&self) -> bool {
        split_host_port(&self.registry).is_ok_and(|(host, _)| crate::net::is_loopback_host(host))
    }

    /// Checks every part; fields are public, so operations re-check rather than trust `parse` ran.
    fn check(&self) -> Result<(), String> {
        check_registry(&self.registry)?;
        check_repository(&self.repository)?;
        if let Some(tag) = &self.tag {
            check_tag(tag)?;
        }
        if let Some(digest) = &self.digest {
            if !is_sha256_digest(digest) {
                return Err(format!("digest {digest:?} is not sha256:<64 lowercase hex digits>"));
            }
        }
        if self.tag.is_none() && self.digest.is_none() {
            return Err("no tag or digest; write REPO:TAG or REPO@sha256:HEX (there is no implicit :latest)".into());
        }
        if self.plain_http && !self.is_loopback() {
            return Err(format!(
                "oci+http:// (plain HTTP) is only allowed for a loopback registry (127.0.0.0/8, ::1, localhost), not {}; use oci:// (HTTPS)",
                self.registry
            ));
        }
        Ok(())
    }

    fn checked(&self) -> Result<(), OciError> {
        self.check().map_err(|why| OciError::new(OciErrorKind::InvalidReference, format!("invalid OCI reference {self}: {why}")))
    }

    /// The `oci-client` reference: by digest when there is one, so the registry cannot substitute content.
    fn client_ref(&self) -> Reference {
        match (&self.tag, &self.digest) {
            (_, Some(d)) => Reference::with_digest(self.registry.clone(), self.repository.clone(), d.clone()),
            (Some(t), None) => Reference::with_tag(self.registry.clone(), self.repository.clone(), t.clone()),
            (None, None) => unreachable!("checked() requires a tag or a digest"),
        }
    }
}

/// `oci://host/repo:tag@digest`; this is also what `to_string()` returns.
impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.plain_http { "oci+http" } else { "oci" };
        write!(f, "{scheme}://{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

fn split_host_port(registry: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = registry.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(|| format!("registry {registry:?} has an unclosed '['"))?;
        match after {
            "" => Ok((host, None)),
            _ => after.strip_prefix(':').map(|p| (host, Some(p))).ok_or_else(|| format!("registry {registry:?} is not [IPv6]:PORT")),
        }
    } else {
        match registry.rsplit_once(':') {
            Some((host, port)) => Ok((host, Some(port))),
            None => Ok((registry, None)),
        }
    }
}

fn check_registry(registry: &str) -> Result<(), String> {
    if registry.contains('@') {
        return Err(format!("registry {registry:?} holds credentials; give them in {ENV_USERNAME}/{ENV_PASSWORD} instead"));
    }
    let (host, port) = split_host_port(registry)?;
    if registry.starts_with('[') {
        host.parse::<std::net::Ipv6Addr>().map_err(|_| format!("registry host [{host}] is not an IPv6 address"))?;
    } else {
        let label_ok = |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') && !l.starts_with('-') && !l.ends_with('-');
        if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
            return Err(format!("registry host {host:?} is not a valid host name or IPv4 address"));
        }
    }
    if let Some(port) = port {
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || !matches!(port.parse::<u32>(), Ok(1..=65535)) {
            return Err(format!("registry port {port:?} is not a number from 1 to 65535"));
        }
    }
    Ok(())
}

/// The distribution spec's name grammar: lowercase components `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*` joined by '/'.
fn check_repository(repository: &str) -> Result<(), String> {
    if repository.is_empty() {
        return Err("the repository name is empty".into());
    }
    if repository.len() > 255 {
        return Err(format!("the repository name is {} characters long; at most 255 are allowed", repository.len()));
    }
    if repository.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(format!("repository {repository:?} has uppercase letters; OCI repository names are lowercase"));
    }
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    for component in repository.split('/') {
        let bytes = component.as_bytes();
        let mut ok = !bytes.is_empty() && alnum(bytes[0]) && alnum(bytes[bytes.len() - 1]);
        let mut i = 0;
        while ok && i < bytes.len() {
            let start = i;
            while i < bytes.len() && !alnum(bytes[i]) {
                i += 1;
            }
            let sep = &component[start..i];
            ok = sep.is_empty() || sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-');
            i += 1;
        }
        if !ok {
            return Err(format!(
                "repository {repository:?} has an invalid component {component:?} (lowercase letters and digits, separated by '.', '_', '__' or dashes)"
            ));
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), String> {
    let bytes = tag.as_bytes();
    let ok = (1..=128).contains(&bytes.len())
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes.iter().all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!("tag {tag:?} is not 1 to 128 of [A-Za-z0-9_.-], not starting with '.' or '-'"))
    }
}

fn is_sha256_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Pushes `bytes` as the single layer of an OCI image manifest (schemaVersion 2, mediaType application/vnd.oci.image.manifest.v1+json,
/// artifactType set, config = the OCI empty descriptor application/vnd.oci.empty.v1+json "{}"), tagged with the ref's tag. Returns the manifest digest "sha256:...".
pub fn push(reference: &OciRef, artifact: &Artifact, opts: &Options) -> Result<String, OciError> {
    let layer = Layer { media_type: artifact.layer_media_type, bytes: artifact.bytes, annotations: BTreeMap::new() };
    push_layers(reference, artifact.artifact_type, &[layer], &artifact.annotations, opts)
}

/// One layer of a multi-layer artifact (an evidence bundle: a file a layer, named by its
/// `org.opencontainers.image.title` annotation, as ORAS does).
pub struct Layer<'a> {
    pub media_type: &'a str,
    pub bytes: &'a [u8],
    pub annotations: BTreeMap<String, String>,
}

/// [`push`] with any number of layers, each with annotations of its own.
pub fn push_layers(
    reference: &OciRef,
    artifact_type: &str,
    layers: &[Layer],
    annotations: &BTreeMap<String, String>,
    opts: &Options,
) -> Result<String, OciError> {
    reference.checked()?;
    let Some(tag) = &reference.tag else {
        return Err(OciError::new(OciErrorKind::InvalidReference, format!("{reference}: a push needs a tag to publish under")));
    };
    if reference.digest.is_some() {
        return Err(OciError::new(OciErrorKind::InvalidReference, format!("{reference}: a push takes a tag only; the digest is the result of the push")));
    }
    run_blocking(reference, || async move {
        let (client, _auth) = connect(reference, opts, RegistryOperation::Push).await?;
        let image = Reference::with_tag(reference.registry.clone(), reference.repository.clone(), tag.clone());
        let fail = |doing: &str, e: OciDistributionError| classify(reference, doing, &e);

        let config_digest = sha256_digest(EMPTY_JSON);
        client.push_blob(&image, EMPTY_JSON, &config_digest).await.map_err(|e| fail("uploading the empty config blob", e))?;
        let mut descriptors = Vec::new();
        for layer in layers {
            let layer_digest = sha256_digest(layer.bytes);
            client.push_blob(&image, layer.bytes.to_vec(), &layer_digest).await.map_err(|e| fail("uploading a layer", e))?;
            let mut d = json!({ "mediaType": layer.media_type, "digest": layer_digest, "size": layer.bytes.len() });
            if !layer.annotations.is_empty() {
                d["annotations"] = json!(layer.annotations);
            }
            descriptors.push(d);
        }

        let mut manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "artifactType": artifact_type,
            "config": { "mediaType": OCI_EMPTY_MEDIA_TYPE, "digest": config_digest, "size": EMPTY_JSON.len() },
            "layers": descriptors,
        });
        if !annotations.is_empty() {
            manifest["annotations"] = json!(annotations);
        }
        // Serialized once here so that the digest returned is the hash of exactly the bytes the registry got.
        let body = serde_json::to_vec(&manifest).expect("a JSON value always serializes");
        let digest = sha256_digest(&body);
        let location =
            client.push_manifest_raw(&image, body, HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE)).await.map_err(|e| fail("uploading the manifest", e))?;
        if let Some((_, stored)) = location.rsplit_once("/manifests/") {
            if stored.starts_with("sha256:") && stored != digest {
                return Err(OciError::new(
                    OciErrorKind::DigestMismatch,
                    format!("{reference}: the registry stored the manifest as {stored}, but the bytes sent hash to {digest}"),
                ));
            }
        }
        Ok(digest)
    })
}

/// What [`pull_layers`] returns: each layer's annotations and verified bytes, in the manifest's order.
#[derive(Clone, Debug)]
pub struct PulledLayers {
    pub manifest_digest: String,
    pub layers: Vec<(BTreeMap<String, String>, Vec<u8>)>,
    pub annotations: BTreeMap<String, String>,
}

/// Pulls a multi-layer artifact of `artifact_type` whose layers are all of `layer_media_type`, at most
/// `max_layers` of them and `max_total` bytes in all (declared sizes checked before any download); each
/// layer's bytes must hash to its digest.
pub fn pull_layers(
    reference: &OciRef,
    artifact_type: &str,
    layer_media_type: &str,
    max_layers: usize,
    max_total: usize,
    opts: &Options,
) -> Result<PulledLayers, OciError> {
    reference.checked()?;
    run_blocking(reference, || async move {
        let (client, auth) = connect(reference, opts, RegistryOperation::Pull).await?;
        let image = reference.client_ref();
        let err = |kind: OciErrorKind, what: String| OciError::new(kind, format!("{reference}: {what}"));
        let (body, manifest_digest) = fetch_manifest(&client, &auth, reference).await?;
        let m: Value = serde_json::from_slice(&body).map_err(|e| err(OciErrorKind::RegistryError, format!("the manifest is not valid JSON: {e}")))?;
        let found_type = m["artifactType"].as_str().or(m["config"]["mediaType"].as_str()).unwrap_or("(none)");
        if m["schemaVersion"].as_u64() != Some(2) || found_type != artifact_type {
            return Err(err(OciErrorKind::WrongType, format!("it holds an artifact of type {found_type}, not {artifact_type}")));
        }
        let layers = m["layers"].as_array().cloned().unwrap_or_default();
        if layers.is_empty() || layers.len() > max_layers {
            return Err(err(OciErrorKind::TooLarge, format!("the manifest has {} layers; between 1 and {max_layers} are accepted", layers.len())));
        }
        let mut infos = Vec::new();
        let mut total: u64 = 0;
        for l in &layers {
            let media = l["mediaType"].as_str().unwrap_or("(none)");
            if media != layer_media_type {
                return Err(err(OciErrorKind::WrongType, format!("a layer is of media type {media}, not {layer_media_type}")));
            }
            let digest = l["digest"].as_str().filter(|d| is_sha256_digest(d));
            let (Some(digest), Some(size)) = (digest, l["size"].as_u64()) else {
                return Err(err(OciErrorKind::RegistryError, format!("a layer has a malformed digest or size: {l}")));
            };
            total = total.saturating_add(size);
            if total > max_total as u64 {
                return Err(err(OciErrorKind::TooLarge, format!("the layers declare more than the {max_total} bytes allowed")));
            }
            let ann: BTreeMap<String, String> =
                l["annotations"].as_object().map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()).unwrap_or_default();
            infos.push((LayerInfo { digest: digest.to_string(), size }, ann));
        }
        let mut out = Vec::new();
        for (layer, ann) in infos {
            let descriptor = LayerDescriptor { digest: &layer.digest, urls: &None };
            let mut sink = BoundedSink { buf: Vec::with_capacity(layer.size.min(1 << 20) as usize), limit: layer.size as usize, overflowed: false };
            let fetched = client.pull_blob(&image, &descriptor, &mut sink).await;
            if sink.overflowed {
                return Err(err(OciErrorKind::DigestMismatch, format!("the registry sent more than a layer's declared {} bytes", layer.size)));
            }
            fetched.map_err(|e| classify(reference, "downloading a layer", &e))?;
            let got = sha256_digest(&sink.buf);
            if sink.buf.len() as u64 != layer.size || got != layer.digest {
                return Err(err(
                    OciErrorKind::DigestMismatch,
                    format!("a layer's {} bytes hash to {got}, not to its declared {}", sink.buf.len(), layer.digest),
                ));
            }
            out.push((ann, sink.buf));
        }
        let annotations =
            m["annotations"].as_object().map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()).unwrap_or_default();
        Ok(PulledLayers { manifest_digest, layers: out, annotations })
    })
}

/// Fetches a manifest and checks it: bounded in size, hashing to the digest asked for (when the reference
/// has one) and to the one the registry advertised. Returns its bytes and their digest.
async fn fetch_manifest(client: &Client, auth: &RegistryAuth, reference: &OciRef) -> Result<(Vec<u8>, String), OciError> {
    let err = |kind: OciErrorKind, what: String| OciError::new(kind, format!("{reference}: {what}"));
    // oci-client reads the whole manifest body; only a size check after the fact is possible here.
    let (body, advertised) = client
        .pull_manifest_raw(&reference.client_ref(), auth, &[OCI_MANIFEST_MEDIA_TYPE])
        .await
        .map_err(|e| classify(reference, "fetching the manifest", &e))?;
    if body.len() > MAX_MANIFEST_BYTES {
        return Err(err(OciErrorKind::TooLarge, format!("the manifest is {} bytes, more than the {MAX_MANIFEST_BYTES} accepted", body.len())));
    }
    let manifest_digest = sha256_digest(&body);
    if let Some(wanted) = &reference.digest {
        if *wanted != manifest_digest {
            return Err(err(OciErrorKind::DigestMismatch, format!("the manifest's bytes hash to {manifest_digest}, not to the digest asked for")));
        }
    }
    if advertised.starts_with("sha256:") && advertised != manifest_digest {
        return Err(err(OciErrorKind::DigestMismatch, format!("the registry advertised manifest {advertised}, but its bytes hash to {manifest_digest}")));
    }
    Ok((body.to_vec(), manifest_digest))
}

/// Pulls the manifest (by digest when the ref has one: its bytes must hash to it, else digest-mismatch), requires exactly one layer of `layer_media_type`
/// and artifactType (or config mediaType) == artifact_type (else wrong-type), refuses a layer whose declared size exceeds max_bytes (too-large) before
/// downloading, downloads the blob bounded by max_bytes and checks its sha256 against the layer digest (digest-mismatch).
pub fn pull(reference: &OciRef, artifact_type: &str, layer_media_type: &str, max_bytes: usize, opts: &Options) -> Result<Pulled, OciError> {
    reference.checked()?;
    run_blocking(reference, || async move {
        let (client, auth) = connect(reference, opts, RegistryOperation::Pull).await?;
        let image = reference.client_ref();
        let err = |kind: OciErrorKind, what: String| OciError::new(kind, format!("{reference}: {what}"));

        let (body, manifest_digest) = fetch_manifest(&client, &auth, reference).await?;

        let m: Value = serde_json::from_slice(&body).map_err(|e| err(OciErrorKind::RegistryError, format!("the manifest is not valid JSON: {e}")))?;
        let layer = check_manifest(&m, artifact_type, layer_media_type).map_err(|(kind, what)| err(kind, what))?;
        if layer.size > max_bytes as u64 {
            return Err(err(OciErrorKind::TooLarge, format!("the layer is {} bytes, more than the {max_bytes} allowed", layer.size)));
        }

        // The descriptor is rebuilt without the manifest's `urls`, so the blob only ever comes from this registry.
        let descriptor = LayerDescriptor { digest: &layer.digest, urls: &None };
        let mut sink = BoundedSink { buf: Vec::with_capacity(layer.size.min(1 << 20) as usize), limit: layer.size as usize, overflowed: false };
        let fetched = client.pull_blob(&image, &descriptor, &mut sink).await;
        if sink.overflowed {
            return Err(err(OciErrorKind::DigestMismatch, format!("the registry sent more than the layer's declared {} bytes", layer.size)));
        }
        fetched.map_err(|e| classify(reference, "downloading the layer", &e))?;
        // Checked here too: oci-client's own check is skipped on some paths (e.g. partial responses).
        let got = sha256_digest(&sink.buf);
        if sink.buf.len() as u64 != layer.size || got != layer.digest {
            return Err(err(
                OciErrorKind::DigestMismatch,
                format!("the layer's {} bytes hash to {got}, not to its declared {} ({} bytes)", sink.buf.len(), layer.digest, layer.size),
            ));
        }

        let annotations =
            m["annotations"].as_object().map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()).unwrap_or_default();
        Ok(Pulled { bytes: sink.buf, manifest: body, manifest_digest, layer_digest: layer.digest, annotations })
    })
}

/// Resolves a tag to its current manifest digest (HEAD or GET of the manifest).
pub fn resolve_digest(reference: &OciRef, opts: &Options) -> Result<String, OciError> {
    reference.checked()?;
    run_blocking(reference, || async move {
        let (client, auth) = connect(reference, opts, RegistryOperation::Pull).await?;
        let digest =
            client.fetch_manifest_digest(&reference.client_ref(), &auth).await.map_err(|e| classify(reference, "resolving the manifest digest", &e))?;
        if !is_sha256_digest(&digest) {
            return Err(OciError::new(OciErrorKind::RegistryError, format!("{reference}: the registry answered a digest that is not sha256: {digest:?}")));
        }
        if let Some(wanted) = &reference.digest {
            if *wanted != digest {
                return Err(OciError::new(OciErrorKind::DigestMismatch, format!("{reference}: the registry resolved it to {digest}")));
            }
        }
        Ok(digest)
    })
}

pub struct LayerInfo {
    pub digest: String,
    pub size: u64,
}

/// The shape checks of `pull`: one OCI image manifest holding exactly one layer of the expected types.
pub fn check_manifest(m: &Value, artifact_type: &str, layer_media_type: &str) -> Result<LayerInfo, (OciErrorKind, String)> {
    if m["schemaVersion"].as_u64() != Some(2) {
        return Err((OciErrorKind::WrongType, format!("the manifest has schemaVersion {}, not 2", m["schemaVersion"])));
    }
    // mediaType is only a SHOULD in the image spec; when present it must be an image manifest (not an index).
    if let Some(media_type) = m["mediaType"].as_str() {
        if media_type != OCI_MANIFEST_MEDIA_TYPE {
            return Err((OciErrorKind::WrongType, format!("the manifest is a {media_type}, not an {OCI_MANIFEST_MEDIA_TYPE}")));
        }
    }
    let found_type = m["artifactType"].as_str().or(m["config"]["mediaType"].as_str()).unwrap_or("(none)");
    if found_type != artifact_type {
        return Err((OciErrorKind::WrongType, format!("it holds an artifact of type {found_type}, not {artifact_type}")));
    }
    let layers = m["layers"].as_array().map(Vec::as_slice).unwrap_or_default();
    let [layer] = layers else {
        return Err((OciErrorKind::WrongType, format!("the manifest has {} layers; a {artifact_type} has exactly one", layers.len())));
    };
    let found_media = layer["mediaType"].as_str().unwrap_or("(none)");
    if found_media != layer_media_type {
        return Err((OciErrorKind::WrongType, format!("its layer is of media type {found_media}, not {layer_media_type}")));
    }
    let digest = layer["digest"].as_str().filter(|d| is_sha256_digest(d));
    let (Some(digest), Some(size)) = (digest, layer["size"].as_u64()) else {
        return Err((OciErrorKind::RegistryError, format!("the manifest's layer has a malformed digest or size: {layer}")));
    };
    Ok(LayerInfo { digest: digest.to_string(), size })
}

/// Collects a blob in memory and refuses to grow past `limit`, so a registry cannot make us buffer more than declared.
struct BoundedSink {
    buf: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl tokio::io::AsyncWrite for BoundedSink {
    fn poll_write(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if self.buf.len() + data.len() > self.limit {
            self.overflowed = true;
            return Poll::Ready(Err(io::Error::other("blob longer than its declared size")));
        }
        self.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Runs the async work on a fresh current-thread runtime in a scoped thread: this works whether or not
/// the caller is already inside a tokio runtime (where `block_on` on the caller's thread would panic).
fn run_blocking<T, F, Fut>(reference: &OciRef, make: F) -> Result<T, OciError>
where
    T: Send,
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = Result<T, OciError>>,
{
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| OciError::new(OciErrorKind::RegistryError, format!("{reference}: cannot start the async runtime: {e}")))?;
            runtime.block_on(make())
        });
        worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Builds the client and makes the first request (GET /v2/), so that transport and TLS failures surface
/// here with their real cause; oci-client would otherwise swallow them inside its token lookup.
async fn connect(reference: &OciRef, opts: &Options, op: RegistryOperation) -> Result<(Client, RegistryAuth), OciError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut extra_roots = Vec::new();
    for (i, pem) in opts.extra_ca_pem.iter().enumerate() {
        let certs = split_pem_certificates(pem);
        if certs.is_empty() {
            return Err(OciError::new(OciErrorKind::TlsFailed, format!("{reference}: extra CA entry #{i} holds no PEM certificate")));
        }
        extra_roots.extend(certs.into_iter().map(|data| Certificate { encoding: CertificateEncoding::Pem, data }));
    }
    let timeout = if opts.timeout.is_zero() { DEFAULT_TIMEOUT } else { opts.timeout };
    let config = ClientConfig {
        protocol: if reference.plain_http { ClientProtocol::HttpsExcept(vec![reference.registry.clone()]) } else { ClientProtocol::Https },
        extra_root_certificates: extra_roots,
        platform_resolver: None,
        read_timeout: Some(timeout),
        connect_timeout: Some(timeout),
        user_agent: USER_AGENT,
        ..ClientConfig::default()
    };
    // Not Client::new: on a bad config (e.g. an unparsable CA) it logs and silently falls back to defaults.
    let client = Client::try_from(config).map_err(|e| {
        OciError::new(OciErrorKind::TlsFailed, format!("{reference}: cannot set up the HTTPS client with the extra CA certificates: {}", describe(&e)))
    })?;

    let auth = match (&opts.username, &opts.password) {
        (Some(user), Some(password)) => RegistryAuth::Basic(user.clone(), password.clone()),
        (None, None) => RegistryAuth::Anonymous,
        (Some(_), None) => {
            return Err(OciError::new(OciErrorKind::AuthFailed, format!("{reference}: a registry username is set but no password ({ENV_PASSWORD})")));
        }
        (None, Some(_)) => {
            return Err(OciError::new(OciErrorKind::AuthFailed, format!("{reference}: a registry password is set but no username ({ENV_USERNAME})")));
        }
    };
    client.auth(&reference.client_ref(), &auth, op).await.map_err(|e| classify(reference, "contacting the registry", &e))?;
    Ok((client, auth))
}

/// Splits PEM text into single-certificate PEM blocks (oci-client parses only one certificate per entry).
fn split_pem_certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let text = String::from_utf8_lossy(pem);
    let mut out = Vec::new();
    let mut rest = &*text;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else { break };
        let end = start + len + END.len();
        out.push(format!("{}\n", &rest[start..end]).into_bytes());
        rest = &rest[end..];
    }
    out
}

/// Maps an oci-client error to a code and a message naming the reference and what was being done.
fn classify(reference: &OciRef, doing: &str, e: &OciDistributionError) -> OciError {
    use OciDistributionError as E;
    let (kind, detail) = match e {
        E::AuthenticationFailure(m) => (OciErrorKind::AuthFailed, format!("the registry refused the credentials: {}", shorten(m))),
        E::UnauthorizedError { url } => (OciErrorKind::AuthFailed, format!("HTTP 401 Unauthorized from {url} (check {ENV_USERNAME}/{ENV_PASSWORD})")),
        E::ServerError { code, url, message } => from_status(reference, *code, url, message),
        E::RegistryError { envelope, url } => from_envelope(envelope, url),
        E::DigestError(DigestError::VerificationError { expected, actual }) => {
            (OciErrorKind::DigestMismatch, format!("content does not match its digest: expected {expected}, got {actual}"))
        }
        E::RequestError(inner) => from_transport(inner),
        E::IoError(inner) => from_transport(inner),
        other => (OciErrorKind::RegistryError, describe(other)),
    };
    OciError::new(kind, format!("{reference}: {doing}: {detail}"))
}

fn from_status(reference: &OciRef, code: u16, url: &str, message: &str) -> (OciErrorKind, String) {
    // oci-client leaves some error bodies unparsed; the registry's own error codes read better than raw JSON.
    let said = serde_json::from_str::<OciEnvelope>(message).map(|envelope| envelope_text(&envelope)).unwrap_or_else(|_| shorten(message));
    let detail = format!("HTTP {code} from {url}: {said}");
    match code {
        401 | 403 => (OciErrorKind::AuthFailed, format!("{detail} (check {ENV_USERNAME}/{ENV_PASSWORD})")),
        404 => (OciErrorKind::NotFound, detail),
        // Go's TLS servers answer a plain-HTTP request this way.
        400 if reference.plain_http && message.contains("HTTPS") => {
            (OciErrorKind::RegistryError, format!("{detail} (the registry speaks HTTPS: write oci:// instead of oci+http://)"))
        }
        _ => (OciErrorKind::RegistryError, detail),
    }
}

fn from_envelope(envelope: &OciEnvelope, url: &str) -> (OciErrorKind, String) {
    let kind = envelope.errors.iter().find_map(|e| match e.code {
        OciErrorCode::Unauthorized | OciErrorCode::Denied => Some(OciErrorKind::AuthFailed),
        OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown | OciErrorCode::BlobUnknown | OciErrorCode::NotFound => Some(OciErrorKind::NotFound),
        OciErrorCode::DigestInvalid => Some(OciErrorKind::DigestMismatch),
        OciErrorCode::SizeInvalid => Some(OciErrorKind::TooLarge),
        _ => None,
    });
    (kind.unwrap_or(OciErrorKind::RegistryError), format!("the registry answered {} (for {url})", envelope_text(envelope)))
}

/// `CODE: message; CODE: message`, with the spec's spelling of the codes.
fn envelope_text(envelope: &OciEnvelope) -> String {
    let said: Vec<String> = envelope
        .errors
        .iter()
        .map(|e| {
            let name = serde_json::to_value(&e.code).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| format!("{:?}", e.code));
            format!("{name}: {}", e.message)
        })
        .collect();
    shorten(&said.join("; "))
}

/// Classifies a transport failure by walking its causes, TLS first (a failed handshake is also a "connect" error).
fn from_transport(e: &(dyn StdError + 'static)) -> (OciErrorKind, String) {
    let causes = causes(e);
    let text = describe(e);
    let any = |f: &dyn Fn(&(dyn StdError + 'static)) -> bool| causes.iter().any(|c| f(*c));
    let io_kind = |c: &(dyn StdError + 'static), kinds: &[io::ErrorKind]| c.downcast_ref::<io::Error>().is_some_and(|io| kinds.contains(&io.kind()));
    let reqwest_is = |c: &(dyn StdError + 'static), f: fn(&reqwest::Error) -> bool| c.downcast_ref::<reqwest::Error>().is_some_and(f);

    if any(&|c| c.downcast_ref::<rustls::Error>().is_some()) || text.contains("invalid peer certificate") || text.contains("UnknownIssuer") {
        (OciErrorKind::TlsFailed, format!("TLS failed (is the registry's CA among the extra CA certificates?): {text}"))
    } else if any(&|c| io_kind(c, &[io::ErrorKind::TimedOut]) || reqwest_is(c, reqwest::Error::is_timeout)) {
        (OciErrorKind::Timeout, format!("the registry did not answer in time: {text}"))
    } else if any(&|c| {
        io_kind(c, &[io::ErrorKind::ConnectionRefused, io::ErrorKind::AddrNotAvailable, io::ErrorKind::HostUnreachable, io::ErrorKind::NetworkUnreachable])
            || reqwest_is(c, reqwest::Error::is_connect)
    }) {
        (OciErrorKind::Unreachable, format!("cannot connect to the registry: {text}"))
    } else {
        (OciErrorKind::RegistryError, text)
    }
}

/// The error and its causes; an io::Error's wrapped error is visited itself, since io::Error::source() skips it.
fn causes<'a>(e: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut out = Vec::new();
    let mut next = Some(e);
    while let Some(cur) = next.take() {
        out.push(cur);
        next = match cur.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => cur.source(),
        };
        if out.len() > 16 {
            break;
        }
    }
    out
}

/// One line from the error chain, skipping causes whose text the previous one already shows.
fn describe(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in causes(e) {
        let text = cause.to_string();
        if !parts.last().is_some_and(|prev| prev.contains(&text)) {
            parts.push(text);
        }
    }
    shorten(&parts.join(": "))
}

fn shorten(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind's code (messages and the registry errors made of them name it): a renamed code fails here.
    #[test]
    fn kind_codes() {
        use OciErrorKind::*;
        let table = [
            (InvalidReference, "invalid-reference"),
            (AuthFailed, "auth-failed"),
            (NotFound, "not-found"),
            (DigestMismatch, "digest-mismatch"),
            (WrongType, "wrong-type"),
            (TooLarge, "too-large"),
            (TlsFailed, "tls-failed"),
            (Timeout, "timeout"),
            (Unreachable, "unreachable"),
            (RegistryError, "registry-error"),
        ];
        for (kind, code) in table {
            assert_eq!(kind.code(), code);
            assert_eq!(OciError::new(kind, "m").to_string(), format!("{code}: m"));
        }
    }
}
