//! One decision in process, from each host that embeds the component, side by side in one run (issue 18):
//! the Rust host (`runbook_host::Session::handle`, wasmtime), the Python package (`runbook_policy`,
//! wasmtime-py) and the JavaScript package (`runbook-policy`, jco on Node's V8), and the native core as
//! the floor. Every host times the same thing the same way: an allowed `invoke` on the typed path of an
//! admitted R1 run of `DECISION_RUNBOOK`, one clock pair around each decision, its `result` fed untimed
//! after it (so the run stays in step `inspect`), sessions replaced untimed every 25,000 pairs.
//!
//! Python and Node run as resident children (benches/embedders/decision.py, decision.mjs): the bench sends
//! the fixture once, then asks for N decisions on a path and reads back the nanoseconds they took (criterion's
//! `iter_custom`), so process start-up and the pipe are outside every measurement. The children need
//! the packages installed: packages/python/.venv (packages/python/test builds it) and
//! packages/js/node_modules + dist (`npm ci` there). A host whose package is missing is skipped, with a
//! line saying how to install it.
//!
//! `cargo bench -p runbook-benches --bench embedders`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use runbook_benches::*;
use runbook_host as host;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

const DOC: &[u8] = DECISION_RUNBOOK.as_bytes();

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A resident child that answers "typed N\n" or "line N\n" with the nanoseconds N timed decisions took.
struct Embedder {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Embedder {
    fn start(program: &Path, script: &Path) -> Result<Embedder, String> {
        let mut child = Command::new(program)
            .arg(script)
            .current_dir(repo())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{}: {e}", program.display()))?;
        let mut to = child.stdin.take().unwrap();
        let from = BufReader::new(child.stdout.take().unwrap());
        let fixture = serde_json::json!({
            "document": DECISION_RUNBOOK,
            "start": START_R1,
            "tool": INVOKE_READ_TOOL,
            "arguments": serde_json::from_str::<serde_json::Value>(INVOKE_READ_ARGS).unwrap(),
            "result": serde_json::from_str::<serde_json::Value>(RESULT_READ_JSON).unwrap(),
            "invoke_line": INVOKE_READ,
            "result_line": RESULT_READ,
            "pairs_per_session": EVENTS_PER_SESSION / 2,
        });
        writeln!(to, "{fixture}").map_err(|e| e.to_string())?;
        let mut e = Embedder { child, to, from };
        // The child checks its own decisions (allow, then allow of the result, in step `inspect`) on a
        // first batch and says `ready`, or why not.
        let mut line = String::new();
        e.from.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim() != "ready" {
            return Err(format!("{} said {line:?}", script.display()));
        }
        Ok(e)
    }

    fn time(&mut self, path: &str, n: u64) -> Duration {
        writeln!(self.to, "{path} {n}").expect("write to the embedder");
        let mut line = String::new();
        self.from.read_line(&mut line).expect("read from the embedder");
        Duration::from_nanos(line.trim().parse().unwrap_or_else(|_| panic!("the embedder answered {line:?}")))
    }
}

impl Drop for Embedder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python() -> Option<PathBuf> {
    let p = repo().join("packages/python/.venv/bin/python");
    p.exists().then_some(p)
}

fn node() -> Option<PathBuf> {
    // The package's dist/ is built by `npm ci` in packages/js; Node 22+ from tools/install.sh when the
    // machine's is older (the bench prefers it, as the tests do).
    if !repo().join("packages/js/dist").is_dir() {
        return None;
    }
    let local = repo().join("tools/.node/bin/node");
    Some(if local.exists() { local } else { PathBuf::from("node") })
}

fn bench(c: &mut Criterion) {
    let policy = host::Policy::load_with_cache(Some(&scratch_dir(env!("CARGO_TARGET_TMPDIR"), "embedders-cache"))).expect("load the component");
    let invoke = host::Event {
        at: 1,
        kind: host::EventKind::Invoke(host::Invoke {
            tool: INVOKE_READ_TOOL.into(),
            arguments: INVOKE_READ_ARGS.into(),
            call_id: None,
            step: None,
            guard: false,
        }),
    };
    let result = host::Event {
        at: 1,
        kind: host::EventKind::Result(host::ToolResult { tool: INVOKE_READ_TOOL.into(), result: RESULT_READ_JSON.into(), is_error: false, call_id: None }),
    };
    let fresh = || {
        let mut s = policy.session(DOC).expect("session");
        assert!(s.handle_line(START_R1).starts_with(r#"{"decision":"allow""#));
        s
    };
    {
        let mut s = fresh();
        let d = s.handle(&invoke);
        assert_eq!((d.kind, d.step.as_deref()), (host::DecisionKind::Allow, Some("inspect")));
    }
    let mut typed = c.benchmark_group("embedders/allowed-invoke-typed");
    typed.measurement_time(Duration::from_secs(5));
    typed.bench_function("rust-host", |b| {
        b.iter_custom(|iters| time_first_of_pair(iters, fresh, |s| drop(black_box(s.handle(&invoke))), |s| drop(s.handle(&result))))
    });

    let native_fresh = || {
        let mut s = runbook_policy::Session::new(DOC);
        assert!(s.handle_line(START_R1).starts_with(r#"{"decision":"allow""#));
        s
    };
    let parse = |t: &str| runbook_policy::json::parse(t).node.expect("fixture JSON");
    typed.bench_function("native-core", |b| {
        b.iter_custom(|iters| {
            time_first_of_pair(
                iters,
                native_fresh,
                |s| {
                    let e = runbook_policy::Event {
                        at: 1,
                        kind: runbook_policy::event::EventKind::Invoke {
                            tool: INVOKE_READ_TOOL.into(),
                            arguments: parse(INVOKE_READ_ARGS),
                            call_id: None,
                            step: None,
                            guard: false,
                        },
                    };
                    drop(black_box(s.handle(e)))
                },
                |s| {
                    let e = runbook_policy::Event {
                        at: 1,
                        kind: runbook_policy::event::EventKind::Result {
                            tool: INVOKE_READ_TOOL.into(),
                            result: parse(RESULT_READ_JSON),
                            is_error: false,
                            call_id: None,
                        },
                    };
                    drop(s.handle(e))
                },
            )
        })
    });

    let children: [(&str, Option<PathBuf>, &str, &str); 2] = [
        ("python-package", python(), "benches/embedders/decision.py", "bash packages/python/test (builds packages/python/.venv)"),
        ("js-package", node(), "benches/embedders/decision.mjs", "npm ci in packages/js"),
    ];
    let mut started = Vec::new();
    for (name, program, script, install) in children {
        let Some(program) = program else {
            eprintln!("embedders/{name}: skipped, the package is not installed ({install})");
            continue;
        };
        let e = Embedder::start(&program, &repo().join(script)).unwrap_or_else(|e| panic!("embedders/{name}: {e}"));
        started.push((name, e));
    }
    for (name, e) in started.iter_mut() {
        typed.bench_function(*name, |b| b.iter_custom(|iters| e.time("typed", iters)));
    }
    typed.finish();

    let mut line = c.benchmark_group("embedders/allowed-invoke-line");
    line.measurement_time(Duration::from_secs(5));
    line.bench_function("rust-host", |b| {
        b.iter_custom(|iters| time_first_of_pair(iters, fresh, |s| drop(black_box(s.handle_line(INVOKE_READ))), |s| drop(s.handle_line(RESULT_READ))))
    });
    line.bench_function("native-core", |b| {
        b.iter_custom(|iters| time_first_of_pair(iters, native_fresh, |s| drop(black_box(s.handle_line(INVOKE_READ))), |s| drop(s.handle_line(RESULT_READ))))
    });
    for (name, e) in started.iter_mut() {
        line.bench_function(*name, |b| b.iter_custom(|iters| e.time("line", iters)));
    }
    line.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
