//! Whole-run vectors (conformance/vectors/run/README.md): the two Rust drivers of a scripted session, and
//! the check of what a driver left against `expected/`.
//!
//! `wasmtime` drives the host library's `Run` (what the CLI runs). `native` is the reference driver on the
//! core linked directly: a session, the chain, and the module's bundle effects carried out with plain
//! file writes. Neither composes a byte of the bundle: both carry out the module's effects.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

pub struct Script {
    pub dir: PathBuf,
    pub v: Value,
    pub document: Vec<u8>,
    pub document_path: PathBuf,
}

impl Script {
    pub fn load(dir: &Path) -> Result<Script> {
        let text = std::fs::read_to_string(dir.join("script.json")).with_context(|| format!("{}/script.json", dir.display()))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{}/script.json", dir.display()))?;
        let name = v["document"].as_str().ok_or_else(|| anyhow!("script.json: `document` names no file"))?;
        let document_path = dir.join(name);
        let document = std::fs::read(&document_path).with_context(|| format!("{}", document_path.display()))?;
        Ok(Script { dir: dir.to_path_buf(), v, document, document_path })
    }

    fn facts(&self) -> &Value {
        &self.v["facts"]
    }

    fn t0(&self) -> Result<u64> {
        self.facts()["t0"].as_u64().ok_or_else(|| anyhow!("script.json: facts.t0 must be Unix milliseconds"))
    }

    fn steps(&self) -> &[Value] {
        self.v["steps"].as_array().map(Vec::as_slice).unwrap_or(&[])
    }
}

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn end_reason(r: &str) -> Result<runbook_host::EndReason> {
    use runbook_host::EndReason as E;
    Ok(match r {
        "normal" => E::Normal,
        "client-closed" => E::ClientClosed,
        "server-exited" => E::ServerExited,
        "interrupted" => E::Interrupted,
        "approval-timeout" => E::ApprovalTimeout,
        _ => bail!("unknown end reason `{r}`"),
    })
}

/// The pin a `resume` step names (conformance/vectors/run/README.md): the one the first process kept
/// (`"kept"`: run.json's `document.sha256` and `chain_h0` before any edit), another, or none.
fn step_pin(r: &Value, kept: (String, String)) -> Option<(String, String)> {
    match s(r, "pin") {
        Some("kept") => Some(kept),
        Some("another") => Some(("0".repeat(64), "0".repeat(64))),
        _ => None,
    }
}

/// The agent's edit a `resume` step may make first: the bundle's document replaced by the script's file
/// `swap_document`, and run.json's text edited to match (the old document's sha256 replaced by the new one's).
fn swap_document(script: &Script, run_dir: &Path, r: &Value) -> Result<()> {
    let Some(file) = s(r, "swap_document") else { return Ok(()) };
    let manifest = std::fs::read(run_dir.join("run.json"))?;
    let m: Value = serde_json::from_slice(&manifest)?;
    let name = m["artifacts"]["document"].as_str().ok_or_else(|| anyhow!("run.json names no document"))?;
    let (old, new) = (std::fs::read(run_dir.join(name))?, std::fs::read(script.dir.join(file))?);
    std::fs::write(run_dir.join(name), &new)?;
    let (a, b) = (runbook_policy::doc::sha256_hex(&old), runbook_policy::doc::sha256_hex(&new));
    std::fs::write(run_dir.join("run.json"), String::from_utf8(manifest)?.replace(&a, &b))?;
    Ok(())
}

/// Whether a resume's refusal (`place`, `why`) is the one the step's `refused` names (its place, and a
/// reason that starts with its text); an error when the step wants none or another.
fn refusal_matches(r: &Value, place: &str, why: &str) -> Result<()> {
    let want = &r["refused"];
    if s(want, "place") == Some(place) && s(want, "reason").is_some_and(|w| why.starts_with(w)) {
        return Ok(());
    }
    bail!("the resume was refused at {place}: {why}; the script says {want}")
}

// ---------------------------------------------------------------------------------------------------
// wasmtime: the host library's Run.

fn claim(c: &Value) -> Result<runbook_host::run::Claim> {
    use runbook_host::{Coverage, Profile, Risk};
    let profile = match s(c, "profile") {
        Some("R0") => Profile::R0,
        Some("R1") => Profile::R1,
        Some("R2") => Profile::R2,
        p => bail!("claim.profile {p:?}"),
    };
    let risk_ceiling = match s(c, "risk_ceiling") {
        Some("read-only") => Risk::ReadOnly,
        Some("mutating") => Risk::Mutating,
        Some("destructive") => Risk::Destructive,
        Some("irreversible") => Risk::Irreversible,
        r => bail!("claim.risk_ceiling {r:?}"),
    };
    let coverage = match &c["coverage"] {
        Value::String(x) if x == "complete" => Coverage::Complete,
        Value::Object(o) if o.contains_key("blind") => Coverage::Blind(
            o["blind"].as_array().ok_or_else(|| anyhow!("claim.coverage.blind"))?.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
        ),
        x => bail!("claim.coverage {x}"),
    };
    let strings = |v: &Value| -> Vec<String> { v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default() };
    Ok(runbook_host::run::Claim {
        profile,
        allowlist: strings(&c["allowlist"]),
        risk_ceiling,
        coverage,
        agent: s(c, "agent").unwrap_or("vectors").to_string(),
        available: c["available"].as_array().map(|_| strings(&c["available"])),
    })
}

pub fn drive_wasmtime(dir: &Path, out: &Path) -> Result<()> {
    use runbook_host::bundle::BundleFacts;
    use runbook_host::clock::Clock;
    use runbook_host::run::{Guard, Run, RunOptions};
    let script = Script::load(dir)?;
    let t0 = script.t0()?;
    let clock = Clock::manual(t0);
    let f = script.facts();
    let resolved = runbook_host::registry::resolve(&script.document_path.to_string_lossy(), "")?;
    let opts = RunOptions {
        facts: BundleFacts {
            clock: clock.clone(),
            host: Some((s(&f["host"], "name").unwrap_or_default().to_string(), s(&f["host"], "version").unwrap_or_default().to_string())),
            git: Some(f["git"].clone()),
        },
        run_id: s(f, "run_id").map(str::to_string),
        ..Default::default()
    };
    let policy = std::sync::Arc::new(runbook_host::Policy::load()?);
    let adapter = s(&script.v, "adapter").unwrap_or("library");
    let facts = opts.facts.clone();
    let (mut run, _) = Run::create_opts(policy.clone(), &resolved, claim(&script.v["claim"])?, out, adapter, Guard::default(), opts)?;
    for st in script.steps() {
        if run.finished() {
            break;
        }
        clock.set(t0 + st["at"].as_u64().unwrap_or(0));
        if let Some(r) = st.get("resume") {
            // This process lets the run go, unended; a new Run resumes it from the bundle.
            let (run_id, kept) = (run.run_id().to_string(), run.pin());
            drop(run);
            swap_document(&script, &out.join(&run_id), r)?;
            let pin =
                step_pin(r, (kept.document_sha256, kept.chain_h0)).map(|(document_sha256, chain_h0)| runbook_host::run::Pin { document_sha256, chain_h0 });
            let store = std::sync::Arc::new(runbook_host::bundle::DirStore::open(out)?);
            let opts = RunOptions { facts: facts.clone(), ..Default::default() };
            match Run::resume_in(policy.clone(), store, &run_id, t0, pin.as_ref(), Guard::default(), opts) {
                Ok((resumed, _)) if r["refused"].is_null() => run = resumed,
                Ok(_) => bail!("the resume was not refused ({})", r["refused"]),
                Err(runbook_host::run::RunError::Tampered(t)) => return refusal_matches(r, &t.place, &t.reason),
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let r = if let Some(i) = st.get("invoke") {
            run.invoke(s(i, "tool").unwrap_or_default(), &i["arguments"], s(i, "call_id"), s(i, "step")).map(drop)
        } else if let Some(r) = st.get("result") {
            run.result(s(r, "tool").unwrap_or_default(), &r["result"], r["is_error"].as_bool().unwrap_or(false), s(r, "call_id")).map(drop)
        } else if let Some(a) = st.get("approval") {
            run.approval(s(a, "step"), s(a, "call_sha256"), s(a, "approver").unwrap_or_default(), a["granted"].as_bool().unwrap_or(false)).map(drop)
        } else if let Some(to) = st.get("advance").and_then(Value::as_str) {
            run.advance(to).map(drop)
        } else if let Some(v) = st.get("verdict") {
            run.verdict(s(v, "step").unwrap_or_default(), v["pass"].as_bool().unwrap_or(false), s(v, "by").unwrap_or_default()).map(drop)
        } else if st.get("final_output").is_some() {
            run.final_output().map(drop)
        } else if st.get("tick").is_some() {
            run.tick().map(drop)
        } else if let Some(l) = st.get("line").and_then(Value::as_str) {
            run.feed_line(l).map(drop)
        } else if let Some(l) = st.get("leave") {
            let (reason, final_output) = run.leaving(l["calls_in_flight"].as_u64().unwrap_or(0) as u32, l["last_call_timed_out"].as_bool().unwrap_or(false))?;
            if final_output {
                run.final_output()?;
            }
            run.end(reason).map(drop)
        } else if let Some(r) = st.get("end").and_then(Value::as_str) {
            run.end(end_reason(r)?).map(drop)
        } else {
            bail!("script.json: a step this driver does not know: {st}")
        };
        r?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// native: the core linked directly.

struct Native {
    out: PathBuf,
    run_id: String,
    session: runbook_policy::Session,
    head: String,
    manifest: String,
    start_line: Option<String>,
    lines: u64,
    t0: u64,
    last_at: u64,
}

fn carry_out(out: &Path, effects: &[runbook_policy::bundle::Effect]) -> Result<()> {
    use runbook_policy::bundle::Op;
    for e in effects {
        if e.path.split('/').any(|p| !runbook_policy::bundle::is_safe_name(p)) {
            bail!("the module named the path `{}`", e.path);
        }
        let p = out.join(&e.path);
        match e.op {
            Op::CreateDir => std::fs::create_dir(&p)?,
            Op::Write => std::fs::write(&p, &e.bytes)?,
            Op::Append => {
                use std::io::Write;
                std::fs::OpenOptions::new().append(true).create(true).open(&p)?.write_all(&e.bytes)?
            }
            Op::Sign => bail!("a receipt key is not part of a vector"),
        }
    }
    Ok(())
}

impl Native {
    fn carry(&mut self, effects: Vec<runbook_policy::bundle::Effect>) -> Result<()> {
        carry_out(&self.out, &effects)?;
        let run_json = format!("{}/run.json", self.run_id);
        if let Some(e) = effects.iter().rev().find(|e| e.path == run_json) {
            self.manifest = String::from_utf8(e.bytes.clone())?;
        }
        Ok(())
    }

    fn feed(&mut self, at: u64, kind: runbook_policy::event::EventKind) -> Result<()> {
        let at = at.max(self.last_at);
        self.last_at = at;
        let rec = self.session.feed(Ok(runbook_policy::Event { at, kind }), &self.head);
        self.record(rec)
    }

    fn record(&mut self, rec: runbook_policy::Recorded) -> Result<()> {
        carry_out(
            &self.out,
            &[runbook_policy::bundle::Effect {
                op: runbook_policy::bundle::Op::Append,
                path: format!("{}/events.ndjson", self.run_id),
                bytes: rec.record_line.into_bytes(),
            }],
        )?;
        if self.lines == 0 {
            self.start_line = Some(rec.event_line);
        }
        self.lines += 1;
        self.head = rec.link;
        Ok(())
    }

    fn end(&mut self, at: u64) -> Result<()> {
        let dir = self.out.join(&self.run_id);
        let doc_file = if dir.join("runbook.json").exists() { "runbook.json" } else { "runbook.yaml" };
        let mut hashes = serde_json::Map::new();
        for f in [doc_file, "envelope.json", "events.ndjson", "signatures.ndjson", "shadow.ndjson"] {
            if let Ok(b) = std::fs::read(dir.join(f)) {
                hashes.insert(f.into(), json!(runbook_policy::doc::sha256_hex(&b)));
            }
        }
        let latest = std::fs::read_to_string(self.out.join("latest.json")).ok();
        let facts = json!({"at": self.t0 + at, "chain_head": self.head, "hashes": hashes, "latest": latest});
        let effects = runbook_policy::bundle::end(&self.manifest, Some(&self.session.report()), &facts.to_string()).map_err(|e| anyhow!(e))?;
        self.carry(effects)
    }
}

fn native_claim(run_id: &str, c: &Value) -> Result<runbook_policy::event::EventKind> {
    // The start claim goes through the core's own reading of an event, as a host's line would.
    let mut start = json!({"type": "start", "at": 0, "run_id": run_id});
    for k in ["profile", "allowlist", "risk_ceiling", "agent", "available"] {
        if !c[k].is_null() {
            start[k] = c[k].clone();
        }
    }
    start["coverage"] = match &c["coverage"] {
        Value::String(x) if x == "complete" => json!("complete"),
        Value::Object(o) if o.contains_key("blind") => o["blind"].clone(),
        x => bail!("claim.coverage {x}"),
    };
    let node = runbook_policy::json::parse(&start.to_string()).node.ok_or_else(|| anyhow!("claim"))?;
    runbook_policy::event::from_node(&node).map(|e| e.kind).map_err(|e| anyhow!("the claim is not a start event: {}", e.message))
}

pub fn drive_native(dir: &Path, out: &Path) -> Result<()> {
    use runbook_policy::event::EventKind;
    let script = Script::load(dir)?;
    let t0 = script.t0()?;
    let f = script.facts();
    let run_id = s(f, "run_id").ok_or_else(|| anyhow!("facts.run_id"))?.to_string();
    std::fs::create_dir_all(out)?;
    let facts = json!({
        "run_id": run_id, "at": t0, "reference": s(f, "reference").unwrap_or("runbook.yaml"), "trust": "T1", "pinned_sha256": null,
        "provenance": {"kind": "file", "registry": null, "from_cache": null, "signed_by": null, "signature_expires": null},
        "module_sha256": runbook_host::module_sha256(), "host": f["host"], "adapter": s(&script.v, "adapter").unwrap_or("library"), "git": f["git"],
    });
    let effects = runbook_policy::bundle::create(&script.document, &facts.to_string()).map_err(|e| anyhow!(e))?;
    let mut session = runbook_policy::Session::new(&script.document);
    session.set_guard(&[]);
    let head = runbook_policy::bundle::chain_h0(&script.document);
    let mut n = Native { out: out.to_path_buf(), run_id: run_id.clone(), session, head, manifest: String::new(), start_line: None, lines: 0, t0, last_at: 0 };
    n.carry(effects)?;
    n.feed(0, native_claim(&run_id, &script.v["claim"])?)?;
    let admitted = n.session.state().phase != runbook_policy::RunPhase::Over;
    let change = json!({"lifecycle": if admitted { "admitted" } else { "refused" }, "at": t0, "start": n.start_line});
    let effects = runbook_policy::bundle::change(&n.manifest, &change.to_string()).map_err(|e| anyhow!(e))?;
    n.carry(effects)?;
    if !admitted {
        return n.end(0);
    }
    let arg = |v: &Value| runbook_policy::json::parse(&v.to_string()).node.ok_or_else(|| anyhow!("not JSON: {v}"));
    for st in script.steps() {
        let at = st["at"].as_u64().unwrap_or(0);
        if let Some(i) = st.get("invoke") {
            let kind = EventKind::Invoke {
                tool: s(i, "tool").unwrap_or_default().into(),
                arguments: arg(&i["arguments"])?,
                call_id: s(i, "call_id").map(str::to_string),
                step: s(i, "step").map(str::to_string),
                guard: false,
            };
            n.feed(at, kind)?;
        } else if let Some(r) = st.get("result") {
            let kind = EventKind::Result {
                tool: s(r, "tool").unwrap_or_default().into(),
                result: arg(&r["result"])?,
                is_error: r["is_error"].as_bool().unwrap_or(false),
                call_id: s(r, "call_id").map(str::to_string),
            };
            n.feed(at, kind)?;
        } else if let Some(a) = st.get("approval") {
            let kind = EventKind::Approval {
                step: s(a, "step").map(str::to_string),
                call_sha256: s(a, "call_sha256").map(str::to_string),
                approver: s(a, "approver").unwrap_or_default().into(),
                granted: a["granted"].as_bool().unwrap_or(false),
                request: None,
            };
            n.feed(at, kind)?;
        } else if let Some(to) = st.get("advance").and_then(Value::as_str) {
            n.feed(at, EventKind::Advance { to: to.into() })?;
        } else if let Some(v) = st.get("verdict") {
            n.feed(
                at,
                EventKind::Verdict {
                    step: s(v, "step").unwrap_or_default().into(),
                    pass: v["pass"].as_bool().unwrap_or(false),
                    by: s(v, "by").unwrap_or_default().into(),
                },
            )?;
        } else if st.get("final_output").is_some() {
            n.feed(at, EventKind::FinalOutput)?;
        } else if st.get("tick").is_some() {
            n.feed(at, EventKind::Tick)?;
        } else if let Some(l) = st.get("line").and_then(Value::as_str) {
            let rec = n.session.feed_line(l, &n.head.clone());
            n.record(rec)?;
        } else if let Some(l) = st.get("leave") {
            let leaving = n.session.leaving(l["calls_in_flight"].as_u64().unwrap_or(0) as u32, l["last_call_timed_out"].as_bool().unwrap_or(false));
            if leaving.final_output {
                n.feed(at, EventKind::FinalOutput)?;
            }
            if !n.session.is_over() {
                n.feed(at, EventKind::End { reason: leaving.reason })?;
            }
            return n.end(at);
        } else if let Some(r) = st.get("resume") {
            // A new session of the bundle's document, checked and replayed as a host resumes a run.
            let dir = out.join(&n.run_id);
            let m: Value = serde_json::from_str(&n.manifest)?;
            let kept = (m["document"]["sha256"].as_str().unwrap_or_default().to_string(), m["chain_h0"].as_str().unwrap_or_default().to_string());
            swap_document(&script, &dir, r)?;
            let manifest = std::fs::read_to_string(dir.join("run.json"))?;
            let doc_file = serde_json::from_str::<Value>(&manifest)?["artifacts"]["document"].as_str().unwrap_or("runbook.yaml").to_string();
            let document = std::fs::read(dir.join(doc_file))?;
            let pin = step_pin(r, kept);
            let events = std::fs::read(dir.join("events.ndjson"))?;
            let mut session = runbook_policy::Session::new(&document);
            let checked = runbook_policy::bundle::chain_start(session.analysis(), &manifest, pin.as_ref().map(|(d, h)| (d.as_str(), h.as_str())))
                .and_then(|h0| runbook_policy::verify::replay_events(&mut session, &events, &h0));
            match checked {
                Ok(replayed) if r["refused"].is_null() => {
                    session.set_guard(&[]);
                    n.session = session;
                    n.manifest = manifest;
                    (n.head, n.lines, n.last_at) = (replayed.head, replayed.events, replayed.last_at);
                }
                Ok(_) => bail!("the resume was not refused ({})", r["refused"]),
                Err((place, why)) => return refusal_matches(r, &place, &why),
            }
        } else if let Some(r) = st.get("end").and_then(Value::as_str) {
            if !n.session.is_over() {
                let reason = runbook_policy::event::END_REASONS.iter().find(|(k, _)| *k == r).map(|(_, v)| *v).ok_or_else(|| anyhow!("end reason `{r}`"))?;
                n.feed(at, EventKind::End { reason })?;
            }
            return n.end(at);
        } else {
            bail!("script.json: a step this driver does not know: {st}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// Checking.

/// Every file under `dir`, relative, sorted; the approval channel's folders are not evidence.
pub fn files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
        for e in std::fs::read_dir(d)? {
            let p = e?.path();
            let rel = p.strip_prefix(base)?.to_string_lossy().replace('\\', "/");
            if p.is_dir() {
                if !matches!(p.file_name().and_then(|f| f.to_str()), Some("pending" | "approvals" | "consumed")) {
                    walk(base, &p, out)?;
                }
            } else {
                out.push((rel, std::fs::read(&p)?));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// Whether `expected/` shows what the script's hand-written `expect` says (the clauses it cites): the
/// outcome, each recorded event's decision, and a reason where it is the point. None when it does.
pub fn check_expect(dir: &Path) -> Result<Option<String>> {
    let script = Script::load(dir)?;
    let expect = &script.v["expect"];
    let run_id = s(script.facts(), "run_id").unwrap_or_default();
    let run = dir.join("expected").join(run_id);
    if let Some(outcome) = expect.get("outcome").and_then(Value::as_str) {
        let report: Value = serde_json::from_slice(&std::fs::read(run.join("report.json")).context("expected report.json")?)?;
        if report["outcome"] != outcome {
            return Ok(Some(format!("expected/ ends {}, the clauses say {outcome}", report["outcome"])));
        }
    }
    if expect["resume_refused"] == true && (run.join("report.json").exists() || !run.join("run.json").exists()) {
        return Ok(Some("expected/ holds an ended run (or none), the clauses say its resume was refused and nothing appended".into()));
    }
    let events = std::fs::read_to_string(run.join("events.ndjson")).context("expected events.ndjson")?;
    let decisions: Vec<Value> = events.lines().map(|l| serde_json::from_str::<Value>(l).map(|v| v["decision"].clone())).collect::<Result<_, _>>()?;
    if let Some(want) = expect.get("decisions").and_then(Value::as_array) {
        let got: Vec<&Value> = decisions.iter().map(|d| &d["decision"]).collect();
        if got.len() != want.len() || got.iter().zip(want).any(|(g, w)| *g != w) {
            return Ok(Some(format!("expected/ decides {got:?}, the clauses say {want:?}")));
        }
    }
    if let Some(want) = expect.get("refusals") {
        if decisions.first().map(|d| &d["refusals"]) != Some(want) {
            return Ok(Some(format!("expected/ refuses {:?}, the clauses say {want}", decisions.first().map(|d| &d["refusals"]))));
        }
    }
    if let Some(reasons) = expect.get("reasons").and_then(Value::as_object) {
        for (seq, reason) in reasons {
            let got = seq.parse::<usize>().ok().and_then(|i| decisions.get(i)).map(|d| &d["reason"]);
            if got != Some(reason) {
                return Ok(Some(format!("expected/ events.ndjson seq {seq}: reason {got:?}, the clauses say {reason}")));
            }
        }
    }
    Ok(None)
}

/// The first difference between what a driver left (`got`) and `expected/`, or None when every file is
/// the same, byte for byte.
pub fn compare(expected: &Path, got: &Path) -> Result<Option<String>> {
    let (e, g) = (files(expected)?, files(got)?);
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    if names(&e) != names(&g) {
        return Ok(Some(format!("files differ: expected {:?}, got {:?}", names(&e), names(&g))));
    }
    for ((name, a), (_, b)) in e.iter().zip(&g) {
        if a != b {
            let (ta, tb) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
            let line = ta.lines().zip(tb.lines()).position(|(x, y)| x != y).unwrap_or(ta.lines().count().min(tb.lines().count()));
            return Ok(Some(format!(
                "{name}:{}: expected {:?}, got {:?}",
                line + 1,
                ta.lines().nth(line).unwrap_or("<end>"),
                tb.lines().nth(line).unwrap_or("<end>")
            )));
        }
    }
    Ok(None)
}
