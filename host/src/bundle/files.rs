//! Small file and name helpers shared by the bundle, the registry, the approval channel and `verify`.

#[allow(unused_imports)]
use super::*;

/// Lowercase hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The process-wide policy module used for JCS (the chain) and for lint in `registry add`. Loaded once,
/// from the precompiled cache when there is one.
pub fn shared_policy() -> Result<&'static Arc<Policy>, HostError> {
    static POLICY: OnceLock<Result<Arc<Policy>, String>> = OnceLock::new();
    match POLICY.get_or_init(|| Policy::load().map(Arc::new).map_err(|e| e.to_string())) {
        Ok(p) => Ok(p),
        Err(e) => Err(HostError::Load(e.clone())),
    }
}

pub(crate) fn io_other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Now, as UTC RFC 3339 with milliseconds (`2026-11-30T12:34:56.789Z`).
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let f = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    now.format(&f).unwrap_or_default()
}

/// `n` hex digits from the operating system's random source (run ids, approval ids, tokens): never
/// guessable from the time, the pid or an address. Fails closed: no randomness, no id.
pub(crate) fn unique_hex(n: usize) -> io::Result<String> {
    let mut bytes = vec![0u8; n.div_ceil(2)];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(format!("the operating system's random source failed: {e}")))?;
    let mut s = hex::encode(bytes);
    s.truncate(n);
    Ok(s)
}

/// A new run id: `r-<UTC time, basic format>-<12 random hex>`, e.g. `r-20261130T123456Z-3fa9c1d20e7b`.
/// Only ever used as a string (the bundle's directory name and the `start` claim's `run_id`).
pub fn new_run_id() -> io::Result<String> {
    let f = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let t = time::OffsetDateTime::now_utc().format(&f).map_err(io::Error::other)?;
    Ok(format!("r-{t}-{}", unique_hex(12)?))
}

/// Whether `name` is a safe single path component for an id (run id, approval id): ASCII letters, digits,
/// `.`, `_`, `-`, not starting with `.`, at most 128 bytes.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 128 && !name.starts_with('.') && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Writes `bytes` to `name` in `dir` atomically (a temporary file, fsync, rename).
pub(crate) fn write_atomic(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = format!(".{name}.{}.tmp", unique_hex(8)?);
    crate::faults::write_point(name, "before")?;
    let written = dir.open_with(&tmp, OpenOptions::new().write(true).create_new(true)).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()?;
        crate::faults::write_point(name, "synced-before-rename")?;
        dir.rename(&tmp, dir, name)
    });
    if let Err(e) = written {
        // Nothing half written stays behind: the old file (if any) is untouched, the temporary one goes.
        let _ = dir.remove_file(&tmp);
        return Err(e);
    }
    crate::faults::point(name, "renamed");
    Ok(())
}

/// Opens (creating it and its parents when missing) an ambient directory as a capability directory.
pub(crate) fn open_or_create_dir(path: &Path) -> io::Result<Dir> {
    std::fs::create_dir_all(path)?;
    Dir::open_ambient_dir(path, cap_std::ambient_authority())
}
