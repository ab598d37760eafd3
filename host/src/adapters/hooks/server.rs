//! `runbook-host hook serve`: the resident hook server. Claude Code's `http` hooks POST the payloads a
//! command hook reads on stdin; the server keeps each open session's [`Run`] in memory (no replay per
//! event), holds the session's lock while it is open, and records every event and its decision durably
//! (the bundle's `fdatasync`) before it answers. Decisions are made by the same [`super::decide`] as the
//! command hook, so the two modes write the same bytes.
//!
//! ```text
//! <runs>/.hook/server/token        the bearer token (0600; made when the server first starts)
//! <runs>/.hook/server/server.json  runbook-hook-server/v1: {schema, pid, port, runs, started}
//! <runs>/.hook/server/serve.lock   held by the running server: one server per runs directory
//! <runs>/.hook/server/start.lock   held while a SessionStart starts a server: never two at once
//! <runs>/.hook/server/log          what the server logged (rejected requests, errors)
//! ```
//!
//! Only loopback: the listener binds 127.0.0.1, and a request is decided only when its `Host` names
//! that address and port, it carries no `Origin` (a web page, DNS rebinding) and its bearer token is
//! the server's; anything else is answered 401/403 and logged, never decided.

use super::peer;
use super::{check_not_broken, claude, create, decide, has_state, hook_dir, lock, open_nofollow, Answer, Config, HookEvent, Timing};
use crate::run::Run;
use crate::Policy;
use anyhow::{anyhow, bail, Context, Result};
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub const SERVER_SCHEMA: &str = "runbook-hook-server/v1";
/// Where the hooks POST (the path also marks an `http` hook as ours in the client's settings).
pub const HOOK_PATH: &str = "/runbook-hook";
pub const STATUS_PATH: &str = "/runbook-hook/status";
pub const SHUTDOWN_PATH: &str = "/runbook-hook/shutdown";
/// The environment variable the client's hook configuration reads the token from.
pub const TOKEN_ENV: &str = "RUNBOOK_HOOK_TOKEN";
/// The largest payload decided (the command hook reads as much): a tool's whole response can be large.
pub const BODY_LIMIT: usize = 16 << 20;

/// How many records a session of the separated mode's service may be ahead of its checkpoint: what a
/// restarted service replays at most (about 3.6 ms at 14 µs a record).
pub const CHECKPOINT_EVERY: u64 = 256;

pub fn server_dir(runs: &Path) -> PathBuf {
    hook_dir(runs).join("server")
}

fn checked_server_dir(runs: &Path) -> Result<PathBuf> {
    let d = super::hook_dir_checked(runs, true)?.join("server");
    std::fs::create_dir_all(&d).context("cannot create the hook server's directory")?;
    if std::fs::symlink_metadata(&d)?.file_type().is_symlink() {
        bail!("{} is a symlink; the hook server's state must be a directory of its own", d.display());
    }
    Ok(d)
}

/// The server's bearer token: read from its 0600 file, made (from the operating system's random source)
/// when there is none and `create`. A token file others may read is refused.
pub fn token(runs: &Path, create: bool) -> Result<String> {
    let p = checked_server_dir(runs)?.join("token");
    match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&p) {
        Ok(mut f) => {
            if f.metadata()?.permissions().mode() & 0o077 != 0 {
                bail!("{} can be read by other users; remove it (a new one is made with mode 0600)", p.display());
            }
            let mut t = String::new();
            // A token is 64 hex digits: a larger file is not one, and is not read whole.
            (&mut f).take(4096).read_to_string(&mut t)?;
            let t = t.trim().to_string();
            if t.len() < 32 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("{} does not hold a token; remove it (a new one is made)", p.display());
            }
            Ok(t)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| anyhow!("the operating system's random source failed: {e}"))?;
            let t = hex::encode(bytes);
            match OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&p) {
                Ok(mut f) => {
                    f.write_all(format!("{t}\n").as_bytes())?;
                    f.sync_all()?;
                    Ok(t)
                }
                // Made by another process meanwhile: use that one.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => token(runs, false),
                Err(e) => Err(e).with_context(|| format!("cannot write {}", p.display())),
            }
        }
        Err(e) => Err(e).with_context(|| format!("cannot read the hook server's token {}", p.display())),
    }
}

/// What `server.json` says of the running server.
#[derive(Debug, Clone)]
pub struct Info {
    pub pid: u32,
    pub port: u16,
}

pub fn read_info(runs: &Path) -> Option<Info> {
    let bytes = crate::files::read_path_bounded(&server_dir(runs).join("server.json"), crate::files::MAX_SMALL_FILE_BYTES).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    (v["schema"] == SERVER_SCHEMA).then_some(())?;
    Some(Info { pid: v["pid"].as_u64()? as u32, port: u16::try_from(v["port"].as_u64()?).ok()? })
}

/// One open session: its run, its lock (held while the server keeps the session), and what the status
/// shows.
struct Open {
    run: Run,
    _lock: File,
    /// The calls whose last PreToolUse the module allowed (what a PermissionRequest is judged by).
    allowed: BTreeSet<String>,
    last: Option<String>,
    events: u64,
    /// The client process the session is bound to (issue 28, item 2): the first process to send an event
    /// after SessionStart, which must be the SessionStart's sender or one of its ancestors (Claude Code
    /// runs the SessionStart command hook, then posts every later event itself). Every later event must
    /// come from it. None until then (and after a server restart, until the session's next event).
    client: Option<peer::Proc>,
    /// The SessionStart's sender and its ancestors.
    chain: Vec<peer::Proc>,
    /// The run's records at its last checkpoint (separated mode), or when it was opened.
    checkpointed: u64,
}

/// Who sent a request, as the kernel says ([`peer`]).
#[derive(Clone, Copy, Debug)]
struct Who {
    uid: u32,
    proc: Option<peer::Proc>,
}

/// Who may ask the server what.
#[derive(Clone, Debug)]
pub enum Access {
    /// Personal mode: the server's own user, holding the token (read from the runs directory).
    Personal,
    /// Separated mode (`runbook-host service`): events only from these client uids, which send no token (a
    /// secret the client sends is one the agent, the client's user, can read: the kernel's word on the
    /// connection's uid replaces it); status and shutdown only from root and the service's own user.
    Service { clients: Vec<u32> },
}

/// Binds the session to its client, or says why this request is not its client's.
fn bind(open: &mut Open, ev: &HookEvent, who: Who, session: &str) -> std::result::Result<(), String> {
    let Some(p) = who.proc else {
        return Err("the process that sent it cannot be found (its socket is in no process this server may inspect)".into());
    };
    if matches!(ev, HookEvent::SessionStart { .. }) {
        let mut chain = vec![p];
        chain.extend(peer::ancestors(p));
        if let Some(c) = open.client {
            if peer::alive(c) {
                // `/clear`, compaction, `--resume` in the same client: its own hook, started by it.
                if !chain.contains(&c) {
                    return Err(format!("session {session} belongs to its client ({c}), which is running, and {p} was not started by it"));
                }
                open.chain = chain;
                return Ok(());
            }
            // Its client has ended (a `--resume` in a new one): the next event binds again.
            open.client = None;
        }
        open.chain = chain;
        return Ok(());
    }
    match open.client {
        Some(c) if c == p => Ok(()),
        Some(c) => Err(format!("session {session} belongs to its client ({c}); this request comes from {p}")),
        None if open.chain.is_empty() || open.chain.contains(&p) => {
            open.client = Some(p);
            log(format_args!("session {session} is bound to its client ({p})"));
            Ok(())
        }
        None => Err(format!("session {session} was started by {}; {p} is neither it nor one of its ancestors", open.chain[0])),
    }
}

#[derive(Default)]
struct Slot {
    open: Option<Open>,
}

struct Shared {
    policy: Arc<Policy>,
    cfg: Config,
    /// The bearer token every request carries (personal mode only).
    token: Option<String>,
    access: Access,
    port: u16,
    runs: PathBuf,
    started: String,
    /// [`Config::fingerprint`] of the options it decides with.
    config: String,
    sessions: Mutex<BTreeMap<String, Arc<Mutex<Slot>>>>,
    shutdown: tokio::sync::Notify,
    decided: std::sync::atomic::AtomicU64,
    /// When the last admitted request came (for the idle exit).
    last_request: Mutex<Instant>,
    /// This server's user.
    uid: u32,
    /// Who was found behind each connection so far (a connection's socket does not change hands).
    known: Mutex<BTreeMap<crate::net::listen::ConnId, Who>>,
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("{} runbook-host hook serve: {msg}", crate::clock::now_rfc3339());
}

/// A slot whose holder panicked: its run may be half-way through an event, so it is dropped and the
/// session resumed from its bundle (checked by replay) at its next event.
fn lock_slot(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|poisoned| {
        slot.clear_poison();
        let mut g = poisoned.into_inner();
        g.open = None;
        g
    })
}

impl Shared {
    fn slot(&self, session: &str) -> Arc<Mutex<Slot>> {
        let mut m = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(session.to_string()).or_default().clone()
    }

    /// Whether a request may be decided: from this machine's loopback, for this server, by a holder
    /// of its token, and not from a web page. Exactly: an origin-form target (`/runbook-hook`, never
    /// `http://other/...`), one `Host` naming this server, one `Authorization` that is `Bearer ` and the
    /// token, nothing around it (issue 28, F9).
    fn admit(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
        if let Some(o) = headers.get(header::ORIGIN) {
            return Err((StatusCode::FORBIDDEN, format!("a request with an Origin ({}) is never decided", String::from_utf8_lossy(o.as_bytes()))));
        }
        if uri.scheme().is_some() || uri.authority().is_some() {
            return Err((StatusCode::FORBIDDEN, format!("an absolute-form target ({uri}) is never decided: only a path")));
        }
        let hosts: Vec<String> = headers.get_all(header::HOST).iter().map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned()).collect();
        let host = match hosts.as_slice() {
            [one] => one.clone(),
            [] => String::new(),
            _ => return Err((StatusCode::FORBIDDEN, format!("{} Host headers: a request names exactly one", hosts.len()))),
        };
        if host != format!("127.0.0.1:{}", self.port) && host != format!("localhost:{}", self.port) {
            return Err((StatusCode::FORBIDDEN, format!("Host `{host}` is not this server's (127.0.0.1:{})", self.port)));
        }
        let Some(token) = &self.token else {
            // Separated mode: who asks is the kernel's to say ([`Shared::who`]).
            return Ok(());
        };
        let auth: Vec<&[u8]> = headers.get_all(header::AUTHORIZATION).iter().map(|a| a.as_bytes()).collect();
        let given = match auth.as_slice() {
            [one] => one.strip_prefix(b"Bearer ").unwrap_or(b""),
            _ => b"",
        };
        if !constant_time_eq(given, token.as_bytes()) {
            let why = if given.is_empty() { "no bearer token" } else { "a wrong bearer token" };
            return Err((StatusCode::UNAUTHORIZED, format!("{why}: the hook configuration passes ${TOKEN_ENV} (see `runbook-host hook install`)")));
        }
        Ok(())
    }

    /// Who is on the other end of `peer`'s connection; refused (403) when the kernel lists no such
    /// connection or it is another user's: a token another user captured decides nothing (issue 28, F1).
    /// Asked once per connection (reading `/proc/net/tcp` costs about a millisecond whatever it holds);
    /// later requests on a kept-alive connection reuse the answer.
    /// `admin`: the request is for the server itself (status, shutdown) rather than an event.
    fn who(&self, peer: std::net::SocketAddr, conn: crate::net::listen::ConnId, admin: bool) -> std::result::Result<Who, (StatusCode, String)> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner()).get(&conn).copied();
        let who = match known {
            Some(w) => w,
            None => {
                let server = std::net::SocketAddr::from(peer::loopback(self.port));
                let Some((uid, proc)) = peer::asking(server, peer) else {
                    return Err((StatusCode::FORBIDDEN, format!("the kernel lists no connection from {peer} to this server")));
                };
                Who { uid, proc }
            }
        };
        let uid = who.uid;
        match &self.access {
            Access::Personal if uid != self.uid => {
                return Err((StatusCode::FORBIDDEN, format!("a request from another user (uid {uid}) is never decided, token or not")));
            }
            Access::Service { .. } if admin && uid != 0 && uid != self.uid => {
                return Err((StatusCode::FORBIDDEN, format!("uid {uid} asked for the service itself: only root and the service's user may")));
            }
            Access::Service { clients } if !admin && !clients.contains(&uid) => {
                return Err((StatusCode::FORBIDDEN, format!("uid {uid} is not a client of this service (`runbook-host service install --client USER`)")));
            }
            _ => {}
        }
        if known.is_some() {
            return Ok(who);
        }
        if who.proc.is_some() {
            let mut m = self.known.lock().unwrap_or_else(|p| p.into_inner());
            if m.len() >= 4096 {
                m.clear();
            }
            m.insert(conn, who);
        }
        Ok(who)
    }

    /// Decides one event (blocking: the run's writes are synchronous and durable). The inner Err is a
    /// refusal (403): the request is not the session's client's, and nothing is decided or recorded.
    fn handle(&self, ev: &HookEvent, who: Who) -> Result<std::result::Result<Answer, String>> {
        let session = ev.session();
        if !crate::files::is_safe_name(session) {
            bail!("`{session}` is not a usable session id");
        }
        if who.proc.is_none() {
            // Refused before the session is opened: a request from no findable process begins no run.
            return Ok(Err("the process that sent it cannot be found (its socket is in no process this server may inspect)".into()));
        }
        let slot = self.slot(session);
        let mut g = lock_slot(&slot);
        let cfg = &self.cfg;
        let mut answer = None;
        if g.open.is_none() {
            let opened = (|| -> Result<Open> {
                check_not_broken(&cfg.runs, session)?;
                let is_start = matches!(ev, HookEvent::SessionStart { .. });
                if !is_start && !has_state(&cfg.runs, session) {
                    bail!("session `{session}` was never started: no SessionStart of it reached runbook-host (is the SessionStart command hook installed?)");
                }
                let lock = lock(&cfg.runs, session, is_start, cfg.lock_timeout)?;
                let run = if has_state(&cfg.runs, session) {
                    super::resume_from(self.policy.clone(), cfg, session, self.checkpoints().as_deref(), &mut Timing::default())?
                } else {
                    let (note, run) = create(self.policy.clone(), cfg, session)?;
                    answer = Some(note);
                    run
                };
                let checkpointed = run.events_recorded();
                Ok(Open { run, _lock: lock, allowed: BTreeSet::new(), last: None, events: 0, client: None, chain: Vec::new(), checkpointed })
            })();
            match opened {
                Ok(o) => g.open = Some(o),
                Err(e) => {
                    // Nothing is kept of a session that could not be opened (a request naming sessions
                    // that do not exist grows nothing).
                    drop(g);
                    self.forget(session, &slot);
                    return Err(e);
                }
            }
        }
        let open = g.open.as_mut().expect("opened above");
        if let Err(why) = bind(open, ev, who, session) {
            return Ok(Err(why));
        }
        let answer = match (ev, answer) {
            (HookEvent::SessionStart { .. }, Some(note)) => note,
            // A resumed session (`--resume`, `/clear`, compaction) keeps its run.
            (HookEvent::SessionStart { .. }, None) => Answer::Pass,
            (_, _) => decide(cfg, ev, &mut open.run, Some(&mut open.allowed))?,
        };
        open.events += 1;
        let what = match &answer {
            Answer::Pass => "pass",
            Answer::Deny(_) => "deny",
            Answer::Block(_) => "block",
            Answer::Note(_) => "note",
        };
        open.last = Some(match ev {
            HookEvent::PreToolUse { tool, .. } | HookEvent::PostToolUse { tool, .. } | HookEvent::PermissionRequest { tool, .. } => {
                format!("{} {tool}: {what}", ev.name())
            }
            _ => format!("{}: {what}", ev.name()),
        });
        self.decided.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.maybe_checkpoint(session, open, false);
        if matches!(ev, HookEvent::SessionEnd { .. }) {
            // The session is over: its run is finished and its lock released.
            if let Some(dir) = self.checkpoints() {
                super::remove_checkpoint(&dir, session);
            }
            g.open = None;
            drop(g);
            self.forget(session, &slot);
        }
        Ok(Ok(answer))
    }

    /// Where the separated mode's service keeps its checkpoints (out of every client's reach, as its runs
    /// are); none in personal mode, where the agent could write them (see [`crate::run::Checkpoint`]).
    fn checkpoints(&self) -> Option<PathBuf> {
        matches!(self.access, Access::Service { .. }).then(|| server_dir(&self.cfg.runs).join("checkpoints"))
    }

    /// A checkpoint of the open session once every [`CHECKPOINT_EVERY`] records, so that a restarted
    /// service replays at most that many. A failed write is logged: the next resume replays more.
    fn maybe_checkpoint(&self, session: &str, open: &mut Open, force: bool) {
        let Some(dir) = self.checkpoints() else { return };
        let n = open.run.events_recorded();
        if open.run.finished() || (!force && n < open.checkpointed + CHECKPOINT_EVERY) || n == open.checkpointed {
            return;
        }
        match super::write_checkpoint(&dir, session, &mut open.run) {
            Ok(()) => open.checkpointed = n,
            Err(e) => log(format_args!("session {session}: no checkpoint written: {e:#}")),
        }
    }

    /// Every open session's checkpoint, at a clean shutdown.
    fn checkpoint_all(&self) {
        let slots: Vec<(String, Arc<Mutex<Slot>>)> =
            self.sessions.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (session, slot) in slots {
            if let Some(open) = lock_slot(&slot).open.as_mut() {
                self.maybe_checkpoint(&session, open, true);
            }
        }
    }

    fn forget(&self, session: &str, slot: &Arc<Mutex<Slot>>) {
        let mut m = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if m.get(session).is_some_and(|s| Arc::ptr_eq(s, slot) && s.try_lock().is_ok_and(|g| g.open.is_none())) {
            m.remove(session);
        }
    }

    /// Resumes every session left open (by a server that was killed, or by command hooks), so that
    /// each holds its lock again and answers at once. A run that cannot be resumed is logged and left
    /// to its next event, which fails closed with the reason.
    fn resume_open(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(hook_dir(&self.cfg.runs)) else {
            return 0;
        };
        let mut n = 0;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(session) = name.strip_suffix(".json").filter(|s| crate::files::is_safe_name(s)) else {
                continue;
            };
            if !has_state(&self.cfg.runs, session) {
                continue;
            }
            let slot = self.slot(session);
            let mut g = lock_slot(&slot);
            let mut replayed = 0;
            let opened = (|| -> Result<Option<Open>> {
                let lock = lock(&self.cfg.runs, session, false, self.cfg.lock_timeout)?;
                let mut timing = Timing::default();
                let run = super::resume_from(self.policy.clone(), &self.cfg, session, self.checkpoints().as_deref(), &mut timing)?;
                let checkpointed = run.events_recorded();
                replayed = timing.chain_checked;
                Ok((!run.finished()).then(|| Open {
                    run,
                    _lock: lock,
                    allowed: BTreeSet::new(),
                    last: None,
                    events: 0,
                    client: None,
                    chain: Vec::new(),
                    checkpointed,
                }))
            })();
            match opened {
                Ok(Some(o)) => {
                    log(format_args!(
                        "resumed session {session} (run {}) from its bundle: {} records, {replayed} replayed",
                        o.run.run_id(),
                        o.run.events_recorded()
                    ));
                    g.open = Some(o);
                    n += 1;
                }
                Ok(None) => {
                    drop(g);
                    self.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(session);
                }
                Err(e) => log(format_args!("session {session} could not be resumed: {e:#}")),
            }
        }
        n
    }

    /// The server's status, with one session's when `session` names an open one. Which sessions are open
    /// is never listed: a token holder learns nothing of the sessions it does not already name (F8).
    fn status(&self, session: Option<&str>) -> Value {
        let slots: Vec<Arc<Mutex<Slot>>> = self.sessions.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let open = slots.iter().filter(|s| s.try_lock().map_or(true, |g| g.open.is_some())).count();
        let one = session.and_then(|name| {
            let slot = self.sessions.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned()?;
            // A session being decided right now is shown as busy rather than waited for.
            let Ok(mut g) = slot.try_lock() else {
                return Some(json!({"session": name, "busy": true}));
            };
            let o = g.open.as_mut()?;
            let st = o.run.state().ok();
            Some(json!({
                "session": name,
                "run_id": o.run.run_id(),
                "step": st.as_ref().and_then(|s| s.step.clone()),
                "finished": o.run.finished(),
                "events": o.events,
                "last": o.last,
                "client": o.client.map(|c| c.pid),
            }))
        });
        let mut v = json!({
            "schema": SERVER_SCHEMA,
            "pid": std::process::id(),
            "port": self.port,
            "runs": self.runs.to_string_lossy(),
            "started": self.started,
            "config": self.config,
            "decided": self.decided.load(std::sync::atomic::Ordering::Relaxed),
            "open": open,
        });
        if session.is_some() {
            v["session"] = one.unwrap_or(Value::Null);
        }
        v
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn refused((status, why): (StatusCode, String)) -> Response {
    log(format_args!("refused ({}): {why}", status.as_u16()));
    (status, format!("runbook-host hook serve: {why}\n")).into_response()
}

/// An answer that fails closed for the event: a tool call or a permission denied, a tool's aftermath
/// or a stop blocked (as the command hook's exit 2 does), with the reason.
fn fail_closed(event: &str, why: &str) -> Response {
    let reason = format!("runbook-host hook: denied (fail closed): {why}");
    let answer = match event {
        "PreToolUse" | "PermissionRequest" => Answer::Deny(reason),
        "SessionEnd" | "SessionStart" => return (StatusCode::INTERNAL_SERVER_ERROR, format!("{reason}\n")).into_response(),
        _ => Answer::Block(reason),
    };
    json_answer(claude::render(event, &answer))
}

fn json_answer(v: Option<Value>) -> Response {
    match v {
        Some(v) => ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response(),
        None => StatusCode::OK.into_response(),
    }
}

async fn on_hook(
    State(sh): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Extension(conn): Extension<crate::net::listen::ConnId>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Who asks is checked before anything is read, and a body declared over the bound is refused
    // before it is read: no request that will not be decided makes the server buffer it.
    if let Err(r) = sh.admit(&uri, &headers) {
        return refused(r);
    }
    *sh.last_request.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let body: Option<Bytes> = match declared {
        Some(n) if n > BODY_LIMIT as u64 => None,
        _ => axum::body::to_bytes(body, BODY_LIMIT).await.ok(),
    };
    let Some(body) = body else {
        log(format_args!("refused (413): a body over {BODY_LIMIT} bytes"));
        return (StatusCode::PAYLOAD_TOO_LARGE, format!("runbook-host hook serve: a hook payload is at most {BODY_LIMIT} bytes\n")).into_response();
    };
    let ev = match sh.cfg.client.parse(None, &body) {
        Ok(ev) => ev,
        Err(e) => {
            log(format_args!("bad payload: {e}"));
            return (StatusCode::BAD_REQUEST, format!("runbook-host hook serve: {e}\n")).into_response();
        }
    };
    let event = ev.name();
    let worker = sh.clone();
    let handled = tokio::task::spawn_blocking(move || match worker.who(peer, conn, false) {
        Ok(who) => worker.handle(&ev, who).map(|r| r.map_err(|why| (StatusCode::FORBIDDEN, why))),
        Err(r) => Ok(Err(r)),
    })
    .await;
    match handled {
        Ok(Ok(Err(r))) => refused(r),
        Ok(Ok(Ok(answer))) => {
            // After the decision was recorded, before the client hears it.
            crate::faults::point("answer", "before");
            json_answer(claude::render(event, &answer))
        }
        Ok(Err(e)) => {
            log(format_args!("{event}: {e:#}"));
            fail_closed(event, &format!("{e:#}"))
        }
        Err(_) => {
            log(format_args!("{event}: the decision panicked"));
            fail_closed(event, "the hook server panicked while deciding")
        }
    }
}

/// The checks every request but an event's passes before it is answered: [`Shared::admit`], then who
/// asks ([`Shared::who`], off the runtime: it reads `/proc`).
async fn admitted(sh: &Arc<Shared>, peer: SocketAddr, conn: crate::net::listen::ConnId, uri: &Uri, headers: &HeaderMap) -> std::result::Result<(), Response> {
    sh.admit(uri, headers).map_err(refused)?;
    let worker = sh.clone();
    match tokio::task::spawn_blocking(move || worker.who(peer, conn, true)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(r)) => Err(refused(r)),
        Err(_) => Err(StatusCode::INTERNAL_SERVER_ERROR.into_response()),
    }
}

async fn on_status(
    State(sh): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Extension(conn): Extension<crate::net::listen::ConnId>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = admitted(&sh, peer, conn, &uri, &headers).await {
        return r;
    }
    // `?session=ID`: that session's status; no listing of sessions is ever given (issue 28, F8).
    let session = uri.query().and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("session="))).map(str::to_string);
    let worker = sh.clone();
    match tokio::task::spawn_blocking(move || worker.status(session.as_deref())).await {
        Ok(v) => json_answer(Some(v)),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn on_shutdown(
    State(sh): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Extension(conn): Extension<crate::net::listen::ConnId>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = admitted(&sh, peer, conn, &uri, &headers).await {
        return r;
    }
    log("shutting down on request");
    sh.shutdown.notify_one();
    StatusCode::OK.into_response()
}

/// Serves until asked to shut down, or (with `idle_exit`) until no session has been open and no event has
/// come for that long: a server started by a session does not outlive its use (a day of tests once left
/// four running). `port` 0 takes any free port. `ready` is called with the port once the server answers.
pub fn serve(policy: Arc<Policy>, cfg: Config, port: u16, idle_exit: Option<Duration>, access: Access, ready: impl FnOnce(u16)) -> Result<()> {
    let dir = checked_server_dir(&cfg.runs)?;
    let serve_lock = open_nofollow(&dir.join("serve.lock"), true).context("cannot open the server's lock")?;
    if serve_lock.try_lock().is_err() {
        let at = read_info(&cfg.runs).map(|i| format!(" (pid {}, port {})", i.pid, i.port)).unwrap_or_default();
        bail!("a hook server already serves {}{at}", cfg.runs.display());
    }
    let token = match access {
        Access::Personal => Some(token(&cfg.runs, true)?),
        Access::Service { .. } => None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.with_context(|| format!("cannot listen on 127.0.0.1:{port}"))?;
        let port = listener.local_addr()?.port();
        let runs = cfg.runs.canonicalize().unwrap_or_else(|_| cfg.runs.clone());
        let config = cfg.fingerprint();
        let shared = Arc::new(Shared {
            policy,
            config,
            cfg,
            token,
            access,
            port,
            runs,
            started: crate::clock::now_rfc3339(),
            sessions: Mutex::new(BTreeMap::new()),
            shutdown: tokio::sync::Notify::new(),
            decided: Default::default(),
            last_request: Mutex::new(Instant::now()),
            uid: crate::private::euid(),
            known: Default::default(),
        });
        let t = Instant::now();
        let sh = shared.clone();
        let resumed = tokio::task::spawn_blocking(move || sh.resume_open()).await?;
        let mode = match &shared.access {
            Access::Personal => "personal mode".to_string(),
            Access::Service { clients } => format!("separated mode, clients uid {clients:?}"),
        };
        log(format_args!(
            "listening on 127.0.0.1:{port} (pid {}, {mode}); {resumed} open sessions resumed in {} ms",
            std::process::id(),
            t.elapsed().as_millis()
        ));
        let info = json!({"schema": SERVER_SCHEMA, "pid": std::process::id(), "port": port, "runs": shared.runs.to_string_lossy(), "started": shared.started});
        super::write_atomic(&dir.join("server.json"), format!("{info}\n").as_bytes())?;
        let mut app =
            Router::new().route(HOOK_PATH, post(on_hook)).route(STATUS_PATH, get(on_status)).route(SHUTDOWN_PATH, post(on_shutdown)).with_state(shared.clone());
        // The approval page (crate::web), where approvals are signed: answered only with a passkey of
        // that file, so it needs no token (a browser has none).
        if let Some(signers) = &shared.cfg.allowed_signers {
            let page = crate::web::ApprovalPage { runs: shared.runs.clone(), allowed_signers: signers.clone(), port };
            app = app.merge(crate::web::approvals_router(Arc::new(page)));
            eprintln!("the approval page: http://localhost:{port}/approvals");
        }
        ready(port);
        if let Some(idle) = idle_exit {
            let sh = shared.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep((idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30))).await;
                    // A session being decided (its slot locked) counts as open.
                    let open = sh.sessions.lock().unwrap_or_else(|p| p.into_inner()).values().any(|s| s.try_lock().map_or(true, |g| g.open.is_some()));
                    let quiet = sh.last_request.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
                    if !open && quiet >= idle {
                        log(format_args!("no open session and no event for {} s: exiting", quiet.as_secs()));
                        sh.shutdown.notify_one();
                        return;
                    }
                }
            });
        }
        let sh = shared.clone();
        crate::net::listen::serve(listener, app, crate::net::listen::Limits::default(), async move { sh.shutdown.notified().await }).await?;
        let sh = shared.clone();
        tokio::task::spawn_blocking(move || sh.checkpoint_all()).await?;
        let _ = std::fs::remove_file(dir.join("server.json"));
        drop(serve_lock);
        Ok(())
    })
}

/// A client of the server on this machine (the SessionStart command hook, `hook status`, `hook stop`).
pub struct Client {
    agent: ureq::Agent,
    port: u16,
    /// Personal mode: the token sent. Separated mode: none (the service knows its clients by uid).
    token: Option<String>,
    /// The uid the listener must be: this user's own (personal) or the service's.
    server_uid: u32,
}

impl Client {
    fn agent(timeout: Duration) -> ureq::Agent {
        ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false).max_redirects(0).build().into()
    }

    /// The personal-mode server of `runs`.
    pub fn new(runs: &Path, port: u16, timeout: Duration) -> Result<Client> {
        Ok(Client { agent: Self::agent(timeout), port, token: Some(token(runs, true)?), server_uid: crate::private::euid() })
    }

    /// The separated-mode service on `port`, which must be held by `service_uid`.
    pub fn service(port: u16, service_uid: u32, timeout: Duration) -> Client {
        Client { agent: Self::agent(timeout), port, token: None, server_uid: service_uid }
    }

    fn authorized(&self, r: ureq::RequestBuilder<ureq::typestate::WithBody>) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        match &self.token {
            Some(t) => r.header("Authorization", &format!("Bearer {t}")),
            None => r,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Refuses a listener on the port that is not the server's user's: neither the token nor an event is
    /// ever sent to a process some other user bound there while the server was down (issue 28, F1:
    /// `nobody` captured the token that way).
    pub fn check_listener(&self) -> std::result::Result<(), ureq::Error> {
        let refuse = |why: String| Err(ureq::Error::Io(std::io::Error::new(std::io::ErrorKind::PermissionDenied, why)));
        match peer::listener_uid(peer::loopback(self.port)) {
            Ok(Some(uid)) if uid != self.server_uid => {
                let whose = if self.token.is_some() { "this user".to_string() } else { format!("the service's user (uid {})", self.server_uid) };
                refuse(format!("127.0.0.1:{} is held by a process of uid {uid}, not of {whose}: nothing is sent to it", self.port))
            }
            Ok(None) if self.token.is_none() => refuse(format!("nothing listens on 127.0.0.1:{}: the runbook-host service is not running", self.port)),
            _ => Ok(()),
        }
    }

    /// POSTs a hook payload; the status and the body.
    pub fn hook(&self, payload: &[u8]) -> std::result::Result<(u16, String), ureq::Error> {
        self.check_listener()?;
        let mut r = self.authorized(self.agent.post(&self.url(HOOK_PATH))).content_type("application/json").send(payload)?;
        Ok((r.status().as_u16(), r.body_mut().read_to_string()?))
    }

    pub fn status(&self) -> std::result::Result<(u16, String), ureq::Error> {
        self.status_of(None)
    }

    /// The server's status, with `session`'s when given.
    pub fn status_of(&self, session: Option<&str>) -> std::result::Result<(u16, String), ureq::Error> {
        self.check_listener()?;
        let path = match session {
            Some(s) => format!("{STATUS_PATH}?session={s}"),
            None => STATUS_PATH.to_string(),
        };
        let mut r = self.agent.get(&self.url(&path));
        if let Some(t) = &self.token {
            r = r.header("Authorization", &format!("Bearer {t}"));
        }
        let mut r = r.call()?;
        Ok((r.status().as_u16(), r.body_mut().read_to_string()?))
    }

    pub fn shutdown(&self) -> std::result::Result<u16, ureq::Error> {
        self.check_listener()?;
        let r = self.authorized(self.agent.post(&self.url(SHUTDOWN_PATH))).send_empty()?;
        Ok(r.status().as_u16())
    }

    /// Whether this server answers as the server of `runs`.
    pub fn serves(&self, runs: &Path) -> bool {
        self.serving(runs).is_some()
    }

    /// The options digest of the server of `runs` answering here, if one does.
    pub fn serving(&self, runs: &Path) -> Option<String> {
        let want = runs.canonicalize().unwrap_or_else(|_| runs.to_path_buf());
        match self.status() {
            Ok((200, body)) => serde_json::from_str::<Value>(&body)
                .ok()
                .filter(|v| v["runs"].as_str() == Some(&*want.to_string_lossy()))
                .map(|v| v["config"].as_str().unwrap_or_default().to_string()),
            _ => None,
        }
    }
}

/// Makes sure a server of `runs` deciding with the options `config` (a [`Config::fingerprint`]) answers on
/// `port`, starting one with `start` when none does: under `start.lock`, so that two sessions starting at
/// once never start two servers. A server of `runs` started with other options (an `install` since, a
/// changed permission rule) is stopped first: its open sessions resume in the new one. Waits up to `wait`.
pub fn ensure(runs: &Path, port: u16, config: &str, wait: Duration, start: impl FnOnce(&Path) -> Result<()>) -> Result<Client> {
    let client = Client::new(runs, port, Duration::from_secs(30))?;
    // Another user's process on the port: fail closed, the token unsent (the session's events are denied).
    if let Err(e) = client.check_listener() {
        bail!("{e}");
    }
    if client.serving(runs).as_deref() == Some(config) {
        return Ok(client);
    }
    let dir = checked_server_dir(runs)?;
    let start_lock = open_nofollow(&dir.join("start.lock"), true).context("cannot open the server's start lock")?;
    let deadline = Instant::now() + wait;
    while start_lock.try_lock().is_err() {
        if Instant::now() > deadline {
            bail!("another SessionStart has been starting the hook server for {} ms", wait.as_millis());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    match client.serving(runs) {
        Some(c) if c == config => return Ok(client),
        Some(_) => {
            let _ = client.shutdown();
            while client.serves(runs) || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                if Instant::now() > deadline {
                    bail!("the hook server on 127.0.0.1:{port}, started with other options, did not stop within {} ms", wait.as_millis());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        None => {}
    }
    start(&dir.join("log"))?;
    while Instant::now() < deadline {
        if client.serving(runs).as_deref() == Some(config) {
            return Ok(client);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("the hook server did not answer on 127.0.0.1:{port} within {} ms; see {}", wait.as_millis(), dir.join("log").display())
}
