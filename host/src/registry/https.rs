//! Fetching registry files over HTTPS (docs/spec/registry.md; issue "Past one machine"): reqwest on rustls (ring), the
//! system's roots plus the CAs a user names, and a content-addressed cache so that pinned bytes survive a
//! registry that is down.
//!
//! Rules a registry cannot talk its way around:
//! - `https://` always; plain `http://` only to a loopback address (a test server, a local mirror), refused
//!   anywhere else before a connection is made;
//! - at most [`MAX_REDIRECTS`] redirects, never from `https` down to `http`, never to a non-loopback `http`;
//! - a connect and a whole-request time-out; every body read is bounded, and a body past the bound is an
//!   error, never a truncated success;
//! - the cache is keyed by sha256 and every entry is hashed again when read: a cache entry that does not hash
//!   to its name is ignored (and rewritten on the next fetch). Entries are written to a temporary file,
//!   fsynced and renamed, so nothing half-written is ever read as an entry. A cache path another user could
//!   write is neither read nor written ([`crate::private`]);
//! - no request is conditional: an index is trusted because the registry sent it now, never because a cached
//!   one kept its ETag (issue 28, F5). A cached index stands in only while the registry cannot be reached.
//!
//! The API is blocking: callers are sync code, some of them inside a tokio runtime already, so each request
//! runs on a current-thread runtime in a scoped thread of its own.

use crate::files::sha256_hex;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const MAX_REDIRECTS: usize = 5;
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a fetch failed; [`FetchErrorKind::code`] is its stable code.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchErrorKind {
    /// `refused`: a URL the rules forbid (or no client could be built for it).
    Refused,
    /// `unreachable`: no connection, DNS, time-out, TLS.
    Unreachable,
    /// `not-found`: 404.
    NotFound,
    /// `status`: another answer than 200 or 304.
    Status,
    /// `too-large`: more bytes than allowed.
    TooLarge,
}

impl FetchErrorKind {
    pub fn code(&self) -> &'static str {
        match self {
            FetchErrorKind::Refused => "refused",
            FetchErrorKind::Unreachable => "unreachable",
            FetchErrorKind::NotFound => "not-found",
            FetchErrorKind::Status => "status",
            FetchErrorKind::TooLarge => "too-large",
        }
    }
}

impl std::fmt::Display for FetchErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// Why a fetch failed: its kind and a message that names the URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchError {
    pub kind: FetchErrorKind,
    pub message: String,
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn err(kind: FetchErrorKind, message: impl Into<String>) -> FetchError {
    FetchError { kind, message: message.into() }
}

/// [`crate::net::check_url`], as a registry error.
pub fn check_url(url: &str) -> Result<reqwest::Url, FetchError> {
    crate::net::check_url(url).map_err(|e| err(FetchErrorKind::Refused, e.0))
}

/// The HTTP client for registries: [`crate::net::http_client`] with redirects checked and never downgraded.
pub fn client(extra_ca_pem: &[Vec<u8>]) -> Result<reqwest::Client, FetchError> {
    use crate::net::{http_client, Redirects};
    http_client(extra_ca_pem, Redirects::Checked(MAX_REDIRECTS), CONNECT_TIMEOUT, Some(REQUEST_TIMEOUT)).map_err(|e| err(FetchErrorKind::Refused, e))
}

/// Runs a future to completion on a runtime of its own, whether or not the caller is inside one.
pub fn block_on<T: Send>(f: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime starts").block_on(f))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// An error with its causes: reqwest and rustls put the reason (an unknown issuer, a refused connection) in
/// a source.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// What a GET answered: the body (at most `max` bytes) and the ETag, when the server sent one.
pub struct Got(pub Vec<u8>, pub Option<String>);

/// GETs `url` (checked by [`check_url`]); a body past `max` bytes is `too-large`. Never conditional: a 304
/// would bless whatever the cache holds under the URL, and the cache is not the registry (issue 28, F5: a
/// planted index kept the registry's ETag and was run as pinned).
pub fn get(client: &reqwest::Client, url: &str, max: usize) -> Result<Got, FetchError> {
    check_url(url)?;
    block_on(async {
        let mut resp = client.get(url).send().await.map_err(|e| err(FetchErrorKind::Unreachable, format!("`{url}`: {}", chain(&e))))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(err(FetchErrorKind::NotFound, format!("`{url}` answered {status}")));
        }
        if status != reqwest::StatusCode::OK {
            return Err(err(FetchErrorKind::Status, format!("`{url}` answered {status}")));
        }
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(err(FetchErrorKind::TooLarge, format!("`{url}` is larger than {max} bytes")));
        }
        let tag = resp.headers().get(reqwest::header::ETAG).and_then(|v| v.to_str().ok()).map(str::to_string);
        let mut body = Vec::new();
        while let Some(c) = resp.chunk().await.map_err(|e| err(FetchErrorKind::Unreachable, format!("`{url}`: {}", chain(&e))))? {
            if body.len() + c.len() > max {
                return Err(err(FetchErrorKind::TooLarge, format!("`{url}` is larger than {max} bytes")));
            }
            body.extend_from_slice(&c);
        }
        Ok(Got(body, tag))
    })
}

// ---------------------------------------------------------------------------------------------------
// The cache.

/// A content-addressed cache: `blobs/sha256/<hex>` holds exact bytes, `urls/<sha256 of the URL>.json`
/// remembers what a URL last answered (`{"url","etag","sha256","fetched_at"}`, `fetched_at` in Unix seconds).
#[derive(Clone, Debug)]
pub struct Cache {
    pub root: PathBuf,
}

impl Cache {
    /// `$RUNBOOK_HOST_CACHE`, else `$XDG_CACHE_HOME/runbook-host`, else `~/.cache/runbook-host`.
    pub fn default_location() -> Option<Cache> {
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let root = env("RUNBOOK_HOST_CACHE")
            .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("runbook-host")))
            .or_else(|| env("HOME").map(|p| p.join(".cache").join("runbook-host")))?;
        Some(Cache { root })
    }

    fn blob_path(&self, sha256: &str) -> Option<PathBuf> {
        let ok = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| self.root.join("blobs").join("sha256").join(sha256))
    }

    /// The bytes stored under `sha256`, only when they still hash to it.
    pub fn blob(&self, sha256: &str) -> Option<Vec<u8>> {
        let b = read_own(&self.blob_path(sha256)?, crate::registry::MAX_INDEX as u64)?;
        (sha256_hex(&b) == sha256).then_some(b)
    }

    /// Stores `bytes` under their sha256 (temporary file, fsync, rename). Errors are the caller's to
    /// ignore: a cache that cannot be written costs a later fetch, never a run.
    pub fn put_blob(&self, bytes: &[u8]) -> std::io::Result<String> {
        let sha = sha256_hex(bytes);
        let path = self.blob_path(&sha).expect("a sha256 hex is a valid blob name");
        write_file_atomic(&path, bytes)?;
        Ok(sha)
    }

    fn url_path(&self, url: &str) -> PathBuf {
        self.root.join("urls").join(format!("{}.json", sha256_hex(url.as_bytes())))
    }

    /// What `url` last answered: (etag, sha256, fetched_at).
    pub fn url_entry(&self, url: &str) -> Option<(Option<String>, String, i64)> {
        let v: Value = serde_json::from_slice(&read_own(&self.url_path(url), crate::files::MAX_SMALL_FILE_BYTES)?).ok()?;
        if v["url"] != url {
            return None;
        }
        Some((v["etag"].as_str().map(str::to_string), v["sha256"].as_str()?.to_string(), v["fetched_at"].as_i64()?))
    }

    pub fn put_url_entry(&self, url: &str, etag: Option<&str>, sha256: &str, fetched_at: i64) -> std::io::Result<()> {
        let v = json!({"url": url, "etag": etag, "sha256": sha256, "fetched_at": fetched_at});
        write_file_atomic(&self.url_path(url), format!("{v}\n").as_bytes())
    }
}

/// A cache file, only when it and every directory above it are this user's own ([`crate::private`]): a
/// cache another user can write is no cache (issue 28, F5).
fn read_own(path: &Path, max: u64) -> Option<Vec<u8>> {
    crate::private::check_dir(path.parent()?).ok()?;
    crate::private::read_own(path, max).ok()
}

fn write_file_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path.parent().expect("cache paths have a parent");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    crate::private::check_dir(dir).map_err(|m| std::io::Error::new(std::io::ErrorKind::PermissionDenied, m))?;
    crate::files::write_atomic_path(path, bytes, Some(0o600))
}

/// Unix seconds now, from the one clock (the host reads the clock; the module never does).
pub fn now_unix() -> i64 {
    (crate::clock::now_ms() / 1000) as i64
}

/// A cached URL's body, when its entry and blob are both present and whole: (bytes, etag, fetched_at).
pub fn cached(cache: &Cache, url: &str) -> Option<(Vec<u8>, Option<String>, i64)> {
    let (etag, sha, at) = cache.url_entry(url)?;
    Some((cache.blob(&sha)?, etag, at))
}

/// Whether a fetch error means the registry could not be reached at all (as opposed to answering badly),
/// the one case in which cached bytes may stand in.
pub fn is_down(e: &FetchError) -> bool {
    e.kind == FetchErrorKind::Unreachable
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind's code: a renamed code fails here, not silently in a consumer.
    #[test]
    fn kind_codes() {
        use FetchErrorKind::*;
        for (kind, code) in [(Refused, "refused"), (Unreachable, "unreachable"), (NotFound, "not-found"), (Status, "status"), (TooLarge, "too-large")] {
            assert_eq!(kind.code(), code);
            assert_eq!(kind.to_string(), code);
        }
    }

    #[test]
    fn transport_rules() {
        assert!(check_url("https://registry.example/x/").is_ok());
        assert!(check_url("http://127.0.0.1:8080/x").is_ok());
        assert!(check_url("http://[::1]:8080/x").is_ok());
        assert!(check_url("http://localhost/x").is_ok());
        assert_eq!(check_url("http://registry.example/x").unwrap_err().kind, FetchErrorKind::Refused);
        assert_eq!(check_url("http://10.0.0.1/x").unwrap_err().kind, FetchErrorKind::Refused);
        assert_eq!(check_url("ftp://127.0.0.1/x").unwrap_err().kind, FetchErrorKind::Refused);
        assert_eq!(check_url("https://user:pw@registry.example/").unwrap_err().kind, FetchErrorKind::Refused);
    }

    #[test]
    fn a_cache_entry_that_does_not_hash_to_its_name_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache { root: d.path().to_path_buf() };
        let sha = c.put_blob(b"hello").unwrap();
        assert_eq!(c.blob(&sha).as_deref(), Some(&b"hello"[..]));
        std::fs::write(c.blob_path(&sha).unwrap(), b"hellO").unwrap();
        assert_eq!(c.blob(&sha), None);
        assert_eq!(c.blob("../../etc/passwd"), None);
    }
}
