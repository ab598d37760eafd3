//! The resident hook server (`runbook-host hook serve`) against the command hook, side by side in one run:
//! one PreToolUse as Claude Code's `http` hook sends it (a POST over a kept-alive loopback connection,
//! decided on the run in memory and recorded with fdatasync before the answer), and the same event as a
//! whole `runbook-host hook` process (spawn, load, lock, resume by replaying every recorded event,
//! decide, record, exit), on sessions of read-only-investigation grown to 50, 500 and 5,000 events.
//!
//! Besides criterion's estimate of the median it prints, per size, the median and p99 of single
//! requests (the server: 10 sessions x 100 requests, each session grown to the size first, so that every
//! sample is taken between N and N+100 events; the command hook: 100 processes on the same run put back
//! between processes), the decisions per second of 8 sessions at once (8 clients, one connection each),
//! and the server's resident memory with 100 open sessions.
//!
//! The binary is the release build at `target/release/runbook-host` (or `$RUNBOOK_HOST_BIN`).

use criterion::{criterion_group, criterion_main, Criterion};
use runbook_benches::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("RUNBOOK_HOST_BIN") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target directory").join("release").join("runbook-host")
}

fn payload(session: &str, event: &str, extra: &str) -> String {
    format!(r#"{{"session_id":"{session}","transcript_path":"t.jsonl","cwd":".","hook_event_name":"{event}"{extra}}}"#)
}

fn pre_tool_use(session: &str, n: usize, command: &str) -> String {
    payload(session, "PreToolUse", &format!(r#","tool_name":"Bash","tool_input":{{"command":"{command}"}},"tool_use_id":"toolu_{n}""#))
}

fn post_tool_use(session: &str, n: usize, command: &str) -> String {
    payload(
        session,
        "PostToolUse",
        &format!(
            r#","tool_name":"Bash","tool_input":{{"command":"{command}"}},"tool_response":{{"stdout":"/dev/sda1 50G 45G 5G 90% /var","stderr":"","interrupted":false,"isImage":false}},"tool_use_id":"toolu_{n}""#
        ),
    )
}

const ALLOWED: &str = "df -h /var";
const DENIED: &str = "rm -rf /var/log/old";

struct Server {
    child: Child,
    agent: ureq::Agent,
    url: String,
    auth: String,
}

impl Server {
    fn start(bin: &Path, dir: &Path) -> Server {
        let info = dir.join(".runbook/runs/.hook/server/server.json");
        let child = Command::new(bin)
            .args(["hook", "serve", "--port", "0", "--runbook", "runbook.yaml", "--profile", "R1"])
            .current_dir(dir)
            .env("RUNBOOK_HOST_CACHE", dir.parent().unwrap().join("cache"))
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
            assert!(t.elapsed() < Duration::from_secs(30), "the hook server did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        let token = std::fs::read_to_string(dir.join(".runbook/runs/.hook/server/token")).unwrap().trim().to_string();
        Server { child, agent: agent(), url: format!("http://127.0.0.1:{port}/runbook-hook"), auth: format!("Bearer {token}") }
    }

    fn post_with(&self, agent: &ureq::Agent, body: &str) -> String {
        let mut r = agent.post(&self.url).header("Authorization", &self.auth).content_type("application/json").send(body.as_bytes()).unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.body_mut().read_to_string().unwrap()
    }

    fn post(&self, body: &str) -> String {
        self.post_with(&self.agent, body)
    }

    /// Opens `session` and grows it to `events` recorded events the way the command bench does (each
    /// allowed call followed by its result, one call in ten denied); the next call number.
    fn grow(&self, session: &str, events: usize) -> usize {
        assert!(self.post(&payload(session, "SessionStart", r#","source":"startup""#)).contains("supervising"));
        let (mut recorded, mut n) = (1, 0);
        while recorded < events {
            n += 1;
            if n % 10 == 0 {
                assert!(self.post(&pre_tool_use(session, n, DENIED)).contains("deny"));
                recorded += 1;
            } else {
                assert_eq!(self.post(&pre_tool_use(session, n, ALLOWED)), "");
                assert_eq!(self.post(&post_tool_use(session, n, ALLOWED)), "");
                recorded += 2;
            }
        }
        n + 1
    }

    fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

fn hook_process(bin: &Path, dir: &Path, input: &str) -> String {
    let mut child = Command::new(bin)
        .args(["hook", "--runbook", "runbook.yaml", "--profile", "R1"])
        .current_dir(dir)
        .env("RUNBOOK_HOST_CACHE", dir.parent().unwrap().join("cache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn runbook-host hook");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn fresh(base: &Path, name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let dir = base.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root.join("examples/read-only-investigation/runbook.yaml"), dir.join("runbook.yaml")).unwrap();
    dir
}

fn hook_server(c: &mut Criterion) {
    let bin = binary();
    if !bin.is_file() {
        eprintln!("hook_server: SKIPPED, no release binary at target/release/runbook-host; build it first with `cargo build --release -p runbook-host`");
        return;
    }
    let base = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "hook-server");
    let full = std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if full { &[50, 500, 5000] } else { &[50] };
    let mut table = Vec::new();
    let mut group = c.benchmark_group("hook_server");
    for &events in sizes {
        // The server: single requests on sessions grown to the size.
        let dir = fresh(&base, &format!("server-{events}"));
        let server = Server::start(&bin, &dir);
        let mut samples = Vec::new();
        for k in 0..10 {
            let s = format!("grow-{k}");
            let n0 = server.grow(&s, events);
            for i in 0..100 {
                let body = pre_tool_use(&s, n0 + i, ALLOWED);
                let t = Instant::now();
                let out = server.post(&body);
                samples.push(t.elapsed());
                assert_eq!(out, "", "allowed");
            }
        }
        let (s50, s99) = (pct(&mut samples, 0.5), pct(&mut samples, 0.99));
        // Criterion's estimate, on one more session grown to the size (it grows by the iterations).
        let s = "criterion";
        let mut n = server.grow(s, events);
        group.bench_function(format!("pre-tool-use/server/{events}-events"), |b| {
            b.iter(|| {
                n += 1;
                assert_eq!(server.post(&pre_tool_use(s, n, ALLOWED)), "");
            })
        });
        drop(server);

        // The command hook on the same kind of run, put back between processes.
        let cdir = fresh(&base, &format!("command-{events}"));
        hook_process(&bin, &cdir, &payload("bench", "SessionStart", r#","source":"startup""#));
        let (mut recorded, mut n) = (1, 0);
        while recorded < events {
            n += 1;
            if n % 10 == 0 {
                hook_process(&bin, &cdir, &pre_tool_use("bench", n, DENIED));
                recorded += 1;
            } else {
                hook_process(&bin, &cdir, &pre_tool_use("bench", n, ALLOWED));
                hook_process(&bin, &cdir, &post_tool_use("bench", n, ALLOWED));
                recorded += 2;
            }
        }
        let run = std::fs::read_dir(cdir.join(".runbook/runs")).unwrap().map(|e| e.unwrap().path()).find(|p| p.join("run.json").is_file()).unwrap();
        let events_file = run.join("events.ndjson");
        let len = std::fs::metadata(&events_file).unwrap().len();
        let reset = || {
            let f = std::fs::OpenOptions::new().write(true).open(&events_file).unwrap();
            f.set_len(len).unwrap();
            f.sync_all().unwrap();
        };
        let mut csamples = Vec::new();
        for _ in 0..100 {
            reset();
            let body = pre_tool_use("bench", n + 1, ALLOWED);
            let t = Instant::now();
            let out = hook_process(&bin, &cdir, &body);
            csamples.push(t.elapsed());
            assert_eq!(out, "", "allowed");
        }
        reset();
        let (c50, c99) = (pct(&mut csamples, 0.5), pct(&mut csamples, 0.99));
        table.push(format!("| {events} | {} | {} | {} | {} | {:.0}x |", ms(s50), ms(s99), ms(c50), ms(c99), c50.as_secs_f64() / s50.as_secs_f64()));
    }
    group.finish();

    // Eight sessions at once: decisions per second across them.
    let dir = fresh(&base, "concurrent");
    let server = Server::start(&bin, &dir);
    let per = if full { 2000 } else { 100 };
    for k in 0..8 {
        server.grow(&format!("c{k}"), 50);
    }
    let t = Instant::now();
    std::thread::scope(|sc| {
        for k in 0..8 {
            let server = &server;
            sc.spawn(move || {
                let a = agent();
                for i in 0..per {
                    assert_eq!(server.post_with(&a, &pre_tool_use(&format!("c{k}"), 1000 + i, ALLOWED)), "");
                }
            });
        }
    });
    let elapsed = t.elapsed();
    let rate = (8 * per) as f64 / elapsed.as_secs_f64();
    drop(server);

    // Memory with 100 open sessions (each with its SessionStart and 10 events).
    let dir = fresh(&base, "memory");
    let server = Server::start(&bin, &dir);
    let idle = server.rss_kib();
    for k in 0..100 {
        server.grow(&format!("m{k}"), 11);
    }
    let open = server.rss_kib();
    drop(server);

    eprintln!("\nhook_server: one PreToolUse, the server (loopback HTTP, keep-alive, fdatasync before the answer) vs a command hook process");
    eprintln!("| events | server median | server p99 | command median | command p99 | command / server |");
    eprintln!("|---:|---:|---:|---:|---:|---:|");
    for row in table {
        eprintln!("{row}");
    }
    eprintln!("8 sessions at once, one client each: {} decisions in {} = {rate:.0} decisions/s", 8 * per, ms(elapsed));
    eprintln!("server resident memory: {idle} KiB at start, {open} KiB with 100 open sessions ({:.0} KiB per session)", (open - idle) as f64 / 100.0);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3));
    targets = hook_server
}
criterion_main!(benches);
