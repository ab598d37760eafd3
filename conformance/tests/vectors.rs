//! The vectors as data: every file under conformance/vectors/ matches conformance/vectors.schema.json, every
//! case cites its clause and carries both its hand-written expectation and its blessed bytes (consistent
//! with each other), ids are unique, and the suite covers what VECTORS.md promises: every decision, reason,
//! deviation class, outcome, refusal code, lint code and predicate operator (with pass, fail and
//! unevaluable), and runs split by a snapshot in each state the snapshot area names. Running the vectors
//! through the implementations is the runner's job (tests/suite.rs).

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const DECISIONS: &[&str] = &["allow", "deny", "needs-approval", "needs-verdict", "halt"];
/// The reason codes of docs/spec/run.md#decision-lines. `host-trap` is a host's backstop, which no vector can provoke.
const REASONS: &[&str] = &[
    "refused",
    "awaiting-approval",
    "guarded",
    "limit",
    "halted",
    "assert-failed",
    "budget-exhausted",
    "orphan-result",
    "self-approval",
    "not-current",
    "unknown-step",
    "no-pending",
    "out-of-order-step",
    "not-r1",
    "checkpoint-timeout",
    "run-ended",
    "malformed-event",
    "inexact-number",
];
const DEVIATIONS: &[&str] = &["undeclared-tool", "out-of-scope-tool", "out-of-order-step", "budget-exhausted", "terminal-not-reached"];
const OUTCOMES: &[&str] = &["completed", "incomplete", "refused", "failed", "aborted"];
const REFUSALS: &[&str] =
    &["invalid-document", "capability-not-allowed", "profile-too-low", "autonomous-at-r0", "coverage-incomplete", "risk-above-ceiling", "prerequisite-unmet"];
/// Refusals that cannot be provoked alone: agent-autonomous implies R1 (docs/spec/run.md#the-start-claim), so a claim of R0 is
/// always also `profile-too-low`.
const NEVER_ALONE: &[&str] = &["autonomous-at-r0"];
const LINT_CODES: &[&str] = &[
    "parse-error",
    "unknown-field",
    "duplicate-key",
    "wrong-type",
    "invalid-id",
    "duplicate-id",
    "unknown-route",
    "missing-route",
    "name-collision",
    "undeclared-tool",
    "budget-out-of-range",
    "unbudgeted-cycle",
    "unreachable-step",
    "no-terminal",
    "autonomous-at-r0",
    "min-profile-below-implied",
    "report-only-requires-advisory",
    "invalid-regex",
    "invalid-pointer",
    "invalid-predicate",
    "ambiguous-observation",
    "unanchored-when",
    "limit",
    "missing-field",
    "invalid-value",
    "conflicting-fields",
    "unconstrained-shell",
    "flag-argument",
];
const OPS: &[&str] = &["exists", "absent", "equals", "not_equals", "in", "contains", "matches", "lt", "lte", "gt", "gte", "len_eq", "len_lte", "len_gte"];
/// A missing path is the answer of `exists` and `absent`, never a reason they cannot be evaluated (docs/spec/runbook.md#assert-predicates).
const NEVER_UNEVALUABLE: &[&str] = &["exists", "absent"];
const COMBINATORS: &[&str] = &["all", "any", "not"];
const AREAS: &[&str] = &[
    "admission",
    "allow-list",
    "bad-input",
    "chain",
    "checkpoints",
    "content-hashing",
    "deviations",
    "envelope",
    "exact-numbers",
    "examples",
    "gates",
    "predicates",
    "prerequisites",
    "profiles",
    "retry",
    "schema-validation",
    "snapshot",
    "verdicts",
    "when",
    "yaml",
];
const MIN_CASES: usize = 160;

fn conformance_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                // Whole-run vectors (run/) and verify vectors (verify/) have their own formats, checked by
                // the runner (and the whole-run ones below).
                if p != dir.join("run") && p != dir.join("verify") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The whole-run vectors' inputs are the ones `make_scripts.py` writes from its hand-written definitions
/// (each with the clauses it cites and what they say), and there are at least 30 of them, each blessed.
#[test]
fn whole_run_vectors_are_written_from_their_definitions() {
    let dir = conformance_dir().join("vectors/run");
    let o = std::process::Command::new("python3").arg(dir.join("make_scripts.py")).arg("--check").output().expect("python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.join("script.json").is_file() {
            assert!(p.join("expected").is_dir(), "{} has no expected/ (runbook-conformance --bless)", p.display());
            let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p.join("script.json")).unwrap()).unwrap();
            assert!(s["clauses"].as_array().is_some_and(|c| !c.is_empty()), "{} cites no clause", p.display());
            n += 1;
        }
    }
    assert!(n >= 30, "only {n} whole-run vectors");
}

fn sha256(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// A vector file and where it came from.
struct File {
    path: PathBuf,
    value: Value,
}

fn load(dir: &Path) -> Vec<File> {
    json_files(dir)
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
            File { path, value }
        })
        .collect()
}

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(conformance_dir().join("vectors.schema.json")).unwrap()).unwrap();
    assert!(jsonschema::meta::is_valid(&schema), "vectors.schema.json is not a valid JSON Schema");
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    jsonschema::validator_for(&schema).expect("vectors.schema.json compiles")
}

fn schema_errors(v: &jsonschema::Validator, f: &File) -> Vec<String> {
    v.iter_errors(&f.value).map(|e| format!("{}: at {}: {e}", f.path.display(), e.instance_path)).collect()
}

/// The document's text, for the cases that name it inline or by file (base64 documents are not scanned).
fn document_text(case: &Value) -> Option<String> {
    let d = &case["input"]["document"];
    if let Some(t) = d["text"].as_str() {
        return Some(t.to_string());
    }
    let f = d["file"].as_str()?;
    std::fs::read_to_string(conformance_dir().parent().unwrap().join(f)).ok()
}

/// Where the values of a key start in a JSON or YAML document's text (`"op": "equals"`, `op: equals`): the
/// offsets just past the key's colon and any spaces. The key must not be the tail of a longer word.
fn value_offsets(text: &str, key: &str) -> Vec<usize> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(key).map(|i| i + from) {
        from = i + key.len();
        let before = if i == 0 { b' ' } else { b[i - 1] };
        if before.is_ascii_alphanumeric() || before == b'_' || before == b'-' || before == b'/' {
            continue;
        }
        let mut k = i + key.len();
        if k < b.len() && b[k] == b'"' {
            k += 1;
        }
        while k < b.len() && b[k] == b' ' {
            k += 1;
        }
        if k >= b.len() || b[k] != b':' {
            continue;
        }
        k += 1;
        while k < b.len() && b[k] == b' ' {
            k += 1;
        }
        out.push(k);
    }
    out
}

/// The words that follow a key: `"op": "equals"` and `op: equals` both give `equals`.
fn words_after_key(text: &str, key: &str) -> BTreeSet<String> {
    let b = text.as_bytes();
    let mut out = BTreeSet::new();
    for mut k in value_offsets(text, key) {
        if k < b.len() && (b[k] == b'"' || b[k] == b'\'') {
            k += 1;
        }
        let start = k;
        while k < b.len() && (b[k].is_ascii_lowercase() || b[k] == b'_') {
            k += 1;
        }
        if k > start {
            out.insert(text[start..k].to_string());
        }
    }
    out
}

/// The combinators a document's text uses: `all` and `any` followed by a list, `not` by a mapping.
fn combinators(text: &str) -> BTreeSet<&'static str> {
    let b = text.as_bytes();
    COMBINATORS
        .iter()
        .copied()
        .filter(|c| {
            let opener = if *c == "not" { b'{' } else { b'[' };
            value_offsets(text, c).into_iter().any(|k| b.get(k) == Some(&opener))
        })
        .collect()
}

#[test]
fn vector_files_match_the_schema() {
    let v = validator();
    let root = conformance_dir();
    let files = load(&root.join("vectors"));
    assert!(!files.is_empty(), "no vector files under conformance/vectors");
    let mut errors = Vec::new();
    for f in files.iter().chain(load(&root.join("vectors-pending")).iter()) {
        errors.extend(schema_errors(&v, f));
    }
    assert!(errors.is_empty(), "{} schema error(s):\n{}", errors.len(), errors.join("\n"));
    // The schema is strict: a stray key, a missing clause or an unknown code is refused.
    let case = &files[0].value["cases"][0];
    for (what, mutate) in [
        ("an unknown key", Box::new(|c: &mut Value| c["extra"] = Value::Bool(true)) as Box<dyn Fn(&mut Value)>),
        ("an empty clause", Box::new(|c: &mut Value| c["clause"] = Value::String(String::new()))),
        ("a clause that cites nothing", Box::new(|c: &mut Value| c["clause"] = Value::String("because".into()))),
        ("no expectation", Box::new(|c: &mut Value| drop(c.as_object_mut().unwrap().remove("expected")))),
        ("an unknown op", Box::new(|c: &mut Value| c["input"]["op"] = Value::String("frobnicate".into()))),
    ] {
        let mut c = case.clone();
        mutate(&mut c);
        let file = serde_json::json!({"area": "x", "description": "x", "cases": [c]});
        assert!(!v.is_valid(&file), "the schema accepts a case with {what}");
    }
}

#[test]
fn every_case_is_hand_written_then_blessed() {
    let root = conformance_dir();
    let repo = root.parent().unwrap();
    let mut ids: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut total = 0;
    for f in load(&root.join("vectors")) {
        let area = f.value["area"].as_str().unwrap_or("");
        let folder = f.path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
        if area != folder {
            problems.push(format!("{}: area `{area}` but the file is in folder `{folder}`", f.path.display()));
        }
        if f.value.get("note").is_some() {
            problems.push(format!("{}: a `note` belongs in vectors-pending/, not in the blessed set", f.path.display()));
        }
        for case in f.value["cases"].as_array().into_iter().flatten() {
            total += 1;
            let id = case["id"].as_str().unwrap_or("").to_string();
            let at = format!("{}: {id}", f.path.display());
            if let Some(prev) = ids.insert(id.clone(), f.path.clone()) {
                problems.push(format!("{at}: id already used in {}", prev.display()));
            }
            if case["clause"].as_str().is_none_or(|c| c.trim().is_empty()) {
                problems.push(format!("{at}: no clause"));
            }
            let keys: Vec<&str> = case.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
            if keys != ["id", "description", "clause", "input", "expected"] {
                problems.push(format!("{at}: keys {keys:?}, expected id, description, clause, input, expected in that order"));
            }
            if let Some(file) = case["input"]["document"]["file"].as_str() {
                if !repo.join(file).is_file() {
                    problems.push(format!("{at}: document file {file} does not exist"));
                }
            }
            let e = &case["expected"];
            let has = |k: &str| e.get(k).is_some();
            match case["input"]["op"].as_str().unwrap_or("") {
                "replay" => {
                    for k in ["summary", "outcome", "decisions", "report", "report_sha256"] {
                        if !has(k) {
                            problems.push(format!("{at}: replay case without `{k}`"));
                        }
                    }
                    let events = case["input"]["events"].as_array().map(Vec::len).unwrap_or(0);
                    let summary = e["summary"].as_array().cloned().unwrap_or_default();
                    let decisions = e["decisions"].as_array().cloned().unwrap_or_default();
                    if summary.len() != events || decisions.len() != events {
                        problems.push(format!("{at}: {events} events, {} summary entries, {} decision lines", summary.len(), decisions.len()));
                    }
                    for (k, (s, d)) in summary.iter().zip(&decisions).enumerate() {
                        let d: Value = serde_json::from_str(d.as_str().unwrap_or("")).unwrap_or(Value::Null);
                        let got = serde_json::json!([d["decision"], d["deviation"], d["reason"]]);
                        if *s != got || d["seq"] != serde_json::json!(k) {
                            problems.push(format!("{at}: decision {k} is {d}, but the hand-written summary says {s}"));
                        }
                    }
                    let report = e["report"].as_str().unwrap_or("");
                    if e["report_sha256"].as_str() != Some(sha256(report).as_str()) {
                        problems.push(format!("{at}: report_sha256 is not the sha256 of report"));
                    }
                    check_snapshot(&at, case, &mut problems);
                    let r: Value = serde_json::from_str(report).unwrap_or(Value::Null);
                    if r["outcome"] != e["outcome"] {
                        problems.push(format!("{at}: the report's outcome {} is not the hand-written {}", r["outcome"], e["outcome"]));
                    }
                    for (ptr, want) in e["report_fields"].as_object().into_iter().flatten() {
                        if r.pointer(ptr) != Some(want) {
                            problems.push(format!("{at}: report{ptr} is {:?}, the hand-written value {want}", r.pointer(ptr)));
                        }
                    }
                }
                "lint" => {
                    for k in ["codes", "findings"] {
                        if !has(k) {
                            problems.push(format!("{at}: lint case without `{k}`"));
                        }
                    }
                    check_codes(&at, e, &mut problems);
                }
                "envelope" => {
                    for k in ["has_envelope", "envelope", "envelope_sha256", "findings"] {
                        if !has(k) {
                            problems.push(format!("{at}: envelope case without `{k}`"));
                        }
                    }
                    let env = e["envelope"].as_str();
                    if env.is_some() != (e["has_envelope"] == Value::Bool(true)) {
                        problems.push(format!("{at}: has_envelope {} but the blessed envelope is {}", e["has_envelope"], e["envelope"]));
                    }
                    if e["envelope_sha256"].as_str() != env.map(sha256).as_deref() {
                        problems.push(format!("{at}: envelope_sha256 is not the sha256 of envelope"));
                    }
                    if has("codes") {
                        check_codes(&at, e, &mut problems);
                    }
                    let parsed: Value = env.and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null);
                    for (ptr, want) in e["fields"].as_object().into_iter().flatten() {
                        if parsed.pointer(ptr) != Some(want) {
                            problems.push(format!("{at}: envelope{ptr} is {:?}, the hand-written value {want}", parsed.pointer(ptr)));
                        }
                    }
                }
                op => problems.push(format!("{at}: unknown op `{op}`")),
            }
        }
    }
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
    assert!(total >= MIN_CASES, "{total} cases; the suite promises at least {MIN_CASES}");
}

/// A replay split by a snapshot carries the blessed snapshot (of the schema, after `snapshot_after` events,
/// with its digest) and the hand-written snapshot fields hold of it; a case without a split carries none.
fn check_snapshot(at: &str, case: &Value, problems: &mut Vec<String>) {
    let e = &case["expected"];
    let Some(k) = case["input"].get("snapshot_after") else {
        for key in ["snapshot_fields", "snapshot", "snapshot_sha256"] {
            if e.get(key).is_some() {
                problems.push(format!("{at}: `{key}` without `snapshot_after`"));
            }
        }
        return;
    };
    let events = case["input"]["events"].as_array().map_or(0, Vec::len) as u64;
    if k.as_u64().is_none_or(|k| k > events) {
        problems.push(format!("{at}: snapshot_after {k} is not from 0 to the {events} events"));
    }
    let Some(text) = e["snapshot"].as_str() else {
        problems.push(format!("{at}: a case with `snapshot_after` without its blessed `snapshot`"));
        return;
    };
    if e["snapshot_sha256"].as_str() != Some(sha256(text).as_str()) {
        problems.push(format!("{at}: snapshot_sha256 is not the sha256 of snapshot"));
    }
    let snap: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    if snap["schema"] != "runbook-session-snapshot/v1" || snap["events"] != *k {
        problems.push(format!("{at}: the blessed snapshot is not one of runbook-session-snapshot/v1 after {k} events"));
    }
    for (ptr, want) in e["snapshot_fields"].as_object().into_iter().flatten() {
        if snap.pointer(ptr) != Some(want) {
            problems.push(format!("{at}: snapshot{ptr} is {:?}, the hand-written value {want}", snap.pointer(ptr)));
        }
    }
}

/// The states the snapshot area promises to split a run in (VECTORS.md), seen in one blessed snapshot.
fn snapshot_states(case: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Some(k) = case["input"]["snapshot_after"].as_u64() else { return out };
    let snap: Value = serde_json::from_str(case["expected"]["snapshot"].as_str().unwrap_or("")).unwrap_or(Value::Null);
    let events = case["input"]["events"].as_array().map_or(0, Vec::len) as u64;
    let nonempty = |p: &str| snap[p].as_array().is_some_and(|a| !a.is_empty());
    let checks = [
        ("phase new", snap["phase"] == "new"),
        ("phase running", snap["phase"] == "running"),
        ("phase over", snap["phase"] == "over"),
        ("k = 0", k == 0),
        ("k = all the events", k == events),
        ("a pending call", nonempty("pending")),
        ("an open gate", snap["gate_open"] == true),
        ("an unused call-bound approval", nonempty("call_approvals")),
        ("an awaited verdict", snap["awaiting_verdict"] == true),
        ("a retry budget used", snap["steps"].as_array().into_iter().flatten().any(|s| s["budget_used"].as_u64().unwrap_or(0) > 0)),
        ("a satisfied checkpoint", snap["checkpoints"].as_array().into_iter().flatten().any(|c| c["status"] == "satisfied")),
        ("a refused start", nonempty("refusals")),
        ("a recorded deviation", nonempty("deviations")),
        ("an `at` past 2^53", snap["last_at"].as_str().is_some_and(|t| t.parse::<u64>().is_ok_and(|t| t > 1 << 53))),
    ];
    out.extend(checks.iter().filter(|(_, on)| *on).map(|(what, _)| what.to_string()));
    out
}

/// The hand-written `[code, line, column]` list agrees with the blessed findings, in the module's order.
fn check_codes(at: &str, e: &Value, problems: &mut Vec<String>) {
    let findings = e["findings"].as_array().cloned().unwrap_or_default();
    let got: Vec<Value> = findings.iter().map(|f| serde_json::json!([f["code"], f["line"], f["column"]])).collect();
    if Some(&got) != e["codes"].as_array() {
        problems.push(format!("{at}: blessed findings {got:?} differ from the hand-written codes {}", e["codes"]));
    }
    let key = |v: &Value| (v[1].as_u64().unwrap_or(0), v[2].as_u64().unwrap_or(0), v[0].as_str().unwrap_or("").to_string());
    let codes = e["codes"].as_array().cloned().unwrap_or_default();
    if codes.windows(2).any(|w| key(&w[0]) > key(&w[1])) {
        problems.push(format!("{at}: codes are not sorted by line, column, code"));
    }
}

#[test]
fn the_suite_covers_what_it_promises() {
    let root = conformance_dir();
    let files = load(&root.join("vectors"));
    let mut decisions = BTreeSet::new();
    let mut reasons = BTreeSet::new();
    let mut deviations = BTreeSet::new();
    let mut outcomes = BTreeSet::new();
    let mut refusals = BTreeSet::new();
    let mut refusals_alone = BTreeSet::new();
    let mut most_refusals = 0;
    let mut lint_codes = BTreeSet::new();
    let mut ops = BTreeSet::new();
    let mut judged: BTreeSet<(String, String)> = BTreeSet::new();
    let mut combinator_judged: BTreeSet<(String, String)> = BTreeSet::new();
    let mut areas = BTreeSet::new();
    let mut seed_manifest = BTreeSet::new();
    let mut snapshots = BTreeSet::new();
    for f in &files {
        areas.insert(f.value["area"].as_str().unwrap_or("").to_string());
        for case in f.value["cases"].as_array().into_iter().flatten() {
            let e = &case["expected"];
            snapshots.extend(snapshot_states(case));
            if case["input"]["document"]["file"] == "examples/executive-snapshot/runbook.json" {
                seed_manifest.insert(case["input"]["op"].as_str().unwrap_or("").to_string());
            }
            for s in e["summary"].as_array().into_iter().flatten() {
                decisions.insert(s[0].as_str().unwrap_or("").to_string());
                if let Some(d) = s[1].as_str() {
                    deviations.insert(d.to_string());
                }
                if let Some(r) = s[2].as_str() {
                    reasons.insert(r.to_string());
                }
            }
            if let Some(o) = e["outcome"].as_str() {
                outcomes.insert(o.to_string());
            }
            for (ptr, want) in e["report_fields"].as_object().into_iter().flatten() {
                if ptr.ends_with("/class") {
                    deviations.extend(want.as_str().map(str::to_string));
                }
                if ptr == "/refusals" {
                    let list: Vec<String> = want.as_array().into_iter().flatten().filter_map(|r| r.as_str().map(str::to_string)).collect();
                    if list.len() == 1 {
                        refusals_alone.insert(list[0].clone());
                    }
                    most_refusals = most_refusals.max(list.len());
                    refusals.extend(list);
                }
            }
            for c in e["codes"].as_array().into_iter().flatten() {
                lint_codes.extend(c[0].as_str().map(str::to_string));
            }
            let Some(text) = document_text(case) else { continue };
            let doc_ops: BTreeSet<String> = words_after_key(&text, "op").into_iter().filter(|o| OPS.contains(&o.as_str())).collect();
            ops.extend(doc_ops.iter().cloned());
            // Which judgement each operator (and each combinator) was seen to give: only from cases whose
            // document uses one operator, or one kind of combinator, so that the judgement is that one's.
            let judgements: Vec<String> = e["report_fields"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(p, _)| p.starts_with("/steps/") && p.ends_with("/assert"))
                .filter_map(|(_, v)| v.as_str().map(str::to_string))
                .collect();
            if doc_ops.len() == 1 {
                for j in &judgements {
                    judged.insert((doc_ops.iter().next().unwrap().clone(), j.clone()));
                }
            }
            let combs = combinators(&text);
            if combs.len() == 1 {
                for j in &judgements {
                    combinator_judged.insert((combs.iter().next().unwrap().to_string(), j.clone()));
                }
            }
        }
    }
    let mut missing = Vec::new();
    let mut need = |what: &str, have: &BTreeSet<String>, want: &[&str]| {
        for w in want {
            if !have.contains(*w) {
                missing.push(format!("{what} `{w}`"));
            }
        }
    };
    need("area", &areas, AREAS);
    need("decision", &decisions, DECISIONS);
    need("reason", &reasons, REASONS);
    need("deviation class", &deviations, DEVIATIONS);
    need("outcome", &outcomes, OUTCOMES);
    need("refusal code", &refusals, REFUSALS);
    let alone: Vec<&str> = REFUSALS.iter().copied().filter(|r| !NEVER_ALONE.contains(r)).collect();
    need("refusal code on its own", &refusals_alone, &alone);
    need("lint code", &lint_codes, LINT_CODES);
    need("predicate operator", &ops, OPS);
    need("use of the seed 001 manifest by op", &seed_manifest, &["lint", "envelope", "replay"]);
    need(
        "a run split by a snapshot at",
        &snapshots,
        &[
            "phase new",
            "phase running",
            "phase over",
            "k = 0",
            "k = all the events",
            "a pending call",
            "an open gate",
            "an unused call-bound approval",
            "an awaited verdict",
            "a retry budget used",
            "a satisfied checkpoint",
            "a refused start",
            "a recorded deviation",
            "an `at` past 2^53",
        ],
    );
    for op in OPS {
        for j in ["pass", "fail", "unevaluable"] {
            if j == "unevaluable" && NEVER_UNEVALUABLE.contains(op) {
                continue;
            }
            if !judged.contains(&(op.to_string(), j.to_string())) {
                missing.push(format!("operator `{op}` judged `{j}`"));
            }
        }
    }
    for c in COMBINATORS {
        for j in ["pass", "fail", "unevaluable"] {
            if !combinator_judged.contains(&(c.to_string(), j.to_string())) {
                missing.push(format!("combinator `{c}` judged `{j}`"));
            }
        }
    }
    if most_refusals < 3 {
        missing.push("a start refused for three or more reasons at once".into());
    }
    assert!(missing.is_empty(), "the vectors do not cover:\n{}", missing.join("\n"));
}

#[test]
fn pending_vectors_say_why() {
    for f in load(&conformance_dir().join("vectors-pending")) {
        assert!(f.value["note"].as_str().is_some_and(|n| !n.trim().is_empty()), "{}: a pending vector file needs a `note`", f.path.display());
    }
}

#[test]
fn key_scanning_finds_operators_in_both_dialects() {
    let yaml = "install: [x]\nassert:\n  - {path: /a, op: len_gte, value: 1}\n  - {all: [{path: /stop, op: equals, value: x}]}\n";
    let json = r#"{"assert": [{"path": "/a", "op": "not_equals", "value": 1}, {"not": {"path": "/b", "op":"in", "value": []}}]}"#;
    assert_eq!(words_after_key(yaml, "op"), ["equals", "len_gte"].iter().map(|s| s.to_string()).collect());
    assert_eq!(words_after_key(json, "op"), ["in", "not_equals"].iter().map(|s| s.to_string()).collect());
    assert_eq!(combinators(yaml), ["all"].into_iter().collect());
    assert_eq!(combinators(json), ["not"].into_iter().collect());
}
