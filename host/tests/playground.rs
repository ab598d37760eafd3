//! The envelope playground in a real browser: builds `playground/dist` from the component of this very build
//! (`runbook_host::COMPONENT`, written to a temporary file and passed to `playground/build`), then runs the
//! Node test suite `playground/tests/` (playwright-core driving Debian's Chromium), which starts this build's
//! `runbook-host playground` and compares every envelope, finding, decision and report the page shows with
//! what this build's CLI prints.
//!
//! It fails, never skips, when Chromium or Node is missing: CI installs them (`.ci/run`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_runbook-host");

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

fn show(what: &str, out: &Output) -> String {
    format!("{what}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn playground_in_chromium() {
    let chromium = std::env::var_os("CHROMIUM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        chromium.exists(),
        "no Chromium at {}: the playground's browser tests need Debian's Chromium; install it with `apt-get install -y chromium` (or set CHROMIUM)",
        chromium.display()
    );
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "no `node`: the playground's browser tests need Node.js 20 and npm (`apt-get install -y nodejs npm`)"
    );

    let root = workspace_root();
    let tmp = std::env::temp_dir().join(format!("runbook-host-playground-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("create a temporary directory");
    let component = tmp.join("policy.wasm");
    std::fs::write(&component, runbook_host::COMPONENT).expect("write the component");

    let build = Command::new("bash").arg(root.join("playground/build")).arg(&component).current_dir(&root).output().expect("run playground/build");
    assert!(build.status.success(), "{}", show("playground/build", &build));
    let recorded = std::fs::read_to_string(root.join("playground/dist/module.sha256")).expect("playground/dist/module.sha256");
    assert_eq!(recorded.trim(), runbook_host::module_sha256(), "playground/dist is of this build's component");

    let tests = Command::new("node")
        .args(["--test", "--test-reporter=spec", "playground/tests/"])
        .current_dir(&root)
        .env("RUNBOOK_HOST", BIN)
        .env("CHROMIUM", &chromium)
        .env("PLAYGROUND_DIST", root.join("playground/dist"))
        .output()
        .expect("run node --test playground/tests/");
    let _ = std::fs::remove_dir_all(&tmp);
    let report = show("node --test playground/tests/", &tests);
    // The measurements (load time to the first envelope, bytes transferred) are printed by the suite.
    println!("{report}");
    assert!(tests.status.success(), "{report}");
}
