//! The whole conformance suite, in `cargo test`: every vector and 5,000 generated cases through the four
//! implementations (the component through wasmtime, the native core, the component transpiled by jco in
//! Node, the component in Python's wasmtime), byte for byte; every replay also split by a session snapshot
//! and restored. Needs `conformance/setup --deps` once.

use std::path::Path;
use std::process::Command;

#[test]
fn four_implementations_agree_on_every_vector_and_generated_case() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // The component of this very build, so that no implementation can load stale bytes.
    let module = std::env::temp_dir().join(format!("runbook-conformance-{}.wasm", std::process::id()));
    std::fs::write(&module, runbook_host::COMPONENT).unwrap();
    let setup = Command::new("bash").arg(root.join("conformance/setup")).arg("--module").arg(&module).output().expect("bash");
    let _ = std::fs::remove_file(&module);
    assert!(
        setup.status.success(),
        "conformance/setup failed (run `conformance/setup --deps` once: it needs node, npm and python3):\n{}{}",
        String::from_utf8_lossy(&setup.stdout),
        String::from_utf8_lossy(&setup.stderr)
    );
    let generated = std::env::var("RUNBOOK_CONFORMANCE_GENERATED").unwrap_or_else(|_| "5000".into());
    let out = Command::new(env!("CARGO_BIN_EXE_runbook-conformance"))
        .current_dir(root)
        .args(["--generated", &generated, "--seed", "2026"])
        .output()
        .expect("the runner starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Shown by `cargo test -- --nocapture`, and on failure.
    println!("{stdout}");
    assert!(out.status.success(), "the conformance suite failed:\n{stdout}\n{}", stderr.lines().take(80).collect::<Vec<_>>().join("\n"));
    let last = stdout.lines().last().unwrap_or("");
    assert!(last.ends_with(" passed, 0 failed"), "{last}");
    for imp in ["rust-wasmtime", "rust-native", "node-jco", "python-wasmtime"] {
        assert!(stdout.lines().next().unwrap_or("").contains(imp), "{imp} did not run:\n{stdout}");
    }
}
