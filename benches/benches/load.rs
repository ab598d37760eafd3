//! Sustained load (issue 12): the MCP proxy over Streamable HTTP and the resident hook server, each kept
//! busy by concurrent sessions for tens of thousands of calls, then checked event by event.
//!
//! - **Proxy**: `runbook-host run host/tests/mcp/runbooks/echo-only.json --runs RUNS --listen 127.0.0.1:0 --
//!   mcp-server-everything` (the server its child over stdio). `LOAD_CLIENTS` (16) rmcp Streamable HTTP
//!   clients (protocol 2025-11-25, so each is an MCP session and a run with its own bundle), each making
//!   `LOAD_CALLS` (10,000) sequential `echo` calls with the message `c{client}-{i}`, all clients at once.
//!   Then every session is closed (`DELETE`), every bundle must have its `report.json`, and the proxy is
//!   stopped with SIGTERM.
//! - **Hook server**: `runbook-host hook serve` on read-only-investigation at R1. `LOAD_SESSIONS` (8)
//!   sessions at once, one client (a kept-alive ureq connection) each: SessionStart, `LOAD_EVENTS` (10,000)
//!   events as PreToolUse/PostToolUse pairs of an allowed `df -h /var/s{session}/{i}`, then Stop and
//!   SessionEnd (which ends the run). Then the server is asked to shut down.
//!
//! Each part runs `LOAD_ROUNDS` (2) rounds of its sessions on the same server process, new sessions each
//! round: memory the first round left resident that the second reuses is kept, memory that grows again
//! is leaked. `LOAD_SAME_COMMAND=1` (a diagnostic) sends the same `df -h /var` in every hook call.
//!
//! Checks (any failure panics, so the program exits non-zero): every call answered, with its own message;
//! each bundle holds exactly one `invoke` and one `result` per call, each call's number once (no event
//! lost or duplicated), every invoke allowed; every bundle ended with its report; `runbook-host verify
//! --format json` exits 0 and says `ok` with the expected event count for every bundle (timed); the hook
//! server's own count of decided events equals the number of requests sent.
//!
//! Prints, per round: calls, wall time, calls/s, p50/p99/max latency of every call, the server's resident
//! memory (`VmRSS`) with the sessions opened, at each quarter of the load, after the sessions closed;
//! the RSS before any session; the verify time per bundle.
//!
//! Needs `bash host/tests/mcp/setup` (for the proxy part) and a release `runbook-host`:
//! `target/release/runbook-host` (or the one under `$CARGO_TARGET_DIR/release`, or `$RUNBOOK_HOST_BIN`);
//! a part whose prerequisites are missing is skipped with a message. `LOAD_ONLY=proxy` or `LOAD_ONLY=hook`
//! runs one part.
//!
//! `LOAD_UPSTREAM` picks the proxy's server: `everything` (the default, server-everything over stdio) or
//! `echo` (benches/src/bin/echo-upstream.rs, an rmcp `echo` over stdio that is not the bottleneck; build it
//! with `cargo build --release -p runbook-benches --bin echo-upstream`). Before the proxied rounds the same
//! clients call the same server directly (each client its own child over stdio, all at once: `direct`), so
//! the proxy's throughput and latency have a ratio to the server alone; `LOAD_DIRECT=0` skips that.

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::ServiceExt;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Client = RunningService<RoleClient, ClientConfig>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `$RUNBOOK_HOST_BIN`, else `target/release/runbook-host`, else the release build of the target directory
/// this bench was built in (`$CARGO_TARGET_DIR`).
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("RUNBOOK_HOST_BIN") {
        return PathBuf::from(p);
    }
    let default = root().join("target/release/runbook-host");
    if default.is_file() {
        return default;
    }
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target directory").join("release").join("runbook-host")
}

/// The proxy's upstream (`LOAD_UPSTREAM`): its name for the output and its command, or why it is missing.
fn upstream() -> Result<(&'static str, PathBuf), String> {
    match std::env::var("LOAD_UPSTREAM").unwrap_or_default().as_str() {
        "" | "everything" => {
            let p = root().join("host/tests/mcp/node_modules/.bin/mcp-server-everything");
            if p.exists() {
                Ok(("server-everything", p))
            } else {
                Err("no server-everything: run `bash host/tests/mcp/setup` first".into())
            }
        }
        "echo" => {
            // Beside the bench's own build, whichever runbook-host is measured ($RUNBOOK_HOST_BIN).
            let p = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target directory").join("release").join("echo-upstream");
            if p.is_file() {
                Ok(("echo-upstream", p))
            } else {
                Err(format!("no {}: `cargo build --release -p runbook-benches --bin echo-upstream`", p.display()))
            }
        }
        other => panic!("LOAD_UPSTREAM={other}: `everything` or `echo`"),
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().split_whitespace().next().unwrap().parse().unwrap()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn latency_line(what: &str, v: &mut [Duration]) -> String {
    v.sort();
    format!(
        "{what}: p50 {}, p90 {}, p99 {}, p99.9 {}, max {} ({} samples)",
        ms(pct(v, 0.5)),
        ms(pct(v, 0.9)),
        ms(pct(v, 0.99)),
        ms(pct(v, 0.999)),
        ms(pct(v, 1.0)),
        v.len()
    )
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < within {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Samples a process's resident memory every 250 ms with how many calls were done, until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<(u64, u64)>>,
}

impl Sampler {
    fn start(pid: u32, done: Arc<AtomicU64>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut v = Vec::new();
            while !s.load(Ordering::SeqCst) {
                v.push((done.load(Ordering::SeqCst), rss_kib(pid)));
                std::thread::sleep(Duration::from_millis(250));
            }
            v
        });
        Sampler { stop, handle }
    }

    /// The samples, and a line with the RSS at each quarter of `total` calls and the largest seen.
    fn finish(self, total: u64, end_rss: u64) -> String {
        self.stop.store(true, Ordering::SeqCst);
        let mut v = self.handle.join().unwrap();
        v.push((total, end_rss));
        let at = |q: f64| v.iter().find(|(d, _)| *d as f64 >= q * total as f64).map(|s| s.1).unwrap_or(end_rss);
        let max = v.iter().map(|s| s.1).max().unwrap();
        format!(
            "RSS during the load: {} KiB at 25 %, {} KiB at 50 %, {} KiB at 75 %, {} KiB at 100 % of the calls; largest sample {max} KiB ({} samples, every 250 ms)",
            at(0.25),
            at(0.5),
            at(0.75),
            end_rss,
            v.len()
        )
    }
}

/// The bundles under `runs` (directories with a `run.json`), sorted.
fn bundles(runs: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(runs).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.join("run.json").is_file()).collect();
    v.sort();
    v
}

/// The parsed lines of a bundle's `events.ndjson`.
fn events(bundle: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(bundle.join("events.ndjson")).unwrap_or_else(|e| panic!("{}: events.ndjson: {e}", bundle.display()));
    text.lines()
        .enumerate()
        .map(|(n, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: events.ndjson:{}: not JSON: {e}", bundle.display(), n + 1)))
        .collect()
}

/// `runbook-host verify --format json BUNDLE`: must exit 0 and say `ok` with `events` events. Its time.
fn verify(bin: &Path, bundle: &Path, events: usize) -> Duration {
    let t = Instant::now();
    let out = Command::new(bin).args(["verify", "--format", "json"]).arg(bundle).stdin(Stdio::null()).output().expect("run runbook-host verify");
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "verify {} exited {:?}:\n{text}\n{}", bundle.display(), out.status.code(), String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("verify {}: not JSON ({e}):\n{text}", bundle.display()));
    assert_eq!(v["ok"], true, "verify {}: {text}", bundle.display());
    assert_eq!(v["events"].as_u64(), Some(events as u64), "verify {}: events counted", bundle.display());
    took
}

/// Verifies every bundle; the line with the median and largest time.
fn verify_all(bin: &Path, list: &[(PathBuf, usize)]) -> String {
    let mut times: Vec<Duration> = list.iter().map(|(b, n)| verify(bin, b, *n)).collect();
    times.sort();
    let sizes: BTreeSet<usize> = list.iter().map(|(_, n)| *n).collect();
    format!(
        "verify --format json: all {} bundles ok (exit 0), {:?} events each: median {}, min {}, max {} a bundle",
        list.len(),
        sizes,
        ms(pct(&times, 0.5)),
        ms(times[0]),
        ms(pct(&times, 1.0))
    )
}

// ---------------------------------------------------------------------------------------------------
// The proxy

/// `runbook-host run echo-only.json --runs RUNS --listen 127.0.0.1:0 -- SERVER`, its URL read from the line
/// it prints on stderr (the rest of stderr drained); stopped with SIGTERM.
struct Proxy {
    child: Child,
    url: String,
}

impl Proxy {
    fn start(bin: &Path, cwd: &Path, runs: &Path, server: &Path) -> Proxy {
        let runbook = root().join("host/tests/mcp/runbooks/echo-only.json");
        let mut child = Command::new(bin)
            .arg("run")
            .arg(&runbook)
            .arg("--runs")
            .arg(runs)
            .args(["--listen", "127.0.0.1:0", "--"])
            .arg(server)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn runbook-host run --listen");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut before = Vec::new();
            let mut tx = Some(tx);
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.is_none() {
                    continue;
                }
                match line.split("listening on http://").nth(1).and_then(|r| r.split_whitespace().next()) {
                    Some(rest) => {
                        let _ = tx.take().unwrap().send(Ok(format!("http://{rest}")));
                    }
                    None => before.push(line),
                }
            }
            if let Some(tx) = tx {
                let _ = tx.send(Err(before.join("\n")));
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(url)) => url,
            Ok(Err(said)) => panic!("runbook-host run --listen exited before listening:\n{said}"),
            Err(_) => panic!("runbook-host run --listen did not listen within 120 s"),
        };
        Proxy { child, url }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM; how it exited (None: it had to be killed after 30 s).
    fn stop(&mut self) -> Option<ExitStatus> {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let s = wait_exit(&mut self.child, Duration::from_secs(30));
        if s.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        s
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

async fn connect(http: &reqwest::Client, url: &str) -> Client {
    let transport = StreamableHttpClientTransport::with_client(http.clone(), StreamableHttpClientTransportConfig::with_uri(url));
    let me = ClientConfig::new(ClientCapabilities::default(), Implementation::new("load", "0")).with_protocol_version(ProtocolVersion::V_2025_11_25);
    me.serve(transport).await.expect("initialize")
}

/// One `echo` of `c{client}-{i}`; the answer must be a success echoing exactly that message.
async fn echo(peer: &Peer<RoleClient>, client: usize, i: usize) {
    let message = format!("c{client}-{i}");
    let mut p = CallToolRequestParams::new("echo");
    p.arguments = Some(serde_json::json!({ "message": message }).as_object().unwrap().clone());
    let r = peer.call_tool(p).await.unwrap_or_else(|e| panic!("client {client}, call {i}: echo failed: {e}"));
    assert!(!r.is_error.unwrap_or(false), "client {client}, call {i}: an error: {r:?}");
    let text = serde_json::to_string(&r).unwrap();
    assert!(text.contains(&format!("Echo: {message}\"")), "client {client}, call {i}: the answer is not this call's: {text}");
}

/// The numbers `i` of the messages `c{client}-{i}` found in `text` (every occurrence).
fn message_numbers(text: &str, client: &mut Option<usize>, bundle: &Path) -> Vec<usize> {
    let mut out = Vec::new();
    for part in text.split("Echo: c").skip(1) {
        let (c, rest) = part.split_once('-').unwrap_or_else(|| panic!("{}: a result without a message number: {text}", bundle.display()));
        let c: usize = c.parse().unwrap_or_else(|_| panic!("{}: bad client number in {text}", bundle.display()));
        let i: usize = rest.split(|ch: char| !ch.is_ascii_digit()).next().unwrap().parse().unwrap();
        match client {
            None => *client = Some(c),
            Some(k) => assert_eq!(*k, c, "{}: messages of two clients in one bundle", bundle.display()),
        }
        out.push(i);
    }
    out
}

fn check_proxy_bundle(bundle: &Path, calls: usize) -> (usize, usize, String) {
    assert!(bundle.join("report.json").is_file(), "{}: no report.json", bundle.display());
    let manifest = std::fs::read_to_string(bundle.join("run.json")).unwrap();
    assert!(manifest.contains(r#""event": "ended""#), "{}: run.json does not record the run's end", bundle.display());
    let lines = events(bundle);
    let mut client = None;
    let (mut invoked, mut answered) = (vec![0u32; calls], vec![0u32; calls]);
    let mut other = std::collections::BTreeMap::<String, usize>::new();
    for (n, l) in lines.iter().enumerate() {
        let place = || format!("{}: events.ndjson:{}", bundle.display(), n + 1);
        let kind = l["event"]["type"].as_str().unwrap_or_else(|| panic!("{}: no event type", place()));
        match kind {
            "invoke" => {
                assert_eq!(l["event"]["tool"], "echo", "{}", place());
                assert_eq!(l["decision"]["decision"], "allow", "{}: an invoke not allowed", place());
                let m = l["event"]["arguments"]["message"].as_str().unwrap_or_else(|| panic!("{}: no message", place()));
                let (c, i) = m.strip_prefix('c').and_then(|m| m.split_once('-')).unwrap_or_else(|| panic!("{}: message {m}", place()));
                let (c, i): (usize, usize) = (c.parse().unwrap(), i.parse().unwrap());
                match client {
                    None => client = Some(c),
                    Some(k) => assert_eq!(k, c, "{}: messages of two clients in one bundle", place()),
                }
                assert!(i < calls, "{}: call number {i} out of range", place());
                invoked[i] += 1;
            }
            "result" => {
                let mut nums = message_numbers(&l["event"]["result"].to_string(), &mut client, bundle);
                nums.dedup();
                assert_eq!(nums.len(), 1, "{}: a result without exactly one echoed message: {}", place(), l["event"]);
                assert!(nums[0] < calls, "{}: call number out of range", place());
                answered[nums[0]] += 1;
            }
            k => *other.entry(k.to_string()).or_default() += 1,
        }
    }
    let client = client.unwrap_or_else(|| panic!("{}: no call recorded", bundle.display()));
    for (what, v) in [("invoke", &invoked), ("result", &answered)] {
        let missing: Vec<usize> = (0..calls).filter(|&i| v[i] == 0).collect();
        let twice: Vec<usize> = (0..calls).filter(|&i| v[i] > 1).collect();
        assert!(
            missing.is_empty() && twice.is_empty(),
            "{} (client {client}): {what} events: {} missing (first {:?}), {} recorded more than once (first {:?})",
            bundle.display(),
            missing.len(),
            &missing[..missing.len().min(10)],
            twice.len(),
            &twice[..twice.len().min(10)]
        );
    }
    (client, lines.len(), format!("{other:?}"))
}

/// What one round of load measured.
struct Round {
    /// The server's RSS with the round's sessions opened, after their calls, after they were closed.
    rss_open: u64,
    rss_loaded: u64,
    rss_closed: u64,
    during: String,
    wall: Duration,
    latencies: Vec<Duration>,
    closed_in: Duration,
}

/// One round: `clients` new sessions (clients `first..first + clients`), each making `calls` calls at once
/// with the others, then all closed; returns when every bundle so far has its report.
fn proxy_round(rt: &tokio::runtime::Runtime, http: &reqwest::Client, proxy: &Proxy, runs: &Path, first: usize, clients: usize, calls: usize) -> Round {
    let sessions: Vec<Client> = rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..clients {
            v.push(connect(http, &proxy.url).await);
        }
        v
    });
    std::thread::sleep(Duration::from_millis(500));
    let rss_open = rss_kib(proxy.pid());

    let total = (clients * calls) as u64;
    let done = Arc::new(AtomicU64::new(0));
    let sampler = Sampler::start(proxy.pid(), done.clone());
    eprintln!("load/proxy: clients {first}..{}: {clients} sessions x {calls} calls ...", first + clients);
    let t = Instant::now();
    let latencies: Vec<Duration> = rt.block_on(async {
        let tasks: Vec<_> = sessions
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let peer = c.peer().clone();
                let done = done.clone();
                tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(calls);
                    for i in 0..calls {
                        let t = Instant::now();
                        echo(&peer, first + k, i).await;
                        lat.push(t.elapsed());
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    lat
                })
            })
            .collect();
        let mut all = Vec::with_capacity(total as usize);
        for (k, task) in tasks.into_iter().enumerate() {
            all.extend(task.await.unwrap_or_else(|e| panic!("client {} failed: {e}", first + k)));
        }
        all
    });
    let wall = t.elapsed();
    let rss_loaded = rss_kib(proxy.pid());
    let during = sampler.finish(total, rss_loaded);

    // Close every session (DELETE); each ends its run. Wait for every bundle's report.
    let t_close = Instant::now();
    rt.block_on(async {
        for c in sessions {
            c.cancel().await.ok();
        }
    });
    loop {
        let b = bundles(runs);
        let reported = b.iter().filter(|p| p.join("report.json").is_file()).count();
        if b.len() >= first + clients && reported == b.len() {
            break;
        }
        assert!(t_close.elapsed() < Duration::from_secs(300), "after closing the sessions, {reported} of {} bundles have report.json after 300 s", b.len());
        std::thread::sleep(Duration::from_millis(50));
    }
    let closed_in = t_close.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let rss_closed = rss_kib(proxy.pid());
    Round { rss_open, rss_loaded, rss_closed, during, wall, latencies, closed_in }
}

/// The server alone: `clients` clients, each with its own child `server` over stdio, each making `calls`
/// sequential calls, all at once (the same calls and checks as through the proxy).
fn direct_round(rt: &tokio::runtime::Runtime, server: &Path, cwd: &Path, clients: usize, calls: usize) -> (Duration, Vec<Duration>) {
    let sessions: Vec<Client> = rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..clients {
            let mut cmd = tokio::process::Command::new(server);
            cmd.current_dir(cwd);
            let (transport, _) = TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn().expect("start the server");
            v.push(ClientConfig::new(ClientCapabilities::default(), Implementation::new("load", "0")).serve(transport).await.expect("initialize"));
        }
        v
    });
    let t = Instant::now();
    let latencies = rt.block_on(async {
        let tasks: Vec<_> = sessions
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let peer = c.peer().clone();
                tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(calls);
                    for i in 0..calls {
                        let t = Instant::now();
                        echo(&peer, k, i).await;
                        lat.push(t.elapsed());
                    }
                    lat
                })
            })
            .collect();
        let mut all = Vec::with_capacity(clients * calls);
        for task in tasks {
            all.extend(task.await.expect("a direct client failed"));
        }
        all
    });
    let wall = t.elapsed();
    rt.block_on(async {
        for c in sessions {
            c.cancel().await.ok();
        }
    });
    (wall, latencies)
}

fn print_rounds(what: &str, idle: u64, per_round: usize, unit: &str, rounds: &mut [Round]) {
    eprintln!("{what}: RSS {idle} KiB before any session");
    for (r, x) in rounds.iter_mut().enumerate() {
        let n = x.latencies.len();
        eprintln!("round {}: {n} {unit} in {:.2} s = {:.0} {unit}/s", r + 1, x.wall.as_secs_f64(), n as f64 / x.wall.as_secs_f64());
        eprintln!("  {}", latency_line("latency", &mut x.latencies));
        eprintln!(
            "  RSS: {} KiB with the round's {per_round} sessions opened, {} KiB after the {unit} (sessions still open), {} KiB after they closed (closed in {})",
            x.rss_open,
            x.rss_loaded,
            x.rss_closed,
            ms(x.closed_in)
        );
        eprintln!("  {}", x.during);
    }
    let mut all: Vec<Duration> = rounds.iter().flat_map(|x| x.latencies.iter().copied()).collect();
    if rounds.len() > 1 {
        eprintln!("all rounds: {}", latency_line("latency", &mut all));
    }
}

fn proxy_load(bin: &Path, work: &Path, clients: usize, calls: usize, rounds: usize) {
    let (server_name, server) = match upstream() {
        Ok(u) => u,
        Err(why) => {
            eprintln!("load/proxy: SKIPPED, {why}");
            return;
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("HTTP client");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let direct = (std::env::var("LOAD_DIRECT").as_deref() != Ok("0")).then(|| {
        eprintln!("load/proxy: direct: {clients} clients x {calls} calls, each with its own {server_name} over stdio ...");
        direct_round(&rt, &server, work, clients, calls)
    });
    let runs = work.join("proxy-runs");
    let mut proxy = Proxy::start(bin, work, &runs, &server);
    eprintln!("load/proxy: listening on {}", proxy.url);
    std::thread::sleep(Duration::from_millis(500));
    let rss_idle = rss_kib(proxy.pid());
    let mut results: Vec<Round> = (0..rounds).map(|r| proxy_round(&rt, &http, &proxy, &runs, r * clients, clients, calls)).collect();
    let exit = proxy.stop();
    assert!(exit.is_some(), "the proxy did not exit within 30 s of SIGTERM");
    drop(rt);

    // The bundles, event by event.
    let list = bundles(&runs);
    assert_eq!(list.len(), rounds * clients, "one bundle per session");
    let mut seen = BTreeSet::new();
    let mut checked = Vec::new();
    let mut others = BTreeSet::new();
    for b in &list {
        let (client, lines, other) = check_proxy_bundle(b, calls);
        assert!(seen.insert(client), "two bundles hold client {client}'s calls");
        others.insert(other);
        checked.push((b.clone(), lines));
    }
    assert_eq!(seen, (0..rounds * clients).collect::<BTreeSet<_>>(), "a bundle for every client");
    let verified = verify_all(bin, &checked);

    eprintln!(
        "\nload/proxy: `run echo-only.json --listen`, {server_name} over stdio; {rounds} round(s) on one proxy, each {clients} Streamable HTTP sessions x {calls} sequential `echo` calls, all at once"
    );
    print_rounds("proxy", rss_idle, clients, "calls", &mut results);
    if let Some((wall, mut lat)) = direct {
        let n = lat.len() as f64;
        lat.sort();
        let mut all: Vec<Duration> = results.iter().flat_map(|x| x.latencies.iter().copied()).collect();
        all.sort();
        let proxied_rate = all.len() as f64 / results.iter().map(|x| x.wall.as_secs_f64()).sum::<f64>();
        eprintln!("direct ({server_name}, {clients} clients each with its own child over stdio): {:.0} calls/s", n / wall.as_secs_f64());
        eprintln!("  {}", latency_line("latency", &mut lat));
        eprintln!(
            "proxied / direct: calls/s {:.2}x, p50 {:.2}x, p99 {:.2}x",
            proxied_rate / (n / wall.as_secs_f64()),
            pct(&all, 0.5).as_secs_f64() / pct(&lat, 0.5).as_secs_f64(),
            pct(&all, 0.99).as_secs_f64() / pct(&lat, 0.99).as_secs_f64()
        );
    }
    eprintln!("proxy on SIGTERM: {exit:?}");
    eprintln!("bundles: {} checked, each {calls} invoke + {calls} result events, every call number once; other events per bundle: {others:?}", list.len());
    eprintln!("{verified}");
}

// ---------------------------------------------------------------------------------------------------
// The hook server

fn payload(session: &str, event: &str, extra: &str) -> String {
    format!(r#"{{"session_id":"{session}","transcript_path":"t.jsonl","cwd":".","hook_event_name":"{event}"{extra}}}"#)
}

/// Each call's own command (so that the bundle shows every call once), or with `LOAD_SAME_COMMAND=1` the
/// same `df -h /var` every time, as the hook_server bench sends (a diagnostic: the server remembers each
/// distinct allowed call of an open session).
fn command(k: usize, i: usize) -> String {
    static SAME: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *SAME.get_or_init(|| std::env::var("LOAD_SAME_COMMAND").is_ok_and(|v| v == "1")) {
        return "df -h /var".to_string();
    }
    format!("df -h /var/s{k}/{i}")
}

fn pre_tool_use(k: usize, i: usize) -> String {
    payload(&format!("s{k}"), "PreToolUse", &format!(r#","tool_name":"Bash","tool_input":{{"command":"{}"}},"tool_use_id":"toolu_s{k}_{i}""#, command(k, i)))
}

fn post_tool_use(k: usize, i: usize) -> String {
    payload(
        &format!("s{k}"),
        "PostToolUse",
        &format!(
            r#","tool_name":"Bash","tool_input":{{"command":"{}"}},"tool_response":{{"stdout":"/dev/sda1 50G 45G 5G 90% /var","stderr":"","interrupted":false,"isImage":false}},"tool_use_id":"toolu_s{k}_{i}""#,
            command(k, i)
        ),
    )
}

struct HookServer {
    child: Child,
    url: String,
    base: String,
    auth: String,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

impl HookServer {
    fn start(bin: &Path, dir: &Path, cache: &Path) -> HookServer {
        let info = dir.join(".runbook/runs/.hook/server/server.json");
        let child = Command::new(bin)
            .args(["hook", "serve", "--port", "0", "--runbook", "runbook.yaml", "--profile", "R1"])
            .current_dir(dir)
            .env("RUNBOOK_HOST_CACHE", cache)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn runbook-host hook serve");
        let t = Instant::now();
        let port = loop {
            let v = std::fs::read_to_string(&info).ok().and_then(|s| {
                let pid = s.split("\"pid\":").nth(1)?.split([',', '}']).next()?.trim().parse::<u32>().ok()?;
                let port = s.split("\"port\":").nth(1)?.split([',', '}']).next()?.trim().parse::<u16>().ok()?;
                (pid == child.id()).then_some(port)
            });
            if let Some(p) = v {
                break p;
            }
            assert!(t.elapsed() < Duration::from_secs(120), "the hook server did not start within 120 s");
            std::thread::sleep(Duration::from_millis(10));
        };
        let token = std::fs::read_to_string(dir.join(".runbook/runs/.hook/server/token")).unwrap().trim().to_string();
        let base = format!("http://127.0.0.1:{port}");
        HookServer { child, url: format!("{base}/runbook-hook"), base, auth: format!("Bearer {token}") }
    }

    fn post(&self, agent: &ureq::Agent, body: &str) -> String {
        let mut r = agent
            .post(&self.url)
            .header("Authorization", &self.auth)
            .content_type("application/json")
            .send(body.as_bytes())
            .unwrap_or_else(|e| panic!("POST failed ({e}): {body}"));
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap();
        assert_eq!(status, 200, "{body}\n-> {text}");
        text
    }

    fn decided(&self, agent: &ureq::Agent) -> u64 {
        let mut r = agent.get(&format!("{}/runbook-hook/status", self.base)).header("Authorization", &self.auth).call().unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        v["decided"].as_u64().expect("status names `decided`")
    }

    /// Asks the server to shut down; how it exited (None: it had to be killed after 30 s).
    fn shutdown(&mut self, agent: &ureq::Agent) -> Option<ExitStatus> {
        let r = agent.post(&format!("{}/runbook-hook/shutdown", self.base)).header("Authorization", &self.auth).send_empty().unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let s = wait_exit(&mut self.child, Duration::from_secs(30));
        if s.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        s
    }
}

impl Drop for HookServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn check_hook_bundle(bundle: &Path, pairs: usize) -> (usize, usize) {
    assert!(bundle.join("report.json").is_file(), "{}: no report.json", bundle.display());
    let manifest = std::fs::read_to_string(bundle.join("run.json")).unwrap();
    assert!(manifest.contains(r#""event": "ended""#), "{}: run.json does not record the run's end", bundle.display());
    let lines = events(bundle);
    let kinds: Vec<&str> = lines.iter().map(|l| l["event"]["type"].as_str().unwrap_or("?")).collect();
    assert_eq!(kinds.first(), Some(&"start"), "{}: the first event", bundle.display());
    assert_eq!(
        &kinds[kinds.len().saturating_sub(2)..],
        ["final_output", "end"],
        "{}: the run ends with Stop's final_output and SessionEnd's end",
        bundle.display()
    );
    assert_eq!(lines.len(), 2 * pairs + 3, "{}: start + {pairs} invoke/result pairs + final_output + end", bundle.display());
    let session = lines[0]["event"]["agent"].as_str().and_then(|a| a.strip_prefix("claude-code:s")).and_then(|k| k.parse::<usize>().ok());
    let k = session.unwrap_or_else(|| panic!("{}: the start's agent names no session", bundle.display()));
    let (mut invoked, mut answered) = (vec![0u32; pairs], vec![0u32; pairs]);
    for (n, l) in lines[1..lines.len() - 2].iter().enumerate() {
        let place = || format!("{}: events.ndjson:{}", bundle.display(), n + 2);
        let call = l["event"]["call_id"].as_str().unwrap_or_else(|| panic!("{}: no call_id", place()));
        let i: usize = call.strip_prefix(&format!("toolu_s{k}_")).and_then(|i| i.parse().ok()).unwrap_or_else(|| panic!("{}: call_id {call}", place()));
        assert!(i < pairs, "{}: call number {i} out of range", place());
        assert_eq!(l["decision"]["decision"], "allow", "{}: not allowed", place());
        match kinds[n + 1] {
            "invoke" => {
                assert_eq!(l["event"]["arguments"]["command"].as_str(), Some(&*command(k, i)), "{}", place());
                invoked[i] += 1;
            }
            "result" => {
                assert_eq!(l["event"]["is_error"], false, "{}", place());
                answered[i] += 1;
            }
            other => panic!("{}: an unexpected {other} event", place()),
        }
    }
    for (what, v) in [("invoke", &invoked), ("result", &answered)] {
        let bad: Vec<usize> = (0..pairs).filter(|&i| v[i] != 1).collect();
        assert!(
            bad.is_empty(),
            "{} (session s{k}): {} calls without exactly one {what} event (first {:?})",
            bundle.display(),
            bad.len(),
            &bad[..bad.len().min(10)]
        );
    }
    (k, lines.len())
}

/// One round: sessions `first..first + sessions` opened (SessionStart), `events_per` events each, all at
/// once, then Stop and SessionEnd of each. The latencies of PreToolUse and PostToolUse.
fn hook_round(server: &HookServer, first: usize, sessions: usize, events_per: usize) -> (Round, Vec<Duration>, Vec<Duration>) {
    let pid = server.child.id();
    let pairs = events_per / 2;
    // One client (agent, one kept-alive connection) per session; each session opened before the load.
    let agents: Vec<ureq::Agent> = (0..sessions).map(|_| agent()).collect();
    for (k, a) in agents.iter().enumerate() {
        let out = server.post(a, &payload(&format!("s{}", first + k), "SessionStart", r#","source":"startup""#));
        assert!(out.contains("supervising"), "SessionStart of s{}: {out}", first + k);
    }
    std::thread::sleep(Duration::from_millis(500));
    let rss_open = rss_kib(pid);

    let total = (sessions * events_per) as u64;
    let done = Arc::new(AtomicU64::new(0));
    let sampler = Sampler::start(pid, done.clone());
    eprintln!("load/hook: sessions s{first}..s{}: {sessions} sessions x {events_per} events ...", first + sessions);
    let t = Instant::now();
    let per_session: Vec<(Vec<Duration>, Vec<Duration>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = agents
            .iter()
            .enumerate()
            .map(|(k, a)| {
                let (k, done) = (first + k, done.clone());
                sc.spawn(move || {
                    let (mut pre, mut post) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
                    for i in 0..pairs {
                        let body = pre_tool_use(k, i);
                        let t = Instant::now();
                        let out = server.post(a, &body);
                        pre.push(t.elapsed());
                        assert_eq!(out, "", "s{k} PreToolUse {i}: allowed (an empty answer)");
                        let body = post_tool_use(k, i);
                        let t = Instant::now();
                        let out = server.post(a, &body);
                        post.push(t.elapsed());
                        assert_eq!(out, "", "s{k} PostToolUse {i}: passed (an empty answer)");
                        done.fetch_add(2, Ordering::SeqCst);
                    }
                    (pre, post)
                })
            })
            .collect();
        handles.into_iter().enumerate().map(|(k, h)| h.join().unwrap_or_else(|_| panic!("session s{}'s client failed", first + k))).collect()
    });
    let wall = t.elapsed();
    let rss_loaded = rss_kib(pid);
    let during = sampler.finish(total, rss_loaded);

    // End every session: Stop (records the final output), SessionEnd (ends the run, writes the report).
    let t_close = Instant::now();
    for (k, a) in agents.iter().enumerate() {
        let s = format!("s{}", first + k);
        let out = server.post(a, &payload(&s, "Stop", r#","stop_hook_active":false"#));
        assert!(out.contains("not at a terminal"), "Stop of {s}: {out}");
        assert_eq!(server.post(a, &payload(&s, "SessionEnd", r#","reason":"other""#)), "", "SessionEnd of {s}");
    }
    let closed_in = t_close.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let rss_closed = rss_kib(pid);
    let (mut pre, mut post): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    for (a, b) in per_session {
        pre.extend(a);
        post.extend(b);
    }
    let latencies = pre.iter().chain(&post).copied().collect();
    (Round { rss_open, rss_loaded, rss_closed, during, wall, latencies, closed_in }, pre, post)
}

fn hook_load(bin: &Path, work: &Path, sessions: usize, events_per: usize, rounds: usize) {
    assert!(events_per % 2 == 0, "LOAD_EVENTS must be even (PreToolUse/PostToolUse pairs)");
    let pairs = events_per / 2;
    let dir = work.join("hook");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root().join("examples/read-only-investigation/runbook.yaml"), dir.join("runbook.yaml")).unwrap();
    let control = agent();
    // A first server fills the compiled-component cache (with an empty cache the server compiles the
    // component itself and keeps the compiler's memory); the measured server is the second.
    let mut warm = HookServer::start(bin, &dir, &work.join("cache"));
    assert!(warm.shutdown(&control).is_some(), "the warm-up hook server did not exit");
    drop(warm);
    let mut server = HookServer::start(bin, &dir, &work.join("cache"));
    eprintln!("load/hook: listening on {}", server.url);
    std::thread::sleep(Duration::from_millis(500));
    let rss_idle = rss_kib(server.child.id());
    let (mut results, mut pre, mut post) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let (x, a, b) = hook_round(&server, r * sessions, sessions, events_per);
        results.push(x);
        pre.extend(a);
        post.extend(b);
    }
    let sent = (rounds * sessions * (1 + events_per + 2)) as u64;
    let decided = server.decided(&control);
    assert_eq!(decided, sent, "the server decided {decided} events; {sent} were sent");
    let exit = server.shutdown(&control);
    assert!(exit.is_some(), "the hook server did not exit within 30 s of its shutdown");

    let list = bundles(&dir.join(".runbook/runs"));
    assert_eq!(list.len(), rounds * sessions, "one bundle per session");
    let mut seen = BTreeSet::new();
    let mut checked = Vec::new();
    for b in &list {
        let (k, lines) = check_hook_bundle(b, pairs);
        assert!(seen.insert(k), "two bundles of session s{k}");
        checked.push((b.clone(), lines));
    }
    assert_eq!(seen, (0..rounds * sessions).collect::<BTreeSet<_>>(), "a bundle for every session");
    let verified = verify_all(bin, &checked);

    eprintln!(
        "\nload/hook: `hook serve`, read-only-investigation at R1; {rounds} round(s) on one server, each {sessions} sessions x {events_per} events (PreToolUse/PostToolUse pairs of an allowed `{}`), all at once, one kept-alive connection each",
        if command(0, 1) == command(0, 2) { "df -h /var" } else { "df -h /var/s{session}/{i}" }
    );
    print_rounds("hook server", rss_idle, sessions, "events", &mut results);
    eprintln!("{}", latency_line("PreToolUse, all rounds", &mut pre));
    eprintln!("{}", latency_line("PostToolUse, all rounds", &mut post));
    eprintln!("server decided {decided} = requests sent (SessionStart, the events, Stop, SessionEnd); shutdown: {exit:?}");
    eprintln!("bundles: {} checked, each start + {pairs} invoke + {pairs} result + final_output + end, every call once", list.len());
    eprintln!("{verified}");
}

fn main() {
    // `cargo test --all-targets` (CI) builds and runs every bench target, this one too: minutes of load are
    // for `cargo bench` (which passes `--bench`), not for the test suite.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("load: not run under `cargo test`; `cargo bench -p runbook-benches --bench load` runs it");
        return;
    }
    let bin = binary();
    if !bin.is_file() {
        eprintln!(
            "load: SKIPPED, no release binary at target/release/runbook-host (or $RUNBOOK_HOST_BIN); build it with `cargo build --release -p runbook-host`"
        );
        return;
    }
    let clients = env_usize("LOAD_CLIENTS", 16);
    let calls = env_usize("LOAD_CALLS", 10_000);
    let sessions = env_usize("LOAD_SESSIONS", 8);
    let events_per = env_usize("LOAD_EVENTS", 10_000);
    // Two rounds on the same server by default: memory that a second round reuses is kept, not leaked.
    let rounds = env_usize("LOAD_ROUNDS", 2);
    let only = std::env::var("LOAD_ONLY").unwrap_or_default();
    let work = std::env::temp_dir().join(format!("rh-bench-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    eprintln!("load: binary {}, scratch {}", bin.display(), work.display());
    if only.is_empty() || only == "proxy" {
        proxy_load(&bin, &work, clients, calls, rounds);
    }
    if only.is_empty() || only == "hook" {
        hook_load(&bin, &work, sessions, events_per, rounds);
    }
    // Kept on failure (a panic ends the program before this), for a look at the bundles.
    let _ = std::fs::remove_dir_all(&work);
    eprintln!("\nload: all checks passed");
}
