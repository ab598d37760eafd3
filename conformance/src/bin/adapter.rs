//! The conformance adapter for the two Rust implementations: `--impl wasmtime` (the embedded component,
//! through the host library) and `--impl native` (the same core linked directly, the differential
//! reference). Speaks conformance/PROTOCOL.md on stdin and stdout.

use anyhow::{anyhow, bail, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use std::io::{BufRead, Write};

#[path = "../verify_vectors.rs"]
#[allow(dead_code)]
mod verify_vectors;

#[path = "../whole_run.rs"]
#[allow(dead_code)]
mod whole_run;

enum Imp {
    Wasmtime(runbook_host::Policy),
    Native,
}

fn document(req: &Value) -> Result<Vec<u8>> {
    let d = req.get("document").ok_or_else(|| anyhow!("missing `document`"))?;
    match (d.get("text").and_then(Value::as_str), d.get("base64").and_then(Value::as_str)) {
        (Some(t), None) => Ok(t.as_bytes().to_vec()),
        (None, Some(b)) => Ok(base64::engine::general_purpose::STANDARD.decode(b)?),
        _ => bail!("`document` needs exactly one of `text` or `base64`"),
    }
}

fn finding_json(code: &str, severity: &str, line: u32, column: u32, pointer: &str, message: &str) -> Value {
    json!({"code": code, "severity": severity, "line": line, "column": column, "pointer": pointer, "message": message})
}

fn wasm_findings(f: &[runbook_host::Finding]) -> Vec<Value> {
    f.iter()
        .map(|f| {
            let sev = if f.severity == runbook_host::Severity::Error { "error" } else { "warning" };
            finding_json(&f.code, sev, f.line, f.column, &f.pointer, &f.message)
        })
        .collect()
}

fn native_findings(f: &[runbook_policy::Finding]) -> Vec<Value> {
    f.iter().map(|f| finding_json(f.code, f.severity.as_str(), f.pos.line, f.pos.column, &f.pointer, &f.message)).collect()
}

fn structure_name(s: Option<&str>) -> Value {
    s.map(|x| json!(x)).unwrap_or(Value::Null)
}

fn serve(imp: &Imp, req: &Value) -> Result<Value> {
    let op = req.get("op").and_then(Value::as_str).ok_or_else(|| anyhow!("missing `op`"))?;
    match (op, imp) {
        ("hello", Imp::Wasmtime(_)) => Ok(json!({"implementation": "rust-wasmtime", "module_sha256": runbook_host::module_sha256()})),
        ("hello", Imp::Native) => Ok(json!({"implementation": "rust-native", "module_sha256": null})),
        ("lint", Imp::Wasmtime(p)) => {
            let r = p.lint(&document(req)?)?;
            let s = r.structure.map(|s| match s {
                runbook_host::Structure::P0 => "P0",
                runbook_host::Structure::P1 => "P1",
                runbook_host::Structure::P2 => "P2",
            });
            Ok(json!({"sha256": r.sha256, "structure": structure_name(s), "findings": wasm_findings(&r.findings)}))
        }
        ("lint", Imp::Native) => {
            let r = runbook_policy::lint(&document(req)?);
            Ok(json!({"sha256": r.sha256, "structure": structure_name(r.structure.map(|s| s.as_str())), "findings": native_findings(&r.findings)}))
        }
        ("envelope", Imp::Wasmtime(p)) => Ok(match p.envelope(&document(req)?)? {
            Ok(e) => json!({"envelope": e, "findings": []}),
            Err(f) => json!({"envelope": null, "findings": wasm_findings(&f)}),
        }),
        ("envelope", Imp::Native) => Ok(match runbook_policy::envelope(&document(req)?) {
            Ok(e) => json!({"envelope": e, "findings": []}),
            Err(f) => json!({"envelope": null, "findings": native_findings(&f)}),
        }),
        ("replay", _) => {
            let doc = document(req)?;
            let events: Vec<&str> = req
                .get("events")
                .and_then(Value::as_array)
                .ok_or_else(|| anyhow!("`replay` needs `events`, a list of strings"))?
                .iter()
                .map(|e| e.as_str().ok_or_else(|| anyhow!("each event is a string")))
                .collect::<Result<_>>()?;
            let split = snapshot_after(req, events.len())?;
            let chain = chain_h0(req)?;
            match imp {
                Imp::Wasmtime(p) => Ok(replay_wasmtime(p, &doc, &events, split, chain)?),
                Imp::Native => Ok(replay_native(&doc, &events, split, chain)),
            }
        }
        (other, _) => bail!("unknown op `{other}`"),
    }
}

/// `snapshot_after` of a replay request: absent, or a count of events from 0 to all of them.
fn snapshot_after(req: &Value, events: usize) -> Result<Option<usize>> {
    let Some(v) = req.get("snapshot_after") else { return Ok(None) };
    match v.as_u64() {
        Some(k) if k <= events as u64 => Ok(Some(k as usize)),
        _ => bail!("`snapshot_after` must be an integer from 0 to {events} (the number of events), not {v}"),
    }
}

/// `chain_h0` of a replay request: absent, or the chain's first link, 64 lowercase hex digits.
fn chain_h0(req: &Value) -> Result<Option<String>> {
    let Some(v) = req.get("chain_h0") else { return Ok(None) };
    match v.as_str() {
        Some(h) if h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => Ok(Some(h.to_string())),
        _ => bail!("`chain_h0` must be 64 lowercase hex digits, not {v}"),
    }
}

/// The hash chain a replay with `chain_h0` keeps (docs/spec/bundle.md#the-hash-chain): the previous link, carried by the
/// adapter (across a restore too), and one link per event the module recorded.
struct Chain {
    prev: String,
    links: Vec<String>,
}

impl Chain {
    fn new(h0: Option<String>) -> Option<Chain> {
        h0.map(|prev| Chain { prev, links: Vec::new() })
    }

    fn push(&mut self, link: String) {
        self.prev.clone_from(&link);
        self.links.push(link);
    }
}

/// The replay's answer: `links` beside the decisions when the request had `chain_h0`.
fn with_links(mut out: Value, chain: &Option<Chain>) -> Value {
    if let Some(c) = chain {
        out["links"] = json!(c.links);
    }
    out
}

/// One event line into a component session: `handle-line`, or with a chain `feed-line` from the previous
/// link. After a trap the host's `host-trap`/`halted` line is kept and there is no link.
fn feed_wasmtime(s: &mut runbook_host::Session, line: &str, chain: &mut Option<Chain>) -> String {
    let Some(c) = chain else { return s.handle_line(line) };
    match s.feed_line(line, &c.prev) {
        Ok(r) => {
            c.push(r.link);
            r.decision_line
        }
        Err(trapped) => trapped.decision_line(),
    }
}

/// A replay through the component; with `split`, the session is snapshotted after that many events,
/// dropped, and a session restored (`Policy::restore`, on the instance the dropped session left, whose
/// module kept the document's analysis) answers the rest.
fn replay_wasmtime(p: &runbook_host::Policy, doc: &[u8], events: &[&str], split: Option<usize>, h0: Option<String>) -> Result<Value> {
    let mut chain = Chain::new(h0);
    let mut s = p.session(doc)?;
    let k = split.unwrap_or(events.len());
    let mut decisions: Vec<String> = events[..k].iter().map(|e| feed_wasmtime(&mut s, e, &mut chain)).collect();
    let mut snapshot = None;
    if split.is_some() {
        let text = match s.snapshot() {
            Ok(t) => t,
            Err(e) => return Ok(with_links(json!({"decisions": decisions, "report": null, "trap": e.to_string()}), &chain)),
        };
        drop(s);
        s = match p.restore(doc, &text) {
            Ok(Ok(restored)) => restored,
            Ok(Err(refusal)) => return Ok(with_links(json!({"decisions": decisions, "report": null, "snapshot": text, "restore_error": refusal}), &chain)),
            Err(e) => return Ok(with_links(json!({"decisions": decisions, "report": null, "snapshot": text, "trap": e.to_string()}), &chain)),
        };
        snapshot = Some(text);
    }
    decisions.extend(events[k..].iter().map(|e| feed_wasmtime(&mut s, e, &mut chain)));
    let mut out = match s.report() {
        Ok(report) => json!({"decisions": decisions, "report": report}),
        Err(e) => json!({"decisions": decisions, "report": null, "trap": e.to_string()}),
    };
    if let Some(t) = snapshot {
        out["snapshot"] = json!(t);
    }
    Ok(with_links(out, &chain))
}

/// One event line into a native session, as [`feed_wasmtime`] (the native core cannot trap).
fn feed_native(s: &mut runbook_policy::Session, line: &str, chain: &mut Option<Chain>) -> String {
    let Some(c) = chain else { return s.handle_line(line) };
    let r = s.feed_line(line, &c.prev);
    c.push(r.link);
    r.decision_line
}

/// The same through the native core.
fn replay_native(doc: &[u8], events: &[&str], split: Option<usize>, h0: Option<String>) -> Value {
    let mut chain = Chain::new(h0);
    let mut s = runbook_policy::Session::new(doc);
    let k = split.unwrap_or(events.len());
    let mut decisions: Vec<String> = events[..k].iter().map(|e| feed_native(&mut s, e, &mut chain)).collect();
    let mut snapshot = None;
    if split.is_some() {
        let text = s.snapshot();
        drop(s);
        s = match runbook_policy::Session::restore(doc, &text) {
            Ok(restored) => restored,
            Err(refusal) => return with_links(json!({"decisions": decisions, "report": null, "snapshot": text, "restore_error": refusal}), &chain),
        };
        snapshot = Some(text);
    }
    decisions.extend(events[k..].iter().map(|e| feed_native(&mut s, e, &mut chain)));
    let mut out = json!({"decisions": decisions, "report": s.report()});
    if let Some(t) = snapshot {
        out["snapshot"] = json!(t);
    }
    with_links(out, &chain)
}

/// Reverses the key order of every JSON object inside the artifacts of a response.
fn reorder_keys(mut resp: Value) -> Value {
    fn reverse(v: &Value) -> String {
        fn rec(v: &Value, out: &mut String) {
            match v {
                Value::Object(m) => {
                    out.push('{');
                    for (i, (k, x)) in m.iter().rev().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(&Value::String(k.clone()).to_string());
                        out.push(':');
                        rec(x, out);
                    }
                    out.push('}');
                }
                Value::Array(a) => {
                    out.push('[');
                    for (i, x) in a.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        rec(x, out);
                    }
                    out.push(']');
                }
                other => out.push_str(&other.to_string()),
            }
        }
        let mut s = String::new();
        rec(v, &mut s);
        s
    }
    let fix = |t: &Value| t.as_str().and_then(|s| serde_json::from_str::<Value>(s).ok()).map(|v| Value::String(reverse(&v))).unwrap_or(t.clone());
    if let Some(r) = resp.get_mut("result") {
        for k in ["envelope", "report", "snapshot"] {
            if let Some(v) = r.get(k).cloned() {
                r[k] = fix(&v);
            }
        }
        if let Some(Value::Array(lines)) = r.get("decisions").cloned() {
            r["decisions"] = Value::Array(lines.iter().map(fix).collect());
        }
    }
    resp
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    // A whole-run vector (conformance/vectors/run/README.md): `--impl X --run SCRIPT_DIR OUT_DIR`.
    if let Some(i) = args.iter().position(|a| a == "--run") {
        let (dir, out) =
            (args.get(i + 1).ok_or_else(|| anyhow!("--run SCRIPT_DIR OUT_DIR"))?, args.get(i + 2).ok_or_else(|| anyhow!("--run SCRIPT_DIR OUT_DIR"))?);
        let (dir, out) = (std::path::Path::new(dir), std::path::Path::new(out));
        return match args.iter().position(|a| a == "--impl").and_then(|i| args.get(i + 1)).map(String::as_str) {
            Some("wasmtime") => whole_run::drive_wasmtime(dir, out),
            Some("native") => whole_run::drive_native(dir, out),
            _ => bail!("usage: runbook-conformance-adapter --impl wasmtime|native --run SCRIPT_DIR OUT_DIR"),
        };
    }
    // A verify vector (conformance/vectors/verify/README.md): `--impl X --verify BUNDLE_DIR` prints the
    // module's verification of the bundle as JSON.
    if let Some(i) = args.iter().position(|a| a == "--verify") {
        let dir = std::path::Path::new(args.get(i + 1).ok_or_else(|| anyhow!("--verify BUNDLE_DIR"))?);
        let v = match args.iter().position(|a| a == "--impl").and_then(|i| args.get(i + 1)).map(String::as_str) {
            Some("wasmtime") => verify_vectors::verify_wasmtime(dir)?,
            Some("native") => verify_vectors::verify_native(dir)?,
            _ => bail!("usage: runbook-conformance-adapter --impl wasmtime|native --verify BUNDLE_DIR"),
        };
        println!("{v}");
        return Ok(());
    }
    let imp = match args.iter().position(|a| a == "--impl").and_then(|i| args.get(i + 1)).map(String::as_str) {
        Some("wasmtime") => Imp::Wasmtime(runbook_host::Policy::load()?),
        Some("native") => Imp::Native,
        _ => bail!("usage: runbook-conformance-adapter --impl wasmtime|native"),
    };
    // For the runner's own tests: an adapter that rewrites each JSON artifact with its keys reversed,
    // the same data in different bytes, which the suite must catch.
    let sabotage = args.iter().any(|a| a == "--break-reorder-keys");
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let resp = match serde_json::from_str::<Value>(&line) {
            Err(e) => json!({"id": null, "ok": false, "error": format!("not a JSON request: {e}")}),
            Ok(req) => {
                let id = req.get("id").cloned().unwrap_or(Value::Null);
                match serve(&imp, &req) {
                    Ok(result) => json!({"id": id, "ok": true, "result": result}),
                    Err(e) => json!({"id": id, "ok": false, "error": format!("{e:#}")}),
                }
            }
        };
        let resp = if sabotage { reorder_keys(resp) } else { resp };
        writeln!(out, "{resp}")?;
        out.flush()?;
    }
    Ok(())
}
