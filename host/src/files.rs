//! Files written and read by every part of the host: atomic writes, reads bounded in size, hashing, safe
//! names and random ids. The one place a file is replaced (`write_atomic`), so a crash point of the
//! robustness tests (crate::faults) covers every such write.

use crate::{HostError, Policy};
use cap_std::fs::{Dir, OpenOptions};
use sha2::{Digest, Sha256};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, OnceLock};

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

/// The most of `events.ndjson` (or any one file of a bundle) a host reads into memory: what the module,
/// whose memory is capped at [`crate::MEMORY_CAP`], can still replay in one call. A longer run cannot be
/// resumed or verified; it is refused, never read.
pub const MAX_EVIDENCE_BYTES: u64 = 256 << 20;

/// The most of a small file a host reads (run.json, latest.json, an approval request or answer, the hook's
/// session state, a client's settings).
pub const MAX_SMALL_FILE_BYTES: u64 = 16 << 20;

/// Reads `name` from `dir`, refusing it before reading when it is larger than `max` bytes (by the size the
/// file system reports: a sparse file of any apparent size costs nothing to refuse, docs/spec/runbook.md#limits), and
/// reading at most `max + 1` bytes should it grow meanwhile. The error is `InvalidData` and names the file.
pub fn read_bounded(dir: &Dir, name: &str, max: u64) -> io::Result<Vec<u8>> {
    let f = dir.open(name)?;
    read_file_bounded(f.into_std(), name, max)
}

/// [`read_bounded`] of a path (a file outside any bundle directory: the hook's state, a settings file).
pub fn read_path_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    read_file_bounded(std::fs::File::open(path)?, &path.display().to_string(), max)
}

pub(crate) fn read_file_bounded(f: std::fs::File, name: &str, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let too_big = |len: u64| io::Error::new(io::ErrorKind::InvalidData, format!("{name} is larger than the {max} bytes this host reads ({len} bytes)"));
    let len = f.metadata()?.len();
    if len > max {
        return Err(too_big(len));
    }
    let mut v = Vec::with_capacity(len as usize);
    f.take(max + 1).read_to_end(&mut v)?;
    if v.len() as u64 > max {
        return Err(too_big(v.len() as u64));
    }
    Ok(v)
}

/// The sha256 of `name` in `dir`, streamed (a long run's events are hashed without holding them).
pub fn sha256_of(dir: &Dir, name: &str) -> io::Result<String> {
    let mut f = dir.open(name)?.into_std();
    let mut h = Sha256::new();
    io::copy(&mut f, &mut h)?;
    Ok(hex::encode(h.finalize()))
}

pub(crate) fn io_other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
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

/// Writes `bytes` to `name` in `dir` atomically (a temporary file, fsync, rename): the one way the host
/// replaces a file. The temporary file is created exclusively (a file or symlink planted at its name is
/// refused, never written through) and the rename replaces a symlink at `name` itself, never its target.
pub(crate) fn write_atomic(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    write_atomic_mode(dir, name, bytes, None)
}

/// [`write_atomic`], the new file created with Unix permissions `mode` (e.g. `0o600` for a token) when
/// given, so it is never readable by others for a moment.
pub fn write_atomic_mode(dir: &Dir, name: &str, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let tmp = format!(".{name}.{}.tmp", unique_hex(8)?);
    crate::faults::write_point(name, "before")?;
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    if let Some(m) = mode {
        cap_std::fs::OpenOptionsExt::mode(&mut options, m);
    }
    let written = dir.open_with(&tmp, &options).and_then(|mut f| {
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

/// [`write_atomic_mode`] of a path outside any capability directory (the hook's session state, a client's
/// settings, the registry cache, an `allowed_signers` file): its directory must exist.
pub fn write_atomic_path(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name =
        path.file_name().and_then(|n| n.to_str()).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("`{}` names no file", path.display())))?;
    let dir = Dir::open_ambient_dir(parent, cap_std::ambient_authority())?;
    write_atomic_mode(&dir, name, bytes, mode)
}

/// Opens (creating it and its parents when missing) an ambient directory as a capability directory.
pub(crate) fn open_or_create_dir(path: &Path) -> io::Result<Dir> {
    std::fs::create_dir_all(path)?;
    Dir::open_ambient_dir(path, cap_std::ambient_authority())
}
