//! The JSON Schemas in `schema/` against the policy core, on the examples and the bad fixtures.
//!
//! - every example document validates against `runbook.schema.json`, except `examples/broken/`;
//! - every event line of every example stream validates against `event.schema.json`;
//! - every artifact the component produces (envelopes, decision lines, reports, session snapshots)
//!   validates against its schema, and each example stream ends with the outcome its runbook intends;
//! - schema and core agree on bad inputs: a document is rejected by the schema if and only if the core's
//!   lint reports an error with a *structural* code (see [`STRUCTURAL`]), and an event line is rejected by
//!   the schema if and only if the core cannot parse it as an event; the same holds for thousands of
//!   randomly mutated copies of the examples.
//!
//! Documents reach the schema through the core's own parser (YAML and JSON alike): `parse_source`, then
//! RFC 8785 canonical JSON, then serde_json. So the schema sees exactly the data model the core lints.

use crate::common::{module_cache, repo};
use jsonschema::Validator;
use runbook_host::Policy;
use runbook_policy::supervisor::BLOCKING;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Blocking lint codes that a JSON Schema expresses exactly: each is about one value in its place (its
/// type, its enum, its pattern, its required or forbidden neighbours), never about two places at once.
/// `runbook.schema.json` rejects a document if and only if lint reports one of these as an error.
const STRUCTURAL: &[&str] = &[
    "unknown-field",       // additionalProperties: false, with `^x-` patternProperties
    "wrong-type",          // type
    "invalid-id",          // the id, terminal and semver patterns; runbook_id at most 128
    "invalid-value",       // enum
    "missing-field",       // required (and a checkpoint's `match`/`condition` by its `kind`)
    "conflicting-fields",  // a step has `tool` or `tools`, not both
    "budget-out-of-range", // retry.max: integer 1..100
    "invalid-pointer",     // a predicate's `path` is an RFC 6901 pointer
    "invalid-predicate",   // the closed predicate grammar: ops, value types per op, non-empty lists
];

/// Blocking lint codes a schema cannot see, and why. The schema accepts documents whose only errors have
/// these codes (or any non-blocking code, such as `unknown-route` or `undeclared-tool`).
const NOT_STRUCTURAL: &[&str] = &[
    "parse-error",         // no data model to validate: such files are skipped
    "limit",               // bytes and nesting depth are properties of the text; lint stops early: skipped
    "duplicate-key",       // the parsed data model keeps one of the keys: invisible to a schema
    "duplicate-id",        // uniqueness of a field across list items (and a string capability vs `name`)
    "name-collision",      // a step id equal to a terminal name: a relation between two lists
    "invalid-regex",       // the core's regex dialect (Rust regex-lite) is not the schema's (ECMA-262)
    "unconstrained-shell", // what a `when` pattern can match, and whether a step is gated: analysis, not shape
];

fn schema_json(name: &str) -> Value {
    let path = repo().join("schema").join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn validator(name: &str) -> Validator {
    jsonschema::draft202012::new(&schema_json(name)).unwrap_or_else(|e| panic!("schema/{name}.schema.json does not compile: {e}"))
}

/// The first few schema errors, for assertion messages.
fn errors(v: &Validator, instance: &Value) -> String {
    v.iter_errors(instance).take(4).map(|e| format!("{} at `{}`", e, e.instance_path)).collect::<Vec<_>>().join("; ")
}

fn policy() -> Policy {
    Policy::load_with_cache(Some(module_cache())).expect("the component loads")
}

/// A document's data model as the core parses it, or None when it does not parse at all.
fn document_json(bytes: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(bytes).ok()?;
    let node = runbook_policy::doc::parse_source(text).node?;
    Some(serde_json::from_str(&runbook_policy::jcs::to_string(&node)).expect("canonical JSON parses"))
}

/// An event line's data model as the core parses it, or None when the line is not clean JSON for the core
/// (not JSON, a duplicate key, too deep): a schema cannot judge those.
fn event_json(line: &str) -> Option<Value> {
    let parsed = runbook_policy::json::parse(line);
    if !parsed.issues.is_empty() {
        return None;
    }
    Some(serde_json::from_str(&runbook_policy::jcs::to_string(&parsed.node?)).expect("canonical JSON parses"))
}

struct Example {
    name: String,
    document: PathBuf,
    streams: Vec<PathBuf>,
}

fn examples() -> Vec<Example> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(repo().join("examples")).expect("examples/") {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let document = ["runbook.yaml", "runbook.json"].iter().map(|f| dir.join(f)).find(|f| f.is_file());
        let document = document.unwrap_or_else(|| panic!("{} has no runbook.yaml or runbook.json", dir.display()));
        let mut streams: Vec<PathBuf> =
            std::fs::read_dir(&dir).unwrap().map(|f| f.unwrap().path()).filter(|f| f.extension().is_some_and(|e| e == "ndjson")).collect();
        streams.sort();
        out.push(Example { name: dir.file_name().unwrap().to_string_lossy().into_owned(), document, streams });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(out.len() >= 5, "expected at least five examples, found {}", out.len());
    out
}

fn lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
}

/// What each example stream is meant to show: (example, stream, outcome, terminal).
const EXPECTED: &[(&str, &str, &str, Option<&str>)] = &[
    ("broken", "events.ndjson", "refused", None),
    ("certificate-renewal", "events.ndjson", "completed", Some("renewed")),
    ("executive-snapshot", "events-incomplete.ndjson", "incomplete", None),
    ("executive-snapshot", "events.ndjson", "completed", None),
    ("incident-rollback", "events-exhausted.ndjson", "completed", Some("escalated")),
    ("incident-rollback", "events.ndjson", "completed", Some("recovered")),
    ("read-only-investigation", "events.ndjson", "completed", Some("findings-recorded")),
    ("rotate-credentials", "events-deviations.ndjson", "completed", Some("rotated")),
    ("rotate-credentials", "events.ndjson", "completed", Some("rotated")),
];

#[test]
fn structural_codes_partition_the_blocking_codes() {
    let blocking: BTreeSet<&str> = BLOCKING.iter().map(|c| c.as_str()).collect();
    let structural: BTreeSet<&str> = STRUCTURAL.iter().copied().collect();
    let other: BTreeSet<&str> = NOT_STRUCTURAL.iter().copied().collect();
    assert!(structural.is_disjoint(&other), "a code is both structural and not: {:?}", structural.intersection(&other).collect::<Vec<_>>());
    let union: BTreeSet<&str> = structural.union(&other).copied().collect();
    assert_eq!(union, blocking, "every blocking lint code must be classified here as structural (the schema expresses it) or not");
}

#[test]
fn schemas_are_draft_2020_12_with_urn_ids() {
    for name in ["runbook", "envelope", "event", "decision", "report", "session-snapshot"] {
        let s = schema_json(name);
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema", "{name}: $schema");
        assert_eq!(s["$id"], format!("urn:runbook-host:schema:{name}"), "{name}: $id");
        if let Err(e) = jsonschema::draft202012::meta::validate(&s) {
            panic!("schema/{name}.schema.json is not a valid 2020-12 schema: {e}");
        }
        validator(name);
    }
}

#[test]
fn example_documents_validate_except_broken() {
    let v = validator("runbook");
    for ex in examples() {
        let bytes = std::fs::read(&ex.document).unwrap();
        let json = document_json(&bytes).unwrap_or_else(|| panic!("{}: does not parse", ex.name));
        let lint = runbook_policy::lint(&bytes);
        if ex.name == "broken" {
            assert!(!v.is_valid(&json), "examples/broken must not validate");
            let codes: BTreeSet<&str> = lint.findings.iter().filter(|f| f.severity == runbook_policy::Severity::Error).map(|f| f.code).collect();
            for code in ["unknown-field", "undeclared-tool", "unknown-route", "unbudgeted-cycle", "invalid-regex", "min-profile-below-implied"] {
                assert!(codes.contains(code), "examples/broken should show `{code}`; it has {codes:?}");
            }
            let hints = lint.findings.iter().filter(|f| f.message.contains("did you mean")).count();
            assert!(hints >= 3, "examples/broken should show a `did you mean` for the field, the capability and the step; found {hints}");
        } else {
            assert!(v.is_valid(&json), "examples/{}: {}", ex.name, errors(&v, &json));
            let errs: Vec<&str> = lint.findings.iter().filter(|f| f.severity == runbook_policy::Severity::Error).map(|f| f.code).collect();
            assert!(errs.is_empty(), "examples/{} has lint errors: {errs:?}", ex.name);
        }
    }
}

#[test]
fn example_event_lines_validate() {
    let v = validator("event");
    let mut checked = 0;
    let mut types = BTreeSet::new();
    for ex in examples() {
        for stream in &ex.streams {
            let lines = lines(stream);
            assert!(lines[0].contains("\"type\":\"start\""), "{}: the first line must be the start claim", stream.display());
            for (i, line) in lines.iter().enumerate() {
                let json: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{}:{}: {e}", stream.display(), i + 1));
                assert!(v.is_valid(&json), "{}:{}: {}", stream.display(), i + 1, errors(&v, &json));
                types.insert(json["type"].as_str().unwrap().to_string());
                checked += 1;
            }
        }
    }
    assert!(checked >= 50, "only {checked} event lines checked");
    for t in ["start", "invoke", "result", "approval", "advance", "verdict", "final_output", "tick", "end"] {
        assert!(types.contains(t), "no example stream has a `{t}` event");
    }
}

#[test]
fn produced_artifacts_validate() {
    let p = policy();
    let (envelope, decision, report) = (validator("envelope"), validator("decision"), validator("report"));
    let mut seen_streams = BTreeSet::new();
    let mut decisions_checked = 0;
    let mut kinds = BTreeSet::new();
    for ex in examples() {
        let bytes = std::fs::read(&ex.document).unwrap();
        match p.envelope(&bytes).unwrap() {
            Ok(text) => {
                assert_ne!(ex.name, "broken", "examples/broken must have no envelope");
                let json: Value = serde_json::from_str(&text).unwrap();
                assert!(envelope.is_valid(&json), "examples/{} envelope: {}", ex.name, errors(&envelope, &json));
                assert_every_key_required(&envelope, &json, &format!("examples/{} envelope", ex.name));
            }
            Err(findings) => assert_eq!(ex.name, "broken", "examples/{}: no envelope: {:?}", ex.name, findings.iter().map(|f| &f.code).collect::<Vec<_>>()),
        }
        for stream in &ex.streams {
            let file = stream.file_name().unwrap().to_string_lossy().into_owned();
            let what = format!("examples/{}/{file}", ex.name);
            let mut session = p.session(&bytes).unwrap();
            let events = lines(stream);
            for (i, line) in events.iter().enumerate() {
                let d: Value = serde_json::from_str(&session.handle_line(line)).unwrap();
                assert!(decision.is_valid(&d), "{what}: decision {i}: {}", errors(&decision, &d));
                assert_eq!(d["seq"], i as u64, "{what}: decision {i} has the wrong seq");
                kinds.insert(d["decision"].as_str().unwrap().to_string());
                decisions_checked += 1;
            }
            let r: Value = serde_json::from_str(&session.report().unwrap()).unwrap();
            assert!(report.is_valid(&r), "{what}: report: {}", errors(&report, &r));
            assert_every_key_required(&report, &r, &format!("{what} report"));
            assert_eq!(r["events"], events.len() as u64, "{what}: the report counts every event");
            let expected = EXPECTED.iter().find(|(e, s, _, _)| *e == ex.name && *s == file);
            let (_, _, outcome, terminal) = expected.unwrap_or_else(|| panic!("{what} is not in EXPECTED: say what it should end with"));
            assert_eq!(r["outcome"], *outcome, "{what}: outcome");
            assert_eq!(r["terminal"].as_str(), *terminal, "{what}: terminal");
            seen_streams.insert((ex.name.clone(), file));
        }
        // The first decision line of every example, mutated: every key is required and no other is allowed.
        if let Some(stream) = ex.streams.first() {
            let mut session = p.session(&bytes).unwrap();
            let d: Value = serde_json::from_str(&session.handle_line(&lines(stream)[0])).unwrap();
            assert_every_key_required(&decision, &d, &format!("examples/{} decision", ex.name));
        }
    }
    for (e, s, _, _) in EXPECTED {
        assert!(seen_streams.contains(&(e.to_string(), s.to_string())), "EXPECTED names examples/{e}/{s}, which does not exist");
    }
    assert!(decisions_checked >= 50, "only {decisions_checked} decisions checked");
    for k in ["allow", "deny", "needs-approval", "needs-verdict", "halt"] {
        assert!(kinds.contains(k), "no example produces a `{k}` decision");
    }
}

/// Every session snapshot the component takes of the examples (before `start` and after each event of
/// each stream), and the native core's of generated runs, validates; in each, removing any key of any
/// object, or adding an unknown one, makes it invalid.
#[test]
fn session_snapshots_validate() {
    let p = policy();
    let v = validator("session-snapshot");
    let mut checked = 0;
    let mut phases = BTreeSet::new();
    let mut check = |what: &str, text: &str, strict: bool| {
        let json: Value = serde_json::from_str(text).unwrap();
        assert!(v.is_valid(&json), "{what}: {}\n{text}", errors(&v, &json));
        if strict {
            assert_every_nested_key_required(&v, &json, what);
        }
        phases.insert(json["phase"].as_str().unwrap().to_string());
        checked += 1;
    };
    for ex in examples() {
        let bytes = std::fs::read(&ex.document).unwrap();
        check(&format!("examples/{} before start", ex.name), &p.session(&bytes).unwrap().snapshot().unwrap(), true);
        for stream in &ex.streams {
            let mut session = p.session(&bytes).unwrap();
            for (i, line) in lines(stream).iter().enumerate() {
                session.handle_line(line);
                check(&format!("{}: after event {i}", stream.display()), &session.snapshot().unwrap(), i % 4 == 1);
            }
        }
    }
    for seed in 0..200 {
        let mut rng = runbook_policy::testgen::Rng::new(seed);
        let (doc, shape) = runbook_policy::testgen::document(&mut rng, 15);
        let mut session = runbook_policy::Session::new(doc.as_bytes());
        for (i, line) in runbook_policy::testgen::events(&mut rng, &shape).iter().enumerate() {
            session.handle_line(line);
            check(&format!("seed {seed}: after event {i}"), &session.snapshot(), false);
        }
    }
    assert!(checked > 1_000, "only {checked} snapshots checked");
    assert_eq!(phases.into_iter().collect::<Vec<_>>(), ["new", "over", "running"]);
}

/// [`assert_every_key_required`] for every object inside `artifact`, at any depth.
fn assert_every_nested_key_required(v: &Validator, artifact: &Value, what: &str) {
    fn objects(v: &Value, path: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
        match v {
            Value::Object(m) => {
                out.push(path.clone());
                for (k, x) in m {
                    path.push(Value::String(k.clone()));
                    objects(x, path, out);
                    path.pop();
                }
            }
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    path.push(Value::from(i));
                    objects(x, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    fn at<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
        path.iter().fold(v, |v, k| match k {
            Value::String(k) => &mut v[k.as_str()],
            k => &mut v[k.as_u64().unwrap() as usize],
        })
    }
    let mut paths = Vec::new();
    objects(artifact, &mut Vec::new(), &mut paths);
    for path in paths {
        let keys: Vec<String> = at(&mut artifact.clone(), &path).as_object().unwrap().keys().cloned().collect();
        for key in keys {
            let mut copy = artifact.clone();
            at(&mut copy, &path).as_object_mut().unwrap().remove(&key);
            assert!(!v.is_valid(&copy), "{what}: the schema accepts it without `{key}` at {path:?}");
        }
        let mut copy = artifact.clone();
        at(&mut copy, &path).as_object_mut().unwrap().insert("comment".into(), Value::String("free text".into()));
        assert!(!v.is_valid(&copy), "{what}: the schema accepts an unknown key at {path:?}");
    }
}

/// Removing any top-level key, or adding an unknown one, makes a produced artifact invalid.
fn assert_every_key_required(v: &Validator, artifact: &Value, what: &str) {
    let obj = artifact.as_object().unwrap_or_else(|| panic!("{what} is not an object"));
    for key in obj.keys() {
        let mut m = obj.clone();
        m.remove(key);
        assert!(!v.is_valid(&Value::Object(m)), "{what}: the schema accepts it without `{key}`");
    }
    let mut m = obj.clone();
    m.insert("comment".into(), Value::String("free text".into()));
    assert!(!v.is_valid(&Value::Object(m)), "{what}: the schema accepts an unknown key");
}

#[test]
fn envelopes_of_bad_fixtures_validate() {
    // Documents with only non-blocking errors (an unknown route, an undeclared tool, ...) still have an
    // envelope that shows them: it must validate too.
    let p = policy();
    let v = validator("envelope");
    let mut checked = 0;
    for (path, bytes) in bad_documents() {
        if let Ok(text) = p.envelope(&bytes).unwrap() {
            let json: Value = serde_json::from_str(&text).unwrap();
            assert!(v.is_valid(&json), "{}: envelope: {}", path.display(), errors(&v, &json));
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} fixture envelopes checked");
}

/// Every document-like file (`.json`, `.yaml`, `.yml`) in host/tests/fixtures/bad/, sorted.
fn bad_documents() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = repo().join("host/tests/fixtures/bad");
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|f| f.unwrap().path())
        .filter(|f| f.is_file() && f.extension().is_some_and(|e| e == "json" || e == "yaml" || e == "yml"))
        .map(|f| {
            let b = std::fs::read(&f).unwrap();
            (f, b)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn schema_and_core_agree_on_documents() {
    let v = validator("runbook");
    let mut files: Vec<(String, Vec<u8>)> =
        bad_documents().into_iter().map(|(p, b)| (format!("fixtures/bad/{}", p.file_name().unwrap().to_string_lossy()), b)).collect();
    for ex in examples() {
        files.push((format!("examples/{}", ex.name), std::fs::read(&ex.document).unwrap()));
    }
    let (mut rejected, mut accepted_with_errors, mut skipped) = (0, 0, Vec::new());
    let mut mine = 0;
    let mut disagreements = Vec::new();
    for (name, bytes) in &files {
        let Some(json) = document_json(bytes) else {
            skipped.push(name.clone());
            continue;
        };
        let lint = runbook_policy::lint(bytes);
        let errors_: Vec<&str> = lint.findings.iter().filter(|f| f.severity == runbook_policy::Severity::Error).map(|f| f.code).collect();
        if errors_.iter().any(|c| *c == "parse-error" || *c == "limit") {
            // The core stopped before it had linted everything: its structural verdict is incomplete.
            skipped.push(name.clone());
            continue;
        }
        let structural: Vec<&str> = errors_.iter().copied().filter(|c| STRUCTURAL.contains(c)).collect();
        let schema_rejects = !v.is_valid(&json);
        if schema_rejects != !structural.is_empty() {
            disagreements.push(format!(
                "{name}: the schema {} it, but the core's structural errors are {structural:?} (all errors: {errors_:?}); schema says: {}",
                if schema_rejects { "rejects" } else { "accepts" },
                errors(&v, &json)
            ));
        }
        let base = name.rsplit('/').next().unwrap();
        if base.starts_with("schema-") {
            mine += 1;
            // Fixtures named `schema-ok-*` are accepted by the schema; every other `schema-*` one is rejected.
            if schema_rejects == base.starts_with("schema-ok-") {
                disagreements.push(format!("{name}: the schema {} it, against its name", if schema_rejects { "rejects" } else { "accepts" }));
            }
        }
        if schema_rejects {
            rejected += 1;
        } else if !errors_.is_empty() {
            accepted_with_errors += 1;
        }
    }
    eprintln!("documents: {rejected} rejected by both, {accepted_with_errors} accepted with only non-structural errors, skipped {skipped:?}");
    assert!(disagreements.is_empty(), "schema and core disagree on {} document(s):\n{}", disagreements.len(), disagreements.join("\n"));
    assert!(mine >= 60, "expected the schema-* fixtures, found {mine}");
    assert!(rejected >= 50, "only {rejected} documents rejected");
    assert!(accepted_with_errors >= 5, "only {accepted_with_errors} documents with only non-structural errors");
    assert!(skipped.len() < files.len() / 2, "most files were skipped: {skipped:?}");
}

/// Event lines with what both the schema and the core must say of them (true: a valid event).
const EVENT_PROBES: &[(&str, bool)] = &[
    (r#"{"type":"start","at":0,"run_id":"r","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"a"}"#, true),
    (
        r#"{"type":"start","at":0,"run_id":"r","profile":"R1","allowlist":[],"risk_ceiling":"read-only","coverage":["shell"],"agent":"a","available":["t","rb@1.0.0"]}"#,
        true,
    ),
    (r#"{"type":"start","at":0,"run_id":"r","profile":"R0","allowlist":["*"],"risk_ceiling":"mutating","coverage":[],"agent":"a","x-host":"cli"}"#, true),
    (r#"{"type":"start","at":0,"run_id":"r","profile":"R3","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"a"}"#, false),
    (r#"{"type":"start","at":0,"run_id":"r","profile":"R2","allowlist":["*"],"risk_ceiling":"dangerous","coverage":"complete","agent":"a"}"#, false),
    (r#"{"type":"start","at":0,"run_id":"r","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"partial","agent":"a"}"#, false),
    (r#"{"type":"start","at":0,"run_id":"r","profile":"R2","allowlist":"*","risk_ceiling":"irreversible","coverage":"complete","agent":"a"}"#, false),
    (r#"{"type":"start","at":0,"run_id":"r","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete"}"#, false),
    (
        r#"{"type":"start","at":0,"run_id":"r","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"a","available":null}"#,
        false,
    ),
    (
        r#"{"type":"start","at":0,"run_id":"r","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"a","model":"m"}"#,
        false,
    ),
    (r#"{"type":"invoke","at":5,"tool":"db.read"}"#, true),
    (r#"{"type":"invoke","at":5,"tool":"db.read","arguments":{"q":1},"call_id":7,"step":null,"guard":true}"#, true),
    (r#"{"type":"invoke","at":5,"tool":"db.read","arguments":[1,2],"call_id":"c-1","step":"check"}"#, true),
    (r#"{"type":"invoke","at":5,"tool":"db.read","call_id":true}"#, false),
    (r#"{"type":"invoke","at":5,"tool":"db.read","guard":null}"#, false),
    (r#"{"type":"invoke","at":5,"tool":7}"#, false),
    (r#"{"type":"invoke","at":5}"#, false),
    (r#"{"type":"invoke","at":-1,"tool":"db.read"}"#, false),
    (r#"{"type":"invoke","at":1.5,"tool":"db.read"}"#, false),
    (r#"{"type":"invoke","at":"5","tool":"db.read"}"#, false),
    (r#"{"type":"invoke","tool":"db.read"}"#, false),
    (r#"{"type":"result","at":6,"tool":"db.read"}"#, true),
    (r#"{"type":"result","at":6,"tool":"db.read","result":null,"is_error":false,"call_id":7.5}"#, true),
    (r#"{"type":"result","at":6,"tool":"db.read","is_error":"no"}"#, false),
    (r#"{"type":"result","at":6,"tool":"db.read","error":"x"}"#, false),
    (r#"{"type":"approval","at":7,"approver":"alice","granted":true}"#, true),
    (
        r#"{"type":"approval","at":7,"step":"rotate","call_sha256":"37404f36c47c7a5a69240928a9b8813e51fc4fb24009aedf28ee69223cde5781","approver":"alice","granted":false}"#,
        true,
    ),
    (r#"{"type":"approval","at":7,"step":null,"call_sha256":null,"approver":"alice","granted":true}"#, true),
    (
        r#"{"type":"approval","at":7,"step":"rotate","call_sha256":"37404F36C47C7A5A69240928A9B8813E51FC4FB24009AEDF28EE69223CDE5781","approver":"alice","granted":true}"#,
        false,
    ),
    (r#"{"type":"approval","at":7,"step":"rotate","call_sha256":"abc","approver":"alice","granted":true}"#, false),
    (r#"{"type":"approval","at":7,"step":"rotate","approver":"alice"}"#, false),
    (r#"{"type":"approval","at":7,"step":"rotate","granted":true}"#, false),
    (r#"{"type":"advance","at":8,"to":"next-step"}"#, true),
    (r#"{"type":"advance","at":8}"#, false),
    (r#"{"type":"advance","at":8,"to":null}"#, false),
    (r#"{"type":"verdict","at":9,"step":"deploy","outcome":"fail","by":"bob"}"#, true),
    (r#"{"type":"verdict","at":9,"step":"deploy","outcome":"unevaluable","by":"bob"}"#, false),
    (r#"{"type":"verdict","at":9,"step":"deploy","outcome":"pass"}"#, false),
    (r#"{"type":"final_output","at":10}"#, true),
    (r#"{"type":"final_output","at":10,"text":"the answer"}"#, false),
    (r#"{"type":"tick","at":11,"x-clock":"monotonic"}"#, true),
    (r#"{"type":"tick","at":11,"now":11}"#, false),
    (r#"{"type":"end","at":12}"#, true),
    (r#"{"type":"end","at":12,"reason":null}"#, true),
    (r#"{"type":"end","at":12,"reason":"approval-timeout"}"#, true),
    (r#"{"type":"end","at":12,"reason":"crashed"}"#, false),
    (r#"{"type":"stop","at":12}"#, false),
    (r#"{"at":12}"#, false),
    (r#"[{"type":"tick","at":1}]"#, false),
    (r#""tick""#, false),
];

#[test]
fn schema_and_core_agree_on_events() {
    let v = validator("event");
    let check = |what: &str, line: &str| -> Option<bool> {
        let json = event_json(line)?;
        let core_ok = runbook_policy::event::parse_line(line).is_ok();
        let schema_ok = v.is_valid(&json);
        assert_eq!(schema_ok, core_ok, "{what}: the schema says {schema_ok}, the core {core_ok}: {line}\n{}", errors(&v, &json));
        Some(core_ok)
    };
    for (line, expected) in EVENT_PROBES {
        let got = check("probe", line).unwrap_or_else(|| panic!("probe is not clean JSON: {line}"));
        assert_eq!(got, *expected, "probe: expected {}: {line}", if *expected { "valid" } else { "invalid" });
    }
    // Every line of every stream among the examples and the bad fixtures.
    let mut streams: Vec<PathBuf> = examples().into_iter().flat_map(|e| e.streams).collect();
    let dir = repo().join("host/tests/fixtures/bad");
    streams.extend(std::fs::read_dir(&dir).unwrap().map(|f| f.unwrap().path()).filter(|f| f.extension().is_some_and(|e| e == "ndjson")));
    let mut compared = 0;
    for s in streams {
        let Ok(text) = std::fs::read_to_string(&s) else { continue };
        for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            if check(&format!("{}:{}", s.display(), i + 1), line).is_some() {
                compared += 1;
            }
        }
    }
    assert!(compared >= 50, "only {compared} stream lines compared");
}

#[test]
fn decision_and_report_schemas_reject_what_the_core_never_writes() {
    let d = validator("decision");
    let ok = serde_json::json!({"decision":"allow","deviation":null,"reason":null,"refusals":[],"seq":3,"step":"check"});
    assert!(d.is_valid(&ok), "{}", errors(&d, &ok));
    let refused =
        serde_json::json!({"decision":"halt","deviation":null,"reason":"refused","refusals":["coverage-incomplete","profile-too-low"],"seq":0,"step":null});
    assert!(d.is_valid(&refused), "{}", errors(&d, &refused));
    let trap = serde_json::json!({"decision":"halt","deviation":null,"reason":"host-trap","refusals":[],"seq":9,"step":null});
    assert!(d.is_valid(&trap), "a host's trap line is a decision line: {}", errors(&d, &trap));
    for (bad, why) in [
        (serde_json::json!({"decision":"maybe","deviation":null,"reason":null,"refusals":[],"seq":3,"step":null}), "unknown decision"),
        (serde_json::json!({"decision":"deny","deviation":"off-script","reason":null,"refusals":[],"seq":3,"step":null}), "unknown deviation"),
        (serde_json::json!({"decision":"deny","deviation":null,"reason":"because","refusals":[],"seq":3,"step":null}), "unknown reason"),
        (
            serde_json::json!({"decision":"allow","deviation":null,"reason":null,"refusals":["invalid-document"],"seq":3,"step":null}),
            "refusals without `refused`",
        ),
        (serde_json::json!({"decision":"halt","deviation":null,"reason":"refused","refusals":[],"seq":0,"step":null}), "`refused` without refusals"),
        (
            serde_json::json!({"decision":"needs-approval","deviation":null,"reason":null,"refusals":[],"seq":3,"step":"rotate"}),
            "needs-approval without awaiting-approval",
        ),
        (serde_json::json!({"decision":"allow","deviation":null,"reason":null,"refusals":[],"seq":-1,"step":null}), "negative seq"),
        (serde_json::json!({"decision":"allow","deviation":null,"reason":null,"refusals":[],"seq":1}), "missing step"),
    ] {
        assert!(!d.is_valid(&bad), "decision schema accepts {why}: {bad}");
    }
    let r = validator("report");
    let mut report = serde_json::json!({
        "approvals":[],"budgets":{},"checkpoints":{},"coverage":null,"deviations":[],
        "document":{"runbook_id":null,"sha256":"0000000000000000000000000000000000000000000000000000000000000000","version":null},
        "envelope_sha256":null,"events":0,"outcome":null,"profile":null,"refusals":[],"run_id":null,
        "schema":"runbook-run-report/v1","steps":{},"terminal":null
    });
    assert!(r.is_valid(&report), "a report before any event: {}", errors(&r, &report));
    report["outcome"] = "passed".into();
    assert!(!r.is_valid(&report), "report schema accepts an unknown outcome");
    report["outcome"] = Value::Null;
    report["deviations"] = serde_json::json!([{"seq":1,"class":"undeclared-tool","step":null,"tool":"x","note":"free text"}]);
    assert!(!r.is_valid(&report), "report schema accepts free text in a deviation");
}

/// A small deterministic generator (xorshift64*), so a failure names a seed that reproduces it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values a mutation may put anywhere: every JSON type, and strings and numbers near the rules' edges.
fn odd_value(rng: &mut Rng) -> Value {
    let values = [
        "null",
        "true",
        "false",
        "0",
        "1",
        "-1",
        "1.5",
        "100",
        "101",
        "\"\"",
        "\"x\"",
        "\"X\"",
        "\"R3\"",
        "\"R1\"",
        "\"read-only\"",
        "\"destructive\"",
        "\"1.0.0\"",
        "\"1.0\"",
        "\"/a\"",
        "\"a/b\"",
        "\"/a~2\"",
        "\"^a$\"",
        "\"(\"",
        "\"tool_call\"",
        "\"condition\"",
        "\"final_output\"",
        "\"terminal\"",
        "\"matches\"",
        "\"exists\"",
        "\"in\"",
        "\"len_eq\"",
        "\"lt\"",
        "[]",
        "[\"a\"]",
        "[1]",
        "{}",
        "{\"x-a\":1}",
        "{\"path\":\"/a\",\"op\":\"exists\"}",
        "{\"path\":\"/a\",\"op\":\"equals\"}",
        "{\"all\":[]}",
        "{\"any\":[{\"path\":\"\",\"op\":\"absent\"}]}",
        "{\"not\":{\"path\":\"/a\",\"op\":\"in\",\"value\":[1]}}",
        "{\"tool\":\"t\"}",
        "{\"max\":2}",
        "{\"to\":\"x\",\"max\":0}",
        "{\"kind\":\"runbook\",\"runbook_id\":\"a\"}",
        "{\"id\":\"c\",\"kind\":\"condition\"}",
    ];
    serde_json::from_str(values[rng.below(values.len())]).unwrap()
}

const KEYS: &[&str] = &[
    "runbook_id",
    "version",
    "title",
    "mode",
    "failure_policy",
    "execution",
    "min_runtime_profile",
    "capabilities",
    "steps",
    "terminals",
    "checkpoints",
    "completion",
    "prerequisites",
    "name",
    "tool",
    "tools",
    "risk",
    "when",
    "id",
    "requires_approval",
    "body",
    "expect",
    "assert",
    "observe",
    "next",
    "on_fail",
    "retry",
    "to",
    "max",
    "kind",
    "required",
    "match",
    "condition",
    "timeout_ms",
    "receipt",
    "path",
    "op",
    "value",
    "all",
    "any",
    "not",
    "requires_aproval",
    "x-note",
    "foo",
];

/// Applies one random mutation somewhere in `v`.
fn mutate(v: &mut Value, rng: &mut Rng, depth: usize) {
    let descend = depth < 8 && rng.below(3) != 0;
    match v {
        Value::Object(m) if descend && !m.is_empty() => {
            let k = m.keys().nth(rng.below(m.len())).unwrap().clone();
            mutate(m.get_mut(&k).unwrap(), rng, depth + 1)
        }
        Value::Array(a) if descend && !a.is_empty() => {
            let i = rng.below(a.len());
            mutate(&mut a[i], rng, depth + 1)
        }
        Value::Object(m) => match rng.below(3) {
            0 if !m.is_empty() => {
                let k = m.keys().nth(rng.below(m.len())).unwrap().clone();
                m.remove(&k);
            }
            1 => {
                m.insert(KEYS[rng.below(KEYS.len())].to_string(), odd_value(rng));
            }
            _ => *v = odd_value(rng),
        },
        Value::Array(a) => match rng.below(3) {
            0 if !a.is_empty() => {
                a.remove(rng.below(a.len()));
            }
            1 if !a.is_empty() => {
                let x = a[rng.below(a.len())].clone();
                a.push(x);
            }
            _ => a.push(odd_value(rng)),
        },
        _ => *v = odd_value(rng),
    }
}

#[test]
fn schema_and_core_agree_on_mutated_examples() {
    // Each valid example, mutated at random (a value of another type or at an edge, a key removed or added,
    // a list item removed or repeated), one to three times: the schema rejects a mutant if and only if the
    // core reports a structural error.
    let v = validator("runbook");
    let originals: Vec<Value> =
        examples().iter().filter(|e| e.name != "broken").map(|e| document_json(&std::fs::read(&e.document).unwrap()).unwrap()).collect();
    let (mut rejected, mut accepted, mut disagreements) = (0, 0, Vec::new());
    for seed in 1..=6000u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut doc = originals[rng.below(originals.len())].clone();
        for _ in 0..1 + rng.below(3) {
            mutate(&mut doc, &mut rng, 0);
        }
        let text = serde_json::to_string(&doc).unwrap();
        let lint = runbook_policy::lint(text.as_bytes());
        let errs: Vec<&str> = lint.findings.iter().filter(|f| f.severity == runbook_policy::Severity::Error).map(|f| f.code).collect();
        if errs.iter().any(|c| *c == "parse-error" || *c == "limit") {
            continue;
        }
        let structural: Vec<&str> = errs.iter().copied().filter(|c| STRUCTURAL.contains(c)).collect();
        let schema_rejects = !v.is_valid(&doc);
        if schema_rejects != !structural.is_empty() {
            disagreements.push(format!("seed {seed}: schema rejects: {schema_rejects}; core: {errs:?}; schema: {}\n  {text}", errors(&v, &doc)));
        }
        if schema_rejects {
            rejected += 1;
        } else {
            accepted += 1;
        }
    }
    eprintln!("mutants: {rejected} rejected by both, {accepted} accepted by both");
    let shown: Vec<&String> = disagreements.iter().take(10).collect();
    assert!(
        disagreements.is_empty(),
        "{} disagreement(s), the first:\n{}",
        disagreements.len(),
        shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
    assert!(rejected >= 2000 && accepted >= 400, "mutants: {rejected} rejected, {accepted} accepted: too one-sided to mean much");
}
