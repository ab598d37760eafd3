//! The envelope playground in a real browser: builds `playground/dist` from the component of this very build
//! (`runbook_host::COMPONENT`, written to a temporary file and passed to `playground/build`), then runs the
//! Node test suite `playground/tests/` (playwright-core driving Debian's Chromium), which starts this build's
//! `runbook-host playground` and compares every envelope, finding, decision and report the page shows with
//! what this build's CLI prints.
//!
//! It fails, never skips, when Chromium or Node is missing: CI installs them (`.ci/run`).

use crate::common::{self, repo, Tmp, BIN};
use std::path::PathBuf;
use std::process::Output;

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
    let node = common::cmd("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "no `node`: the playground's browser tests need Node.js 20 and npm (`apt-get install -y nodejs npm`)"
    );

    let root = repo();
    let tmp = Tmp::new("playground");
    let component = tmp.join("policy.wasm");
    std::fs::write(&component, runbook_host::COMPONENT).expect("write the component");

    let build = common::cmd("bash").arg(root.join("playground/build")).arg(&component).current_dir(&root).output().expect("run playground/build");
    assert!(build.status.success(), "{}", show("playground/build", &build));
    let recorded = std::fs::read_to_string(root.join("playground/dist/module.sha256")).expect("playground/dist/module.sha256");
    assert_eq!(recorded.trim(), runbook_host::module_sha256(), "playground/dist is of this build's component");

    let tests = common::cmd("node")
        .args(["--test", "--test-reporter=spec", "playground/tests/"])
        .current_dir(&root)
        .env("RUNBOOK_HOST", BIN)
        .env("CHROMIUM", &chromium)
        .env("PLAYGROUND_DIST", root.join("playground/dist"))
        .output()
        .expect("run node --test playground/tests/");
    let report = show("node --test playground/tests/", &tests);
    // The measurements (load time to the first envelope, bytes transferred) are printed by the suite.
    println!("{report}");
    assert!(tests.status.success(), "{report}");
}

/// `runbook-host playground --runs DIR`: the run folders under DIR, read-only. `/runs/index.json` lists a
/// folder holding a regular run.json (not a symbolic link to one); `/runs/<run-id>/<file>` serves a bundle's
/// top-level regular file, and refuses a climb out, a hidden name, a subfolder's file, a symbolic link (to a
/// file outside, or a run folder that is one) and a foreign Host.
#[test]
fn playground_serves_runs_read_only() {
    use std::io::{BufRead, BufReader, Read, Write};
    let tmp = Tmp::new("playground-runs");
    let (dist, runs) = (tmp.join("dist"), tmp.join("runs"));
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("policy.wasm"), runbook_host::COMPONENT).unwrap();
    std::fs::write(dist.join("module.sha256"), format!("{}\n", runbook_host::module_sha256())).unwrap();
    std::fs::write(dist.join("viewer.html"), "v").unwrap();
    let run = runs.join("r-1");
    std::fs::create_dir_all(run.join("approvals")).unwrap();
    std::fs::write(run.join("run.json"), "{\"run_id\":\"r-1\"}").unwrap();
    std::fs::write(run.join("approvals/a.json"), "{}").unwrap();
    std::fs::write(run.join(".hidden"), "h").unwrap();
    std::fs::write(tmp.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(tmp.join("secret.txt"), run.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(&run, runs.join("r-linked")).unwrap();
    std::fs::create_dir_all(runs.join("not-a-run")).unwrap();

    let mut child = common::cmd(BIN)
        .args(["playground", "--port", "0", "--dir"])
        .arg(&dist)
        .arg("--runs")
        .arg(&runs)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start runbook-host playground");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port: u16 = line.trim().trim_start_matches("http://127.0.0.1:").trim_end_matches('/').parse().expect(&line);
    let get = |target: &str, host: &str| -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
    };
    let here = format!("127.0.0.1:{port}");

    let (status, body) = get("/runs/index.json", &here);
    assert_eq!(status, 200, "{body}");
    let index: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<&str> = index["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r-1"], "only a real folder with a run.json: {body}");
    let entries = &index["runs"][0]["entries"];
    assert_eq!(entries, &serde_json::json!([["approvals", 1], ["link.txt", null], ["run.json", "file"]]), "{body}");
    assert_eq!(get("/runs/r-1/run.json", &here), (200, "{\"run_id\":\"r-1\"}".to_string()));
    for bad in [
        "/runs/r-1/link.txt",
        "/runs/r-linked/run.json",
        "/runs/r-1/../../secret.txt",
        "/runs/r-1/%2e%2e/%2e%2e/secret.txt",
        "/runs/..%2fsecret.txt",
        "/runs/r-1/.hidden",
        "/runs/r-1/approvals/a.json",
        "/runs/r-1/approvals",
        "/runs/not-a-run/run.json",
        "/runs/r-1/",
        "/runs/r-1/missing.json",
    ] {
        let (status, body) = get(bad, &here);
        assert_eq!(status, 404, "{bad}: {body}");
        assert!(!body.contains("secret"), "{bad}");
    }
    assert_eq!(get("/runs/index.json", &format!("attacker.example:{port}")).0, 421);
    let _ = child.kill();
    let _ = child.wait();
}
