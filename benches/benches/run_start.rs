//! What the module does when a run starts and when a client asks for its status, beyond the session
//! (`instantiate` measures that): `bundle-create`, the effects of a new bundle (its `run.json`, the
//! document, the envelope and the chain's `h0`), and `prose`, the document's text an MCP client's
//! `runbook_status` shows. Both read the analysis the module keeps for the document, so a run of a runbook
//! seen before derives neither the analysis nor the envelope again. Natively and through the component on
//! the shared instance; every row is first checked to give the same bytes.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use runbook_benches::*;
use runbook_host as host;

const DOC: &[u8] = DECISION_RUNBOOK.as_bytes();
const FACTS: &str = r#"{"run_id":"r-20261202T000000Z-000000000001","at":1780000000000,"reference":"runbook.yaml","trust":"local","pinned_sha256":null,"provenance":null,"module_sha256":"0000000000000000000000000000000000000000000000000000000000000000","host":{"name":"runbook-host","version":"0.1.0"},"adapter":"mcp-proxy","git":null}"#;

fn run_start(c: &mut Criterion) {
    assert_lints_ok(DOC, runbook_policy::Structure::P2);
    let policy = host::files::shared_policy().expect("load the policy module");
    let native = runbook_policy::bundle::create(DOC, FACTS).expect("native bundle-create");
    let component = policy.bundle_create(DOC, FACTS).expect("bundle-create").expect("the module creates the bundle");
    assert_eq!(component.len(), native.len());
    for (c, n) in component.iter().zip(&native) {
        assert_eq!((c.path.as_str(), c.bytes.as_slice()), (n.path.as_str(), n.bytes.as_slice()), "the same effects both ways");
    }
    assert!(native.iter().any(|e| e.path.ends_with("/envelope.json")), "the document has an envelope");
    let prose = runbook_policy::prose(DOC).expect("the document parses");
    assert_eq!(policy.prose(DOC).expect("prose").as_deref(), Some(prose.as_str()));

    let mut g = c.benchmark_group("run-start");
    g.bench_function("native-bundle-create", |b| b.iter(|| black_box(runbook_policy::bundle::create(black_box(DOC), FACTS))));
    g.bench_function("component-bundle-create", |b| b.iter(|| black_box(policy.bundle_create(black_box(DOC), FACTS).unwrap())));
    g.bench_function("native-prose", |b| b.iter(|| black_box(runbook_policy::prose(black_box(DOC)))));
    g.bench_function("component-prose", |b| b.iter(|| black_box(policy.prose(black_box(DOC)).unwrap())));
    g.finish();
}

criterion_group!(benches, run_start);
criterion_main!(benches);
