//! Start-up costs of the host: loading the component from a warm precompiled cache
//! (`Policy::load_with_cache(Some(dir))`, the cache file written by a first load in the setup), a new
//! session (`policy.session(doc)`: since sessions leave their instance to the next, on a kept instance
//! whose module already analysed the document, what a resident server or proxy does for every run of a
//! runbook after the first), the same with a document never seen (`-new-document`: the analysis is made),
//! the same plus its admission (`start`), the cheapest export call on the shared instance
//! (`policy.version()`, the floor of every document call), and the native session for comparison (which
//! keeps its analyses the same way).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use runbook_benches::*;
use runbook_host as host;

const DOC: &[u8] = DECISION_RUNBOOK.as_bytes();

fn instantiate(c: &mut Criterion) {
    assert_lints_ok(DOC, runbook_policy::Structure::P2);
    // Which module these numbers are of.
    eprintln!("instantiate: component sha256 {} ({} bytes)", host::module_sha256(), host::COMPONENT.len());
    // A cache directory of this bench's own, emptied first so that the setup's load is the cold one that
    // writes the cache file.
    let dir = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "instantiate-cache");
    for e in std::fs::read_dir(&dir).expect("read the cache directory").flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    let cold = host::Policy::load_with_cache(Some(&dir)).expect("cold load");
    drop(cold);
    let cached: Vec<_> =
        std::fs::read_dir(&dir).expect("read the cache directory").flatten().filter(|e| e.path().extension().is_some_and(|x| x == "cwasm")).collect();
    assert_eq!(cached.len(), 1, "the first load writes one precompiled file");

    let mut g = c.benchmark_group("instantiate");
    g.bench_function("load_with_cache-warm", |b| b.iter(|| black_box(host::Policy::load_with_cache(Some(black_box(&dir))).expect("warm load"))));

    let policy = host::Policy::load_with_cache(Some(&dir)).expect("warm load");
    assert_eq!(policy.version().expect("version"), runbook_policy::VERSION);
    g.bench_function("fresh-instance+version-call", |b| b.iter(|| black_box(policy.version().unwrap())));
    g.bench_function("component-session", |b| b.iter(|| black_box(policy.session(black_box(DOC)).expect("session"))));
    // A document not analysed before, each time: the bytes of DOC with a comment that numbers it. The
    // session is dropped inside the routine, so each takes the instance the one before left.
    let mut n = 0u64;
    let mut new_document = || {
        n += 1;
        [DOC, format!("\n# {n}\n").as_bytes()].concat()
    };
    g.bench_function("component-session-new-document", |b| {
        b.iter_batched(&mut new_document, |d| drop(black_box(policy.session(black_box(&d)).expect("session"))), criterion::BatchSize::SmallInput)
    });
    g.bench_function("component-session+start", |b| {
        b.iter(|| {
            let mut s = policy.session(black_box(DOC)).expect("session");
            black_box(s.handle_line(START_R1));
            s
        })
    });
    g.bench_function("native-session", |b| b.iter(|| black_box(runbook_policy::Session::new(black_box(DOC)))));
    g.bench_function("native-session-new-document", |b| {
        b.iter_batched(&mut new_document, |d| drop(black_box(runbook_policy::Session::new(black_box(&d)))), criterion::BatchSize::SmallInput)
    });
    g.bench_function("native-session+start", |b| {
        b.iter(|| {
            let mut s = runbook_policy::Session::new(black_box(DOC));
            black_box(s.handle_line(START_R1));
            s
        })
    });
    g.finish();
}

criterion_group!(benches, instantiate);
criterion_main!(benches);
