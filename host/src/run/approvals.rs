//! The approval channel: files under the run directory, written by the host (a request) and by
//! `runbook-host approve` from a human's terminal (the answer). The agent's tool calls cannot reach it
//! through the adapter: a call naming the run directory or the `runbook-host` binary is marked `guard` and
//! denied by the module (docs/spec/run.md#guarded-calls), and `approve` refuses to run without a controlling terminal.
//!
//! ```text
//! <run_dir>/pending/<id>.json    runbook-approval-request/v1: {schema, id, step, tool, arguments,
//!                                arguments_json (the exact text hashed), call_sha256, requested_at}
//! <run_dir>/approvals/<id>.json  runbook-approval-grant/v1: {schema, id, step, tool, call_sha256, approver,
//!                                granted, at, signature?}; created once (never overwritten)
//! <run_dir>/consumed/<id>.json   a request moved here by [`consume`] once the host fed its answer to the module
//! ```
//!
//! A grant is bound to the call's canonical hash (docs/spec/run.md#approvals-bound-to-a-call): [`poll`] refuses (an `InvalidData` error)
//! an answer whose `call_sha256` is not the request's, and a different call needs a new request. One
//! answer is fed to the module once: after feeding it, call [`consume`]. A same-user process with a shell
//! can still write these files (docs/spec/README.md#threat-model): the driver feeds only answers to requests it issued
//! ([`crate::run::Run::apply_grant`]), and where approvals must be signed, only answers whose `signature`
//! (an SSH signature over [`signed_message`], made with `ssh-keygen -Y sign` by a key listed in the
//! run's `allowed_signers`) verifies. Which requests may be answered is the module's approval ledger
//! (docs/spec/run.md#approvals-bound-to-a-call, [`crate::run::Run::request_for`]): the files here only carry answers in. A key the agent cannot use (a FIDO `-sk` key wants a touch) is what
//! makes an approval a human's.

use crate::clock::now_rfc3339;
use crate::files::{is_safe_name, open_or_create_dir, unique_hex};
use cap_std::fs::{Dir, OpenOptions};
use serde_json::{json, Value};
use std::io::{self, Write};
use std::path::Path;

pub const REQUEST_SCHEMA: &str = "runbook-approval-request/v1";
pub const GRANT_SCHEMA: &str = "runbook-approval-grant/v1";

/// A gated call waiting for a human.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    pub id: String,
    pub step: Option<String>,
    pub tool: String,
    pub arguments: Value,
    pub call_sha256: String,
}

/// A human's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub approver: String,
    pub granted: bool,
    pub call_sha256: String,
    /// An armored SSH signature (`-----BEGIN SSH SIGNATURE-----`) over [`signed_message`].
    pub signature: Option<String>,
}

/// The exact text a human signs to answer the module's approval request `request` (the `seq` of its
/// `needs-approval` decision) of run `run_id`: the module's `approval-payload` (docs/spec/run.md#approvals-bound-to-a-call), naming the
/// run, the request, the step, the call's canonical hash and the answer, so that a signature answers that
/// one request of that one run and nothing else.
pub fn signed_message(run_id: &str, request: u64, step: Option<&str>, call_sha256: &str, granted: bool) -> io::Result<String> {
    let policy = crate::files::shared_policy().map_err(|e| io::Error::other(e.to_string()))?;
    policy.approval_payload(run_id, request, step, call_sha256, granted).map_err(|e| io::Error::other(e.to_string()))
}

fn invalid(m: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.into())
}

fn run_dir_cap(run_dir: &Path) -> io::Result<Dir> {
    Dir::open_ambient_dir(run_dir, cap_std::ambient_authority())
}

fn sub(run_dir: &Path, name: &str) -> io::Result<Dir> {
    let d = run_dir_cap(run_dir)?;
    d.create_dir_all(name)?;
    d.open_dir(name)
}

fn check_id(id: &str) -> io::Result<()> {
    if is_safe_name(id) {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, format!("`{id}` is not an approval id")))
    }
}

fn write_new(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    let mut f = dir.open_with(name, OpenOptions::new().write(true).create_new(true))?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Asks for a human's answer on a gated call: writes `pending/<id>.json` and returns the new id
/// (`a-<millis>-<12 random hex>`). `arguments_json` is kept verbatim (the text `call_sha256` was computed from).
pub fn request(run_dir: &Path, step: Option<&str>, tool: &str, arguments_json: &str, call_sha256: &str) -> io::Result<String> {
    let _ = open_or_create_dir(run_dir)?;
    let dir = sub(run_dir, "pending")?;
    let arguments: Value = serde_json::from_str(arguments_json).unwrap_or_else(|_| Value::String(arguments_json.to_string()));
    let millis = crate::clock::now_ms();
    loop {
        let id = format!("a-{millis}-{}", unique_hex(12)?);
        let body = json!({
            "schema": REQUEST_SCHEMA, "id": id, "step": step, "tool": tool, "arguments": arguments,
            "arguments_json": arguments_json, "call_sha256": call_sha256, "requested_at": now_rfc3339(),
        });
        let mut text = serde_json::to_string_pretty(&body)?;
        text.push('\n');
        match write_new(&dir, &format!("{id}.json"), text.as_bytes()) {
            Ok(()) => return Ok(id),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The raw request file of `id` (pending or consumed), parsed.
pub fn request_record(run_dir: &Path, id: &str) -> io::Result<Value> {
    check_id(id)?;
    let d = run_dir_cap(run_dir)?;
    let name = format!("pending/{id}.json");
    let bytes = match crate::files::read_bounded(&d, &name, crate::files::MAX_SMALL_FILE_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => crate::files::read_bounded(&d, &format!("consumed/{id}.json"), crate::files::MAX_SMALL_FILE_BYTES)?,
        Err(e) => return Err(e),
    };
    serde_json::from_slice(&bytes).map_err(|e| invalid(format!("{name}: {e}")))
}

fn parse_grant(v: &Value) -> io::Result<Grant> {
    if v["schema"] != GRANT_SCHEMA {
        return Err(invalid("not a runbook-approval-grant/v1"));
    }
    Ok(Grant {
        approver: v["approver"].as_str().ok_or_else(|| invalid("a grant without an approver"))?.to_string(),
        granted: v["granted"].as_bool().ok_or_else(|| invalid("a grant without `granted`"))?,
        call_sha256: v["call_sha256"].as_str().ok_or_else(|| invalid("a grant without call_sha256"))?.to_string(),
        signature: v["signature"].as_str().map(str::to_string),
    })
}

/// The human's answer to request `id`, once there is one. An answer bound to another call than the request's
/// is an `InvalidData` error (fail closed).
pub fn poll(run_dir: &Path, id: &str) -> io::Result<Option<Grant>> {
    check_id(id)?;
    let d = run_dir_cap(run_dir)?;
    let bytes = match crate::files::read_bounded(&d, &format!("approvals/{id}.json"), crate::files::MAX_SMALL_FILE_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(format!("approvals/{id}.json: {e}")))?;
    let grant = parse_grant(&v)?;
    let req = request_record(run_dir, id)?;
    if req["call_sha256"].as_str() != Some(grant.call_sha256.as_str()) {
        return Err(invalid(format!("approvals/{id}.json answers another call than the request's")));
    }
    Ok(Some(grant))
}

fn list_requests(run_dir: &Path) -> io::Result<Vec<Value>> {
    let d = run_dir_cap(run_dir)?;
    let Ok(pd) = d.open_dir("pending") else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for e in pd.entries()? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".json") else { continue };
        if !is_safe_name(id) {
            continue;
        }
        let Ok(bytes) = crate::files::read_bounded(&pd, &name, crate::files::MAX_SMALL_FILE_BYTES) else { continue };
        let Ok(v) = serde_json::from_slice::<Value>(&bytes) else { continue };
        if v["schema"] == REQUEST_SCHEMA && v["id"] == id {
            out.push(v);
        }
    }
    out.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    Ok(out)
}

fn to_pending(v: &Value) -> Pending {
    Pending {
        id: v["id"].as_str().unwrap_or_default().to_string(),
        step: v["step"].as_str().map(str::to_string),
        tool: v["tool"].as_str().unwrap_or_default().to_string(),
        // From the very text that was hashed when there is one.
        arguments: v["arguments_json"].as_str().and_then(|t| serde_json::from_str(t).ok()).unwrap_or_else(|| v["arguments"].clone()),
        call_sha256: v["call_sha256"].as_str().unwrap_or_default().to_string(),
    }
}

/// Whether any request is waiting in `pending/` (answered or not): without one, no call needs its hash
/// looked up, which saves a call into the module on every ordinary tool call.
pub fn any_requests(run_dir: &Path) -> bool {
    std::fs::read_dir(run_dir.join("pending")).is_ok_and(|mut d| d.next().is_some())
}

/// Requests with no answer yet, oldest first.
pub fn pending(run_dir: &Path) -> io::Result<Vec<Pending>> {
    let d = run_dir_cap(run_dir)?;
    Ok(list_requests(run_dir)?.iter().filter(|v| !d.exists(format!("approvals/{}.json", v["id"].as_str().unwrap_or("")))).map(to_pending).collect())
}

/// An answered, not yet consumed request for exactly this call (for a retry after a gated call timed out
/// and a human answered later): (id, grant).
pub fn answered_for(run_dir: &Path, call_sha256: &str) -> io::Result<Option<(String, Grant)>> {
    for v in list_requests(run_dir)? {
        if v["call_sha256"].as_str() != Some(call_sha256) {
            continue;
        }
        let id = v["id"].as_str().unwrap_or_default().to_string();
        if let Some(g) = poll(run_dir, &id)? {
            return Ok(Some((id, g)));
        }
    }
    Ok(None)
}

/// Marks request `id` as used (its answer was fed to the module): moves it out of `pending/`.
pub fn consume(run_dir: &Path, id: &str) -> io::Result<()> {
    check_id(id)?;
    let d = run_dir_cap(run_dir)?;
    d.create_dir_all("consumed")?;
    d.rename(format!("pending/{id}.json"), &d, format!("consumed/{id}.json"))
}

/// Withdraws a request nobody answered (the host gave up waiting): the same move as [`consume`].
pub fn withdraw(run_dir: &Path, id: &str) -> io::Result<()> {
    consume(run_dir, id)
}

/// Writes the answer to request `id` (what `runbook-host approve` does after a human confirmed on a
/// terminal). Refuses a request that does not exist, one already answered, and a `call_sha256` that is
/// not the request's.
pub fn answer(run_dir: &Path, id: &str, approver: &str, granted: bool, call_sha256: &str) -> io::Result<()> {
    answer_signed(run_dir, id, approver, granted, call_sha256, None)
}

/// [`answer`] with an SSH signature over [`signed_message`].
pub fn answer_signed(run_dir: &Path, id: &str, approver: &str, granted: bool, call_sha256: &str, signature: Option<&str>) -> io::Result<()> {
    let req = request_record(run_dir, id)?;
    if req["call_sha256"].as_str() != Some(call_sha256) {
        return Err(invalid(format!("request {id} is for another call")));
    }
    let dir = sub(run_dir, "approvals")?;
    let body = json!({
        "schema": GRANT_SCHEMA, "id": id, "step": req["step"], "tool": req["tool"], "call_sha256": call_sha256,
        "approver": approver, "granted": granted, "at": now_rfc3339(), "signature": signature,
    });
    let mut text = serde_json::to_string_pretty(&body)?;
    text.push('\n');
    write_new(&dir, &format!("{id}.json"), text.as_bytes())
}

/// The operating-system user: the real uid's name from /etc/passwd, else `USER`/`LOGNAME`, else `uid:N`.
pub fn operator() -> String {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:").and_then(|r| r.split_whitespace().next().map(str::to_string))));
    let uid = uid.or_else(|| {
        std::process::Command::new("id").arg("-u").output().ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    });
    if let Some(uid) = &uid {
        if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
            for l in passwd.lines() {
                let f: Vec<&str> = l.split(':').collect();
                if f.len() > 2 && f[2] == uid && !f[0].is_empty() {
                    return f[0].to_string();
                }
            }
        }
    }
    for var in ["USER", "LOGNAME"] {
        if let Ok(v) = std::env::var(var) {
            if !v.is_empty() {
                return v;
            }
        }
    }
    format!("uid:{}", uid.unwrap_or_else(|| "unknown".into()))
}

/// Indents canonical (whitespace-free) JSON text, two spaces a level, changing no token.
pub fn pretty(canon: &str) -> String {
    let mut out = String::with_capacity(canon.len() * 2);
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    let mut chars = canon.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            out.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                if matches!(chars.peek(), Some('}') | Some(']')) {
                    out.push(chars.next().unwrap());
                } else {
                    depth += 1;
                    out.push('\n');
                    out.push_str(&"  ".repeat(depth));
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                out.push('\n');
                out.push_str(&"  ".repeat(depth));
                out.push(c);
            }
            ',' => {
                out.push_str(",\n");
                out.push_str(&"  ".repeat(depth));
            }
            ':' => out.push_str(": "),
            _ => out.push(c),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------------
// The channel as a seam: a run's requests and answers, on disk or in memory.

/// The approval channel of one run, as [`crate::run::Run`] uses it: the files of this module under the
/// run directory ([`DirChannel`], every production run), or memory ([`MemoryChannel`]: a run on a
/// [`crate::bundle::MemoryStore`], whose test or fuzz target answers requests itself). Both check the
/// same things (an answer bound to the request's call, answered once, consumed once).
pub trait Channel: Send + Sync {
    /// [`request`]: asks for a human's answer on a gated call; returns the new request's id.
    fn request(&self, step: Option<&str>, tool: &str, arguments_json: &str, call_sha256: &str) -> io::Result<String>;
    /// [`request_record`]
    fn request_record(&self, id: &str) -> io::Result<Value>;
    /// [`poll`]
    fn poll(&self, id: &str) -> io::Result<Option<Grant>>;
    /// [`any_requests`]
    fn any_requests(&self) -> bool;
    /// [`pending`]
    fn pending(&self) -> io::Result<Vec<Pending>>;
    /// [`answered_for`]
    fn answered_for(&self, call_sha256: &str) -> io::Result<Option<(String, Grant)>>;
    /// [`consume`] (and [`withdraw`]).
    fn consume(&self, id: &str) -> io::Result<()>;
    /// [`answer_signed`]
    fn answer_signed(&self, id: &str, approver: &str, granted: bool, call_sha256: &str, signature: Option<&str>) -> io::Result<()>;
}

/// A shared approval channel, as a run holds it.
pub type SharedChannel = std::sync::Arc<dyn Channel>;

/// The files under a run directory (this module's functions).
#[derive(Clone, Debug)]
pub struct DirChannel(pub std::path::PathBuf);

impl Channel for DirChannel {
    fn request(&self, step: Option<&str>, tool: &str, arguments_json: &str, call_sha256: &str) -> io::Result<String> {
        request(&self.0, step, tool, arguments_json, call_sha256)
    }
    fn request_record(&self, id: &str) -> io::Result<Value> {
        request_record(&self.0, id)
    }
    fn poll(&self, id: &str) -> io::Result<Option<Grant>> {
        poll(&self.0, id)
    }
    fn any_requests(&self) -> bool {
        any_requests(&self.0)
    }
    fn pending(&self) -> io::Result<Vec<Pending>> {
        pending(&self.0)
    }
    fn answered_for(&self, call_sha256: &str) -> io::Result<Option<(String, Grant)>> {
        answered_for(&self.0, call_sha256)
    }
    fn consume(&self, id: &str) -> io::Result<()> {
        consume(&self.0, id)
    }
    fn answer_signed(&self, id: &str, approver: &str, granted: bool, call_sha256: &str, signature: Option<&str>) -> io::Result<()> {
        answer_signed(&self.0, id, approver, granted, call_sha256, signature)
    }
}

#[derive(Default)]
struct Ledger {
    /// Requests by id (`a-00000001`, ...: numbered, so ids sort in the order asked), pending or consumed.
    requests: std::collections::BTreeMap<String, (Value, bool)>,
    answers: std::collections::BTreeMap<String, Value>,
    next: u64,
}

/// The approval channel in memory; clones share it (a test answers a request the run asked for).
#[derive(Clone, Default)]
pub struct MemoryChannel(std::sync::Arc<std::sync::Mutex<Ledger>>);

impl MemoryChannel {
    pub fn new() -> MemoryChannel {
        MemoryChannel::default()
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`answer`]: a human's unsigned answer.
    pub fn answer(&self, id: &str, approver: &str, granted: bool, call_sha256: &str) -> io::Result<()> {
        self.answer_signed(id, approver, granted, call_sha256, None)
    }
}

impl Channel for MemoryChannel {
    fn request(&self, step: Option<&str>, tool: &str, arguments_json: &str, call_sha256: &str) -> io::Result<String> {
        let mut l = self.ledger();
        l.next += 1;
        let id = format!("a-{:08}", l.next);
        let arguments: Value = serde_json::from_str(arguments_json).unwrap_or_else(|_| Value::String(arguments_json.to_string()));
        let body = json!({"schema": REQUEST_SCHEMA, "id": id, "step": step, "tool": tool, "arguments": arguments,
            "arguments_json": arguments_json, "call_sha256": call_sha256});
        l.requests.insert(id.clone(), (body, false));
        Ok(id)
    }
    fn request_record(&self, id: &str) -> io::Result<Value> {
        check_id(id)?;
        self.ledger().requests.get(id).map(|(v, _)| v.clone()).ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no request {id}")))
    }
    fn poll(&self, id: &str) -> io::Result<Option<Grant>> {
        check_id(id)?;
        let Some(v) = self.ledger().answers.get(id).cloned() else { return Ok(None) };
        let grant = parse_grant(&v)?;
        let req = self.request_record(id)?;
        if req["call_sha256"].as_str() != Some(grant.call_sha256.as_str()) {
            return Err(invalid(format!("approvals/{id}.json answers another call than the request's")));
        }
        Ok(Some(grant))
    }
    fn any_requests(&self) -> bool {
        self.ledger().requests.values().any(|(_, consumed)| !consumed)
    }
    fn pending(&self) -> io::Result<Vec<Pending>> {
        let l = self.ledger();
        Ok(l.requests.iter().filter(|(id, (_, consumed))| !consumed && !l.answers.contains_key(*id)).map(|(_, (v, _))| to_pending(v)).collect())
    }
    fn answered_for(&self, call_sha256: &str) -> io::Result<Option<(String, Grant)>> {
        let ids: Vec<String> = self
            .ledger()
            .requests
            .iter()
            .filter(|(_, (v, consumed))| !consumed && v["call_sha256"].as_str() == Some(call_sha256))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Some(g) = self.poll(&id)? {
                return Ok(Some((id, g)));
            }
        }
        Ok(None)
    }
    fn consume(&self, id: &str) -> io::Result<()> {
        check_id(id)?;
        match self.ledger().requests.get_mut(id) {
            Some((_, consumed @ false)) => {
                *consumed = true;
                Ok(())
            }
            _ => Err(io::Error::new(io::ErrorKind::NotFound, format!("no pending request {id}"))),
        }
    }
    fn answer_signed(&self, id: &str, approver: &str, granted: bool, call_sha256: &str, signature: Option<&str>) -> io::Result<()> {
        let req = self.request_record(id)?;
        if req["call_sha256"].as_str() != Some(call_sha256) {
            return Err(invalid(format!("request {id} is for another call")));
        }
        let mut l = self.ledger();
        if l.answers.contains_key(id) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("request {id} is answered already")));
        }
        let body = json!({"schema": GRANT_SCHEMA, "id": id, "step": req["step"], "tool": req["tool"], "call_sha256": call_sha256,
            "approver": approver, "granted": granted, "signature": signature});
        l.answers.insert(id.to_string(), body);
        Ok(())
    }
}
