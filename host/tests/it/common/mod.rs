//! Helpers shared by the host's integration tests.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A private temporary directory, removed when dropped.
pub struct Tmp(pub PathBuf);

impl Tmp {
    pub fn new(tag: &str) -> Tmp {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!("runbook-host-test-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
pub mod chat_cli;
pub mod claude_cli;
pub mod hooks;
pub mod mcp;

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
pub mod oci_registry;
