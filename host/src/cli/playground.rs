//! `runbook-host playground`: serves the envelope playground (`playground/dist`, made by `playground/build`)
//! on 127.0.0.1.
//!
//! A static file server on axum (hyper, HTTP/1.1 with keep-alive) with tower-http's compression (gzip or
//! brotli, as the browser asks; the JavaScript and the component shrink to about a third): GET and HEAD
//! only, files of one directory (no `..`, no backslash, no hidden names, nothing that resolves outside it,
//! a symlink included), a fixed table of content types, only the server's own names in `Host`. The page
//! does every computation itself, in the browser, with the same component this binary embeds: the server
//! refuses to start when the directory was built from a different component (its `module.sha256`, and the
//! sha256 of the `policy.wasm` the page will load, must both equal `runbook_host::module_sha256()`).
//!
//! With `--runs DIR` it also serves, read-only, the run bundles under DIR for the run viewer
//! (docs/viewer.md#open-a-local-run): `GET /runs/index.json` lists the runs (a folder holding a regular
//! `run.json`), newest first, with each one's top-level entries; `GET /runs/<run-id>/<file>` is one of a
//! bundle's top-level regular files. Both names must be safe names (`runbook_host::files::is_safe_name`:
//! no `..`, no slash, no hidden name), and a symbolic link is never followed: not a run folder, not a file.

use anyhow::{Context, Result};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tower_http::compression::CompressionLayer;

#[derive(clap::Args)]
pub struct Args {
    /// The built page (what `playground/build` writes)
    #[arg(long, default_value = "playground/dist", value_name = "DIR")]
    pub dir: PathBuf,
    /// The port on 127.0.0.1; 0 picks a free one (the URL printed on stdout names it)
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// How long a connection may stay idle (no byte of a request or a response moving) before it is
    /// closed, e.g. `10s`, `500ms`
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub open_timeout: Duration,
    /// Also serve, read-only, the run bundles under DIR (e.g. `.runbook/runs`) to the run viewer
    #[arg(long, value_name = "DIR")]
    pub runs: Option<PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a duration like `10s` or `500ms`"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(format!("`{s}`: the unit must be `ms`, `s` or `m`")),
    };
    if d.is_zero() {
        return Err("the timeout must be more than zero".into());
    }
    Ok(d)
}

pub fn run(args: Args) -> Result<ExitCode> {
    let root = match std::fs::canonicalize(&args.dir) {
        Ok(r) if r.is_dir() => r,
        _ => {
            eprintln!("runbook-host: error: no playground at `{}`: run `playground/build` first (or pass --dir)", args.dir.display());
            return Ok(ExitCode::from(1));
        }
    };
    if let Err(why) = check_component(&root) {
        eprintln!("runbook-host: error: refusing to serve `{}`: {why}", args.dir.display());
        eprintln!("runbook-host: run `playground/build` to rebuild the page with this binary's component");
        return Ok(ExitCode::from(1));
    }

    let runs = match &args.runs {
        None => None,
        Some(dir) => match std::fs::canonicalize(dir) {
            Ok(r) if r.is_dir() => Some(r),
            _ => {
                eprintln!("runbook-host: error: --runs `{}` is not a directory", dir.display());
                return Ok(ExitCode::from(1));
            }
        },
    };

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, args.port))
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
        let port = listener.local_addr()?.port();
        outln!("http://127.0.0.1:{port}/");
        std::io::stdout().flush()?;
        eprintln!("serving {} (module {}); Ctrl-C stops", args.dir.display(), runbook_host::module_sha256());
        if let Some(r) = &args.runs {
            eprintln!("serving the runs under {} read-only at /runs/index.json", r.display());
        }
        let app = Router::new().fallback(serve).with_state(Arc::new(Site { root, port, runs })).layer(CompressionLayer::new());
        let limits = runbook_host::net::listen::Limits { max_connections: 64, idle_timeout: Some(args.open_timeout), ..Default::default() };
        runbook_host::net::listen::serve(listener, app, limits, std::future::pending()).await.context("serving the playground")?;
        Ok(ExitCode::SUCCESS)
    })
}

/// Whether `dir` was built from the component this binary embeds.
fn check_component(dir: &Path) -> Result<(), String> {
    let want = runbook_host::module_sha256();
    let recorded = std::fs::read_to_string(dir.join("module.sha256")).map_err(|e| format!("cannot read its module.sha256 ({e})"))?;
    let recorded = recorded.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
    if recorded != want {
        return Err(format!("it was built from component {recorded}, but this runbook-host embeds component {want}"));
    }
    let bytes = std::fs::read(dir.join("policy.wasm")).map_err(|e| format!("cannot read its policy.wasm ({e})"))?;
    let got = hex::encode(Sha256::digest(&bytes));
    if got != want {
        return Err(format!("its policy.wasm has sha256 {got}, but this runbook-host embeds component {want}"));
    }
    Ok(())
}

/// What the handler serves: the page's directory (canonical) and the port of the server's own names.
struct Site {
    root: PathBuf,
    port: u16,
    /// `--runs`: the folder of run bundles (canonical), served under `/runs/`.
    runs: Option<PathBuf>,
}

fn plain(status: StatusCode) -> Response {
    let mut r = Response::new(Body::from(format!("{status}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// The one handler: a file of the page, or a refusal. Every answer carries the same security headers.
async fn serve(State(site): State<Arc<Site>>, req: Request) -> Response {
    let mut r = answer(&site, req).await;
    let h = r.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn answer(site: &Site, req: Request) -> Response {
    // Only the head: the body of a GET is ignored, and what is held across an await must be Send.
    let (req, _) = req.into_parts();
    if req.method != Method::GET && req.method != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED);
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    // Only names of this server are served (a page elsewhere cannot rebind its own name to 127.0.0.1 to read
    // these files); a request without Host (HTTP/1.0) is local by construction.
    // An origin-form target and at most one Host (issue 28, F9: what a lenient reader would take).
    if req.uri.authority().is_some() || req.headers.get_all(header::HOST).iter().count() > 1 {
        return plain(StatusCode::MISDIRECTED_REQUEST);
    }
    if let Some(host) = req.headers.get(header::HOST) {
        let names = [format!("127.0.0.1:{}", site.port), format!("localhost:{}", site.port)];
        let ok = host.to_str().is_ok_and(|host| names.iter().any(|n| n.eq_ignore_ascii_case(host.trim())));
        if !ok {
            return plain(StatusCode::MISDIRECTED_REQUEST);
        }
    }
    if let (Some(runs), Some(rest)) = (&site.runs, req.uri.path().strip_prefix("/runs/")) {
        let (runs, rest) = (runs.clone(), rest.to_string());
        let found = tokio::task::spawn_blocking(move || run_file(&runs, &rest)).await;
        return match found {
            Ok(Some((body, ct))) => {
                let mut r = Response::new(Body::from(body));
                r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
                r
            }
            _ => plain(StatusCode::NOT_FOUND),
        };
    }
    let Some(path) = resolve(&site.root, req.uri.path()) else { return plain(StatusCode::NOT_FOUND) };
    let read = tokio::task::spawn_blocking({
        let path = path.clone();
        move || std::fs::read(path)
    });
    match read.await {
        Ok(Ok(body)) => {
            let mut r = Response::new(Body::from(body));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(&path)));
            r
        }
        _ => plain(StatusCode::NOT_FOUND),
    }
}

/// The file a request target names inside `root`, or None for anything that is not a plain file below it.
fn resolve(root: &Path, target: &str) -> Option<PathBuf> {
    let path = target.split(['?', '#']).next().unwrap_or("");
    if !path.starts_with('/') {
        return None;
    }
    let decoded = percent_decode(path)?;
    if decoded.contains("..") || decoded.contains('\\') || decoded.contains('\0') || decoded.contains("//") {
        return None;
    }
    let rel = decoded.trim_start_matches('/');
    let rel = if rel.is_empty() || rel.ends_with('/') { format!("{rel}index.html") } else { rel.to_string() };
    if rel.split('/').any(|seg| seg.is_empty() || seg.starts_with('.')) {
        return None;
    }
    let full = std::fs::canonicalize(root.join(&rel)).ok()?;
    (full.starts_with(root) && full.is_file()).then_some(full)
}

/// The most `/runs/index.json` lists.
const MAX_RUNS: usize = 1000;

/// What `/runs/<rest>` names under the runs folder `runs`: `index.json` (the listing) or a bundle's
/// top-level regular file `<run-id>/<file>`; None for anything else (a name that is not a safe name, a
/// symbolic link, a folder, a missing file). Read through a cap-std capability of `runs`, so no name reaches
/// outside it.
fn run_file(runs: &Path, rest: &str) -> Option<(Vec<u8>, &'static str)> {
    use runbook_host::files::is_safe_name;
    let dir = cap_std::fs::Dir::open_ambient_dir(runs, cap_std::ambient_authority()).ok()?;
    if rest == "index.json" {
        return Some((runs_index(&dir).into_bytes(), "application/json"));
    }
    let (id, name) = rest.split_once('/')?;
    if !is_safe_name(id) || !is_safe_name(name) || !dir.symlink_metadata(id).ok()?.is_dir() {
        return None;
    }
    let run = dir.open_dir(id).ok()?;
    if !run.symlink_metadata(name).ok()?.is_file() || run.symlink_metadata("run.json").map(|m| !m.is_file()).unwrap_or(true) {
        return None;
    }
    let bytes = run.read(name).ok()?;
    Some((bytes, content_type(Path::new(name))))
}

/// `{"runs":[{"run_id","modified","entries":[[name, "file" | <entries of a folder> | null]]}]}`: the run
/// folders under `dir` that hold a regular `run.json`, newest (`run.json` last modified) first, each with
/// its top-level entries (safe names only) as the viewer gives them to the module's `verify-bundle`.
fn runs_index(dir: &cap_std::fs::Dir) -> String {
    use runbook_host::files::is_safe_name;
    use serde_json::{json, Value};
    let mut runs: Vec<(u128, String, Vec<Value>)> = Vec::new();
    for entry in dir.entries().into_iter().flatten().flatten() {
        let Ok(id) = entry.file_name().into_string() else { continue };
        if !is_safe_name(&id) || !dir.symlink_metadata(&id).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let Ok(run) = dir.open_dir(&id) else { continue };
        let Ok(meta) = run.symlink_metadata("run.json") else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().ok().and_then(|t| t.into_std().duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis());
        let mut entries = Vec::new();
        for e in run.entries().into_iter().flatten().flatten() {
            let Ok(name) = e.file_name().into_string() else { continue };
            if !is_safe_name(&name) {
                continue;
            }
            let Ok(m) = run.symlink_metadata(&name) else { continue };
            let item = if m.is_file() {
                json!("file")
            } else if m.is_dir() {
                json!(run.read_dir(&name).map(|it| it.count()).unwrap_or(0).min(u32::MAX as usize))
            } else {
                Value::Null
            };
            entries.push(json!([name, item]));
        }
        entries.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
        runs.push((modified, id, entries));
    }
    runs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    runs.truncate(MAX_RUNS);
    let list: Vec<Value> = runs.into_iter().map(|(m, id, entries)| json!({"run_id": id, "modified_ms": m as u64, "entries": entries})).collect();
    json!({"schema": "runbook-playground-runs/v1", "runs": list}).to_string()
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "wasm" => "application/wasm",
        "json" => "application/json",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ndjson" => "application/x-ndjson",
        "yaml" | "yml" => "application/yaml",
        "sha256" | "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("1h").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn traversal_is_refused() {
        let root = std::env::temp_dir().join(format!("runbook-host-playground-unit-{}", std::process::id()));
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("index.html"), "i").unwrap();
        std::fs::write(root.join("sub/a.js"), "a").unwrap();
        std::fs::write(root.join(".hidden"), "h").unwrap();
        let outside = std::env::temp_dir().join(format!("runbook-host-playground-unit-outside-{}", std::process::id()));
        std::fs::write(&outside, "o").unwrap();
        let _ = std::fs::remove_file(root.join("out.js"));
        std::os::unix::fs::symlink(&outside, root.join("out.js")).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        assert_eq!(resolve(&root, "/"), Some(root.join("index.html")));
        assert_eq!(resolve(&root, "/sub/a.js?x=1"), Some(root.join("sub/a.js")));
        assert_eq!(resolve(&root, "/sub/%61.js"), Some(root.join("sub/a.js")));
        for bad in ["/../etc/passwd", "/sub/../index.html", "/%2e%2e/x", "/sub\\a.js", "/sub%5ca.js", "/.hidden", "//etc/passwd", "x", "/sub", "/%zz", "/%00"] {
            assert_eq!(resolve(&root, bad), None, "{bad}");
        }
        assert_eq!(resolve(&root, "/out.js"), None, "a symlink that leads out of the directory");
        let _ = std::fs::remove_dir_all(&root);
        let _ = std::fs::remove_file(&outside);
    }
}
