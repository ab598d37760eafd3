//! Verify vectors (conformance/vectors/verify/README.md): a bundle the whole-run vectors left, changed the
//! way a case says (an edit, a deletion, a symbolic link, a redacted derivative), and what the module's
//! `verify-bundle` must find in it. Every implementation prints the module's verification as JSON; each
//! must show what the case says and all must print the same bytes.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The canonical JSON of one verification (sorted keys; the form every runner prints).
#[allow(clippy::too_many_arguments)]
pub fn verification_json(
    checks: &[String],
    failure: Option<(&str, &str)>,
    run_id: Option<&str>,
    outcome: Option<&str>,
    events: u64,
    reasons: &[(String, String)],
    warnings: &[String],
    redacted: bool,
    shadow: Option<u64>,
    signed: Vec<Value>,
    receipt_signed: bool,
) -> Value {
    json!({
        "receipt_signed": receipt_signed,
        "checks": checks,
        "events": events,
        "failure": failure.map(|(p, m)| json!({"message": m, "place": p})),
        "outcome": outcome,
        "reasons": reasons.iter().map(|(c, m)| json!({"code": c, "message": m})).collect::<Vec<_>>(),
        "redacted": redacted,
        "run_id": run_id,
        "shadow": shadow,
        "signed_answers": signed,
        "warnings": warnings,
    })
}

/// The module's verification of the bundle in `dir` through wasmtime (the host library's reading of it).
pub fn verify_wasmtime(dir: &Path) -> Result<Value> {
    let entries = runbook_host::bundle::verify::entries_at(dir).map_err(|f| anyhow!("{}: {}", f.place, f.message))?;
    let policy = runbook_host::files::shared_policy()?;
    let v = policy.verify_bundle(&entries, runbook_host::module_sha256(), None)?;
    let signed = v
        .signed_answers
        .iter()
        .map(|a| json!({"fingerprint": a.fingerprint, "message": a.message, "place": a.place, "principal": a.principal, "signature": a.signature}))
        .collect();
    let failure = v.failure.as_ref().map(|(p, m)| (p.as_str(), m.as_str()));
    Ok(verification_json(
        &v.checks,
        failure,
        v.run_id.as_deref(),
        v.outcome.as_deref(),
        v.events,
        &v.reasons,
        &v.warnings,
        v.redacted,
        v.shadow,
        signed,
        v.receipt_signed,
    ))
}

/// The same, through the core linked natively (the entries read the same way).
pub fn verify_native(dir: &Path) -> Result<Value> {
    use runbook_policy::verify::{verify, Item, Options};
    let entries = runbook_host::bundle::verify::entries_at(dir).map_err(|f| anyhow!("{}: {}", f.place, f.message))?;
    let entries: Vec<(String, Item)> = entries
        .into_iter()
        .map(|(n, i)| {
            let i = match i {
                runbook_host::BundleItem::File(b) => Item::File(b),
                runbook_host::BundleItem::Directory(c) => Item::Dir(c),
                runbook_host::BundleItem::Other => Item::Other,
            };
            (n, i)
        })
        .collect();
    let v = verify(&entries, &Options { module_sha256: runbook_host::module_sha256().to_string(), signers_sha256: None });
    let signed = v
        .signed_answers
        .iter()
        .map(|a| json!({"fingerprint": a.fingerprint, "message": a.message, "place": a.place, "principal": a.principal, "signature": a.signature}))
        .collect();
    let checks: Vec<String> = v.checks.iter().map(|c| c.to_string()).collect();
    let reasons: Vec<(String, String)> = v.reasons.iter().map(|(c, m)| (c.to_string(), m.clone())).collect();
    let failure = v.failure.as_ref().map(|(p, m)| (p.as_str(), m.as_str()));
    Ok(verification_json(
        &checks,
        failure,
        v.run_id.as_deref(),
        v.outcome.as_deref(),
        v.events,
        &reasons,
        &v.warnings,
        v.redacted,
        v.shadow,
        signed,
        v.receipt_signed,
    ))
}

/// `v` with every object's keys sorted, as text: what two runners' outputs are compared by.
pub fn canonical(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sort(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            x => x.clone(),
        }
    }
    sort(v).to_string()
}

/// The case folders (conformance/vectors/verify/<name>/case.json), sorted.
pub fn case_dirs(vectors: &Path) -> Result<Vec<PathBuf>> {
    let dir = vectors.join("verify");
    let mut out = Vec::new();
    if dir.is_dir() {
        for e in std::fs::read_dir(&dir)? {
            let p = e?.path();
            if p.join("case.json").is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type()?.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// The bundle of `case_dir`, changed as its case says, under `work`; returns the bundle's directory.
pub fn prepare(case_dir: &Path, work: &Path) -> Result<PathBuf> {
    let case: Value = serde_json::from_slice(&std::fs::read(case_dir.join("case.json"))?)?;
    let from = case_dir.join(case["bundle"].as_str().ok_or_else(|| anyhow!("case.json: no `bundle`"))?);
    let mut dir = work.join("bundle");
    copy_dir(&from, &dir).with_context(|| format!("copying {}", from.display()))?;
    for (i, m) in case["changes"].as_array().map(Vec::as_slice).unwrap_or_default().iter().enumerate() {
        let at = || format!("case.json: changes/{i}");
        if m["redact"] == true {
            // A redacted derivative, as `runbook-host export` writes it.
            dir = runbook_host::bundle::export_redacted(&dir, &work.join("redacted")).with_context(at)?;
            continue;
        }
        let file = dir.join(m["file"].as_str().ok_or_else(|| anyhow!("{}: no `file`", at()))?);
        if let Some([from, to]) = m["replace"].as_array().map(Vec::as_slice) {
            let (from, to) = (from.as_str().unwrap_or_default(), to.as_str().unwrap_or_default());
            let text = std::fs::read_to_string(&file).with_context(at)?;
            if !text.contains(from) {
                bail!("{}: `{from}` is not in {}", at(), file.display());
            }
            std::fs::write(&file, text.replacen(from, to, 1))?;
        } else if let Some(t) = m["append"].as_str() {
            let mut text = std::fs::read_to_string(&file).with_context(at)?;
            text.push_str(t);
            std::fs::write(&file, text)?;
        } else if let Some(n) = m["drop_last_lines"].as_u64() {
            let text = std::fs::read_to_string(&file).with_context(at)?;
            let lines: Vec<&str> = text.lines().collect();
            let keep = lines.len().saturating_sub(n as usize);
            std::fs::write(&file, lines[..keep].iter().map(|l| format!("{l}\n")).collect::<String>())?;
        } else if m["delete"] == true {
            std::fs::remove_file(&file).with_context(at)?;
        } else if let Some(t) = m["symlink_to"].as_str() {
            // The link points at a copy of the file's own bytes: only the kind of entry differs.
            let target = work.join(t);
            std::fs::copy(&file, &target)?;
            std::fs::remove_file(&file)?;
            std::os::unix::fs::symlink(&target, &file)?;
        } else if let Some(t) = m["write"].as_str() {
            std::fs::write(&file, t)?;
        } else {
            bail!("{}: no known change", at());
        }
    }
    Ok(dir)
}

/// Whether `got` (one implementation's verification) shows what the case's `expect` says: whether it
/// passed, the failure's place and words, the checks passed, and any other member the case names.
pub fn check_expect(case_dir: &Path, got: &Value) -> Result<Option<String>> {
    let case: Value = serde_json::from_slice(&std::fs::read(case_dir.join("case.json"))?)?;
    let e = &case["expect"];
    let ok = got["failure"].is_null();
    if e["ok"].as_bool() != Some(ok) {
        return Ok(Some(format!("expected ok {}, got failure {}", e["ok"], got["failure"])));
    }
    if let Some(p) = e["place"].as_str() {
        if got["failure"]["place"] != p {
            return Ok(Some(format!("expected the failure at {p}, got {}", got["failure"])));
        }
    }
    if let Some(w) = e["message_contains"].as_str() {
        if !got["failure"]["message"].as_str().unwrap_or_default().contains(w) {
            return Ok(Some(format!("expected the failure to say `{w}`, got {}", got["failure"])));
        }
    }
    for k in ["checks", "redacted", "outcome", "events", "shadow"] {
        if let Some(want) = e.get(k) {
            if got[k] != *want {
                return Ok(Some(format!("expected `{k}` {want}, got {}", got[k])));
            }
        }
    }
    if let Some(codes) = e["reasons"].as_array() {
        let got_codes: Vec<&Value> = got["reasons"].as_array().map(|r| r.iter().map(|x| &x["code"]).collect()).unwrap_or_default();
        if got_codes != codes.iter().collect::<Vec<_>>() {
            return Ok(Some(format!("expected the reasons {}, got {}", e["reasons"], got["reasons"])));
        }
    }
    Ok(None)
}
