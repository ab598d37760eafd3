//! The component's bytes do not depend on where the checkout lives: a copy of the sources in another
//! directory, built the way host/build.rs builds it, gives the same sha256 as the embedded component.

use crate::common::{self, repo, Tmp};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;

fn copy_tracked(root: &Path, to: &Path) {
    let out = Command::new("git").arg("-C").arg(root).args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"]).output().expect("git");
    assert!(out.status.success(), "git ls-files failed");
    for rel in out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let rel = Path::new(std::str::from_utf8(rel).unwrap());
        let top = rel.components().next().unwrap().as_os_str();
        // The workspace (every member's manifest and sources), not the data beside it.
        if top == "examples" || top == "playground" || top == "schema" || top == ".ci" {
            continue;
        }
        let src = root.join(rel);
        if !src.is_file() {
            continue;
        }
        let dst = to.join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&src, &dst).unwrap();
    }
}

#[test]
fn a_build_in_another_directory_gives_the_same_component() {
    let root = repo();
    let tmp = Tmp::new("repro");
    let elsewhere = tmp.join("a/different/place");
    std::fs::create_dir_all(&elsewhere).unwrap();
    copy_tracked(&root, &elsewhere);
    let target = elsewhere.join("target/guest");
    let cargo_home = std::env::var("CARGO_HOME").ok().or_else(|| std::env::var("HOME").ok().map(|h| format!("{h}/.cargo"))).unwrap();
    // The same flags as host/build.rs, with this copy's own root.
    let flags = [format!("--remap-path-prefix={cargo_home}=/cargo"), format!("--remap-path-prefix={}=/build", elsewhere.display())].join("\x1f");
    let mut cargo = common::cmd(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    let status = common::toolchain(&mut cargo)
        .current_dir(&elsewhere)
        .args(["build", "--locked", "-p", "runbook-policy", "--lib", "--target", "wasm32-unknown-unknown", "--profile", "component", "--target-dir"])
        .arg(&target)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env("CARGO_ENCODED_RUSTFLAGS", flags)
        .status()
        .expect("cargo");
    assert!(status.success());
    let core = std::fs::read(target.join("wasm32-unknown-unknown/component/runbook_policy.wasm")).unwrap();
    let component = wit_component::ComponentEncoder::default().module(&core).unwrap().validate(true).encode().unwrap();
    let sha = hex::encode(Sha256::digest(&component));
    assert_eq!(sha, runbook_host::module_sha256(), "the component built in {} differs", elsewhere.display());
}
