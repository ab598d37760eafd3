//! Session snapshots (`runbook-session-snapshot/v1`): a session restored from the snapshot taken after any
//! event goes on exactly as the uninterrupted one; the snapshot is canonical and round-trips byte for byte;
//! and restore fails closed, naming the field, on every kind of bad input (and never panics on mutations).

use runbook_policy::testgen::{self, Rng};
use runbook_policy::value::{Member, Node, Num, Value};
use runbook_policy::{jcs, json, Session};
use std::path::Path;

/// Generated documents and streams checked at every split point.
const GENERATED: u64 = 400;

/// A run without interruption: the decision to each event, and the snapshot, report and status after
/// each prefix (index k: after k events).
struct Whole {
    decisions: Vec<String>,
    snapshots: Vec<String>,
    reports: Vec<String>,
    statuses: Vec<String>,
}

fn whole(doc: &[u8], events: &[String]) -> Whole {
    let mut s = Session::new(doc);
    let mut w = Whole { decisions: Vec::new(), snapshots: vec![s.snapshot()], reports: vec![s.report()], statuses: vec![s.status()] };
    for e in events {
        w.decisions.push(s.handle_line(e));
        w.snapshots.push(s.snapshot());
        w.reports.push(s.report());
        w.statuses.push(s.status());
    }
    w
}

/// Split points: all of them for short streams, a spread for long ones.
fn splits(len: usize) -> Vec<usize> {
    if len <= 64 {
        return (0..=len).collect();
    }
    let mut v: Vec<usize> = (0..=8).chain((0..=32).map(|i| i * len / 32)).chain(len - 4..=len).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Restores at every split point and checks the rest of the run; returns the number of restores.
fn check_splits(name: &str, doc: &[u8], events: &[String]) -> usize {
    let w = whole(doc, events);
    let points = splits(events.len());
    for &k in &points {
        let snap = &w.snapshots[k];
        assert_eq!(runbook_policy::canonicalize(snap).as_ref(), Ok(snap), "{name}: the snapshot after {k} events is not canonical");
        let mut r = Session::restore(doc, snap).unwrap_or_else(|e| panic!("{name}: restore after {k} events: {e}\n{snap}"));
        assert_eq!(&r.snapshot(), snap, "{name}: the snapshot after {k} events does not round-trip");
        assert_eq!(r.report(), w.reports[k], "{name}: the restored report after {k} events differs");
        assert_eq!(r.status(), w.statuses[k], "{name}: the restored status after {k} events differs");
        for (i, e) in events.iter().enumerate().skip(k) {
            assert_eq!(r.handle_line(e), w.decisions[i], "{name}: restored after {k} events, the decision to event {i} differs: {e}");
        }
        assert_eq!(r.report(), w.reports[events.len()], "{name}: restored after {k} events, the final report differs");
        assert_eq!(&r.snapshot(), w.snapshots.last().unwrap(), "{name}: restored after {k} events, the final snapshot differs");
    }
    points.len()
}

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// (name, document bytes, event lines) of every example stream, plus the bare document.
fn examples() -> Vec<(String, Vec<u8>, Vec<String>)> {
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(root().join("examples")).unwrap().map(|d| d.unwrap().path()).filter(|d| d.is_dir()).collect();
    dirs.sort();
    for dir in dirs {
        let Some(doc) = ["runbook.yaml", "runbook.json"].iter().map(|f| dir.join(f)).find(|f| f.is_file()) else { continue };
        let bytes = std::fs::read(&doc).unwrap();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name.clone(), bytes.clone(), Vec::new()));
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|f| f.unwrap().path()).filter(|f| f.extension().is_some_and(|e| e == "ndjson")).collect();
        files.sort();
        for f in files {
            let lines = std::fs::read_to_string(&f).unwrap().lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect();
            out.push((format!("{name}/{}", f.file_name().unwrap().to_string_lossy()), bytes.clone(), lines));
        }
    }
    assert!(out.len() >= 10, "expected the bundled examples");
    out
}

fn generated(seed: u64) -> (String, Vec<String>) {
    let mut rng = Rng::new(seed);
    let (doc, shape) = testgen::document(&mut rng, 15);
    let events = testgen::events(&mut rng, &shape);
    (doc, events)
}

#[test]
fn examples_continue_identically_from_every_split() {
    let mut restores = 0;
    for (name, doc, events) in examples() {
        restores += check_splits(&name, &doc, &events);
    }
    assert!(restores > 80, "only {restores} restores");
}

#[test]
fn generated_runs_continue_identically_from_every_split() {
    let mut restores = 0;
    let mut phases = std::collections::BTreeSet::new();
    for seed in 0..GENERATED {
        let (doc, events) = generated(seed);
        restores += check_splits(&format!("seed {seed}"), doc.as_bytes(), &events);
        let mut s = Session::new(doc.as_bytes());
        for e in &events {
            s.handle_line(e);
            let snap = parse(&s.snapshot());
            phases.insert(snap.get("phase").unwrap().as_str().unwrap().to_string());
            if !matches!(&snap.get("pending").unwrap().value, Value::Arr(v) if v.is_empty()) {
                phases.insert("with pending calls".into());
            }
        }
    }
    for p in ["running", "over", "with pending calls"] {
        assert!(phases.contains(p), "no generated snapshot is {p}");
    }
    assert!(restores > 5_000, "only {restores} restores");
}

#[test]
fn long_runs_continue_identically_from_sampled_splits() {
    let doc = std::fs::read(root().join("examples/rotate-credentials/runbook.yaml")).unwrap();
    let events = long_run(600);
    assert!(check_splits("long run", &doc, &events) > 40);
}

/// A rotate-credentials run of `n` events that stays running and records something nearly every event.
fn long_run(n: usize) -> Vec<String> {
    let mut lines = vec![r#"{"type":"start","at":0,"run_id":"r-long","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"claude-code"}"#.to_string()];
    for i in 1..n {
        let at = i * 10;
        lines.push(match i % 5 {
            0 => format!(r#"{{"type":"invoke","at":{at},"tool":"Bash","arguments":{{"command":"ls -la build/{i}"}},"call_id":"toolu_{i}"}}"#),
            1 => format!(r#"{{"type":"invoke","at":{at},"tool":"mcp__slack__post_message","arguments":{{"text":"hello {i}"}},"call_id":"toolu_{i}"}}"#),
            2 => format!(r#"{{"type":"approval","at":{at},"step":"rotate","approver":"claude-code","granted":true}}"#),
            3 => format!(r#"{{"type":"tick","at":{at}}}"#),
            _ => format!(r#"{{"type":"invoke","at":{at},"tool":"mcp__vault__read_metadata","arguments":{{"path":"database/creds/payments-app","n":{i}}},"call_id":"toolu_{i}"}}"#),
        });
    }
    lines
}

/// Numbers a double cannot hold, in the arguments an assert judges and in `at`, survive a snapshot.
#[test]
fn restore_is_exact_for_numbers_a_double_cannot_hold() {
    let doc = br#"{"runbook_id":"exact","version":"1.0.0","capabilities":[{"name":"calc","tool":"calc","risk":"read-only"}],
        "steps":[{"id":"s0","tools":["calc"],"assert":[{"path":"/arguments/n","op":"equals","value":1}],"next":"done"}],"terminals":["done"]}"#;
    assert!(runbook_policy::lint(doc).ok());
    let start = r#"{"type":"start","at":9007199254740993,"run_id":"r","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"a"}"#;
    for (n, at_next) in
        [("1.00000000000000000001", "9007199254740993"), ("1", "9007199254740993"), ("1", "9007199254740992"), ("9007199254740993", "18446744073709551615")]
    {
        let events = vec![
            start.to_string(),
            format!(r#"{{"type":"invoke","at":{at_next},"tool":"calc","arguments":{{"n":{n}}},"call_id":"c1"}}"#),
            format!(r#"{{"type":"result","at":{at_next},"tool":"calc","result":{{}},"is_error":false,"call_id":"c1"}}"#),
            r#"{"type":"end","at":18446744073709551615}"#.to_string(),
        ];
        check_splits(&format!("n={n}, at={at_next}"), doc, &events);
    }
    // A call whose arguments hold a number that is not exact is denied before it runs (9.28), so no
    // snapshot ever carries it; an exact one past 2^53 is carried exactly.
    let mut s = Session::new(doc);
    s.handle_line(start);
    let d = s.handle_line(r#"{"type":"invoke","at":9007199254740993,"tool":"calc","arguments":{"n":1.00000000000000000001},"call_id":"c1"}"#);
    assert!(d.contains(r#""decision":"deny","deviation":null,"reason":"inexact-number""#), "{d}");
    let snap = s.snapshot();
    assert!(snap.contains(r#""start_at":"9007199254740993""#), "{snap}");
    assert!(snap.contains(r#""pending":[]"#), "{snap}");
    let d = s.handle_line(r#"{"type":"invoke","at":9007199254740993,"tool":"calc","arguments":{"n":1e400},"call_id":"c2"}"#);
    assert!(d.contains("\"inexact-number\"") || d.contains("malformed-event"), "{d}");
}

// ---------------------------------------------------------------------------------------------------
// Bad input.

fn parse(text: &str) -> Node {
    json::parse(text).node.expect("valid JSON")
}

fn num(text: &str) -> Node {
    Node::new(Value::Num(Num::parse(text).unwrap()))
}

fn string(text: &str) -> Node {
    Node::new(Value::Str(text.to_string()))
}

fn at_mut<'a>(node: &'a mut Node, ptr: &[String]) -> &'a mut Node {
    let mut cur = node;
    for t in ptr {
        cur = match &mut cur.value {
            Value::Obj(m) => &mut m.iter_mut().find(|m| &m.key == t).unwrap().value,
            Value::Arr(items) => &mut items[t.parse::<usize>().unwrap()],
            _ => panic!("no {t}"),
        };
    }
    cur
}

fn pointer(ptr: &[String]) -> String {
    ptr.iter().map(|t| format!("/{t}")).collect()
}

/// Every node of a tree with its path, parents first.
fn nodes(node: &Node) -> Vec<(Vec<String>, Node)> {
    let mut out = Vec::new();
    let mut stack = vec![(Vec::new(), node)];
    while let Some((path, n)) = stack.pop() {
        out.push((path.clone(), n.clone()));
        match &n.value {
            Value::Obj(m) => {
                for x in m.iter().rev() {
                    let mut p = path.clone();
                    p.push(x.key.clone());
                    stack.push((p, &x.value));
                }
            }
            Value::Arr(items) => {
                for (i, x) in items.iter().enumerate().rev() {
                    let mut p = path.clone();
                    p.push(i.to_string());
                    stack.push((p, x));
                }
            }
            _ => {}
        }
    }
    out
}

fn edited(snap: &str, ptr: &[String], f: impl FnOnce(&mut Node)) -> String {
    let mut n = parse(snap);
    f(at_mut(&mut n, ptr));
    jcs::to_string(&n)
}

fn refused(doc: &[u8], snap: &str, must_name: &str, what: &str) -> String {
    match Session::restore(doc, snap) {
        Ok(_) => panic!("{what}: restore accepted\n{snap}"),
        Err(e) => {
            assert!(e.contains(must_name), "{what}: the error does not name `{must_name}`: {e}");
            e
        }
    }
}

fn tokens(p: &str) -> Vec<String> {
    p.split('/').skip(1).map(str::to_string).collect()
}

/// A kind of snapshot wanted, and how to recognise one.
type Want = (&'static str, Box<dyn Fn(&Node) -> bool>);

/// Snapshots that between them have every field filled: a claim with `available`, pending calls with and
/// without a scope, call approvals, judgements, used budgets, checkpoints of each status, deviations and
/// approvals; each with its document.
fn rich_snapshots() -> Vec<(Vec<u8>, String)> {
    let mut out: Vec<(Vec<u8>, String)> = Vec::new();
    let mut want: Vec<Want> = vec![
        ("scoped pending", Box::new(|n: &Node| n.get("pending").and_then(|p| p.pointer(&tokens("/0/scope/visit"))).is_some())),
        ("call approval", Box::new(|n: &Node| n.pointer(&tokens("/call_approvals/0")).is_some())),
        ("judgement", Box::new(|n: &Node| n.pointer(&tokens("/steps/0/judgement")).is_some_and(|j| j.as_str().is_some()))),
        ("used budget", Box::new(|n: &Node| nodes(n).iter().any(|(p, v)| p.last().is_some_and(|k| k == "budget_used") && jcs::to_string(v) != "0"))),
        ("satisfied checkpoint and steps", Box::new(|n: &Node| jcs::to_string(n).contains("\"satisfied\"") && n.pointer(&tokens("/steps/0")).is_some())),
        ("timed-out checkpoint", Box::new(|n: &Node| jcs::to_string(n).contains("\"timed-out\""))),
        ("deviation with a step", Box::new(|n: &Node| n.pointer(&tokens("/deviations/0/step")).is_some_and(|s| s.as_str().is_some()))),
        ("approval with a hash", Box::new(|n: &Node| n.pointer(&tokens("/approvals/0/call_sha256")).is_some_and(|s| s.as_str().is_some()))),
        ("terminal", Box::new(|n: &Node| n.pointer(&tokens("/position/terminal")).is_some())),
        (
            "unscoped pending",
            Box::new(|n: &Node| {
                n.pointer(&tokens("/pending/0/capability")).is_some_and(|c| c.as_str().is_some())
                    && n.pointer(&tokens("/pending/0/scope")).is_some_and(|s| matches!(s.value, Value::Null))
            }),
        ),
        ("blind coverage", Box::new(|n: &Node| matches!(n.pointer(&tokens("/claim/coverage")).map(|c| &c.value), Some(Value::Arr(_))))),
    ];
    // The rotate example mid-run, with an `available` list added to its claim.
    let doc = std::fs::read(root().join("examples/rotate-credentials/runbook.yaml")).unwrap();
    let mut s = Session::new(&doc);
    let lines: Vec<String> =
        std::fs::read_to_string(root().join("examples/rotate-credentials/events-deviations.ndjson")).unwrap().lines().map(str::to_string).collect();
    s.handle_line(&lines[0].replace("\"agent\":", "\"available\":[\"Bash\"],\"agent\":"));
    for l in &lines[1..lines.len() / 2] {
        s.handle_line(l);
    }
    out.push((doc, s.snapshot()));
    for seed in 0..2_000 {
        if want.is_empty() {
            break;
        }
        let (doc, events) = generated(seed);
        let mut s = Session::new(doc.as_bytes());
        for e in &events {
            s.handle_line(e);
            let snap = s.snapshot();
            let n = parse(&snap);
            let before = want.len();
            want.retain(|(_, f)| !f(&n));
            if want.len() < before {
                out.push((doc.clone().into_bytes(), snap));
            }
        }
    }
    assert!(want.is_empty(), "no generated snapshot has: {:?}", want.iter().map(|(w, _)| *w).collect::<Vec<_>>());
    out
}

#[test]
fn not_json_another_schema_and_another_document_are_refused() {
    let doc = std::fs::read(root().join("examples/rotate-credentials/runbook.yaml")).unwrap();
    let other = std::fs::read(root().join("examples/incident-rollback/runbook.yaml")).unwrap();
    let snap = Session::new(&doc).snapshot();
    for bad in ["", "{", "not json", "[1,]", "\"\\ud800\""] {
        refused(&doc, bad, "not JSON", bad);
    }
    refused(&doc, "[]", "snapshot: must be an object", "a list");
    refused(&doc, &snap.replacen("{", "{\"schema\":\"x\",", 1), "duplicate key `schema`", "a duplicate key");
    refused(&doc, &snap.replace("runbook-session-snapshot/v1", "runbook-session-snapshot/v2"), "/schema", "another schema");
    let e = refused(&other, &snap, "/document_sha256", "another document");
    assert!(e.contains("not of this one"), "{e}");
    // Any change to the bytes is another document, even one that analyzes the same.
    let mut spaced = doc.clone();
    spaced.push(b'\n');
    refused(&spaced, &snap, "/document_sha256", "the document with a newline added");
    // A snapshot of a running session of one example against every other example.
    let examples = examples();
    for (name, doc, events) in &examples {
        if events.len() < 3 {
            continue;
        }
        let mut s = Session::new(doc);
        for e in &events[..3] {
            s.handle_line(e);
        }
        let snap = s.snapshot();
        for (other_name, other, _) in &examples {
            if other != doc {
                refused(other, &snap, "/document_sha256", &format!("{name} against {other_name}"));
            }
        }
    }
}

/// Every key of every object, removed, names the key; an added key names itself; every value replaced by
/// one of another type names the value.
#[test]
fn missing_unknown_and_mistyped_fields_are_refused_by_name() {
    let mut checked = 0;
    for (doc, snap) in rich_snapshots() {
        Session::restore(&doc, &snap).unwrap();
        let root = parse(&snap);
        for (path, node) in nodes(&root) {
            let here = pointer(&path);
            if let Value::Obj(members) = &node.value {
                for m in members {
                    let gone = edited(&snap, &path, |n| {
                        if let Value::Obj(ms) = &mut n.value {
                            ms.retain(|x| x.key != m.key);
                        }
                    });
                    let name = if here == "/position" { here.clone() } else { format!("{here}/{}", m.key) };
                    refused(&doc, &gone, &name, &format!("without {here}/{}", m.key));
                    checked += 1;
                }
                let extra = edited(&snap, &path, |n| {
                    if let Value::Obj(ms) = &mut n.value {
                        ms.push(Member { key: "comment".into(), key_pos: Default::default(), value: string("free text") });
                    }
                });
                refused(&doc, &extra, &format!("{here}/comment"), &format!("{here} with an unknown key"));
                checked += 1;
            }
            if path.is_empty() {
                continue;
            }
            let other = match &node.value {
                Value::Str(_) => num("7"),
                Value::Num(_) => string("7"),
                Value::Bool(_) => num("1"),
                Value::Null => num("5"),
                Value::Arr(_) => string("x"),
                Value::Obj(_) => num("3"),
            };
            let wrong = edited(&snap, &path, |n| *n = other);
            refused(&doc, &wrong, &here, &format!("{here} of another type"));
            checked += 1;
        }
    }
    assert!(checked > 300, "only {checked} bad snapshots checked");
}

#[test]
fn lists_that_do_not_match_the_document_are_refused() {
    let mut checked = 0;
    for (doc, snap) in rich_snapshots() {
        let root = parse(&snap);
        for list in ["steps", "checkpoints"] {
            let Some(Value::Arr(items)) = root.get(list).map(|n| &n.value) else { unreachable!() };
            if items.is_empty() {
                continue;
            }
            let shorter = edited(&snap, &[list.to_string()], |n| {
                if let Value::Arr(v) = &mut n.value {
                    v.pop();
                }
            });
            refused(&doc, &shorter, &format!("/{list}"), &format!("{list} without its last entry"));
            let longer = edited(&snap, &[list.to_string()], |n| {
                if let Value::Arr(v) = &mut n.value {
                    v.push(v[0].clone());
                }
            });
            refused(&doc, &longer, &format!("/{list}"), &format!("{list} with an entry more"));
            if items.len() > 1 {
                let swapped = edited(&snap, &[list.to_string()], |n| {
                    if let Value::Arr(v) = &mut n.value {
                        v.swap(0, 1);
                    }
                });
                refused(&doc, &swapped, &format!("/{list}/0/id"), &format!("{list} out of document order"));
            }
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} lists checked");
}

#[test]
fn names_the_document_does_not_have_are_refused() {
    let mut checked = 0;
    for (doc, snap) in rich_snapshots() {
        let root = parse(&snap);
        let a = runbook_policy::doc::analyze(&doc);
        let set = |p: &str, v: Node| edited(&snap, &tokens(p), |n| *n = v);
        let obj1 = |k: &str, v: &str| jcs::obj(vec![(k, string(v))]);
        refused(&doc, &set("/position", obj1("step", "no-such-step")), "/position/step", "an unknown step");
        refused(&doc, &set("/position", obj1("terminal", "no-such-terminal")), "/position/terminal", "an unknown terminal");
        refused(&doc, &set("/position", jcs::obj(vec![])), "/position", "a position naming nothing");
        refused(&doc, &set("/position", jcs::obj(vec![("step", string("x")), ("terminal", string("y"))])), "/position", "a position naming two");
        if let Some(st) = a.doc.steps.first() {
            refused(&doc, &set("/position", obj1("terminal", &st.id)), "/position/terminal", "a step named as a terminal");
            refused(&doc, &set("/steps/0/id", string("renamed")), "/steps/0/id", "a step renamed");
        }
        if let Some(t) = a.doc.terminals.first() {
            refused(&doc, &set("/position", obj1("step", t)), "/position/step", "a terminal named as a step");
        }
        if root.pointer(&tokens("/pending/0/scope/step")).is_some() {
            refused(&doc, &set("/pending/0/scope/step", string("nope")), "/pending/0/scope/step", "a scope of an unknown step");
            refused(&doc, &set("/pending/0/capability", jcs::null()), "/pending/0/capability", "a scoped call of no capability");
        }
        if root.pointer(&tokens("/pending/0/capability")).is_some_and(|c| c.as_str().is_some()) {
            refused(&doc, &set("/pending/0/capability", string("nope")), "/pending/0/capability", "an unknown capability");
            refused(&doc, &set("/pending/0/tool", string("another-tool")), "/pending/0/capability", "a capability of another tool");
            refused(&doc, &set("/pending/0/arguments", string("{not json")), "/pending/0/arguments", "arguments that are not JSON");
            refused(&doc, &set("/pending/0/arguments", string(r#"{"a":1,"a":2}"#)), "/pending/0/arguments", "arguments with a duplicate key");
        }
        if root.pointer(&tokens("/deviations/0/step")).is_some_and(|s| s.as_str().is_some()) {
            refused(&doc, &set("/deviations/0/step", string("nope")), "/deviations/0/step", "a deviation in an unknown step");
            refused(&doc, &set("/deviations/0/class", string("bad-vibes")), "/deviations/0/class", "an unknown deviation class");
        }
        if root.pointer(&tokens("/checkpoints/0")).is_some() {
            refused(&doc, &set("/checkpoints/0/id", string("renamed")), "/checkpoints/0/id", "a checkpoint renamed");
            refused(&doc, &set("/checkpoints/0/status", string("done")), "/checkpoints/0/status", "an unknown checkpoint status");
        }
        if root.pointer(&tokens("/claim/profile")).is_some() {
            refused(&doc, &set("/claim/profile", string("R3")), "/claim/profile", "an unknown profile");
            refused(&doc, &set("/claim/risk_ceiling", string("spicy")), "/claim/risk_ceiling", "an unknown risk");
            refused(&doc, &set("/claim/coverage", string("partial")), "/claim/coverage", "an unknown coverage");
            refused(&doc, &set("/claim/coverage", jcs::strs(["shell", "browser"])), "/claim/coverage", "an unsorted coverage");
            refused(&doc, &set("/claim/coverage", jcs::strs([])), "/claim/coverage", "an empty coverage list");
        }
        refused(&doc, &set("/phase", string("paused")), "/phase", "an unknown phase");
        refused(&doc, &set("/refusals", jcs::strs(["not-a-refusal"])), "/refusals/0", "an unknown refusal");
        refused(&doc, &set("/refusals", jcs::strs(["profile-too-low", "invalid-document"])), "/refusals", "unsorted refusals");
        refused(&doc, &set("/call_approvals", jcs::strs(["ABC"])), "/call_approvals/0", "a call approval that is no hash");
        checked += 1;
    }
    assert!(checked >= 5);
}

#[test]
fn numbers_out_of_range_are_refused() {
    let mut checked = 0;
    for (doc, snap) in rich_snapshots() {
        let root = parse(&snap);
        let a = runbook_policy::doc::analyze(&doc);
        let set = |p: &str, v: Node| edited(&snap, &tokens(p), |n| *n = v);
        let events = root.get("events").unwrap().value.clone();
        let Value::Num(events) = events else { unreachable!() };
        let events = events.as_u64().unwrap();
        for bad in ["-1", "1.5", "9007199254740992", "1e300", "18446744073709551616"] {
            refused(&doc, &set("/events", num(bad)), "/events", &format!("events {bad}"));
        }
        for p in ["/start_at", "/last_at"] {
            for bad in ["", "-1", "01", "+1", "1.5", "1e3", "18446744073709551616", " 1"] {
                refused(&doc, &set(p, string(bad)), p, &format!("{p} `{bad}`"));
            }
        }
        if events > 0 {
            refused(&doc, &set("/start_at", string("18446744073709551615")), "/last_at", "a start after the last event");
        }
        if !a.doc.steps.is_empty() {
            refused(&doc, &set("/steps/0/visits", num(&(events + 1).to_string())), "/steps/0/visits", "more visits than events");
            refused(&doc, &set("/steps/0/visits", num("-1")), "/steps/0/visits", "negative visits");
            let max = a.doc.steps[0].retry.as_ref().map(|r| r.max).unwrap_or(0);
            refused(&doc, &set("/steps/0/budget_used", num(&(max + 1).to_string())), "/steps/0/budget_used", "a budget overdrawn");
        }
        if root.pointer(&tokens("/deviations/0")).is_some() {
            refused(&doc, &set("/deviations/0/seq", num(&events.to_string())), "/deviations/0/seq", "a deviation after the last event");
        }
        if root.pointer(&tokens("/approvals/0")).is_some() {
            refused(&doc, &set("/approvals/0/seq", num("0.5")), "/approvals/0/seq", "a fractional seq");
        }
        if let Some(seq) = root.pointer(&tokens("/checkpoints/0/seq")) {
            if matches!(seq.value, Value::Null) {
                refused(&doc, &set("/checkpoints/0/seq", num("0")), "/checkpoints/0/seq", "a pending checkpoint with a seq");
            } else {
                refused(&doc, &set("/checkpoints/0/seq", jcs::null()), "/checkpoints/0/seq", "a decided checkpoint without a seq");
                refused(&doc, &set("/checkpoints/0/seq", num(&events.to_string())), "/checkpoints/0/seq", "a checkpoint after the last event");
            }
        }
        if root.pointer(&tokens("/pending/0/scope/visit")).is_some() {
            refused(&doc, &set("/pending/0/scope/visit", num("0")), "/pending/0/scope/visit", "visit 0");
            refused(&doc, &set("/pending/0/scope/visit", num(&(events + 1).to_string())), "/pending/0/scope/visit", "a visit not yet made");
        }
        checked += 1;
    }
    assert!(checked >= 5);
}

#[test]
fn states_no_run_reaches_are_refused() {
    let doc = std::fs::read(root().join("examples/rotate-credentials/runbook.yaml")).unwrap();
    let lines: Vec<String> = std::fs::read_to_string(root().join("examples/rotate-credentials/events.ndjson")).unwrap().lines().map(str::to_string).collect();
    let fresh = Session::new(&doc).snapshot();
    let mut s = Session::new(&doc);
    s.handle_line(&lines[0]);
    let running = s.snapshot();
    let set = |snap: &str, p: &str, v: Node| edited(snap, &tokens(p), |n| *n = v);
    refused(&doc, &set(&running, "/outcome", string("completed")), "/outcome", "an outcome while running");
    refused(&doc, &set(&running, "/claim", jcs::null()), "/claim", "running without a claim");
    refused(&doc, &set(&running, "/refusals", jcs::strs(["profile-too-low"])), "/refusals", "running though refused");
    refused(&doc, &set(&running, "/phase", string("over")), "/outcome", "over without an outcome");
    // Before `start` the session is a new one, whatever else the snapshot says.
    refused(&doc, &set(&running, "/phase", string("new")), "/claim", "a new session with a claim");
    refused(&doc, &set(&fresh, "/gate_open", jcs::b(true)), "/gate_open", "a new session with an open gate");
    refused(&doc, &set(&fresh, "/last_at", string("5")), "/last_at", "a new session with a time");
    refused(&doc, &set(&fresh, "/position", jcs::obj(vec![("step", string("inspect"))])), "/position", "a new session in a step");
    // A snapshot taken before `start` restores, and starts like a new session.
    let mut r = Session::restore(&doc, &fresh).unwrap();
    let mut n = Session::new(&doc);
    for l in &lines {
        assert_eq!(r.handle_line(l), n.handle_line(l));
    }
}

// ---------------------------------------------------------------------------------------------------
// Mutations.

/// Random mutations of valid snapshots: never a panic; either refused with a message that names the
/// snapshot, or a session whose own snapshot is canonical, restores to itself, and runs on without panic.
#[test]
fn mutated_snapshots_never_panic() {
    let mut rng = Rng::new(7);
    let (mut accepted, mut refused) = (0, 0);
    let mut cases: Vec<(Vec<u8>, String, Vec<String>)> = rich_snapshots().into_iter().map(|(d, s)| (d, s, Vec::new())).collect();
    for seed in 0..150 {
        let (doc, events) = generated(seed);
        let k = rng.below(events.len() as u64 + 1) as usize;
        let mut s = Session::new(doc.as_bytes());
        for e in &events[..k] {
            s.handle_line(e);
        }
        cases.push((doc.into_bytes(), s.snapshot(), events[k..].to_vec()));
    }
    for (doc, snap, rest) in &cases {
        let all = nodes(&parse(snap));
        for _ in 0..25 {
            let mutated = match rng.below(4) {
                0 => {
                    let mut bytes = snap.clone().into_bytes();
                    let i = rng.below(bytes.len() as u64) as usize;
                    bytes[i] = rng.below(256) as u8;
                    String::from_utf8_lossy(&bytes).into_owned()
                }
                1 => {
                    let objects: Vec<&(Vec<String>, Node)> = all.iter().filter(|(_, n)| matches!(&n.value, Value::Obj(m) if !m.is_empty())).collect();
                    let (path, node) = objects[rng.below(objects.len() as u64) as usize];
                    let Value::Obj(m) = &node.value else { unreachable!() };
                    let key = m[rng.below(m.len() as u64) as usize].key.clone();
                    edited(snap, path, |n| {
                        if let Value::Obj(ms) = &mut n.value {
                            ms.retain(|x| x.key != key);
                        }
                    })
                }
                2 => {
                    let numbers: Vec<&(Vec<String>, Node)> = all.iter().filter(|(_, n)| matches!(n.value, Value::Num(_))).collect();
                    if numbers.is_empty() {
                        continue;
                    }
                    let (path, _) = numbers[rng.below(numbers.len() as u64) as usize];
                    let v = rng.pick(&["0", "1", "2", "3", "7", "40", "-1", "0.5", "9007199254740991", "9007199254740992", "1e300"]);
                    edited(snap, path, |n| *n = num(v))
                }
                _ => {
                    let strings: Vec<&(Vec<String>, Node)> = all.iter().filter(|(_, n)| matches!(n.value, Value::Str(_))).collect();
                    let (path, _) = strings[rng.below(strings.len() as u64) as usize];
                    let v = rng.pick(&[
                        "",
                        "0",
                        "s0",
                        "s1",
                        "done",
                        "rolled-back",
                        "inspect",
                        "rotated",
                        "cap-0",
                        "{}",
                        "pass",
                        "over",
                        "running",
                        "R0",
                        "complete",
                    ]);
                    edited(snap, path, |n| *n = string(v))
                }
            };
            match Session::restore(doc, &mutated) {
                Err(e) => {
                    assert!(e.starts_with("snapshot"), "{e}");
                    refused += 1;
                }
                Ok(mut s) => {
                    let again = s.snapshot();
                    assert_eq!(runbook_policy::canonicalize(&again).as_ref(), Ok(&again));
                    assert_eq!(Session::restore(doc, &again).map(|r| r.snapshot()).as_ref(), Ok(&again));
                    for e in rest {
                        s.handle_line(e);
                    }
                    let _ = s.report();
                    accepted += 1;
                }
            }
        }
    }
    assert!(accepted > 100 && refused > 1_000, "{accepted} mutations accepted, {refused} refused");
}

/// One state has exactly one snapshot: the same JSON written another way (keys reordered, whitespace, a
/// number spelled differently, an escaped character) is refused, even though it parses to the same values.
#[test]
fn a_snapshot_not_in_the_modules_own_bytes_is_refused() {
    for (doc, snap) in rich_snapshots() {
        assert!(Session::restore(&doc, &snap).is_ok());
        let spaced = snap.replacen("\"schema\":", "\"schema\": ", 1);
        let reordered = {
            // The last two top-level members swapped: the same object, keys out of order.
            let n = parse(&snap);
            let Value::Obj(mut ms) = n.value else { panic!("an object") };
            let k = ms.len();
            ms.swap(k - 1, k - 2);
            let text: Vec<String> = ms.iter().map(|m| format!("{}:{}", jcs::to_string(&string(&m.key)), jcs::to_string(&m.value))).collect();
            format!("{{{}}}", text.join(","))
        };
        let escaped = snap.replacen("\"schema\":\"runbook", "\"schema\":\"\\u0072unbook", 1);
        let number = snap.replacen("\"events\":", "\"events\":0", 1).replacen("\"events\":00", "\"events\":0", 1);
        for (what, bad) in [("spaced", spaced), ("reordered", reordered), ("escaped", escaped)] {
            assert_ne!(bad, snap, "{what}");
            refused(&doc, &bad, "not in the module's canonical form", what);
        }
        // A leading zero is not JSON at all.
        if number != snap {
            assert!(Session::restore(&doc, &number).is_err());
        }
    }
}
