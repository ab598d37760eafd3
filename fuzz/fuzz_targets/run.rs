//! The whole-run API (`runbook_host::run::Run`) driven directly, with no adapter and no disk: a run on a
//! `MemoryStore` with a manual clock and an in-memory approval channel, fed arbitrary calls, results,
//! advances, verdicts, approvals (requested by the run, answered through the channel), ticks and raw
//! event lines. A crash is a panic; an error other than the run's own refusals; a run whose evidence
//! does not replay (`Run::resume_in` refused as `RunError::Tampered`, by type, or ending at another chain
//! head); or a finished run whose bundle `verify` refuses (read from the store: `MemoryStore::bundle`).
//! The first byte chooses the corpus document, the second the claim; each later pair of bytes is one
//! operation and its argument.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use runbook_host::bundle::MemoryStore;
use runbook_host::run::approvals::{Channel, MemoryChannel};
use runbook_host::run::{Claim, Guard, Run, RunError, RunOptions};
use runbook_host::{Coverage, EndReason, Profile, Risk};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

struct Doc {
    resolved: runbook_host::registry::Resolved,
    tools: Vec<String>,
    steps: Vec<String>,
}

fn policy() -> &'static Arc<runbook_host::Policy> {
    runbook_host::files::shared_policy().expect("the embedded component loads")
}

fn scratch() -> PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    base.join(format!("runbook-fuzz-run-{}", std::process::id()))
}

/// The corpus documents, resolved once, with their tools and steps (from the envelope).
fn documents() -> &'static Vec<Doc> {
    static D: OnceLock<Vec<Doc>> = OnceLock::new();
    D.get_or_init(|| {
        let dir = scratch();
        std::fs::create_dir_all(&dir).unwrap();
        let out = common::DOCUMENTS
            .iter()
            .map(|doc| {
                let p = dir.join(if doc.first() == Some(&b'{') { "runbook.json" } else { "runbook.yaml" });
                std::fs::write(&p, doc).unwrap();
                let resolved = runbook_host::registry::resolve(&p.to_string_lossy(), "unused").expect("a corpus document resolves");
                let env: Value = policy().envelope(doc).unwrap().ok().and_then(|e| serde_json::from_str(&e).ok()).unwrap_or_default();
                let mut tools: Vec<String> =
                    env["capabilities"].as_object().into_iter().flatten().filter_map(|(_, c)| c["tool"].as_str().map(str::to_string)).collect();
                tools.extend(["Bash".to_string(), "undeclared".to_string()]);
                let mut steps: Vec<String> = env["steps"].as_object().into_iter().flatten().map(|(k, _)| k.clone()).collect();
                steps.extend(env["terminals"].as_object().into_iter().flatten().map(|(k, _)| k.clone()));
                steps.push("nowhere".into());
                Doc { resolved, tools, steps }
            })
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        out
    })
}

/// An error the run may answer an input with; anything else is a failure of the host.
fn expected(e: &RunError) {
    match e {
        RunError::Refused(_) | RunError::Finished(_) => {}
        RunError::Tampered(m) => panic!("the run calls its own evidence tampered: {m}"),
        RunError::Evidence(m) => panic!("a memory store failed: {m}"),
        // A trap ends the run without a report (verify refuses that bundle): checked below.
        RunError::Module(_) => {}
        // `RunError` is non-exhaustive: a kind added later is a failure until this target knows it.
        other => panic!("an error the run should not answer with: {other}"),
    }
}

fuzz_target!(init: { policy(); documents(); }, |data: &[u8]| {
    let [d, c, ops @ ..] = data else { return };
    let doc = &documents()[*d as usize % common::DOCUMENTS.len()];
    let t0 = 1_780_000_000_000u64;
    let clock = runbook_host::clock::Clock::manual(t0);
    let store = MemoryStore::new();
    let channel = MemoryChannel::new();
    let claim = Claim {
        profile: [Profile::R0, Profile::R1, Profile::R2][*c as usize % 3],
        allowlist: if c & 4 == 0 { doc.tools.clone() } else { doc.tools.iter().take(1).cloned().collect() },
        risk_ceiling: if c & 8 == 0 { Risk::Irreversible } else { Risk::ReadOnly },
        coverage: if c & 16 == 0 { Coverage::Complete } else { Coverage::Blind(vec!["shell".into()]) },
        agent: "fuzz".into(),
        available: None,
    };
    let opts = RunOptions {
        facts: runbook_host::bundle::BundleFacts { clock: clock.clone(), ..Default::default() },
        run_id: Some("r-fuzz".into()),
        approvals: Some(Arc::new(channel.clone())),
        shadow: c & 32 != 0,
        ..Default::default()
    };
    let created = Run::create_in(Arc::clone(policy()), &doc.resolved, claim, store.shared(), "fuzz", Guard::default(), opts);
    let (mut run, _) = match created {
        Ok(r) => r,
        Err(e) => return expected(&e),
    };
    let mut now = t0;
    for pair in ops.chunks(2).take(48) {
        let (op, arg) = (pair[0], *pair.get(1).unwrap_or(&0));
        let tool = &doc.tools[arg as usize % doc.tools.len()];
        let args = json!({"x": arg % 4});
        let r = match op % 10 {
            0 | 1 => run.invoke(tool, &args, None, None).map(|a| {
                if let Some(sha) = a.call_sha256.clone().filter(|_| op & 16 != 0) {
                    // Gated: the run asks, a human answers (granted when `arg` is even), the retry applies it.
                    if let Ok(id) = run.request_approval(a.decision.step.as_deref(), tool, &args.to_string(), &sha) {
                        let _ = channel.answer(&id, "fuzz", arg % 2 == 0, &sha);
                    }
                }
            }),
            2 => run.apply_answered_approval_for(tool, &args).map(drop),
            3 => run.result(tool, &json!({"ok": arg}), arg & 1 == 1, None).map(drop),
            4 => run.advance(&doc.steps[arg as usize % doc.steps.len()]).map(drop),
            5 => {
                let step = run.state().ok().and_then(|s| s.step).unwrap_or_default();
                run.verdict(&step, arg & 1 == 0, "fuzz").map(drop)
            }
            6 => {
                now += 1_000 * arg as u64 * arg as u64;
                clock.set(now);
                run.tick_if_due().map(drop)
            }
            7 => run.final_output().map(drop),
            8 => run.feed_line(&String::from_utf8_lossy(&pair[1..])).map(drop),
            _ => {
                // Pending requests withdrawn or answered late, as a human might.
                for p in channel.pending().unwrap_or_default() {
                    let _ = channel.answer(&p.id, "late", arg & 1 == 0, &p.call_sha256);
                }
                Ok(())
            }
        };
        if let Err(e) = r {
            expected(&e);
        }
        now += 250;
        clock.set(now);
    }
    if run.broken().is_none() {
        if let Err(e) = run.end(EndReason::Normal) {
            expected(&e);
        }
    }
    // The evidence replays to the run's own head.
    let (replayed, _) = match Run::resume_in(Arc::clone(policy()), store.shared(), "r-fuzz", t0, Some(&run.pin()), Guard::default(), RunOptions::default()) {
        Ok(r) => r,
        Err(RunError::Tampered(m)) => panic!("the run's evidence does not replay: {m}"),
        Err(e) => panic!("the run's evidence cannot be resumed: {e}"),
    };
    assert_eq!(replayed.chain_head(), run.chain_head(), "the replay ends at another chain head");
    // A finished run that no trap broke verifies.
    if run.broken().is_none() && run.finished() {
        let bundle = store.bundle("r-fuzz").expect("the run's directory is in the store");
        let o = runbook_host::bundle::verify::verify_bundle(&bundle, None, &[]);
        if let Some(f) = o.failure {
            panic!("the run's bundle does not verify: {}: {}", f.place, f.message);
        }
    }
});
