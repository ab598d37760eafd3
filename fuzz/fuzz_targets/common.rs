#![allow(dead_code)]
// Shared by the targets: the corpus documents a target's first byte chooses from, and the canonical-form
// check every artifact of the module must pass.

/// The bundled examples' documents (one of each structure and format), built into the target.
pub const DOCUMENTS: [&[u8]; 7] = [
    include_bytes!("../../examples/rotate-credentials/runbook.yaml"),
    include_bytes!("../../examples/incident-rollback/runbook.yaml"),
    include_bytes!("../../examples/certificate-renewal/runbook.yaml"),
    include_bytes!("../../examples/read-only-investigation/runbook.yaml"),
    include_bytes!("../../examples/executive-snapshot/runbook.json"),
    include_bytes!("../../examples/broken/runbook.yaml"),
    include_bytes!("../../host/tests/claude/say-hello.yaml"),
];

/// The document the first byte names, and the rest of the input.
pub fn split(data: &[u8]) -> Option<(&'static [u8], &[u8])> {
    let (first, rest) = data.split_first()?;
    Some((DOCUMENTS[*first as usize % DOCUMENTS.len()], rest))
}

/// Panics unless `text` is RFC 8785 canonical JSON (what every host writes and compares byte for byte).
pub fn assert_canonical(what: &str, text: &str) {
    match runbook_policy::canonicalize(text) {
        Ok(c) => assert_eq!(c, text, "{what} is not canonical"),
        Err(e) => panic!("{what} is not JSON: {e}: {text}"),
    }
}
