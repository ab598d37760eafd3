//! The conformance runner: every vector through every implementation, byte for byte (PROTOCOL.md).
//!
//! Usage: `runbook-conformance [--only a,b] [--generated N] [--seed S] [--bless] [--vectors DIR]`
//! run from the repository root (conformance/run does that).

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

mod compare;
#[allow(dead_code)]
mod verify_vectors;
#[allow(dead_code)]
mod whole_run;
use compare::{check_expected, continues_identically, differences};

/// One implementation: a process speaking the protocol.
struct Imp {
    name: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Imp {
    fn start(spec: &Value, root: &Path) -> Result<Imp> {
        let name = spec["name"].as_str().ok_or_else(|| anyhow!("implementation without a name"))?.to_string();
        let argv: Vec<String> =
            spec["command"].as_array().ok_or_else(|| anyhow!("{name}: no command"))?.iter().map(|a| a.as_str().unwrap_or("").to_string()).collect();
        let mut cmd = Command::new(resolve(root, &argv[0]));
        cmd.args(&argv[1..]).current_dir(root).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        if let Some(env) = spec.get("env").and_then(Value::as_object) {
            for (k, v) in env {
                cmd.env(k, resolve(root, v.as_str().unwrap_or("")));
            }
        }
        let mut child = cmd.spawn().with_context(|| format!("starting implementation `{name}` ({})", argv.join(" ")))?;
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Ok(Imp { name, child, stdin, stdout, next_id: 0 })
    }

    /// Writes one request; its answer is read by `receive` with the id returned.
    fn send(&mut self, mut req: Value) -> Result<String> {
        self.next_id += 1;
        let id = format!("{}", self.next_id);
        req["id"] = json!(id);
        writeln!(self.stdin, "{req}").with_context(|| format!("{}: writing a request", self.name))?;
        self.stdin.flush()?;
        Ok(id)
    }

    fn receive(&mut self, id: &str) -> Result<Value> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("{}: the adapter closed its output", self.name);
        }
        let resp: Value = serde_json::from_str(&line).with_context(|| format!("{}: not a JSON response: {line}", self.name))?;
        if resp["id"] != json!(id) {
            bail!("{}: response for id {} answered request {id}", self.name, resp["id"]);
        }
        if resp["ok"] != json!(true) {
            bail!("{}: adapter error: {}", self.name, resp["error"]);
        }
        Ok(resp["result"].clone())
    }

    fn call(&mut self, req: Value) -> Result<Value> {
        let id = self.send(req)?;
        self.receive(&id)
    }
}

/// One request to every implementation: written to all of them before any answer is read, so that they
/// work at the same time (the run takes as long as the slowest, not the sum). Each has at most this one
/// request outstanding, so no pipe can fill up in both directions.
fn call_all(imps: &mut [Imp], req: &Value) -> Vec<Result<Value>> {
    let sent: Vec<Result<String>> = imps.iter_mut().map(|i| i.send(req.clone())).collect();
    imps.iter_mut().zip(sent).map(|(i, id)| id.and_then(|id| i.receive(&id))).collect()
}

/// Implementation `k`'s failure to answer, or every difference between its answer and each other one's.
fn disagreements(imps: &[Imp], op: &str, results: &[Result<Value>], k: usize) -> Vec<String> {
    let res = match &results[k] {
        Err(e) => return vec![format!("{e:#}")],
        Ok(res) => res,
    };
    let mut out = Vec::new();
    for (j, other) in results.iter().enumerate() {
        if let (true, Ok(other)) = (j != k, other) {
            out.extend(differences(op, res, other).into_iter().map(|d| format!("differs from {}: {d}", imps[j].name)));
        }
    }
    out
}

/// Where a replay case is split by a snapshot: its `snapshot_after`, else half way through its events
/// (every replay vector is also a snapshot vector).
fn split_point(req: &Value) -> u64 {
    req["snapshot_after"].as_u64().unwrap_or(req["events"].as_array().map_or(0, |e| e.len() as u64 / 2))
}

/// The request without `snapshot_after` and with it at `k`.
fn whole_and_split(req: &Value, k: u64) -> (Value, Value) {
    let mut whole = req.clone();
    if let Some(m) = whole.as_object_mut() {
        m.remove("snapshot_after");
    }
    let mut split = whole.clone();
    split["snapshot_after"] = json!(k);
    (whole, split)
}

impl Drop for Imp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Paths in the implementations file are relative to the repository root; `runbook-conformance-adapter`
/// is the adapter built beside this runner (whatever the target directory).
fn resolve(root: &Path, s: &str) -> String {
    if s == "runbook-conformance-adapter" {
        if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
            return dir.join(s).display().to_string();
        }
    }
    if s.starts_with("./") || s.starts_with("conformance/") || s.starts_with("target/") {
        root.join(s).display().to_string()
    } else {
        s.to_string()
    }
}

/// The request a case sends, with `document.file` turned into the file's text or bytes.
fn request(case: &Value, root: &Path) -> Result<Value> {
    let input = &case["input"];
    let mut req = json!({"op": input["op"]});
    let d = &input["document"];
    req["document"] = if let Some(f) = d.get("file").and_then(Value::as_str) {
        let bytes = std::fs::read(root.join(f)).with_context(|| format!("reading {f}"))?;
        match String::from_utf8(bytes) {
            Ok(t) => json!({"text": t}),
            Err(e) => json!({"base64": base64::engine::general_purpose::STANDARD.encode(e.as_bytes())}),
        }
    } else {
        d.clone()
    };
    if let Some(ev) = input.get("events") {
        req["events"] = ev.clone();
    }
    if let Some(k) = input.get("snapshot_after") {
        req["snapshot_after"] = k.clone();
    }
    if let Some(h0) = input.get("chain_h0") {
        req["chain_h0"] = h0.clone();
    }
    Ok(req)
}

fn sha256(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

#[derive(Default)]
struct Tally {
    /// (implementation, area) -> (passed, failed)
    cells: BTreeMap<(String, String), (u64, u64)>,
    passed: u64,
    failed: u64,
}

impl Tally {
    fn add(&mut self, imp: &str, area: &str, ok: bool) {
        let c = self.cells.entry((imp.to_string(), area.to_string())).or_default();
        if ok {
            c.0 += 1;
            self.passed += 1;
        } else {
            c.1 += 1;
            self.failed += 1;
        }
    }

    fn print(&self, imps: &[String]) {
        let areas: Vec<&String> = {
            let mut a: Vec<&String> = self.cells.keys().map(|(_, a)| a).collect();
            a.sort();
            a.dedup();
            a
        };
        let w = imps.iter().map(|i| i.len()).max().unwrap_or(4).max(14);
        let aw = areas.iter().map(|a| a.len()).max().unwrap_or(4).max(4);
        print!("{:aw$}", "area");
        for i in imps {
            print!("  {:>w$}", i);
        }
        println!();
        for a in areas {
            print!("{:aw$}", a);
            for i in imps {
                let (p, f) = self.cells.get(&(i.clone(), a.clone())).copied().unwrap_or_default();
                let cell = if f == 0 { format!("{p} passed") } else { format!("{p} passed, {f} FAILED") };
                print!("  {:>w$}", cell);
            }
            println!();
        }
    }
}

fn vector_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                // Whole-run vectors have their own format and check (whole_run.rs).
                if p != dir.join("run") && p != dir.join("verify") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

struct Options {
    only: Option<Vec<String>>,
    generated: u64,
    seed: u64,
    bless: bool,
    vectors: PathBuf,
    implementations: PathBuf,
}

fn options(root: &Path) -> Result<Options> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut o = Options {
        only: None,
        generated: 0,
        seed: 0,
        bless: false,
        vectors: root.join("conformance/vectors"),
        implementations: root.join("conformance/implementations.json"),
    };
    let mut i = 0;
    while i < args.len() {
        let val = || args.get(i + 1).cloned().ok_or_else(|| anyhow!("{} needs a value", args[i]));
        match args[i].as_str() {
            "--only" => o.only = Some(val()?.split(',').map(str::to_string).collect()),
            "--generated" => o.generated = val()?.parse()?,
            "--seed" => o.seed = val()?.parse()?,
            "--vectors" => o.vectors = PathBuf::from(val()?),
            "--implementations" => o.implementations = PathBuf::from(val()?),
            "--bless" => {
                o.bless = true;
                i += 1;
                continue;
            }
            other => bail!("unknown argument `{other}`"),
        }
        i += 2;
    }
    Ok(o)
}

fn main() -> Result<()> {
    let root = std::env::current_dir()?;
    let o = options(&root)?;
    let specs: Value = serde_json::from_str(&std::fs::read_to_string(&o.implementations).context("reading the implementations file")?)?;
    let specs: Vec<&Value> = specs["implementations"]
        .as_array()
        .ok_or_else(|| anyhow!("no `implementations` list"))?
        .iter()
        .filter(|s| o.only.as_ref().is_none_or(|only| only.iter().any(|n| s["name"] == json!(n))))
        .collect();
    if specs.is_empty() {
        bail!("no implementation selected");
    }
    // Blessing takes the bytes of the first implementation only; the full run compares them all.
    let specs: Vec<&Value> = if o.bless { specs.into_iter().take(1).collect() } else { specs };
    let mut imps = Vec::new();
    let mut modules: Vec<(String, String)> = Vec::new();
    for s in &specs {
        let mut imp = Imp::start(s, &root)?;
        let hello = imp.call(json!({"op": "hello"}))?;
        eprintln!("{}: {} (module {})", imp.name, hello["implementation"], hello["module_sha256"]);
        if let Some(m) = hello["module_sha256"].as_str() {
            modules.push((imp.name.clone(), m.to_string()));
        }
        imps.push(imp);
    }
    // Every implementation that loads the component must load the same bytes.
    if let Some((a, b)) = modules.iter().flat_map(|a| modules.iter().map(move |b| (a, b))).find(|(a, b)| a.1 != b.1) {
        bail!("implementations load different components: {} has {}, {} has {}", a.0, a.1, b.0, b.1);
    }
    let names: Vec<String> = imps.iter().map(|i| i.name.clone()).collect();
    let started = std::time::Instant::now();
    let mut tally = Tally::default();
    if o.bless {
        bless_whole_runs(&o, &root, &specs)?;
        return bless(&o, &root, &mut imps[0]);
    }
    run_vectors(&o, &root, &mut imps, &mut tally)?;
    run_whole_runs(&o, &root, &specs, &mut tally)?;
    run_verify_vectors(&o, &root, &specs, &mut tally)?;
    if o.generated > 0 {
        run_generated(&o, &mut imps, &mut tally)?;
    }
    tally.print(&names);
    eprintln!("took {:.1} s", started.elapsed().as_secs_f64());
    println!("{} passed, {} failed", tally.passed, tally.failed);
    if tally.failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// The whole-run vectors' folders (conformance/vectors/run/<name>/script.json), sorted.
fn whole_run_dirs(o: &Options) -> Result<Vec<PathBuf>> {
    let dir = o.vectors.join("run");
    let mut out = Vec::new();
    if dir.is_dir() {
        for e in std::fs::read_dir(&dir)? {
            let p = e?.path();
            if p.join("script.json").is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Runs an implementation's command `key` (`run`, `verify`) with `args` appended, in the repository with
/// the implementation's environment; its standard output.
fn run_command(spec: &Value, key: &str, root: &Path, args: &[&Path]) -> Result<Vec<u8>> {
    let cmd: Vec<String> =
        spec[key].as_array().ok_or_else(|| anyhow!("no `{key}` command"))?.iter().filter_map(|c| c.as_str().map(|s| resolve(root, s))).collect();
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]).args(args).current_dir(root).stdin(Stdio::null());
    for v in [&spec["env"], &spec["run_env"]] {
        if let Some(env) = v.as_object() {
            for (k, v) in env {
                c.env(k, resolve(root, v.as_str().unwrap_or_default()));
            }
        }
    }
    let o = c.output().with_context(|| format!("running {}", cmd.join(" ")))?;
    if !o.status.success() {
        bail!("{} exited with {}: {}", cmd.join(" "), o.status, String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok(o.stdout)
}

/// Runs an implementation's whole-run driver (its `run` command, with SCRIPT_DIR OUT_DIR appended) on one
/// vector; returns the runs root it left.
fn drive(spec: &Value, root: &Path, vector: &Path) -> Result<tempdir::Dir> {
    let out = tempdir::Dir::new()?;
    run_command(spec, "run", root, &[vector, out.path()])?;
    Ok(out)
}

/// Every whole-run vector through every implementation with a `run` driver: each file it leaves must be
/// `expected/`'s, byte for byte.
fn run_whole_runs(o: &Options, root: &Path, specs: &[&Value], tally: &mut Tally) -> Result<()> {
    for dir in whole_run_dirs(o)? {
        let name = dir.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        // The blessed bytes must first show what the vector's clauses say, or no implementation passes it.
        let clauses = whole_run::check_expect(&dir);
        let clauses_ok = matches!(clauses, Ok(None));
        match clauses {
            Ok(None) => {}
            Ok(Some(why)) => eprintln!("FAILED run/{name}: {why}"),
            Err(e) => eprintln!("FAILED run/{name}: {e:#}"),
        }
        for spec in specs.iter().filter(|s| s.get("run").is_some()) {
            let imp = spec["name"].as_str().unwrap_or_default();
            let verdict = drive(spec, root, &dir).and_then(|out| whole_run::compare(&dir.join("expected"), out.path()));
            let ok = clauses_ok && matches!(verdict, Ok(None));
            match verdict {
                Ok(None) => {}
                Ok(Some(diff)) => eprintln!("FAILED run/{name} [{imp}]: {diff}"),
                Err(e) => eprintln!("FAILED run/{name} [{imp}]: {e:#}"),
            }
            tally.add(imp, "run (whole runs)", ok);
        }
    }
    Ok(())
}

/// Every verify vector through every implementation with a `verify` command (its command with the
/// bundle's directory appended prints the module's verification as JSON): each must show what the case
/// says, and all must print the same verification.
fn run_verify_vectors(o: &Options, root: &Path, specs: &[&Value], tally: &mut Tally) -> Result<()> {
    for dir in verify_vectors::case_dirs(&o.vectors)? {
        let name = dir.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let work = tempdir::Dir::new()?;
        let bundle = match verify_vectors::prepare(&dir, work.path()) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("FAILED verify/{name}: {e:#}");
                for spec in specs.iter().filter(|s| s.get("verify").is_some()) {
                    tally.add(spec["name"].as_str().unwrap_or_default(), "verify (bundles)", false);
                }
                continue;
            }
        };
        let mut first: Option<(String, String)> = None;
        for spec in specs.iter().filter(|s| s.get("verify").is_some()) {
            let imp = spec["name"].as_str().unwrap_or_default();
            let verdict = verify_with(spec, root, &bundle).and_then(|got| {
                if let Some(why) = verify_vectors::check_expect(&dir, &got)? {
                    return Ok(Some(why));
                }
                let text = verify_vectors::canonical(&got);
                match &first {
                    None => first = Some((imp.to_string(), text)),
                    Some((other, t)) if *t != text => return Ok(Some(format!("prints another verification than {other}: {text}"))),
                    Some(_) => {}
                }
                Ok(None)
            });
            let ok = matches!(verdict, Ok(None));
            match verdict {
                Ok(None) => {}
                Ok(Some(why)) => eprintln!("FAILED verify/{name} [{imp}]: {why}"),
                Err(e) => eprintln!("FAILED verify/{name} [{imp}]: {e:#}"),
            }
            tally.add(imp, "verify (bundles)", ok);
        }
    }
    Ok(())
}

/// Runs an implementation's `verify` command on one bundle; its standard output, as JSON.
fn verify_with(spec: &Value, root: &Path, bundle: &Path) -> Result<Value> {
    let out = run_command(spec, "verify", root, &[bundle])?;
    serde_json::from_slice(&out).with_context(|| format!("{} printed no JSON: {}", spec["name"], String::from_utf8_lossy(&out)))
}

/// `--bless`: each whole-run vector's `expected/` from the first implementation with a `run` driver.
fn bless_whole_runs(o: &Options, root: &Path, specs: &[&Value]) -> Result<()> {
    let Some(spec) = specs.iter().find(|s| s.get("run").is_some()) else { return Ok(()) };
    for dir in whole_run_dirs(o)? {
        let out = drive(spec, root, &dir).with_context(|| format!("{}", dir.display()))?;
        let expected = dir.join("expected");
        if expected.exists() {
            std::fs::remove_dir_all(&expected)?;
        }
        for (rel, bytes) in whole_run::files(out.path())? {
            let p = expected.join(rel);
            std::fs::create_dir_all(p.parent().unwrap_or(&expected))?;
            std::fs::write(p, bytes)?;
        }
        eprintln!("blessed {}", expected.display());
    }
    Ok(())
}

/// A temporary directory, removed when dropped.
mod tempdir {
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new() -> std::io::Result<Dir> {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!("runbook-run-vector-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
            std::fs::create_dir_all(&p)?;
            Ok(Dir(p))
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Vector files must match conformance/vectors.schema.json before anything runs.
fn check_schema(root: &Path, file: &Path, v: &Value) -> Result<()> {
    let _ = root;
    let schema: Value = serde_json::from_str(include_str!("../vectors.schema.json"))?;
    let validator = jsonschema::validator_for(&schema).map_err(|e| anyhow!("vectors.schema.json: {e}"))?;
    let errors: Vec<String> = validator.iter_errors(v).take(5).map(|e| format!("{} at {}", e, e.instance_path)).collect();
    if !errors.is_empty() {
        bail!("{} does not match vectors.schema.json: {}", file.display(), errors.join("; "));
    }
    Ok(())
}

fn run_vectors(o: &Options, root: &Path, imps: &mut [Imp], tally: &mut Tally) -> Result<()> {
    for file in vector_files(&o.vectors)? {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&file)?).with_context(|| format!("{}", file.display()))?;
        check_schema(root, &file, &v)?;
        let area = v["area"].as_str().unwrap_or("?").to_string();
        for case in v["cases"].as_array().into_iter().flatten() {
            let name = format!("{}/{}", area, case["id"].as_str().unwrap_or("?"));
            let req = request(case, root)?;
            let op = req["op"].as_str().unwrap_or("").to_string();
            // A replay runs whole and split by a snapshot; the expectation is of the case's own request.
            let (results, split) = if op == "replay" {
                let k = split_point(&req);
                let (whole, split) = whole_and_split(&req, k);
                (call_all(imps, &whole), Some((k, call_all(imps, &split))))
            } else {
                (call_all(imps, &req), None)
            };
            let own = match &split {
                Some((_, s)) if req.get("snapshot_after").is_some() => s,
                _ => &results,
            };
            for k in 0..imps.len() {
                let mut problems = disagreements(imps, &op, &results, k);
                if let Some((at, s)) = &split {
                    problems.extend(disagreements(imps, &op, s, k).into_iter().map(|p| format!("with snapshot_after {at}: {p}")));
                    if let (Ok(whole), Ok(split)) = (&results[k], &s[k]) {
                        problems.extend(continues_identically(*at, whole, split));
                    }
                }
                if let Ok(res) = &own[k] {
                    problems.extend(check_expected(&op, &case["expected"], res));
                }
                if !problems.is_empty() {
                    eprintln!("FAIL {name} [{}]", imps[k].name);
                    for p in &problems {
                        eprintln!("    {p}");
                    }
                }
                tally.add(&imps[k].name, &area, problems.is_empty());
            }
        }
    }
    Ok(())
}

fn run_generated(o: &Options, imps: &mut [Imp], tally: &mut Tally) -> Result<()> {
    use runbook_policy::testgen::{self, Rng};
    for i in 0..o.generated {
        let seed = o.seed.wrapping_add(i);
        let mut rng = Rng::new(seed);
        let (doc, shape) = testgen::document(&mut rng, 15);
        let events = testgen::events(&mut rng, &shape);
        // Drawn after the case, so that a seed gives the same document and events as before snapshots.
        let at = rng.below(events.len() as u64 + 1);
        let mut whole = Vec::new();
        for op in ["lint", "envelope", "replay"] {
            let req = json!({"op": op, "document": {"text": doc}, "events": events});
            let results = call_all(imps, &req);
            for k in 0..imps.len() {
                report_generated(seed, op, &imps[k].name, tally, "generated", disagreements(imps, op, &results, k));
            }
            whole = results;
        }
        // The same replay again, split by a snapshot after `at` events.
        let req = json!({"op": "replay", "document": {"text": doc}, "events": events, "snapshot_after": at});
        let results = call_all(imps, &req);
        for k in 0..imps.len() {
            let mut problems = disagreements(imps, "replay", &results, k);
            if let (Ok(w), Ok(s)) = (&whole[k], &results[k]) {
                problems.extend(continues_identically(at, w, s));
            }
            report_generated(seed, &format!("replay with snapshot_after {at}"), &imps[k].name, tally, "generated-snapshot", problems);
        }
    }
    Ok(())
}

fn report_generated(seed: u64, what: &str, imp: &str, tally: &mut Tally, area: &str, problems: Vec<String>) {
    if !problems.is_empty() {
        eprintln!("FAIL generated seed {seed} {what} [{imp}]");
        for p in problems.iter().take(3) {
            eprintln!("    {p}");
        }
    }
    tally.add(imp, area, problems.is_empty());
}

/// The `expected` fields bless writes; every other one is hand-written.
const BLESSED: &[&str] = &["decisions", "report", "report_sha256", "snapshot", "snapshot_sha256", "envelope", "envelope_sha256", "findings"];

/// Fills the exact bytes of each case from one implementation, but only where the hand-written
/// expectations (summary, outcome, codes, fields) already hold: vectors are never self-blessed.
fn bless(o: &Options, root: &Path, imp: &mut Imp) -> Result<()> {
    let mut refused = 0;
    for file in vector_files(&o.vectors)? {
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&file)?)?;
        let area = v["area"].as_str().unwrap_or("?").to_string();
        let mut changed = false;
        for case in v["cases"].as_array_mut().into_iter().flatten() {
            let req = request(case, root)?;
            let op = req["op"].as_str().unwrap_or("").to_string();
            let at = req["snapshot_after"].as_u64();
            let res = imp.call(req.clone())?;
            let mut hand = case["expected"].clone();
            if let Some(m) = hand.as_object_mut() {
                for k in BLESSED {
                    m.remove(*k);
                }
            }
            let mut problems = check_expected(&op, &hand, &res);
            // A split run is blessed only when it goes on exactly as the whole run.
            if let Some(at) = at {
                let whole = imp.call(whole_and_split(&req, at).0)?;
                problems.extend(continues_identically(at, &whole, &res));
            }
            if !problems.is_empty() {
                refused += 1;
                eprintln!("NOT BLESSED {area}/{}: the hand-written expectation does not hold:", case["id"].as_str().unwrap_or("?"));
                for p in problems {
                    eprintln!("    {p}");
                }
                continue;
            }
            let e = case["expected"].as_object_mut().ok_or_else(|| anyhow!("case without `expected`"))?;
            match op.as_str() {
                "replay" => {
                    e.insert("decisions".into(), res["decisions"].clone());
                    let report = res["report"].as_str().unwrap_or("");
                    e.insert("report".into(), json!(report));
                    e.insert("report_sha256".into(), json!(sha256(report)));
                    if let Some(snapshot) = res["snapshot"].as_str() {
                        e.insert("snapshot".into(), json!(snapshot));
                        e.insert("snapshot_sha256".into(), json!(sha256(snapshot)));
                    }
                }
                "envelope" => {
                    e.insert("envelope".into(), res["envelope"].clone());
                    e.insert("envelope_sha256".into(), res["envelope"].as_str().map(|s| json!(sha256(s))).unwrap_or(Value::Null));
                    e.insert("findings".into(), res["findings"].clone());
                }
                "lint" => {
                    e.insert("findings".into(), res["findings"].clone());
                }
                _ => {}
            }
            changed = true;
        }
        if changed {
            std::fs::write(&file, serde_json::to_string_pretty(&v)? + "\n")?;
        }
    }
    println!("blessed; {refused} case(s) refused");
    if refused > 0 {
        std::process::exit(1);
    }
    Ok(())
}
