//! The proxy as a Streamable HTTP MCP server (`runbook-host run --listen ADDR`): rmcp's server transport,
//! mounted at `/mcp` in axum. rmcp negotiates the revision per client and enforces what the transport
//! says: `Host` must name this machine (DNS rebinding), any `Origin` but the proxy's own is refused with
//! 403 (no page of another site may drive the proxy), a body over the bound is refused with 413 before it is decoded, and the
//! `Mcp-Method`/`Mcp-Name` headers must agree with the body (2026-07-28).
//!
//! What one run is over HTTP (docs/spec/adapters.md#observations-per-adapter): a 2025-11-25 client gets an MCP session (`Mcp-Session-Id`),
//! and each session is its own run with its own bundle, ended when the client deletes the session (or
//! leaves it idle past `--session-idle`, 15 minutes: then `client-closed`, never a clean shutdown). 2026-07-28 has no session: every request without one belongs to
//! the proxy's one stateless run, opened at the first such request and ended when the proxy stops. A
//! client-chosen run id was not taken: any client that can reach the port could then join another's run.

use super::{handler, next_exit, signalled, Hub, Said};
use crate::EndReason;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The path the MCP endpoint is served at.
pub const PATH: &str = "/mcp";
/// The largest request body read (tool arguments included).
pub const BODY_LIMIT: usize = 16 << 20;

pub struct Bound {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
}

/// Takes the address (before any server starts). Anything but loopback is said to be a risk.
pub async fn bind(addr: SocketAddr) -> Result<Bound, String> {
    if !addr.ip().is_loopback() {
        eprintln!(
            "runbook-host run: warning: listening on {addr}, not loopback: any machine that reaches it can drive the run's tools (the proxy has no client authentication); put it behind an authenticating gateway"
        );
    }
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    Ok(Bound { listener, addr })
}

/// Serves until a signal or until a server exits; ends every run; returns 0 only when every run completed.
pub async fn serve(hub: Arc<Hub>, bound: Bound, mut said: mpsc::UnboundedReceiver<Said>) -> u8 {
    let addr = bound.addr;
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    // The only Origin taken is the proxy's own (a same-origin request: no page of another site), which the
    // 2025-11-25 suite's dns-rebinding-protection asks to be accepted; any other is refused with 403.
    let port = addr.port();
    let mut origins = vec![format!("http://127.0.0.1:{port}"), format!("http://localhost:{port}"), format!("http://[::1]:{port}")];
    let mut config = StreamableHttpServerConfig::default().enforce_origin_validation().with_max_request_body_bytes(BODY_LIMIT);
    if addr.ip().is_unspecified() {
        config = config.disable_allowed_hosts();
    } else {
        hosts.push(addr.ip().to_string());
        config = config.with_allowed_hosts(hosts);
        origins.push(format!("http://{addr}"));
    }
    config = config.with_allowed_origins(origins);
    let stop = config.cancellation_token.clone();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(hub.base.session_idle);
    let factory_hub = Arc::clone(&hub);
    let service = StreamableHttpService::new(move || Ok(handler::Proxy::http(Arc::clone(&factory_hub))), Arc::new(sessions), config);
    // A session's DELETE is answered 204, not rmcp's 202: the session is gone when the answer leaves (its
    // run ended), and the Python SDK takes anything but 200 or 204 as a failed termination.
    let mut app = axum::Router::new().nest_service(PATH, service);
    // The approval page (crate::web) beside the MCP endpoint, where approvals are signed: answered only
    // with a passkey of the run's allowed-signers file.
    if let (Some(signers), true) = (&hub.base.signers, addr.ip().is_loopback()) {
        let page = crate::web::ApprovalPage { runs: hub.base.runs.clone(), allowed_signers: signers.path.clone(), port };
        app = app.merge(crate::web::approvals_router(Arc::new(page)));
        eprintln!("runbook-host run: the approval page: http://localhost:{port}/approvals");
    }
    let app = app.layer(axum::middleware::from_fn(|req: axum::extract::Request, next: axum::middleware::Next| async move {
        let delete = req.method() == axum::http::Method::DELETE;
        let mut r = next.run(req).await;
        if delete && r.status() == axum::http::StatusCode::ACCEPTED {
            *r.status_mut() = axum::http::StatusCode::NO_CONTENT;
        }
        r
    }));
    eprintln!(
        "runbook-host run: listening on http://{addr}{PATH} (MCP Streamable HTTP, 2025-11-25 and 2026-07-28) for {} ({}, trust {})",
        hub.base.doc.reference,
        &hub.base.doc.sha256[..12],
        hub.base.doc.trust.as_str()
    );
    // TCP_NODELAY on every connection: rmcp answers a POST as an SSE stream written in several small
    // pieces, and with Nagle's algorithm the last one waits for the client's delayed ACK (about 40 ms a
    // call on Linux loopback; benches/RESULTS.md section 10). No idle deadline: an SSE stream may be
    // quiet for as long as a tool runs (rmcp's keep-alive events aside).
    let limits = crate::net::listen::Limits { idle_timeout: None, nodelay: true, ..Default::default() };
    let server = crate::net::listen::serve(bound.listener, app, limits, stop.clone().cancelled_owned());
    let mut server = tokio::spawn(async move { server.await });
    let upstream = &hub.base.upstream;
    let reason = tokio::select! {
        r = &mut server => {
            eprintln!("runbook-host run: the HTTP server stopped: {r:?}");
            EndReason::Interrupted
        }
        i = next_exit(&mut said, &hub) => {
            eprintln!("runbook-host run: server `{}` exited", upstream.servers[i].name);
            EndReason::ServerExited
        }
        _ = signalled() => EndReason::Interrupted,
    };
    // The runs end first (with the reason), then the sessions close (their handlers find the runs ended).
    let code = hub.end_all(reason, false);
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), &mut server).await;
    upstream.shutdown(Duration::from_secs(5)).await;
    code
}
