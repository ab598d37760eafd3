//! Comparing a response with a case's expectation and with another implementation's response.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Where two strings first differ, with both sides around it.
pub fn first_difference(a: &str, b: &str) -> Option<String> {
    if a == b {
        return None;
    }
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    let i = ab.iter().zip(bb).position(|(x, y)| x != y).unwrap_or(ab.len().min(bb.len()));
    let lo = i.saturating_sub(30);
    let side = |s: &[u8]| String::from_utf8_lossy(&s[lo.min(s.len())..(i + 30).min(s.len())]).into_owned();
    Some(format!("first differing byte at offset {i}: `{}` vs `{}`", side(ab), side(bb)))
}

fn str_eq(what: &str, got: &Value, want: &Value) -> Option<String> {
    match (got.as_str(), want.as_str()) {
        (Some(g), Some(w)) => first_difference(g, w).map(|d| format!("{what}: {d}")),
        _ if got == want => None,
        _ => Some(format!("{what}: got {got}, expected {want}")),
    }
}

fn lines_eq(what: &str, got: &Value, want: &Value) -> Vec<String> {
    let (Some(g), Some(w)) = (got.as_array(), want.as_array()) else {
        return if got == want { vec![] } else { vec![format!("{what}: got {got}, expected {want}")] };
    };
    let mut out = Vec::new();
    if g.len() != w.len() {
        out.push(format!("{what}: {} lines, expected {}", g.len(), w.len()));
    }
    for (k, (a, b)) in g.iter().zip(w).enumerate() {
        if let Some(d) = str_eq(&format!("{what}[{k}]"), a, b) {
            out.push(d);
            break;
        }
    }
    out
}

/// The hash-chain links of a replay with `chain_h0` (docs/spec/bundle.md#the-hash-chain), one per event, byte for byte: the
/// first differing event is named with both links.
fn links_eq(what: &str, got: &Value, want: &Value) -> Vec<String> {
    let (Some(g), Some(w)) = (got.as_array(), want.as_array()) else {
        return if got == want { vec![] } else { vec![format!("{what}: got {got}, expected {want}")] };
    };
    let mut out = Vec::new();
    if let Some(k) = (0..g.len().max(w.len())).find(|&k| g.get(k) != w.get(k)) {
        let side = |v: Option<&Value>| v.map_or("no link".to_string(), |v| v.as_str().map_or(v.to_string(), str::to_string));
        out.push(format!("{what}: event {k} (of {}) differs first: `{}` vs `{}`", w.len(), side(g.get(k)), side(w.get(k))));
    }
    if g.len() != w.len() {
        out.push(format!("{what}: {} links, expected {}", g.len(), w.len()));
    }
    out
}

fn sha256(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn parse(s: &Value) -> Value {
    s.as_str().and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null)
}

/// `{pointer: value}` checks on a JSON text.
fn fields(what: &str, text: &Value, want: &Value) -> Vec<String> {
    let doc = parse(text);
    let mut out = Vec::new();
    for (ptr, v) in want.as_object().into_iter().flatten() {
        match doc.pointer(ptr) {
            Some(got) if got == v => {}
            got => out.push(format!("{what}{ptr}: got {}, expected {v}", got.map(|g| g.to_string()).unwrap_or("nothing".into()))),
        }
    }
    out
}

/// Every field the expectation names must hold of the response.
pub fn check_expected(op: &str, expected: &Value, res: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(t) = res.get("trap").filter(|t| !t.is_null()) {
        out.push(format!("the module trapped: {t}"));
    }
    out.extend(refused_snapshot(res));
    let Some(e) = expected.as_object() else { return out };
    for (k, want) in e {
        match (op, k.as_str()) {
            ("replay", "summary") => {
                let got: Vec<Value> = res["decisions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|l| {
                        let d = parse(l);
                        Value::Array(vec![d["decision"].clone(), d["deviation"].clone(), d["reason"].clone()])
                    })
                    .collect();
                let want = want.as_array().cloned().unwrap_or_default();
                if got.len() != want.len() {
                    out.push(format!("summary: {} decisions, expected {}", got.len(), want.len()));
                }
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    if g != w {
                        out.push(format!("summary: event {i} answered {g}, expected {w}"));
                    }
                }
            }
            ("replay", "outcome") => {
                let got = &parse(&res["report"])["outcome"];
                if got != want {
                    out.push(format!("outcome: got {got}, expected {want}"));
                }
            }
            ("replay", "report_fields") => out.extend(fields("report", &res["report"], want)),
            ("replay", "decisions") => out.extend(lines_eq("decisions", &res["decisions"], want)),
            ("replay", "links") => out.extend(links_eq("links", &res["links"], want)),
            ("replay", "report") => out.extend(str_eq("report", &res["report"], want)),
            ("replay", "snapshot_fields") => out.extend(fields("snapshot", &res["snapshot"], want)),
            ("replay", "snapshot") => out.extend(str_eq("snapshot", &res["snapshot"], want)),
            ("replay", "snapshot_sha256") => {
                let got = res["snapshot"].as_str().map(sha256);
                if got.as_deref() != want.as_str() {
                    out.push(format!("snapshot_sha256: got {got:?}, expected {want}"));
                }
            }
            ("replay", "report_sha256") => {
                let got = res["report"].as_str().map(sha256);
                if got.as_deref() != want.as_str() {
                    out.push(format!("report_sha256: got {got:?}, expected {want}"));
                }
            }
            ("lint", "codes") | ("envelope", "codes") => {
                let got: Vec<Value> = res["findings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|f| Value::Array(vec![f["code"].clone(), f["line"].clone(), f["column"].clone()]))
                    .collect();
                if Value::Array(got.clone()) != *want {
                    out.push(format!("codes: got {}, expected {want}", Value::Array(got)));
                }
            }
            ("lint", "ok") => {
                let ok = !res["findings"].as_array().into_iter().flatten().any(|f| f["severity"] == "error");
                if Value::Bool(ok) != *want {
                    out.push(format!("ok: got {ok}, expected {want}"));
                }
            }
            ("lint", "structure") | ("lint", "sha256") => {
                if res[k] != *want {
                    out.push(format!("{k}: got {}, expected {want}", res[k]));
                }
            }
            (_, "findings") => {
                if res["findings"] != *want {
                    out.push(format!("findings: got {}, expected {want}", res["findings"]));
                }
            }
            ("envelope", "has_envelope") => {
                let has = res["envelope"].is_string();
                if Value::Bool(has) != *want {
                    out.push(format!("has_envelope: got {has}, expected {want}"));
                }
            }
            ("envelope", "fields") => out.extend(fields("envelope", &res["envelope"], want)),
            ("envelope", "envelope") => out.extend(str_eq("envelope", &res["envelope"], want)),
            ("envelope", "envelope_sha256") => {
                let got = res["envelope"].as_str().map(sha256);
                if got.as_deref() != want.as_str() {
                    out.push(format!("envelope_sha256: got {got:?}, expected {want}"));
                }
            }
            (_, other) => out.push(format!("the vector expects `{other}`, which the runner does not know for `{op}`")),
        }
    }
    out
}

/// Differences between two implementations' responses to the same request.
pub fn differences(op: &str, a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match op {
        "replay" => {
            out.extend(lines_eq("decisions", &a["decisions"], &b["decisions"]));
            out.extend(str_eq("report", &a["report"], &b["report"]));
            // Present only with `snapshot_after`; absent on both sides compares equal (null = null).
            out.extend(str_eq("snapshot", &a["snapshot"], &b["snapshot"]));
            out.extend(str_eq("restore_error", &a["restore_error"], &b["restore_error"]));
            // Present only with `chain_h0`.
            out.extend(links_eq("links", &a["links"], &b["links"]));
        }
        "envelope" => {
            out.extend(str_eq("envelope", &a["envelope"], &b["envelope"]));
            if a["findings"] != b["findings"] {
                out.push(format!("findings: {} vs {}", a["findings"], b["findings"]));
            }
        }
        _ => {
            for k in ["sha256", "structure", "findings"] {
                if a[k] != b[k] {
                    out.push(format!("{k}: {} vs {}", a[k], b[k]));
                }
            }
        }
    }
    out
}

/// A module that refuses the snapshot it has just written: always a failure.
fn refused_snapshot(res: &Value) -> Option<String> {
    res.get("restore_error").filter(|e| !e.is_null()).map(|e| format!("the module refused its own snapshot: {e}"))
}

/// The property of a replay with `snapshot_after` k: a snapshot of the session after k events (of the
/// schema, counting k events) was written and restored, and the run went on exactly as without it
/// (`whole`, the same replay without `snapshot_after`): the same decision lines and report, byte for byte,
/// and with `chain_h0` the same links (the chain goes on across the restore).
pub fn continues_identically(k: u64, whole: &Value, split: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let what = format!("with snapshot_after {k}");
    match split["snapshot"].as_str() {
        None => out.push(format!("{what}: no `snapshot` in the response")),
        Some(text) => {
            let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            if v["schema"] != "runbook-session-snapshot/v1" || v["events"] != k {
                out.push(format!(
                    "{what}: the snapshot is not one of `runbook-session-snapshot/v1` after {k} events: schema {}, events {}",
                    v["schema"], v["events"]
                ));
            }
        }
    }
    out.extend(refused_snapshot(split).map(|e| format!("{what}: {e}")));
    if let Some(t) = split.get("trap").filter(|t| !t.is_null()) {
        out.push(format!("{what}: the module trapped: {t}"));
    }
    let same = lines_eq("decisions", &split["decisions"], &whole["decisions"])
        .into_iter()
        .chain(str_eq("report", &split["report"], &whole["report"]))
        .chain(links_eq("links", &split["links"], &whole["links"]));
    for d in same {
        out.push(format!("{what} vs without: {d}"));
    }
    out
}
