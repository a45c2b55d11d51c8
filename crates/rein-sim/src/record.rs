//! The recording proxy behind `rein record`: a reverse proxy in front of a real provider (or a
//! `rein sim`) that forwards each request, streams the answer back to the client unchanged,
//! and appends the exchange, scrubbed ([`crate::scrub`]), to a [`Cassette`] file.
//!
//! Bounded like every read rein makes: a request body and a response body each past
//! [`RecordConfig::max_body_bytes`], or an exchange longer than [`RecordConfig::timeout`],
//! is cut off and not recorded, so a hostile upstream cannot make the recorder buffer without
//! end. The proxy asks the upstream for an uncompressed answer (`accept-encoding: identity`),
//! so what the cassette keeps can be scrubbed and read. An exchange is written (the whole file,
//! to a temporary file renamed over it) before the client sees the end of its body, so once a
//! client has read a whole body, the cassette holds it ([`RecordHandle::wait_recorded`] waits
//! for a client that stops reading early, as an SSE client may at its last event). An answer the
//! upstream broke off is recorded as cut, and replays cut; one the client walked away from is
//! still read to its end, within the same bounds, and recorded.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use rein_core::Secret;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::body::{Chunk, SimBody};
use crate::cassette::{self, Body, Cassette, CassetteError, Interaction};
use crate::cassette::{RecordedRequest, RecordedResponse};
use crate::listen::{self, Handler};
use crate::replay::HOP_BY_HOP;
use crate::scrub::Scrubber;

/// The default cap on a request body and on a response body (the providers' own limit is
/// 32 MB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// The default cap on one exchange, from the request's first byte to the response's last.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// How to record.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// The upstream's base URL (`https://api.openai.com`); a request for `/v1/x` goes to
    /// `{upstream}/v1/x`.
    pub upstream: String,
    /// The cassette file.
    pub cassette: PathBuf,
    /// Keys scrubbed wherever they occur, besides the credential headers' own values.
    pub secrets: Vec<Secret>,
    /// Add to an existing cassette; without it an existing file is refused.
    pub append: bool,
    pub max_body_bytes: usize,
    pub timeout: Duration,
}

/// Why the recorder could not start.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The URL is not printed: it may hold credentials.
    #[error("the upstream is not an http:// or https:// URL without credentials or a query")]
    Upstream(String),
    #[error("{} exists: pass --append to add to it, or remove it to record afresh", .0.display())]
    Exists(PathBuf),
    #[error(transparent)]
    Cassette(#[from] CassetteError),
    #[error("cannot build the upstream client: {0}")]
    Client(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// A running recorder. Dropping the handle stops it.
#[derive(Debug)]
pub struct RecordHandle {
    addr: SocketAddr,
    recorder: Arc<Recorder>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Recorder {
    upstream: String,
    client: reqwest::Client,
    path: PathBuf,
    cassette: Mutex<Cassette>,
    secrets: Scrubber,
    max_body_bytes: usize,
    timeout: Duration,
    /// How many exchanges are on file.
    written: watch::Sender<usize>,
}

impl RecordConfig {
    /// Recording `upstream` to `cassette` with the default bounds and no extra secrets.
    pub fn new(upstream: impl Into<String>, cassette: impl Into<PathBuf>) -> RecordConfig {
        RecordConfig {
            upstream: upstream.into(),
            cassette: cassette.into(),
            secrets: Vec::new(),
            append: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// Binds `addr` and starts recording.
pub async fn bind(addr: SocketAddr, config: RecordConfig) -> Result<RecordHandle, RecordError> {
    let listener =
        TcpListener::bind(addr).await.map_err(|source| RecordError::Bind { addr, source })?;
    start(listener, config).await
}

/// Starts recording on a listener you bound. Installs rustls's ring provider as the process
/// default when none is installed (for an `https://` upstream).
pub async fn start(
    listener: TcpListener,
    config: RecordConfig,
) -> Result<RecordHandle, RecordError> {
    let addr = listener.local_addr().map_err(|source| RecordError::Bind {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        source,
    })?;
    let upstream = upstream_base(&config.upstream)?;
    let cassette = match (config.cassette.exists(), config.append) {
        (true, true) => Cassette::from_file(&config.cassette)?,
        (true, false) => return Err(RecordError::Exists(config.cassette)),
        (false, _) => Cassette::new(),
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| RecordError::Client(e.to_string()))?;
    let (written, _) = watch::channel(0);
    let recorder = Arc::new(Recorder {
        upstream,
        client,
        path: config.cassette,
        cassette: Mutex::new(cassette),
        secrets: Scrubber::new(config.secrets.iter().map(|s| s.expose().to_string())),
        max_body_bytes: config.max_body_bytes,
        timeout: config.timeout,
        written,
    });
    let handler: Handler = {
        let recorder = recorder.clone();
        Arc::new(move |request| Box::pin(proxy(recorder.clone(), request)))
    };
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(listen::accept_loop(listener, handler, stopped));
    Ok(RecordHandle { addr, recorder, stop, task: Some(task) })
}

/// The upstream's base URL, checked, without a trailing slash.
fn upstream_base(upstream: &str) -> Result<String, RecordError> {
    let fail = || RecordError::Upstream(upstream.to_string());
    let url = reqwest::Url::parse(upstream).map_err(|_| fail())?;
    if !matches!(url.scheme(), "http" | "https")
        || url.host_str().is_none()
        || !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(fail());
    }
    Ok(upstream.trim_end_matches('/').to_string())
}

/// What the client sent, and the head of the upstream's answer.
struct Exchange {
    method: String,
    path: String,
    request_headers: Vec<(String, String)>,
    request_body: Bytes,
    status: u16,
    response_headers: Vec<(String, String)>,
}

fn refs(headers: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
    headers.iter().map(|(name, value)| (name.as_str(), value.as_str()))
}

fn pairs(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            (name.as_str().to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned())
        })
        .collect()
}

async fn proxy(recorder: Arc<Recorder>, request: Request<Incoming>) -> Response<SimBody> {
    let deadline = Instant::now() + recorder.timeout;
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let read =
        tokio::time::timeout_at(deadline, Limited::new(body, recorder.max_body_bytes).collect())
            .await;
    let body = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(_)) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body could not be read within {} bytes; not forwarded",
                    recorder.max_body_bytes
                ),
            );
        }
        Err(_) => {
            return refuse(StatusCode::REQUEST_TIMEOUT, "the request body took too long".into());
        }
    };
    let mut upstream =
        recorder.client.request(parts.method.clone(), format!("{}{path}", recorder.upstream));
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) && name != http::header::ACCEPT_ENCODING {
            upstream = upstream.header(name, value);
        }
    }
    upstream = upstream.header(http::header::ACCEPT_ENCODING, "identity").body(body.clone());
    let response = match tokio::time::timeout_at(deadline, upstream.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            // Without the URL: its query may hold a key.
            let error = error.without_url();
            return refuse(StatusCode::BAD_GATEWAY, format!("cannot reach the upstream: {error}"));
        }
        Err(_) => {
            return refuse(
                StatusCode::GATEWAY_TIMEOUT,
                "the upstream did not answer in time".into(),
            );
        }
    };
    let exchange = Exchange {
        method: parts.method.as_str().to_string(),
        path,
        request_headers: pairs(&parts.headers)
            .into_iter()
            .filter(|(name, _)| !HOP_BY_HOP.contains(&name.as_str()))
            .collect(),
        request_body: body,
        status: response.status().as_u16(),
        response_headers: pairs(response.headers()),
    };
    let mut head = Response::builder().status(response.status());
    for (name, value) in response.headers() {
        let framing = HOP_BY_HOP.contains(&name.as_str()) && name != http::header::CONTENT_LENGTH;
        if !framing {
            head = head.header(name, value);
        }
    }
    let (tx, client_body) = SimBody::channel();
    match head.body(client_body) {
        Ok(client) => {
            tokio::spawn(relay(recorder, exchange, response, tx, deadline));
            client
        }
        Err(error) => refuse(StatusCode::BAD_GATEWAY, format!("the upstream's head: {error}")),
    }
}

/// Streams the upstream's body to the client while keeping it, then records the exchange
/// before the client's body ends.
async fn relay(
    recorder: Arc<Recorder>,
    exchange: Exchange,
    mut response: reqwest::Response,
    tx: mpsc::Sender<Chunk>,
    deadline: Instant,
) {
    let what = format!("{} {}", exchange.method, recorder.secrets.path(&exchange.path));
    let mut bytes = Vec::new();
    let mut chunks = Vec::new();
    let length = response.content_length();
    let mut held: Option<Bytes> = None;
    let mut client_gone = false;
    let cut = loop {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                if bytes.len() + chunk.len() > recorder.max_body_bytes {
                    tracing::warn!(%what, max = recorder.max_body_bytes, "rein record: the answer is too large; cut off, not recorded");
                    let _ = tx.send(Chunk::Abort).await;
                    return;
                }
                bytes.extend_from_slice(&chunk);
                chunks.push(chunk.len());
                let mut chunk = chunk;
                // With a length, the client's body is done with its last byte, which waits
                // until the exchange is on file (without one, the end of the channel does).
                if length == Some(bytes.len() as u64) && !chunk.is_empty() {
                    held = Some(chunk.split_off(chunk.len() - 1));
                }
                // A client that stops reading (an SSE client is done at its `[DONE]`, maybe
                // before the body's end) does not stop the recording: the rest is read within
                // the same bounds.
                if !client_gone {
                    let sent = tokio::time::timeout_at(deadline, tx.send(Chunk::Data(chunk))).await;
                    client_gone = !matches!(sent, Ok(Ok(())));
                }
            }
            Ok(Ok(None)) => break false,
            Ok(Err(_)) => break true,
            Err(_) => {
                tracing::warn!(%what, "rein record: the exchange ran past its timeout; cut off, not recorded");
                let _ = tx.send(Chunk::Abort).await;
                return;
            }
        }
    };
    recorder.record(exchange, bytes, chunks, cut).await;
    if let Some(last) = held {
        let _ = tx.send(Chunk::Data(last)).await;
    }
    if cut {
        let _ = tx.send(Chunk::Abort).await;
    }
}

impl Recorder {
    /// Scrubs the exchange and writes the cassette with it.
    async fn record(&self, exchange: Exchange, body: Vec<u8>, chunks: Vec<usize>, cut: bool) {
        let mut scrubber = self.secrets.clone();
        scrubber.learn_headers(refs(&exchange.request_headers));
        scrubber.learn_query(&exchange.path);
        let request_body = scrubber.bytes(&exchange.request_body);
        let request = RecordedRequest {
            method: exchange.method,
            path: scrubber.path(&exchange.path),
            headers: scrubber.headers(refs(&exchange.request_headers)),
            match_key: Some(cassette::match_key(&request_body)),
            body: Body::of(&request_body),
        };
        scrubber.learn_headers(refs(&exchange.response_headers));
        let response_body = scrubber.bytes(&body);
        let chunks = (chunks.len() > 1 && response_body == body).then_some(chunks);
        let response = RecordedResponse {
            status: exchange.status,
            headers: scrubber.headers(refs(&exchange.response_headers)),
            body: Body::of(&response_body),
            chunks,
            cut,
        };
        let what = format!("{} {} -> {}", request.method, request.path, response.status);
        let compressed = exchange.response_headers.iter().any(|(name, value)| {
            name.eq_ignore_ascii_case("content-encoding") && !value.eq_ignore_ascii_case("identity")
        });
        if compressed {
            tracing::warn!(%what, "rein record: the upstream compressed its answer although asked not to; a secret inside the compressed body cannot be scrubbed");
        }
        let mut cassette = self.cassette.lock().await;
        cassette.interactions.push(Interaction { request, response });
        match cassette.write_atomically(&self.path).await {
            Ok(()) => {
                self.written.send_modify(|count| *count += 1);
                tracing::info!(%what, "rein record: recorded");
            }
            Err(error) => tracing::error!(%what, %error, "rein record: not written"),
        }
    }
}

/// The recorder's own refusal, in a shape both SDKs read as an error.
fn refuse(status: StatusCode, message: String) -> Response<SimBody> {
    let body = json!({
        "type": "error",
        "error": {"type": "record_error", "message": format!("rein record: {message}")},
    });
    let mut response = Response::new(SimBody::full(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

impl RecordHandle {
    /// The address the recorder listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`: point a client here as it would point at the upstream.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many exchanges were written to the cassette.
    pub fn recorded(&self) -> usize {
        *self.recorder.written.borrow()
    }

    /// Waits until at least `count` exchanges are on file.
    pub async fn wait_recorded(&self, count: usize) {
        let mut written = self.recorder.written.subscribe();
        let _ = written.wait_for(|recorded| *recorded >= count).await;
    }

    /// Stops accepting, drops every open connection and waits for the accept loop to end.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RecordHandle {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_is_a_plain_base_url() {
        assert_eq!(upstream_base("https://api.openai.com/").unwrap(), "https://api.openai.com");
        assert_eq!(
            upstream_base("http://127.0.0.1:8080/prefix").unwrap(),
            "http://127.0.0.1:8080/prefix"
        );
        for bad in [
            "api.openai.com",
            "ftp://host",
            "https://user:sk-secret@host",
            "https://host/?key=sk-secret",
            "https://host/#x",
        ] {
            let error = upstream_base(bad).unwrap_err().to_string();
            assert!(!error.contains("sk-secret"), "{error}");
        }
    }
}
