//! Envelope derivation (parse, lint, derive, canonical JSON) for generated runbooks of 10, 100 and 1000
//! steps, written as YAML and as JSON: through the component (`Policy::envelope`, which includes a fresh
//! instance per call, as every document call of the host gets) and natively (`runbook_policy::envelope`).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use runbook_benches::*;
use runbook_host as host;

fn envelope(c: &mut Criterion) {
    let policy = host::Policy::load_with_cache(Some(&scratch_dir(env!("CARGO_TARGET_TMPDIR"), "envelope-cache"))).expect("load the component");
    for format in [Format::Yaml, Format::Json] {
        let mut g = c.benchmark_group(format!("envelope/{}", format.as_str()));
        g.sample_size(30);
        for steps in [10usize, 100, 1000] {
            let doc = generate_runbook(steps, format);
            let doc = doc.as_bytes();
            assert_lints_ok(doc, runbook_policy::Structure::P2);
            let native = runbook_policy::envelope(doc).expect("native envelope");
            let component = policy.derive_envelope(doc).expect("no trap").expect("component envelope");
            assert_eq!(native, component, "the component and the native core give the same envelope bytes");
            assert!(native.contains("\"initial\":\"step-0\""), "envelope has the first step");
            g.throughput(Throughput::Bytes(doc.len() as u64));
            g.bench_with_input(BenchmarkId::new("component", steps), doc, |b, doc| {
                b.iter(|| black_box(policy.derive_envelope(black_box(doc)).unwrap().unwrap()))
            });
            g.bench_with_input(BenchmarkId::new("native", steps), doc, |b, doc| b.iter(|| black_box(runbook_policy::envelope(black_box(doc)).unwrap())));
        }
        g.finish();
    }
}

criterion_group!(benches, envelope);
criterion_main!(benches);
