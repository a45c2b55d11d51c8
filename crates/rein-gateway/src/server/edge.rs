//! The client edge: accepting connections and bounding them. Each connection is served by
//! hyper (HTTP/1.1 and HTTP/2, optionally over TLS) behind three limits from `server.*`:
//! - `header_read_timeout_ms`: from a request's first byte to its complete headers (slow-header
//!   clients are closed);
//! - `idle_timeout_ms`: a connection with no request in flight is closed after this long;
//! - `max_connections`: connections past the cap are closed as they arrive.
//!
//! A request is in flight from its complete headers until its response body has been sent or
//! dropped, so a long call or a slow stream is never cut by these clocks (its own deadline and
//! `body_read_timeout_ms` bound it). Every close is counted by reason
//! (`rein_connections_closed_total`). A client that stops reading its answer is cut when a write
//! has made no progress for `idle_timeout_ms` (`write_stall`).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use futures_util::FutureExt;
use futures_util::future::Either;
use hyper::Method;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::{Instant, Sleep};

use super::Gateway;
use super::preface::{self, Protocol};
use rein_runtime::config::EdgeLimits;

/// Why rein closed a connection itself (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CloseReason {
    HeaderTimeout,
    IdleTimeout,
    Limit,
    TlsHandshake,
    WriteStall,
}

impl CloseReason {
    fn as_str(self) -> &'static str {
        match self {
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Limit => "limit",
            CloseReason::TlsHandshake => "tls_handshake",
            CloseReason::WriteStall => "write_stall",
        }
    }
}

/// The open connections over every worker, against `server.max_connections`.
#[derive(Debug, Default)]
pub(super) struct OpenConnections(AtomicUsize);

/// One admitted connection; dropping it frees its place.
struct Admitted {
    gateway: Arc<Gateway>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.gateway.edge.0.fetch_sub(1, Ordering::SeqCst);
        self.gateway.metrics.connection_open(-1);
    }
}

fn admit(gateway: &Arc<Gateway>, max: usize) -> Option<Admitted> {
    let open = &gateway.edge.0;
    let mut current = open.load(Ordering::SeqCst);
    loop {
        if current >= max {
            return None;
        }
        match open.compare_exchange_weak(current, current + 1, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => break,
            Err(now) => current = now,
        }
    }
    gateway.metrics.connection_open(1);
    Some(Admitted { gateway: gateway.clone() })
}

/// Accept and serve connections until `stop`, then let the open ones finish (the caller bounds
/// that by `server.drain_timeout_ms`).
pub(super) async fn serve_connections(
    gateway: Arc<Gateway>,
    listener: TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> io::Result<()> {
    let router = super::router(gateway.clone());
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let tcp = match accepted {
            Ok((tcp, _peer)) => tcp,
            Err(error) => {
                if !is_connection_error(&error) {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        let runtime = gateway.current();
        let limits = runtime.config.server.edge;
        let Some(admitted) = admit(&gateway, limits.max_connections) else {
            gateway.metrics.connection_closed(CloseReason::Limit.as_str());
            tracing::debug!(max = limits.max_connections, "connection limit reached: closing");
            drop(tcp);
            continue;
        };
        // Small SSE writes must leave at once, not wait for Nagle's algorithm and the peer's
        // delayed ACK (which adds ~40 ms to a streamed answer).
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {error}");
        }
        let tls = gateway.tls_acceptor();
        let watcher = graceful.watcher();
        let router = router.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let conn = Arc::new(ConnClock::new(limits));
            let gateway = admitted.gateway.clone();
            let service = Tracked { router, gateway, conn: conn.clone() };
            // A task's state is as large as its largest branch, and every open connection holds
            // one: the TLS branch (over twice a cleartext connection's state) is boxed, so a
            // cleartext connection does not carry its room.
            let result = match tls {
                None => serve(Watched::new(tcp, conn.clone()), service, watcher, stop).await,
                Some(acceptor) => {
                    Box::pin(serve_tls(acceptor, tcp, &conn, service, watcher, stop)).await
                }
            };
            if let Err(error) = result {
                tracing::debug!("connection ended: {error}");
            }
            if let Some(reason) = conn.closed_by() {
                admitted.gateway.metrics.connection_closed(reason.as_str());
                tracing::debug!(reason = reason.as_str(), "closed a client connection");
            }
            drop(admitted);
        });
    }
    graceful.shutdown().await;
    Ok(())
}

/// Serve a connection that begins with a TLS handshake, bounded by `header_read_timeout`.
async fn serve_tls(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    conn: &Arc<ConnClock>,
    service: Tracked,
    watcher: Watcher,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), hyper::Error> {
    let handshake = tokio::time::timeout(conn.limits.header_read_timeout, acceptor.accept(tcp));
    match handshake.await {
        Ok(Ok(stream)) => serve(Watched::new(stream, conn.clone()), service, watcher, stop).await,
        Ok(Err(error)) => {
            tracing::debug!("TLS handshake failed: {error}");
            conn.close(CloseReason::TlsHandshake);
            Ok(())
        }
        Err(_) => {
            conn.close(CloseReason::TlsHandshake);
            Ok(())
        }
    }
}

/// Serve one connection in the protocol its first bytes name, until it ends or, once the
/// gateway stops, its requests in flight are done. A connection still silent when the gateway
/// stops is closed.
async fn serve<T>(
    io: Watched<T>,
    service: Tracked,
    watcher: Watcher,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), hyper::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let sniffed = tokio::select! {
        sniffed = preface::sniff(io) => sniffed,
        _ = stop.wait_for(|stop| *stop) => return Ok(()),
    };
    let (protocol, io) = match sniffed {
        Ok(Some(sniffed)) => sniffed,
        Ok(None) => return Ok(()),
        Err(error) => {
            tracing::debug!("connection ended before a request: {error}");
            return Ok(());
        }
    };
    let io = TokioIo::new(io);
    match protocol {
        Protocol::Http1 => {
            // The builder is let go before the connection is served: it takes no room in it.
            let connection = {
                let mut builder = http1::Builder::new();
                builder.max_buf_size(HTTP1_MAX_READ_BUFFER);
                builder.serve_connection(io, service)
            };
            watcher.watch(connection).await
        }
        Protocol::Http2 => {
            // Boxed, like the TLS branch: an HTTP/2 connection's state is twice an HTTP/1.1 one's.
            let builder = http2::Builder::new(TokioExecutor::new());
            Box::pin(watcher.watch(builder.serve_connection(io, service))).await
        }
    }
}

/// The most an HTTP/1.1 connection's read buffer grows to. hyper doubles the buffer while it
/// reads a large body (up to ~400 KiB by default) and reserves that size again for the read
/// that watches for the client leaving while the answer streams: with a 100 KB prompt each
/// open stream kept 64 KiB for it, 16 KiB with this cap (a heap profile). A body still arrives
/// whole, read 16 KiB at a time at most; a request head must fit too (hyper answers `431`
/// past it), the limit Node.js's HTTP server has by default.
const HTTP1_MAX_READ_BUFFER: usize = 16 * 1024;

/// Errors that concern one connection only (as hyper and axum treat them).
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// What one connection is doing, for its clocks.
#[derive(Debug)]
struct ConnClock {
    limits: EdgeLimits,
    state: Mutex<ClockState>,
}

#[derive(Debug)]
struct ClockState {
    /// Requests whose headers arrived and whose response body is not done.
    in_flight: usize,
    /// When the connection last had nothing in flight.
    idle_since: Instant,
    /// When the first byte of the next request's headers arrived.
    head_started: Option<Instant>,
    /// Woken when the last request finishes, so the idle clock starts without waiting for a read.
    reader: Option<Waker>,
    /// A write is waiting for the client to read (hyper may still be sending an answer whose
    /// body it has already dropped): the idle clock does not run.
    write_blocked: bool,
    /// When a blocked write last went through.
    last_unblocked: Option<Instant>,
    closed_by: Option<CloseReason>,
}

impl ConnClock {
    fn new(limits: EdgeLimits) -> Self {
        Self {
            limits,
            state: Mutex::new(ClockState {
                in_flight: 0,
                idle_since: Instant::now(),
                head_started: None,
                reader: None,
                write_blocked: false,
                last_unblocked: None,
                closed_by: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn bytes_arrived(&self) {
        let mut state = self.lock();
        if state.in_flight == 0 && state.head_started.is_none() {
            state.head_started = Some(Instant::now());
        }
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        let mut state = self.lock();
        state.in_flight += 1;
        state.head_started = None;
        InFlight(self.clone())
    }

    /// When the connection must close, and why: `None` while a request is in flight.
    fn deadline(&self, reader: &Waker) -> Option<(Instant, CloseReason)> {
        let mut state = self.lock();
        if state.in_flight > 0 || state.write_blocked {
            if !state.reader.as_ref().is_some_and(|known| known.will_wake(reader)) {
                state.reader = Some(reader.clone());
            }
            return None;
        }
        Some(match state.head_started {
            Some(started) => {
                (started + self.limits.header_read_timeout, CloseReason::HeaderTimeout)
            }
            None => {
                let since =
                    state.last_unblocked.map_or(state.idle_since, |at| at.max(state.idle_since));
                (since + self.limits.idle_timeout, CloseReason::IdleTimeout)
            }
        })
    }

    /// A write returned `pending` (`true`) or went through after being blocked (`false`).
    fn write_blocked(&self, blocked: bool) {
        let reader = {
            let mut state = self.lock();
            state.write_blocked = blocked;
            if blocked {
                None
            } else {
                state.last_unblocked = Some(Instant::now());
                state.reader.take()
            }
        };
        if let Some(reader) = reader {
            reader.wake();
        }
    }

    fn close(&self, reason: CloseReason) {
        self.lock().closed_by.get_or_insert(reason);
    }

    fn closed_by(&self) -> Option<CloseReason> {
        self.lock().closed_by
    }
}

/// A request in flight; dropped with its response body.
struct InFlight(Arc<ConnClock>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let reader = {
            let mut state = self.0.lock();
            state.in_flight = state.in_flight.saturating_sub(1);
            if state.in_flight == 0 {
                state.idle_since = Instant::now();
                state.head_started = None;
                state.reader.take()
            } else {
                None
            }
        };
        if let Some(reader) = reader {
            reader.wake();
        }
    }
}

/// The connection's socket, ending the read side (a clean EOF for hyper) when a clock fires,
/// and failing a write that has made no progress for `idle_timeout_ms` (a client that stopped
/// reading its answer).
struct Watched<T> {
    io: T,
    conn: Arc<ConnClock>,
    timer: Pin<Box<Sleep>>,
    /// Armed while a write waits for the client to read.
    write_stall: Option<Pin<Box<Sleep>>>,
}

impl<T> Watched<T> {
    fn new(io: T, conn: Arc<ConnClock>) -> Self {
        let timer = Box::pin(tokio::time::sleep_until(Instant::now() + conn.limits.idle_timeout));
        Self { io, conn, timer, write_stall: None }
    }

    /// After a write returned `pending`: an error once the stall has lasted too long.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let limit = self.conn.limits.idle_timeout;
        if self.write_stall.is_none() {
            self.conn.write_blocked(true);
        }
        let stall = self.write_stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stall.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.conn.close(CloseReason::WriteStall);
                Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, "the client stopped reading"))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.conn.bytes_arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => {
                if let Some((deadline, reason)) = this.conn.deadline(cx.waker()) {
                    // The timer only ever moves earlier here; one that fires before the (later)
                    // deadline is re-armed then, so a busy keep-alive connection does not
                    // re-arm it on every request.
                    if deadline < this.timer.deadline() {
                        this.timer.as_mut().reset(deadline);
                    }
                    while this.timer.as_mut().poll(cx).is_ready() {
                        if Instant::now() >= deadline {
                            this.conn.close(reason);
                            // End of stream: hyper closes the connection.
                            return Poll::Ready(Ok(()));
                        }
                        this.timer.as_mut().reset(deadline);
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Pending => this.stalled(cx).map(Err),
            ready => {
                if this.write_stall.take().is_some() {
                    this.conn.write_blocked(false);
                }
                ready
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.stalled(cx).map(Err),
            ready => {
                if this.write_stall.take().is_some() {
                    this.conn.write_blocked(false);
                }
                ready
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The router, marking each request in flight until its response body is done. A `POST` to a
/// model-call endpoint goes to its handler directly (see `chat::endpoint`).
#[derive(Clone)]
struct Tracked {
    router: Router,
    gateway: Arc<Gateway>,
    conn: Arc<ConnClock>,
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = Response;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let in_flight = self.conn.request_started();
        let deadline = Instant::now() + self.conn.limits.body_read_timeout;
        let request = request.map(|body| Body::new(TimedBody { body, deadline, timer: None }));
        let call = if request.method() == Method::POST {
            super::chat::endpoint(request.uri().path())
        } else {
            None
        };
        let answer = match call {
            Some(api) => {
                Either::Left(super::chat::serve(self.gateway.clone(), api, request).map(Ok))
            }
            None => Either::Right(tower_service::Service::call(&mut self.router.clone(), request)),
        };
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| Body::new(Finishing { body, _in_flight: in_flight })))
        })
    }
}

/// A request body that must arrive whole within `server.body_read_timeout_ms` of its headers,
/// whichever handler reads it (the chat handlers answer 408 first with their own clock).
struct TimedBody {
    body: Incoming,
    deadline: Instant,
    /// Made on the first read that has to wait.
    timer: Option<Pin<Box<Sleep>>>,
}

impl http_body::Body for TimedBody {
    type Data = bytes::Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|frame| frame.map_err(io::Error::other))),
            Poll::Pending => {
                let deadline = this.deadline;
                let timer =
                    this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the request body did not arrive within server.body_read_timeout_ms",
                    )))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A response body that holds its request in flight until hyper drops it.
struct Finishing {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Finishing {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
