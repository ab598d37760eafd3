//! The host's backstop bounds: an exhausted fuel budget or memory cap is a fail-closed `halt` with reason
//! `host-trap`, never a panic and never an allow.

use crate::common::{module_cache, repo};
use runbook_host::{HostError, Limits, Policy};

fn doc() -> Vec<u8> {
    std::fs::read(repo().join("examples/executive-snapshot/runbook.json")).unwrap()
}

const START: &str =
    r#"{"type":"start","at":0,"run_id":"r-1","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}"#;

#[test]
fn exhausted_fuel_halts_with_host_trap() {
    // Enough to construct a session, not enough to decide much.
    let p = Policy::load_with(Some(module_cache()), Limits { fuel_per_call: 2_000_000, ..Limits::default() }).unwrap();
    let mut s = p.session(&doc()).unwrap();
    let big = format!(r#"{{"type":"invoke","at":1,"tool":"quickbooks_profit_and_loss","arguments":{{"x":"{}"}}}}"#, "a".repeat(500_000));
    assert!(s.handle_line(START).contains(r#""decision":"allow""#));
    assert_eq!(s.handle_line(&big), r#"{"decision":"halt","deviation":null,"reason":"host-trap","refusals":[],"seq":1,"step":null}"#);
    assert!(s.trapped().is_some());
    // Every later event is answered `halt`, and no report is made up.
    assert_eq!(s.handle_line(r#"{"type":"end","at":2}"#), r#"{"decision":"halt","deviation":null,"reason":"halted","refusals":[],"seq":2,"step":null}"#);
    assert!(matches!(s.report(), Err(HostError::Trap(_))));
    assert!(s.is_over());
    // Module-level calls fail with a trap error, not a panic.
    let huge = format!("runbook_id: x\nversion: 1.0.0\ntitle: '{}'\n", "t".repeat(900_000));
    assert!(matches!(p.lint(huge.as_bytes()), Err(HostError::Trap(_))));
}

#[test]
fn memory_cap_is_a_trap_not_a_crash() {
    let p = Policy::load_with(Some(module_cache()), Limits { memory_cap: 2 << 20, ..Limits::default() }).unwrap();
    let huge = format!("{{\"runbook_id\":\"x\",\"version\":\"1.0.0\",\"title\":\"{}\"}}", "t".repeat(1_000_000));
    assert!(matches!(p.lint(huge.as_bytes()), Err(HostError::Trap(_))));
    // Small documents still work under the same cap.
    assert!(p.lint(&doc()).unwrap().ok);
}

#[test]
fn default_bounds_never_change_an_answer() {
    // The largest document the module accepts lints fine under the default bounds.
    let mut doc = String::from("{\"runbook_id\":\"x\",\"version\":\"1.0.0\",\"capabilities\":[\"t\"],\"steps\":[");
    let mut i = 0;
    while doc.len() < (1 << 20) - 200 {
        doc.push_str(&format!("{{\"id\":\"s{i}\",\"tool\":\"t\"}},"));
        i += 1;
    }
    doc.push_str(&format!("{{\"id\":\"s{i}\",\"tool\":\"t\",\"next\":\"end\"}}],\"terminals\":[\"end\"]}}"));
    let p = Policy::load_with_cache(Some(module_cache())).unwrap();
    let native = runbook_policy::lint(doc.as_bytes());
    let comp = p.lint(doc.as_bytes()).unwrap();
    assert_eq!(native.findings.len(), comp.findings.len());
    assert!(comp.findings.iter().any(|f| f.code == "limit"), "over 10,000 steps is a lint limit");
}

/// A session that ends cleanly leaves its instance, with the module's memo of the documents analysed
/// there, for the next session: a session on a kept instance answers byte for byte as the native module
/// does, whatever ran there before (another document, a run left in the middle); a restored one too. An
/// instance that trapped is never kept: the next session gets a new one and answers as before.
#[test]
fn a_kept_instance_answers_as_a_new_one_and_a_trapped_one_is_never_kept() {
    let p = Policy::load_with_cache(Some(module_cache())).unwrap();
    let snapshot_doc = doc();
    let other = std::fs::read(repo().join("examples/read-only-investigation/runbook.yaml")).unwrap();
    let invoke = r#"{"type":"invoke","at":1,"tool":"quickbooks_profit_and_loss","arguments":{"period":"2026-Q3"}}"#;
    let lines = [START, invoke, r#"{"type":"end","at":2}"#];
    // Each line's decision and the snapshot after it, from `p` and from the native module.
    let check = |p: &Policy, doc: &[u8], lines: &[&str]| {
        let mut native = runbook_policy::Session::new(doc);
        let mut s = p.session(doc).unwrap();
        for l in lines {
            assert_eq!(s.handle_line(l), native.handle_line(l), "{l}");
            assert_eq!(s.snapshot().unwrap(), native.snapshot());
        }
        s
    };
    assert_eq!(p.kept_instances(), 0);
    drop(check(&p, &other, &[START]));
    assert_eq!(p.kept_instances(), 1, "a session that ended cleanly leaves its instance");
    // The kept instance analysed `other`; this session is of another document and stops mid-run.
    let mut mid = check(&p, &snapshot_doc, &lines[..2]);
    assert_eq!(p.kept_instances(), 0, "the session took it");
    let snapshot = mid.snapshot().unwrap();
    drop(mid);
    assert_eq!(p.kept_instances(), 1);
    drop(check(&p, &snapshot_doc, &lines));
    drop(check(&p, &other, &[START]));
    // A restored session on a kept instance answers the rest of the run as the native one does.
    let mut native = runbook_policy::Session::restore(&snapshot_doc, &snapshot).unwrap();
    let mut restored = p.restore(&snapshot_doc, &snapshot).unwrap().unwrap();
    assert_eq!(restored.handle_line(lines[2]), native.handle_line(lines[2]));
    assert_eq!(restored.report().unwrap(), native.report());
    drop(restored);
    assert_eq!(p.kept_instances(), 1);

    // Enough fuel for a session, not for a 500 KB argument (as in exhausted_fuel_halts_with_host_trap).
    let q = Policy::load_with(Some(module_cache()), Limits { fuel_per_call: 2_000_000, ..Limits::default() }).unwrap();
    let mut s = q.session(&snapshot_doc).unwrap();
    s.handle_line(START);
    drop(s);
    assert_eq!(q.kept_instances(), 1);
    let mut s = q.session(&snapshot_doc).unwrap();
    s.handle_line(START);
    let big = format!(r#"{{"type":"invoke","at":1,"tool":"quickbooks_profit_and_loss","arguments":{{"x":"{}"}}}}"#, "a".repeat(500_000));
    assert!(s.handle_line(&big).contains("host-trap"));
    drop(s);
    assert_eq!(q.kept_instances(), 0, "a trapped instance is never kept");
    let mut native = runbook_policy::Session::new(&snapshot_doc);
    let mut s = q.session(&snapshot_doc).unwrap();
    for l in lines {
        assert_eq!(s.handle_line(l), native.handle_line(l), "{l}");
    }
    drop(s);

    // A burst of sessions that end together (a proxy's or a hook server's clients): sixteen instances are
    // kept, the rest dropped, and each kept one still answers as the native core does.
    let r = Policy::load_with(Some(module_cache()), Limits::default()).unwrap();
    let burst: Vec<_> = (0..20).map(|_| r.session(&snapshot_doc).unwrap()).collect();
    assert_eq!(r.kept_instances(), 0);
    drop(burst);
    assert_eq!(r.kept_instances(), 16, "at most sixteen kept");
    let again: Vec<_> = (0..16).map(|_| check(&r, &snapshot_doc, &lines)).collect();
    assert_eq!(r.kept_instances(), 0, "each new session took a kept one");
    drop(again);
    assert_eq!(r.kept_instances(), 16);
}

#[test]
fn a_verification_on_a_kept_instance_answers_as_on_a_new_one_and_gives_it_back() {
    use runbook_host::BundleItem;
    let dir = repo().join("conformance/vectors/run/end-library-completed/expected/r-20261202T000000Z-000000000001");
    let intact = runbook_host::bundle::verify::entries_at(&dir).unwrap();
    // The first allowed decision (the start's) recorded as a deny: the replay names its line.
    let edited: Vec<(String, BundleItem)> = intact
        .iter()
        .map(|(n, i)| match i {
            BundleItem::File(b) if n == "events.ndjson" => {
                let t = String::from_utf8(b.clone()).unwrap();
                (n.clone(), BundleItem::File(t.replacen(r#""decision":{"decision":"allow""#, r#""decision":{"decision":"deny""#, 1).into_bytes()))
            }
            _ => (n.clone(), i.clone()),
        })
        .collect();
    assert_ne!(format!("{edited:?}"), format!("{intact:?}"));
    let sha = runbook_host::module_sha256();
    // Each answer from a new Policy, so from an instance nothing ran in before.
    let fresh = |e: &[(String, BundleItem)]| Policy::load_with_cache(Some(module_cache())).unwrap().verify_bundle(e, sha, None).unwrap();
    let (good, bad) = (fresh(&intact), fresh(&edited));
    assert!(good.failure.is_none() && good.checks.len() > 8, "{good:?}");
    assert_eq!(bad.failure.as_ref().map(|f| f.0.as_str()), Some("events.ndjson:1"), "{bad:?}");

    let p = Policy::load_with_cache(Some(module_cache())).unwrap();
    // The instance the verifications get has analysed another document, and a run of it stopped mid-way.
    let mut s = p.session(&doc()).unwrap();
    s.handle_line(START);
    drop(s);
    assert_eq!(p.kept_instances(), 1);
    for (e, want) in [(&intact, &good), (&edited, &bad), (&intact, &good), (&edited, &bad)] {
        assert_eq!(format!("{:?}", p.verify_bundle(e, sha, None).unwrap()), format!("{want:?}"));
        assert_eq!(p.kept_instances(), 1, "verify_bundle gives the instance back");
        let v = p.verifier(e, sha, None).unwrap();
        assert_eq!(p.kept_instances(), 0, "the verifier holds it");
        assert_eq!(format!("{:?}", v.finish().unwrap()), format!("{want:?}"));
        assert_eq!(p.kept_instances(), 1, "a finished verifier gives it back");
    }
    // A session on the instance the verifications used answers as the native core.
    let mut native = runbook_policy::Session::new(&doc());
    let mut s = p.session(&doc()).unwrap();
    for l in [START, r#"{"type":"end","at":2}"#] {
        assert_eq!(s.handle_line(l), native.handle_line(l), "{l}");
    }
    assert_eq!(s.report().unwrap(), native.report());
    drop(s);
    assert_eq!(p.kept_instances(), 1);

    // An instance whose memory a large bundle grew past 32 MiB is not kept (its memory never shrinks).
    let mut large = intact.clone();
    large.push(("padding".into(), BundleItem::File(vec![b'x'; 40 << 20])));
    large.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(p.verify_bundle(&large, sha, None).is_ok());
    assert_eq!(p.kept_instances(), 0, "an instance grown past the bound is dropped");
    assert_eq!(format!("{:?}", p.verify_bundle(&intact, sha, None).unwrap()), format!("{good:?}"));
    assert_eq!(p.kept_instances(), 1);

    // A verification that runs out of fuel is a trap, and its instance is not given back.
    let q = Policy::load_with(Some(module_cache()), Limits { fuel_per_call: 2_000_000, ..Limits::default() }).unwrap();
    drop(q.session(&doc()).unwrap());
    assert_eq!(q.kept_instances(), 1);
    assert!(matches!(q.verify_bundle(&intact, sha, None), Err(HostError::Trap(_))));
    assert_eq!(q.kept_instances(), 0, "a trapped instance is never kept");
    drop(q.session(&doc()).unwrap());
    let v = q.verifier(&intact, sha, None);
    assert!(matches!(v.and_then(|v| v.finish()), Err(HostError::Trap(_))));
    assert_eq!(q.kept_instances(), 0, "a trapped verifier's instance is never kept");
}
