//! Where a bundle's bytes go: the [`Store`] seam under [`super::Bundle`], and its two implementations.
//!
//! A store holds a runs root: the runs root's own files (`latest.json`, `history.ndjson`) and one
//! directory a run. Every path a bundle names is relative to the runs root, one or two safe names
//! (`latest.json`, `<run-id>/events.ndjson`), checked by the caller.
//!
//! - [`DirStore`]: a directory, as a `cap-std` capability (the production store): an append is one
//!   `write` and an fsync, cut back to the last whole record on failure; a replace is
//!   [`crate::files::write_atomic`]; the crash points of [`crate::faults`] are where they always were.
//! - [`MemoryStore`]: the same files in memory, shared by its clones (a test or a fuzz target keeps one
//!   clone and reads what a run wrote). No fsync, no crash point, no disk. [`MemoryStore::bundle`] hands
//!   [`super::verify`] a run's files as they are, to check as it checks a directory. A run on a memory
//!   store never runs `git` (see [`Store::on_disk`]).

use crate::files::*;
use cap_std::fs::{Dir, File, OpenOptions};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What a [`super::Bundle`] needs of the place its files live.
pub trait Store: Send + Sync {
    /// The runs root as the caller named it (a nominal path for a memory store): a run's directory is
    /// reported as `root().join(run_id)` (the guard names it, the approval command prints it).
    fn root(&self) -> &Path;
    /// Whether the store is on disk. A bundle created on disk without given facts measures the host's
    /// surroundings (the working directory's `git status`) and its run's approval channel is files in
    /// the run directory; in memory, `source.git` is `unavailable` (no `git` is run) and the channel is
    /// memory too ([`crate::run::approvals::MemoryChannel`]).
    fn on_disk(&self) -> bool;
    /// Creates the directory `path` (one name under the root); `AlreadyExists` when it is there.
    fn create_dir(&self, path: &str) -> io::Result<()>;
    /// Checks that the directory `path` is there (and, for a directory, opens it for what follows).
    fn open_dir(&self, path: &str) -> io::Result<()>;
    /// Replaces `path` atomically and durably with `bytes`.
    fn write_atomic(&self, path: &str, bytes: &[u8]) -> io::Result<()>;
    /// Opens `path` (which must exist) for appending: [`Store::append`] then uses that one file.
    fn open_append(&self, path: &str) -> io::Result<()>;
    /// Appends one whole record durably (see [`append_whole`]); `create`: the file may be new.
    fn append(&self, path: &str, bytes: &[u8], create: bool) -> io::Result<()>;
    /// The bytes of `path`, refused (`InvalidData`) above `max` bytes.
    fn read(&self, path: &str, max: u64) -> io::Result<Vec<u8>>;
    fn is_file(&self, path: &str) -> bool;
    fn exists(&self, path: &str) -> bool;
    /// The hex sha256 of `path`'s bytes.
    fn sha256(&self, path: &str) -> io::Result<String>;
    /// Removes the directory `path` and everything in it.
    fn remove_dir_all(&self, path: &str) -> io::Result<()>;
}

/// A shared store, as a bundle and a run hold it.
pub type SharedStore = Arc<dyn Store>;

/// `path` as (directory, file name): `("", name)` for a file of the runs root.
fn split(path: &str) -> (&str, &str) {
    match path.split_once('/') {
        Some((d, n)) => (d, n),
        None => ("", path),
    }
}

// ---------------------------------------------------------------------------------------------------
// The directory.

/// A runs root on disk (today's bundles, byte for byte).
pub struct DirStore {
    path: PathBuf,
    root: Dir,
    /// The run directories opened so far, each once (a bundle keeps writing into the directory it opened).
    dirs: Mutex<HashMap<String, Arc<Dir>>>,
    /// The files opened for appending by [`Store::open_append`] (a bundle's `events.ndjson`).
    appenders: Mutex<HashMap<String, File>>,
}

impl DirStore {
    /// The runs root at `path`, created (with its parents) when missing.
    pub fn create(path: &Path) -> io::Result<DirStore> {
        Ok(DirStore::with(path, open_or_create_dir(path)?))
    }

    /// The runs root at `path`, which must exist.
    pub fn open(path: &Path) -> io::Result<DirStore> {
        Ok(DirStore::with(path, Dir::open_ambient_dir(path, cap_std::ambient_authority())?))
    }

    fn with(path: &Path, root: Dir) -> DirStore {
        DirStore { path: path.to_path_buf(), root, dirs: Mutex::new(HashMap::new()), appenders: Mutex::new(HashMap::new()) }
    }

    /// The directory holding `path`'s file (the root, or a run directory, opened once).
    fn dir_of(&self, d: &str) -> io::Result<Option<Arc<Dir>>> {
        if d.is_empty() {
            return Ok(None);
        }
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = dirs.get(d) {
            return Ok(Some(Arc::clone(x)));
        }
        let x = Arc::new(self.root.open_dir(d)?);
        dirs.insert(d.to_string(), Arc::clone(&x));
        Ok(Some(x))
    }

    fn with_dir<T>(&self, path: &str, f: impl FnOnce(&Dir, &str) -> io::Result<T>) -> io::Result<T> {
        let (d, name) = split(path);
        let sub = self.dir_of(d)?;
        f(sub.as_deref().unwrap_or(&self.root), name)
    }
}

impl Store for DirStore {
    fn root(&self) -> &Path {
        &self.path
    }
    fn on_disk(&self) -> bool {
        true
    }
    fn create_dir(&self, path: &str) -> io::Result<()> {
        self.root.create_dir(path)
    }
    fn open_dir(&self, path: &str) -> io::Result<()> {
        self.dir_of(path).map(|_| ())
    }
    fn write_atomic(&self, path: &str, bytes: &[u8]) -> io::Result<()> {
        self.with_dir(path, |d, name| write_atomic(d, name, bytes))
    }
    fn open_append(&self, path: &str) -> io::Result<()> {
        let f = self.with_dir(path, |d, name| d.open_with(name, OpenOptions::new().append(true)))?;
        self.appenders.lock().unwrap_or_else(|e| e.into_inner()).insert(path.to_string(), f);
        Ok(())
    }
    fn append(&self, path: &str, bytes: &[u8], create: bool) -> io::Result<()> {
        let name = split(path).1;
        if let Some(f) = self.appenders.lock().unwrap_or_else(|e| e.into_inner()).get_mut(path) {
            return append_whole(f, name, bytes);
        }
        let mut f = self.with_dir(path, |d, name| d.open_with(name, OpenOptions::new().append(true).create(create)))?;
        append_whole(&mut f, name, bytes)
    }
    fn read(&self, path: &str, max: u64) -> io::Result<Vec<u8>> {
        self.with_dir(path, |d, name| read_bounded(d, name, max))
    }
    fn is_file(&self, path: &str) -> bool {
        self.with_dir(path, |d, name| Ok(d.is_file(name))).unwrap_or(false)
    }
    fn exists(&self, path: &str) -> bool {
        self.with_dir(path, |d, name| Ok(d.exists(name))).unwrap_or(false)
    }
    fn sha256(&self, path: &str) -> io::Result<String> {
        self.with_dir(path, sha256_of)
    }
    fn remove_dir_all(&self, path: &str) -> io::Result<()> {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner()).remove(path);
        self.appenders.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| split(k).0 != path);
        self.root.remove_dir_all(path)
    }
}

/// Appends one whole record (`bytes`, ending in a newline) to an append-only file in one `write`, and
/// fsyncs it. A disk that fills up or fails mid-record has the partial record cut off again, so the file
/// ends at its last whole record and nothing half written is ever read as evidence.
pub(crate) fn append_whole(f: &mut File, name: &str, bytes: &[u8]) -> io::Result<()> {
    let whole = f.metadata()?.len();
    crate::faults::write_point(name, "before")?;
    let written = f.write_all(bytes).and_then(|()| {
        crate::faults::write_point(name, "written-before-sync")?;
        f.sync_data()
    });
    if let Err(e) = written {
        let _ = f.set_len(whole).and_then(|()| f.sync_data());
        return Err(e);
    }
    crate::faults::point(name, "synced");
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// Memory.

#[derive(Default)]
struct Files {
    dirs: BTreeSet<String>,
    files: BTreeMap<String, Vec<u8>>,
}

/// A runs root in memory. Clones share the same files.
#[derive(Clone)]
pub struct MemoryStore {
    root: PathBuf,
    files: Arc<Mutex<Files>>,
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store, whose runs root is named `memory` (the name a run's directory is reported under).
    pub fn new() -> MemoryStore {
        MemoryStore::named(Path::new("memory"))
    }

    /// An empty store whose runs root is named `root` (nothing is ever written there).
    pub fn named(root: &Path) -> MemoryStore {
        MemoryStore { root: root.to_path_buf(), files: Arc::default() }
    }

    /// This store as a [`SharedStore`] (sharing the same files).
    pub fn shared(&self) -> SharedStore {
        Arc::new(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Files> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bytes of `path` (`<run-id>/events.ndjson`, `latest.json`), if it is a file here.
    pub fn get(&self, path: &str) -> Option<Vec<u8>> {
        self.lock().files.get(path).cloned()
    }

    /// Every file, by path, sorted.
    pub fn files(&self) -> BTreeMap<String, Vec<u8>> {
        self.lock().files.clone()
    }

    /// The files of the run directory `run_id`, as `verify` reads a bundle ([`super::verify::Source`]);
    /// None when there is no such directory.
    pub fn bundle(&self, run_id: &str) -> Option<super::verify::MemoryBundle> {
        let f = self.lock();
        if !f.dirs.contains(run_id) {
            return None;
        }
        let prefix = format!("{run_id}/");
        let files = f.files.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix));
        Some(super::verify::MemoryBundle(files.map(|(k, b)| (k[prefix.len()..].to_string(), b.clone())).collect()))
    }

    /// Writes every directory and file into `dir` (created when missing) as a [`DirStore`] would hold
    /// them: the files of a run on disk, for a test that compares them with a [`DirStore`]'s.
    pub fn dump(&self, dir: &Path) -> io::Result<()> {
        let f = self.lock();
        std::fs::create_dir_all(dir)?;
        for d in &f.dirs {
            std::fs::create_dir_all(dir.join(d))?;
        }
        for (p, bytes) in &f.files {
            std::fs::write(dir.join(p), bytes)?;
        }
        Ok(())
    }

    /// Removes every file and directory (a fuzz target reuses one store).
    pub fn clear(&self) {
        *self.lock() = Files::default();
    }
}

fn not_found(path: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{path}: no such file in the memory store"))
}

impl Files {
    fn parent_exists(&self, path: &str) -> bool {
        let (d, _) = split(path);
        d.is_empty() || self.dirs.contains(d)
    }
}

impl Store for MemoryStore {
    fn root(&self) -> &Path {
        &self.root
    }
    fn on_disk(&self) -> bool {
        false
    }
    fn create_dir(&self, path: &str) -> io::Result<()> {
        let mut f = self.lock();
        if !f.parent_exists(path) {
            return Err(not_found(path));
        }
        if f.dirs.contains(path) || f.files.contains_key(path) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{path} exists")));
        }
        f.dirs.insert(path.to_string());
        Ok(())
    }
    fn open_dir(&self, path: &str) -> io::Result<()> {
        if self.lock().dirs.contains(path) {
            Ok(())
        } else {
            Err(not_found(path))
        }
    }
    fn write_atomic(&self, path: &str, bytes: &[u8]) -> io::Result<()> {
        let mut f = self.lock();
        if !f.parent_exists(path) || f.dirs.contains(path) {
            return Err(not_found(path));
        }
        f.files.insert(path.to_string(), bytes.to_vec());
        Ok(())
    }
    fn open_append(&self, path: &str) -> io::Result<()> {
        if self.lock().files.contains_key(path) {
            Ok(())
        } else {
            Err(not_found(path))
        }
    }
    fn append(&self, path: &str, bytes: &[u8], create: bool) -> io::Result<()> {
        let mut f = self.lock();
        if !f.parent_exists(path) || (!create && !f.files.contains_key(path)) {
            return Err(not_found(path));
        }
        f.files.entry(path.to_string()).or_default().extend_from_slice(bytes);
        Ok(())
    }
    fn read(&self, path: &str, max: u64) -> io::Result<Vec<u8>> {
        let f = self.lock();
        let b = f.files.get(path).ok_or_else(|| not_found(path))?;
        if b.len() as u64 > max {
            let name = split(path).1;
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{name} is larger than the {max} bytes this host reads ({} bytes)", b.len())));
        }
        Ok(b.clone())
    }
    fn is_file(&self, path: &str) -> bool {
        self.lock().files.contains_key(path)
    }
    fn exists(&self, path: &str) -> bool {
        let f = self.lock();
        f.files.contains_key(path) || f.dirs.contains(path)
    }
    fn sha256(&self, path: &str) -> io::Result<String> {
        Ok(sha256_hex(self.lock().files.get(path).ok_or_else(|| not_found(path))?))
    }
    fn remove_dir_all(&self, path: &str) -> io::Result<()> {
        let mut f = self.lock();
        if !f.dirs.remove(path) {
            return Err(not_found(path));
        }
        let prefix = format!("{path}/");
        f.files.retain(|k, _| !k.starts_with(&prefix));
        Ok(())
    }
}
