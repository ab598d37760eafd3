//! The MCP proxy's added latency per `tools/call`: the same client (rmcp over stdio) calls
//! `@modelcontextprotocol/server-everything`'s `echo` directly, and through `runbook-host run` with a
//! runbook whose only capability is `echo` (host/tests/mcp/runbooks/echo-only.json). Each proxied call is
//! an `invoke` and a `result` recorded (fsync'd) in the run's bundle. Needs `bash host/tests/mcp/setup`
//! and a built `runbook-host` (`cargo build --release -p runbook-host`); skips with a message otherwise.

use criterion::{criterion_group, criterion_main, Criterion};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

async fn connect(argv: &[String], cwd: &Path) -> RunningService<RoleClient, ClientConfig> {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).current_dir(cwd).stderr(std::process::Stdio::null());
    let transport = TokioChildProcess::new(cmd).expect("start the server");
    let me = ClientConfig::new(ClientCapabilities::default(), Implementation::new("bench", "0"));
    me.serve(transport).await.expect("initialize")
}

async fn echo(c: &RunningService<RoleClient, ClientConfig>, i: u64) {
    let mut p = CallToolRequestParams::new("echo");
    p.arguments = Some(serde_json::json!({"message": format!("hello {i}")}).as_object().unwrap().clone());
    let r = c.peer().call_tool(p).await.expect("echo answers");
    assert!(!r.is_error.unwrap_or(false), "{r:?}");
}

fn bench(c: &mut Criterion) {
    let server = root().join("host/tests/mcp/node_modules/.bin/mcp-server-everything");
    let bin = root().join("target/release/runbook-host");
    if !server.exists() || !bin.exists() {
        eprintln!("proxy bench skipped: run `bash host/tests/mcp/setup` and `cargo build --release -p runbook-host` first");
        return;
    }
    let work = std::env::temp_dir().join(format!("rh-bench-proxy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let direct = vec![server.display().to_string()];
    let runbook = root().join("host/tests/mcp/runbooks/echo-only.json").display().to_string();
    let proxied = vec![bin.display().to_string(), "run".into(), runbook, "--".into(), server.display().to_string()];
    let mut g = c.benchmark_group("proxy/echo");
    g.measurement_time(Duration::from_secs(10));
    for (name, argv) in [("direct", &direct), ("proxied", &proxied)] {
        let client = rt.block_on(connect(argv, &work));
        rt.block_on(echo(&client, 0));
        let mut n = 0;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    n += 1;
                    rt.block_on(echo(&client, n));
                }
                t.elapsed()
            })
        });
        rt.block_on(async { client.cancel().await.ok() });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&work);
}

criterion_group!(benches, bench);
criterion_main!(benches);
