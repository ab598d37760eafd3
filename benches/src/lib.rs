//! Shared fixtures of the benchmarks: a small hand-written runbook for single decisions, a generator of
//! larger valid runbooks for envelope derivation, the event lines and typed events the benches feed, and
//! a helper that times a stateful operation while keeping each run far below the module's event limit.
//!
//! Nothing here measures anything by itself; every bench checks its fixture's decisions once in its setup
//! (never a timing).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A small P2 runbook (every step names declared tools and has `assert`), admissible at R1 and R2.
///
/// Step `inspect` allows `db.read` and, through a `when`-constrained capability, `Bash` calls of the form
/// `kubectl get <name>`; `db.write` is declared but only in scope in step `fix`, so calling it in `inspect`
/// is `out-of-scope-tool`.
pub const DECISION_RUNBOOK: &str = r#"runbook_id: bench-decision
version: 1.0.0
title: Decision benchmark
execution: human-with-agent
capabilities:
  - {name: db-read, tool: db.read, risk: read-only}
  - {name: db-write, tool: db.write, risk: mutating}
  - name: kubectl-get
    tool: Bash
    risk: read-only
    when: {path: /command, op: matches, value: '^kubectl get [a-z0-9./-]+$'}
steps:
  - id: inspect
    tools: [db-read, kubectl-get]
    observe: db-read
    assert:
      - {path: /is_error, op: equals, value: false}
      - {path: /result/age_days, op: lt, value: 365}
    retry: {max: 3}
    on_fail: failed
  - id: fix
    tool: db-write
    assert:
      - {path: /result/ok, op: equals, value: true}
    next: done
terminals: [done, failed]
"#;

/// The `start` claim the decision benches open their runs with: R1, so that a `result` never routes
/// (the client routes with `advance` at R1) and an invoke/result pair leaves the run where it was.
pub const START_R1: &str =
    r#"{"type":"start","at":0,"run_id":"bench","profile":"R1","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}"#;

/// The same claim at R2.
pub const START_R2: &str =
    r#"{"type":"start","at":0,"run_id":"bench","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"agent-1"}"#;

/// An allowed call in step `inspect`, with a small object of arguments.
pub const INVOKE_READ: &str = r#"{"type":"invoke","at":1,"tool":"db.read","arguments":{"table":"users","limit":10}}"#;
pub const INVOKE_READ_TOOL: &str = "db.read";
pub const INVOKE_READ_ARGS: &str = r#"{"table":"users","limit":10}"#;
/// Its result (paired with the latest unanswered `db.read`, 9.17).
pub const RESULT_READ: &str = r#"{"type":"result","at":1,"tool":"db.read","result":{"age_days":120},"is_error":false}"#;
pub const RESULT_READ_JSON: &str = r#"{"age_days":120}"#;

/// A `Bash` call that is the `kubectl-get` capability only because its `when` regex matches.
pub const INVOKE_BASH: &str = r#"{"type":"invoke","at":1,"tool":"Bash","arguments":{"command":"kubectl get pods/web-1"}}"#;
pub const INVOKE_BASH_TOOL: &str = "Bash";
pub const INVOKE_BASH_ARGS: &str = r#"{"command":"kubectl get pods/web-1"}"#;
pub const RESULT_BASH: &str = r#"{"type":"result","at":1,"tool":"Bash","result":{"stdout":"web-1 Running"},"is_error":false}"#;
pub const RESULT_BASH_JSON: &str = r#"{"stdout":"web-1 Running"}"#;

/// A declared tool of another step: denied as `out-of-scope-tool` in `inspect`.
pub const INVOKE_OUT_OF_SCOPE: &str = r#"{"type":"invoke","at":1,"tool":"db.write","arguments":{}}"#;
pub const INVOKE_OUT_OF_SCOPE_TOOL: &str = "db.write";
pub const INVOKE_OUT_OF_SCOPE_ARGS: &str = "{}";

/// How a generated runbook is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Yaml => "yaml",
            Format::Json => "json",
        }
    }
}

/// One capability of a generated runbook.
struct GenCap {
    name: String,
    tool: String,
    risk: &'static str,
    when: Option<&'static str>,
}

/// A valid P2 runbook of `steps` steps (at least 1): a pool of capabilities (one in ten steps, at least
/// four, plus a `when`-constrained `Bash` capability), each step naming two of them with an `observe` and
/// two `assert` predicates; every fifth step has a retry budget back to the previous step (a budgeted
/// cycle) and an `on_fail` terminal; the last step routes to the `done` terminal.
///
/// The same model is written as YAML or as JSON. Steps are read-only or mutating only, so the run's
/// implied minimum profile stays R0 and nothing is gated.
pub fn generate_runbook(steps: usize, format: Format) -> String {
    assert!(steps >= 1, "a generated runbook has at least one step");
    let ncaps = (steps / 10).clamp(4, 999);
    let mut caps: Vec<GenCap> = (0..ncaps)
        .map(|k| GenCap { name: format!("cap-{k}"), tool: format!("svc{}.op{k}", k % 7), risk: if k % 3 == 0 { "mutating" } else { "read-only" }, when: None })
        .collect();
    caps.push(GenCap { name: "kubectl-get".into(), tool: "Bash".into(), risk: "read-only", when: Some("^kubectl get [a-z0-9./-]+$") });
    let shell = caps.len() - 1;

    struct GenStep {
        id: String,
        tools: [usize; 2],
        retry_to: Option<String>,
        next: Option<&'static str>,
        risk: Option<&'static str>,
    }
    let gen_steps: Vec<GenStep> = (0..steps)
        .map(|i| GenStep {
            id: format!("step-{i}"),
            tools: [i % ncaps, if i % 4 == 3 { shell } else { (i + 1) % ncaps }],
            retry_to: (i % 5 == 4).then(|| format!("step-{}", i - 1)),
            next: (i + 1 == steps).then_some("done"),
            risk: (i % 2 == 0).then_some("read-only"),
        })
        .collect();

    let mut out = String::with_capacity(steps * 400 + 1024);
    match format {
        Format::Yaml => {
            let _ = writeln!(out, "runbook_id: generated-{steps}");
            out.push_str("version: 1.0.0\ntitle: Generated runbook\nmode: required\nexecution: human-with-agent\n");
            out.push_str("capabilities:\n");
            for c in &caps {
                let _ = write!(out, "  - name: {}\n    tool: {}\n    risk: {}\n", c.name, c.tool, c.risk);
                if let Some(w) = c.when {
                    let _ = writeln!(out, "    when: {{path: /command, op: matches, value: '{w}'}}");
                }
            }
            out.push_str("steps:\n");
            for s in &gen_steps {
                let _ = writeln!(out, "  - id: {}", s.id);
                let _ = writeln!(out, "    tools: [{}, {}]", caps[s.tools[0]].name, caps[s.tools[1]].name);
                let _ = writeln!(out, "    observe: {}", caps[s.tools[0]].name);
                if let Some(r) = s.risk {
                    let _ = writeln!(out, "    risk: {r}");
                }
                let _ = writeln!(out, "    body: Check the service and record what it reports.");
                out.push_str("    assert:\n      - {path: /is_error, op: equals, value: false}\n");
                out.push_str("      - any: [{path: /result/status, op: in, value: [ok, degraded]}, {path: /result/count, op: gte, value: 1}]\n");
                if let Some(to) = &s.retry_to {
                    let _ = writeln!(out, "    retry: {{to: {to}, max: 3}}\n    on_fail: failed");
                }
                if let Some(n) = s.next {
                    let _ = writeln!(out, "    next: {n}");
                }
            }
            out.push_str("terminals: [done, failed]\n");
        }
        Format::Json => {
            let _ = write!(out, "{{\"runbook_id\":\"generated-{steps}\",\"version\":\"1.0.0\",\"title\":\"Generated runbook\",\"mode\":\"required\",\"execution\":\"human-with-agent\",\"capabilities\":[");
            for (k, c) in caps.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{{\"name\":\"{}\",\"tool\":\"{}\",\"risk\":\"{}\"", c.name, c.tool, c.risk);
                if let Some(w) = c.when {
                    let _ = write!(out, ",\"when\":{{\"path\":\"/command\",\"op\":\"matches\",\"value\":\"{w}\"}}");
                }
                out.push('}');
            }
            out.push_str("],\"steps\":[");
            for (i, s) in gen_steps.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(
                    out,
                    "\n{{\"id\":\"{}\",\"tools\":[\"{}\",\"{}\"],\"observe\":\"{}\"",
                    s.id, caps[s.tools[0]].name, caps[s.tools[1]].name, caps[s.tools[0]].name
                );
                if let Some(r) = s.risk {
                    let _ = write!(out, ",\"risk\":\"{r}\"");
                }
                out.push_str(",\"body\":\"Check the service and record what it reports.\"");
                out.push_str(",\"assert\":[{\"path\":\"/is_error\",\"op\":\"equals\",\"value\":false},");
                out.push_str("{\"any\":[{\"path\":\"/result/status\",\"op\":\"in\",\"value\":[\"ok\",\"degraded\"]},{\"path\":\"/result/count\",\"op\":\"gte\",\"value\":1}]}]");
                if let Some(to) = &s.retry_to {
                    let _ = write!(out, ",\"retry\":{{\"to\":\"{to}\",\"max\":3}},\"on_fail\":\"failed\"");
                }
                if let Some(n) = s.next {
                    let _ = write!(out, ",\"next\":\"{n}\"");
                }
                out.push('}');
            }
            out.push_str("],\"terminals\":[\"done\",\"failed\"]}\n");
        }
    }
    out
}

/// Panics unless `document` lints without errors and has the expected structure level.
pub fn assert_lints_ok(document: &[u8], structure: runbook_policy::Structure) {
    let r = runbook_policy::lint(document);
    assert!(r.ok(), "fixture does not lint: {:#?}", r.findings.iter().filter(|f| f.severity == runbook_policy::Severity::Error).collect::<Vec<_>>());
    assert_eq!(r.structure, Some(structure), "fixture structure");
}

/// A directory for the benches' precompiled-code caches and temporary files under `base`, which the
/// benches pass as `env!("CARGO_TARGET_TMPDIR")` (cargo's `target/tmp`), never the system's shared one:
/// precompiled code in a cache is trusted code.
pub fn scratch_dir(base: &str, name: &str) -> PathBuf {
    let dir = PathBuf::from(base).join("runbook-benches").join(name);
    std::fs::create_dir_all(&dir).expect("create the benches' scratch directory");
    dir
}

/// Events one timed chunk may feed a session before it is replaced (untimed): far below the module's
/// limit of 1,000,000 events a run (9.25), and small enough that the records a run keeps (deviations,
/// for denied calls) stay small.
pub const EVENTS_PER_SESSION: u64 = 50_000;

/// Times `iters` iterations of `op` on sessions made by `fresh` (each already admitted), replacing the
/// session, outside the timed region, every `EVENTS_PER_SESSION / events_per_iter` iterations.
pub fn time_on_sessions<S>(iters: u64, events_per_iter: u64, mut fresh: impl FnMut() -> S, mut op: impl FnMut(&mut S)) -> Duration {
    let per_session = (EVENTS_PER_SESSION / events_per_iter.max(1)).max(1);
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(per_session);
        let mut s = fresh();
        let t = Instant::now();
        for _ in 0..n {
            op(&mut s);
        }
        total += t.elapsed();
        drop(s);
        left -= n;
    }
    total
}

/// Like [`time_on_sessions`], but times only the first half of each iteration (`timed`), running
/// `untimed` after it: one `invoke` decision measured on its own while its `result` keeps the run's
/// state from growing. Each measurement includes one `Instant::now()` pair (tens of nanoseconds).
pub fn time_first_of_pair<S>(iters: u64, mut fresh: impl FnMut() -> S, mut timed: impl FnMut(&mut S), mut untimed: impl FnMut(&mut S)) -> Duration {
    let per_session = EVENTS_PER_SESSION / 2;
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(per_session);
        let mut s = fresh();
        for _ in 0..n {
            let t = Instant::now();
            timed(&mut s);
            total += t.elapsed();
            untimed(&mut s);
        }
        drop(s);
        left -= n;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures_lint() {
        assert_lints_ok(DECISION_RUNBOOK.as_bytes(), runbook_policy::Structure::P2);
        for n in [1, 10, 100, 1000] {
            for f in [Format::Yaml, Format::Json] {
                assert_lints_ok(generate_runbook(n, f).as_bytes(), runbook_policy::Structure::P2);
            }
        }
    }

    #[test]
    fn yaml_and_json_give_the_same_envelope_model() {
        let y = runbook_policy::envelope(generate_runbook(30, Format::Yaml).as_bytes()).unwrap();
        let j = runbook_policy::envelope(generate_runbook(30, Format::Json).as_bytes()).unwrap();
        // Only the document's sha256 differs.
        let strip = |e: &str| e.split("\"sha256\":\"").map(|p| p.get(64..).unwrap_or(p).to_string()).collect::<Vec<_>>().join("");
        assert_eq!(strip(&y), strip(&j));
    }
}
