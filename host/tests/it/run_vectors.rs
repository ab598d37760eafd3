//! The whole-run vectors' bundles (conformance/vectors/run/) as an auditor meets them: each expected
//! bundle, which the CLI's `Run`, the native core, the Python package and the JS package all write byte for
//! byte (the conformance suite compares them), passes `runbook-host verify`; and a receipt that holds the
//! same data in other bytes does not (the module's `check-receipt`).

use crate::common::{self, repo, Tmp, BIN};
use std::path::{Path, PathBuf};

fn bundles() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for v in std::fs::read_dir(repo().join("conformance/vectors/run")).unwrap() {
        let expected = v.unwrap().path().join("expected");
        if !expected.is_dir() {
            continue;
        }
        for e in std::fs::read_dir(&expected).unwrap() {
            let p = e.unwrap().path();
            if p.join("run.json").is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn verify(bundle: &Path) -> (bool, String) {
    let o = common::cmd(BIN).arg("verify").arg(bundle).output().unwrap();
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// Whether the vector of `bundle` (its `expected/<run_id>`) ends in a refused resume: its bundle is an
/// unended run as the agent left it (a swapped document, or nothing edited), which must not verify.
fn resume_refused(bundle: &Path) -> bool {
    let script = bundle.parent().and_then(Path::parent).unwrap().join("script.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(script).unwrap()).unwrap();
    v["expect"]["resume_refused"] == true
}

#[test]
fn every_expected_bundle_verifies() {
    let all = bundles();
    assert!(all.len() >= 30, "only {} whole-run vectors have an expected bundle", all.len());
    let mut refused = 0;
    for b in &all {
        let (ok, out) = verify(b);
        if resume_refused(b) {
            refused += 1;
            assert!(!ok, "{}: a bundle whose resume was refused verifies: {out}", b.display());
        } else {
            assert!(ok, "{}: {out}", b.display());
        }
    }
    assert!(refused >= 2, "only {refused} vectors end in a refused resume");
}

#[test]
fn a_receipt_in_other_bytes_is_refused() {
    let src = bundles().into_iter().find(|b| b.to_string_lossy().contains("end-library-completed")).expect("the vector end-library-completed");
    let t = Tmp::new("run-vectors");
    let dir = t.join(src.file_name().unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    assert!(verify(&dir).0);
    // The same JSON, pretty-printed: every member still matches, only the bytes are not the module's.
    let receipt: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("receipt.json")).unwrap()).unwrap();
    std::fs::write(dir.join("receipt.json"), serde_json::to_string_pretty(&receipt).unwrap()).unwrap();
    let (ok, out) = verify(&dir);
    assert!(!ok, "{out}");
    assert!(out.contains("receipt.json"), "{out}");
}
