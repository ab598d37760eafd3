//! The harness of the host's integration tests (host/tests/it/, one test binary): the repository root, the
//! binary under test, the one temporary-directory helper ([`Tmp`]), and the one way a test starts a
//! process ([`cmd`], or [`isolate`] for a `Command` made otherwise): `HOME`, the registry and compiled-module
//! cache (`RUNBOOK_HOST_CACHE`) and the XDG directories in a fresh directory of the test, and no variable
//! through which a developer's own setup (`~/.claude`'s deny rules, a client's config folder, registry
//! credentials) would reach it. A test that means to give a process its own HOME says so with [`isolate`]
//! or [`cmd_in`] and that directory.
#![allow(dead_code)]

use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The `runbook-host` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_runbook-host");

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A private temporary directory, made fresh and removed when dropped; kept (and named on stderr) when the
/// test panics or RUNBOOK_KEEP_TEST_DIRS is set. Its name holds this process's id and a counter: every
/// test of the binary shares the process, so a fixed name would be shared too. It never holds
/// `runbook-host`: the guard refuses any call that names the binary, so a test's files under such a
/// directory would all be guarded.
pub struct Tmp(pub PathBuf);

impl Tmp {
    pub fn new(tag: &str) -> Tmp {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!("rh-it-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("RUNBOOK_KEEP_TEST_DIRS").is_some() {
            eprintln!("kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Variables through which the developer's own setup would reach a process the tests start: a client's
/// config folder or project, the hook's runbook and token, registry credentials, the host's fault
/// injection. Never inherited; a test that wants one sets it on the command.
pub const PRIVATE_VARS: &[&str] = &[
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_PROJECT_DIR",
    "CODEX_HOME",
    "COPILOT_HOME",
    "CLINE_DIR",
    "GEMINI_CLI_HOME",
    "GEMINI_CLI_TRUSTED_FOLDERS_PATH",
    "QWEN_HOME",
    "QWEN_CODE_TRUSTED_FOLDERS_PATH",
    "RUNBOOK_HOOK_RUNBOOK",
    "RUNBOOK_HOOK_TOKEN",
    "RUNBOOK_HOOK_TIMING",
    "RUNBOOK_REGISTRY_USERNAME",
    "RUNBOOK_REGISTRY_PASSWORD",
    "RUNBOOK_HOST_KILL_AT",
    "RUNBOOK_HOST_FAULT_LOG",
    "RUNBOOK_HOST_EIO_AT",
    "RUNBOOK_HOST_EIO_FROM",
];

thread_local! {
    /// The HOME of the test running on this thread (libtest runs every test on a thread of its own), made
    /// on first use and removed when the test's thread ends. A thread the test starts has its own.
    static HOME: Tmp = Tmp::new("home");
}

/// This test's own HOME (see [`cmd`]).
pub fn home() -> PathBuf {
    HOME.with(|h| h.0.clone())
}

/// `program` to be started in this test's own HOME ([`home`]), isolated as [`isolate`] says.
pub fn cmd(program: impl AsRef<OsStr>) -> Command {
    cmd_in(program, &home())
}

/// `program` to be started with `home` as its HOME, isolated as [`isolate`] says.
pub fn cmd_in(program: impl AsRef<OsStr>, home: &Path) -> Command {
    let mut c = Command::new(program);
    isolate(&mut c, home);
    c
}

/// Points `c` at `home`: HOME, RUNBOOK_HOST_CACHE (`home/.cache/runbook-host`, holding the compiled module
/// already when `home` is this user's) and XDG_CONFIG_HOME, XDG_CACHE_HOME, XDG_DATA_HOME and XDG_STATE_HOME
/// inside it, none of [`PRIVATE_VARS`]. Call it after `env_clear`, before what the test sets itself.
pub fn isolate<'a>(c: &'a mut Command, home: &Path) -> &'a mut Command {
    seed(home);
    for v in PRIVATE_VARS {
        c.env_remove(v);
    }
    c.env("HOME", home)
        .env("RUNBOOK_HOST_CACHE", home.join(".cache/runbook-host"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
}

/// For a `cargo` (or a script that runs one) started in an isolated HOME: the toolchain and the crates this
/// test process builds with, CARGO_HOME and RUSTUP_HOME as it has them (else under its HOME).
pub fn toolchain(c: &mut Command) -> &mut Command {
    let real = |var: &str, dir: &str| std::env::var_os(var).map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(dir)));
    if let Some(p) = real("CARGO_HOME", ".cargo") {
        c.env("CARGO_HOME", p);
    }
    if let Some(p) = real("RUSTUP_HOME", ".rustup") {
        c.env("RUSTUP_HOME", p);
    }
    c
}

/// Makes `home` and, when it is this user's and has no cache yet, its compiled-module cache from
/// [`module_cache`] (hard links, else copies): a fresh HOME would otherwise compile the module again (a second
/// of both cores) in the first `runbook-host` of every test.
fn seed(home: &Path) {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let _ = std::fs::create_dir_all(home);
    let cache = home.join(".cache/runbook-host");
    // SAFETY: geteuid has no preconditions.
    let ours = std::fs::metadata(home).is_ok_and(|m| m.uid() == unsafe { libc::geteuid() });
    if !ours || cache.exists() {
        return;
    }
    if std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&cache).is_err() {
        return;
    }
    for e in std::fs::read_dir(module_cache()).into_iter().flatten().flatten() {
        let to = cache.join(e.file_name());
        if std::fs::hard_link(e.path(), &to).is_err() {
            let _ = std::fs::copy(e.path(), &to);
        }
    }
}

/// A compiled-module cache made once per process by the binary under test (removed by the next run once
/// this process is gone): what every HOME is seeded with, and the cache of the tests that load the policy
/// module in this process.
pub fn module_cache() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        const PREFIX: &str = "runbook-host-it-compiled-";
        for e in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.strip_prefix(PREFIX).is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = std::env::temp_dir().join(format!("{PREFIX}{}", std::process::id()));
        let mut c = Command::new(BIN);
        for v in PRIVATE_VARS {
            c.env_remove(v);
        }
        let o = c.arg("lint").arg(document_of("rotate-credentials")).env("RUNBOOK_HOST_CACHE", &dir).output().expect("runbook-host runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        dir
    })
}

pub mod chat_cli;
pub mod claude_cli;
pub mod hooks;
pub mod mcp;
pub mod memory_server;
pub mod oci_registry;

/// The document of an example: its `runbook.yaml` or `runbook.json`.
pub fn document_of(example: &str) -> PathBuf {
    let d = repo().join("examples").join(example);
    ["runbook.yaml", "runbook.json"].iter().map(|f| d.join(f)).find(|p| p.is_file()).unwrap()
}

/// The non-blank lines of an events file.
pub fn event_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
}

/// Every (document, stream) of examples/.
pub fn all_streams() -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(repo().join("examples")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    for d in dirs {
        let mut streams: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "ndjson")).collect();
        streams.sort();
        for s in streams {
            out.push((document_of(d.file_name().unwrap().to_str().unwrap()), s));
        }
    }
    assert!(out.len() >= 9, "the bundled examples are there");
    out
}

/// Every line of events.ndjson is a whole record (the chain itself is `verify`'s to check).
pub fn event_records(run_dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(run_dir.join("events.ndjson")).unwrap_or_default();
    assert!(text.is_empty() || text.ends_with('\n'), "{}: a torn last line: {text:?}", run_dir.display());
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: not a whole record ({e}): {l}", run_dir.display()))).collect()
}

/// The `type:tool:decision` of each recorded event: what a client was told about, comparable across runs.
pub fn event_shape(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            format!(
                "{}:{}:{}",
                l["event"]["type"].as_str().unwrap_or("?"),
                l["event"]["tool"].as_str().unwrap_or("-"),
                l["decision"]["decision"].as_str().unwrap_or("?")
            )
        })
        .collect()
}
