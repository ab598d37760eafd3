//! `runbook-host hook`: the Claude Code tool-call hook, driven exactly as the client drives it (one
//! process per hook event, the documented JSON payload on stdin), through the bundled P2 credential
//! rotation (examples/rotate-credentials: a destructive, approval-gated step and Bash `when` constraints).

use crate::common;
use runbook_host::run::approvals;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use crate::common::hooks::*;

#[test]
fn recorded_payloads_of_every_event_kind() {
    let w = work("fixtures");
    let fx = |n: &str| std::fs::read(repo().join(format!("host/tests/fixtures/hook/{n}.json"))).unwrap();
    let o = w.hook_bytes(&fx("session-start"));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.json()["systemMessage"].as_str().unwrap().contains("supervising"));
    allowed(w.hook_bytes(&fx("pre-tool-use")));
    allowed(w.hook_bytes(&fx("post-tool-use")));
    let o = w.hook_bytes(&fx("stop"));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.json()["systemMessage"].as_str().unwrap().contains("not at a terminal of the runbook"), "{}", o.stdout);
    let o = w.hook_bytes(&fx("session-end"));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let dir = w.run_dir("fixture-session");
    let (ok, text) = verify(&dir);
    assert!(ok, "{text}");
    let ev = w.events("fixture-session");
    assert_eq!(ev[0]["event"]["coverage"], "complete");
    assert_eq!(ev[1]["event"]["call_id"], "toolu_01ABCfixture");
    // A finished run takes no more calls.
    assert!(w.hook_bytes(&fx("pre-tool-use")).denied().unwrap().contains("finished"));
}

#[test]
fn a_failed_tool_call_is_a_result_with_is_error() {
    let w = work("failure");
    let s = "fixture-failure";
    assert_eq!(w.hook(start(s)).code, 0);
    allowed(w.hook(pre(s, "Bash", bash("kubectl -n payments get secret payments-db-credentials"), "toolu_01XYZfailure")));
    let o = w.hook_bytes(&std::fs::read(repo().join("host/tests/fixtures/hook/post-tool-use-failure.json")).unwrap());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let ev = w.events(s);
    let last = &ev.last().unwrap()["event"];
    assert_eq!(last["type"], "result");
    assert_eq!(last["is_error"], true, "{last}");
}

/// Approves (or refuses) the one pending request of this run, as `runbook-host approve` does after a
/// human confirmed on a terminal.
fn answer(run_dir: &Path, granted: bool) {
    let p = approvals::pending(run_dir).unwrap();
    assert_eq!(p.len(), 1, "{p:?}");
    approvals::answer(run_dir, &p[0].id, "alice", granted, &p[0].call_sha256).unwrap();
}

#[test]
fn a_scripted_session_through_the_credential_rotation() {
    let w = work("scripted");
    let s = "sess-scripted-1";
    assert_eq!(w.hook(start(s)).code, 0);
    let run_dir = w.run_dir(s);
    let run_id = run_dir.file_name().unwrap().to_string_lossy().to_string();

    // inspect: an allowed read, its result passes the step's assert.
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    allowed(w.hook(pre(s, "Bash", get.clone(), "t1")));
    allowed(w.hook(post(s, "Bash", get, out("payments-db-credentials   Opaque   2   97d\n"), "t1")));
    // A shell command no capability declares.
    let r = w.hook(pre(s, "Bash", bash("rm -rf /var/lib/postgres"), "t2")).denied().expect("denied");
    assert!(r.contains("undeclared-tool"), "{r}");
    // A declared tool out of its step.
    let r = w.hook(pre(s, "mcp__slack__post_message", json!({"channel": "#x", "text": "done"}), "t3")).denied().expect("denied");
    assert!(r.contains("out-of-scope"), "{r}");
    // check-age.
    let meta = json!({"path": "database/creds/payments-app"});
    allowed(w.hook(pre(s, "mcp__vault__read_metadata", meta.clone(), "t4")));
    allowed(w.hook(post(s, "mcp__vault__read_metadata", meta, json!({"age_days": 97}), "t4")));
    // rotate: gated.
    let rot = bash("vault write -f database/rotate-role/payments-app");
    let r = w.hook(pre(s, "Bash", rot.clone(), "t6")).denied().expect("gated");
    assert!(r.contains("needs-approval") && r.contains(&format!("runbook-host approve {run_id} rotate")), "{r}");
    // The agent reaching for the approval channel through the shell: denied and recorded.
    let r = w.hook(pre(s, "Bash", bash(&format!("runbook-host approve {run_id} rotate")), "t7")).denied().expect("guarded");
    assert!(r.contains("guarded"), "{r}");
    assert_eq!(w.events(s).last().unwrap()["event"]["guard"], true);
    // A human refuses: the retry stays shut (and asks again).
    answer(&run_dir, false);
    assert!(w.hook(pre(s, "Bash", rot.clone(), "t8")).denied().is_some());
    // A human approves from a terminal (`runbook-host approve` under a pseudo-terminal): the retry of the
    // same call passes.
    approve_on_a_terminal(&w.runs(), &run_id, "rotate");
    allowed(w.hook(pre(s, "Bash", rot.clone(), "t9")));
    // The rotation fails its assert: back to `rotate` within the retry budget, a new approval needed.
    allowed(w.hook(post(s, "Bash", rot.clone(), out("Error writing data: permission denied\n"), "t9")));
    let r = w.hook(pre(s, "Bash", rot.clone(), "t10")).denied().expect("gated again");
    assert!(r.contains("needs-approval"), "{r}");
    answer(&run_dir, true);
    allowed(w.hook(pre(s, "Bash", rot.clone(), "t11")));
    allowed(w.hook(post(s, "Bash", rot, out("Success! Data written to: database/rotate-role/payments-app\n"), "t11")));
    // restart, verify, announce.
    for (i, (tool, input, resp)) in [
        ("Bash", bash("kubectl -n payments rollout restart deployment/payments-api"), out("deployment.apps/payments-api restarted\n")),
        (
            "Bash",
            bash("kubectl -n payments rollout status deployment/payments-api --timeout=300s"),
            out("deployment \"payments-api\" successfully rolled out\n"),
        ),
        ("mcp__slack__post_message", json!({"channel": "#payments-oncall", "text": "rotated"}), json!({"ok": true})),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("u{i}");
        allowed(w.hook(pre(s, tool, input.clone(), &id)));
        allowed(w.hook(post(s, tool, input, resp, &id)));
    }
    // Stop at a terminal ends the run; SessionEnd after that changes nothing.
    let o = w.hook(base(s, "Stop"));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(w.hook(base(s, "SessionEnd")).code, 0);
    let report: Value = serde_json::from_slice(&std::fs::read(run_dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["terminal"], "rotated", "{report}");
    assert_eq!(report["coverage"], "complete");
    let (ok, text) = verify(&run_dir);
    assert!(ok, "{text}");
    let decisions: Vec<String> =
        w.events(s).iter().map(|e| format!("{}:{}", e["decision"]["decision"].as_str().unwrap(), e["decision"]["deviation"].as_str().unwrap_or("-"))).collect();
    eprintln!("scripted session: {} events, outcome {}: {decisions:?}", decisions.len(), report["outcome"]);
}

#[test]
fn a_stop_before_a_terminal_can_keep_the_agent_working() {
    let w = work("keep");
    let s = "sess-keep";
    assert_eq!(w.hook(start(s)).code, 0);
    let mut c = common::cmd(BIN)
        .args(["hook", "--runbook", "runbook.yaml", "--keep-working"])
        .current_dir(&w.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(base(s, "Stop").to_string().as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["decision"], "block", "{v}");
}

#[test]
fn parallel_pre_tool_use_calls_are_decided_one_at_a_time() {
    let w = work("parallel");
    let s = "sess-parallel";
    assert_eq!(w.hook(start(s)).code, 0);
    let n = 12;
    let outs: Vec<Out> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let w = &w;
                sc.spawn(move || w.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), &format!("p{i}"))))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in &outs {
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let ev = w.events(s);
    assert_eq!(ev.len(), 1 + n, "every call recorded once");
    let mut ids: Vec<String> = ev[1..].iter().map(|e| e["event"]["call_id"].as_str().unwrap().to_string()).collect();
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e["decision"]["seq"], i as u64, "one recorded order");
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n);
    assert_eq!(w.hook(base(s, "SessionEnd")).code, 0);
    let (ok, text) = verify(&w.run_dir(s));
    assert!(ok, "{text}");
}

/// Names an agent or an approver chooses are data, not paths: a call to a tool named like an absolute path
/// is denied and recorded as a deviation by that name, an answer signed by `/home/alice` is recorded, and
/// the bundle still verifies (docs/spec/bundle.md#relative-paths-only). Before, `verify`'s
/// `relative-paths-only` scanned the report, so an agent could make its own run's evidence fail to check out.
#[test]
fn tools_and_approvers_named_like_paths_leave_a_bundle_that_verifies() {
    let s = "sess-path-names";
    let w = at_rotate("path-names", s);
    let names = ["/etc/passwd", "~root", "C:\\Windows", "file:///etc/shadow", "\\\\host\\share"];
    for (i, t) in names.iter().enumerate() {
        let r = w.hook(pre(s, t, json!({}), &format!("p{i}"))).denied().expect("denied");
        assert!(r.contains("undeclared-tool"), "{t}: {r}");
    }
    // Through the approval gate: the human who answers is recorded by the name given.
    let rot = bash("vault write -f database/rotate-role/payments-app");
    assert!(w.hook(pre(s, "Bash", rot.clone(), "t3")).denied().expect("gated").contains("needs-approval"));
    let run_dir = w.run_dir(s);
    let p = approvals::pending(&run_dir).unwrap();
    approvals::answer(&run_dir, &p[0].id, "/home/alice", true, &p[0].call_sha256).unwrap();
    allowed(w.hook(pre(s, "Bash", rot, "t4")));
    assert_eq!(w.hook(base(s, "SessionEnd")).code, 0);

    let report: Value = serde_json::from_slice(&std::fs::read(run_dir.join("report.json")).unwrap()).unwrap();
    let devs = report["deviations"].as_array().unwrap().iter().filter(|d| d["class"] == "undeclared-tool");
    let tools: Vec<&str> = devs.map(|d| d["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, names, "{report}");
    assert_eq!(report["approvals"][0]["approver"], "/home/alice", "{report}");
    let (ok, text) = verify(&run_dir);
    assert!(ok, "{text}");
    // The check still holds where the host writes: an absolute path put into run.json fails it.
    let run_json = std::fs::read_to_string(run_dir.join("run.json")).unwrap();
    let edited = run_json.replacen("\"reference\": \"", "\"reference\": \"/home/agent/", 1);
    assert_ne!(edited, run_json);
    std::fs::write(run_dir.join("run.json"), edited).unwrap();
    let (ok, text) = verify(&run_dir);
    assert!(!ok && text.contains("run.json: an absolute path at /document/reference"), "{text}");
}

#[test]
fn sessions_never_mix() {
    let w = work("mix");
    assert_eq!(w.hook(start("sa")).code, 0);
    assert_eq!(w.hook(start("sb")).code, 0);
    assert_ne!(w.run_dir("sa"), w.run_dir("sb"));
    allowed(w.hook(pre("sa", "Bash", bash("kubectl -n payments get pods"), "a1")));
    assert_eq!(w.events("sa").len(), 2);
    assert_eq!(w.events("sb").len(), 1);
}

/// The hook has no timer between processes: a stop feeds a `tick` when a pending checkpoint's deadline has
/// passed, so the module fails the run then (9.21), and the bundle shows the timed-out checkpoint.
#[test]
fn a_stop_after_a_checkpoint_deadline_fails_the_run() {
    let w = work("deadline");
    let doc = std::fs::read_to_string(repo().join("examples/read-only-investigation/runbook.yaml")).unwrap();
    let doc = doc.replace("steps:\n", "checkpoints:\n  - {id: cp-df, kind: tool_call, required: true, match: {tool: Bash}, timeout_ms: 1}\nsteps:\n");
    std::fs::write(w.0.join("runbook.yaml"), doc).unwrap();
    let s = "sess-deadline";
    let o = w.hook(start(s));
    assert_eq!(o.code, 0, "{}", o.stderr);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut stop = base(s, "Stop");
    stop["stop_hook_active"] = json!(false);
    let o = w.hook(stop);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let events = w.events(s);
    let kinds: Vec<&str> = events.iter().map(|e| e["event"]["type"].as_str().unwrap()).collect();
    // The halt ends the run: no `end` follows, and the stop finishes the bundle.
    assert_eq!(kinds, ["start", "tick"], "{events:?}");
    assert_eq!(events[1]["decision"]["decision"], "halt");
    assert_eq!(events[1]["decision"]["reason"], "checkpoint-timeout");
    let report: Value = serde_json::from_slice(&std::fs::read(w.run_dir(s).join("report.json")).unwrap()).unwrap();
    assert_eq!(report["outcome"], "failed");
    assert_eq!(report["checkpoints"]["cp-df"]["status"], "timed-out");
    let (ok, v) = verify(&w.run_dir(s));
    assert!(ok, "{v}");
}

#[test]
fn errors_fail_closed_and_lose_nothing() {
    let w = work("errors");
    let s = "sess-err";
    assert_eq!(w.hook(start(s)).code, 0);
    allowed(w.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), "e1")));
    let path = w.run_dir(s).join("events.ndjson");
    let events = || std::fs::read(&path).unwrap();
    let before = events();
    let bad: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"not json".to_vec(),
        b"[1,2]".to_vec(),
        json!({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {}}).to_string().into_bytes(),
        json!({"session_id": s, "hook_event_name": "Teleport"}).to_string().into_bytes(),
        json!({"session_id": s, "hook_event_name": "PreToolUse", "tool_input": {}}).to_string().into_bytes(),
        json!({"session_id": s, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": "ls"}).to_string().into_bytes(),
        json!({"session_id": s, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {}}).to_string().into_bytes(),
        pre("../escape", "Bash", bash("ls"), "x").to_string().into_bytes(),
        pre("no-such-session", "Bash", bash("ls"), "x").to_string().into_bytes(),
    ];
    for b in &bad {
        let o = w.hook_bytes(b);
        assert_eq!(o.code, 2, "{}: {}", String::from_utf8_lossy(b), o.stdout);
        assert!(o.stderr.contains("denied (fail closed)"), "{}", o.stderr);
        assert!(o.denied().is_none() && !o.stdout.contains("allow"));
    }
    assert_eq!(events(), before, "nothing lost or added");

    // A corrupted bundle: one byte of a recorded event changed.
    let corrupted = String::from_utf8(before.clone()).unwrap().replace("get pods", "get podz");
    std::fs::write(&path, &corrupted).unwrap();
    let o = w.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), "e2"));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("hash chain is broken"), "{}", o.stderr);
    assert_eq!(std::fs::read(&path).unwrap(), corrupted.as_bytes());
    std::fs::write(&path, &before).unwrap();

    // A deleted lock file.
    let lock = w.runs().join(format!(".hook/{s}.lock"));
    std::fs::remove_file(&lock).unwrap();
    let o = w.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), "e3"));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("lock file"), "{}", o.stderr);
    assert_eq!(events(), before);
    // A deleted state file.
    std::fs::write(&lock, b"").unwrap();
    std::fs::remove_file(w.runs().join(format!(".hook/{s}.json"))).unwrap();
    let o = w.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), "e4"));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("no hook state"), "{}", o.stderr);
    assert_eq!(events(), before);
}

/// Issue 28, F6: a file the hook reads, made huge and sparse (64 GiB apparent, nothing on disk), is a clear
/// refusal naming it (exit 2, the call denied), never an allocation of its apparent size and an abort; and
/// `verify` refuses such a bundle with exit 1 before reading it.
#[test]
fn a_huge_sparse_file_is_refused_before_it_is_read() {
    const HUGE: u64 = 64 << 30;
    let grow = |p: &Path| std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(HUGE).unwrap();
    for (i, what) in ["events.ndjson", "run.json", "the hook's session state", "runbook.yaml"].into_iter().enumerate() {
        let w = work(&format!("sparse-{i}"));
        let s = "sess-sparse";
        allowed(w.hook(start(s)));
        allowed(w.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), "p1")));
        let dir = w.run_dir(s);
        let path = match what {
            "the hook's session state" => w.runs().join(format!(".hook/{s}.json")),
            f => dir.join(f),
        };
        grow(&path);
        let o = w.hook(pre(s, "Bash", bash("kubectl -n payments get pods"), "p2"));
        assert_eq!(o.code, 2, "{what}: exit {}, {}", o.code, o.stderr);
        assert!(o.stderr.contains("larger than"), "{what}: {}", o.stderr);
        assert!(o.denied().is_none() && !o.stdout.contains("allow"), "{what}: {}", o.stdout);
    }
    // A finished run whose events were made huge: verify refuses it, unread.
    let w = work("sparse-verify");
    let s = "sess-sparse-verify";
    allowed(w.hook(start(s)));
    assert_eq!(w.hook(base(s, "SessionEnd")).code, 0);
    let dir = w.run_dir(s);
    assert!(verify(&dir).0, "the run verifies before");
    grow(&dir.join("events.ndjson"));
    let (ok, said) = verify(&dir);
    assert!(!ok && said.contains("NOT VERIFIED") && said.contains("more than"), "{said}");
}

#[test]
fn install_merges_and_uninstall_removes_exactly_what_it_added() {
    let w = work("install");
    let settings = w.0.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let theirs = json!({"model": "x", "hooks": {"PreToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "lint-it"}]}]}});
    std::fs::write(&settings, serde_json::to_string_pretty(&theirs).unwrap()).unwrap();
    let run = |args: &[&str]| {
        let o = common::cmd(BIN).args(args).current_dir(&w.0).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    run(&["hook", "--runbook", "rotate-credentials@1.3.0", "install"]);
    run(&["hook", "--runbook", "rotate-credentials@1.3.0", "install"]);
    let v: Value = serde_json::from_slice(&std::fs::read(&settings).unwrap()).unwrap();
    for e in ["PreToolUse", "PostToolUse", "Stop", "SessionStart", "SessionEnd"] {
        let n = v["hooks"][e]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["hooks"][0]["command"].as_str().unwrap().contains(" hook --runbook rotate-credentials@1.3.0"))
            .count();
        assert_eq!(n, 1, "{e}: {v}");
        // Fail closed in the client too: a hook that cannot start, hangs or crashes blocks the action.
        let ours = v["hooks"][e].as_array().unwrap().iter().find(|g| g["hooks"][0]["command"].as_str().unwrap().contains(" hook --runbook")).unwrap();
        assert_eq!(ours["hooks"][0]["onFailure"], "block", "{e}: {ours}");
        assert_eq!(ours["hooks"][0]["timeout"], 30, "{e}: {ours}");
    }
    assert_eq!(v["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
    let printed: Value = serde_json::from_str(&run(&["hook", "--runbook", "rotate-credentials@1.3.0", "uninstall", "--print"])).unwrap();
    assert_eq!(printed, theirs);
    run(&["hook", "--runbook", "rotate-credentials@1.3.0", "uninstall"]);
    let v: Value = serde_json::from_slice(&std::fs::read(&settings).unwrap()).unwrap();
    assert_eq!(v, theirs);
}

/// Runs a command line through `sh -c` in `dir`, as Claude Code runs a hook's `command`, with `payload`
/// on standard input.
fn sh_hook(command: &str, dir: &Path, env: &[(&str, &std::ffi::OsStr)], payload: &Value) -> Out {
    let mut c = common::cmd("sh");
    c.args(["-c", command]).current_dir(dir).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(payload.to_string().as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    Out { code: o.status.code().unwrap_or(-1), stdout: String::from_utf8_lossy(&o.stdout).into(), stderr: String::from_utf8_lossy(&o.stderr).into() }
}

fn canonical(p: impl AsRef<Path>) -> String {
    std::fs::canonicalize(p).unwrap().to_string_lossy().into_owned()
}

#[test]
fn installed_hook_works_from_a_subdirectory_and_uninstall_needs_no_options() {
    let w = work("install-absolute");
    let settings = w.0.join(".claude/settings.json");
    let cli = |args: &[&str]| {
        let o = common::cmd(BIN).args(args).current_dir(&w.0).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    // A runbook file that is not there is refused now, not at the first session.
    let (code, err) = cli(&["hook", "--runbook", "runbok.yaml", "install"]);
    assert_eq!((code, err.as_str()), (Some(2), "runbook-host: error: --runbook `runbok.yaml` is neither `id@version` nor an existing file\n"));
    assert!(!settings.exists());
    let (code, err) = cli(&["hook", "--runbook", "runbook.yaml", "install", "--mode", "command"]);
    assert_eq!(code, Some(0), "{err}");
    let project = canonical(&w.0);
    // The binary, the runbook file, the registry and the runs directory, all absolute.
    let command = format!("{} hook --runbook {project}/runbook.yaml --registry {project}/.runbook/registry --runs {project}/.runbook/runs", canonical(BIN));
    assert_eq!(err, format!("runbook-host hook: installed in `.claude/settings.json` (command mode, as asked): {command}\n"));
    let v: Value = serde_json::from_slice(&std::fs::read(&settings).unwrap()).unwrap();
    for (event, _) in runbook_host::adapters::hooks::claude::EVENTS {
        let h = &v["hooks"][event][0]["hooks"][0];
        assert_eq!((h["command"].as_str(), h["onFailure"].as_str(), h["timeout"].as_u64()), (Some(command.as_str()), Some("block"), Some(30)), "{event}: {v}");
    }
    // Claude Code started in a subdirectory runs the same command line there: it finds everything.
    let sub = w.0.join("services/payments");
    std::fs::create_dir_all(&sub).unwrap();
    let env: [(&str, &std::ffi::OsStr); 1] = [("HOME", w.0.as_os_str())];
    let o = sh_hook(&command, &sub, &env, &start("sess-sub"));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.json()["systemMessage"].as_str().unwrap().contains("supervising"), "{}", o.stdout);
    assert!(w.runs().join("latest.json").is_file(), "the run is under the project's runs directory");
    assert!(!sub.join(".runbook").exists(), "nothing is written relative to the subdirectory");
    // The agent's relative spelling of the runs directory is still guarded.
    let o = sh_hook(&command, &w.0, &env, &pre("sess-sub", "Bash", bash("cat .runbook/runs/latest.json"), "t1"));
    assert!(o.denied().is_some_and(|r| r.contains("guarded")), "{}{}", o.stdout, o.stderr);
    assert_eq!(sh_hook(&command, &sub, &env, &base("sess-sub", "SessionEnd")).code, 0);

    // Uninstall, as the README writes it (no option repeated): how many it removed; the file held only
    // our hooks, so it is gone rather than left as `{}`.
    let (code, err) = cli(&["hook", "uninstall"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err, "runbook-host hook: removed 6 hook entries from `.claude/settings.json`; it held nothing else and was deleted\n");
    assert!(!settings.exists());
    // Nothing left to remove: exit 1, and it says so.
    let (code, err) = cli(&["hook", "uninstall"]);
    assert_eq!((code, err.as_str()), (Some(1), "runbook-host hook: nothing to uninstall: `.claude/settings.json` does not exist\n"));
    let theirs = json!({"model": "x", "hooks": {"PreToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "lint-it"}]}]}});
    std::fs::write(&settings, theirs.to_string()).unwrap();
    let (code, err) = cli(&["hook", "uninstall"]);
    assert_eq!((code, err.as_str()), (Some(1), "runbook-host hook: nothing to uninstall: `.claude/settings.json` holds no `runbook-host hook` entry\n"));
    // An entry of an older install (a relative command) beside other settings: removed, the rest kept.
    let mut old = theirs.clone();
    old["hooks"]["Stop"] =
        json!([{"hooks": [{"type": "command", "command": "./target/release/runbook-host hook --runbook rotate-credentials@1.3.0", "timeout": 30}]}]);
    std::fs::write(&settings, old.to_string()).unwrap();
    let (code, err) = cli(&["hook", "uninstall"]);
    assert_eq!((code, err.as_str()), (Some(0), "runbook-host hook: removed 1 hook entries from `.claude/settings.json`\n"));
    let v: Value = serde_json::from_slice(&std::fs::read(&settings).unwrap()).unwrap();
    assert_eq!(v, theirs);
}

#[test]
fn a_gated_call_names_approve_the_way_the_user_can_run_it() {
    let w = work("approve-invocation");
    let s = "sess-invocation";
    let runs = canonical(&w.0) + "/elsewhere/runs";
    let on_path = w.0.join("bin");
    std::fs::create_dir_all(&on_path).unwrap();
    std::os::unix::fs::symlink(BIN, on_path.join("runbook-host")).unwrap();
    let with_path = std::env::join_paths([on_path.clone(), "/usr/bin".into(), "/bin".into()]).unwrap();
    let hook = |path: &std::ffi::OsStr, payload: Value| {
        let cmd = format!("'{BIN}' hook --runbook runbook.yaml --runs '{runs}'");
        sh_hook(&cmd, &w.0, &[("PATH", path), ("HOME", w.0.as_os_str())], &payload)
    };
    let plain = std::ffi::OsStr::new("/usr/bin:/bin");
    assert_eq!(hook(plain, start(s)).code, 0);
    let run_id =
        std::fs::read_dir(&runs).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).find(|n| n.starts_with("r-")).unwrap();
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    allowed(hook(plain, pre(s, "Bash", get.clone(), "t1")));
    allowed(hook(plain, post(s, "Bash", get, out("payments-db-credentials   Opaque   2   97d\n"), "t1")));
    let meta = json!({"path": "database/creds/payments-app"});
    allowed(hook(plain, pre(s, "mcp__vault__read_metadata", meta.clone(), "t2")));
    allowed(hook(plain, post(s, "mcp__vault__read_metadata", meta, json!({"age_days": 97}), "t2")));
    let rot = bash("vault write -f database/rotate-role/payments-app");
    // Not on PATH: the binary's absolute path, and the runs directory the hook was given.
    let r = hook(plain, pre(s, "Bash", rot.clone(), "t3")).denied().expect("gated");
    assert!(r.contains(&format!("a person runs `{} approve {run_id} rotate --runs {runs}` in another terminal", canonical(BIN))), "{r}");
    // On PATH as this very binary: its name.
    let r = hook(&with_path, pre(s, "Bash", rot, "t4")).denied().expect("gated");
    assert!(r.contains(&format!("a person runs `runbook-host approve {run_id} rotate --runs {runs}` in another terminal")), "{r}");
}

fn pct(v: &mut [u128], p: f64) -> u128 {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A work directory running read-only-investigation at R1 (the client routes, so a step's calls can
/// repeat for as long as a session lasts), for the latency figures.
fn latency_work(name: &str, s: &str) -> Work {
    let w = work(name);
    std::fs::copy(repo().join("examples/read-only-investigation/runbook.yaml"), w.0.join("runbook.yaml")).unwrap();
    let o = w.hook_with(&["--profile", "R1"], start(s).to_string().as_bytes());
    assert_eq!(o.code, 0, "{}", o.stderr);
    w
}

/// The hook latency of one strategy: `samples` PreToolUse processes (each followed by its PostToolUse) on a
/// run grown to `target` events (so measured from `target` to `target + 2 * samples`) the way a session grows: each call followed by its result, and one
/// call in ten one that no capability allows (denied and recorded).
fn measure(w: &Work, s: &str, target: usize, samples: usize) -> String {
    let df = bash("df -h /var");
    let mut n = w.events(s).len();
    let mut i = 0;
    while n < target {
        if i % 10 == 9 {
            assert!(w.hook(pre(s, "Bash", bash("rm -rf /var/log/old"), &format!("f{i}"))).denied().is_some());
            n += 1;
        } else {
            allowed(w.hook(pre(s, "Bash", df.clone(), &format!("f{i}"))));
            allowed(w.hook(post(s, "Bash", df.clone(), out("/dev/sda1 50G 45G 5G 90% /var"), &format!("f{i}"))));
            n += 2;
        }
        i += 1;
    }
    let (mut total, mut wall, mut restore) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..samples {
        let id = format!("m{target}-{k}");
        let payload = pre(s, "Bash", df.clone(), &id).to_string();
        let t = Instant::now();
        let o = w.hook_bytes(payload.as_bytes());
        wall.push(t.elapsed().as_micros());
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.denied().is_none(), "{}", o.stdout);
        let (tt, r, n) = o.timing();
        assert!(o.stderr.contains(&format!("chain_checked={n} ")), "every link is checked on every resume: {}", o.stderr);
        total.push(tt);
        restore.push(r);
        let o = w.hook(post(s, "Bash", df.clone(), out("/dev/sda1 50G 45G 5G 90% /var"), &id));
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    format!(
        "hook latency (full replay) at ~{target} events: process wall median {:.2} ms p95 {:.2} ms; in-process median {:.2} ms; restore median {:.3} ms p95 {:.3} ms",
        pct(&mut wall, 0.5) as f64 / 1000.0,
        pct(&mut wall, 0.95) as f64 / 1000.0,
        pct(&mut total, 0.5) as f64 / 1000.0,
        pct(&mut restore, 0.5) as f64 / 1000.0,
        pct(&mut restore, 0.95) as f64 / 1000.0,
    )
}

/// The whole hook process (start, load the precompiled component, replay, decide, write, exit), measured
/// from the client's side, and the restore cost the hook reports. Figures only (timings are benchmarks'
/// business, never asserted); what is asserted is that every link was checked.
#[test]
fn hook_latency() {
    let s = "sess-latency";
    let w = latency_work("latency", s);
    for target in [50, 500] {
        eprintln!("{}", measure(&w, s, target, 20));
    }
    // The run ends and verifies.
    allowed(w.hook(base(s, "SessionEnd")));
    let (ok, v) = verify(&w.run_dir(s));
    assert!(ok, "{v}");
}

/// The same at 5,000 events (slow to fill: one process per event):
/// `cargo test --release -p runbook-host --test hook -- --ignored --nocapture`.
#[test]
#[ignore]
fn hook_latency_at_5000_events() {
    let s = "sess-latency-5000";
    let w = latency_work("latency5000", s);
    eprintln!("{}", measure(&w, s, 5000, 20));
}

/// The hook with `--require-signature` and `--signing-key` (issue "Past one machine"): an unsigned document,
/// or one signed by another key, is refused at SessionStart (the client blocks, nothing is admitted); a
/// signed one runs, and the receipt written at SessionEnd is signed by the host's key, each event's
/// process reopening the run with the same key.
#[test]
fn the_hook_requires_a_signed_document_and_signs_its_receipt() {
    let w = work("signed");
    for k in ["reviewer.pem", "other.pem", "host.pem"] {
        assert!(common::cmd(BIN).args(["keygen", "--out", k]).current_dir(&w.0).output().unwrap().status.success());
    }
    let flags = ["--require-signature", "reviewer.pem.pub", "--signing-key", "host.pem"];
    let o = w.hook_with(&flags, start("unsigned").to_string().as_bytes());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("signature-missing"), "{}", o.stderr);
    assert!(common::cmd(BIN).args(["sign", "runbook.yaml", "--key", "other.pem"]).current_dir(&w.0).output().unwrap().status.success());
    let o = w.hook_with(&flags, start("other").to_string().as_bytes());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("signature-untrusted"), "{}", o.stderr);
    assert!(!w.runs().join(".hook/unsigned.json").exists() && !w.runs().join(".hook/other.json").exists());

    assert!(common::cmd(BIN).args(["sign", "runbook.yaml", "--key", "reviewer.pem"]).current_dir(&w.0).output().unwrap().status.success());
    let s = "signed";
    let ev = |p: Value| w.hook_with(&flags, p.to_string().as_bytes());
    assert_eq!(ev(start(s)).code, 0);
    let o = ev(pre(s, "Bash", bash("kubectl -n payments get secret payments-db-credentials"), "toolu_signed1"));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.denied(), None, "{}", o.stdout);
    // The agent cannot read the host's key through a tool call (the guard).
    let o = ev(pre(s, "Bash", bash("cat host.pem"), "toolu_signed2"));
    assert!(o.denied().is_some_and(|r| r.contains("runbook-host itself")), "{}", o.stdout);
    assert_eq!(ev(base(s, "SessionEnd")).code, 0);
    let run = w.run_dir(s);
    let manifest: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(manifest["document"]["provenance"]["kind"], "file");
    assert!(manifest["document"]["provenance"]["signed_by"].as_str().is_some_and(|k| k.starts_with("sha256:")));
    assert!(run.join("receipt.dsse.json").is_file());
    let verify = |key: &str| common::cmd(BIN).args(["verify", "--key", key]).arg(&run).current_dir(&w.0).output().unwrap();
    let o = verify("host.pem.pub");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(verify("reviewer.pem.pub").status.code(), Some(1), "the receipt is the host's, not the reviewer's");
}

/// `--client auto` installs for each agent CLI on PATH, says which it found where, and uninstalls the
/// same way; with none on PATH it refuses, naming what it looked for.
#[test]
fn client_auto_installs_for_each_cli_on_path() {
    use std::os::unix::fs::PermissionsExt;
    let w = work("auto");
    let bin = w.0.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    for cli in ["gemini", "codex", "cline"] {
        std::fs::write(bin.join(cli), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(bin.join(cli), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // Not executable: not a CLI on PATH.
    std::fs::write(bin.join("qwen"), "").unwrap();
    let runbook = repo().join("examples/rotate-credentials/runbook.yaml");
    let hook_cli =
        |path: &Path, args: &[&str]| common::cmd_in(BIN, &w.0.join("home")).arg("hook").args(args).current_dir(&w.0).env("PATH", path).output().unwrap();
    let o = hook_cli(&bin, &["--runbook", runbook.to_str().unwrap(), "--client", "auto", "install"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "on PATH: Codex ({}), Gemini CLI ({}), Cline ({}); installing for each",
            bin.join("codex").display(),
            bin.join("gemini").display(),
            bin.join("cline").display()
        )),
        "{err}"
    );
    assert!(
        w.0.join(".codex/hooks.json").is_file() && w.0.join(".gemini/settings.json").is_file() && w.0.join(".clinerules/hooks/PreToolUse").is_file(),
        "{err}"
    );
    assert!(!w.0.join(".claude").exists() && !w.0.join(".qwen").exists() && !w.0.join(".github").exists());
    let gemini: Value = serde_json::from_slice(&std::fs::read(w.0.join(".gemini/settings.json")).unwrap()).unwrap();
    assert!(gemini["hooks"]["BeforeTool"][0]["hooks"][0]["command"].as_str().unwrap().contains("--client gemini"));
    let o = hook_cli(&bin, &["--client", "auto", "uninstall"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!w.0.join(".codex/hooks.json").exists() && !w.0.join(".gemini/settings.json").exists() && !w.0.join(".clinerules/hooks/PreToolUse").exists());
    // None on PATH: refused, and nothing written.
    let empty = w.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = hook_cli(&empty, &["--runbook", runbook.to_str().unwrap(), "--client", "auto", "install"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("found none of `claude`, `codex`, `gemini`, `copilot`, `qwen`, `opencode`, `cline` on PATH"));
    // A hook event names its client: auto is refused there, failing closed.
    let mut child = common::cmd(BIN).args(["hook", "--client", "auto"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let _ = child.stdin.take().unwrap().write_all(b"{}");
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(2));
}
