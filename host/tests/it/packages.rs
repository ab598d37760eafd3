//! The Python and JavaScript packages (packages/) ship the very component this host embeds: their
//! `policy.wasm` is these bytes and the sha256 each package checks at load is this one. A change to the
//! guest makes this test fail until `bash packages/sync-component` has copied the new bytes over.

use crate::common::repo;

const COPIES: [&str; 2] = ["packages/python/src/runbook_policy/policy.wasm", "packages/js/policy.wasm"];
/// Where each package records the sha256 it refuses any other bytes against.
const RECORDED: [&str; 2] = ["packages/python/src/runbook_policy/_policy.py", "packages/js/src/component.js"];

#[test]
fn the_packages_ship_the_embedded_component_and_check_its_sha256() {
    let sha = runbook_host::module_sha256();
    for copy in COPIES {
        let bytes = std::fs::read(repo().join(copy)).unwrap_or_else(|e| panic!("{copy}: {e}"));
        assert!(bytes == runbook_host::COMPONENT, "{copy} is not the embedded component ({sha}): run `bash packages/sync-component`");
    }
    for file in RECORDED {
        let text = std::fs::read_to_string(repo().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let line = text.lines().find(|l| l.contains("COMPONENT_SHA256 =")).unwrap_or_else(|| panic!("{file} records no COMPONENT_SHA256"));
        assert!(line.contains(sha), "{file} records another sha256 than the embedded component's {sha}: {line}");
    }
}
