//! The run driver (`runbook_host::run::Run`) and what the issue "One run driver" found: each test here
//! failed on the host before the driver (the hook never fed `final_output`, ignored the client's
//! permission rules, printed raw JSON at Stop; `verify .runbook/runs/latest` did not resolve; the two
//! adapters had two guards; one event cost about ten calls into the component).

use crate::common::{self, repo, Tmp, BIN};
use runbook_host::registry;
use runbook_host::run::{Claim, Guard, Run};
use runbook_host::{Coverage, DecisionKind, EndReason, Outcome, Profile, Risk};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or(Value::Null)
    }
}

fn hook(dir: &Path, args: &[&str], payload: Value) -> Out {
    let mut c = common::cmd(BIN)
        .arg("hook")
        .args(args)
        .current_dir(dir)
        // The client's user settings are read from $HOME: keep the tests off the machine's own.
        .env("HOME", dir)
        .env("RUNBOOK_HOOK_TIMING", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(payload.to_string().as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    Out { code: o.status.code().unwrap_or(-1), stdout: String::from_utf8_lossy(&o.stdout).into(), stderr: String::from_utf8_lossy(&o.stderr).into() }
}

fn cli(dir: &Path, args: &[&str]) -> Out {
    let o = common::cmd(BIN).args(args).current_dir(dir).output().unwrap();
    Out { code: o.status.code().unwrap_or(-1), stdout: String::from_utf8_lossy(&o.stdout).into(), stderr: String::from_utf8_lossy(&o.stderr).into() }
}

fn ev(session: &str, name: &str, extra: Value) -> Value {
    let mut v = json!({"session_id": session, "transcript_path": "t.jsonl", "cwd": ".", "permission_mode": "default", "hook_event_name": name});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn copy_example(dir: &Path, example: &str) -> String {
    let src = common::document_of(example);
    let name = src.file_name().unwrap().to_str().unwrap().to_string();
    std::fs::copy(&src, dir.join(&name)).unwrap();
    name
}

#[test]
fn seed_001s_example_completes_under_the_hook_and_verifies_as_latest() {
    let t = Tmp::new("exec-snapshot");
    let doc = copy_example(&t.0, "executive-snapshot");
    let args = ["--runbook", doc.as_str()];
    let s = "s-exec";
    assert_eq!(hook(&t.0, &args, ev(s, "SessionStart", json!({"source": "startup"}))).code, 0);
    let input = json!({"period": "2026-Q3"});
    let pre = hook(&t.0, &args, ev(s, "PreToolUse", json!({"tool_name": "quickbooks_profit_and_loss", "tool_input": input, "tool_use_id": "t1"})));
    assert_eq!(pre.code, 0, "{}", pre.stderr);
    assert!(pre.stdout.trim().is_empty(), "allowed: no decision, the client's rules apply: {}", pre.stdout);
    let post = hook(
        &t.0,
        &args,
        ev(s, "PostToolUse", json!({"tool_name": "quickbooks_profit_and_loss", "tool_input": input, "tool_response": {"revenue": 1}, "tool_use_id": "t1"})),
    );
    assert_eq!(post.code, 0, "{}", post.stderr);
    let stop = hook(&t.0, &args, ev(s, "Stop", json!({"stop_hook_active": false})));
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    let msg = stop.json()["systemMessage"].as_str().unwrap_or_default().to_string();
    assert!(!msg.contains('{'), "a sentence, not a status object: {msg}");
    assert_eq!(hook(&t.0, &args, ev(s, "SessionEnd", json!({"reason": "exit"}))).code, 0);
    // The report: completed, both checkpoints satisfied; the bundle verifies when named as `latest`.
    let latest: Value = serde_json::from_slice(&std::fs::read(t.0.join(".runbook/runs/latest.json")).unwrap()).unwrap();
    let run_dir = t.0.join(".runbook/runs").join(latest["run_id"].as_str().unwrap());
    let report: Value = serde_json::from_slice(&std::fs::read(run_dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["outcome"], "completed", "{report}");
    assert_eq!(report["checkpoints"]["cp-revenue-qb"]["status"], "satisfied");
    assert_eq!(report["checkpoints"]["cp-emit"]["status"], "satisfied");
    assert!(run_dir.join("receipt.json").is_file());
    for name in [".runbook/runs/latest", "latest", latest["run_id"].as_str().unwrap()] {
        let v = cli(&t.0, &["verify", name]);
        assert_eq!(v.code, 0, "verify {name}: {}{}", v.stdout, v.stderr);
    }
    let nothing = cli(&t.0, &["verify", "no/such/run"]);
    assert_eq!(nothing.code, 2, "{}", nothing.stdout);
    assert!(nothing.stderr.contains("no/such/run"), "{}", nothing.stderr);
}

#[test]
fn a_tool_the_clients_permissions_deny_refuses_the_run_at_session_start() {
    let t = Tmp::new("permissions");
    let doc = copy_example(&t.0, "read-only-investigation");
    std::fs::create_dir_all(t.0.join(".claude")).unwrap();
    std::fs::write(t.0.join(".claude/settings.json"), r#"{"permissions": {"deny": ["Grep"], "allow": ["Bash(df:*)"]}}"#).unwrap();
    let args = ["--runbook", doc.as_str(), "--profile", "R1"];
    let o = hook(&t.0, &args, ev("s-deny", "SessionStart", json!({"source": "startup"})));
    assert_eq!(o.code, 2, "refused runs block: {}", o.stdout);
    assert!(o.stderr.contains("[capability-not-allowed]"), "{}", o.stderr);
    assert!(o.stderr.contains("Refused before any tool ran"), "{}", o.stderr);
    // Nothing is supervised under a refused run: the next call is blocked, fail closed.
    let pre = hook(&t.0, &args, ev("s-deny", "PreToolUse", json!({"tool_name": "Bash", "tool_input": {"command": "df -h"}, "tool_use_id": "t1"})));
    assert_eq!(pre.code, 2, "{}", pre.stdout);
    // A narrower rule (`Bash(rm:*)`) leaves the tool allowed at all; `--allowlist` overrides the settings.
    std::fs::write(t.0.join(".claude/settings.json"), r#"{"permissions": {"deny": ["Bash(rm:*)"]}}"#).unwrap();
    assert_eq!(hook(&t.0, &args, ev("s-ok", "SessionStart", json!({"source": "startup"}))).code, 0);
    std::fs::write(t.0.join(".claude/settings.json"), r#"{"permissions": {"deny": ["Grep"]}}"#).unwrap();
    let over = ["--runbook", doc.as_str(), "--profile", "R1", "--allowlist", "Bash,Read,Grep"];
    let o = hook(&t.0, &over, ev("s-over", "SessionStart", json!({"source": "startup"})));
    assert_eq!(o.code, 0, "{}", o.stderr);
    // A settings file that is not JSON: the client may deny what we cannot read, so the run is refused.
    std::fs::write(t.0.join(".claude/settings.local.json"), "{oops").unwrap();
    let o = hook(&t.0, &args, ev("s-bad", "SessionStart", json!({"source": "startup"})));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("not JSON"), "{}", o.stderr);
}

/// One table of calls that name what no agent may touch (docs/spec/run.md#guarded-calls), and calls that do
/// not: the guard both adapters build is this one `Guard`.
#[test]
fn one_guard_for_every_adapter() {
    let t = Tmp::new("guard");
    let runs = t.0.join(".runbook/runs");
    let registry = t.0.join(".runbook/registry");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::create_dir_all(&registry).unwrap();
    let runs_abs = runs.canonicalize().unwrap().display().to_string();
    let exe = std::env::current_exe().unwrap().canonicalize().unwrap().display().to_string();
    // As the adapters build it: the runs directory as given on the command line (relative), the registry,
    // and the run's own directory (absolute) once the run exists.
    let mut g = Guard::new(Path::new(".runbook/runs"), Some(".runbook/registry"));
    g.add_path(&runs);
    g.add_path(&registry);
    let rel = |p: &Path| p.strip_prefix(&t.0).unwrap().display().to_string();
    let cases: Vec<(&str, Value, bool)> = vec![
        ("Bash", json!({"command": format!("cat {}/r-1/events.ndjson", rel(&runs))}), true),
        ("Bash", json!({"command": format!("cat ./{}/latest.json", rel(&runs))}), true),
        ("Bash", json!({"command": format!("echo x > {runs_abs}/r-1/approvals/a.json")}), true),
        ("Bash", json!({"command": "runbook-host approve latest rotate"}), true),
        ("Bash", json!({"command": format!("{exe} --version")}), true),
        ("Write", json!({"file_path": format!("{}/index.json", registry.display())}), true),
        ("Bash", json!({"argv": ["ls", rel(&registry)]}), true),
        ("Edit", json!({rel(&runs): "key names count too"}), true),
        ("runbook-host", json!({}), true),
        ("Bash", json!({"command": "df -h /var"}), false),
        ("Bash", json!({"command": "ls .runbook-notes"}), false),
        ("Read", json!({"file_path": "/var/log/syslog"}), false),
    ];
    for (tool, args, want) in &cases {
        // The module's one matching rule (docs/spec/run.md#guarded-calls) over the host's needles.
        assert_eq!(runbook_host::files::shared_policy().unwrap().guard_names(tool, &args.to_string(), g.needles()).unwrap(), *want, "{tool} {args}");
    }
    // An embedder names the host's executable itself: that path is guarded, another is not.
    let installed = t.0.join("opt/tools/rbh");
    let embedded = Guard::for_host(Some(&installed), Path::new(".runbook/runs"), None);
    let names = |g: &Guard, command: &str| {
        runbook_host::files::shared_policy().unwrap().guard_names("Bash", &json!({ "command": command }).to_string(), g.needles()).unwrap()
    };
    assert!(names(&embedded, &format!("{} approve latest rotate", installed.display())));
    assert!(!names(&embedded, &format!("{} --version", t.0.join("opt/tools/other").display())), "a path the embedder did not name");
    assert!(names(&Guard::for_host(None, Path::new(".runbook/runs"), None), "cat .runbook/runs/latest.json"));
    // The same guard through the hook, end to end: the module denies the call with `guarded`.
    let doc = copy_example(&t.0, "read-only-investigation");
    let a = ["--runbook", doc.as_str(), "--profile", "R1"];
    assert_eq!(hook(&t.0, &a, ev("s-g", "SessionStart", json!({"source": "startup"}))).code, 0);
    let o =
        hook(&t.0, &a, ev("s-g", "PreToolUse", json!({"tool_name": "Bash", "tool_input": {"command": "cat .runbook/runs/latest.json"}, "tool_use_id": "t"})));
    let reason = o.json()["hookSpecificOutput"]["permissionDecisionReason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("[guarded]"), "{reason}");
}

/// An R1 claim allowing every tool: what the in-process tests open their runs with.
fn claim_r1() -> Claim {
    Claim {
        profile: Profile::R1,
        allowlist: vec!["*".into()],
        risk_ceiling: Risk::Irreversible,
        coverage: Coverage::Complete,
        agent: "agent-1".into(),
        available: None,
    }
}

fn resolved(example: &str) -> registry::Resolved {
    let p = common::document_of(example);
    registry::resolve(p.to_str().unwrap(), "unused-registry").unwrap()
}

/// A document's envelope is derived once per policy, not each time a process resolves, starts or resumes
/// a run of it: a repeated document is answered from the policy's memo, byte for byte, a document that
/// does not derive keeps its findings, the oldest of more than eight documents is derived again, and
/// `derive_envelope` (what benchmarks and the differential test use) always asks the module.
#[test]
fn an_envelope_is_derived_once_per_document() {
    let policy = runbook_host::Policy::load().unwrap();
    policy.version().unwrap(); // makes the instance the stateless calls share, which counts as a call
    let doc = std::fs::read(common::document_of("rotate-credentials")).unwrap();
    let broken = std::fs::read(common::document_of("broken")).unwrap();
    let calls = |f: &mut dyn FnMut()| {
        let before = runbook_host::component_calls();
        f();
        runbook_host::component_calls() - before
    };
    let envelope = |d: &[u8]| policy.envelope(d).unwrap();
    let mut first = None;
    assert_eq!(calls(&mut || first = Some(envelope(&doc).unwrap())), 1, "the first is derived");
    let first = first.unwrap();
    assert!(first.starts_with('{') && first.contains("rotate"), "{first}");
    let mut again = None;
    assert_eq!(calls(&mut || again = Some(envelope(&doc).unwrap())), 0, "the same bytes again are not");
    assert_eq!(again.unwrap(), first);
    let mut derived = None;
    assert_eq!(calls(&mut || derived = Some(policy.derive_envelope(&doc).unwrap().unwrap())), 1);
    assert_eq!(derived.unwrap(), first, "the memo holds what the module derives");
    let findings = format!("{:?}", envelope(&broken).expect_err("broken has errors"));
    assert!(findings.contains("code"), "{findings}");
    assert_eq!(calls(&mut || assert_eq!(format!("{:?}", envelope(&broken).unwrap_err()), findings)), 0, "findings are kept too");
    // One byte more is another document; with seven more, the memo (eight) has pushed the first two out.
    let mut edited = doc.clone();
    edited.push(b' ');
    assert_eq!(calls(&mut || drop(envelope(&edited))), 1, "a document is its exact bytes");
    for i in 0..7 {
        let d = [doc.as_slice(), format!("# {i}\n").as_bytes()].concat();
        assert_eq!(calls(&mut || drop(envelope(&d))), 1);
    }
    assert_eq!(calls(&mut || drop(envelope(&broken))), 1, "the oldest two were dropped");
    assert_eq!(calls(&mut || assert_eq!(envelope(&doc).unwrap(), first)), 1);
}

/// One call into the component per event (the event, its decision, its chain link, its sentence and
/// the state after it come back together), where the proxy made about ten.
#[test]
fn one_event_is_one_call_into_the_component() {
    let t = Tmp::new("calls");
    let policy = Arc::clone(runbook_host::files::shared_policy().unwrap());
    let doc = resolved("read-only-investigation");
    let claim = claim_r1();
    let (mut run, a) = Run::create(Arc::clone(&policy), &doc, claim, &t.0.join("runs"), "test", Guard::new(&t.0.join("runs"), None)).unwrap();
    assert!(a.allowed(), "{}", a.explanation);
    let step = run.state().unwrap().step;
    let before = runbook_host::component_calls();
    let a = run.invoke("Bash", &json!({"command": "df -h /var"}), Some("c1"), None).unwrap();
    assert_eq!(a.kind(), DecisionKind::Allow, "{}", a.explanation);
    assert_eq!(runbook_host::component_calls() - before, 1, "an invoke is one call");
    let before = runbook_host::component_calls();
    run.result("Bash", &json!({"stdout": "/var 98%"}), false, Some("c1")).unwrap();
    // What an adapter reads after an event (scope, outcome, deadline) costs nothing more.
    assert_eq!(run.state().unwrap().step, step);
    run.next_deadline_ms().unwrap();
    assert_eq!(runbook_host::component_calls() - before, 1, "a result and the state after it are one call");
    let denied = run.invoke("Bash", &json!({"command": "rm -rf /var/log"}), Some("c2"), None).unwrap();
    assert_eq!(denied.kind(), DecisionKind::Deny);
    assert!(denied.explanation.contains("[undeclared-tool]"), "{}", denied.explanation);
    assert_eq!(run.end(EndReason::Normal).unwrap(), Outcome::Incomplete);
    // What the driver wrote verifies, and the run cannot be fed once sealed.
    assert!(run.invoke("Bash", &json!({"command": "df -h"}), None, None).is_err());
    let v = cli(&t.0, &["verify", run.dir().to_str().unwrap()]);
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
}

#[test]
fn a_hook_pretooluse_costs_one_call_after_restore() {
    let t = Tmp::new("hook-calls");
    let doc = copy_example(&t.0, "read-only-investigation");
    let a = ["--runbook", doc.as_str(), "--profile", "R1"];
    assert_eq!(hook(&t.0, &a, ev("s", "SessionStart", json!({"source": "startup"}))).code, 0);
    for (i, cmd) in ["df -h /var", "du -xsh /var/log", "rm -rf /"].iter().enumerate() {
        let o = hook(&t.0, &a, ev("s", "PreToolUse", json!({"tool_name": "Bash", "tool_input": {"command": cmd}, "tool_use_id": format!("t{i}")})));
        let line = o.stderr.lines().find(|l| l.contains("timing ")).unwrap().to_string();
        let n = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)).unwrap().parse::<u64>().unwrap();
        assert!(n("decide_calls=") <= 1, "{line}");
        // The resume replayed every recorded event, each link checked (the start and the earlier calls).
        assert_eq!(n("chain_checked="), 1 + i as u64, "{line}");
    }
}

#[test]
fn the_explanations_are_the_modules_sentences() {
    let policy = runbook_host::files::shared_policy().unwrap();
    assert!(policy.explain("refusal", "coverage-incomplete").unwrap().unwrap().contains("cannot see every invocation"));
    assert!(policy.explain("lint", "unanchored-when").unwrap().is_some());
    assert_eq!(policy.explain("reason", "no-such-code").unwrap(), None);
    // The wire forms the host derives from the WIT's names are the module's own strings.
    for (v, want) in [
        (runbook_host::wire::code(DecisionKind::NeedsApproval), "needs-approval"),
        (runbook_host::wire::code(runbook_host::Reason::HostTrap), "host-trap"),
        (runbook_host::wire::code(runbook_host::Deviation::OutOfScopeTool), "out-of-scope-tool"),
        (runbook_host::wire::code(Risk::ReadOnly), "read-only"),
        (runbook_host::wire::code(runbook_host::Refusal::AutonomousAtR0), "autonomous-at-r0"),
        (runbook_host::wire::profile(Profile::R2), "R2"),
    ] {
        assert_eq!(v, want);
    }
    assert!(repo().join("wit/policy.wit").is_file());
}

/// A run resumed from a checkpoint (the separated mode's service) is the run a full replay gives: same
/// state, same report, same next records; a checkpoint that does not match the evidence is refused.
#[test]
fn a_checkpoint_resumes_the_run_a_full_replay_gives() {
    use runbook_host::run::Checkpoint;
    let t = Tmp::new("checkpoint");
    let runs = t.0.join("runs");
    let policy = Arc::clone(runbook_host::files::shared_policy().unwrap());
    let doc = resolved("read-only-investigation");
    let claim = claim_r1();
    let (mut run, _) = Run::create(Arc::clone(&policy), &doc, claim, &runs, "test", Guard::new(&runs, None)).unwrap();
    let call = |run: &mut Run, i: usize| {
        let cmd = if i % 5 == 4 { "rm -rf /var/log".to_string() } else { format!("df -h /var/{i}") };
        run.invoke("Bash", &json!({"command": cmd}), Some(&format!("c{i}")), None).unwrap();
        run.result("Bash", &json!({"stdout": format!("out {i}")}), false, Some(&format!("c{i}"))).unwrap();
    };
    for i in 0..10 {
        call(&mut run, i);
    }
    let cp = run.checkpoint().unwrap();
    assert_eq!(Checkpoint::from_json(cp.to_json().as_bytes()).unwrap(), cp);
    for i in 10..17 {
        call(&mut run, i);
    }
    let id = run.run_id().to_string();
    let t0 = run.t0_ms();
    let want_state = run.state().unwrap();
    let want_report = run.report().unwrap();
    drop(run);
    let (mut replayed, r) = Run::resume(Arc::clone(&policy), &runs, &id, t0, None, Guard::new(&runs, None)).unwrap();
    let (mut resumed, c) = Run::resume_at(Arc::clone(&policy), &runs, &cp, t0, None, Guard::new(&runs, None)).unwrap();
    assert_eq!(r.events, 1 + 34);
    assert_eq!((c.events, c.links_checked), (r.events, 14), "only the records after the checkpoint are replayed");
    for run in [&mut replayed, &mut resumed] {
        assert_eq!(format!("{:?}", run.state().unwrap()), format!("{want_state:?}"));
        assert_eq!(run.report().unwrap(), want_report);
    }
    // The same next records from both (append with one, put the file back, append with the other), but
    // for the wall clock's `at` and so the links.
    let events = runs.join(&id).join("events.ndjson");
    let before = std::fs::read(&events).unwrap();
    let new_records = |run: &mut Run| -> Vec<Value> {
        call(run, 17);
        let after = std::fs::read_to_string(&events).unwrap();
        std::fs::write(&events, &before).unwrap();
        after[before.len()..]
            .lines()
            .map(|l| {
                let mut v: Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("h");
                v["event"].as_object_mut().unwrap().remove("at");
                v
            })
            .collect()
    };
    let a = new_records(&mut replayed);
    assert_eq!(a.len(), 2);
    assert_eq!(new_records(&mut resumed), a, "the resumed run records what the replayed one does");
    drop((replayed, resumed));

    // Checkpoints that do not fit the evidence: refused as tampering, its place and reason typed.
    use runbook_host::run::{RunError, Tampering};
    let refused = |cp: &Checkpoint| match Run::resume_at(Arc::clone(&policy), &runs, cp, t0, None, Guard::new(&runs, None)) {
        Ok(_) => panic!("a mismatched checkpoint was used: {cp:?}"),
        Err(RunError::Tampered(t)) => t,
        Err(e) => panic!("refused, but not as tampering: {e}"),
    };
    let stale = |t: Tampering, why: &str| {
        assert_eq!((t.run_id.as_str(), t.place.as_str()), (id.as_str(), "checkpoint"), "{t}");
        assert!(t.reason.contains(why), "{t}");
    };
    let mut past = cp.clone();
    past.offset = before.len() as u64 + 10;
    stale(refused(&past), "is past its end");
    let mut mid = cp.clone();
    mid.offset -= 3;
    stale(refused(&mid), "is not the end of a record");
    let mut head = cp.clone();
    head.head = "0".repeat(64);
    stale(refused(&head), "is not the one with link");
    let mut count = cp.clone();
    count.events += 1;
    stale(refused(&count), "its snapshot another number");
    let mut snap = cp.clone();
    snap.snapshot = snap.snapshot.replacen('{', "{\"x\":1,", 1);
    stale(refused(&snap), "a snapshot the module refuses");
    // A record after the checkpoint edited: the replay of the tail catches it, naming the record.
    let text = String::from_utf8(before.clone()).unwrap();
    let tampered = text.replacen("out 12", "out 13", 1);
    assert_ne!(tampered, text);
    std::fs::write(&events, tampered).unwrap();
    let t = refused(&cp);
    assert!(t.place.starts_with("events.ndjson:"), "{t}");
    assert!(t.reason.ends_with(&format!("(after the checkpoint's {} records)", cp.events)), "{t}");
    // Tampered is a variant to match, also through an anyhow error that wraps it (downcast, not searched).
    let err = Run::resume_at(Arc::clone(&policy), &runs, &cp, t0, None, Guard::new(&runs, None)).err().expect("refused");
    assert!(matches!(err, RunError::Tampered(_)), "{err}");
    let wrapped = anyhow::Error::from(err).context("resuming the run");
    assert!(matches!(wrapped.downcast_ref::<RunError>(), Some(RunError::Tampered(_))), "{wrapped:#}");
}
