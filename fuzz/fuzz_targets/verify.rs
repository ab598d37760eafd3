//! Mutated run bundles into `verify` (`runbook_host::bundle::verify::verify_bundle`, what `runbook-host verify`
//! runs). The bundles are made once, at start, by the library's run driver (`Run`): an allowed run of
//! echo-only.json, the same with a signed receipt, a run of everything-tour.yaml with a human's approval,
//! a refused run, a shadow run, and the redacted derivatives of the signed and the shadow run. Each input picks one (first byte)
//! and edits its files (the rest: a list of edits, see `edit`); the edited bundle is written to a fresh
//! directory and verified.
//!
//! A crash is a panic in verify, or a pass on a bundle whose files are not byte for byte those the run
//! wrote (every file of a bundle is pinned by the receipt or checked against it: an edit verify lets
//! through is evidence that can be changed unnoticed). The one exception is a redacted derivative's
//! `derivation.json`, pinned nowhere by design: there what it says must be unchanged, its time aside.
#![no_main]
use libfuzzer_sys::fuzz_target;
use runbook_host::registry;
use runbook_host::run::{Claim, Guard, Run, RunOptions};
use runbook_host::{Coverage, EndReason, Profile, Risk};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

type Files = BTreeMap<String, Vec<u8>>;

fn scratch() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    base.join(format!("runbook-fuzz-verify-{}", std::process::id()))
}

/// Removes what earlier fuzzer processes left (a crash ends a process without cleaning up).
fn clean_stale() {
    let Some(base) = scratch().parent().map(Path::to_path_buf) else { return };
    for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix("runbook-fuzz-verify-") {
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

fn claim(allow: &[&str], profile: Profile) -> Claim {
    Claim {
        profile,
        allowlist: allow.iter().map(|s| s.to_string()).collect(),
        risk_ceiling: Risk::ReadOnly,
        coverage: Coverage::Complete,
        agent: "fuzz".into(),
        available: None,
    }
}

/// Every file under `dir`, by its path relative to it.
fn read_tree(dir: &Path) -> Files {
    let mut out = Files::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn bundles() -> &'static Vec<Files> {
    static B: OnceLock<Vec<Files>> = OnceLock::new();
    B.get_or_init(|| {
        let policy = runbook_host::files::shared_policy().expect("the embedded component loads").clone();
        let root = scratch().join("made");
        let _ = std::fs::remove_dir_all(&root);
        let runs = root.join("runs");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let doc = |name: &str| registry::resolve(&repo.join("host/tests/mcp/runbooks").join(name).to_string_lossy(), "unused").expect("a test runbook");
        let echo = doc("echo-only.json");
        let tour = doc("everything-tour.yaml");
        let create = |d: &registry::Resolved, c: Claim, opts: RunOptions| {
            Run::create_opts(Arc::clone(&policy), d, c, &runs, "fuzz", Guard::new(&runs, None), opts).expect("a run")
        };
        let plain = || RunOptions { receipt_key: None, shadow: false, ..Default::default() };
        let echo_calls = |run: &mut Run| {
            for i in 0..3 {
                let id = format!("c{i}");
                run.invoke("echo", &json!({"message": format!("m{i}")}), Some(&id), None).unwrap();
                run.result("echo", &json!([{"type": "text", "text": format!("Echo: m{i}")}]), false, Some(&id)).unwrap();
            }
        };
        let mut dirs = Vec::new();
        // 1. allowed calls, ended normally; 2. the same with a signed receipt.
        for key in [None, Some(ed25519_dalek_key())] {
            let (mut run, _) = create(&echo, claim(&["echo"], Profile::R1), RunOptions { receipt_key: key, shadow: false, ..Default::default() });
            echo_calls(&mut run);
            run.end(EndReason::Normal).unwrap();
            dirs.push(run.dir().to_path_buf());
        }
        // 3. a gated call approved by a human, a blocked one, then the end.
        {
            let (mut run, _) = create(&tour, claim(&["echo", "get-sum", "get-structured-content"], Profile::R1), plain());
            run.invoke("echo", &json!({"message": "hi"}), Some("e"), None).unwrap();
            run.result("echo", &json!([{"type": "text", "text": "Echo: hi"}]), false, Some("e")).unwrap();
            run.invoke("get-env", &json!({}), Some("x"), None).unwrap();
            run.advance("add").unwrap();
            let args = json!({"a": 2, "b": 3});
            let a = run.invoke("get-sum", &args, Some("s"), None).unwrap();
            run.approval(Some("add"), a.call_sha256.as_deref(), "fuzz", true).unwrap();
            run.invoke("get-sum", &args, Some("s2"), None).unwrap();
            run.result("get-sum", &json!([{"type": "text", "text": "5"}]), false, Some("s2")).unwrap();
            run.end(EndReason::Normal).unwrap();
            dirs.push(run.dir().to_path_buf());
        }
        // 4. refused at admission (a profile below the document's minimum... R0 is below R1).
        {
            let (run, _) = create(&echo, claim(&[], Profile::R0), plain());
            dirs.push(run.dir().to_path_buf());
        }
        // 5. shadow: an undeclared call forwarded anyway.
        {
            let (mut run, _) = create(&echo, claim(&["echo"], Profile::R1), RunOptions { receipt_key: None, shadow: true, ..Default::default() });
            let a = run.invoke("get-env", &json!({}), Some("x"), None).unwrap();
            run.record_shadow_forward("get-env", &json!({}), a.decision.seq, &runbook_host::wire::code(a.decision.kind)).unwrap();
            run.result("get-env", &json!([{"type": "text", "text": "ENV"}]), false, Some("x")).unwrap();
            run.end(EndReason::Normal).unwrap();
            dirs.push(run.dir().to_path_buf());
        }
        // 6, 7. the redacted derivatives of the signed run and of the shadow run.
        dirs.push(runbook_host::bundle::export_redacted(&dirs[1], &root.join("redacted")).expect("export"));
        dirs.push(runbook_host::bundle::export_redacted(&dirs[4], &root.join("redacted")).expect("export"));
        let out: Vec<Files> = dirs.iter().map(|d| read_tree(d)).collect();
        for (i, (d, files)) in dirs.iter().zip(&out).enumerate() {
            let o = verify(d);
            assert!(o.failure.is_none(), "bundle {i} as made does not verify: {:?}", o.failure);
            assert!(files.contains_key("receipt.json"), "bundle {i}");
        }
        let _ = std::fs::remove_dir_all(&root);
        out
    })
}

fn ed25519_dalek_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[7; 32])
}

fn verify(dir: &Path) -> runbook_host::bundle::verify::Outcome {
    let d = cap_std::fs::Dir::open_ambient_dir(dir, cap_std::ambient_authority()).unwrap();
    runbook_host::bundle::verify::verify_bundle(&d, None, &[])
}

/// Applies the edits `data` encodes to `files`: each edit is an op byte, a file byte (which file, by
/// index), a 16-bit position, a length byte and that many bytes.
fn edit(files: &mut Files, mut data: &[u8], links: &mut Vec<(String, String)>) {
    while data.len() >= 5 {
        // Duplicating the one line of a one-line file doubles it: a few dozen edits would need more memory
        // than any machine has. Edits stop at 4 MiB of bundle (a bundle's limits are verify's own, tested
        // in benches/benches/limits.rs, not this target's).
        if files.values().map(Vec::len).sum::<usize>() > 4 << 20 {
            return;
        }
        let (op, file, at, len) = (data[0] % 10, data[1], u16::from_le_bytes([data[2], data[3]]) as usize, data[4] as usize);
        let bytes = &data[5..(5 + len).min(data.len())];
        data = &data[(5 + len).min(data.len())..];
        let names: Vec<String> = files.keys().cloned().collect();
        if names.is_empty() {
            return;
        }
        let name = names[file as usize % names.len()].clone();
        let f = files.get_mut(&name).unwrap();
        let at = if f.is_empty() { 0 } else { at % (f.len() + 1) };
        match op {
            0 => {
                // Overwrite in place.
                for (k, b) in bytes.iter().enumerate() {
                    if let Some(x) = f.get_mut(at + k) {
                        *x = *b;
                    }
                }
            }
            1 => {
                f.splice(at..at, bytes.iter().copied());
            }
            2 => f.truncate(at),
            3 => {
                files.remove(&name);
            }
            4 => *f = bytes.to_vec(),
            5 | 6 | 7 => {
                // Lines: swap two, duplicate one, drop one (a reordered, replayed or removed record).
                let text = f.clone();
                let mut lines: Vec<&[u8]> = text.split_inclusive(|b| *b == b'\n').collect();
                if lines.is_empty() {
                    continue;
                }
                let (i, j) = (at % lines.len(), len % lines.len());
                match op {
                    5 => lines.swap(i, j),
                    6 => lines.insert(j, lines[i]),
                    _ => {
                        lines.remove(i);
                    }
                }
                *f = lines.concat();
            }
            8 => {
                // A file the run never wrote, named by the edit.
                let n: String = bytes.iter().take(24).map(|b| (b'a' + b % 26) as char).collect();
                files.insert(format!("{n}.json"), bytes.to_vec());
            }
            _ => {
                // The file replaced by a symbolic link to another of the bundle.
                let target = names[(at + len) % names.len()].clone();
                if target != name {
                    files.remove(&name);
                    links.push((name, target));
                }
            }
        }
    }
}

fn write_tree(dir: &Path, files: &Files, links: &[(String, String)]) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    for (name, bytes) in files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    for (name, target) in links {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = std::os::unix::fs::symlink(dir.join(target), p);
    }
}

fuzz_target!(init: { clean_stale(); bundles(); }, |data: &[u8]| {
    let Some((first, rest)) = data.split_first() else { return };
    let all = bundles();
    let original = &all[*first as usize % all.len()];
    let mut files = original.clone();
    let mut links = Vec::new();
    edit(&mut files, rest, &mut links);
    let dir = scratch().join("bundle");
    write_tree(&dir, &files, &links);
    let o = verify(&dir);
    if o.failure.is_none() {
        for (name, bytes) in original {
            let now = std::fs::read(dir.join(name)).ok();
            let same = if name == "receipt.dsse.json" {
                // A signature envelope's layout is not signed (DSSE): what it says must be the same.
                let said = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).ok();
                now.as_deref().and_then(said).is_some_and(|v| Some(v) == said(bytes))
            } else if name == "derivation.json" {
                // Pinned nowhere, by design (schema/redacted-derivation.schema.json): only what it says
                // is checked, and its export time is not evidence.
                let said = |b: &[u8]| {
                    let mut v: serde_json::Value = serde_json::from_slice(b).ok()?;
                    v.as_object_mut()?.remove("created_at");
                    Some(v)
                };
                now.as_deref().and_then(said).is_some_and(|v| Some(v) == said(bytes))
            } else {
                now.as_deref() == Some(bytes.as_slice())
            };
            assert!(same && !links.iter().any(|(l, _)| l == name), "verify passed a bundle whose `{name}` is not the one the run wrote");
        }
    }
});
