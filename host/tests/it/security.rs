//! The attacks of the security review (docs/security.md), each reproduced as the adversarial agent ran
//! it: an agent that can write files in the project (one broad shell step is enough) and tries to turn
//! that into a destructive call no human approved. Each test fails on the host before the fix.

use crate::common;
use runbook_host::run::approvals;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::hooks::*;

/// The destructive, gated command of rotate-credentials, and the one no capability allows.
const ROTATE: &str = "vault write -f database/rotate-role/payments-app";
const DESTROY: &str = "rm -rf /var/lib/postgres";

fn decisions(w: &Work, s: &str) -> Vec<String> {
    w.events(s).iter().map(|e| format!("{}:{}", e["decision"]["decision"].as_str().unwrap(), e["decision"]["reason"].as_str().unwrap_or("-"))).collect()
}

fn approve_cli(runs: &Path, run_id: &str, step: &str) -> (i32, String) {
    // Under `script`, as the agent ran it: a pseudo-terminal is no proof of a human.
    let cmd = format!("{BIN} approve {run_id} {step} --runs {}", runs.display());
    let o = common::cmd("sh").arg("-c").arg(format!("(sleep 1; echo y) | script -qec '{cmd}' /dev/null")).output().expect("sh and script(1)");
    (o.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// Finding 1: a session snapshot planted in the hook's directory (the three forgeries that once disabled
/// enforcement: the profile lowered to R0, the position moved past the gate, the gate marked open) is
/// never read: every process replays the recorded events, and each forged call is decided as the
/// replay decides it.
#[test]
fn a_forged_session_snapshot_changes_no_decision() {
    let s = "sess-forged-snapshot";
    let w = at_rotate("forged-snapshot", s);
    // The module's own snapshot of this very run, forged three ways, where the old hook read it.
    let policy = runbook_host::files::shared_policy().unwrap();
    let doc = std::fs::read(w.0.join("runbook.yaml")).unwrap();
    let mut session = policy.session(&doc).unwrap();
    for e in w.events(s) {
        session.handle_line(&e["event"].to_string());
    }
    let snap = session.snapshot().unwrap();
    assert!(snap.contains("\"R2\"") && snap.contains("\"gate_open\":false"), "{snap}");
    for forged in [snap.replace("\"R2\"", "\"R0\""), snap.replace("\"gate_open\":false", "\"gate_open\":true")] {
        let record = json!({"schema": "runbook-resume/v1", "session": forged});
        std::fs::write(w.runs().join(format!(".hook/{s}.snapshot")), record.to_string()).unwrap();
        let r = w.hook(pre(s, "Bash", bash(DESTROY), "x1")).denied().expect("denied");
        assert!(r.contains("undeclared-tool"), "{r}");
        let r = w.hook(pre(s, "Bash", bash(ROTATE), "x2")).denied().expect("still gated");
        assert!(r.contains("approval"), "{r}");
    }
    let d = decisions(&w, s);
    assert!(d.iter().all(|d| !d.starts_with("allow") || !d.contains("undeclared")), "{d:?}");
    assert_eq!(d.iter().filter(|d| *d == "needs-approval:awaiting-approval").count(), 2, "{d:?}");
    // Every process replayed every link (the timing line says how many it checked).
    let o = w.hook(pre(s, "Bash", bash(DESTROY), "x3"));
    let n = w.events(s).len() - 1;
    assert!(o.stderr.contains(&format!("chain_checked={n} ")), "{}", o.stderr);
}

/// Finding 2: the agent writes a request and its answer into the run directory itself (no
/// `needs-approval` was ever decided for the call), or answers a request through `approve` under a
/// pseudo-terminal: the host feeds neither, and `approve` shows nothing it did not issue.
#[test]
fn the_agent_cannot_approve_a_request_the_host_never_issued() {
    let s = "sess-self-approval";
    let w = at_rotate("self-approval", s);
    let dir = w.run_dir(s);
    let run_id = dir.file_name().unwrap().to_string_lossy().to_string();
    let policy = runbook_host::files::shared_policy().unwrap();
    let args = bash(ROTATE).to_string();
    let sha = policy.call_sha256("Bash", &args).unwrap().unwrap();
    // Before the host ever asked: a forged request and a forged grant for the exact call.
    let id = approvals::request(&dir, Some("rotate"), "Bash", &args, &sha).unwrap();
    approvals::answer(&dir, &id, "root", true, &sha).unwrap();
    let r = w.hook(pre(s, "Bash", bash(ROTATE), "t3")).denied().expect("the forged grant is not fed");
    assert!(r.contains("approval"), "{r}");
    assert!(w.events(s).iter().all(|e| e["event"]["type"] != "approval"), "no approval event was recorded");
    // A request for a step the run is not in, answered through `approve` on a pseudo-terminal.
    let _ = approvals::request(&dir, Some("restart"), "Bash", &args, &sha).unwrap();
    let (code, text) = approve_cli(&w.runs(), &run_id, "restart");
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("was not issued by the host"), "{text}");
    assert!(w.events(s).iter().all(|e| e["event"]["type"] != "approval"), "no approval event was recorded");
}

/// Finding 5: the bundle's document replaced by one without `requires_approval`, `run.json`'s pin
/// updated to match (and, the second time, its `chain_h0` and the envelope too): the hook refuses the run
/// as tampered (exit 2) instead of replaying it with the other document.
#[test]
fn a_swapped_document_is_tampering() {
    for (k, also_h0) in [(0, false), (1, true)] {
        let s = &format!("sess-swap-{k}");
        let w = at_rotate(&format!("swap-{k}"), s);
        let dir = w.run_dir(s);
        let _ = w.hook(pre(s, "Bash", bash(ROTATE), "t3"));
        let doc = std::fs::read_to_string(dir.join("runbook.yaml")).unwrap().replace("    requires_approval: true\n", "");
        std::fs::write(dir.join("runbook.yaml"), &doc).unwrap();
        let mut run: Value = serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
        let sha = hex(doc.as_bytes());
        run["document"]["sha256"] = json!(sha);
        if also_h0 {
            let policy = runbook_host::files::shared_policy().unwrap();
            let env = policy.envelope(doc.as_bytes()).unwrap().unwrap();
            std::fs::write(dir.join("envelope.json"), &env).unwrap();
            run["chain_h0"] = json!(hex(env.as_bytes()));
            run["envelope_sha256"] = json!(hex(env.as_bytes()));
        }
        std::fs::write(dir.join("run.json"), serde_json::to_string_pretty(&run).unwrap()).unwrap();
        let o = w.hook(pre(s, "Bash", bash(ROTATE), "t4"));
        assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
        assert!(o.stderr.contains("does not check out"), "{}", o.stderr);
        assert!(o.stderr.contains(if also_h0 { "pinned" } else { "chain_h0" }), "{}", o.stderr);
    }
}

fn hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// Finding 6: a recorded line whose `h` is not its link is refused on the next event, however the
/// previous process left things.
#[test]
fn a_broken_link_is_refused_on_the_next_event() {
    let s = "sess-link";
    let w = at_rotate("link", s);
    let p = w.run_dir(s).join("events.ndjson");
    let text = std::fs::read_to_string(&p).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let last = lines.pop().unwrap();
    let forged = format!("{{\"h\":\"{}\"{}", "f".repeat(64), &last[71..]);
    lines.push(forged);
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    let o = w.hook(pre(s, "Bash", bash(DESTROY), "t3"));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains(&format!("events.ndjson:{}: the hash chain is broken", lines.len())), "{}", o.stderr);
}

/// Finding 7: a session lock that someone holds (a hung hook, or the agent on purpose) denies the event
/// after a bounded wait instead of hanging the client.
#[test]
fn a_held_session_lock_denies_after_a_bounded_wait() {
    let s = "sess-lock";
    let w = at_rotate("lock", s);
    let f = std::fs::OpenOptions::new().write(true).open(w.runs().join(format!(".hook/{s}.lock"))).unwrap();
    f.lock().unwrap();
    let t = Instant::now();
    let o = w.hook_with(&["--lock-timeout-ms", "300"], pre(s, "Bash", bash(DESTROY), "t3").to_string().as_bytes());
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains("still held after 300 ms"), "{}", o.stderr);
    assert!(t.elapsed() < Duration::from_secs(30), "the wait is bounded");
    drop(f);
    assert!(w.hook(pre(s, "Bash", bash(DESTROY), "t4")).denied().unwrap().contains("undeclared-tool"));
}

/// Finding 8: symlinks planted where the hook writes (the session's lock, its state file) are refused or
/// replaced, never written through.
#[test]
fn the_hooks_files_are_never_written_through_a_symlink() {
    let w = work("symlink");
    let victim = w.0.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    let hook_dir = w.runs().join(".hook");
    std::fs::create_dir_all(&hook_dir).unwrap();
    // The state file of a new session is a symlink: SessionStart replaces the link, not the victim.
    std::os::unix::fs::symlink(&victim, hook_dir.join("s1.json")).unwrap();
    assert_eq!(w.hook(start("s1")).code, 0);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!std::fs::symlink_metadata(hook_dir.join("s1.json")).unwrap().file_type().is_symlink());
    // The lock file is a symlink: the event is denied and the victim untouched.
    std::fs::remove_file(hook_dir.join("s1.lock")).unwrap();
    std::os::unix::fs::symlink(&victim, hook_dir.join("s1.lock")).unwrap();
    let o = w.hook(pre("s1", "Bash", bash("kubectl -n payments get pods"), "t1"));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains("symlink"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // The hook's directory itself a symlink: refused.
    let w2 = work("symlink-dir");
    let elsewhere = w2.0.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::create_dir_all(w2.runs()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, w2.runs().join(".hook")).unwrap();
    let o = w2.hook(start("s2"));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// Finding 4: a redacted export whose report was relabelled (outcome `completed`, terminal `rotated`, no
/// deviations, an approval nobody gave) with every hash fixed up: verify holds the report against the
/// chained decision lines and refuses it.
#[test]
fn a_relabelled_redacted_report_does_not_verify() {
    let s = "sess-relabel";
    let w = work("relabel");
    assert_eq!(w.hook(start(s)).code, 0);
    assert!(w.hook(pre(s, "Bash", bash(DESTROY), "t1")).denied().unwrap().contains("undeclared-tool"));
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    allowed(w.hook(pre(s, "Bash", get.clone(), "t2")));
    // The read shows no such secret: inspect's assert fails and the step has no on_fail: halt.
    let _ = w.hook(post(s, "Bash", get, out("No resources found\n"), "t2"));
    let _ = w.hook(base(s, "SessionEnd"));
    let d = decisions(&w, s);
    assert!(d.contains(&"deny:-".to_string()) && d.contains(&"halt:assert-failed".to_string()), "{d:?}");
    let out_dir = w.0.join("shared");
    let o = common::cmd(BIN).current_dir(&w.0).args(["export", w.run_dir(s).to_str().unwrap(), "--redact", "--out"]).arg(&out_dir).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let red = std::fs::read_dir(&out_dir).unwrap().next().unwrap().unwrap().path();
    assert!(verify(&red).0, "the honest derivative verifies");

    let relabel = |edit: &dyn Fn(&mut Value)| {
        let copy = w.0.join("forged");
        let _ = std::fs::remove_dir_all(&copy);
        std::fs::create_dir_all(&copy).unwrap();
        for e in std::fs::read_dir(&red).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
        forge_report(&copy, edit);
        let (ok, text) = verify(&copy);
        assert!(!ok, "a relabelled report verified: {text}");
        text
    };
    let t = relabel(&|r| {
        r["outcome"] = json!("completed");
        r["terminal"] = json!("rotated");
    });
    assert!(t.contains("report.json") && t.contains("`outcome` is completed"), "{t}");
    let t = relabel(&|r| r["deviations"] = json!([]));
    assert!(t.contains("`deviations` is not what the decisions record"), "{t}");
    let t = relabel(&|r| r["approvals"] = json!([{"accepted": true, "approver": "alice", "call_sha256": null, "granted": true, "seq": 2, "step": "inspect"}]));
    assert!(t.contains("`approvals`"), "{t}");
}

/// Rewrites report.json of the bundle in `dir` with `edit` and fixes up every hash that pins it (the
/// receipt's embedded report, `report_sha256` and artifacts, run.json's outcome, the derivation's
/// records), as the adversarial review did.
fn forge_report(dir: &Path, edit: &dyn Fn(&mut Value)) {
    let policy = runbook_host::files::shared_policy().unwrap();
    let canon = |v: &Value| policy.canonicalize(&v.to_string()).unwrap().unwrap();
    let mut report: Value = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    edit(&mut report);
    let report_text = canon(&report);
    std::fs::write(dir.join("report.json"), &report_text).unwrap();
    let mut run: Value = serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    run["outcome"] = report["outcome"].clone();
    let run_text = serde_json::to_string_pretty(&run).unwrap() + "\n";
    std::fs::write(dir.join("run.json"), &run_text).unwrap();
    let mut receipt: Value = serde_json::from_slice(&std::fs::read(dir.join("receipt.json")).unwrap()).unwrap();
    receipt["report"] = report.clone();
    receipt["report_sha256"] = json!(hex(report_text.as_bytes()));
    receipt["artifacts"]["report.json"] = json!(hex(report_text.as_bytes()));
    receipt["artifacts"]["run.json"] = json!(hex(run_text.as_bytes()));
    let receipt_text = canon(&receipt);
    std::fs::write(dir.join("receipt.json"), &receipt_text).unwrap();
    let p = dir.join("derivation.json");
    let mut der: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    for f in der["files"].as_array_mut().unwrap() {
        let sha = match f["path"].as_str().unwrap() {
            "report.json" => hex(report_text.as_bytes()),
            "run.json" => hex(run_text.as_bytes()),
            "receipt.json" => hex(receipt_text.as_bytes()),
            _ => continue,
        };
        f["source_sha256"] = json!(sha);
        f["output_sha256"] = json!(sha);
    }
    std::fs::write(&p, serde_json::to_string_pretty(&der).unwrap() + "\n").unwrap();
}

/// An ed25519 key made with ssh-keygen, and its `allowed_signers` line for `principal`.
fn keygen(dir: &Path, name: &str, principal: &str) -> (std::path::PathBuf, String) {
    let key = dir.join(name);
    let o = common::cmd("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"]).arg(&key).output().expect("ssh-keygen (openssh-client)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let mut f = public.split_whitespace();
    (key, format!("{principal} {} {}", f.next().unwrap(), f.next().unwrap()))
}

/// A keys folder in the work directory with alice's key, and an allowed signers file listing only it.
fn alice_signs(w: &Work) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let keys = w.0.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let (alice, alice_line) = keygen(&keys, "alice", "alice@example.com");
    let signers = keys.join("allowed_signers");
    std::fs::write(&signers, format!("{alice_line}\n")).unwrap();
    (keys, alice, signers)
}

/// The first two steps of rotate-credentials under the hook, then the gated call, held for a human.
fn to_the_gated_rotate(hook: &dyn Fn(Value) -> Out, s: &str) {
    let get = bash("kubectl -n payments get secret payments-db-credentials");
    assert!(hook(pre(s, "Bash", get.clone(), "t1")).denied().is_none());
    assert_eq!(hook(post(s, "Bash", get, out("payments-db-credentials   Opaque   2   97d\n"), "t1")).code, 0);
    let meta = json!({"path": "database/creds/payments-app"});
    assert!(hook(pre(s, "mcp__vault__read_metadata", meta.clone(), "t2")).denied().is_none());
    assert_eq!(hook(post(s, "mcp__vault__read_metadata", meta, json!({"age_days": 97}), "t2")).code, 0);
    assert!(hook(pre(s, "Bash", bash(ROTATE), "t3")).denied().unwrap().contains("approval"));
}

/// Finding 2, the real control: where approvals must be signed, an answer the agent wrote (unsigned, or
/// signed by its own key) is refused; a human's signature (`approve --sign`) lets the exact call through,
/// the approver is the signing principal, and verify checks the signature, with and without the trusted
/// signers file, in the bundle and in its redacted export.
#[test]
fn signed_approvals_are_a_humans() {
    let s = "sess-signed";
    let w = work("signed");
    let (keys, alice, signers) = alice_signs(&w);
    let (agent_key, agent_line) = keygen(&keys, "agent", "agent@example.com");
    let flags = ["--allowed-signers", signers.to_str().unwrap(), "--allow-software-keys"];
    let hook = |v: Value| w.hook_with(&flags, v.to_string().as_bytes());
    assert_eq!(hook(start(s)).code, 0);
    let dir = w.run_dir(s);
    let run_id = dir.file_name().unwrap().to_string_lossy().to_string();
    let run: Value = serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["approvals"]["signed"], true);
    to_the_gated_rotate(&hook, s);
    let p = approvals::pending(&dir).unwrap().remove(0);

    // The agent appends an approval event to events.ndjson itself, its decision and link recomputed so
    // that the replay accepts it: it has no signature, so the next event is refused as tampered.
    let events_path = dir.join("events.ndjson");
    let honest = std::fs::read(&events_path).unwrap();
    {
        let policy = runbook_host::files::shared_policy().unwrap();
        let doc = std::fs::read(dir.join("runbook.yaml")).unwrap();
        let mut session = policy.session(&doc).unwrap();
        let mut head = run["chain_h0"].as_str().unwrap().to_string();
        let ev = w.events(s);
        for e in &ev {
            head = session.replay_line(&e["event"].to_string(), &head).unwrap().1;
        }
        let at = ev.last().unwrap()["event"]["at"].as_u64().unwrap() + 1;
        let forged =
            json!({"type": "approval", "at": at, "step": "rotate", "call_sha256": p.call_sha256, "approver": "alice@example.com", "granted": true}).to_string();
        let (decision, link) = session.replay_line(&forged, &head).unwrap();
        assert!(decision.starts_with("{\"decision\":\"allow\""), "{decision}");
        let mut f = std::fs::OpenOptions::new().append(true).open(&events_path).unwrap();
        std::io::Write::write_all(&mut f, runbook_host::files::shared_policy().unwrap().record_line(&link, &forged, &decision).unwrap().as_bytes()).unwrap();
    }
    let o = hook(pre(s, "Bash", bash(ROTATE), "t3b"));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains("an approval no key of the allowed signers signed"), "{}", o.stderr);
    std::fs::write(&events_path, &honest).unwrap();

    // The agent answers its own request: unsigned, then signed with its own key. Both refused.
    approvals::answer(&dir, &p.id, "alice@example.com", true, &p.call_sha256).unwrap();
    let o = hook(pre(s, "Bash", bash(ROTATE), "t4"));
    assert!(o.denied().is_some(), "{}", o.stdout);
    assert!(o.stderr.contains("is not signed"), "{}", o.stderr);
    std::fs::remove_file(dir.join(format!("approvals/{}.json", p.id))).unwrap();
    let p = approvals::pending(&dir).unwrap().remove(0);
    // The module's request for the call: the seq of its first `needs-approval` decision
    // (docs/spec/run.md#approvals-bound-to-a-call).
    let request = w.events(s).iter().find(|e| e["decision"]["decision"] == "needs-approval").unwrap()["decision"]["seq"].as_u64().unwrap();
    let msg = approvals::signed_message(&run_id, request, p.step.as_deref(), &p.call_sha256, true).unwrap();
    let forged = runbook_host::signatures::sshsig::sign_with_ssh_keygen(&agent_key, runbook_host::signatures::SIGNATURE_NAMESPACE, msg.as_bytes()).unwrap();
    approvals::answer_signed(&dir, &p.id, "alice@example.com", true, &p.call_sha256, Some(&forged)).unwrap();
    let o = hook(pre(s, "Bash", bash(ROTATE), "t5"));
    assert!(o.denied().is_some(), "{}", o.stdout);
    assert!(o.stderr.contains("is refused"), "{}", o.stderr);
    assert!(w.events(s).iter().all(|e| e["event"]["type"] != "approval"), "no approval event was recorded");
    let _ = agent_line;
    std::fs::remove_file(dir.join(format!("approvals/{}.json", p.id))).unwrap();

    // `approve` without a key on a run that takes signed approvals only: refused.
    let (code, text) = approve_cli(&w.runs(), &run_id, "rotate");
    assert_ne!(code, 0, "{text}");
    // The human signs with their key: the exact call passes, approved by the signing principal.
    let cmd = format!("{BIN} approve {run_id} rotate --runs {} --sign {}", w.runs().display(), alice.display());
    let o = common::cmd("sh").arg("-c").arg(format!("(sleep 1; echo y) | script -qec '{cmd}' /dev/null")).output().unwrap();
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(hook(pre(s, "Bash", bash(ROTATE), "t6")).denied().is_none());
    let ev = w.events(s);
    let approval = ev.iter().find(|e| e["event"]["type"] == "approval").unwrap();
    assert_eq!(approval["event"]["approver"], "alice@example.com");
    assert_eq!(std::fs::read_to_string(dir.join("signatures.ndjson")).unwrap().lines().count(), 1);
    assert_eq!(hook(base(s, "SessionEnd")).code, 0);

    // verify: by the key each signature carries, then against the trusted file, then against another.
    let (ok, text) = verify(&dir);
    assert!(ok && text.contains("1 signed approval(s), each verified by the key it carries"), "{text}");
    let v = |extra: &Path| {
        let o = common::cmd(BIN).arg("verify").arg(&dir).arg("--allowed-signers").arg(extra).arg("--allow-software-keys").output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stdout).to_string())
    };
    let (ok, text) = v(&signers);
    assert!(ok && text.contains("by a key of the allowed signers given"), "{text}");
    let other = keys.join("other_signers");
    std::fs::write(&other, format!("{agent_line}\n")).unwrap();
    let (ok, text) = v(&other);
    assert!(!ok, "{text}");
    // The redacted export keeps the signatures, and they verify there too.
    let out_dir = w.0.join("shared");
    let o = common::cmd(BIN).args(["export", dir.to_str().unwrap(), "--redact", "--out"]).arg(&out_dir).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let red = out_dir.join(&run_id);
    let (ok, text) = verify(&red);
    assert!(ok && text.contains("1 signed approval"), "{text}");
    // An edited signature line does not verify.
    let sig = dir.join("signatures.ndjson");
    let t = std::fs::read_to_string(&sig).unwrap();
    std::fs::write(&sig, t.replace("alice@example.com", "mallory@example.com")).unwrap();
    assert!(!verify(&dir).0);
}

/// An `allowed_signers` line for a FIDO key (`sk-ssh-ed25519@openssh.com`, application `ssh:`): what a
/// human's hardware key looks like to the host. No test holds the token, so nothing here can sign with it.
fn fido_line(principal: &str) -> String {
    use base64ct::Encoding;
    let mut blob = Vec::new();
    for field in [&b"sk-ssh-ed25519@openssh.com"[..], &[7u8; 32][..], &b"ssh:"[..]] {
        blob.extend_from_slice(&(field.len() as u32).to_be_bytes());
        blob.extend_from_slice(field);
    }
    format!("{principal} sk-ssh-ed25519@openssh.com {}", base64ct::Base64::encode_string(&blob))
}

/// Issue 28, F4: with the human's software key only in an ssh-agent the agent can reach (`ssh -A`,
/// `SSH_AUTH_SOCK`), `ssh-keygen -Y sign` made an approval that was accepted as the human's. Now a signers
/// file that lists a software key is refused (the hook refuses the session before its run begins,
/// `verify` refuses the file) unless `--allow-software-keys`, which is then said on stderr; with the
/// human's FIDO key listed, the agent still signs through the ssh-agent, and the answer is refused.
#[test]
fn approvals_take_only_keys_that_need_a_touch() {
    let s = "sess-fido";
    let w = work("fido");
    let (keys, alice, signers) = alice_signs(&w);
    // The human's key is loaded into an ssh-agent, and its private file is gone: the agent (our
    // adversary) has the socket, as it would under `ssh -A`.
    let sock = keys.join("agent.sock");
    let mut ssh_agent = common::cmd("ssh-agent").arg("-D").arg("-a").arg(&sock).stdout(std::process::Stdio::null()).spawn().expect("ssh-agent");
    let t = Instant::now();
    while !sock.exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "ssh-agent did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = common::cmd("ssh-add").arg(&alice).env("SSH_AUTH_SOCK", &sock).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_file(&alice).unwrap();
    let through_agent = |msg: &str| {
        let mut c = common::cmd("ssh-keygen")
            .args(["-Y", "sign", "-n", runbook_host::signatures::SIGNATURE_NAMESPACE, "-f"])
            .arg(alice.with_extension("pub"))
            .env("SSH_AUTH_SOCK", &sock)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut c.stdin.take().unwrap(), msg.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "the agent signs through the ssh-agent: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };

    // The software key listed, no --allow-software-keys: the session is refused before its run begins.
    let strict = ["--allowed-signers", signers.to_str().unwrap()];
    let o = w.hook_with(&strict, start(s).to_string().as_bytes());
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains("allowed_signers:1: a software key (ssh-ed25519) signs without a human"), "{}", o.stderr);
    assert!(o.stderr.contains("ssh-agent") && o.stderr.contains("--allow-software-keys"), "{}", o.stderr);
    assert!(!w.runs().join(format!(".hook/{s}.json")).exists(), "no run began");
    // The same file, allowed explicitly: the run begins, and stderr says what was accepted.
    let lax = ["--allowed-signers", signers.to_str().unwrap(), "--allow-software-keys"];
    let o = w.hook_with(&lax, start("sess-lax").to_string().as_bytes());
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("--allow-software-keys: ") && o.stderr.contains("lists 1 software key(s) (line 1)"), "{}", o.stderr);

    // The human's FIDO key listed instead: the run begins; the agent signs an answer through the
    // ssh-agent as alice, and it is refused, so the gated call stays held.
    std::fs::write(&signers, format!("{}\n", fido_line("alice@example.com"))).unwrap();
    let hook = |v: Value| w.hook_with(&strict, v.to_string().as_bytes());
    let o = hook(start(s));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stderr.contains("software key"), "{}", o.stderr);
    let dir = w.run_dir(s);
    let run_id = dir.file_name().unwrap().to_string_lossy().to_string();
    to_the_gated_rotate(&hook, s);
    let p = approvals::pending(&dir).unwrap().remove(0);
    let request = w.events(s).iter().find(|e| e["decision"]["decision"] == "needs-approval").unwrap()["decision"]["seq"].as_u64().unwrap();
    let msg = approvals::signed_message(&run_id, request, p.step.as_deref(), &p.call_sha256, true).unwrap();
    let sig = through_agent(&msg);
    approvals::answer_signed(&dir, &p.id, "alice@example.com", true, &p.call_sha256, Some(&sig)).unwrap();
    let o = hook(pre(s, "Bash", bash(ROTATE), "t4"));
    assert!(o.denied().is_some(), "{}", o.stdout);
    assert!(o.stderr.contains("is refused"), "{}", o.stderr);
    assert!(w.events(s).iter().all(|e| e["event"]["type"] != "approval"), "no approval event was recorded");

    // verify refuses a signers file with a software key unless told, like the hook (exit 2: a bad input).
    std::fs::write(&signers, std::fs::read_to_string(alice.with_extension("pub")).unwrap().replacen("ssh-ed25519", "alice@example.com ssh-ed25519", 1))
        .unwrap();
    let o = common::cmd(BIN).arg("verify").arg(&dir).arg("--allowed-signers").arg(&signers).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a software key (ssh-ed25519) signs without a human"), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = ssh_agent.kill();
    let _ = ssh_agent.wait();
}

/// The second integrity hole of issue 27: one signed approval answered twice. After a human's signed
/// answer admitted the gated call, the agent appends a copy of that approval event (its link recomputed
/// by the module, so the replay accepts the record) and a copy of its signature line with only `seq`
/// changed, then retries the destructive call. The module's approval ledger
/// (docs/spec/run.md#the-approval-ledger) refuses the copy (`no-pending`: its request was consumed), so the
/// retry needs a new approval, and `verify` fails the bundle, naming the copied signature.
#[test]
fn one_signature_answers_one_request() {
    let s = "sess-replay";
    let w = work("replayed-signature");
    let (_, alice, signers) = alice_signs(&w);
    let flags = ["--allowed-signers", signers.to_str().unwrap(), "--allow-software-keys"];
    let hook = |v: Value| w.hook_with(&flags, v.to_string().as_bytes());
    assert_eq!(hook(start(s)).code, 0);
    let dir = w.run_dir(s);
    let run_id = dir.file_name().unwrap().to_string_lossy().to_string();
    to_the_gated_rotate(&hook, s);
    // A human signs the answer to the module's request; the exact call passes once.
    let cmd = format!("{BIN} approve {run_id} rotate --runs {} --sign {}", w.runs().display(), alice.display());
    let o = common::cmd("sh").arg("-c").arg(format!("(sleep 1; echo y) | script -qec '{cmd}' /dev/null")).output().unwrap();
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(hook(pre(s, "Bash", bash(ROTATE), "t4")).denied().is_none());
    let ev = w.events(s);
    let approval = ev.iter().find(|e| e["event"]["type"] == "approval").unwrap().clone();
    assert_eq!(approval["event"]["request"], ev.iter().find(|e| e["decision"]["decision"] == "needs-approval").unwrap()["decision"]["seq"]);

    // The attack: the approval event and its signature line, copied.
    let events_path = dir.join("events.ndjson");
    let policy = runbook_host::files::shared_policy().unwrap();
    let run: Value = serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    let doc = std::fs::read(dir.join("runbook.yaml")).unwrap();
    let mut session = policy.session(&doc).unwrap();
    let mut head = run["chain_h0"].as_str().unwrap().to_string();
    for e in &ev {
        head = session.replay_line(&e["event"].to_string(), &head).unwrap().1;
    }
    let mut copy = approval["event"].clone();
    copy["at"] = json!(ev.last().unwrap()["event"]["at"].as_u64().unwrap() + 1);
    let copy = copy.to_string();
    let (decision, link) = session.replay_line(&copy, &head).unwrap();
    assert!(decision.contains(r#""decision":"deny""#) && decision.contains(r#""reason":"no-pending""#), "the module refuses the copy: {decision}");
    let mut f = std::fs::OpenOptions::new().append(true).open(&events_path).unwrap();
    std::io::Write::write_all(&mut f, runbook_host::files::shared_policy().unwrap().record_line(&link, &copy, &decision).unwrap().as_bytes()).unwrap();
    let sig_path = dir.join("signatures.ndjson");
    let sig_text = std::fs::read_to_string(&sig_path).unwrap();
    let mut sig: Value = serde_json::from_str(sig_text.lines().next().unwrap()).unwrap();
    sig["seq"] = json!(ev.len());
    std::fs::write(&sig_path, format!("{sig_text}{sig}\n")).unwrap();

    // The retry of the destructive call is gated again: the copy answered nothing.
    let o = hook(pre(s, "Bash", bash(ROTATE), "t5"));
    assert!(o.denied().is_some_and(|d| d.contains("approval")), "the retry must wait for a new approval: {}{}", o.stdout, o.stderr);
    let ev = w.events(s);
    assert_eq!(ev.last().unwrap()["decision"]["decision"], "needs-approval", "{:?}", ev.last());
    assert_eq!(hook(base(s, "SessionEnd")).code, 0);
    let rep: Value = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let accepted: Vec<bool> = rep["approvals"].as_array().unwrap().iter().map(|a| a["accepted"].as_bool().unwrap()).collect();
    assert_eq!(accepted, [true, false], "{rep}");
    let (ok, text) = verify(&dir);
    assert!(!ok, "{text}");
    assert!(text.contains("signatures.ndjson:2") && text.contains("refused by the module"), "{text}");
}

/// A registry can require signed approvals: a host given no allowed signers refuses the runbook before
/// anything runs (the hook at SessionStart, with exit 2).
#[test]
fn a_registry_can_require_signed_approvals() {
    let w = work("registry-signed");
    let o = common::cmd(BIN).current_dir(&w.0).args(["registry", "add", "runbook.yaml", "--signed-approvals"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("approvals must be signed"));
    let index: Value = serde_json::from_slice(&std::fs::read(w.0.join(".runbook/registry/index.json")).unwrap()).unwrap();
    assert_eq!(index["runbooks"]["rotate-credentials"]["1.3.0"]["approvals"], "signed");
    let o = common::cmd(BIN)
        .current_dir(&w.0)
        .args(["hook", "--runbook", "rotate-credentials@1.3.0"])
        .stdin(std::fs::File::open(write_payload(&w.0, &start("s1"))).unwrap())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("requires signed approvals"), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!w.runs().join(".hook/s1.json").exists(), "no run began");
}

fn write_payload(dir: &Path, v: &Value) -> std::path::PathBuf {
    let p = dir.join("payload.json");
    std::fs::write(&p, v.to_string()).unwrap();
    p
}
