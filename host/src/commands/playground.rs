//! `runbook-host playground`: serves the envelope playground (`playground/dist`, made by `playground/build`)
//! on 127.0.0.1.
//!
//! A deliberately small static file server on `std::net`: GET and HEAD only, one request per connection,
//! files of one directory (no `..`, no backslash, no hidden names, nothing that resolves outside it), a fixed
//! table of content types. The page does every computation itself, in the browser, with the same component
//! this binary embeds: the server refuses to start when the directory was built from a different component
//! (its `module.sha256`, and the sha256 of the `policy.wasm` the page will load, must both equal
//! `runbook_host::module_sha256()`).

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// The built page (what `playground/build` writes)
    #[arg(long, default_value = "playground/dist", value_name = "DIR")]
    pub dir: PathBuf,
    /// The port on 127.0.0.1; 0 picks a free one (the URL printed on stdout names it)
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// How long a connection may stay open to send its request or take its response, e.g. `10s`, `500ms`
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub open_timeout: Duration,
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

/// At most this many connections are served at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 64;
/// A request head longer than this is refused.
const MAX_HEAD: usize = 16 * 1024;

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

    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, args.port)).with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
    let port = listener.local_addr()?.port();
    outln!("http://127.0.0.1:{port}/");
    std::io::stdout().flush()?;
    eprintln!("serving {} (module {}); Ctrl-C stops", args.dir.display(), runbook_host::module_sha256());

    let root = Arc::new(root);
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        while active.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            std::thread::sleep(Duration::from_millis(5));
        }
        active.fetch_add(1, Ordering::SeqCst);
        let (root, active, timeout) = (Arc::clone(&root), Arc::clone(&active), args.open_timeout);
        std::thread::spawn(move || {
            let _ = serve(stream, &root, port, timeout);
            active.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(ExitCode::SUCCESS)
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

struct Response {
    status: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Response {
    fn error(status: &'static str) -> Response {
        Response { status, headers: vec![("Content-Type", "text/plain; charset=utf-8".into())], body: format!("{status}\n").into_bytes() }
    }
}

fn serve(stream: TcpStream, root: &Path, port: u16, timeout: Duration) -> std::io::Result<()> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut reader = BufReader::new(stream.try_clone()?.take(MAX_HEAD as u64));
    let mut head = Vec::new();
    let complete = loop {
        let before = head.len();
        if reader.read_until(b'\n', &mut head)? == 0 {
            break false;
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            break true;
        }
    };
    let mut stream = stream;
    if !complete {
        if head.len() >= MAX_HEAD {
            return write_response(&mut stream, false, Response::error("431 Request Header Fields Too Large"));
        }
        return Ok(());
    }
    let (response, is_head) = respond(&head, root, port);
    write_response(&mut stream, is_head, response)
}

fn write_response(stream: &mut TcpStream, is_head: bool, r: Response) -> std::io::Result<()> {
    let mut out = format!("HTTP/1.1 {}\r\nContent-Length: {}\r\nConnection: close\r\n", r.status, r.body.len());
    for (k, v) in &r.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\nCache-Control: no-cache\r\n\r\n");
    stream.write_all(out.as_bytes())?;
    if !is_head {
        stream.write_all(&r.body)?;
    }
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// The response to one request head; the bool says whether it was a HEAD request.
fn respond(head: &[u8], root: &Path, port: u16) -> (Response, bool) {
    let Ok(head) = std::str::from_utf8(head) else { return (Response::error("400 Bad Request"), false) };
    let mut lines = head.split("\r\n").flat_map(|l| l.split('\n'));
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return (Response::error("400 Bad Request"), false);
    };
    if !version.starts_with("HTTP/1.") {
        return (Response::error("505 HTTP Version Not Supported"), false);
    }
    let is_head = method == "HEAD";
    if method != "GET" && !is_head {
        let mut r = Response::error("405 Method Not Allowed");
        r.headers.push(("Allow", "GET, HEAD".into()));
        return (r, false);
    }
    // Only names of this server are served (a page elsewhere cannot rebind its own name to 127.0.0.1 to read
    // these files); a request without Host (HTTP/1.0) is local by construction.
    let host = lines.filter_map(|l| l.split_once(':')).find(|(k, _)| k.trim().eq_ignore_ascii_case("host")).map(|(_, v)| v.trim());
    if let Some(host) = host {
        let ok = [format!("127.0.0.1:{port}"), format!("localhost:{port}")].iter().any(|h| h.eq_ignore_ascii_case(host));
        if !ok {
            return (Response::error("421 Misdirected Request"), is_head);
        }
    }
    match resolve(root, target) {
        Some(path) => match std::fs::read(&path) {
            Ok(body) => {
                let headers = vec![("Content-Type", content_type(&path).to_string())];
                (Response { status: "200 OK", headers, body }, is_head)
            }
            Err(_) => (Response::error("404 Not Found"), is_head),
        },
        None => (Response::error("404 Not Found"), is_head),
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
        let root = std::fs::canonicalize(&root).unwrap();
        assert_eq!(resolve(&root, "/"), Some(root.join("index.html")));
        assert_eq!(resolve(&root, "/sub/a.js?x=1"), Some(root.join("sub/a.js")));
        assert_eq!(resolve(&root, "/sub/%61.js"), Some(root.join("sub/a.js")));
        for bad in ["/../etc/passwd", "/sub/../index.html", "/%2e%2e/x", "/sub\\a.js", "/sub%5ca.js", "/.hidden", "//etc/passwd", "x", "/sub", "/%zz", "/%00"] {
            assert_eq!(resolve(&root, bad), None, "{bad}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
