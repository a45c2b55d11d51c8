//! The pooled HTTP client all providers share, and the translation of transport errors
//! into [`Failure`]s. Before response headers: the connect bound firing is the engine's
//! `Connect` clock, anything else (refused, reset, DNS, TLS, closed) is a `Connection`
//! failure. After headers, a broken body is a cut stream. The client never retries, never
//! follows redirects (a redirected POST is a config error worth seeing) and sets no request
//! or read timeout: every other clock belongs to the engine.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::redirect::Policy;

use rein_core::{Clock, Failure};

use crate::config::{ClientBuildError, HttpClientConfig};

/// Largest error body read before parsing: enough for any provider's JSON, bounded against
/// a misbehaving proxy streaming an endless page.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Per-thread copies of each [`HttpClient`]'s `reqwest::Client`, by client id.
type ThreadClients = std::cell::RefCell<Vec<(u64, reqwest::Client)>>;

thread_local! {
    static THREAD_CLIENTS: ThreadClients = const { std::cell::RefCell::new(Vec::new()) };
}

/// Most distinct clients a thread keeps copies of (config reloads make new ones).
const MAX_THREAD_CLIENTS: usize = 16;

static NEXT_CLIENT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A cheap-to-clone handle on the providers' HTTP client. Each thread that sends through it
/// gets its own `reqwest::Client` (its own connection pool) built from the same settings, so a
/// gateway worker's request and the upstream connection it uses live on one event loop and no
/// other thread is woken to move its bytes.
#[derive(Debug, Clone)]
pub struct HttpClient {
    id: u64,
    config: HttpClientConfig,
    /// Used where a per-thread copy cannot be built (it was built once already, so rarely).
    inner: reqwest::Client,
    connect_timeout: Duration,
}

impl HttpClient {
    pub fn new(config: &HttpClientConfig) -> Result<Self, ClientBuildError> {
        let inner = build(config)?;
        let id = NEXT_CLIENT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Self { id, config: config.clone(), inner, connect_timeout: config.connect_timeout() })
    }

    /// This thread's copy of the client.
    fn local(&self) -> reqwest::Client {
        THREAD_CLIENTS.with(|clients| {
            let mut clients = clients.borrow_mut();
            if let Some((_, client)) = clients.iter().find(|(id, _)| *id == self.id) {
                return client.clone();
            }
            let client = build(&self.config).unwrap_or_else(|_| self.inner.clone());
            if clients.len() >= MAX_THREAD_CLIENTS {
                clients.remove(0);
            }
            clients.push((self.id, client.clone()));
            client
        })
    }

    pub(crate) fn post(&self, url: reqwest::Url) -> reqwest::RequestBuilder {
        self.local().post(url)
    }

    /// Sends one request and waits for the response headers.
    pub(crate) async fn execute(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Failure> {
        request.send().await.map_err(|error| self.before_headers(error))
    }

    fn before_headers(&self, error: reqwest::Error) -> Failure {
        let error = error.without_url();
        if error.is_timeout() {
            return Failure::ClockFired { clock: Clock::Connect, after: self.connect_timeout };
        }
        Failure::Connection { detail: error_chain(&error) }
    }
}

/// A `reqwest::Client` with the providers' settings.
fn build(config: &HttpClientConfig) -> Result<reqwest::Client, ClientBuildError> {
    let keepalive =
        (config.tcp_keepalive_ms > 0).then(|| Duration::from_millis(config.tcp_keepalive_ms));
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout())
        .pool_idle_timeout(Some(Duration::from_millis(config.pool_idle_timeout_ms)))
        .pool_max_idle_per_host(config.pool_max_idle_per_host)
        .tcp_keepalive(keepalive)
        .tcp_nodelay(true)
        .redirect(Policy::none())
        // reqwest's default policy re-sends requests an HTTP/2 server refused; the engine
        // owns every retry (and the retry budget), so the client sends exactly once.
        .retry(reqwest::retry::never())
        .user_agent(concat!("rein/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|error| ClientBuildError { detail: error_chain(&error) })
}

/// A body error after the headers arrived. reqwest reports these as "error decoding response
/// body" whatever the cause, but with no content decoding enabled the cause is always the
/// connection (reset, EOF inside a chunk, HTTP/2 stream reset): the stream was cut.
pub(crate) fn after_headers(error: reqwest::Error) -> Failure {
    let error = error.without_url();
    tracing::debug!(error = %error_chain(&error), "provider stream broke off");
    Failure::StreamCut
}

/// Reads an error response's body, at most [`MAX_ERROR_BODY_BYTES`]. A body that breaks off
/// gives what arrived: the status alone is still worth reporting.
pub(crate) async fn read_error_body(response: reqwest::Response) -> Bytes {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let Ok(chunk) = chunk else { break };
        let room = MAX_ERROR_BODY_BYTES.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ERROR_BODY_BYTES {
            break;
        }
    }
    Bytes::from(body)
}

/// An error and its sources as one line ("error sending request: client error (Connect):
/// Connection refused (os error 111)"). URLs are stripped by the callers, so no query
/// string (and nothing a user put in one) reaches the text.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
