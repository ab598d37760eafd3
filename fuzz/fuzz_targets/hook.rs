//! Hook payloads into the Claude Code adapter, as `runbook-host hook` handles them (parse, then decide on
//! the session's run resumed from its bundle, one process per event in production, here one call): no
//! panic, whatever the payload; and the evidence the adapter writes is always evidence it can replay: no
//! later event of the session is refused as tampered or decided otherwise than recorded.
//! The first byte chooses the corpus document; the rest is payload lines, each for session `s`.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use runbook_host::adapters::hooks as hook;
use std::sync::Arc;

/// The process's one policy (the bundle writer uses the same one for the receipt): compiled in `init`, so
/// that compiling the component is not counted against the first input's time.
fn policy() -> &'static Arc<runbook_host::Policy> {
    runbook_host::files::shared_policy().expect("the embedded component loads")
}

fn handle(policy: &Arc<runbook_host::Policy>, cfg: &hook::Config, payload: &[u8]) {
    let Ok(ev) = hook::claude::parse(payload) else { return };
    let mut timing = hook::Timing::default();
    if let Err(e) = hook::handle(Arc::clone(policy), cfg, &ev, &mut timing) {
        let m = format!("{e:#}");
        assert!(
            !m.contains("tampered") && !m.contains("differently than recorded") && !m.contains("chain is broken"),
            "the adapter cannot replay its own evidence: {m}"
        );
        let _ = hook::claude::render(ev.name(), &hook::Answer::Deny(m));
    }
}

fuzz_target!(init: { policy(); }, |data: &[u8]| {
    let Some((doc, rest)) = common::split(data) else { return };
    // On a tmpfs where there is one: the adapter fsyncs every record, which a disk makes the whole cost.
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }.join(format!("runbook-fuzz-hook-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let doc_path = dir.join(if doc.first() == Some(&b'{') { "runbook.json" } else { "runbook.yaml" });
    std::fs::write(&doc_path, doc).unwrap();
    let cfg = hook::Config {
        runbook: Some(doc_path.to_string_lossy().into_owned()),
        registry: {
            // No cache: the fuzzer's documents are local files, and nothing may be written outside `dir`.
            let mut s = runbook_host::registry::Settings::new(&dir.join("registry").to_string_lossy());
            s.cache = None;
            s
        },
        receipt_key: None,
        guard_paths: Vec::new(),
        runs: dir.join("runs"),
        profile: runbook_host::Profile::R2,
        keep_working: false,
        lock_timeout: std::time::Duration::from_millis(100),
        allowed_signers: None,
        allow_software_keys: false,
        allowlist: None,
        client: hook::Client::Claude,
        settings: Vec::new(),
    };
    let p = policy();
    handle(p, &cfg, br#"{"session_id":"s","hook_event_name":"SessionStart","source":"startup"}"#);
    for line in rest.split(|b| *b == b'\n').take(32) {
        handle(p, &cfg, line);
    }
    handle(p, &cfg, br#"{"session_id":"s","hook_event_name":"SessionEnd"}"#);
});
