//! Builds the policy component that the host embeds.
//!
//! A nested cargo compiles `guest/` for `wasm32-unknown-unknown` into its own target directory
//! (`target/guest`: sharing the parent's would wait on the parent's lock forever), with the paths that
//! would otherwise leak into the bytes remapped, so that two checkouts in different directories give the
//! same component. wit-component then wraps the core module into a component, refusing any import.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    for p in ["guest/src", "guest/Cargo.toml", "wit", "Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    println!("cargo:rerun-if-env-changed=RUNBOOK_POLICY_CORE_WASM");

    let core = match env::var_os("RUNBOOK_POLICY_CORE_WASM") {
        // A prebuilt core module (for example from a reproducibility check); still componentized here.
        Some(p) => PathBuf::from(p),
        None => build_core(&root),
    };
    let bytes = std::fs::read(&core).unwrap_or_else(|e| panic!("reading {}: {e}", core.display()));
    let component = wit_component::ComponentEncoder::default()
        .module(&bytes)
        .expect("the guest module carries its WIT")
        .validate(true)
        .encode()
        .expect("encoding the component");
    check_no_imports(&component);
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    std::fs::write(out.join("runbook_policy.wasm"), &component).unwrap();
    // Hashed here, not at run time: every hook process would otherwise hash the 0.5 MB component again.
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(&component).iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=RUNBOOK_MODULE_SHA256={sha}");
    // Also leave it where other tools expect it, beside the guest build.
    let _ = std::fs::write(root.join("target/guest/runbook_policy.component.wasm"), &component);
}

fn build_core(root: &Path) -> PathBuf {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = root.join("target/guest");
    let cargo_home = env::var("CARGO_HOME").ok().or_else(|| env::var("HOME").ok().map(|h| format!("{h}/.cargo"))).unwrap_or_default();
    let flags = [format!("--remap-path-prefix={cargo_home}=/cargo"), format!("--remap-path-prefix={}=/build", root.display())].join("\x1f");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--locked", "-p", "runbook-policy", "--lib", "--target", "wasm32-unknown-unknown", "--profile", "component", "--target-dir"])
        .arg(&target_dir);
    // The parent's settings are for the host build, not this one.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PROFILE_RELEASE_LTO",
        "CARGO_LLVM_COV",
        "RUSTDOCFLAGS",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("CARGO_ENCODED_RUSTFLAGS", flags);
    let status = cmd.status().expect("running cargo for the guest");
    if !status.success() {
        panic!("building the policy component failed; is the wasm target installed? run `rustup target add wasm32-unknown-unknown`");
    }
    target_dir.join("wasm32-unknown-unknown/component/runbook_policy.wasm")
}

/// The product's promise is a module with no imports at all: no clock, no randomness, no files.
fn check_no_imports(component: &[u8]) {
    // Only the outermost component's imports count: nested shim components that describe the exported
    // interface's types have "imports" of their own, satisfied inside the component.
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(component) {
        match payload.expect("the component parses") {
            wasmparser::Payload::Version { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth -= 1,
            wasmparser::Payload::ComponentImportSection(s) if depth == 1 => {
                let n = s.count();
                assert_eq!(n, 0, "the policy component must have no imports, found {n}");
            }
            wasmparser::Payload::ImportSection(s) if depth == 1 => panic!("unexpected core imports: {}", s.count()),
            _ => {}
        }
    }
}
