//! Faults: `kill -9` at every write point of a run (the hook and the MCP proxy), and a full disk.
//!
//! Each durable write of the evidence passes a crash point (`runbook_host::faults`): a scenario is first
//! run with `RUNBOOK_HOST_FAULT_LOG` to list its points, then once per point with `RUNBOOK_HOST_KILL_AT=N`,
//! so the process dies by SIGKILL exactly there: before a write, between write and fsync, between the
//! fsync and the rename of every atomically replaced file, after it, and after the decision was recorded
//! but before the client heard it. Every point is tested, not a sample. After each kill:
//!
//! - nothing the client was told is lost: every answer it received has its event (and decision) in
//!   `events.ndjson`;
//! - `verify` gives a consistent answer: it passes only on a bundle with its report and receipt, and a
//!   bundle the kill left unfinished is refused for being unfinished, never for a broken chain or a
//!   torn line (a kill cannot tear a line: each record is one `write`);
//! - the hook, whose next invocation resumes the run from its bundle, goes on: every later event is
//!   answered (or refused, failing closed, with a reason), and a run that reaches its end verifies.

use crate::common::{self, event_records, BIN};

use crate::common::hooks::{self, base, bash, out, post, pre, start};
use crate::common::mcp::{self, everything, runbook, Client};
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The lines of a fault log: `N what:when`.
fn points(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(|l| l.split_once(' ').unwrap().1.to_string()).collect()
}

fn verify_json(run_dir: &Path) -> (bool, String) {
    let o = common::cmd(BIN).args(["verify", "--format", "json"]).arg(run_dir).output().unwrap();
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// What verify says of a bundle after a kill: passes only when the bundle was finished; otherwise it is
/// refused for being unfinished, never for damage.
fn check_verify(run_dir: &Path, at: &str) {
    let (ok, text) = verify_json(run_dir);
    let finished = run_dir.join("report.json").exists() && run_dir.join("receipt.json").exists();
    if ok {
        assert!(finished, "killed at {at}: verify passed a bundle without its report and receipt:\n{text}");
        return;
    }
    let lower = text.to_lowercase();
    for damage in ["chain is broken", "hash chain", "not json", "torn", "differently than recorded", "panicked"] {
        assert!(!lower.contains(damage), "killed at {at}: verify reports damage ({damage}) where the kill can only leave a bundle unfinished:\n{text}");
    }
    if finished {
        // The receipt was written last but one: a kill after it leaves only latest.json/history behind,
        // which verify does not need.
        panic!("killed at {at}: a finished bundle fails verify:\n{text}");
    }
}

// ---------------------------------------------------------------------------------------------------
// The hook: one process per event; the next event resumes the run from the bundle.

fn hook_script(s: &str) -> Vec<Value> {
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    let meta = json!({"path": "database/creds/payments-app"});
    vec![
        start(s),
        pre(s, "Bash", get.clone(), "t1"),
        post(s, "Bash", get, out("payments-db-credentials   Opaque   2   97d\n"), "t1"),
        pre(s, "Bash", bash("rm -rf /var/lib/postgres"), "t2"),
        pre(s, "mcp__vault__read_metadata", meta.clone(), "t3"),
        post(s, "mcp__vault__read_metadata", meta, json!({"age_days": 97}), "t3"),
        base(s, "Stop"),
        base(s, "SessionEnd"),
    ]
}

struct HookOut {
    code: Option<i32>,
    killed: bool,
    stdout: String,
    stderr: String,
}

fn hook(dir: &Path, payload: &Value, env: &[(&str, String)]) -> HookOut {
    let mut c = common::cmd(BIN)
        .args(["hook", "--runbook", "runbook.yaml"])
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(payload.to_string().as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    HookOut {
        code: o.status.code(),
        killed: o.status.signal() == Some(libc::SIGKILL),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

/// The run directory the session's state names (None before SessionStart wrote it), also once the
/// session was marked broken (its state renamed aside after its evidence could not be written).
fn hook_run_dir(dir: &Path, session: &str) -> Option<PathBuf> {
    let runs = dir.join(".runbook/runs");
    let state = std::fs::read(runs.join(format!(".hook/{session}.json"))).or_else(|_| std::fs::read(runs.join(format!(".hook/{session}.broken.json"))));
    let s: Value = serde_json::from_slice(&state.ok()?).ok()?;
    Some(runs.join(s["run_id"].as_str()?))
}

/// Plays `script` without faults, each event with its own fault log: the logs, and the events recorded
/// after each event.
fn hook_reference(dir: &Path, s: &str, script: &[Value]) -> (Vec<PathBuf>, Vec<Vec<String>>) {
    let mut logs = Vec::new();
    let mut recorded_after = Vec::new();
    for (i, p) in script.iter().enumerate() {
        let log = dir.join(format!("points-{i}.log"));
        let o = hook(dir, p, &[("RUNBOOK_HOST_FAULT_LOG", log.display().to_string())]);
        assert_eq!(o.code, Some(0), "event {i} without faults: {}", o.stderr);
        logs.push(log);
        recorded_after.push(common::event_shape(&event_records(&hook_run_dir(dir, s).unwrap())));
    }
    (logs, recorded_after)
}

#[test]
fn the_hook_killed_at_every_write_point() {
    let w = hooks::work("crash");
    let s = "sess-crash";
    let script = hook_script(s);
    // The points of each invocation, and the events each one adds, from a run without faults.
    let (logs, recorded_after) = hook_reference(&w.0, s, &script);
    let per_call: Vec<Vec<String>> = logs.iter().map(|l| points(l)).collect();
    let reference = recorded_after.last().unwrap().clone();
    let run_dir = hook_run_dir(&w.0, s).unwrap();
    assert!(verify_json(&run_dir).0, "the run without faults verifies");
    let total: usize = per_call.iter().map(Vec::len).sum();
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();

    for (i, pts) in per_call.iter().enumerate() {
        for (n, at) in pts.iter().enumerate() {
            let at = format!("event {i} ({}), point {} {at}", script[i]["hook_event_name"].as_str().unwrap(), n + 1);
            let d = hooks::work(&format!("crash-{i}-{n}"));
            for p in &script[..i] {
                assert_eq!(hook(&d.0, p, &[]).code, Some(0));
            }
            let o = hook(&d.0, &script[i], &[("RUNBOOK_HOST_KILL_AT", (n + 1).to_string())]);
            assert!(o.killed, "{at}: the hook was not killed (exit {:?}): {}", o.code, o.stderr);
            // What the client had been told (events 0..i) is all recorded.
            if let Some(rd) = hook_run_dir(&d.0, s) {
                let got = common::event_shape(&event_records(&rd));
                if i > 0 {
                    let told = &recorded_after[i - 1];
                    assert!(
                        got.len() >= told.len() && got[..told.len()] == told[..],
                        "{at}: events the client was told about are missing:\n{got:?}\nexpected a prefix {told:?}"
                    );
                }
                check_verify(&rd, &at);
            } else {
                assert_eq!(i, 0, "{at}: the session's state is gone");
            }
            // The client goes on (Claude Code sends the next event); every later event is answered, or
            // refused failing closed (exit 2) with a reason: never a crash or an unexplained exit.
            let mut refused = Vec::new();
            for (j, p) in script.iter().enumerate().skip(i + 1) {
                let o = hook(&d.0, p, &[]);
                match o.code {
                    Some(0) => {}
                    Some(2) => {
                        assert!(o.stderr.contains("denied (fail closed)"), "{at}: event {j} exit 2 without a reason: {}", o.stderr);
                        refused.push(format!("event {j}: {}", o.stderr.trim()));
                    }
                    c => panic!("{at}: event {j} exited {c:?}: {}\n{}", o.stdout, o.stderr),
                }
            }
            let kind = match hook_run_dir(&d.0, s) {
                None => {
                    // Killed before SessionStart recorded its session: every later event fails closed.
                    assert_eq!(refused.len(), script.len() - 1 - i, "{at}: a session without state let an event through: {refused:?}");
                    "no session: every later event refused".to_string()
                }
                Some(rd) => {
                    let (ok, text) = verify_json(&rd);
                    let got = common::event_shape(&event_records(&rd));
                    if i + 1 == script.len() {
                        // The last event was killed: nothing comes after it to end the run. Finished or
                        // not, verify said so above (check_verify).
                        if rd.join("receipt.json").exists() {
                            "the last event killed after the receipt: verifies".to_string()
                        } else {
                            "the last event killed before the receipt: unfinished, verify refuses it".to_string()
                        }
                    } else if refused.is_empty() {
                        // The run resumed and ended: it verifies, and holds what the client was told.
                        assert!(ok, "{at}: the resumed run ended but does not verify:\n{text}");
                        if i > 0 {
                            let told = &recorded_after[i - 1];
                            assert!(got[..told.len()] == told[..], "{at}: events lost: {got:?}");
                        }
                        if got == reference {
                            "resumed, same events as without the kill".to_string()
                        } else {
                            "resumed, the killed event not recorded (its client got no answer)".to_string()
                        }
                    } else {
                        assert!(!ok || refused.iter().all(|r| r.contains("is over")), "{at}: refused events {refused:?} but the bundle verifies");
                        let why = refused[0].split("denied (fail closed): ").nth(1).unwrap_or("").chars().take(90).collect::<String>();
                        format!("later events refused: {why}")
                    }
                }
            };
            *outcomes.entry(kind).or_default() += 1;
        }
    }
    eprintln!("hook: {total} crash points over {} events:", script.len());
    for (k, v) in &outcomes {
        eprintln!("  {v:3}  {k}");
    }
}

// ---------------------------------------------------------------------------------------------------
// The MCP proxy over stdio: a killed proxy's run is not resumed (a new start is a new run); its bundle
// must say what happened up to the kill.

/// The client script: (tool, arguments) in order; `echo` is in scope, `get-env` is undeclared.
fn proxy_calls() -> Vec<(&'static str, Value)> {
    vec![("echo", json!({"message": "one"})), ("get-env", json!({})), ("echo", json!({"message": "two"}))]
}

/// Runs the proxy scenario; kill_at None lists the points. The calls the client got an answer to.
fn proxy_scenario(w: &mcp::Work, env: &[String]) -> Vec<Value> {
    let mut cmd = vec!["env".to_string()];
    cmd.extend(env.iter().cloned());
    cmd.extend([BIN.to_string(), "run".into(), runbook("everything-tour.yaml"), "--".into()]);
    cmd.extend(everything());
    let mut c = Client::new(w, "crash-agent", cmd);
    let mut told = Vec::new();
    let r = c.ask(json!({"op": "init"}));
    if r["ok"] != true {
        let _ = c.close();
        return told;
    }
    for (tool, args) in proxy_calls() {
        let r = c.ask(json!({"op": "call", "tool": tool, "args": args, "timeout": 30}));
        if r["ok"] == true {
            told.push(json!({"tool": tool, "is_error": r["is_error"], "text": r["text"]}));
        } else {
            break;
        }
    }
    let _ = c.close();
    told
}

#[test]
fn the_proxy_killed_at_every_write_point() {
    let w = mcp::work("crash-points");
    let log = w.dir.join("points.log");
    let told = proxy_scenario(&w, &[format!("RUNBOOK_HOST_FAULT_LOG={}", log.display())]);
    assert_eq!(told.len(), 3, "{told:?}");
    let all = points(&log);
    let run = w.latest();
    assert!(verify_json(&run).0);
    let reference = event_records(&run);
    assert!(all.len() > 20, "{all:?}");
    drop(w);
    let mut unfinished = 0;
    for (n, at) in all.iter().enumerate() {
        let at = format!("point {} {at}", n + 1);
        let w = mcp::work(&format!("crash-{n}"));
        let told = proxy_scenario(&w, &[format!("RUNBOOK_HOST_KILL_AT={}", n + 1)]);
        let dirs = w.run_dirs();
        if dirs.is_empty() {
            assert!(told.is_empty(), "{at}: the client was answered but no bundle exists");
            continue;
        }
        assert_eq!(dirs.len(), 1, "{at}");
        let lines = event_records(&dirs[0]);
        // Each answer the client got has its invoke (and, for a forwarded call, its result) recorded, with
        // the decision the client saw.
        for (k, t) in told.iter().enumerate() {
            let invokes: Vec<&Value> = lines.iter().filter(|l| l["event"]["type"] == "invoke").collect();
            let inv = invokes.get(k).unwrap_or_else(|| panic!("{at}: the client was answered for call {k} ({t}) but its invoke is not recorded"));
            assert_eq!(inv["event"]["tool"], t["tool"], "{at}");
            let blocked = inv["decision"]["decision"] != "allow";
            assert_eq!(blocked, t["is_error"] == true, "{at}: the answer {t} and the recorded decision {} disagree", inv["decision"]);
            if !blocked {
                let results = lines.iter().filter(|l| l["event"]["type"] == "result" && l["event"]["tool"] == t["tool"]).count();
                assert!(results >= 1, "{at}: the forwarded call {t} was answered but its result is not recorded");
            }
        }
        // The recorded events are a prefix of the run without the kill (the same decisions).
        let shape_of = |v: &[Value]| v.iter().map(|l| format!("{}:{}", l["event"]["type"], l["decision"]["decision"])).collect::<Vec<_>>();
        let (got, want) = (shape_of(&lines), shape_of(&reference));
        assert!(got.len() <= want.len() && got[..] == want[..got.len()], "{at}: {got:?} is not a prefix of {want:?}");
        check_verify(&dirs[0], &at);
        if !dirs[0].join("receipt.json").exists() {
            unfinished += 1;
        }
    }
    eprintln!("proxy: {} crash points; {unfinished} left the bundle unfinished (verify refuses it as such), the rest after its receipt", all.len());
}

// ---------------------------------------------------------------------------------------------------
// A full disk: the runs directory on a tmpfs of 64 KiB of its own (mounting needs root; the test says so
// and fails elsewhere rather than pass without trying).

struct Mount(PathBuf);

impl Mount {
    fn tmpfs(at: &Path, size: &str) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        let o = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(at).output().expect("mount(8)");
        assert!(o.status.success(), "this test mounts a small tmpfs and needs root: {}", String::from_utf8_lossy(&o.stderr));
        Mount(at.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_blocks_the_call_and_verify_names_it() {
    let w = mcp::work("disk-full");
    let _m = Mount::tmpfs(&w.dir.join(".runbook"), "64k");
    let mut c = Client::proxy(&w, "disk-agent", &runbook("everything-tour.yaml"), &[], &[everything()]);
    c.init();
    // Each call records its 16 KB argument twice (the invoke, the result): the disk fills within a few.
    let big = "x".repeat(16 << 10);
    let mut answers = Vec::new();
    for i in 0..8 {
        let r = c.ask(json!({"op": "call", "tool": "echo", "args": {"message": format!("{i}{big}")}, "timeout": 30}));
        answers.push(r);
    }
    let _ = c.close();
    let first_bad = answers.iter().position(|r| r["is_error"] == true || r["ok"] != true).expect("the disk never filled");
    assert!(first_bad >= 1, "the first call already failed: {}", answers[0]);
    for (i, r) in answers.iter().enumerate() {
        if i < first_bad {
            assert!(mcp::text(r).starts_with(&format!("Echo: {i}")), "call {i}: {r}");
        } else {
            // Never the server's answer once the evidence cannot be written: an error naming why.
            assert!(
                !mcp::text(r).starts_with("Echo:"),
                "call {i} was answered with the result although its evidence could not be written: {}",
                &mcp::text(r)[..40.min(mcp::text(r).len())]
            );
            assert!(r["is_error"] == true || r["ok"] != true, "call {i}: {r}");
        }
    }
    let shown = mcp::text(&answers[first_bad]);
    assert!(shown.starts_with("runbook_failed:bundle-unwritable"), "the refusal names the cause: {shown}");
    let run = w.run_dirs().pop().unwrap();
    // Nothing half written: every line of events.ndjson is a whole record, and the chain holds (verify
    // gets as far as the report and stops there).
    let lines = event_records(&run);
    let invokes = lines.iter().filter(|l| l["event"]["type"] == "invoke").count();
    assert!(invokes >= first_bad, "the answered calls are recorded");
    let (ok, text) = verify_json(&run);
    assert!(!ok, "{text}");
    let v: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(v["failure"]["place"], "report.json", "{text}");
    let msg = v["failure"]["message"].as_str().unwrap();
    assert!(msg.contains("bundle-unwritable") || msg.contains("has not ended"), "{msg}");
    eprintln!(
        "disk full after {first_bad} calls: {} whole records kept; the client saw: {}; verify: report.json: {msg}",
        lines.len(),
        &shown[..shown.len().min(160)]
    );
}

// ---------------------------------------------------------------------------------------------------
// A server that answers badly: under another id, with a line that is not JSON, with JSON that is not
// JSON-RPC, or not at all. None of it may reach the client as a result; each call is recorded as failed.

#[test]
fn a_server_that_answers_badly_never_yields_a_result() {
    let w = mcp::work("bad-server");
    let log = w.dir.join("server-calls.ndjson");
    let server = vec![
        mcp::python().to_string_lossy().into_owned(),
        mcp::mcp_dir().join("bad_server.py").to_string_lossy().into_owned(),
        log.to_string_lossy().into_owned(),
    ];
    let mut c = Client::proxy(&w, "bad-agent", &runbook("bad-server.yaml"), &["--call-timeout", "2s"], &[server]);
    c.init();
    let mut seen = Vec::new();
    for tool in ["ok", "wrong_id", "ok", "hang", "ok", "not_rpc", "ok", "garbage", "ok"] {
        let r = c.ask(json!({"op": "call", "tool": tool, "args": {}, "timeout": 30}));
        seen.push((tool, r));
    }
    let _ = c.close();
    let mut server_alive = true;
    for (i, (tool, r)) in seen.iter().enumerate() {
        let t = mcp::text(r);
        if *tool == "ok" && server_alive {
            if r["ok"] == true && r["is_error"] == false {
                assert_eq!(t, "ok", "call {i}");
                continue;
            }
            // The server's connection was given up on after garbage: every later call fails closed.
            server_alive = false;
        }
        assert!(r["ok"] != true || r["is_error"] == true, "call {i} ({tool}) was answered as a success: {r}");
        assert!(!t.contains("another id") && !t.contains("not JSON-RPC"), "call {i} ({tool}): a bad answer reached the client: {r}");
    }
    let run = w.latest();
    let lines = event_records(&run);
    let results: Vec<(String, bool)> = lines
        .iter()
        .filter(|l| l["event"]["type"] == "result")
        .map(|l| (l["event"]["tool"].as_str().unwrap().to_string(), l["event"]["is_error"] == true))
        .collect();
    for (tool, is_error) in &results {
        assert_eq!(*is_error, tool != "ok", "the recorded result of `{tool}`: {results:?}");
    }
    for bad in ["wrong_id", "hang", "not_rpc", "garbage"] {
        assert!(results.iter().any(|(t, e)| t == bad && *e), "the failed call `{bad}` is recorded as failed: {results:?}");
    }
    let (ok, text) = verify_json(&run);
    assert!(ok, "{text}");
    let answers: Vec<String> = seen
        .iter()
        .map(|(t, r)| format!("{t}: {}", if r["ok"] == true { mcp::text(r).chars().take(70).collect::<String>() } else { r["error"]["message"].to_string() }))
        .collect();
    eprintln!("bad server: {answers:#?}\nrecorded results: {results:?}; ended: {}", lines.last().unwrap()["event"]);
}

/// A server that never answers `initialize` holds nothing up past `--start-timeout`: the client's own
/// `initialize` is answered with the refusal, naming the server and the bound, and the server's process is
/// stopped (no orphan is left reading the proxy's pipe).
#[test]
fn a_server_that_never_initializes_is_stopped_within_the_start_timeout() {
    let w = mcp::work("mute-server");
    let log = w.dir.join("server.ndjson");
    let server = vec![
        mcp::python().to_string_lossy().into_owned(),
        mcp::mcp_dir().join("bad_server.py").to_string_lossy().into_owned(),
        log.to_string_lossy().into_owned(),
        "--mute".into(),
    ];
    let mut c = Client::proxy(&w, "agent", &runbook("bad-server.yaml"), &["--start-timeout", "2s"], &[server]);
    let r = c.ask(json!({"op": "init"}));
    assert_eq!(r["ok"], false, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer `initialize` within 2s (--start-timeout)") && message.contains("server-unavailable"), "{r}");
    let _ = c.close();
    let pid: i32 = serde_json::from_str::<Value>(std::fs::read_to_string(&log).unwrap().lines().next().unwrap()).unwrap()["pid"].as_i64().unwrap() as i32;
    let gone = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Reaped or a zombie waiting for its reaper: either way it no longer runs.
        let signalled = unsafe { libc::kill(pid, 0) };
        signalled != 0 || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    });
    assert!(gone, "the mute server (pid {pid}) still runs");
}

// ---------------------------------------------------------------------------------------------------
// Approvals under contention: two humans answering the same call at once, and a client that leaves while
// its call waits for one.

#[test]
fn two_humans_answer_the_same_call_at_once_and_one_answer_counts() {
    let w = mcp::work("two-approvers");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--approval-timeout", "60s"], &[everything()]);
    c.init();
    assert_eq!(mcp::text(&c.call("echo", json!({"message": "hi"}))), "Echo: hi");
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    let args = json!({"a": 2, "b": 3});
    c.write(json!({"op": "call", "tool": "get-sum", "args": args}));
    mcp::pending_request(&run);
    // One approves, the other denies, both confirming at the same moment on their own terminals.
    let delay = std::time::Duration::from_millis(1500);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| mcp::approve_on_a_terminal(&w, &run, "add", false, delay));
        let b = s.spawn(|| mcp::approve_on_a_terminal(&w, &run, "add", true, delay));
        (a.join().unwrap(), b.join().unwrap())
    });
    let r = c.read();
    let wins: Vec<bool> = [&a, &b].iter().map(|(code, _)| *code == Some(0)).collect();
    assert_eq!(wins.iter().filter(|x| **x).count(), 1, "exactly one answer is taken:\napprover: {a:?}\ndenier: {b:?}");
    let loser = if wins[0] { &b } else { &a };
    assert!(loser.1.contains("already answered") || loser.1.contains("no pending") || loser.1.contains("nothing"), "the other human is told: {}", loser.1);
    let granted = wins[0];
    if granted {
        assert_eq!(mcp::text(&r), "The sum of 2 and 3 is 5.", "{r}");
    } else {
        assert_eq!(r["is_error"], true, "{r}");
    }
    let _ = c.close();
    let rep = mcp::report(&run);
    let approvals = rep["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{rep}");
    assert_eq!(approvals[0]["granted"], granted);
    assert!(verify_json(&run).0);
    eprintln!("two approvers: the {} won; the other was told: {}", if granted { "approver" } else { "denier" }, loser.1.trim().lines().last().unwrap_or(""));
}

#[test]
fn a_client_that_leaves_while_its_call_waits_for_approval() {
    let w = mcp::work("leave-waiting");
    let mut c = Client::proxy(&w, "test-agent", &runbook("everything-tour.yaml"), &["--approval-timeout", "60s"], &[everything()]);
    c.init();
    assert_eq!(c.call("runbook_advance", json!({"to": "add"}))["is_error"], false);
    let run = w.latest();
    c.write(json!({"op": "call", "tool": "get-sum", "args": {"a": 1, "b": 1}}));
    mcp::pending_request(&run);
    // The client goes away (its process killed: no clean shutdown, no final output).
    let _ = c.child.kill();
    let _ = c.child.wait();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !run.join("receipt.json").exists() {
        assert!(std::time::Instant::now() < deadline, "the run did not end after its client left");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The waiting request is withdrawn: a human arriving now finds nothing to answer, and nothing ran.
    assert!(runbook_host::run::approvals::pending(&run).unwrap().is_empty());
    let (code, said) = mcp::approve_on_a_terminal(&w, &run, "add", false, std::time::Duration::from_millis(800));
    assert_ne!(code, Some(0), "an approval after the run ended was taken: {said}");
    let lines = event_records(&run);
    assert!(!lines.iter().any(|l| l["event"]["type"] == "result" && l["event"]["tool"] == "get-sum"), "the waiting call ran");
    let end = &lines.last().unwrap()["event"];
    assert_eq!(end["type"], "end");
    assert_eq!(end["reason"], "client-closed", "{end}");
    assert_ne!(mcp::report(&run)["outcome"], "completed");
    assert!(verify_json(&run).0);
    eprintln!("left while waiting: run ended {}, the late approver was told: {}", end["reason"], said.trim().lines().last().unwrap_or(""));
}

// ---------------------------------------------------------------------------------------------------
// A failing disk: `EIO` at every write point (`RUNBOOK_HOST_EIO_AT=N`, one failed operation, and
// `RUNBOOK_HOST_EIO_FROM=N`, every write from the N-th on: a disk that has failed for good). The wrapper is
// `runbook_host::faults::write_point`, in the host's own write path: the write, fsync or rename that
// stands there returns the error the kernel would. After each:
//
// - nothing unrecorded runs: every call a tool server received has its invoke recorded, allowed, before it;
//   every answer a client got from a tool has its result recorded;
// - the call whose evidence cannot be written is blocked (`bundle-unwritable`), and so is every later one;
// - nothing half written is left: every line of `events.ndjson` is a whole record, no temporary file
//   remains in the bundle;
// - `verify` passes only a finished bundle, and names the place of any other, never reporting damage.

/// The write points of a fault log (lines marked ` io`), by their number in it.
fn write_points(log: &Path) -> Vec<(usize, String)> {
    points(log).into_iter().enumerate().filter_map(|(i, p)| p.strip_suffix(" io").map(|p| (i + 1, p.to_string()))).collect()
}

/// No temporary file (`.NAME.HEX.tmp` of the bundle, `NAME.tmpPID` of the hook's session state) is left.
fn no_temporaries(dir: &Path, at: &str) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp") && !name.contains(".tmp"), "{at}: a half-written file is left in {}: {name}", dir.display());
        if e.path().is_dir() {
            no_temporaries(&e.path(), at);
        }
    }
}

/// What verify says, as `place: message` (or `verifies`), after a fault; panics on damage or on a pass
/// without report and receipt.
fn verify_after_fault(run_dir: &Path, at: &str) -> String {
    check_verify(run_dir, at);
    let (ok, text) = verify_json(run_dir);
    if ok {
        return "verifies".into();
    }
    let v: Value = serde_json::from_str(text.lines().next().unwrap_or("")).unwrap_or_else(|_| panic!("{at}: verify's answer is not JSON: {text}"));
    let msg = v["failure"]["message"].as_str().unwrap_or("").split(':').take(2).collect::<Vec<_>>().join(":");
    format!("{}: {}", v["failure"]["place"].as_str().unwrap_or("?"), msg.chars().take(80).collect::<String>())
}

#[test]
fn the_proxy_on_a_failing_disk_at_every_write_point() {
    let calls = ["ok", "undeclared", "ok"];
    let scenario = |w: &mcp::Work, env: &[String]| -> Vec<Value> {
        let server_log = w.dir.join("server-calls.ndjson");
        let mut cmd = vec!["env".to_string()];
        cmd.extend(env.iter().cloned());
        cmd.extend([BIN.to_string(), "run".into(), runbook("bad-server.yaml"), "--".into()]);
        cmd.extend([mcp::python().display().to_string(), mcp::mcp_dir().join("bad_server.py").display().to_string(), server_log.display().to_string()]);
        let mut c = Client::new(w, "eio-agent", cmd);
        let mut told = Vec::new();
        if c.ask(json!({"op": "init"}))["ok"] == true {
            for tool in calls {
                let r = c.ask(json!({"op": "call", "tool": tool, "args": {}, "timeout": 30}));
                told.push(json!({"tool": tool, "ok": r["ok"], "is_error": r["is_error"], "text": r["text"]}));
            }
        }
        let _ = c.close();
        told
    };
    let w = mcp::work("eio-points");
    let log = w.dir.join("points.log");
    let told = scenario(&w, &[format!("RUNBOOK_HOST_FAULT_LOG={}", log.display())]);
    assert_eq!(told.iter().filter(|t| t["text"] == "ok").count(), 2, "{told:?}");
    assert!(verify_json(&w.latest()).0);
    let io = write_points(&log);
    assert!(io.len() > 10, "{io:?}");
    drop(w);
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for (n, name) in &io {
        for (mode, var) in [("once", "RUNBOOK_HOST_EIO_AT"), ("from then on", "RUNBOOK_HOST_EIO_FROM")] {
            let at = format!("EIO {mode} at point {n} {name}");
            let w = mcp::work(&format!("eio-{n}"));
            let told = scenario(&w, &[format!("{var}={n}")]);
            let served: Vec<Value> =
                std::fs::read_to_string(w.dir.join("server-calls.ndjson")).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let dirs = w.run_dirs();
            if dirs.is_empty() {
                assert!(served.is_empty() && told.iter().all(|t| t["text"] != "ok"), "{at}: a tool ran with no bundle at all: {served:?} {told:?}");
                *outcomes.entry(format!("{mode}: no bundle, nothing ran")).or_default() += 1;
                continue;
            }
            assert_eq!(dirs.len(), 1, "{at}");
            let lines = event_records(&dirs[0]);
            no_temporaries(&dirs[0], &at);
            // Every call the server received was recorded as an allowed invoke first.
            let allowed_invokes = lines.iter().filter(|l| l["event"]["type"] == "invoke" && l["decision"]["decision"] == "allow").count();
            assert!(served.len() <= allowed_invokes, "{at}: the server ran {} calls but {allowed_invokes} allowed invokes are recorded", served.len());
            // Every tool answer the client got has its result recorded; after the first refusal for the
            // evidence, no call gets through.
            let results = lines.iter().filter(|l| l["event"]["type"] == "result" && l["event"]["is_error"] != true).count();
            let answered = told.iter().filter(|t| t["text"] == "ok").count();
            assert!(answered <= results, "{at}: the client got {answered} results, {results} are recorded: {told:?}");
            if let Some(k) = told.iter().position(|t| t["text"].as_str().unwrap_or("").starts_with("runbook_failed:bundle-unwritable")) {
                assert!(told[k + 1..].iter().all(|t| t["text"] != "ok"), "{at}: a call got through after the evidence failed: {told:?}");
            }
            let said = verify_after_fault(&dirs[0], &at);
            let client = match told.iter().find(|t| t["ok"] != true || t["is_error"] == true && t["tool"] != "undeclared") {
                None if told.is_empty() => "refused at initialize".to_string(),
                None => "all answers as without the fault".to_string(),
                Some(t) => format!("call {} told {}", t["tool"], t["text"].as_str().unwrap_or("(no answer)").split(':').take(2).collect::<Vec<_>>().join(":")),
            };
            *outcomes.entry(format!("{mode}: {client}; verify: {said}")).or_default() += 1;
        }
    }
    eprintln!("proxy on a failing disk: {} write points x 2:", io.len());
    for (k, v) in &outcomes {
        eprintln!("  {v:3}  {k}");
    }
}

#[test]
fn the_hook_on_a_failing_disk_at_every_write_point() {
    let w = hooks::work("eio");
    let s = "sess-eio";
    let script = hook_script(s);
    let (logs, recorded_after) = hook_reference(&w.0, s, &script);
    let per_call: Vec<Vec<(usize, String)>> = logs.iter().map(|l| write_points(l)).collect();
    let reference = recorded_after.last().unwrap().clone();
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    let mut total = 0;
    for (i, pts) in per_call.iter().enumerate() {
        for (n, name) in pts {
            for (mode, var) in [("once", "RUNBOOK_HOST_EIO_AT"), ("from then on", "RUNBOOK_HOST_EIO_FROM")] {
                total += 1;
                let event = script[i]["hook_event_name"].as_str().unwrap();
                let at = format!("event {i} ({event}), EIO {mode} at point {n} {name}");
                let d = hooks::work(&format!("eio-{i}-{n}"));
                for p in &script[..i] {
                    assert_eq!(hook(&d.0, p, &[]).code, Some(0));
                }
                // A disk failed for good fails every later hook process too.
                let later: Vec<(&str, String)> = if mode == "once" { vec![] } else { vec![("RUNBOOK_HOST_EIO_FROM", "1".into())] };
                let mut answers = Vec::new();
                for (j, p) in script.iter().enumerate().skip(i) {
                    let env = if j == i { vec![(var, n.to_string())] } else { later.clone() };
                    let o = hook(&d.0, p, &env);
                    let allowed = match o.code {
                        Some(0) => {
                            let v: Value = serde_json::from_str(o.stdout.trim()).unwrap_or(Value::Null);
                            v["hookSpecificOutput"]["permissionDecision"] != "deny"
                        }
                        Some(2) => {
                            assert!(o.stderr.contains("denied (fail closed)"), "{at}: event {j} exit 2 without a reason: {}", o.stderr);
                            false
                        }
                        c => panic!("{at}: event {j} exited {c:?}: {}\n{}", o.stdout, o.stderr),
                    };
                    // A tool call the hook let through is recorded as allowed: checked right after the
                    // answer, before anything else could write.
                    if allowed && p["hook_event_name"] == "PreToolUse" {
                        let rd = hook_run_dir(&d.0, s).unwrap_or_else(|| panic!("{at}: event {j} allowed with no run"));
                        let id = p["tool_use_id"].as_str().unwrap();
                        let recs = event_records(&rd);
                        assert!(
                            recs.iter().any(|l| l["event"]["type"] == "invoke" && l["event"]["call_id"] == id && l["decision"]["decision"] == "allow"),
                            "{at}: event {j} ({id}) was allowed but its invoke is not recorded as allowed"
                        );
                    }
                    answers.push(if o.code == Some(2) { "refused" } else { "answered" });
                }
                no_temporaries(&d.0.join(".runbook"), &at);
                let said = match hook_run_dir(&d.0, s) {
                    None => "no session".to_string(),
                    Some(rd) => {
                        let got = common::event_shape(&event_records(&rd));
                        assert!(got.len() <= reference.len() && got[..] == reference[..got.len()], "{at}: {got:?} is not a prefix of {reference:?}");
                        if i > 0 {
                            let told = &recorded_after[i - 1];
                            assert!(got.len() >= told.len() && got[..told.len()] == told[..], "{at}: events the client was told about are gone: {got:?}");
                        }
                        verify_after_fault(&rd, &at)
                    }
                };
                let refused = answers.iter().filter(|a| **a == "refused").count();
                let what = if refused == 0 { "every event answered".to_string() } else { format!("{refused} of {} events refused", answers.len()) };
                *outcomes.entry(format!("{mode}, at {event}: {what}; verify: {said}")).or_default() += 1;
            }
        }
    }
    eprintln!("hook on a failing disk: {total} faults:");
    for (k, v) in &outcomes {
        eprintln!("  {v:3}  {k}");
    }
}

#[test]
fn a_full_disk_under_the_hook_refuses_the_next_call_and_verify_names_it() {
    let w = hooks::work("disk-full-hook");
    // One tool, no steps: every call is allowed until the disk is full, so each refusal is the disk's.
    std::fs::write(
        w.0.join("runbook.yaml"),
        "runbook_id: disk-fill\nversion: 1.0.0\ntitle: Read metadata\ndescription: Read the metadata as often as needed.\n\
         mode: required\nfailure_policy: fail_closed\ncapabilities:\n  - {name: meta, tool: mcp__vault__read_metadata, risk: read-only}\n\
         completion: {condition: final_output, receipt: true}\n",
    )
    .unwrap();
    let _m = Mount::tmpfs(&w.0.join(".runbook"), "64k");
    let s = "sess-full";
    let o = hook(&w.0, &start(s), &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let get = json!({"path": "database/creds/payments-app"});
    // Each result records 16 KB: the disk fills within a few calls.
    let big = "x".repeat(16 << 10);
    let mut log = Vec::new();
    let mut first_refused = None;
    for k in 0..8 {
        let id = format!("t{k}");
        let p = hook(&w.0, &pre(s, "mcp__vault__read_metadata", get.clone(), &id), &[]);
        let allowed = p.code == Some(0) && !p.stdout.contains("\"deny\"");
        if let Some(f) = first_refused {
            assert!(!allowed, "call {k} was allowed after the evidence failed at call {f}: {}", p.stdout);
        }
        if allowed {
            let rd = hook_run_dir(&w.0, s).unwrap();
            assert!(
                event_records(&rd).iter().any(|l| l["event"]["call_id"] == id.as_str() && l["decision"]["decision"] == "allow"),
                "call {k} was allowed but its invoke is not recorded"
            );
        } else {
            assert_eq!(p.code, Some(2), "call {k}: a refusal for the evidence fails closed: {} {}", p.stdout, p.stderr);
            first_refused.get_or_insert(k);
            log.push(format!("call {k}: {}", p.stderr.trim()));
            continue;
        }
        let r = hook(&w.0, &post(s, "mcp__vault__read_metadata", get.clone(), json!({"data": format!("{k}{big}")}), &id), &[]);
        if r.code != Some(0) {
            log.push(format!("result {k}: exit {:?} {}", r.code, r.stderr.trim()));
            first_refused.get_or_insert(k + 1);
        }
    }
    let first = first_refused.expect("the disk never filled");
    assert!(first >= 1, "the first call was already refused: {log:?}");
    let rd = hook_run_dir(&w.0, s).unwrap();
    let lines = event_records(&rd);
    no_temporaries(&rd, "disk full under the hook");
    let (ok, text) = verify_json(&rd);
    assert!(!ok, "{text}");
    let v: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(v["failure"]["place"], "report.json", "{text}");
    let msg = v["failure"]["message"].as_str().unwrap();
    assert!(msg.contains("bundle-unwritable") || msg.contains("has not ended"), "{msg}");
    let refusal = log.iter().find(|l| l.contains("denied (fail closed)")).expect("a refusal with its reason");
    assert!(refusal.contains("No space left"), "the refusal names the cause: {refusal}");
    // Every later event of the session, a SessionStart of the same session included, is refused: the
    // session is over, never resumed with a hole in its record.
    for p in [pre(s, "mcp__vault__read_metadata", get.clone(), "late"), start(s), base(s, "Stop")] {
        let o = hook(&w.0, &p, &[]);
        assert_eq!(o.code, Some(2), "{}: {}", p["hook_event_name"], o.stdout);
        assert!(o.stderr.contains("is over: its evidence could not be written"), "{}", o.stderr);
    }
    eprintln!(
        "hook, disk full: the first refused call was {first}; {} whole records kept; {}; verify: report.json: {msg}",
        lines.len(),
        &refusal[..refusal.len().min(200)]
    );
}
