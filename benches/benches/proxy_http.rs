//! The MCP proxy over Streamable HTTP (`runbook-host run --listen`): the same client (rmcp's Streamable
//! HTTP client on reqwest, one kept-alive connection pool, protocol 2025-11-25 so that every client is an
//! MCP session and, through the proxy, a run with its own bundle) calls `@modelcontextprotocol/server-everything`'s
//! `echo` three ways:
//!
//! - `direct`: server-everything in its own Streamable HTTP mode (`mcp-server-everything streamableHttp`);
//! - `proxied-stdio`: `runbook-host run echo-only.json --listen 127.0.0.1:0 -- mcp-server-everything`
//!   (the server its child over stdio);
//! - `proxied-url`: a second proxy whose server is the `direct` one, given by URL (rmcp's Streamable HTTP
//!   client in the proxy).
//!
//! For reference and diagnosis, three more lines: `direct-stdio` (server-everything as the client's own child
//! over stdio, the stdio bench's `direct`: what `proxied-stdio` adds to), `proxied-stdio-tmpfs` (the same
//! proxy writing its bundles on a tmpfs, where fdatasync costs next to nothing: what the durable write
//! costs) and `rmcp-http-floor` (an `echo` answered in this process by rmcp's Streamable HTTP server, set up
//! as the proxy's: the transport's own round trip).
//!
//! The runbook's only capability is `echo` (host/tests/mcp/runbooks/echo-only.json); each proxied call is an
//! `invoke` and a `result` recorded (fdatasync'd) in the session's bundle before the answer.
//!
//! Besides criterion's estimate it prints the median and p99 of 1,000 sequential calls per line, the calls
//! per second of 16 sessions at once (16 clients, direct and through each proxy), and the proxy's resident
//! memory (`VmRSS`) before any session, with 100 sessions open (each initialized and having made one
//! call) and after they are closed (`DELETE`).
//!
//! Needs `bash host/tests/mcp/setup` and a release `runbook-host`: `target/release/runbook-host` (or the
//! one under `$CARGO_TARGET_DIR/release`, or `$RUNBOOK_HOST_BIN`); skips with a message otherwise.

use axum::serve::ListenerExt;
use criterion::{criterion_group, criterion_main, Criterion};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock, Implementation, ProtocolVersion,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Client = RunningService<RoleClient, ClientConfig>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `$RUNBOOK_HOST_BIN`, else `target/release/runbook-host` (as the stdio bench), else the release build
/// of the target directory this bench was built in (`$CARGO_TARGET_DIR`).
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

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().split_whitespace().next().unwrap().parse().unwrap()
}

/// server-everything in its Streamable HTTP mode, on a free loopback port (it reads `PORT`).
struct Everything {
    child: Child,
    url: String,
}

impl Everything {
    fn start(server: &Path, cwd: &Path) -> Everything {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(server)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server-everything streamableHttp");
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(30), "server-everything did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Everything { child, url: format!("http://127.0.0.1:{port}/mcp") }
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `runbook-host run echo-only.json --runs RUNS --listen 127.0.0.1:0 -- UPSTREAM`, its URL read from the
/// line it prints on stderr; stopped with SIGTERM.
struct Proxy {
    child: Child,
    url: String,
    runs: PathBuf,
}

impl Proxy {
    fn start(bin: &Path, cwd: &Path, runs: &Path, upstream: &[String]) -> Proxy {
        let runbook = root().join("host/tests/mcp/runbooks/echo-only.json");
        let mut child = Command::new(bin)
            .arg("run")
            .arg(&runbook)
            .arg("--runs")
            .arg(runs)
            .args(["--listen", "127.0.0.1:0", "--"])
            .args(upstream)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn runbook-host run --listen");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Reads every line (the pipe never fills); hands over the URL, keeps what came before it.
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
        let url = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(url)) => url,
            Ok(Err(said)) => panic!("runbook-host run --listen exited before listening:\n{said}"),
            Err(_) => panic!("runbook-host run --listen did not listen within 60 s"),
        };
        Proxy { child, url, runs: runs.to_path_buf() }
    }

    fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }

    /// The bundles written so far (directories with a `run.json`), how many have ended, and their events.
    fn bundles(&self) -> (usize, usize, usize) {
        let (mut n, mut ended, mut events) = (0, 0, 0);
        for e in std::fs::read_dir(&self.runs).into_iter().flatten().flatten() {
            let Ok(manifest) = std::fs::read_to_string(e.path().join("run.json")) else { continue };
            n += 1;
            ended += manifest.contains(r#""event": "ended""#) as usize;
            events += std::fs::read_to_string(e.path().join("events.ndjson")).map(|s| s.lines().count()).unwrap_or(0);
        }
        (n, ended, events)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The floor of the transport: an `echo` served in this process by rmcp's Streamable HTTP server in axum,
/// configured as the proxy's (sessions, SSE answers, TCP_NODELAY), with nothing behind it.
#[derive(Clone)]
struct EchoServer;

impl rmcp::ServerHandler for EchoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(&self, request: CallToolRequestParams, _: RequestContext<RoleServer>) -> Result<CallToolResponse, rmcp::ErrorData> {
        let message = request.arguments.as_ref().and_then(|a| a.get("message")).and_then(|m| m.as_str()).unwrap_or_default();
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(format!("Echo: {message}"))])))
    }
}

/// Starts [`EchoServer`] on its own runtime (one worker thread, as if it were another process) and
/// returns its URL; it lives as long as the bench.
fn start_floor() -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        rt.block_on(async move {
            let config = StreamableHttpServerConfig::default().enforce_origin_validation().with_max_request_body_bytes(16 << 20);
            let service = StreamableHttpService::new(|| Ok(EchoServer), Arc::new(LocalSessionManager::default()), config);
            let app = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(format!("http://{}/mcp", listener.local_addr().unwrap())).unwrap();
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

async fn connect(http: &reqwest::Client, url: &str) -> Client {
    let transport = StreamableHttpClientTransport::with_client(http.clone(), StreamableHttpClientTransportConfig::with_uri(url));
    let me = ClientConfig::new(ClientCapabilities::default(), Implementation::new("bench", "0")).with_protocol_version(ProtocolVersion::V_2025_11_25);
    me.serve(transport).await.expect("initialize")
}

/// server-everything as the client's own child over stdio (the stdio bench's `direct`).
async fn connect_stdio(server: &Path, cwd: &Path) -> Client {
    let mut cmd = tokio::process::Command::new(server);
    cmd.current_dir(cwd);
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn().expect("start the server");
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("bench", "0")).serve(transport).await.expect("initialize")
}

async fn echo(peer: &Peer<RoleClient>, i: u64) {
    let mut p = CallToolRequestParams::new("echo");
    p.arguments = Some(serde_json::json!({"message": format!("hello {i}")}).as_object().unwrap().clone());
    let r = peer.call_tool(p).await.expect("echo answers");
    assert!(!r.is_error.unwrap_or(false), "{r:?}");
}

/// `clients` sessions at once, each making `per` calls one after the other: the calls and the time taken.
async fn concurrent(http: &reqwest::Client, url: &str, clients: usize, per: u64) -> (u64, Duration) {
    let mut sessions = Vec::new();
    for _ in 0..clients {
        let c = connect(http, url).await;
        echo(c.peer(), 0).await;
        sessions.push(c);
    }
    let t = Instant::now();
    let tasks: Vec<_> = sessions
        .iter()
        .map(|c| {
            let peer = c.peer().clone();
            tokio::spawn(async move {
                for i in 1..=per {
                    echo(&peer, i).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = t.elapsed();
    for c in sessions {
        c.cancel().await.ok();
    }
    (clients as u64 * per, elapsed)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn bench(c: &mut Criterion) {
    let server = root().join("host/tests/mcp/node_modules/.bin/mcp-server-everything");
    let bin = binary();
    if !server.exists() || !bin.is_file() {
        eprintln!("proxy_http bench skipped: run `bash host/tests/mcp/setup` and `cargo build --release -p runbook-host` first");
        return;
    }
    // One process-wide rustls provider, as the host installs it (reqwest is built without a default one);
    // every URL here is plain loopback http.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("HTTP client");
    let full = std::env::args().any(|a| a == "--bench");
    let (calls, per_client, sessions) = if full { (1000, 250, 100) } else { (50, 10, 10) };
    let scratch = format!("rh-bench-proxy-http-{}", std::process::id());
    let work = std::env::temp_dir().join(&scratch);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    // A diagnostic line, where there is a tmpfs: the same proxy writing its bundles to memory, where
    // fdatasync costs next to nothing, to show what the durable write costs.
    let shm = Path::new("/dev/shm").is_dir().then(|| Path::new("/dev/shm").join(&scratch));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();

    let everything = Everything::start(&server, &work);
    let stdio = Proxy::start(&bin, &work, &work.join("runs-stdio"), &[server.display().to_string()]);
    let by_url = Proxy::start(&bin, &work, &work.join("runs-url"), std::slice::from_ref(&everything.url));
    let on_tmpfs = shm.as_ref().map(|d| Proxy::start(&bin, &work, &d.join("runs"), &[server.display().to_string()]));

    // Sequential calls on one session per line: explicit median and p99, then criterion's estimate.
    // Each line: its name, where (None: server-everything as the client's own child over stdio, the stdio
    // bench's `direct`, for reference), and the line it adds to.
    let floor = start_floor();
    let mut lines: Vec<(&str, Option<String>, Option<usize>)> = vec![
        ("direct", Some(everything.url.clone()), None),
        ("proxied-url", Some(by_url.url.clone()), Some(0)),
        ("direct-stdio", None, None),
        ("proxied-stdio", Some(stdio.url.clone()), Some(2)),
    ];
    if let Some(p) = &on_tmpfs {
        lines.push(("proxied-stdio-tmpfs", Some(p.url.clone()), Some(2)));
    }
    lines.push(("rmcp-http-floor", Some(floor), None));
    let mut table = Vec::new();
    let mut g = c.benchmark_group("proxy_http/echo");
    g.measurement_time(Duration::from_secs(if full { 10 } else { 1 }));
    for (name, url, _) in &lines {
        let client = rt.block_on(async {
            match url {
                Some(url) => connect(&http, url).await,
                None => connect_stdio(&server, &work).await,
            }
        });
        let peer = client.peer().clone();
        for i in 0..50 {
            rt.block_on(echo(&peer, i));
        }
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls as u64 {
            let t = Instant::now();
            rt.block_on(echo(&peer, i));
            samples.push(t.elapsed());
        }
        table.push((pct(&mut samples, 0.5), pct(&mut samples, 0.99)));
        let mut n = 0;
        g.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    n += 1;
                    rt.block_on(echo(&peer, n));
                }
                t.elapsed()
            })
        });
        rt.block_on(async { client.cancel().await.ok() });
    }
    g.finish();
    for p in [Some(&stdio), Some(&by_url), on_tmpfs.as_ref()].into_iter().flatten() {
        let (bundles, _, events) = p.bundles();
        assert!(bundles >= 1 && events >= 2 * calls, "the proxied calls are recorded ({bundles} bundles, {events} events)");
    }
    drop(on_tmpfs);
    if let Some(d) = &shm {
        let _ = std::fs::remove_dir_all(d);
    }

    // 16 sessions at once.
    let mut rates = Vec::new();
    for (name, url) in [("direct", &everything.url), ("proxied-url", &by_url.url), ("proxied-stdio", &stdio.url)] {
        let (n, elapsed) = rt.block_on(concurrent(&http, url, 16, per_client));
        rates.push((name, n, elapsed, n as f64 / elapsed.as_secs_f64()));
    }
    drop(stdio);
    drop(by_url);

    // Memory: a fresh proxy (server over stdio) before any session, with the sessions open, after they close.
    let proxy = Proxy::start(&bin, &work, &work.join("runs-memory"), &[server.display().to_string()]);
    std::thread::sleep(Duration::from_millis(500));
    let idle = proxy.rss_kib();
    // Twice: the second round shows whether what the first left resident is reused (the allocator keeping
    // freed memory) or grows again (a leak).
    let mut rounds = Vec::new();
    for round in 1..=2 {
        let clients: Vec<Client> = rt.block_on(async {
            let mut v = Vec::new();
            for _ in 0..sessions {
                let c = connect(&http, &proxy.url).await;
                echo(c.peer(), 0).await;
                v.push(c);
            }
            v
        });
        std::thread::sleep(Duration::from_millis(500));
        let open = proxy.rss_kib();
        rt.block_on(async {
            for c in clients {
                c.cancel().await.ok();
            }
        });
        // Closing a session (DELETE) ends its run; wait for every run to have ended.
        let t = Instant::now();
        while proxy.bundles().1 < round * sessions && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
        let closed = proxy.rss_kib();
        let (bundles, ended, _) = proxy.bundles();
        assert_eq!((bundles, ended), (round * sessions, round * sessions), "one bundle per session, each ended when its session closed");
        rounds.push((open, closed));
    }
    drop(proxy);
    drop(everything);
    drop(rt);
    let _ = std::fs::remove_dir_all(&work);

    eprintln!("\nproxy_http: {calls} sequential `echo` calls on one session each (rmcp Streamable HTTP client, kept-alive connections)");
    eprintln!("| line | median | p99 | median / direct | adds to | added at the median | added at p99 |");
    eprintln!("|---|---:|---:|---:|---|---:|---:|");
    for ((name, _, base), (p50, p99)) in lines.iter().zip(&table) {
        let added = |a: Duration, b: Duration| if a >= b { ms(a - b) } else { format!("-{}", ms(b - a)) };
        let (to, a50, a99) = match base {
            Some(b) => (lines[*b].0, added(*p50, table[*b].0), added(*p99, table[*b].1)),
            None => ("", String::new(), String::new()),
        };
        eprintln!("| {name} | {} | {} | {:.2}x | {to} | {a50} | {a99} |", ms(*p50), ms(*p99), p50.as_secs_f64() / table[0].0.as_secs_f64());
    }
    let direct_rate = rates[0].3;
    for (name, n, elapsed, rate) in &rates {
        eprintln!("16 sessions at once, {name}: {n} calls in {} = {rate:.0} calls/s ({:.2}x direct)", ms(*elapsed), rate / direct_rate);
    }
    let (open, closed) = rounds[0];
    eprintln!(
        "proxy resident memory (server over stdio): {idle} KiB before any session, {open} KiB with {sessions} sessions open ({:.0} KiB a session), {closed} KiB after they closed",
        (open as f64 - idle as f64) / sessions as f64
    );
    let (open2, closed2) = rounds[1];
    eprintln!("  a second round of {sessions} sessions on the same proxy: {open2} KiB open, {closed2} KiB after they closed");
}

criterion_group!(benches, bench);
criterion_main!(benches);
