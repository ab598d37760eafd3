//! `verify` of a small finished bundle (conformance vector `end-library-completed`: 17 events, a completed
//! run), each row answering the same checks of the same bytes:
//!
//! - `native`: the core's `verify::verify`, natively, the bundle's entries in memory;
//! - `component`: `Policy::verify_bundle` on a kept instance (after the first call, the instance and the
//!   module's memo of the document's analysis are there already, as in a proxy or a resident server);
//! - `host-memory`: the host's whole `verify` (`bundle::verify::verify_bundle`: the listing, the events
//!   streamed to the module's `verifier`, the receipt's signature check) reading a `MemoryBundle`;
//! - `host-directory`: the same reading the bundle's directory through `cap-std` (what
//!   `runbook-host verify` does, less the process and the load).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use runbook_host::bundle::verify::{self, MemoryBundle};
use runbook_host::BundleItem;
use std::path::Path;

fn verify_small(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/vectors/run/end-library-completed/expected/r-20261202T000000Z-000000000001");
    let entries = verify::entries_at(&dir).unwrap_or_else(|f| panic!("{}: {}", f.place, f.message));
    let held = MemoryBundle(entries.iter().filter_map(|(n, i)| if let BundleItem::File(b) = i { Some((n.clone(), b.clone())) } else { None }).collect());
    let native: Vec<(String, runbook_policy::verify::Item)> = entries
        .iter()
        .map(|(n, i)| {
            let i = match i {
                BundleItem::File(b) => runbook_policy::verify::Item::File(b.clone()),
                BundleItem::Directory(n) => runbook_policy::verify::Item::Dir(*n),
                BundleItem::Other => runbook_policy::verify::Item::Other,
            };
            (n.clone(), i)
        })
        .collect();
    let sha = runbook_host::module_sha256();
    let options = runbook_policy::verify::Options { module_sha256: sha.to_string(), signers_sha256: None };
    let policy = runbook_host::files::shared_policy().expect("load the policy module");
    // Every row must verify the bundle, or it measures a refusal.
    assert!(runbook_policy::verify::verify(&native, &options).failure.is_none());
    assert!(policy.verify_bundle(&entries, sha, None).expect("verify_bundle").failure.is_none());
    let d = cap_std::fs::Dir::open_ambient_dir(&dir, cap_std::ambient_authority()).expect("open the bundle");
    for o in [verify::verify_bundle(&held, None, &[]), verify::verify_bundle(&d, None, &[])] {
        assert!(o.failure.is_none() && o.events == 17, "{:?}", o.failure.map(|f| f.message));
    }

    let mut g = c.benchmark_group("verify");
    g.bench_function("native", |b| b.iter(|| black_box(runbook_policy::verify::verify(black_box(&native), &options))));
    g.bench_function("component", |b| b.iter(|| black_box(policy.verify_bundle(black_box(&entries), sha, None).unwrap())));
    g.bench_function("host-memory", |b| b.iter(|| black_box(verify::verify_bundle(black_box(&held), None, &[]))));
    g.bench_function("host-directory", |b| b.iter(|| black_box(verify::verify_bundle(black_box(&d), None, &[]))));
    g.finish();
}

criterion_group!(benches, verify_small);
criterion_main!(benches);
