//! One decision on an admitted run of a small P2 runbook, four ways: through the component on the typed
//! WIT path (`Session::handle(&Event)`) and on the wire path (`handle_line`), and the same core natively
//! (`runbook_policy::Session::handle` / `handle_line`).
//!
//! Every iteration is a real decision on a run whose state stays bounded:
//! - `allowed-invoke+result-pair`: an allowed `invoke` then its `result` (2 decisions per iteration; at R1
//!   a result never routes, so the run stays in step `inspect`);
//! - `allowed-invoke-only`: the same pair, timing only the `invoke` (one `Instant` pair per iteration);
//! - `denied-out-of-scope-invoke`: a declared tool of another step, denied `out-of-scope-tool` (1 decision;
//!   the run records each deviation, so sessions are replaced every 50,000 events, untimed);
//! - `bash-when-regex-invoke+result-pair`: a `Bash` call allowed only because the `when` regex matches.
//!
//! Sessions are replaced (untimed) every 50,000 events, far below the module's 1,000,000-event limit.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use runbook_benches::*;
use runbook_host as host;
use runbook_policy as core;

const DOC: &[u8] = DECISION_RUNBOOK.as_bytes();

fn policy() -> host::Policy {
    host::Policy::load_with_cache(Some(&scratch_dir(env!("CARGO_TARGET_TMPDIR"), "decision-cache"))).expect("load the component")
}

fn component_session(policy: &host::Policy) -> host::Session {
    let mut s = policy.session(DOC).expect("new session");
    let d = s.handle_line(START_R1);
    assert!(d.starts_with(r#"{"decision":"allow""#), "admission: {d}");
    s
}

fn native_session() -> core::Session {
    let mut s = core::Session::new(DOC);
    let d = s.handle_line(START_R1);
    assert!(d.starts_with(r#"{"decision":"allow""#), "admission: {d}");
    s
}

fn typed_invoke(tool: &str, args: &str) -> host::Event {
    host::Event { at: 1, kind: host::EventKind::Invoke(host::Invoke { tool: tool.into(), arguments: args.into(), call_id: None, step: None, guard: false }) }
}

fn typed_result(tool: &str, result: &str) -> host::Event {
    host::Event { at: 1, kind: host::EventKind::Result(host::ToolResult { tool: tool.into(), result: result.into(), is_error: false, call_id: None }) }
}

fn parse(json: &str) -> runbook_policy::value::Node {
    core::json::parse(json).node.expect("fixture JSON")
}

/// The native typed event, built the way the component's export builds it from the WIT record: the
/// arguments (or result) JSON text is parsed on every call, so both sides do the same work.
fn native_invoke(tool: &str, args: &str) -> core::Event {
    core::Event { at: 1, kind: core::event::EventKind::Invoke { tool: tool.into(), arguments: parse(args), call_id: None, step: None, guard: false } }
}

fn native_result(tool: &str, result: &str) -> core::Event {
    core::Event { at: 1, kind: core::event::EventKind::Result { tool: tool.into(), result: parse(result), is_error: false, call_id: None } }
}

/// One fixture call: its wire lines and typed parts, and the decisions the setup checks.
struct Call {
    invoke_line: &'static str,
    tool: &'static str,
    args: &'static str,
    result: Option<(&'static str, &'static str)>,
    /// The decision line the invoke must give, minus its `seq` and `step`.
    expect_invoke: &'static str,
}

const ALLOWED: Call = Call {
    invoke_line: INVOKE_READ,
    tool: INVOKE_READ_TOOL,
    args: INVOKE_READ_ARGS,
    result: Some((RESULT_READ, RESULT_READ_JSON)),
    expect_invoke: r#"{"decision":"allow","deviation":null,"reason":null,"refusals":[]"#,
};
const BASH: Call = Call {
    invoke_line: INVOKE_BASH,
    tool: INVOKE_BASH_TOOL,
    args: INVOKE_BASH_ARGS,
    result: Some((RESULT_BASH, RESULT_BASH_JSON)),
    expect_invoke: r#"{"decision":"allow","deviation":null,"reason":null,"refusals":[]"#,
};
const DENIED: Call = Call {
    invoke_line: INVOKE_OUT_OF_SCOPE,
    tool: INVOKE_OUT_OF_SCOPE_TOOL,
    args: INVOKE_OUT_OF_SCOPE_ARGS,
    result: None,
    expect_invoke: r#"{"decision":"deny","deviation":"out-of-scope-tool","reason":null,"refusals":[]"#,
};

const ALLOW_RESULT: &str = r#"{"decision":"allow","deviation":null,"reason":null,"refusals":[]"#;

/// Checks, on every path, that the fixture gives the decisions the bench names, three times on one run
/// (so a pair really leaves the run where it was), and that every allowed call was answered.
fn check(policy: &host::Policy, call: &Call) {
    let allowed = call.result.is_some();
    let step = r#""step":"inspect"}"#;
    let ok_invoke = |d: &str| d.starts_with(call.expect_invoke) && d.ends_with(step);
    let ok_result = |d: &str| d.starts_with(ALLOW_RESULT) && d.ends_with(step);
    let orphan = |d: &str| d.contains(r#""reason":"orphan-result""#);
    let typed_line = |d: host::Decision| {
        // The typed decision, in the wire's terms (the fixtures only give allow/deny, no reason).
        let kind = match d.kind {
            host::DecisionKind::Allow => "allow",
            host::DecisionKind::Deny => "deny",
            _ => "other",
        };
        let dev = match d.deviation {
            None => "null".to_string(),
            Some(host::Deviation::OutOfScopeTool) => r#""out-of-scope-tool""#.to_string(),
            Some(x) => format!("{x:?}"),
        };
        let reason = match d.reason {
            None => "null".to_string(),
            Some(host::Reason::OrphanResult) => r#""orphan-result""#.to_string(),
            Some(x) => format!("{x:?}"),
        };
        format!(r#"{{"decision":"{kind}","deviation":{dev},"reason":{reason},"refusals":[],"seq":{},"step":{:?}}}"#, d.seq, d.step.unwrap_or_default())
    };

    let mut c = component_session(policy);
    for _ in 0..3 {
        let d = c.handle_line(call.invoke_line);
        assert!(ok_invoke(&d), "component wire invoke: {d}");
        if let Some((line, _)) = call.result {
            let d = c.handle_line(line);
            assert!(ok_result(&d), "component wire result: {d}");
        }
    }
    let mut c = component_session(policy);
    for _ in 0..3 {
        let d = typed_line(c.handle(&typed_invoke(call.tool, call.args)));
        assert!(ok_invoke(&d), "component typed invoke: {d}");
        if let Some((_, json)) = call.result {
            let d = typed_line(c.handle(&typed_result(call.tool, json)));
            assert!(ok_result(&d), "component typed result: {d}");
        }
    }
    if allowed {
        let d = typed_line(c.handle(&typed_result(call.tool, call.result.unwrap().1)));
        assert!(orphan(&d), "component typed: every call answered: {d}");
    }
    let mut n = native_session();
    for _ in 0..3 {
        let d = n.handle_line(call.invoke_line);
        assert!(ok_invoke(&d), "native wire invoke: {d}");
        if let Some((line, _)) = call.result {
            let d = n.handle_line(line);
            assert!(ok_result(&d), "native wire result: {d}");
        }
    }
    if let Some((line, _)) = call.result {
        let d = n.handle_line(line);
        assert!(orphan(&d), "native wire: every call answered: {d}");
    }
    let mut n = native_session();
    for _ in 0..3 {
        let d = n.handle(native_invoke(call.tool, call.args)).to_line();
        assert!(ok_invoke(&d), "native typed invoke: {d}");
        if let Some((_, json)) = call.result {
            let d = n.handle(native_result(call.tool, json)).to_line();
            assert!(ok_result(&d), "native typed result: {d}");
        }
    }
}

/// How much of a pair an iteration times.
#[derive(Clone, Copy)]
enum Shape {
    Pair,
    InvokeOnly,
    Single,
}

fn scenario(c: &mut Criterion, policy: &host::Policy, name: &str, call: &'static Call, shape: Shape) {
    check(policy, call);
    let mut g = c.benchmark_group(format!("decision/{name}"));
    let decisions = match shape {
        Shape::Pair => 2,
        _ => 1,
    };
    g.throughput(Throughput::Elements(decisions));

    // Component, typed WIT path.
    let inv = typed_invoke(call.tool, call.args);
    let res = call.result.map(|(_, json)| typed_result(call.tool, json));
    g.bench_function("component-typed", |b| {
        b.iter_custom(|iters| match shape {
            Shape::Pair => time_on_sessions(
                iters,
                2,
                || component_session(policy),
                |s| {
                    black_box(s.handle(black_box(&inv)));
                    black_box(s.handle(black_box(res.as_ref().unwrap())));
                },
            ),
            Shape::InvokeOnly => time_first_of_pair(
                iters,
                || component_session(policy),
                |s| {
                    black_box(s.handle(black_box(&inv)));
                },
                |s| {
                    black_box(s.handle(res.as_ref().unwrap()));
                },
            ),
            Shape::Single => time_on_sessions(
                iters,
                1,
                || component_session(policy),
                |s| {
                    black_box(s.handle(black_box(&inv)));
                },
            ),
        })
    });

    // Component, the recording path a host uses (1.1.0 `feed`): the decision, the canonical event line,
    // the chain link, the sentence and the state in one call.
    let prev = "0".repeat(64);
    g.bench_function("component-feed", |b| {
        b.iter_custom(|iters| match shape {
            Shape::Pair => time_on_sessions(
                iters,
                2,
                || component_session(policy),
                |s| {
                    black_box(s.feed(black_box(&inv), &prev).ok());
                    black_box(s.feed(black_box(res.as_ref().unwrap()), &prev).ok());
                },
            ),
            Shape::InvokeOnly => time_first_of_pair(
                iters,
                || component_session(policy),
                |s| {
                    black_box(s.feed(black_box(&inv), &prev).ok());
                },
                |s| {
                    black_box(s.feed(res.as_ref().unwrap(), &prev).ok());
                },
            ),
            Shape::Single => time_on_sessions(
                iters,
                1,
                || component_session(policy),
                |s| {
                    black_box(s.feed(black_box(&inv), &prev).ok());
                },
            ),
        })
    });

    // Component, wire path.
    let res_line = call.result.map(|(line, _)| line).unwrap_or("");
    g.bench_function("component-wire", |b| {
        b.iter_custom(|iters| match shape {
            Shape::Pair => time_on_sessions(
                iters,
                2,
                || component_session(policy),
                |s| {
                    black_box(s.handle_line(black_box(call.invoke_line)));
                    black_box(s.handle_line(black_box(res_line)));
                },
            ),
            Shape::InvokeOnly => time_first_of_pair(
                iters,
                || component_session(policy),
                |s| {
                    black_box(s.handle_line(black_box(call.invoke_line)));
                },
                |s| {
                    black_box(s.handle_line(res_line));
                },
            ),
            Shape::Single => time_on_sessions(
                iters,
                1,
                || component_session(policy),
                |s| {
                    black_box(s.handle_line(black_box(call.invoke_line)));
                },
            ),
        })
    });

    // Native, typed (the event built from the same JSON text the WIT record carries).
    let res_json = call.result.map(|(_, json)| json).unwrap_or("null");
    g.bench_function("native-typed", |b| {
        b.iter_custom(|iters| match shape {
            Shape::Pair => time_on_sessions(iters, 2, native_session, |s| {
                black_box(s.handle(native_invoke(black_box(call.tool), black_box(call.args))));
                black_box(s.handle(native_result(black_box(call.tool), black_box(res_json))));
            }),
            Shape::InvokeOnly => time_first_of_pair(
                iters,
                native_session,
                |s| {
                    black_box(s.handle(native_invoke(black_box(call.tool), black_box(call.args))));
                },
                |s| {
                    black_box(s.handle(native_result(call.tool, res_json)));
                },
            ),
            Shape::Single => time_on_sessions(iters, 1, native_session, |s| {
                black_box(s.handle(native_invoke(black_box(call.tool), black_box(call.args))));
            }),
        })
    });

    // Native, the recording path (`feed`): what the component's `feed` costs as guest code, without the
    // boundary, so the two split the guest's own work from the canonical ABI's.
    g.bench_function("native-feed", |b| {
        b.iter_custom(|iters| match shape {
            Shape::Pair => time_on_sessions(iters, 2, native_session, |s| {
                black_box(s.feed(Ok(native_invoke(black_box(call.tool), black_box(call.args))), &prev));
                black_box(s.feed(Ok(native_result(black_box(call.tool), black_box(res_json))), &prev));
            }),
            Shape::InvokeOnly => time_first_of_pair(
                iters,
                native_session,
                |s| {
                    black_box(s.feed(Ok(native_invoke(black_box(call.tool), black_box(call.args))), &prev));
                },
                |s| {
                    black_box(s.feed(Ok(native_result(call.tool, res_json)), &prev));
                },
            ),
            Shape::Single => time_on_sessions(iters, 1, native_session, |s| {
                black_box(s.feed(Ok(native_invoke(black_box(call.tool), black_box(call.args))), &prev));
            }),
        })
    });

    // Native, wire.
    g.bench_function("native-wire", |b| {
        b.iter_custom(|iters| match shape {
            Shape::Pair => time_on_sessions(iters, 2, native_session, |s| {
                black_box(s.handle_line(black_box(call.invoke_line)));
                black_box(s.handle_line(black_box(res_line)));
            }),
            Shape::InvokeOnly => time_first_of_pair(
                iters,
                native_session,
                |s| {
                    black_box(s.handle_line(black_box(call.invoke_line)));
                },
                |s| {
                    black_box(s.handle_line(res_line));
                },
            ),
            Shape::Single => time_on_sessions(iters, 1, native_session, |s| {
                black_box(s.handle_line(black_box(call.invoke_line)));
            }),
        })
    });
    g.finish();
}

fn decision(c: &mut Criterion) {
    assert_lints_ok(DOC, core::Structure::P2);
    let policy = policy();
    scenario(c, &policy, "allowed-invoke+result-pair", &ALLOWED, Shape::Pair);
    scenario(c, &policy, "allowed-invoke-only", &ALLOWED, Shape::InvokeOnly);
    scenario(c, &policy, "denied-out-of-scope-invoke", &DENIED, Shape::Single);
    scenario(c, &policy, "bash-when-regex-invoke+result-pair", &BASH, Shape::Pair);
    scenario(c, &policy, "bash-when-regex-invoke-only", &BASH, Shape::InvokeOnly);
}

criterion_group!(benches, decision);
criterion_main!(benches);
