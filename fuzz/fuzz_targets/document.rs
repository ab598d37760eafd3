//! Document bytes (JSON or YAML) through parse, lint, envelope and prose: no panic, the same answers twice,
//! findings sorted by line, column and code, the envelope and prose canonical JSON, an envelope only for a
//! document whose lint has no blocking error.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let lint = runbook_policy::lint(data);
    let again = runbook_policy::lint(data);
    assert_eq!(format!("{:?}", lint.findings), format!("{:?}", again.findings), "lint is not deterministic");
    let keys: Vec<_> = lint.findings.iter().map(|f| (f.pos.line, f.pos.column, f.code)).collect();
    assert!(keys.windows(2).all(|w| w[0] <= w[1]), "findings are not sorted: {keys:?}");
    match runbook_policy::envelope(data) {
        Ok(e) => {
            common::assert_canonical("the envelope", &e);
            assert_eq!(runbook_policy::envelope(data).ok().as_deref(), Some(e.as_str()), "envelope is not deterministic");
        }
        Err(blocking) => {
            assert!(blocking.iter().all(|f| lint.findings.iter().any(|g| g.code == f.code && g.pos == f.pos)), "a blocking finding lint does not report")
        }
    }
    if let Some(p) = runbook_policy::prose(data) {
        common::assert_canonical("the prose", &p);
    }
});
