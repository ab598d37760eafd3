//! Hostile and broken input through the real `runbook-host` binary: every document in `tests/fixtures/bad/`
//! (plus a few generated at test time) must be refused the way docs/spec/runbook.md#limits and
//! docs/spec/runbook.md#lint-findings say, with exit code 1 (never 101 or a signal), a finding with the
//! expected code at the expected line:column, no panic text, and within a generous time bound. Malformed
//! event lines go through `replay` and must each halt the run with the right reason.
//!
//! A case the core gets wrong keeps asserting the right behaviour and is marked `#[ignore = "core bug: .."]`.

use crate::common::{cmd, repo, Tmp, BIN};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::io::Read;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A run that takes longer than this is a failure (a hang, a blow-up); no other duration is asserted.
const TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------------
// Harness: a private directory per test (its own RUNBOOK_HOST_CACHE), and a child process with a timeout.

struct Sandbox {
    dir: PathBuf,
    _tmp: Tmp,
}

impl Sandbox {
    fn new(tag: &str) -> Sandbox {
        let tag: String = tag.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let t = Tmp::new(&format!("bad-{tag}"));
        std::fs::create_dir_all(t.join("cache")).expect("create the sandbox");
        Sandbox { dir: t.0.clone(), _tmp: t }
    }

    fn write(&self, name: &str, bytes: impl AsRef<[u8]>) {
        std::fs::write(self.dir.join(name), bytes).expect("write a file into the sandbox");
    }

    /// Copies a fixture into the sandbox under its own name, so that the CLI prints that short name.
    fn fixture(&self, name: &str) -> Vec<u8> {
        let bytes = std::fs::read(fixture_path(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
        self.write(name, &bytes);
        bytes
    }

    fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        let shown: Vec<String> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
        let mut child = cmd(BIN)
            .args(args)
            .current_dir(&self.dir)
            .env("RUNBOOK_HOST_CACHE", self.dir.join("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start runbook-host");
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
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for runbook-host") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`runbook-host {}` did not finish within {TIMEOUT:?}", shown.join(" "));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let stdout = out_reader.join().unwrap();
        let stderr = String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned();
        Run { cmd: shown.join(" "), status, stdout, stderr }
    }
}

fn fixture_path(name: &str) -> PathBuf {
    repo().join("host/tests/fixtures/bad").join(name)
}

struct Run {
    cmd: String,
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

impl Run {
    fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    fn context(&self) -> String {
        format!(
            "`runbook-host {}` exited with {:?}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.cmd,
            self.status,
            truncate(&self.stdout_text()),
            truncate(&self.stderr)
        )
    }

    /// Exactly this exit code (a signal has none), and nothing that looks like a crash on stderr.
    fn expect_exit(&self, code: i32) -> &Run {
        assert_eq!(self.status.code(), Some(code), "wrong exit status\n{}", self.context());
        self.expect_no_crash()
    }

    fn expect_no_crash(&self) -> &Run {
        assert_ne!(self.status.code(), Some(101), "runbook-host panicked\n{}", self.context());
        assert!(self.status.code().is_some(), "runbook-host was killed by a signal\n{}", self.context());
        for crash in ["panicked", "RUST_BACKTRACE", "stack backtrace", "trapped", "wasm backtrace"] {
            assert!(!self.stderr.contains(crash), "crash text `{crash}` on stderr\n{}", self.context());
        }
        self
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.stdout).unwrap_or_else(|e| panic!("stdout is not one JSON value: {e}\n{}", self.context()))
    }
}

fn truncate(s: &str) -> String {
    if s.len() <= 4000 {
        return s.to_string();
    }
    let mut end = 4000;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes in all)", &s[..end], s.len())
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn summary(findings: &[Value]) -> String {
    findings.iter().map(|f| format!("{} {}:{} {} {}", f["code"], f["line"], f["column"], f["pointer"], f["message"])).collect::<Vec<_>>().join("\n  ")
}

// ---------------------------------------------------------------------------------------------------
// Lint cases.

/// Lints `file` (already in the sandbox) and checks what a user sees, in JSON and as text.
fn expect_finding(sb: &Sandbox, file: &str, bytes: &[u8], code: &str, line: u64, column: u64) {
    let run = sb.run(&["lint", "--format", "json", file]);
    run.expect_exit(1);
    let v = run.json();
    assert_eq!(v["ok"], false, "{}", run.context());
    assert_eq!(v["sha256"], sha256_hex(bytes), "the reported sha256 is of the file's exact bytes");
    let findings = v["findings"].as_array().expect("findings is a list").clone();
    assert!(
        findings.iter().any(|f| f["code"] == code && f["line"] == line && f["column"] == column && f["severity"] == "error"),
        "{file}: expected error `{code}` at {line}:{column}; got:\n  {}",
        summary(&findings)
    );
    for f in &findings {
        let keys: Vec<&str> = f.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, ["code", "column", "line", "message", "pointer", "severity"], "finding keys");
        assert!(f["line"].as_u64().unwrap() >= 1 && f["column"].as_u64().unwrap() >= 1, "1-based positions: {f}");
        let p = f["pointer"].as_str().unwrap();
        assert!(p.is_empty() || p.starts_with('/'), "pointer is a JSON Pointer: {p}");
        assert!(!f["message"].as_str().unwrap().is_empty(), "a finding says what is wrong");
    }
    let keys: Vec<(u64, u64, String)> =
        findings.iter().map(|f| (f["line"].as_u64().unwrap(), f["column"].as_u64().unwrap(), f["code"].as_str().unwrap().to_string())).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "findings are sorted by line, column, code");

    // The same finding as a person reads it.
    let text = sb.run(&["lint", file]);
    text.expect_exit(1);
    assert!(text.stderr.contains(&format!("error[{code}]: ")), "text output names the code\n{}", text.context());
    assert!(text.stderr.contains(&format!("--> {file}:{line}:{column}\n")), "text output gives the place\n{}", text.context());
    assert!(text.stdout_text().contains(&format!("{file}: ")), "a summary line on stdout\n{}", text.context());

    // A run of it is refused up front, and nothing else falls over on it.
    let check = sb.run(&["check", file, "--profile", "R2", "--format", "json"]);
    check.expect_exit(1);
    let c = check.json();
    assert_eq!(c["admitted"], false);
    assert!(c["refusals"].as_array().unwrap().iter().any(|r| r == "invalid-document"), "{}", check.context());
    let envelope = sb.run(&["envelope", "--format", "json", file]);
    envelope.expect_no_crash();
    assert!(matches!(envelope.status.code(), Some(0 | 1)), "{}", envelope.context());
}

fn lint_fixture(file: &str, code: &str, line: u64, column: u64) {
    let sb = Sandbox::new(file);
    let bytes = sb.fixture(file);
    expect_finding(&sb, file, &bytes, code, line, column);
}

macro_rules! lint_cases {
    ($( $(#[$meta:meta])* $name:ident: $file:literal => $code:literal at $line:literal : $column:literal; )*) => {
        $(
            $(#[$meta])*
            #[test]
            fn $name() {
                lint_fixture($file, $code, $line, $column);
            }
        )*
    };
}

lint_cases! {
    // Not a document at all.
    malformed_json: "malformed-json.json" => "parse-error" at 4:24;
    malformed_json_unterminated_string: "malformed-json-unterminated-string.json" => "parse-error" at 3:20;
    malformed_yaml_indentation: "malformed-yaml.yaml" => "parse-error" at 6:4;
    malformed_yaml_stray_bracket: "malformed-yaml-flow.yaml" => "parse-error" at 3:24;
    empty_file: "empty.yaml" => "parse-error" at 1:1;
    blank_file: "blank.yaml" => "parse-error" at 1:1;
    not_utf8: "not-utf8.yaml" => "parse-error" at 3:13;
    not_utf8_utf16: "not-utf8-utf16.json" => "parse-error" at 1:1;
    nul_byte: "nul-byte.yaml" => "parse-error" at 3:12;
    not_a_mapping: "not-a-mapping.yaml" => "wrong-type" at 1:1;
    yaml_multi_document: "yaml-multi-document.yaml" => "parse-error" at 3:1;

    // YAML features that let a small file stand for a large or ambiguous one (9.26).
    yaml_alias_bomb: "yaml-alias-bomb.yaml" => "parse-error" at 3:6;
    yaml_anchor: "yaml-anchor.yaml" => "parse-error" at 3:12;
    yaml_alias_to_unknown_anchor: "yaml-alias-unknown-anchor.yaml" => "parse-error" at 3:8;
    yaml_tag: "yaml-tag.yaml" => "parse-error" at 2:10;
    yaml_custom_tag: "yaml-tag-custom.yaml" => "parse-error" at 3:15;
    yaml_merge_key: "yaml-merge-key.yaml" => "parse-error" at 6:5;

    // Strictness (7.11).
    unknown_field: "unknown-field.yaml" => "unknown-field" at 11:5;
    unknown_field_root_json: "unknown-field-root.json" => "unknown-field" at 4:3;
    wrong_type_yes_is_a_string: "wrong-type.yaml" => "wrong-type" at 7:24;
    wrong_type_json: "wrong-type.json" => "wrong-type" at 5:12;
    wrong_type_version_number: "wrong-type-version-number.yaml" => "wrong-type" at 2:10;
    duplicate_step_id: "duplicate-step-id.yaml" => "duplicate-id" at 11:9;
    duplicate_capability: "duplicate-capability.yaml" => "duplicate-id" at 5:12;
    duplicate_key_yaml: "duplicate-key.yaml" => "duplicate-key" at 9:5;
    duplicate_key_json: "duplicate-key.json" => "duplicate-key" at 6:86;

    // Routes, budgets, tools.
    unknown_route: "unknown-route.yaml" => "unknown-route" at 7:11;
    unknown_route_on_fail: "unknown-route-on-fail.yaml" => "unknown-route" at 10:14;
    unknown_retry_target: "unknown-retry-target.yaml" => "unknown-route" at 10:17;
    missing_last_step_route: "missing-last-route.yaml" => "missing-route" at 7:9;
    unbudgeted_cycle: "unbudgeted-cycle.yaml" => "unbudgeted-cycle" at 10:14;
    unbudgeted_self_loop: "unbudgeted-self-loop.json" => "unbudgeted-cycle" at 6:47;
    budget_out_of_range: "budget-out-of-range.yaml" => "budget-out-of-range" at 7:18;
    budget_zero: "budget-zero.yaml" => "budget-out-of-range" at 8:12;
    budget_fractional: "budget-fractional.json" => "budget-out-of-range" at 6:60;
    undeclared_tool: "undeclared-tool.yaml" => "undeclared-tool" at 10:22;

    // Predicates.
    invalid_regex: "invalid-regex.yaml" => "invalid-regex" at 8:50;
    invalid_pointer_no_slash: "invalid-pointer.yaml" => "invalid-pointer" at 8:15;
    invalid_pointer_bad_escape: "invalid-pointer-escape.json" => "invalid-pointer" at 7:26;
    unanchored_when: "unanchored-when.yaml" => "unanchored-when" at 6:48;
    unanchored_when_alternation: "unanchored-when-alternation.yaml" => "unanchored-when" at 6:48;
    // A shell that can run anything beside a gated or destructive step
    // (docs/spec/runbook.md#tight-conditions): refused, no envelope.
    unconstrained_shell: "unconstrained-shell.yaml" => "unconstrained-shell" at 4:5;
    unconstrained_shell_pattern: "unconstrained-shell-pattern.yaml" => "unconstrained-shell" at 4:5;

    // Nesting depth 64 (9.25). The 65th opening bracket is the one past the limit.
    deep_nesting_json_objects: "deep-nesting.json" => "limit" at 1:440;
    deep_nesting_json_arrays: "deep-nesting-array.json" => "limit" at 1:125;
    deep_nesting_yaml_block: "deep-nesting.yaml" => "limit" at 67:129;
    deep_nesting_yaml_flow: "deep-nesting-flow.yaml" => "limit" at 1:65;
}

// ---------------------------------------------------------------------------------------------------
// Documents generated at test time: sizes and counts at and past the limits.

const HEADER: &str = "runbook_id: rotate-creds\nversion: 1.0.0\n";

/// A valid runbook of exactly `size` bytes, padded with an `x-` extension field.
fn padded_document(size: usize) -> String {
    let head = format!("{HEADER}capabilities: [db.read]\nsteps:\n  - id: check\n    tool: db.read\n    next: done\nterminals: [done]\nx-padding: \"");
    let tail = "\"\n";
    assert!(size > head.len() + tail.len());
    format!("{head}{}{tail}", "a".repeat(size - head.len() - tail.len()))
}

#[test]
fn document_of_exactly_one_mib_is_accepted() {
    let sb = Sandbox::new("one-mib");
    let doc = padded_document(1 << 20);
    assert_eq!(doc.len(), 1 << 20);
    sb.write("big.yaml", &doc);
    let run = sb.run(&["lint", "--format", "json", "big.yaml"]);
    run.expect_exit(0);
    assert_eq!(run.json()["findings"], serde_json::json!([]), "{}", run.context());
}

#[test]
fn huge_document_over_one_mib() {
    let sb = Sandbox::new("huge-yaml");
    let doc = padded_document((1 << 20) + 1);
    sb.write("huge.yaml", &doc);
    expect_finding(&sb, "huge.yaml", doc.as_bytes(), "limit", 1, 1);
}

#[test]
fn huge_json_document_of_many_megabytes() {
    let sb = Sandbox::new("huge-json");
    // 8 MiB of one long array: refused by its size before anything parses it.
    let doc = format!("{{\"runbook_id\": \"rotate-creds\", \"version\": \"1.0.0\", \"x-pad\": [{}0]}}", "0,".repeat(4 << 20));
    sb.write("huge.json", &doc);
    expect_finding(&sb, "huge.json", doc.as_bytes(), "limit", 1, 1);
}

fn steps_document(n: usize, route: impl Fn(usize) -> String) -> String {
    let mut doc = format!("{HEADER}capabilities: [db.read]\nsteps:\n");
    for i in 0..n {
        doc.push_str(&format!("  - {{id: s{i:05}, tool: db.read, next: {}}}\n", route(i)));
    }
    doc.push_str("terminals: [done]\n");
    doc
}

#[test]
fn ten_thousand_steps_are_accepted() {
    let sb = Sandbox::new("10000-steps");
    let n = 10_000;
    let doc = steps_document(n, |i| if i + 1 < n { format!("s{:05}", i + 1) } else { "done".into() });
    sb.write("many.yaml", &doc);
    let run = sb.run(&["lint", "--format", "json", "many.yaml"]);
    run.expect_exit(0);
    assert_eq!(run.json()["findings"], serde_json::json!([]), "{}", run.context());
}

#[test]
fn too_many_steps() {
    let sb = Sandbox::new("too-many-steps");
    let n = 10_001;
    let doc = steps_document(n, |i| if i + 1 < n { format!("s{:05}", i + 1) } else { "done".into() });
    sb.write("many.yaml", &doc);
    // The finding sits on the `steps` list: its first item, line 5 column 3.
    expect_finding(&sb, "many.yaml", doc.as_bytes(), "limit", 5, 3);
}

#[test]
fn too_many_capabilities() {
    let sb = Sandbox::new("too-many-caps");
    let mut doc = format!("{HEADER}capabilities:\n");
    for i in 0..1_001 {
        doc.push_str(&format!("  - tool.{i}\n"));
    }
    sb.write("caps.yaml", &doc);
    expect_finding(&sb, "caps.yaml", doc.as_bytes(), "limit", 4, 3);
}

/// Every route misspelt: each finding looks for a "did you mean" among all steps. A 2,000-step document
/// (80 KB, far inside the limits) must still be linted, not run the module out of the host's fuel.
#[test]
fn many_misspelt_routes_stay_within_the_module_limits() {
    let sb = Sandbox::new("many-misspelt");
    let doc = steps_document(2_000, |i| format!("q{i:05}"));
    sb.write("routes.yaml", &doc);
    expect_finding(&sb, "routes.yaml", doc.as_bytes(), "unknown-route", 5, 39);
    let run = sb.run(&["lint", "--format", "json", "routes.yaml"]);
    let findings = run.json()["findings"].as_array().unwrap().clone();
    assert_eq!(findings.iter().filter(|f| f["code"] == "unknown-route").count(), 2_000);
}

// ---------------------------------------------------------------------------------------------------
// Malformed event lines through `replay` (9.16): the line answers `halt` with its reason, every later
// event answers `halt`/`halted`, the report is the last line, and the exit code is 1.

const EVENTS_DOC: &str = "events-runbook.yaml";

fn expect_replay_halt(sb: &Sandbox, events_file: &str, events: &str, bad_seq: usize, reason: &str, outcome: &str) {
    let n = events.lines().filter(|l| !l.trim().is_empty()).count();
    let run = sb.run(&["replay", EVENTS_DOC, events_file]);
    run.expect_exit(1);
    let out = run.stdout_text();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), n + 1, "one decision per event, then the report\n{}", run.context());
    for (i, line) in lines[..n].iter().enumerate() {
        let d: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("decision line {i} is not JSON: {e}: {line}"));
        let mut keys: Vec<&str> = d.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(keys, ["decision", "deviation", "reason", "refusals", "seq", "step"], "decision keys (9.16): {line}");
        assert_eq!(d["seq"], i as u64, "seq is the 0-based line number: {line}");
        if i < bad_seq {
            assert_ne!(d["decision"], "halt", "events before the bad line run normally: {line}");
        } else if i == bad_seq {
            assert_eq!((d["decision"].as_str(), d["reason"].as_str()), (Some("halt"), Some(reason)), "the bad line, seq {i}: {line}");
        } else {
            assert_eq!((d["decision"].as_str(), d["reason"].as_str()), (Some("halt"), Some("halted")), "after a halt, seq {i}: {line}");
        }
    }
    let report: Value = serde_json::from_str(lines[n]).unwrap_or_else(|e| panic!("the report is not JSON: {e}"));
    assert_eq!(report["schema"], "runbook-run-report/v1");
    assert_eq!(report["outcome"], outcome, "{}", lines[n]);
    assert_eq!(report["events"], n as u64, "every line is recorded, malformed or not");
}

fn replay_fixture(events_file: &str, bad_seq: usize, reason: &str, outcome: &str) {
    let sb = Sandbox::new(events_file);
    sb.fixture(EVENTS_DOC);
    let events = String::from_utf8(sb.fixture(events_file)).unwrap();
    expect_replay_halt(&sb, events_file, &events, bad_seq, reason, outcome);
}

macro_rules! replay_cases {
    ($( $(#[$meta:meta])* $name:ident: $file:literal => halt $reason:literal at $seq:literal, $outcome:literal; )*) => {
        $(
            $(#[$meta])*
            #[test]
            fn $name() {
                replay_fixture($file, $seq, $reason, $outcome);
            }
        )*
    };
}

replay_cases! {
    event_not_json: "event-not-json.ndjson" => halt "malformed-event" at 1, "failed";
    event_truncated_json: "event-truncated-json.ndjson" => halt "malformed-event" at 1, "failed";
    event_unknown_type: "event-unknown-type.ndjson" => halt "malformed-event" at 1, "failed";
    event_unknown_field: "event-unknown-field.ndjson" => halt "malformed-event" at 1, "failed";
    event_duplicate_key: "event-duplicate-key.ndjson" => halt "malformed-event" at 1, "failed";
    event_missing_at: "event-missing-at.ndjson" => halt "malformed-event" at 1, "failed";
    event_negative_at: "event-at-negative.ndjson" => halt "malformed-event" at 1, "failed";
    event_at_going_backwards: "event-at-backwards.ndjson" => halt "malformed-event" at 3, "failed";
    event_second_start: "event-second-start.ndjson" => halt "malformed-event" at 2, "failed";
    event_first_line_not_start: "event-first-not-start.ndjson" => halt "malformed-event" at 0, "refused";
    event_deeply_nested: "event-deep-nesting.ndjson" => halt "limit" at 1, "failed";
}

#[test]
fn event_over_one_mib() {
    let sb = Sandbox::new("event-over-1mib");
    sb.fixture(EVENTS_DOC);
    let start =
        r#"{"type":"start","at":0,"run_id":"r-1","profile":"R1","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}"#;
    let big = format!(r#"{{"type":"invoke","at":10,"tool":"db.read","arguments":{{"blob":"{}"}}}}"#, "a".repeat(1 << 20));
    assert!(big.len() > 1 << 20);
    let events = format!("{start}\n{big}\n{{\"type\":\"end\",\"at\":20}}\n");
    sb.write("big.ndjson", &events);
    expect_replay_halt(&sb, "big.ndjson", &events, 1, "limit", "failed");
}

#[test]
fn event_of_exactly_one_mib_is_read() {
    let sb = Sandbox::new("event-1mib");
    sb.fixture(EVENTS_DOC);
    let start =
        r#"{"type":"start","at":0,"run_id":"r-1","profile":"R1","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}"#;
    let head = r#"{"type":"invoke","at":10,"tool":"db.read","arguments":{"blob":""#;
    let tail = r#""}}"#;
    let big = format!("{head}{}{tail}", "a".repeat((1 << 20) - head.len() - tail.len()));
    assert_eq!(big.len(), 1 << 20);
    sb.write("big.ndjson", format!("{start}\n{big}\n"));
    let run = sb.run(&["replay", EVENTS_DOC, "big.ndjson"]);
    // The run never ends, so it is not complete (exit 1); but the big event itself is allowed.
    run.expect_exit(1);
    let out = run.stdout_text();
    let d: Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    assert_eq!((d["seq"].as_u64(), d["decision"].as_str(), d["reason"].as_str()), (Some(1), Some("allow"), None), "{}", run.context());
}
