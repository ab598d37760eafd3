//! The conformance adapter for the two Rust implementations: `--impl wasmtime` (the embedded component,
//! through the host library) and `--impl native` (the same core linked directly, the differential
//! reference). Speaks conformance/PROTOCOL.md on stdin and stdout.

use anyhow::{anyhow, bail, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use std::io::{BufRead, Write};

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
            match imp {
                Imp::Wasmtime(p) => Ok(replay_wasmtime(p, &doc, &events, split)?),
                Imp::Native => Ok(replay_native(&doc, &events, split)),
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

/// A replay through the component; with `split`, the session is snapshotted after that many events,
/// dropped, and a session restored (in a new instance, as `Policy::restore` makes) answers the rest.
fn replay_wasmtime(p: &runbook_host::Policy, doc: &[u8], events: &[&str], split: Option<usize>) -> Result<Value> {
    let mut s = p.session(doc)?;
    let k = split.unwrap_or(events.len());
    let mut decisions: Vec<String> = events[..k].iter().map(|e| s.handle_line(e)).collect();
    let mut snapshot = None;
    if split.is_some() {
        let text = match s.snapshot() {
            Ok(t) => t,
            Err(e) => return Ok(json!({"decisions": decisions, "report": null, "trap": e.to_string()})),
        };
        drop(s);
        s = match p.restore(doc, &text) {
            Ok(Ok(restored)) => restored,
            Ok(Err(refusal)) => return Ok(json!({"decisions": decisions, "report": null, "snapshot": text, "restore_error": refusal})),
            Err(e) => return Ok(json!({"decisions": decisions, "report": null, "snapshot": text, "trap": e.to_string()})),
        };
        snapshot = Some(text);
    }
    decisions.extend(events[k..].iter().map(|e| s.handle_line(e)));
    let mut out = match s.report() {
        Ok(report) => json!({"decisions": decisions, "report": report}),
        Err(e) => json!({"decisions": decisions, "report": null, "trap": e.to_string()}),
    };
    if let Some(t) = snapshot {
        out["snapshot"] = json!(t);
    }
    Ok(out)
}

/// The same through the native core.
fn replay_native(doc: &[u8], events: &[&str], split: Option<usize>) -> Value {
    let mut s = runbook_policy::Session::new(doc);
    let k = split.unwrap_or(events.len());
    let mut decisions: Vec<String> = events[..k].iter().map(|e| s.handle_line(e)).collect();
    let mut snapshot = None;
    if split.is_some() {
        let text = s.snapshot();
        drop(s);
        s = match runbook_policy::Session::restore(doc, &text) {
            Ok(restored) => restored,
            Err(refusal) => return json!({"decisions": decisions, "report": null, "snapshot": text, "restore_error": refusal}),
        };
        snapshot = Some(text);
    }
    decisions.extend(events[k..].iter().map(|e| s.handle_line(e)));
    let mut out = json!({"decisions": decisions, "report": s.report()});
    if let Some(t) = snapshot {
        out["snapshot"] = json!(t);
    }
    out
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
