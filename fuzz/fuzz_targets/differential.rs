//! The component through wasmtime (the bytes every host embeds, loaded by `runbook_host::Policy`) against
//! the same core linked natively: any byte of difference is a crash. An odd first byte: the rest is a
//! document (lint findings, envelope, prose). An even one: the rest is event lines fed to a session of the
//! corpus document it chooses (every decision line, then the report and a snapshot).
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use runbook_host::{Policy, Severity};

/// The component, compiled in `init` (not counted against the first input's time).
fn policy() -> &'static Policy {
    runbook_host::files::shared_policy().expect("the embedded component loads")
}

fn findings_native(doc: &[u8]) -> Vec<String> {
    runbook_policy::lint(doc)
        .findings
        .iter()
        .map(|f| format!("{}|{}|{}|{}|{}|{}", f.code, f.severity.as_str(), f.pos.line, f.pos.column, f.pointer, f.message))
        .collect()
}

fn findings_component(p: &Policy, doc: &[u8]) -> Vec<String> {
    p.lint(doc)
        .expect("lint through the component")
        .findings
        .iter()
        .map(|f| {
            let sev = if f.severity == Severity::Error { "error" } else { "warning" };
            format!("{}|{sev}|{}|{}|{}|{}", f.code, f.line, f.column, f.pointer, f.message)
        })
        .collect()
}

fuzz_target!(init: { policy(); }, |data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let p = policy();
    {
        if first & 1 == 1 {
            assert_eq!(findings_native(rest), findings_component(p, rest), "lint differs");
            let native = runbook_policy::envelope(rest).map_err(|f| f.len());
            let comp = p.derive_envelope(rest).expect("envelope through the component").map_err(|f| f.len());
            assert_eq!(native, comp, "envelope differs");
            assert_eq!(runbook_policy::prose(rest), p.prose(rest).expect("prose through the component"), "prose differs");
            return;
        }
        let doc = common::DOCUMENTS[(first >> 1) as usize % common::DOCUMENTS.len()];
        let text = String::from_utf8_lossy(rest);
        let mut native = runbook_policy::Session::new(doc);
        let mut comp = p.session(doc).expect("a session in the component");
        for (i, line) in text.split('\n').take(64).enumerate() {
            assert_eq!(native.handle_line(line), comp.handle_line(line), "decision {i} differs for {line:?}");
        }
        assert_eq!(native.report(), comp.report().expect("report through the component"), "report differs");
        assert_eq!(native.snapshot(), comp.snapshot().expect("snapshot through the component"), "snapshot differs");
    }
});
