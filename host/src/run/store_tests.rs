//! A run on a memory store writes what the same run writes on disk, byte for byte.

use super::*;
use crate::bundle::{DirStore, MemoryStore, Store};
use std::collections::BTreeMap;

const DOC: &[u8] = include_bytes!("../../../examples/read-only-investigation/runbook.yaml");

fn resolved(dir: &Path) -> Resolved {
    let p = dir.join("runbook.yaml");
    std::fs::write(&p, DOC).unwrap();
    crate::registry::resolve(&p.to_string_lossy(), "unused").unwrap()
}

/// One run, every time read from `clock`, set before each event.
fn drive(store: SharedStore, doc: &Resolved, clock: &Clock) -> Run {
    let policy = Arc::clone(crate::files::shared_policy().unwrap());
    let env: Value = serde_json::from_str(&policy.envelope(&doc.bytes).unwrap().unwrap()).unwrap();
    let tools: Vec<String> = env["capabilities"].as_object().unwrap().values().filter_map(|c| c["tool"].as_str().map(str::to_string)).collect();
    let claim = Claim {
        profile: Profile::R1,
        allowlist: tools.clone(),
        risk_ceiling: Risk::Irreversible,
        coverage: Coverage::Complete,
        agent: "test".into(),
        available: None,
    };
    clock.set(1_780_000_000_000);
    let git = serde_json::from_str(&policy.git_state(None, b"").unwrap()).unwrap();
    let facts = BundleFacts { clock: clock.clone(), host: Some(("runbook-host".into(), "0.0.0-test".into())), git: Some(git) };
    let opts = RunOptions { facts, run_id: Some("r-same".into()), ..Default::default() };
    let (mut run, start) = Run::create_in(policy, doc, claim, store, "test", Guard::default(), opts).unwrap();
    assert!(start.allowed(), "{}", start.explanation);
    for (i, tool) in tools.iter().enumerate() {
        clock.set(1_780_000_001_000 + 1_000 * i as u64);
        run.invoke(tool, &json!({"i": i}), Some(&format!("c{i}")), None).unwrap();
        run.result(tool, &json!({"ok": i}), false, Some(&format!("c{i}"))).unwrap();
    }
    clock.set(1_780_000_100_000);
    run.final_output().unwrap();
    run.end(EndReason::Normal).unwrap();
    run
}

fn files_on_disk(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(root).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().is_dir() {
            for f in std::fs::read_dir(e.path()).unwrap().flatten() {
                out.insert(format!("{name}/{}", f.file_name().to_string_lossy()), std::fs::read(f.path()).unwrap());
            }
        } else {
            out.insert(name, std::fs::read(e.path()).unwrap());
        }
    }
    out
}

#[test]
fn a_run_in_memory_writes_the_bytes_of_the_same_run_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = resolved(tmp.path());
    let runs = tmp.path().join("runs");
    let clock = Clock::manual(0);
    let on_disk = drive(Arc::new(DirStore::create(&runs).unwrap()), &doc, &clock);
    let memory = MemoryStore::new();
    let in_memory = drive(memory.shared(), &doc, &clock);
    assert_eq!(on_disk.chain_head(), in_memory.chain_head());
    let disk = files_on_disk(&runs);
    assert!(disk.contains_key("r-same/receipt.json") && disk.contains_key("latest.json") && disk.contains_key("history.ndjson"), "{:?}", disk.keys());
    assert_eq!(disk, memory.files(), "the same files, byte for byte");
    assert!(!memory.on_disk() && in_memory.dir() == Path::new("memory/r-same"));

    // What the memory store holds is a bundle `verify` accepts, and it replays.
    let dumped = tmp.path().join("dumped");
    memory.dump(&dumped).unwrap();
    let d = cap_std::fs::Dir::open_ambient_dir(dumped.join("r-same"), cap_std::ambient_authority()).unwrap();
    let o = crate::bundle::verify::verify_bundle(&d, None, &[]);
    assert!(o.failure.is_none(), "{:?}", o.failure.map(|f| f.message));
    // Read from the store itself, without the files written anywhere, verify finds the same; and the same
    // failure, at the same place, once a decision is edited in both.
    let summary = |o: crate::bundle::verify::Outcome| (o.checks, o.failure.map(|f| (f.place, f.message)), o.run_id, o.outcome, o.events, o.reasons);
    let mut held = memory.bundle("r-same").expect("the run's directory");
    assert!(memory.bundle("r-other").is_none() && held.0.contains_key("receipt.json") && !held.0.keys().any(|k| k.contains('/')));
    assert_eq!(summary(crate::bundle::verify::verify_bundle(&held, None, &[])), summary(o));
    let events = String::from_utf8(held.0["events.ndjson"].clone()).unwrap();
    let edited = events.replacen(r#""decision":{"decision":"allow""#, r#""decision":{"decision":"deny""#, 1);
    assert_ne!(edited, events);
    held.0.insert("events.ndjson".into(), edited.clone().into_bytes());
    std::fs::write(dumped.join("r-same/events.ndjson"), &edited).unwrap();
    let (from_memory, from_disk) =
        (summary(crate::bundle::verify::verify_bundle(&held, None, &[])), summary(crate::bundle::verify::verify_bundle(&d, None, &[])));
    assert!(from_memory.1.as_ref().is_some_and(|f| f.0.starts_with("events.ndjson:")), "{:?}", from_memory.1);
    assert_eq!(from_memory, from_disk);
    std::fs::write(dumped.join("r-same/events.ndjson"), &events).unwrap();
    let policy = Arc::clone(crate::files::shared_policy().unwrap());
    let (again, r) =
        Run::resume_in(policy, memory.shared(), "r-same", in_memory.t0_ms(), Some(&in_memory.pin()), Guard::default(), RunOptions::default()).unwrap();
    assert_eq!((again.chain_head(), r.events), (in_memory.chain_head(), in_memory.events_recorded()));
}

#[test]
fn a_memory_run_asks_and_reads_approvals_through_its_channel() {
    use approvals::Channel;
    let ch = approvals::MemoryChannel::new();
    let id = ch.request(Some("s"), "t", "{\"a\":1}", "abc").unwrap();
    assert!(ch.any_requests() && ch.pending().unwrap().len() == 1);
    assert!(ch.answer(&id, "me", true, "other").is_err(), "an answer bound to another call is refused");
    ch.answer(&id, "me", true, "abc").unwrap();
    assert!(ch.answer(&id, "me", true, "abc").is_err(), "answered once");
    assert!(ch.pending().unwrap().is_empty());
    let (found, g) = ch.answered_for("abc").unwrap().unwrap();
    assert_eq!((found.as_str(), g.granted, g.approver.as_str()), (id.as_str(), true, "me"));
    ch.consume(&id).unwrap();
    assert!(ch.consume(&id).is_err() && !ch.any_requests() && ch.answered_for("abc").unwrap().is_none());
}
