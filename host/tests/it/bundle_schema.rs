//! The JSON Schemas of what the host writes around a run (docs/spec/bundle.md,
//! docs/spec/registry.md#index-layout, docs/spec/bundle.md#share-safety-and-redaction and
//! docs/spec/bundle.md#the-hash-chain; seed 002) against the files the host really writes:
//!
//! - `registry-index` (`index.json` written by `registry::add`),
//! - `run-bundle` (`run.json`), `bundle-event-line` (each line of `events.ndjson`, and its
//!   `$defs/redacted-line` for a redacted derivative), `receipt` (`receipt.json`, whose `report` refers to
//!   `report.schema.json` by its `$id`), `latest-run` (`latest.json`), `run-history-entry` (each line of
//!   `history.ndjson`),
//! - `approval-request` and `approval-grant` (the approval channel),
//! - `redacted-derivation` (`derivation.json` of `export_redacted`),
//! - `traffic-line` (each line of `traffic.ndjson`, as the module composes it),
//! - `verify-result` (`runbook-host verify --format json`, through the binary).
//!
//! Bundles are made the way an adapter makes them (host/tests/bundle.rs): every bundled example stream, a
//! run resolved from a registry (T2), a malformed line, a gated call answered through the approvals API, a
//! run that ended without a report, a redacted derivative. Then each schema must reject obviously wrong
//! copies of those instances: each required key missing, an extra key, an absolute or escaping path where a
//! relative one is required, and the cross-field rules the schema states.
//!
//! Cross-file references (`urn:runbook-host:schema:<name>`) are resolved by registering every schema of
//! `schema/` as a resource of the validator (jsonschema 0.30 `with_resource`), never by fetching.

use crate::common::{self, all_streams, document_of, event_lines, repo, Tmp, BIN};
use jsonschema::{Draft, Validator};
use runbook_host::bundle::{self, Bundle};
use runbook_host::registry;
use runbook_host::run::approvals;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The schemas this file owns (the five of host/tests/schema.rs are used through references only).
const NEW_SCHEMAS: &[&str] = &[
    "registry-index",
    "run-bundle",
    "bundle-event-line",
    "receipt",
    "latest-run",
    "run-history-entry",
    "verify-result",
    "approval-request",
    "approval-grant",
    "redacted-derivation",
];

// ---------------------------------------------------------------------------------------------------
// Schemas.

fn schema_json(name: &str) -> Value {
    let path = repo().join("schema").join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("schema/{name}.schema.json: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("schema/{name}.schema.json: {e}"))
}

/// Every schema of `schema/`, by file stem.
fn all_schemas() -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = std::fs::read_dir(repo().join("schema"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".schema.json").map(str::to_string))
        .map(|n| {
            let s = schema_json(&n);
            (n, s)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A draft 2020-12 validator of `schema`, with every schema of `schema/` registered under its `$id`.
fn compile(schema: &Value) -> Validator {
    let mut opts = jsonschema::options().with_draft(Draft::Draft202012);
    for (_, s) in all_schemas() {
        let id = s["$id"].as_str().unwrap().to_string();
        opts = opts.with_resource(id, Draft::Draft202012.create_resource(s));
    }
    opts.build(schema).unwrap_or_else(|e| panic!("the schema does not compile: {e}"))
}

fn validator(name: &str) -> Validator {
    compile(&schema_json(name))
}

/// The first few schema errors, for assertion messages.
fn errors(v: &Validator, instance: &Value) -> String {
    v.iter_errors(instance).take(4).map(|e| format!("{e} at `{}`", e.instance_path)).collect::<Vec<_>>().join("; ")
}

fn assert_valid(v: &Validator, instance: &Value, what: &str) {
    assert!(v.is_valid(instance), "{what} does not validate: {}\n{instance}", errors(v, instance));
}

fn assert_invalid(v: &Validator, instance: &Value, what: &str) {
    assert!(!v.is_valid(instance), "{what}: the schema accepts an instance it must reject:\n{instance}");
}

// ---------------------------------------------------------------------------------------------------
// Making real artifacts.

fn policy() -> &'static runbook_host::Policy {
    runbook_host::files::shared_policy().expect("load the policy module")
}

/// Writes a finished bundle for `lines` against a resolved document, the way an adapter does.
fn write_bundle(runs: &Path, resolved: &registry::Resolved, lines: &[String], adapter: &str) -> PathBuf {
    let p = policy();
    let mut b = Bundle::create(runs, &runbook_host::files::new_run_id().unwrap(), resolved, runbook_host::module_sha256(), adapter).unwrap();
    let mut session = p.session(&resolved.bytes).unwrap();
    for (i, line) in lines.iter().enumerate() {
        let d = session.handle_line(line);
        b.record(line, &d).unwrap();
        if i == 0 {
            b.admitted(d.contains(r#""decision":"allow""#)).unwrap();
        }
    }
    b.finish(&session.report().unwrap()).unwrap();
    b.dir().to_path_buf()
}

fn local(doc: &Path) -> registry::Resolved {
    registry::resolve(doc.to_str().unwrap(), "unused").unwrap()
}

/// `runbook-host verify --format json DIR`: (exit code, the JSON it printed).
fn verify(dir: &Path) -> (Option<i32>, Value) {
    let o = common::cmd(BIN).args(["verify", "--format", "json"]).arg(dir).stdin(Stdio::null()).output().unwrap();
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("verify printed no JSON ({e}): {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
    (o.status.code(), v)
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ndjson(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display()))).collect()
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    v.sort();
    v
}

/// Everything produced, by schema name: (what, instance).
#[derive(Default)]
struct Produced {
    items: Vec<(&'static str, String, Value)>,
    /// Lines of redacted derivatives' events.ndjson, and of source bundles' (raw arguments).
    redacted_lines: Vec<Value>,
    raw_lines: Vec<Value>,
}

impl Produced {
    fn add(&mut self, schema: &'static str, what: impl Into<String>, v: Value) {
        self.items.push((schema, what.into(), v));
    }

    fn of(&self, schema: &str) -> Vec<&Value> {
        self.items.iter().filter(|(s, _, _)| *s == schema).map(|(_, _, v)| v).collect()
    }

    /// The first instance of `schema` that satisfies `pick`.
    fn find(&self, schema: &str, pick: impl Fn(&Value) -> bool) -> Value {
        self.of(schema).into_iter().find(|v| pick(v)).unwrap_or_else(|| panic!("no produced {schema} instance of that kind")).clone()
    }

    /// Every file of a run directory that has a schema.
    fn add_bundle(&mut self, dir: &Path) {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        self.add("run-bundle", format!("{name}/run.json"), read_json(&dir.join("run.json")));
        if dir.join("receipt.json").is_file() {
            self.add("receipt", format!("{name}/receipt.json"), read_json(&dir.join("receipt.json")));
        }
        let redacted = dir.join("derivation.json").is_file();
        if redacted {
            self.add("redacted-derivation", format!("{name}/derivation.json"), read_json(&dir.join("derivation.json")));
        }
        for (n, line) in ndjson(&dir.join("events.ndjson")).into_iter().enumerate() {
            if redacted {
                self.redacted_lines.push(line.clone());
            } else if line["event"].get("arguments").is_some() || line["event"].get("result").is_some() {
                self.raw_lines.push(line.clone());
            }
            self.add("bundle-event-line", format!("{name}/events.ndjson:{}", n + 1), line);
        }
        for sub in ["pending", "consumed"] {
            for f in json_files(&dir.join(sub)) {
                self.add("approval-request", format!("{name}/{sub}/{}", f.file_name().unwrap().to_string_lossy()), read_json(&f));
            }
        }
        for f in json_files(&dir.join("approvals")) {
            self.add("approval-grant", format!("{name}/approvals/{}", f.file_name().unwrap().to_string_lossy()), read_json(&f));
        }
    }

    fn add_runs_root(&mut self, runs: &Path) {
        self.add("latest-run", "latest.json", read_json(&runs.join("latest.json")));
        for (n, line) in ndjson(&runs.join("history.ndjson")).into_iter().enumerate() {
            self.add("run-history-entry", format!("history.ndjson:{}", n + 1), line);
        }
    }

    fn add_verify(&mut self, what: &str, dir: &Path, want_ok: bool) -> Value {
        let (code, v) = verify(dir);
        assert_eq!(code, Some(if want_ok { 0 } else { 1 }), "verify {what}: {v}");
        assert_eq!(v["ok"], want_ok, "verify {what}: {v}");
        self.add("verify-result", format!("verify {what}"), v.clone());
        v
    }
}

/// A run of rotate-credentials through its gated call, answered through the approvals API (the way
/// `runbook-host approve` answers), fed to the module, consumed; a second request denied, a third left
/// pending; then the rest of the stream and the end.
fn gated_bundle(runs: &Path) -> PathBuf {
    let p = policy();
    let resolved = local(&document_of("rotate-credentials"));
    let mut b = Bundle::create(runs, &runbook_host::files::new_run_id().unwrap(), &resolved, runbook_host::module_sha256(), "hook").unwrap();
    let dir = b.dir().to_path_buf();
    let mut s = p.session(&resolved.bytes).unwrap();
    let lines = event_lines(&repo().join("examples/rotate-credentials/events.ndjson"));
    for (i, line) in lines[..6].iter().enumerate() {
        let d = s.handle_line(line);
        b.record(line, &d).unwrap();
        if i == 0 {
            b.admitted(true).unwrap();
        }
    }
    let last: Value = serde_json::from_str(&lines[5]).unwrap();
    let args = serde_json::to_string(&last["arguments"]).unwrap();
    let hash = p.call_sha256("Bash", &args).unwrap().unwrap();
    let id = approvals::request(&dir, Some("rotate"), "Bash", &args, &hash).unwrap();
    approvals::answer(&dir, &id, "alice", true, &hash).unwrap();
    let grant = approvals::poll(&dir, &id).unwrap().expect("a grant");
    let approval = format!(r#"{{"type":"approval","at":41000,"step":"rotate","call_sha256":"{hash}","approver":"{}","granted":true}}"#, grant.approver);
    let d = s.handle_line(&approval);
    assert!(d.contains(r#""decision":"allow""#), "{d}");
    b.record(&approval, &d).unwrap();
    approvals::consume(&dir, &id).unwrap();

    // A denied request for another call, and one nobody answered (a manifest-style call without a step).
    let other_args = r#"{"command":"vault write -f database/rotate-role/payments-admin"}"#;
    let other = p.call_sha256("Bash", other_args).unwrap().unwrap();
    let id2 = approvals::request(&dir, Some("rotate"), "Bash", other_args, &other).unwrap();
    approvals::answer(&dir, &id2, "bob", false, &other).unwrap();
    approvals::request(&dir, None, "Bash", "not json at all", &other).unwrap();

    for line in &lines[7..] {
        let d = s.handle_line(line);
        b.record(line, &d).unwrap();
    }
    b.finish(&s.report().unwrap()).unwrap();
    dir
}

/// Makes every kind of artifact under `root` and collects them.
fn produce(root: &Path) -> Produced {
    let mut out = Produced::default();

    // A registry.
    let reg = root.join("reg");
    for ex in ["rotate-credentials", "executive-snapshot", "incident-rollback", "read-only-investigation"] {
        registry::add(&reg, &document_of(ex)).unwrap();
    }
    out.add("registry-index", "reg/index.json", read_json(&reg.join("index.json")));

    let runs = root.join(".runbook/runs");
    // Every example stream (broken/ has no envelope), through the "replay" adapter.
    for (doc, stream) in all_streams() {
        let dir = write_bundle(&runs, &local(&doc), &event_lines(&stream), "replay");
        out.add_bundle(&dir);
        out.add_verify(&stream.display().to_string(), &dir, true);
    }
    // A run resolved from the registry (T2), through the MCP proxy's adapter name.
    let pinned = registry::resolve("rotate-credentials@1.3.0", reg.to_str().unwrap()).unwrap();
    let dir = write_bundle(&runs, &pinned, &event_lines(&repo().join("examples/rotate-credentials/events.ndjson")), "mcp-proxy");
    out.add_bundle(&dir);
    out.add_verify("a pinned run", &dir, true);
    // A malformed line is recorded as a string.
    let mut lines = event_lines(&repo().join("examples/rotate-credentials/events-deviations.ndjson"));
    lines.insert(3, "this is not json".into());
    lines.insert(4, "{}".into());
    let malformed = write_bundle(&runs, &local(&document_of("rotate-credentials")), &lines, "library");
    out.add_bundle(&malformed);
    out.add_verify("a run with malformed lines", &malformed, true);
    // The approval channel.
    let gated = gated_bundle(&runs);
    out.add_bundle(&gated);
    let v = out.add_verify("a gated run", &gated, true);
    assert_eq!(v["share_safety"]["status"], "local_only", "{v}");
    // A run that ended without a report (the module trapped): it never verifies.
    {
        let resolved = local(&document_of("read-only-investigation"));
        let mut b = Bundle::create(&runs, &runbook_host::files::new_run_id().unwrap(), &resolved, runbook_host::module_sha256(), "someday-adapter").unwrap();
        let mut s = policy().session(&resolved.bytes).unwrap();
        let first = &event_lines(&repo().join("examples/read-only-investigation/events.ndjson"))[0];
        let d = s.handle_line(first);
        b.record(first, &d).unwrap();
        b.admitted(true).unwrap();
        b.end_without_report("host-trap").unwrap();
        let dir = b.dir().to_path_buf();
        out.add_bundle(&dir);
        let v = out.add_verify("a run that ended without a report", &dir, false);
        assert_eq!(v["failure"]["place"], "report.json", "{v}");
    }
    // Redacted derivatives (of the gated run: the channel is omitted; of the malformed run).
    let redacted_root = root.join(".runbook/redacted");
    for src in [&gated, &malformed] {
        let out_dir = bundle::export_redacted(src, &redacted_root).unwrap();
        out.add_bundle(&out_dir);
        let v = out.add_verify("a redacted derivative", &out_dir, true);
        assert_eq!(v["replayed"], false, "{v}");
        // The derivative of the malformed run keeps the malformed lines' text (their chain form is the line
        // itself), so its share safety is not asserted here; the gated run's derivative is share_ready.
        if src == &gated {
            assert_eq!(v["share_safety"]["status"], "share_ready", "{v}");
        }
    }
    // A tampered bundle, and a directory that is no bundle at all.
    let tampered =
        write_bundle(&runs, &local(&document_of("certificate-renewal")), &event_lines(&repo().join("examples/certificate-renewal/events.ndjson")), "replay");
    out.add_bundle(&tampered);
    let report = tampered.join("report.json");
    let mut bytes = std::fs::read(&report).unwrap();
    let at = bytes.len() / 2;
    bytes[at] = if bytes[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(&report, &bytes).unwrap();
    out.add_verify("a tampered bundle", &tampered, false);
    let empty = root.join("empty-run");
    std::fs::create_dir_all(&empty).unwrap();
    let v = out.add_verify("an empty directory", &empty, false);
    assert_eq!(v["run_id"], Value::Null, "{v}");

    out.add_runs_root(&runs);
    out
}

// ---------------------------------------------------------------------------------------------------
// Tests.

#[test]
fn schemas_are_draft_2020_12_with_urn_ids_and_no_machine_paths() {
    for name in NEW_SCHEMAS {
        let s = schema_json(name);
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema", "{name}: $schema");
        assert_eq!(s["$id"], format!("urn:runbook-host:schema:{name}"), "{name}: $id");
        if let Err(e) = jsonschema::draft202012::meta::validate(&s) {
            panic!("schema/{name}.schema.json is not a valid 2020-12 schema: {e}");
        }
        validator(name);
        let text = std::fs::read_to_string(repo().join("schema").join(format!("{name}.schema.json"))).unwrap();
        let root = repo().to_string_lossy().into_owned();
        assert!(!text.contains(&root), "{name}: an absolute path of this machine");
        for needle in ["/home/", "/tmp/", "/work/", "/Users/", "C:\\\\"] {
            assert!(!text.contains(needle), "{name}: holds `{needle}`");
        }
    }
    // Every $id of schema/ is unique (they are registered together).
    let ids: std::collections::BTreeSet<String> = all_schemas().iter().map(|(_, s)| s["$id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids.len(), all_schemas().len());
}

#[test]
fn every_produced_file_and_line_validates() {
    let t = Tmp::new("valid");
    let p = produce(&t.0);
    let validators: Vec<(&str, Validator)> = NEW_SCHEMAS.iter().map(|n| (*n, validator(n))).collect();
    for (schema, what, v) in &p.items {
        let val = &validators.iter().find(|(n, _)| n == schema).unwrap().1;
        assert_valid(val, v, &format!("{what} ({schema})"));
    }
    // Every schema was exercised, and by the kinds of instance that make its branches matter.
    for name in NEW_SCHEMAS {
        assert!(!p.of(name).is_empty(), "nothing produced for {name}");
    }
    let runs = p.of("run-bundle");
    assert!(runs.iter().any(|r| r["artifacts"]["envelope"].is_null()), "a bundle without an envelope");
    assert!(runs.iter().any(|r| r["document"]["trust"] == "T2"), "a pinned bundle");
    assert!(runs.iter().any(|r| r["document"]["file"] == "runbook.json"), "a JSON document");
    assert!(runs.iter().any(|r| r.get("ended_without_report").is_some()), "a bundle ended without a report");
    assert!(runs.iter().any(|r| r["adapter"]["sees"] == "unknown"), "an adapter of no known name");
    assert!(p.of("bundle-event-line").iter().any(|l| l["event"].is_string()), "a malformed line stored as a string");
    assert!(p.of("approval-request").iter().any(|r| r["step"].is_null() && r["arguments"].is_string()), "a request without a step or JSON arguments");
    assert!(p.of("approval-grant").iter().any(|g| g["granted"] == false));
    assert!(p.of("redacted-derivation").iter().any(|d| d["files"].as_array().unwrap().iter().any(|f| f["action"] == "omitted")));
    let history = p.of("run-history-entry");
    assert!(history.iter().any(|h| h.get("ended_without_report").is_some()));
    let verdicts = p.of("verify-result");
    for status in ["share_ready", "local_only", "blocked"] {
        assert!(verdicts.iter().any(|v| v["share_safety"]["status"] == status), "a verify result {status}");
    }
    assert!(verdicts.iter().any(|v| v["ok"] == true && v["replayed"] == false), "a redacted derivative's result");

    // Redacted derivatives' lines fit `$defs/redacted-line`; lines with raw arguments or results do not.
    let redacted = compile(&json!({"$ref": "urn:runbook-host:schema:bundle-event-line#/$defs/redacted-line"}));
    assert!(!p.redacted_lines.is_empty() && !p.raw_lines.is_empty());
    for l in &p.redacted_lines {
        assert_valid(&redacted, l, "a redacted derivative's line");
    }
    for l in &p.raw_lines {
        assert_invalid(&redacted, l, "a line with raw arguments or results as a redacted line");
    }

    // The embedded report also validates against report.schema.json on its own (the $ref is live).
    let report = validator("report");
    for r in p.of("receipt") {
        assert_valid(&report, &r["report"], "a receipt's report");
    }
}

/// Removes the key at `ptr` (a JSON Pointer to a member).
fn without(v: &Value, ptr: &str) -> Value {
    let mut v = v.clone();
    let (parent, key) = ptr.rsplit_once('/').unwrap();
    let obj = v.pointer_mut(parent).unwrap_or_else(|| panic!("no {parent}")).as_object_mut().unwrap();
    assert!(obj.remove(key).is_some(), "no {ptr} to remove");
    v
}

/// Sets the value at `ptr` (creating the member when its parent is an object).
fn with(v: &Value, ptr: &str, x: Value) -> Value {
    let (parent, key) = ptr.rsplit_once('/').unwrap();
    with_key(v, parent, key, x)
}

/// Sets member `key` (any text, `/` included) of the object or array at `parent`.
fn with_key(v: &Value, parent: &str, key: &str, x: Value) -> Value {
    let mut v = v.clone();
    match v.pointer_mut(parent).unwrap_or_else(|| panic!("no {parent}")) {
        Value::Object(o) => {
            o.insert(key.to_string(), x);
        }
        Value::Array(a) => a[key.parse::<usize>().unwrap()] = x,
        other => panic!("{parent} is {other}"),
    }
    v
}

/// Each top-level required key missing, and an extra top-level key, are rejected.
fn rejects_missing_and_extra(name: &str, val: &Validator, inst: &Value) {
    let required = schema_json(name)["required"].as_array().unwrap().clone();
    assert!(!required.is_empty(), "{name} requires keys");
    for k in required {
        let k = k.as_str().unwrap();
        assert_invalid(val, &without(inst, &format!("/{k}")), &format!("{name} without `{k}`"));
    }
    assert_invalid(val, &with(inst, "/x-extra", json!(1)), &format!("{name} with an extra key"));
    assert_invalid(val, &with(inst, "/schema", json!("something-else/v1")), &format!("{name} with another schema name"));
}

#[test]
fn each_schema_rejects_wrong_instances() {
    let t = Tmp::new("reject");
    let p = produce(&t.0);
    let abs = t.0.join("x").to_string_lossy().into_owned();

    // registry-index
    let v = validator("registry-index");
    let index = p.find("registry-index", |_| true);
    rejects_missing_and_extra("registry-index", &v, &index);
    let entry = "/runbooks/rotate-credentials/1.3.0";
    assert_valid(&v, &index, "index.json");
    assert_invalid(&v, &without(&index, &format!("{entry}/sha256")), "an entry without its pin");
    assert_invalid(&v, &with(&index, &format!("{entry}/extra"), json!("x")), "an entry with an extra key");
    assert_invalid(&v, &with(&index, &format!("{entry}/sha256"), json!("ABC")), "a pin that is not lowercase hex");
    for bad in [abs.as_str(), "/etc/passwd", "../outside.yaml", "a/../../b", "a//b", "a/./b", "C:/x.yaml", "c:x", "a\\b", "~/x", "x/", "a/\u{7}"] {
        assert_invalid(&v, &with(&index, &format!("{entry}/path"), json!(bad)), &format!("index path `{bad}`"));
    }
    assert_invalid(&v, &with_key(&index, "/runbooks", "..", json!({"1.0.0": {"sha256": "0".repeat(64), "path": "x/runbook.yaml"}})), "an id `..`");
    assert_invalid(&v, &with_key(&index, "/runbooks", "a b", json!({})), "an id with a space");
    assert_invalid(
        &v,
        &with_key(&index, "/runbooks/rotate-credentials", "1.3.0/../..", index["runbooks"]["rotate-credentials"]["1.3.0"].clone()),
        "a version that is a path",
    );
    // The schema's relative path is exactly registry::check_index_path.
    for path in [
        "a",
        "a/b/runbook.yaml",
        "..a",
        "a/...",
        "a/.b",
        "a/b.",
        ".",
        "..",
        "",
        "/",
        "a/",
        "/a",
        "~a",
        "a~",
        "a/~b",
        "a:b",
        "a\\b",
        "a/../b",
        "a/./b",
        "a//b",
        "x\u{85}y",
        "x\u{2028}y",
        "x\u{7f}",
        "ü/ß.yaml",
        "a b/c",
    ] {
        let schema_ok = v.is_valid(&with(&index, &format!("{entry}/path"), json!(path)));
        assert_eq!(schema_ok, registry::check_index_path(path).is_ok(), "index path {path:?}: schema {schema_ok}");
    }

    // run-bundle
    let v = validator("run-bundle");
    let run = p.find("run-bundle", |r| r["document"]["trust"] == "T1" && r["artifacts"]["envelope"].is_string() && r.get("ended_without_report").is_none());
    rejects_missing_and_extra("run-bundle", &v, &run);
    for k in ["run", "document", "envelope", "events", "report", "receipt"] {
        assert_invalid(&v, &without(&run, &format!("/artifacts/{k}")), &format!("artifacts without {k}"));
    }
    for k in ["reference", "trust", "sha256", "pinned_sha256", "file", "runbook_id", "version"] {
        assert_invalid(&v, &without(&run, &format!("/document/{k}")), &format!("document without {k}"));
    }
    for k in ["name", "sees", "coverage"] {
        assert_invalid(&v, &without(&run, &format!("/adapter/{k}")), &format!("adapter without {k}"));
    }
    assert_invalid(&v, &with(&run, "/artifacts/extra", json!("extra.json")), "an unknown artifact");
    assert_invalid(&v, &with(&run, "/artifacts/report", json!(format!("{abs}/report.json"))), "an absolute artifact path");
    assert_invalid(&v, &with(&run, "/artifacts/document", json!("../runbook.yaml")), "an escaping artifact path");
    assert_invalid(&v, &with(&run, "/document/reference", json!(format!("{abs}/runbook.yaml"))), "a reference with a directory");
    assert_invalid(&v, &with(&run, "/document/pinned_sha256", run["document"]["sha256"].clone()), "T1 with a pin");
    let t2 = with(&with(&run, "/document/trust", json!("T2")), "/document/reference", json!("rotate-credentials@1.3.0"));
    assert_invalid(&v, &t2, "T2 without a pin");
    assert_valid(&v, &with(&t2, "/document/pinned_sha256", run["document"]["sha256"].clone()), "T2 with a pin");
    assert_invalid(
        &v,
        &with(&with(&t2, "/document/pinned_sha256", run["document"]["sha256"].clone()), "/document/reference", json!("runbook.yaml")),
        "T2 named by a file",
    );
    assert_invalid(&v, &with(&run, "/envelope_sha256", Value::Null), "an envelope without its sha256");
    assert_invalid(&v, &with(&run, "/artifacts/envelope", Value::Null), "no envelope, but its sha256 and an id");
    assert_invalid(&v, &with(&run, "/chain_h0", json!("00")), "a short chain_h0");
    assert_invalid(&v, &with(&run, "/host/name", json!("other-host")), "another host");
    assert_invalid(&v, &with(&run, "/adapter/sees", json!("everything")), "an adapter claiming to see what it does not");
    assert_invalid(&v, &with(&run, "/adapter/coverage", json!(42)), "a coverage that is no claim");
    assert_invalid(&v, &with(&run, "/lifecycle/0/event", json!("admitted")), "a lifecycle that does not start with created");
    assert_invalid(&v, &with(&run, "/lifecycle/0/at", json!("2026-11-30 12:34:56")), "a lifecycle time that is not UTC RFC 3339");
    assert_invalid(&v, &with(&run, "/lifecycle/0/where", json!("here")), "a lifecycle entry with an extra key");
    assert_invalid(&v, &with(&run, "/lifecycle/1/at", json!("yesterday")), "a later lifecycle time that is not UTC RFC 3339");
    assert_invalid(&v, &with(&run, "/lifecycle/1/event", json!("paused")), "an unknown lifecycle event");
    assert_invalid(&v, &with(&run, "/lifecycle", json!([])), "an empty lifecycle");
    assert_invalid(&v, &with(&run, "/outcome", json!("great")), "an unknown outcome");
    assert_invalid(&v, &with(&run, "/ended_without_report", json!("host-trap")), "ended without a report, with an outcome");
    let git = json!({"status": "dirty", "staged": 1, "unstaged": 0, "untracked": 0, "total": 1});
    assert_valid(&v, &with(&run, "/source/git", git.clone()), "a dirty checkout");
    assert_invalid(&v, &with(&run, "/source/git", with(&git, "/branch", json!("main"))), "a branch name");
    assert_invalid(&v, &with(&run, "/source/git", with(&git, "/total", json!(0))), "dirty with nothing changed");
    assert_invalid(&v, &with(&run, "/source/git", json!({"status": "clean", "staged": 2, "unstaged": 0, "untracked": 0, "total": 2})), "clean with changes");
    assert_invalid(&v, &with(&run, "/source/git", json!({"status": "dirty"})), "dirty without counts");
    assert_valid(&v, &with(&run, "/source/git", json!({"status": "not-a-checkout"})), "not a checkout");
    assert_invalid(&v, &with(&run, "/run_id", json!("../escape")), "a run id that is a path");

    // bundle-event-line
    let v = validator("bundle-event-line");
    let line = p.find("bundle-event-line", |l| l["event"].is_object());
    rejects_missing_and_extra_no_schema("bundle-event-line", &v, &line);
    assert_invalid(&v, &with(&line, "/h", json!("A".repeat(64))), "an uppercase h");
    assert_invalid(&v, &with(&line, "/event", json!(42)), "an event that is neither an object nor a string");
    assert_invalid(&v, &with(&line, "/decision/decision", json!("maybe")), "a decision the module never makes (via decision.schema.json)");
    assert_invalid(&v, &without(&line, "/decision/seq"), "a decision without seq (via decision.schema.json)");

    // receipt
    let v = validator("receipt");
    let receipt = p.find("receipt", |r| r["artifacts"].get("envelope.json").is_some());
    rejects_missing_and_extra("receipt", &v, &receipt);
    assert_invalid(&v, &without(&receipt, "/artifacts/run.json"), "a receipt that does not pin run.json");
    assert_invalid(&v, &with_key(&receipt, "/artifacts", &format!("{abs}/run.json"), json!("0".repeat(64))), "a receipt pinning an absolute path");
    assert_invalid(&v, &with(&receipt, "/artifacts/runbook.json", json!("0".repeat(64))), "a receipt pinning two documents");
    assert_invalid(&v, &with(&receipt, "/artifacts/report.json", json!("not-a-digest")), "a pin that is no digest");
    assert_invalid(&v, &without(&receipt, "/report/outcome"), "a report without outcome (via report.schema.json)");
    assert_invalid(&v, &with(&receipt, "/report/extra", json!(1)), "a report with an extra key (via report.schema.json)");
    assert_invalid(&v, &with(&receipt, "/host/extra", json!(1)), "a host with an extra key");

    // latest-run
    let v = validator("latest-run");
    let latest = p.find("latest-run", |_| true);
    rejects_missing_and_extra("latest-run", &v, &latest);
    assert_invalid(&v, &with(&latest, "/path", json!(format!("{abs}/run"))), "an absolute latest path");
    assert_invalid(&v, &with(&latest, "/path", json!(".runbook/runs/r-1")), "a latest path relative to elsewhere");
    assert_invalid(&v, &with(&latest, "/updated_at", json!(0)), "a time that is a number");

    // run-history-entry
    let v = validator("run-history-entry");
    let created = p.find("run-history-entry", |h| h["event"] == "created");
    let ended = p.find("run-history-entry", |h| h["event"] == "ended" && h.get("ended_without_report").is_none());
    rejects_missing_and_extra("run-history-entry", &v, &created);
    rejects_missing_and_extra("run-history-entry", &v, &ended);
    for k in ["reference", "trust", "adapter"] {
        assert_invalid(&v, &without(&created, &format!("/{k}")), &format!("created without {k}"));
    }
    assert_invalid(&v, &without(&ended, "/outcome"), "ended without outcome");
    assert_invalid(&v, &with(&ended, "/reference", created["reference"].clone()), "ended with a created line's key");
    assert_invalid(&v, &with(&created, "/outcome", json!("completed")), "created with an outcome");
    assert_invalid(&v, &with(&created, "/path", json!(format!("{abs}/{}", created["run_id"].as_str().unwrap()))), "an absolute history path");
    assert_invalid(&v, &with(&created, "/reference", json!(format!("{abs}/runbook.yaml"))), "a history reference with a directory");
    assert_invalid(&v, &with(&ended, "/ended_without_report", json!("host-trap")), "ended without a report, with an outcome");

    // verify-result
    let v = validator("verify-result");
    let ok = p.find("verify-result", |r| r["ok"] == true && r["share_safety"]["status"] == "local_only");
    let ready = p.find("verify-result", |r| r["ok"] == true && r["share_safety"]["status"] == "share_ready");
    let blocked = p.find("verify-result", |r| r["ok"] == false);
    rejects_missing_and_extra("verify-result", &v, &ok);
    rejects_missing_and_extra("verify-result", &v, &blocked);
    assert_invalid(&v, &with(&ok, "/failure", json!({"place": "report.json", "message": "x"})), "verified with a failure");
    assert_invalid(&v, &with(&ok, "/share_safety/status", json!("blocked")), "verified but blocked");
    assert_invalid(&v, &with(&ok, "/share_safety/reasons", json!([])), "local_only without a reason");
    assert_invalid(&v, &with(&ready, "/share_safety/reasons", json!([{"code": "RAW_TOOL_ARGUMENTS", "message": "x"}])), "share_ready with a reason");
    assert_invalid(&v, &with(&blocked, "/failure", Value::Null), "not verified without a failure");
    assert_invalid(&v, &with(&blocked, "/share_safety/status", json!("share_ready")), "not verified but share_ready");
    assert_invalid(&v, &with(&ok, "/share_safety/reasons/0/code", json!("VERIFY_FAILED")), "verified with VERIFY_FAILED");
    assert_invalid(&v, &with(&ok, "/checks/0/ok", json!(false)), "a listed check that did not pass");
    assert_invalid(&v, &with(&ok, "/checks/0/id", json!("vibes")), "an unknown check");
    assert_invalid(&v, &with(&ok, "/replayed", json!(!ok["replayed"].as_bool().unwrap())), "replayed disagreeing with the checks");
    assert_invalid(&v, &with(&ok, "/events", json!(-1)), "a negative event count");

    // approval-request
    let v = validator("approval-request");
    let req = p.find("approval-request", |r| r["step"].is_string());
    rejects_missing_and_extra("approval-request", &v, &req);
    assert_invalid(&v, &with(&req, "/call_sha256", json!("0".repeat(63))), "a short call hash");
    assert_invalid(&v, &with(&req, "/id", json!("../a-1-000000")), "an id that is a path");
    assert_invalid(&v, &with(&req, "/arguments_json", json!({"command": "x"})), "arguments_json that is not the hashed text");
    assert_invalid(&v, &with(&req, "/step", json!(7)), "a step that is a number");

    // approval-grant
    let v = validator("approval-grant");
    let grant = p.find("approval-grant", |_| true);
    rejects_missing_and_extra("approval-grant", &v, &grant);
    assert_invalid(&v, &with(&grant, "/granted", json!("yes")), "granted as a string");
    assert_invalid(&v, &with(&grant, "/approver", json!("")), "an empty approver");
    assert_invalid(&v, &with(&grant, "/arguments", json!({})), "a grant carrying arguments");

    // redacted-derivation
    let v = validator("redacted-derivation");
    let d = p.find("redacted-derivation", |d| d["files"].as_array().unwrap().iter().any(|f| f["action"] == "omitted"));
    rejects_missing_and_extra("redacted-derivation", &v, &d);
    let files = d["files"].as_array().unwrap();
    let copied = files.iter().position(|f| f["action"] == "copied").unwrap();
    let omitted = files.iter().position(|f| f["action"] == "omitted").unwrap();
    let redacted_at = files.iter().position(|f| f["action"] == "redacted").unwrap();
    assert_invalid(&v, &with(&d, &format!("/files/{copied}/path"), json!(format!("{abs}/run.json"))), "an absolute file path");
    assert_invalid(&v, &with(&d, &format!("/files/{copied}/path"), json!("../run.json")), "an escaping file path");
    assert_invalid(&v, &without(&d, &format!("/files/{copied}/output_sha256")), "a copy without its output sha256");
    assert_invalid(&v, &with(&d, &format!("/files/{copied}/action"), json!("blurred")), "an unknown action");
    assert_invalid(&v, &without(&d, &format!("/files/{omitted}/reason")), "an omission without a reason");
    assert_invalid(&v, &with(&d, &format!("/files/{omitted}/source_sha256"), json!("0".repeat(64))), "an omission with a digest");
    assert_invalid(&v, &with(&d, &format!("/files/{redacted_at}/path"), json!("report.json")), "a redacted file other than events.ndjson");
    assert_invalid(&v, &with(&d, "/transformation", json!("png-blur-at-export-v1")), "another transformation");
    assert_invalid(&v, &with(&d, "/files", json!([])), "no files");
}

/// [`rejects_missing_and_extra`] for a shape without a `schema` key.
fn rejects_missing_and_extra_no_schema(name: &str, val: &Validator, inst: &Value) {
    let required = schema_json(name)["required"].as_array().unwrap().clone();
    for k in required {
        let k = k.as_str().unwrap();
        assert_invalid(val, &without(inst, &format!("/{k}")), &format!("{name} without `{k}`"));
    }
    assert_invalid(val, &with(inst, "/x-extra", json!(1)), &format!("{name} with an extra key"));
}

#[test]
fn safe_names_agree_with_the_host() {
    // run ids, latest/history paths: the schemas' safe-name pattern is exactly runbook_host::files::is_safe_name.
    let v = validator("latest-run");
    let base = json!({"schema": "runbook-latest-run/v1", "run_id": "r-1", "path": "r-1", "updated_at": "2026-11-30T12:34:56.789Z"});
    assert_valid(&v, &base, "a latest.json");
    let long = "a".repeat(128);
    let too_long = "a".repeat(129);
    for name in
        ["r-20261130T123456Z-3fa9c1", "r-1", "a", "_x", "-x", "x.y", ".hidden", "", "a/b", "..", "a b", "ü", long.as_str(), too_long.as_str(), "a\\b", "C:x"]
    {
        let schema_ok = v.is_valid(&with(&base, "/run_id", json!(name)));
        assert_eq!(schema_ok, runbook_host::files::is_safe_name(name), "run id {name:?}: schema {schema_ok}");
    }
    // A fresh run id always fits.
    assert!(v.is_valid(&with(&base, "/run_id", json!(runbook_host::files::new_run_id().unwrap()))));
    // A reference as the host writes it: a file is named by its name only.
    let v = validator("run-history-entry");
    let created = json!({"schema": "runbook-run-history-entry/v1", "event": "created", "run_id": "r-1", "at": "2026-11-30T12:34:56.789Z", "path": "r-1",
        "reference": "x", "trust": "T1", "adapter": "replay"});
    for r in ["runbook.yaml", "some/dir/runbook.yaml", "rotate-credentials@1.3.0", "../runbook.json"] {
        let written = bundle::public_reference(r);
        assert_valid(&v, &with(&created, "/reference", json!(written)), &format!("the public reference of {r}"));
        assert_eq!(v.is_valid(&with(&created, "/reference", json!(r))), !r.contains('/') && !r.contains('\\'), "reference {r}");
    }
}

/// `traffic-line` against the module's own lines (an answered request, a refused one, a null answer), and
/// the wrong copies it must reject: each member missing, an extra one, both an answer and an error, neither.
#[test]
fn traffic_lines_validate() {
    let val = validator("traffic-line");
    let mut prev = "0".repeat(64);
    let mut lines = Vec::new();
    for entry in [
        json!({"n": 1, "at": 3, "direction": "to-server", "server": "s", "method": "resources/read", "params": {"uri": "a://b"}, "answer": {"contents": []}}),
        json!({"n": 2, "at": 4, "direction": "to-client", "server": "s", "method": "sampling/createMessage", "params": {}, "error_code": -32601}),
        json!({"n": 3, "at": 5, "direction": "to-server", "server": null, "method": "logging/setLevel", "params": {"level": "info"}, "answer": null}),
    ] {
        let (line, link) = policy().traffic_line(&prev, &entry.to_string()).unwrap().unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_valid(&val, &v, &format!("traffic line {}", entry["n"]));
        prev = link;
        lines.push(v);
    }
    rejects_missing_and_extra("traffic-line", &val, &lines[0]);
    let mut both = lines[0].clone();
    both["error_code"] = json!(-32601);
    assert_invalid(&val, &both, "an answer and an error");
    let mut neither = lines[1].clone();
    neither["error_code"] = Value::Null;
    assert_invalid(&val, &neither, "neither an answer nor an error");
}
