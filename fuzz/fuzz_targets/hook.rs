//! Hook payloads into the Claude Code adapter, decided as `runbook-host hook` decides them, with
//! everything in memory (`hooks::MemoryHook`: the session store, the bundle in a `MemoryStore`, the
//! approval channel; the session's run resident between events, as the resident server keeps it): no
//! panic, whatever the payload; and the evidence the adapter writes is always evidence it can replay:
//! at the end, the session's run is resumed from the store by a full replay (`Run::resume_in`, what a
//! command-mode process does), which must not be refused as tampered (`RunError::Tampered`, by type) and
//! must reach the resident run's chain head and event count. One replay at the end checks what one
//! after every event would: the replay checks every record in order, so a prefix that did not replay
//! would fail it too (replaying every 8 events as well cost a third of the executions).
//! The first byte chooses the corpus document; the rest is payload lines, each for session `s`.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use runbook_host::adapters::hooks as hook;
use runbook_host::run::RunError;
use std::sync::{Arc, OnceLock};

/// The process's one policy (the bundle writer uses the same one for the receipt): compiled in `init`, so
/// that compiling the component is not counted against the first input's time.
fn policy() -> &'static Arc<runbook_host::Policy> {
    runbook_host::files::shared_policy().expect("the embedded component loads")
}

/// The corpus documents, resolved once (from a scratch directory, as the hook would resolve a file).
fn documents() -> &'static Vec<runbook_host::registry::Resolved> {
    static D: OnceLock<Vec<runbook_host::registry::Resolved>> = OnceLock::new();
    D.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("runbook-fuzz-hook-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = common::DOCUMENTS
            .iter()
            .map(|doc| {
                let p = dir.join(if doc.first() == Some(&b'{') { "runbook.json" } else { "runbook.yaml" });
                std::fs::write(&p, doc).unwrap();
                runbook_host::registry::resolve(&p.to_string_lossy(), "unused").expect("a corpus document resolves")
            })
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        out
    })
}

fn config() -> &'static hook::Config {
    static C: OnceLock<hook::Config> = OnceLock::new();
    C.get_or_init(|| hook::Config {
        runbook: Some("runbook.yaml".into()),
        registry: {
            let mut s = runbook_host::registry::Settings::new("memory/registry");
            s.cache = None;
            s
        },
        receipt_key: None,
        guard_paths: Vec::new(),
        runs: "memory".into(),
        profile: runbook_host::Profile::R2,
        keep_working: false,
        lock_timeout: std::time::Duration::from_millis(100),
        allowed_signers: None,
        allow_software_keys: false,
        allowlist: None,
        client: hook::Client::Claude,
        settings: Vec::new(),
    })
}

/// Panics when `e` says the adapter's own evidence does not replay.
fn check(e: &anyhow::Error, what: &str) {
    if let Some(RunError::Tampered(m)) = e.downcast_ref::<RunError>() {
        panic!("the adapter cannot replay its own evidence ({what}): {m}");
    }
}

/// Replays the session's run from the store and compares it with the resident one.
fn replays(h: &mut hook::MemoryHook) {
    if h.state("s").is_none() {
        return;
    }
    let replayed = h.replay(Arc::clone(policy()), config(), "s");
    match replayed {
        Err(e) => check(&e, "replay"),
        Ok((again, r)) => {
            if let Some(run) = h.run("s") {
                assert_eq!(r.events, run.events_recorded(), "the replay counts other events than the run recorded");
                assert_eq!(again.chain_head(), run.chain_head(), "the replay ends at another chain head");
            }
        }
    }
}

fn handle(h: &mut hook::MemoryHook, payload: &[u8]) {
    let Ok(ev) = hook::claude::parse(payload) else { return };
    if let Err(e) = h.handle(Arc::clone(policy()), config(), &ev) {
        check(&e, ev.name());
        let _ = hook::claude::render(ev.name(), &hook::Answer::Deny(format!("{e:#}")));
    }
}

fuzz_target!(init: { policy(); documents(); }, |data: &[u8]| {
    let Some((first, rest)) = data.split_first() else { return };
    let doc = documents()[*first as usize % common::DOCUMENTS.len()].clone();
    let clock = runbook_host::clock::Clock::manual(1_780_000_000_000);
    let mut h = hook::MemoryHook::new(runbook_host::bundle::MemoryStore::new(), clock.clone(), Some(doc));
    handle(&mut h, br#"{"session_id":"s","hook_event_name":"SessionStart","source":"startup"}"#);
    for (i, line) in rest.split(|b| *b == b'\n').take(32).enumerate() {
        clock.set(1_780_000_000_000 + 1_000 * (i as u64 + 1));
        handle(&mut h, line);
    }
    handle(&mut h, br#"{"session_id":"s","hook_event_name":"SessionEnd"}"#);
    replays(&mut h);
});
