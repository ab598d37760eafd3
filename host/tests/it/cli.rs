//! The `runbook-host` CLI as a user meets it: the real binary, run on small runbooks written into a private
//! directory per test (which is also that test's RUNBOOK_HOST_CACHE), asserting what is printed and the exit
//! codes of docs/spec/cli.md#exit-codes (0 success, 1 refused or found wanting, 2 usage or IO error).

use crate::common::{self, repo, Tmp, BIN};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A run that takes longer than this is a failure (a hang); no other duration is asserted.
const TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------------
// Harness.

struct Sandbox {
    dir: PathBuf,
    _tmp: Tmp,
}

impl Sandbox {
    fn new(tag: &str) -> Sandbox {
        let t = Tmp::new(&format!("cli-{tag}"));
        std::fs::create_dir_all(t.join("cache")).expect("create the sandbox");
        Sandbox { dir: t.0.clone(), _tmp: t }
    }

    fn write(&self, name: &str, bytes: impl AsRef<[u8]>) {
        std::fs::write(self.dir.join(name), bytes).expect("write a file into the sandbox");
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name)).unwrap_or_else(|e| panic!("read {name}: {e}"))
    }

    fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = common::cmd(BIN);
        cmd.args(args)
            .current_dir(&self.dir)
            .env("RUNBOOK_HOST_CACHE", self.dir.join("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        self.run_with(args, &[], None)
    }

    /// [`Sandbox::run`] with more environment variables and, optionally, bytes on standard input.
    fn run_with<S: AsRef<OsStr>>(&self, args: &[S], env: &[(&str, &OsStr)], stdin: Option<&[u8]>) -> Run {
        let shown: Vec<String> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("start runbook-host");
        if let Some(bytes) = stdin {
            use std::io::Write as _;
            let mut w = child.stdin.take().unwrap();
            w.write_all(bytes).expect("write standard input");
        }
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let out_reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = out.read_to_end(&mut v);
            v
        });
        let err_reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = err.read_to_end(&mut v);
            v
        });
        let status = wait(&mut child, &shown.join(" "));
        let stdout = out_reader.join().unwrap();
        let stderr = String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned();
        Run { cmd: shown.join(" "), status, stdout, stderr }
    }
}

fn wait(child: &mut std::process::Child, shown: &str) -> ExitStatus {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().expect("wait for runbook-host") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`runbook-host {shown}` did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

struct Run {
    cmd: String,
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

impl Run {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    fn context(&self) -> String {
        format!("`runbook-host {}` exited with {:?}\n--- stdout:\n{}\n--- stderr:\n{}", self.cmd, self.status, self.out(), self.stderr)
    }

    /// Exactly this exit code (never 101, never a signal) and no crash text.
    fn expect_exit(&self, code: i32) -> &Run {
        assert_eq!(self.status.code(), Some(code), "wrong exit status\n{}", self.context());
        for crash in ["panicked", "RUST_BACKTRACE", "stack backtrace", "trapped"] {
            assert!(!self.stderr.contains(crash), "crash text `{crash}` on stderr\n{}", self.context());
        }
        self
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.stdout).unwrap_or_else(|e| panic!("stdout is not one JSON value: {e}\n{}", self.context()))
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Finds the rendered finding `error[code]` on stderr and checks what a person sees: the place, the
/// source line, and a caret under the column, which is where `token` starts. Returns the header line.
fn expect_rendered(stderr: &str, source: &str, file: &str, code: &str, line: usize, column: usize, token: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let header = format!("error[{code}]: ");
    let at = lines.iter().position(|l| l.starts_with(&header)).unwrap_or_else(|| panic!("no `{header}` on stderr:\n{stderr}"));
    let gutter = " ".repeat(line.to_string().len());
    let text = source.lines().nth(line - 1).expect("the line exists");
    assert_eq!(lines.get(at + 1).copied(), Some(format!("{gutter}--> {file}:{line}:{column}").as_str()), "the place\n{stderr}");
    assert_eq!(lines.get(at + 2).copied(), Some(format!("{gutter} |").as_str()), "\n{stderr}");
    assert_eq!(lines.get(at + 3).copied(), Some(format!("{line} | {text}").as_str()), "the source line\n{stderr}");
    assert_eq!(lines.get(at + 4).copied(), Some(format!("{gutter} | {}^", " ".repeat(column - 1)).as_str()), "the caret\n{stderr}");
    let under: String = text.chars().skip(column - 1).collect();
    assert!(under.starts_with(token), "column {column} of `{text}` is where `{token}` starts");
    lines[at].to_string()
}

fn decision_lines(out: &str) -> (Vec<Value>, Value) {
    let mut values: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {e}: {l}"))).collect();
    let report = values.pop().expect("a report line");
    (values, report)
}

// ---------------------------------------------------------------------------------------------------
// Runbooks.

/// A clean two-step runbook (structure P1).
const ROTATE: &str = "\
runbook_id: rotate-creds
version: 1.0.0
capabilities:
  - name: db-read
    tool: db.read
    risk: read-only
  - name: db-rotate
    tool: db.rotate
    risk: mutating
steps:
  - id: check
    tool: db-read
    next: rotate
  - id: rotate
    tool: db-rotate
    requires_approval: true
    next: done
terminals: [done]
";

/// The same runbook as JSON.
const ROTATE_JSON: &str = r#"{
  "runbook_id": "rotate-creds",
  "version": "1.0.0",
  "capabilities": [
    {"name": "db-read", "tool": "db.read", "risk": "read-only"},
    {"name": "db-rotate", "tool": "db.rotate", "risk": "mutating"}
  ],
  "steps": [
    {"id": "check", "tool": "db-read", "next": "rotate"},
    {"id": "rotate", "tool": "db-rotate", "requires_approval": true, "next": "done"}
  ],
  "terminals": ["done"]
}
"#;

/// A destructive runbook: its implied minimum profile is R2.
const DROP: &str = "\
runbook_id: drop-table
version: 2.1.0
capabilities:
  - {name: db-read, tool: db.read, risk: read-only}
  - {name: db-drop, tool: db.drop, risk: destructive}
steps:
  - id: inspect
    tool: db-read
    next: drop
  - id: drop
    tool: db-drop
    next: done
terminals: [done]
";

fn variant(from: &str, to: &str) -> String {
    assert_eq!(ROTATE.matches(from).count(), 1, "`{from}` occurs once");
    ROTATE.replace(from, to)
}

const START_R1: &str =
    r#"{"type":"start","at":0,"run_id":"r-1","profile":"R1","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}"#;

/// A completed run of ROTATE at R1: the client routes with `advance`; a human approves the gated step.
const COMPLETED_RUN: &str = concat!(
    r#"{"type":"start","at":0,"run_id":"r-1","profile":"R1","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}"#,
    "\n",
    r#"{"type":"invoke","at":10,"tool":"db.read","arguments":{}}"#,
    "\n",
    r#"{"type":"result","at":12,"tool":"db.read","result":{"age_days":120},"is_error":false}"#,
    "\n",
    r#"{"type":"advance","at":13,"to":"rotate"}"#,
    "\n",
    // The gated call first: an approval answers the module's request for it
    // (docs/spec/run.md#approvals-bound-to-a-call).
    r#"{"type":"invoke","at":19,"tool":"db.rotate","arguments":{"user":"app"}}"#,
    "\n",
    r#"{"type":"approval","at":20,"step":"rotate","approver":"alice","granted":true}"#,
    "\n",
    r#"{"type":"invoke","at":21,"tool":"db.rotate","arguments":{"user":"app"}}"#,
    "\n",
    r#"{"type":"result","at":22,"tool":"db.rotate","result":{"ok":true},"is_error":false}"#,
    "\n",
    r#"{"type":"advance","at":23,"to":"done"}"#,
    "\n",
    r#"{"type":"end","at":90}"#,
    "\n",
);

// ---------------------------------------------------------------------------------------------------
// lint

#[test]
fn lint_clean_document_exits_0() {
    let sb = Sandbox::new("lint-clean");
    sb.write("rotate.yaml", ROTATE);
    let run = sb.run(&["lint", "rotate.yaml"]);
    run.expect_exit(0);
    assert_eq!(run.stderr, "", "no findings");
    assert_eq!(run.out(), format!("rotate.yaml: 0 error(s), 0 warning(s); structure P1; sha256 {}\n", sha256_hex(ROTATE.as_bytes())));
    let json = sb.run(&["lint", "--format", "json", "rotate.yaml"]);
    json.expect_exit(0);
    let v = json.json();
    assert_eq!(v["ok"], true);
    assert_eq!(v["findings"], serde_json::json!([]));
    assert_eq!(v["structure"], "P1");
    assert_eq!(v["sha256"], sha256_hex(ROTATE.as_bytes()));
}

#[test]
fn lint_misspelt_route_target() {
    let sb = Sandbox::new("lint-route");
    let doc = variant("next: rotate", "next: rotat");
    sb.write("rb.yaml", &doc);
    let run = sb.run(&["lint", "rb.yaml"]);
    run.expect_exit(1);
    let header = expect_rendered(&run.stderr, &doc, "rb.yaml", "unknown-route", 13, 11, "rotat");
    assert!(header.ends_with("did you mean `rotate`?"), "{header}");
    assert!(header.contains("`rotat`"), "the message names the bad target: {header}");
    assert!(run.out().starts_with("rb.yaml: "), "summary on stdout: {}", run.out());
    assert!(run.out().contains(" error(s)"), "{}", run.out());
}

#[test]
fn lint_misspelt_capability_in_a_step() {
    let sb = Sandbox::new("lint-tool");
    let doc = variant("tool: db-rotate", "tool: db-rotat");
    sb.write("rb.yaml", &doc);
    let run = sb.run(&["lint", "rb.yaml"]);
    run.expect_exit(1);
    let header = expect_rendered(&run.stderr, &doc, "rb.yaml", "undeclared-tool", 15, 11, "db-rotat");
    assert!(header.ends_with("did you mean `db-rotate`?"), "{header}");
}

#[test]
fn lint_misspelt_field_never_drops_a_gate_silently() {
    let sb = Sandbox::new("lint-field");
    let doc = variant("requires_approval", "requires_aproval");
    sb.write("rb.yaml", &doc);
    let run = sb.run(&["lint", "rb.yaml"]);
    run.expect_exit(1);
    let header = expect_rendered(&run.stderr, &doc, "rb.yaml", "unknown-field", 16, 5, "requires_aproval");
    assert!(header.contains("`requires_aproval`"), "{header}");
    assert!(header.ends_with("did you mean `requires_approval`?"), "{header}");
    assert!(run.stderr.contains("= at /steps/1/requires_aproval"), "the JSON Pointer is shown\n{}", run.stderr);
}

#[test]
fn lint_json_findings_have_every_field() {
    let sb = Sandbox::new("lint-json");
    let doc = variant("requires_approval", "requires_aproval");
    sb.write("rb.yaml", &doc);
    let run = sb.run(&["lint", "--format", "json", "rb.yaml"]);
    run.expect_exit(1);
    let v = run.json();
    assert_eq!(v["ok"], false);
    assert_eq!(v["document"], "rb.yaml");
    assert_eq!(v["sha256"], sha256_hex(doc.as_bytes()));
    assert_eq!(
        v["findings"],
        serde_json::json!([{
            "code": "unknown-field",
            "severity": "error",
            "line": 16,
            "column": 5,
            "pointer": "/steps/1/requires_aproval",
            "message": "unknown field `requires_aproval` in a step; did you mean `requires_approval`?",
        }])
    );
}

#[test]
fn lint_findings_sorted_by_line_column_code() {
    let sb = Sandbox::new("lint-sorted");
    // Written so that the core meets its problems out of order: the misspelt tool (line 7) is found after the
    // step ids (lines 6 and 9), and line 9 has two findings at the same place.
    let doc = "\
runbook_id: rotate-creds
version: 1.0.0
bogus: 1
capabilities: [db.read]
steps:
  - id: Check
    tool: db.reed
    next: done
  - id: Check
    tool: db.read
    next: done
terminals: [done]
";
    sb.write("rb.yaml", doc);
    let run = sb.run(&["lint", "--format", "json", "rb.yaml"]);
    run.expect_exit(1);
    let found: Vec<(String, u64, u64)> = run.json()["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["code"].as_str().unwrap().to_string(), f["line"].as_u64().unwrap(), f["column"].as_u64().unwrap()))
        .collect();
    let expected = [("unknown-field", 3, 1), ("invalid-id", 6, 9), ("undeclared-tool", 7, 11), ("duplicate-id", 9, 9), ("invalid-id", 9, 9)];
    let expected: Vec<(String, u64, u64)> = expected.iter().map(|(c, l, k)| (c.to_string(), *l, *k)).collect();
    assert_eq!(found, expected);

    // The text output lists them in the same order.
    let text = sb.run(&["lint", "rb.yaml"]);
    text.expect_exit(1);
    let places: Vec<String> = text.stderr.lines().filter(|l| l.trim_start().starts_with("--> ")).map(|l| l.trim_start()[4..].to_string()).collect();
    assert_eq!(places, ["rb.yaml:3:1", "rb.yaml:6:9", "rb.yaml:7:11", "rb.yaml:9:9", "rb.yaml:9:9"]);
    let codes: Vec<&str> = text.stderr.lines().filter_map(|l| l.strip_prefix("error[")).map(|l| &l[..l.find(']').unwrap()]).collect();
    assert_eq!(codes, ["unknown-field", "invalid-id", "undeclared-tool", "duplicate-id", "invalid-id"]);
    assert!(text.out().contains("5 error(s), 0 warning(s)"), "{}", text.out());
}

#[test]
fn lint_reads_standard_input() {
    let sb = Sandbox::new("lint-stdin");
    let mut cmd = sb.command(&["lint", "--format", "json", "-"]);
    cmd.stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(ROTATE.as_bytes()).unwrap();
    }
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let status = wait(&mut child, "lint --format json -");
    assert_eq!(status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["sha256"], sha256_hex(ROTATE.as_bytes()));
}

// ---------------------------------------------------------------------------------------------------
// envelope

#[test]
fn envelope_is_byte_identical_and_hashes_the_document() {
    let sb = Sandbox::new("envelope");
    sb.write("rotate.yaml", ROTATE);
    let first = sb.run(&["envelope", "rotate.yaml"]);
    first.expect_exit(0);
    let second = sb.run(&["envelope", "rotate.yaml"]);
    second.expect_exit(0);
    assert!(!first.stdout.is_empty());
    assert_eq!(first.stdout, second.stdout, "same document, same bytes");
    assert_eq!(first.stderr, "");
    // Canonical bytes for a program to hash: no pretty printing, no trailing newline when piped.
    assert!(!first.stdout.contains(&b'\n'), "{}", first.out());
    let v = first.json();
    assert_eq!(v["schema"], "runbook-policy-envelope/v1");
    assert_eq!(v["document"]["sha256"], sha256_hex(&sb.read("rotate.yaml")));
    assert_eq!(v["document"]["runbook_id"], "rotate-creds");
    assert_eq!(v["document"]["version"], "1.0.0");
    assert_eq!(v["allowlist"], serde_json::json!(["db-read", "db-rotate"]));
    assert_eq!(v["initial"], "check");
    assert_eq!(v["steps"]["rotate"]["gated"], true);
    assert_eq!(v["steps"]["check"]["gated"], false);
    assert_eq!(v["structure"], "P1");
}

#[test]
fn envelope_of_yaml_and_json_differ_only_in_the_document_hash() {
    let sb = Sandbox::new("envelope-dialects");
    sb.write("rotate.yaml", ROTATE);
    sb.write("rotate.json", ROTATE_JSON);
    let yaml = sb.run(&["envelope", "rotate.yaml"]);
    yaml.expect_exit(0);
    let json = sb.run(&["envelope", "rotate.json"]);
    json.expect_exit(0);
    let (yaml_sha, json_sha) = (sha256_hex(ROTATE.as_bytes()), sha256_hex(ROTATE_JSON.as_bytes()));
    assert_ne!(yaml_sha, json_sha);
    assert_eq!(yaml.json()["document"]["sha256"], yaml_sha);
    assert_eq!(json.json()["document"]["sha256"], json_sha);
    assert_ne!(yaml.stdout, json.stdout);
    let masked_yaml = yaml.out().replace(&yaml_sha, "<sha256>");
    let masked_json = json.out().replace(&json_sha, "<sha256>");
    assert_eq!(masked_yaml, masked_json, "the same data model gives the same envelope");
}

#[test]
fn envelope_of_an_invalid_document_exits_1_with_findings() {
    let sb = Sandbox::new("envelope-invalid");
    let doc = variant("requires_approval", "requires_aproval");
    sb.write("rb.yaml", &doc);
    let run = sb.run(&["envelope", "rb.yaml"]);
    run.expect_exit(1);
    assert!(run.stdout.is_empty(), "no envelope bytes on stdout: {}", run.out());
    expect_rendered(&run.stderr, &doc, "rb.yaml", "unknown-field", 16, 5, "requires_aproval");
    let json = sb.run(&["envelope", "--format", "json", "rb.yaml"]);
    json.expect_exit(1);
    let v = json.json();
    assert_eq!(v["envelope"], Value::Null);
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0]["code"], "unknown-field");
    assert_eq!((findings[0]["line"].as_u64(), findings[0]["column"].as_u64()), (Some(16), Some(5)));
    assert_eq!(findings[0]["pointer"], "/steps/1/requires_aproval");
}

// ---------------------------------------------------------------------------------------------------
// check

#[test]
fn check_collects_every_refusal_at_once() {
    let sb = Sandbox::new("check-refused");
    sb.write("drop.yaml", DROP);
    let args = ["check", "drop.yaml", "--profile", "R1", "--coverage", "shell", "--allow", "x", "--risk-ceiling", "mutating"];
    let run = sb.run(&args);
    run.expect_exit(1);
    let text = run.out();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "drop.yaml: refused");
    let codes: Vec<&str> = lines[1..].iter().map(|l| l.trim_start().split(':').next().unwrap()).collect();
    assert_eq!(codes, ["capability-not-allowed", "coverage-incomplete", "profile-too-low", "risk-above-ceiling"]);

    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let json = sb.run(&json_args);
    json.expect_exit(1);
    assert_eq!(
        json.json(),
        serde_json::json!({
            "document": "drop.yaml",
            "admitted": false,
            "refusals": ["capability-not-allowed", "coverage-incomplete", "profile-too-low", "risk-above-ceiling"],
        })
    );
}

#[test]
fn check_refuses_autonomy_at_r0_and_unmet_prerequisites() {
    let sb = Sandbox::new("check-r0");
    let doc = format!("{}execution: agent-autonomous\nprerequisites:\n  - {{kind: tool_available, tool: db.read}}\n", ROTATE);
    sb.write("rb.yaml", &doc);
    let run = sb.run(&["check", "rb.yaml", "--profile", "R0", "--format", "json"]);
    run.expect_exit(1);
    assert_eq!(run.json()["refusals"], serde_json::json!(["autonomous-at-r0", "prerequisite-unmet", "profile-too-low"]));
    // Declaring the tool available and claiming R1 admits it.
    let ok = sb.run(&["check", "rb.yaml", "--profile", "R1", "--available", "db.read", "--format", "json"]);
    ok.expect_exit(0);
    assert_eq!(ok.json()["refusals"], serde_json::json!([]));
}

#[test]
fn check_admits_an_acceptable_claim() {
    let sb = Sandbox::new("check-ok");
    sb.write("drop.yaml", DROP);
    let run = sb.run(&["check", "drop.yaml", "--profile", "R2", "--allow", "db.read,db.drop", "--coverage", "complete"]);
    run.expect_exit(0);
    assert_eq!(run.out(), "drop.yaml: admitted\n");
    let json = sb.run(&["check", "drop.yaml", "--profile", "R2", "--format", "json"]);
    json.expect_exit(0);
    assert_eq!(json.json(), serde_json::json!({"document": "drop.yaml", "admitted": true, "refusals": []}));
}

#[test]
fn check_refuses_an_invalid_document() {
    let sb = Sandbox::new("check-invalid");
    sb.write("rb.yaml", variant("requires_approval", "requires_aproval"));
    let run = sb.run(&["check", "rb.yaml", "--profile", "R2", "--format", "json"]);
    run.expect_exit(1);
    assert_eq!(run.json()["refusals"], serde_json::json!(["invalid-document"]));
}

// ---------------------------------------------------------------------------------------------------
// replay

const DECISION_KEYS: [&str; 6] = ["decision", "deviation", "reason", "refusals", "seq", "step"];

fn check_decision_shape(decisions: &[Value]) {
    for (i, d) in decisions.iter().enumerate() {
        let mut keys: Vec<&str> = d.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(keys, DECISION_KEYS, "decision {i}: {d}");
        assert_eq!(d["seq"], i as u64, "seq is 0-based, the start line being 0: {d}");
    }
}

#[test]
fn replay_completed_run() {
    let sb = Sandbox::new("replay-ok");
    sb.write("rotate.yaml", ROTATE);
    sb.write("run.ndjson", COMPLETED_RUN);
    let run = sb.run(&["replay", "rotate.yaml", "run.ndjson"]);
    run.expect_exit(0);
    let out = run.out();
    let (decisions, report) = decision_lines(&out);
    assert_eq!(decisions.len(), 10, "one decision per event");
    check_decision_shape(&decisions);
    let seen: Vec<(&str, &str)> = decisions.iter().map(|d| (d["decision"].as_str().unwrap(), d["step"].as_str().unwrap())).collect();
    assert_eq!(
        seen,
        [
            ("allow", "check"),
            ("allow", "check"),
            ("allow", "check"),
            ("allow", "rotate"),
            ("needs-approval", "rotate"),
            ("allow", "rotate"),
            ("allow", "rotate"),
            ("allow", "rotate"),
            ("allow", "done"),
            ("halt", "done"),
        ]
    );
    assert_eq!(decisions[9]["reason"], "run-ended");
    assert_eq!(report["schema"], "runbook-run-report/v1");
    assert_eq!(report["outcome"], "completed");
    assert_eq!(report["terminal"], "done");
    assert_eq!(report["events"], 10);
    assert_eq!(report["run_id"], "r-1");
    assert_eq!(report["document"]["sha256"], sha256_hex(ROTATE.as_bytes()));
    // The report binds the envelope that `envelope` prints.
    let envelope = sb.run(&["envelope", "rotate.yaml"]);
    envelope.expect_exit(0);
    assert_eq!(report["envelope_sha256"], sha256_hex(&envelope.stdout));
    assert_eq!(report["approvals"][0]["approver"], "alice");
    assert_eq!(report["approvals"][0]["accepted"], true);
}

#[test]
fn replay_is_byte_identical_across_runs() {
    let sb = Sandbox::new("replay-determinism");
    sb.write("rotate.yaml", ROTATE);
    let events = format!("{COMPLETED_RUN}{}\n", r#"{"type":"invoke","at":95,"tool":"db.read","arguments":{}}"#);
    sb.write("run.ndjson", &events);
    let a = sb.run(&["replay", "rotate.yaml", "run.ndjson"]);
    let b = sb.run(&["replay", "rotate.yaml", "run.ndjson"]);
    assert_eq!(a.status.code(), b.status.code());
    assert_eq!(a.stdout, b.stdout, "same document and events, same bytes");
    assert!(a.stdout.ends_with(b"}\n"));
}

#[test]
fn replay_r1_blocks_deviations_and_holds_gated_calls() {
    let sb = Sandbox::new("replay-r1");
    sb.write("rotate.yaml", ROTATE);
    let events = [
        START_R1,
        r#"{"type":"invoke","at":10,"tool":"db.rotate","arguments":{"user":"app"}}"#,
        r#"{"type":"invoke","at":11,"tool":"shell.exec","arguments":{"cmd":"rm -rf /"}}"#,
        r#"{"type":"invoke","at":12,"tool":"db.read","arguments":{}}"#,
        r#"{"type":"result","at":13,"tool":"db.read","result":{"age_days":120},"is_error":false}"#,
        r#"{"type":"advance","at":14,"to":"rotate"}"#,
        r#"{"type":"invoke","at":15,"tool":"db.rotate","arguments":{"user":"app"}}"#,
        r#"{"type":"approval","at":16,"step":"rotate","approver":"agent-1","granted":true}"#,
        r#"{"type":"approval","at":17,"step":"rotate","approver":"alice","granted":true}"#,
        r#"{"type":"invoke","at":18,"tool":"db.rotate","arguments":{"user":"app"}}"#,
        r#"{"type":"end","at":20}"#,
    ];
    sb.write("run.ndjson", events.join("\n") + "\n");
    let run = sb.run(&["replay", "rotate.yaml", "run.ndjson"]);
    run.expect_exit(1);
    let out = run.out();
    let (decisions, report) = decision_lines(&out);
    check_decision_shape(&decisions);
    let seen: Vec<(&str, Option<&str>, Option<&str>)> =
        decisions.iter().map(|d| (d["decision"].as_str().unwrap(), d["deviation"].as_str(), d["reason"].as_str())).collect();
    assert_eq!(
        seen,
        [
            ("allow", None, None),
            ("deny", Some("out-of-scope-tool"), None),
            ("deny", Some("undeclared-tool"), None),
            ("allow", None, None),
            ("allow", None, None),
            ("allow", None, None),
            ("needs-approval", None, Some("awaiting-approval")),
            ("deny", None, Some("self-approval")),
            ("allow", None, None),
            ("allow", None, None),
            ("halt", None, Some("run-ended")),
        ]
    );
    assert_eq!(report["outcome"], "incomplete", "ended away from a terminal");
    let classes: Vec<&str> = report["deviations"].as_array().unwrap().iter().map(|d| d["class"].as_str().unwrap()).collect();
    assert_eq!(classes, ["out-of-scope-tool", "undeclared-tool", "terminal-not-reached"]);
}

#[test]
fn replay_malformed_line_halts_the_run() {
    let sb = Sandbox::new("replay-malformed");
    sb.write("rotate.yaml", ROTATE);
    let events = [
        START_R1,
        r#"{"type":"invoke","at":10,"tool":"db.read","arguments":{}}"#,
        "{this is not an event",
        r#"{"type":"result","at":12,"tool":"db.read","result":{},"is_error":false}"#,
        r#"{"type":"end","at":20}"#,
    ];
    sb.write("run.ndjson", events.join("\n") + "\n");
    let run = sb.run(&["replay", "rotate.yaml", "run.ndjson"]);
    run.expect_exit(1);
    let out = run.out();
    let (decisions, report) = decision_lines(&out);
    check_decision_shape(&decisions);
    let seen: Vec<(&str, Option<&str>)> = decisions.iter().map(|d| (d["decision"].as_str().unwrap(), d["reason"].as_str())).collect();
    assert_eq!(seen, [("allow", None), ("allow", None), ("halt", Some("malformed-event")), ("halt", Some("halted")), ("halt", Some("halted"))]);
    assert_eq!(report["outcome"], "failed");
    assert_eq!(report["events"], 5);
}

#[test]
fn replay_text_format_summarises() {
    let sb = Sandbox::new("replay-text");
    sb.write("rotate.yaml", ROTATE);
    sb.write("run.ndjson", COMPLETED_RUN);
    let run = sb.run(&["replay", "--format", "text", "rotate.yaml", "run.ndjson"]);
    run.expect_exit(0);
    let out = run.out();
    assert!(!out.contains('\x1b'), "no colour when piped: {out}");
    assert!(out.starts_with("Replaying run.ndjson against rotate.yaml\n"), "{out}");
    assert!(out.contains("Outcome:     completed at terminal `done`"), "{out}");
    assert!(out.contains("Deviations:  none") && out.contains("Approvals:   ") && out.contains("Checkpoints: "), "{out}");
    assert!(out.lines().any(|l| l.contains("start") && l.contains("allowed")), "{out}");
}

#[test]
fn replay_text_names_refusals_failed_asserts_and_deviations() {
    let sb = Sandbox::new("replay-text-failures");
    sb.write("rotate.yaml", ROTATE);
    // A refused start: an R1 claim whose coverage is the shell only, for the P2 credential rotation.
    let example = repo().join("examples/rotate-credentials");
    let doc = example.join("runbook.yaml");
    sb.write("refused.ndjson", "{\"type\":\"start\",\"at\":0,\"run_id\":\"r\",\"profile\":\"R1\",\"allowlist\":[\"*\"],\"risk_ceiling\":\"irreversible\",\"coverage\":[\"shell\"],\"agent\":\"a\"}\n");
    let run = sb.run(&["replay", "--format", "text", doc.to_str().unwrap(), "refused.ndjson"]);
    run.expect_exit(1);
    let out = run.out();
    assert!(out.contains("refused [coverage-incomplete]") && out.contains("refused [profile-too-low]"), "every refusal code, in words: {out}");
    assert!(out.contains("Outcome:     refused"), "{out}");
    // The bundled stream with deviations and a failed rotation.
    let events = example.join("events-deviations.ndjson");
    let out = sb.run(&["replay", "--format", "text", doc.to_str().unwrap(), events.to_str().unwrap()]).out();
    assert!(out.lines().any(|l| l.contains("ASSERT FAILED") && l.contains("result")), "a failed assert is a failure: {out}");
    assert!(out.lines().any(|l| l.contains("DENIED [undeclared-tool]")), "{out}");
    assert!(out.lines().any(|l| l.contains("NEEDS APPROVAL")), "{out}");
    assert!(out.contains("Deviations:  3 (undeclared-tool 2, out-of-scope-tool 1)"), "{out}");
}

#[test]
fn replay_speaks_to_a_terminal_and_prints_json_to_a_pipe() {
    let sb = Sandbox::new("replay-tty");
    sb.write("rotate.yaml", ROTATE);
    sb.write("run.ndjson", COMPLETED_RUN);
    // Piped: the exact wire format, decision lines then the report.
    let piped = sb.run(&["replay", "rotate.yaml", "run.ndjson"]).out();
    assert!(piped.lines().all(|l| l.starts_with('{')), "{piped}");
    // On a terminal (a pseudo-terminal from `script`): words and colour, none with NO_COLOR.
    let on_tty = |no_color: bool| {
        let cmd = format!("{BIN} replay rotate.yaml run.ndjson");
        let mut c = common::cmd("script");
        c.args(["-qec", &cmd, "/dev/null"]).current_dir(&sb.dir).env_remove("NO_COLOR");
        if no_color {
            c.env("NO_COLOR", "1");
        }
        String::from_utf8_lossy(&c.output().expect("script(1)").stdout).into_owned()
    };
    let colour = on_tty(false);
    assert!(colour.contains("Outcome:") && colour.contains("\x1b[32mcompleted"), "{colour}");
    let plain = on_tty(true);
    assert!(plain.contains("Outcome:     completed") && !plain.contains('\x1b'), "{plain}");
}

// ---------------------------------------------------------------------------------------------------
// module

#[test]
fn module_sha256_is_the_hash_of_the_bytes_written_out() {
    let sb = Sandbox::new("module");
    let sha = sb.run(&["module", "--sha256"]);
    sha.expect_exit(0);
    let printed = sha.out();
    let printed = printed.trim_end();
    assert_eq!(printed.len(), 64, "{printed}");
    assert!(printed.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{printed}");
    let out = sb.run(&["module", "--out", "policy.wasm"]);
    out.expect_exit(0);
    let bytes = sb.read("policy.wasm");
    assert!(bytes.starts_with(b"\0asm"), "a WebAssembly binary");
    assert_eq!(sha256_hex(&bytes), printed);
    assert!(out.stderr.contains(printed), "--out reports what it wrote: {}", out.stderr);
}

#[test]
fn module_wit_exports_the_policy_and_imports_nothing() {
    let sb = Sandbox::new("module-wit");
    let run = sb.run(&["module", "--wit"]);
    run.expect_exit(0);
    let wit = run.out();
    let world_at = wit.find("world root {").unwrap_or_else(|| panic!("no `world root`:\n{wit}"));
    let world = &wit[world_at..world_at + wit[world_at..].find('}').expect("the world closes")];
    assert!(world.lines().any(|l| l.trim() == "export runbook:policy/policy@1.2.0;"), "{world}");
    assert!(!wit.lines().any(|l| l.trim_start().starts_with("import")), "the component imports nothing:\n{wit}");
}

// ---------------------------------------------------------------------------------------------------
// usage and IO errors: exit 2 with a message naming the problem

#[test]
fn usage_unknown_subcommand() {
    let sb = Sandbox::new("usage-subcommand");
    let run = sb.run(&["frobnicate"]);
    run.expect_exit(2);
    assert!(run.stderr.contains("frobnicate"), "{}", run.stderr);
    assert!(run.stdout.is_empty());
}

#[test]
fn usage_missing_argument() {
    let sb = Sandbox::new("usage-missing");
    let run = sb.run(&["lint"]);
    run.expect_exit(2);
    assert!(run.stderr.contains("<DOCUMENT>"), "{}", run.stderr);
    let run = sb.run(&["replay", "doc.yaml"]);
    run.expect_exit(2);
    assert!(run.stderr.contains("<EVENTS>"), "{}", run.stderr);
    sb.write("rotate.yaml", ROTATE);
    let run = sb.run(&["check", "rotate.yaml"]);
    run.expect_exit(2);
    assert!(run.stderr.contains("--profile"), "{}", run.stderr);
}

#[test]
fn usage_bad_profile_and_risk_ceiling() {
    let sb = Sandbox::new("usage-profile");
    sb.write("rotate.yaml", ROTATE);
    let run = sb.run(&["check", "rotate.yaml", "--profile", "R9"]);
    run.expect_exit(2);
    assert!(run.stderr.contains("--profile") && run.stderr.contains("R9"), "{}", run.stderr);
    assert!(run.stdout.is_empty());
    let run = sb.run(&["check", "rotate.yaml", "--profile", "R1", "--risk-ceiling", "huge"]);
    run.expect_exit(2);
    assert!(run.stderr.contains("--risk-ceiling") && run.stderr.contains("huge"), "{}", run.stderr);
    let run = sb.run(&["lint", "--format", "xml", "rotate.yaml"]);
    run.expect_exit(2);
    assert!(run.stderr.contains("xml"), "{}", run.stderr);
}

#[test]
fn usage_missing_files() {
    let sb = Sandbox::new("usage-files");
    sb.write("rotate.yaml", ROTATE);
    for args in [
        vec!["lint", "missing.yaml"],
        vec!["envelope", "missing.yaml"],
        vec!["check", "missing.yaml", "--profile", "R1"],
        vec!["replay", "missing.yaml", "missing.ndjson"],
    ] {
        let run = sb.run(&args);
        run.expect_exit(2);
        assert!(run.stderr.contains("`missing.yaml`"), "the message names the file\n{}", run.context());
        assert!(run.stdout.is_empty(), "{}", run.context());
    }
    let run = sb.run(&["replay", "rotate.yaml", "missing.ndjson"]);
    run.expect_exit(2);
    assert!(run.stderr.contains("`missing.ndjson`"), "{}", run.context());
    let run = sb.run(&["module", "--out", "no-such-dir/policy.wasm"]);
    run.expect_exit(2);
    assert!(run.stderr.contains("no-such-dir/policy.wasm"), "{}", run.context());
}

/// `| head` closes the pipe early; the CLI must not answer that with a panic (exit 101).
#[test]
fn closed_stdout_is_not_a_crash() {
    let sb = Sandbox::new("closed-stdout");
    sb.write("rotate.yaml", ROTATE);
    for args in [vec!["lint", "rotate.yaml"], vec!["check", "rotate.yaml", "--profile", "R1"], vec!["module", "--sha256"]] {
        let mut child = sb.command(&args).spawn().unwrap();
        drop(child.stdout.take()); // no reader left: the first write fails with EPIPE
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = wait(&mut child, &args.join(" "));
        assert_ne!(status.code(), Some(101), "`runbook-host {}` panicked on a closed stdout:\n{err}", args.join(" "));
        assert!(status.code().is_some(), "killed by a signal");
        assert!(!err.contains("panicked"), "`runbook-host {}`:\n{err}", args.join(" "));
    }
}

// ---------------------------------------------------------------------------------------------------
// A newcomer's first hour: what a person meets before the product runs (issue 13, points 4 to 7)

/// The binary's canonical path, as messages print it when `runbook-host` on PATH is not this binary.
fn bin_path() -> String {
    std::fs::canonicalize(BIN).unwrap().to_string_lossy().into_owned()
}

fn executable(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn messages_name_the_binary_the_way_the_user_can_run_it() {
    let sb = Sandbox::new("invocation");
    sb.write("rb.yaml", variant("requires_approval", "requires_aproval"));
    std::fs::create_dir_all(sb.dir.join("on-path")).unwrap();
    std::os::unix::fs::symlink(BIN, sb.dir.join("on-path/runbook-host")).unwrap();
    std::fs::create_dir_all(sb.dir.join("other")).unwrap();
    executable(&sb.dir.join("other/runbook-host"), "#!/bin/sh\necho another runbook-host\n");
    let check = |path: &OsStr| {
        let run = sb.run_with(&["check", "rb.yaml", "--profile", "R2"], &[("PATH", path)], None);
        run.expect_exit(1);
        run.out()
    };
    let line = |shown: &str| format!("rb.yaml: refused\n  invalid-document: the runbook has lint errors (run `{shown} lint`)\n");
    // `runbook-host` on PATH (through a symlink) is this binary: its name.
    let on_path = std::env::join_paths([sb.dir.join("on-path"), "/usr/bin".into(), "/bin".into()]).unwrap();
    assert_eq!(check(&on_path), line("runbook-host"));
    // Not on PATH: the absolute path it can be run by.
    assert_eq!(check(OsStr::new("/usr/bin:/bin")), line(&bin_path()));
    // Another `runbook-host` first on PATH: the name would run that one, so the path again.
    let shadowed = std::env::join_paths([sb.dir.join("other"), sb.dir.join("on-path")]).unwrap();
    assert_eq!(check(&shadowed), line(&bin_path()));
}

/// A finished run made through the hook, as Claude Code would; returns its id.
fn hook_run(sb: &Sandbox, session: &str, end: bool) -> String {
    let env: [(&str, &OsStr); 2] = [("HOME", sb.dir.as_os_str()), ("CLAUDE_PROJECT_DIR", sb.dir.as_os_str())];
    let mut events = vec!["SessionStart"];
    if end {
        events.push("SessionEnd");
    }
    for e in events {
        let payload = format!(r#"{{"session_id":"{session}","hook_event_name":"{e}","source":"startup"}}"#);
        sb.run_with(&["hook", "--runbook", "rotate.yaml"], &env, Some(payload.as_bytes())).expect_exit(0);
    }
    let latest: Value = serde_json::from_slice(&sb.read(".runbook/runs/latest.json")).unwrap();
    latest["run_id"].as_str().unwrap().to_string()
}

#[test]
fn verify_and_export_take_latest_an_id_or_a_path_and_refuse_the_runs_folder() {
    let sb = Sandbox::new("run-references");
    sb.write("rotate.yaml", ROTATE);
    let id = hook_run(&sb, "s-refs", true);
    for reference in [".runbook/runs/latest", "latest", id.as_str(), &format!(".runbook/runs/{id}")] {
        let run = sb.run(&["verify", reference]);
        run.expect_exit(0);
        assert!(run.out().starts_with(&format!("verified: run {id} (2 events, outcome incomplete)")), "{}", run.context());
    }
    // The folder of all runs is not a run: say how to name one (a usage error), not `run.json: missing`.
    for args in [vec!["verify", ".runbook/runs"], vec!["verify", ".runbook/runs/"], vec!["export", ".runbook/runs"]] {
        let run = sb.run(&args);
        run.expect_exit(2);
        assert_eq!(
            run.stderr,
            format!("runbook-host: error: `{}` is the runs folder: name a run (its id or directory) or `latest`\n", args[1]),
            "{}",
            run.context()
        );
        assert!(run.stdout.is_empty(), "{}", run.context());
    }
    // export writes only redacted derivatives: `--redact` is implied, and accepted.
    let run = sb.run(&["export", "latest"]);
    run.expect_exit(0);
    assert_eq!(run.out(), format!("wrote the redacted derivative of run {id} under .runbook/redacted; share safety: share_ready\n"));
    assert!(sb.dir.join(format!(".runbook/redacted/{id}/derivation.json")).is_file());
    let run = sb.run(&["export", "--redact", ".runbook/runs/latest", "--out", "shared"]);
    run.expect_exit(0);
    assert!(sb.dir.join(format!("shared/{id}/derivation.json")).is_file(), "{}", run.context());
    let help = sb.run(&["export", "--help"]);
    help.expect_exit(0);
    assert!(help.out().contains("Accepted and implied: export only ever writes a redacted derivative"), "{}", help.out());
}

#[test]
fn envelope_help_says_the_envelope_is_json_whatever_the_format() {
    let sb = Sandbox::new("envelope-help");
    sb.write("rotate.yaml", ROTATE);
    let help = sb.run(&["envelope", "--help"]);
    help.expect_exit(0);
    let out = help.out();
    assert!(out.contains("The envelope itself is always its canonical JSON bytes [default: text]"), "{out}");
    assert!(out.contains("How a document without an envelope is reported: `text` renders the findings on stderr"), "{out}");
    // And it is: the default format prints the envelope as JSON.
    let run = sb.run(&["envelope", "rotate.yaml"]);
    run.expect_exit(0);
    assert_eq!(run.json()["schema"], "runbook-policy-envelope/v1");
}

#[test]
fn registry_add_of_a_missing_file_names_it() {
    let sb = Sandbox::new("registry-missing");
    let run = sb.run(&["registry", "add", "rotate-creds.yaml"]);
    run.expect_exit(2);
    assert!(run.stderr.starts_with("runbook-host: registry: io: cannot read `rotate-creds.yaml`: "), "{}", run.context());
}

#[test]
fn run_with_an_unknown_runbook_says_which_registry_it_looked_in() {
    let sb = Sandbox::new("run-unknown");
    sb.write("rotate.yaml", ROTATE);
    sb.run(&["registry", "add", "rotate.yaml", "--registry", "reg"]).expect_exit(0);
    let abs = std::fs::canonicalize(&sb.dir).unwrap().join("reg");
    for (reference, said) in [
        ("rotate-creds@9.9.9", "unknown-version: the registry has no version `9.9.9` of `rotate-creds`"),
        ("nope@1.0.0", "unknown-runbook: the registry has no runbook `nope`"),
    ] {
        let run = sb.run(&["run", reference, "--registry", "reg", "--", "sh", "-c", "touch started"]);
        run.expect_exit(1);
        let want = format!("runbook-host run: runbook_failed:{said} (looked in the registry `reg` ({}))\n", abs.display());
        assert!(run.stderr.starts_with(&want), "{}", run.context());
    }
    assert!(!sb.dir.join("started").exists(), "no server starts for a runbook that does not resolve");
}

#[test]
fn run_refuses_a_destructive_runbook_before_starting_any_server() {
    let sb = Sandbox::new("run-destructive");
    sb.write("drop.yaml", DROP);
    let run = sb.run(&["run", "drop.yaml", "--profile", "R2", "--", "sh", "-c", "touch started; sleep 30"]);
    run.expect_exit(1);
    let first = run.stderr.lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with("runbook-host run: runbook_failed:refused:coverage-incomplete: "), "{}", run.context());
    assert!(
        first.ends_with("(the MCP proxy cannot see the shell; destructive work needs the tool-call hook; nothing ran; no server was started)"),
        "{}",
        run.context()
    );
    assert!(!sb.dir.join("started").exists(), "a server was started for a run admission refuses\n{}", run.context());
    assert!(!sb.dir.join(".runbook/runs").exists(), "nothing ran, so there is no run");
    // Every refusal that does not depend on the servers is said at once.
    let run = sb.run(&["run", "drop.yaml", "--profile", "R1", "--", "sh", "-c", "touch started; sleep 30"]);
    run.expect_exit(1);
    assert!(run.stderr.starts_with("runbook-host run: runbook_failed:refused:coverage-incomplete,profile-too-low: "), "{}", run.context());
    assert!(!sb.dir.join("started").exists());
}

#[test]
fn approve_with_nothing_pending_exits_1_and_says_so() {
    let sb = Sandbox::new("approve-nothing");
    sb.write("rotate.yaml", ROTATE);
    let id = hook_run(&sb, "s-approve", false);
    // On a pseudo-terminal (`script`, util-linux), as a person in another terminal runs it.
    let cmd = format!("'{BIN}' approve latest rotate; echo \"exit=$?\"");
    let o = common::cmd("script")
        .args(["-qec", &cmd, "/dev/null"])
        .current_dir(&sb.dir)
        .env("RUNBOOK_HOST_CACHE", sb.dir.join("cache"))
        .stdin(Stdio::null())
        .output()
        .expect("script(1) from util-linux (bsdutils)");
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(shown.contains(&format!("runbook-host: no call of step `rotate` awaits an answer in run {id}")), "{shown}");
    assert!(shown.contains("exit=1"), "{shown}");
}

#[test]
fn a_tab_in_the_indentation_is_shown_and_named() {
    let sb = Sandbox::new("yaml-tab");
    let source = ROTATE.replace("  - id: check\n", "\t- id: check\n");
    sb.write("tab.yaml", &source);
    let run = sb.run(&["lint", "tab.yaml"]);
    run.expect_exit(1);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(
        lines[0],
        "error[parse-error]: invalid YAML: tabs disallowed within this context (block indentation); indent with spaces, not tabs",
        "{}",
        run.context()
    );
    assert_eq!(lines[1], "  --> tab.yaml:11:1");
    assert_eq!(lines[3], "11 | →- id: check", "the tab is visible\n{}", run.context());
    assert_eq!(lines[4], "   | ^", "the caret is under the tab\n{}", run.context());
}

// ---------------------------------------------------------------------------------------------------
// the README's two commands

#[test]
fn the_readme_starts_with_two_commands_and_the_first_says_what_happened() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let block = readme.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("a shell block");
    let commands: Vec<&str> = block.lines().map(|l| l.split('#').next().unwrap().trim()).filter(|l| !l.is_empty()).collect();
    assert_eq!(commands, ["bash tools/demo", "bash tools/test"], "the README's first shell block");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(ci.lines().any(|l| l.trim() == "exec bash tools/test"), "CI runs the second command: {ci}");
    // The first, as a newcomer runs it. Its build is the one this test run made (the same cargo command),
    // so it compiles nothing, and it prints the replay and the outcome in words.
    let o = common::toolchain(&mut common::cmd("bash")).arg("tools/demo").current_dir(&root).env("NO_COLOR", "1").output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "tools/demo: {out}{err}");
    assert!(!err.contains("Compiling"), "tools/demo rebuilt what the tests built: {err}");
    assert!(out.contains("NEEDS APPROVAL [awaiting-approval]"), "{out}");
    assert!(out.contains("Outcome:     completed at terminal `rotated`"), "{out}");
    assert!(out.contains("Deviations:  none") && out.contains("Approvals:   1 answered, 1 accepted"), "{out}");
}

/// Issue 28, F10: precompiled code from the cache is machine code the host runs. It is used only when its
/// bytes hash to the digest recorded beside it and the cache is this user's own: an altered file is
/// compiled again (and said so on stderr), a cache directory other users can write is neither read nor
/// written.
#[test]
fn precompiled_code_is_used_only_when_its_digest_matches_and_the_cache_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new("cwasm");
    let doc = std::fs::read(repo().join("examples/rotate-credentials/runbook.yaml")).unwrap();
    sb.write("runbook.yaml", &doc);
    let cache = sb.dir.join("cache");
    let code = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().path()).filter(|p| p.to_string_lossy().ends_with(".cwasm")).collect();
        v.sort();
        v
    };
    let r = sb.run(&["lint", "runbook.yaml"]);
    assert!(r.status.success(), "{}", r.stderr);
    let files = code();
    assert_eq!(files.len(), 1, "one compiled module, with its digest beside it");
    let cwasm = files[0].clone();
    let digest = PathBuf::from(format!("{}.sha256", cwasm.display()));
    let pristine = std::fs::read(&cwasm).unwrap();
    assert_eq!(std::fs::read_to_string(&digest).unwrap(), format!("{:x}", Sha256::digest(&pristine)));
    assert_eq!(std::fs::metadata(&cwasm).unwrap().permissions().mode() & 0o777, 0o600);
    // A warm run uses it and says nothing.
    let r = sb.run(&["lint", "runbook.yaml"]);
    assert!(r.status.success() && !r.stderr.contains("cache"), "{}", r.stderr);

    // Altered code (one byte in the middle, as a planted patch would be): not loaded, compiled again, and
    // the cache holds the host's own bytes again.
    let mut altered = pristine.clone();
    let mid = altered.len() / 2;
    altered[mid] ^= 0xff;
    std::fs::write(&cwasm, &altered).unwrap();
    let r = sb.run(&["lint", "runbook.yaml"]);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stderr.contains("the compiled module in the cache is not used") && r.stderr.contains("not to the digest recorded for it"), "{}", r.stderr);
    assert_eq!(std::fs::read(&cwasm).unwrap(), pristine, "compiled again, to the same bytes");
    // Code with no digest beside it (a file dropped in): compiled again, the digest written.
    std::fs::remove_file(&digest).unwrap();
    std::fs::write(&cwasm, &altered).unwrap();
    let r = sb.run(&["lint", "runbook.yaml"]);
    assert!(r.status.success(), "{}", r.stderr);
    assert_eq!(std::fs::read(&cwasm).unwrap(), pristine);
    assert!(digest.exists());

    // A cache directory other users can write: neither read nor written, and said so.
    std::fs::write(&cwasm, &altered).unwrap();
    std::fs::write(&digest, format!("{:x}", Sha256::digest(&altered))).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = sb.run(&["lint", "runbook.yaml"]);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stderr.contains("the compiled-module cache is not used") && r.stderr.contains("writable by other users"), "{}", r.stderr);
    assert_eq!(std::fs::read(&cwasm).unwrap(), altered, "nothing written to a cache that is not private");
    // A file in it that another user could write, in a private directory: not loaded either.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&cwasm, std::fs::Permissions::from_mode(0o666)).unwrap();
    let r = sb.run(&["lint", "runbook.yaml"]);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stderr.contains("writable by other users"), "{}", r.stderr);
    assert_eq!(std::fs::read(&cwasm).unwrap(), pristine, "replaced by the host's own");
}
