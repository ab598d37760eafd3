//! Limits on every listener (issue 28, F7): the hook server, `run --listen` and `playground` serve through
//! [`serve`], not `axum::serve`, which takes any number of connections and waits forever for a request's
//! head (an adversarial test held 19,990 idle connections, and new ones timed out for every session;
//! 3,000 slowloris connections stayed open past 35 s).
//!
//! - **A cap on connections.** At the cap, a new connection takes the place of the oldest one that has not
//!   been served (no answer in 2xx yet, and no request in progress): a flood of idle or refused
//!   connections gives way to a client that sends its request at once. When every connection has been
//!   served, the newcomer is closed.
//! - **A deadline on a request's head** ([`Limits::header_timeout`], hyper's header-read timeout), which
//!   also closes a connection kept alive with no next request.
//! - **An idle deadline** ([`Limits::idle_timeout`]): a connection on which no byte moves either way for
//!   that long is closed (a stalled body, a reader that never reads the answer).
//! - **A refused request ends its connection** (a 4xx answer carries `Connection: close`).
//!
//! What this does not stop: a flood from many connections that each send a valid request (in personal
//! mode the agent holds the token); nothing here knows who is on the other end.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tower::ServiceExt;

/// The limits of one listener.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    /// How long a request's head may take to arrive, counted from when the connection is ready for it.
    pub header_timeout: Duration,
    /// How long no byte may move either way; None for a listener whose answers stream (SSE).
    pub idle_timeout: Option<Duration>,
    /// TCP_NODELAY on every connection (answers written in small pieces must not wait for an ACK).
    pub nodelay: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_connections: 256, header_timeout: Duration::from_secs(10), idle_timeout: Some(Duration::from_secs(60)), nodelay: true }
    }
}

/// Which accepted connection a request came on (a request extension, with axum's `ConnectInfo` of the
/// peer's address): never reused, so a handler may remember what it learnt about a connection by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// One open connection, as the cap sees it.
struct Conn {
    /// Answered 2xx at least once: it is a client's, and does not give way.
    served: AtomicBool,
    /// Requests in progress on it (a request being decided never gives way).
    busy: AtomicUsize,
    evict: tokio::sync::Notify,
}

type Table = Arc<Mutex<BTreeMap<u64, Arc<Conn>>>>;

/// Serves `app` on `listener` within `limits` until `shutdown` completes; then stops accepting, closes the
/// connections with no request in progress, and waits up to 5 s for the others to answer.
pub async fn serve(listener: tokio::net::TcpListener, app: Router, limits: Limits, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let table: Table = Arc::default();
    let mut next = 0u64;
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        if limits.nodelay {
            let _ = stream.set_nodelay(true);
        }
        let conn = Arc::new(Conn { served: AtomicBool::new(false), busy: AtomicUsize::new(0), evict: tokio::sync::Notify::new() });
        {
            let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
            if t.len() >= limits.max_connections {
                let victim = t.iter().find(|(_, c)| !c.served.load(Ordering::Acquire) && c.busy.load(Ordering::Acquire) == 0).map(|(k, _)| *k);
                match victim {
                    Some(k) => t.remove(&k).expect("found above").evict.notify_one(),
                    None => continue, // every connection is a served client's: the newcomer is closed (dropped)
                }
            }
            t.insert(next, conn.clone());
        }
        let id = next;
        next += 1;
        let app = app.clone();
        let c = conn.clone();
        let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let (app, c) = (app.clone(), c.clone());
            async move {
                c.busy.fetch_add(1, Ordering::AcqRel);
                // The peer's address, for a handler that asks the kernel who is on the other end.
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                req.extensions_mut().insert(ConnId(id));
                let mut resp = app.oneshot(req).await.unwrap_or_else(|e| match e {});
                if resp.status().is_success() {
                    c.served.store(true, Ordering::Release);
                } else if resp.status().is_client_error() {
                    resp.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
                }
                c.busy.fetch_sub(1, Ordering::AcqRel);
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        let table = table.clone();
        tokio::spawn(async move {
            let io = TokioIo::new(Idle::new(stream, limits.idle_timeout));
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(true)
                .serve_connection(io, svc);
            tokio::select! {
                _ = served => {}
                _ = conn.evict.notified() => {}
            }
            table.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        });
    }
    // Stop: the connections with nothing in progress close now; a request being answered gets 5 s.
    let idle: Vec<Arc<Conn>> = table.lock().unwrap_or_else(|p| p.into_inner()).values().filter(|c| c.busy.load(Ordering::Acquire) == 0).cloned().collect();
    for c in idle {
        c.evict.notify_one();
    }
    let t = tokio::time::Instant::now();
    while t.elapsed() < Duration::from_secs(5) && !table.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// A stream closed once no byte has moved either way for its idle time.
struct Idle {
    io: tokio::net::TcpStream,
    idle: Option<Duration>,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Idle {
    fn new(io: tokio::net::TcpStream, idle: Option<Duration>) -> Idle {
        let d = idle.unwrap_or(Duration::from_secs(86_400 * 365));
        Idle { io, idle, deadline: Box::pin(tokio::time::sleep(d)) }
    }

    /// After a poll of the stream: progress moves the deadline on; no progress past it is an error (and,
    /// before it, registers the task to be woken when it passes).
    fn after<T>(&mut self, cx: &mut Context<'_>, polled: Poll<std::io::Result<T>>, progress: impl Fn(&T) -> bool) -> Poll<std::io::Result<T>> {
        let Some(idle) = self.idle else { return polled };
        match polled {
            Poll::Ready(Ok(v)) => {
                if progress(&v) {
                    self.deadline.as_mut().reset(tokio::time::Instant::now() + idle);
                }
                Poll::Ready(Ok(v))
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the connection was idle too long"))),
                Poll::Pending => Poll::Pending,
            },
            err => err,
        }
    }
}

impl AsyncRead for Idle {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        let grew = buf.filled().len() > before;
        this.after(cx, polled, |_: &()| grew)
    }
}

impl AsyncWrite for Idle {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, data);
        this.after(cx, polled, |n: &usize| *n > 0)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.after(cx, polled, |n: &usize| *n > 0)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.after(cx, polled, |_: &()| false)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
