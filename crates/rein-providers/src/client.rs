//! The pooled HTTP client all providers share, and the translation of transport errors
//! into [`Failure`]s. Before response headers: the connect bound firing is the engine's
//! `Connect` clock, anything else (refused, reset, DNS, TLS, closed) is a `Connection`
//! failure. After headers, a broken body is a cut stream. The client never retries, never
//! follows redirects (a redirected POST is a config error worth seeing) and sets no request
//! or read timeout: every other clock belongs to the engine.
//!
//! Requests go out on hyper's pooled client with rustls, in the HTTP version the provider is
//! configured for ([`HttpVersion`]: HTTP/1.1 by default, or HTTP/2 only), to a URI parsed once
//! when the provider is built. A destination that the
//! environment's proxy settings (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`) send
//! through a proxy goes out on reqwest instead, which speaks to proxies.
//!
//! A direct HTTP/1.1 request names its destination by a short pool name ([`PoolNames`]) that
//! the connector turns back into the real one: hyper's pool hashes a request's destination a
//! byte at a time, several times a request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{ACCEPT, HOST, HeaderMap, HeaderValue, USER_AGENT};
use http::uri::{Authority, Scheme};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use reqwest::Url;
use reqwest::redirect::Policy;

use rein_core::{Clock, Failure};

use crate::config::{ClientBuildError, HttpClientConfig, HttpVersion};
use crate::stream;

/// Largest error body read before parsing: enough for any provider's JSON, bounded against
/// a misbehaving proxy streaming an endless page.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

const AGENT: &str = concat!("rein/", env!("CARGO_PKG_VERSION"));

type Connector = Bounded<HttpsConnector<HttpConnector>>;
type Hyper = Client<Connector, Full<Bytes>>;

/// Per-thread copies of each [`HttpClient`]'s hyper clients, by client id and HTTP version.
type ThreadClients = std::cell::RefCell<Vec<((u64, HttpVersion), Hyper)>>;

thread_local! {
    static THREAD_CLIENTS: ThreadClients = const { std::cell::RefCell::new(Vec::new()) };
}

/// Most destinations [`PoolNames`] names; past them requests carry their own authority.
const MAX_POOL_NAMES: usize = 4096;

/// Most distinct clients a thread keeps copies of (config reloads make new ones; each client
/// has one per HTTP version).
const MAX_THREAD_CLIENTS: usize = 32;

static NEXT_CLIENT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A cheap-to-clone handle on the providers' HTTP client. Each thread that sends through it
/// gets its own hyper client (its own connection pool) built from the same settings, so a
/// gateway worker's request and the upstream connection it uses live on one event loop and no
/// other thread is woken to move its bytes.
#[derive(Clone)]
pub struct HttpClient {
    id: u64,
    /// TCP + TLS, bounded by the connect timeout, cloned into each thread's pool: TLS offering
    /// no ALPN protocol (HTTP/1.1), and offering only `h2`.
    http1: Connector,
    http2: Connector,
    pool_idle_timeout: Duration,
    pool_max_idle_per_host: usize,
    /// The environment's proxy rules, read once.
    proxies: Arc<Matcher>,
    /// The HTTP/1.1 connector's pool names (shared with it).
    names: Arc<PoolNames>,
    /// For destinations behind a proxy: HTTP/1.1 only, and HTTP/2 only.
    proxied_http1: reqwest::Client,
    proxied_http2: reqwest::Client,
    connect_timeout: Duration,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("id", &self.id)
            .field("connect_timeout", &self.connect_timeout)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("pool_max_idle_per_host", &self.pool_max_idle_per_host)
            .finish_non_exhaustive()
    }
}

/// Where a provider's requests go, resolved once when the provider is built: the URL (for
/// display and the proxy path) and the same address as hyper's URI (for a direct HTTP/1.1
/// endpoint, by its pool name).
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub url: Url,
    uri: Uri,
    via_proxy: bool,
    version: HttpVersion,
    /// The `Host` header of a direct HTTP/1.1 request ([`host_header`]), made once here: hyper's
    /// client otherwise formats it for every request (`host:port`, a string and a header value
    /// a request).
    host: Option<HeaderValue>,
}

/// The `Host` header hyper's client writes on an HTTP/1.1 request to `uri`: the host, and the
/// port when it is not the scheme's default.
fn host_header(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let secure = matches!(uri.scheme_str(), Some("https" | "wss"));
    let value = match uri.port() {
        Some(port) if port.as_u16() != if secure { 443 } else { 80 } => {
            HeaderValue::from_str(&format!("{host}:{port}"))
        }
        _ => HeaderValue::from_str(host),
    };
    value.ok()
}

/// A response whose headers arrived: status, headers and the body as it streams in.
pub(crate) struct Upstream {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: stream::Body,
}

impl HttpClient {
    pub fn new(config: &HttpClientConfig) -> Result<Self, ClientBuildError> {
        // reqwest reads the same variables with the same matcher.
        Self::with_proxies(config, Matcher::from_env(), None)
    }

    /// A client with the given proxy rules instead of the environment's (`rules` decides which
    /// destinations go to reqwest, `proxy` is what reqwest then does with them).
    fn with_proxies(
        config: &HttpClientConfig,
        proxies: Matcher,
        proxy: Option<reqwest::Proxy>,
    ) -> Result<Self, ClientBuildError> {
        Self::build(config, proxies, proxy, None)
    }

    /// The client; `tls` replaces the platform's verifier (a test's own root).
    fn build(
        config: &HttpClientConfig,
        proxies: Matcher,
        proxy: Option<reqwest::Proxy>,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Self, ClientBuildError> {
        let keepalive =
            (config.tcp_keepalive_ms > 0).then(|| Duration::from_millis(config.tcp_keepalive_ms));
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_keepalive(keepalive);
        // One TLS config (one load of the platform's roots) for the connectors and reqwest.
        let connector_tls = match &tls {
            Some(tls) => tls.clone(),
            None => {
                use hyper_rustls::ConfigBuilderExt;
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .and_then(|builder| builder.try_with_platform_verifier())
                .map_err(|error| ClientBuildError { detail: error_chain(&error) })?
                .with_no_client_auth()
            }
        };
        let tls_builder =
            || hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(connector_tls.clone());
        let limit = config.connect_timeout();
        let names = Arc::new(PoolNames::default());
        let http1 = Bounded {
            inner: tls_builder().https_or_http().enable_http1().wrap_connector(http.clone()),
            limit,
            names: Some(names.clone()),
        };
        let http2 = Bounded {
            inner: tls_builder().https_or_http().enable_http2().wrap_connector(http),
            limit,
            names: None,
        };
        crate::install_crypto_provider();
        let proxied = |version: HttpVersion| {
            let mut proxied = reqwest::Client::builder();
            if let Some(proxy) = proxy.clone() {
                proxied = proxied.no_proxy().proxy(proxy);
            }
            // The connectors' TLS config (reqwest takes its ALPN as given).
            let mut tls = connector_tls.clone();
            if version == HttpVersion::Http2 {
                tls.alpn_protocols = vec![b"h2".to_vec()];
            }
            proxied = proxied.tls_backend_preconfigured(tls);
            proxied = match version {
                HttpVersion::Http1 => proxied.http1_only(),
                HttpVersion::Http2 => proxied.http2_prior_knowledge(),
            };
            proxied
                .connect_timeout(config.connect_timeout())
                .pool_idle_timeout(Some(Duration::from_millis(config.pool_idle_timeout_ms)))
                .pool_max_idle_per_host(config.pool_max_idle_per_host)
                .tcp_keepalive(keepalive)
                .tcp_nodelay(true)
                .redirect(Policy::none())
                // reqwest's default policy re-sends requests an HTTP/2 server refused; the
                // engine owns every retry (and the retry budget), so the client sends once.
                .retry(reqwest::retry::never())
                .user_agent(AGENT)
                .build()
                .map_err(|error| ClientBuildError { detail: error_chain(&error) })
        };
        let id = NEXT_CLIENT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Self {
            id,
            http1,
            http2,
            names,
            pool_idle_timeout: Duration::from_millis(config.pool_idle_timeout_ms),
            pool_max_idle_per_host: config.pool_max_idle_per_host,
            proxies: Arc::new(proxies),
            proxied_http1: proxied(HttpVersion::Http1)?,
            proxied_http2: proxied(HttpVersion::Http2)?,
            connect_timeout: config.connect_timeout(),
        })
    }

    /// Resolves `url` once: its URI, and whether a proxy rule covers it; requests to it go out
    /// in `version`.
    pub(crate) fn endpoint(
        &self,
        url: Url,
        version: HttpVersion,
    ) -> Result<Endpoint, http::uri::InvalidUri> {
        let uri: Uri = url.as_str().parse()?;
        let via_proxy = self.proxies.intercept(&uri).is_some();
        let (uri, host) = match (via_proxy, version) {
            (false, HttpVersion::Http1) => {
                let host = host_header(&uri);
                (self.names.name(uri), host)
            }
            // HTTP/2 sends the authority (`:authority`); reqwest connects by the URL.
            _ => (uri, None),
        };
        Ok(Endpoint { url, uri, via_proxy, version, host })
    }

    /// This thread's copy of the pooled client for `version`.
    fn local(&self, version: HttpVersion) -> Hyper {
        let key = (self.id, version);
        THREAD_CLIENTS.with(|clients| {
            let mut clients = clients.borrow_mut();
            if let Some((_, client)) = clients.iter().find(|(k, _)| *k == key) {
                return client.clone();
            }
            let connector = match version {
                HttpVersion::Http1 => self.http1.clone(),
                HttpVersion::Http2 => self.http2.clone(),
            };
            let client = Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(self.pool_idle_timeout)
                .pool_max_idle_per_host(self.pool_max_idle_per_host)
                .http2_only(version == HttpVersion::Http2)
                .build(connector);
            if clients.len() >= MAX_THREAD_CLIENTS {
                clients.remove(0);
            }
            clients.push((key, client.clone()));
            client
        })
    }

    /// POSTs `body` with `headers` and resolves when the response headers arrive. The request
    /// is handed to the connection pool before this returns, so it is sent even if the future
    /// is polled late.
    pub(crate) fn post(
        &self,
        endpoint: &Endpoint,
        headers: &HeaderMap,
        body: Bytes,
    ) -> impl Future<Output = Result<Upstream, Failure>> + Send + 'static + use<> {
        self.send(Method::POST, endpoint, headers, body)
    }

    /// As [`HttpClient::post`], with `method` (a metadata server's token is a GET).
    pub(crate) fn send(
        &self,
        method: Method,
        endpoint: &Endpoint,
        headers: &HeaderMap,
        body: Bytes,
    ) -> impl Future<Output = Result<Upstream, Failure>> + Send + 'static + use<> {
        enum Sending {
            Direct(hyper_util::client::legacy::ResponseFuture),
            Proxied(Box<reqwest::RequestBuilder>),
        }
        let sending = if endpoint.via_proxy {
            let proxied = match endpoint.version {
                HttpVersion::Http1 => &self.proxied_http1,
                HttpVersion::Http2 => &self.proxied_http2,
            };
            let builder =
                proxied.request(method, endpoint.url.clone()).headers(headers.clone()).body(body);
            Sending::Proxied(Box::new(builder))
        } else {
            let mut request = Request::new(Full::new(body));
            *request.method_mut() = method;
            *request.uri_mut() = endpoint.uri.clone();
            let mut sent = headers.clone();
            sent.entry(USER_AGENT).or_insert(HeaderValue::from_static(AGENT));
            sent.entry(ACCEPT).or_insert(HeaderValue::from_static("*/*"));
            if let Some(host) = &endpoint.host {
                sent.entry(HOST).or_insert_with(|| host.clone());
            }
            *request.headers_mut() = sent;
            Sending::Direct(self.local(endpoint.version).request(request))
        };
        let connect_timeout = self.connect_timeout;
        async move {
            match sending {
                Sending::Direct(response) => {
                    let response =
                        response.await.map_err(|error| before_headers(&error, connect_timeout))?;
                    let (parts, body) = response.into_parts();
                    let body = body
                        .into_data_stream()
                        .map(|chunk| {
                            chunk.map_err(|error| {
                                tracing::debug!(error = %error_chain(&error), "provider stream broke off");
                                Failure::StreamCut
                            })
                        })
                        .boxed();
                    Ok(Upstream { status: parts.status, headers: parts.headers, body })
                }
                Sending::Proxied(builder) => {
                    let mut response = builder
                        .send()
                        .await
                        .map_err(|error| before_headers(&error.without_url(), connect_timeout))?;
                    let status = response.status();
                    let headers = std::mem::take(response.headers_mut());
                    let body = response
                        .bytes_stream()
                        .map(|chunk| chunk.map_err(|error| after_headers(error.without_url())))
                        .boxed();
                    Ok(Upstream { status, headers, body })
                }
            }
        }
    }
}

/// A failure before the response headers: the connect bound firing is the `Connect` clock, rein's
/// own host out of descriptors or memory is [`Failure::LocalResources`], anything else a
/// connection failure.
fn before_headers(error: &(dyn std::error::Error + 'static), connect_timeout: Duration) -> Failure {
    let mut source = Some(error);
    while let Some(cause) = source {
        if cause.downcast_ref::<std::io::Error>().is_some_and(out_of_local_resources) {
            return Failure::LocalResources { detail: error_chain(error) };
        }
        let timed_out = cause.is::<ConnectTimedOut>()
            || cause.downcast_ref::<std::io::Error>().is_some_and(|io| {
                io.kind() == std::io::ErrorKind::TimedOut
                    || io.get_ref().is_some_and(|inner| inner.is::<ConnectTimedOut>())
            })
            || cause.downcast_ref::<reqwest::Error>().is_some_and(reqwest::Error::is_timeout);
        if timed_out {
            return Failure::ClockFired { clock: Clock::Connect, after: connect_timeout };
        }
        source = cause.source();
    }
    Failure::Connection { detail: error_chain(error) }
}

/// The socket could not be made or bound for want of something on rein's own host: descriptors
/// (per process or system-wide), socket buffers or memory.
fn out_of_local_resources(error: &std::io::Error) -> bool {
    use nix::errno::Errno;
    error.kind() == std::io::ErrorKind::OutOfMemory
        || error.raw_os_error().map(Errno::from_raw).is_some_and(|errno| {
            matches!(errno, Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM)
        })
}

/// A body error after the headers arrived. reqwest reports these as "error decoding response
/// body" whatever the cause, but with no content decoding enabled the cause is always the
/// connection (reset, EOF inside a chunk, HTTP/2 stream reset): the stream was cut.
fn after_headers(error: reqwest::Error) -> Failure {
    tracing::debug!(error = %error_chain(&error), "provider stream broke off");
    Failure::StreamCut
}

/// Reads an error response's body, at most [`MAX_ERROR_BODY_BYTES`]. A body that breaks off
/// gives what arrived: the status alone is still worth reporting.
pub(crate) async fn read_error_body(mut chunks: stream::Body) -> Bytes {
    let mut body = Vec::new();
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

/// The connect bound (TCP and TLS together) fired.
#[derive(Debug)]
struct ConnectTimedOut;

impl std::fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connect timed out")
    }
}

impl std::error::Error for ConnectTimedOut {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connector whose whole connect (TCP, then TLS) is bounded by one timeout, as reqwest's
/// `connect_timeout` is; with `names`, it connects a pool name to its destination.
#[derive(Clone)]
struct Bounded<C> {
    inner: C,
    limit: Duration,
    names: Option<Arc<PoolNames>>,
}

/// Direct HTTP/1.1 destinations (scheme and authority) by a short name, `~` and a number
/// (`~0`, `~1f`): a direct HTTP/1.1 request's URI carries it as its authority. hyper's pool
/// keys connections by scheme and authority, hashed a byte at a time (SipHash, 60 to 90
/// instructions a byte) when a request takes a connection and again when it gives it back, so
/// a provider's host (`127.0.0.1:8080`, `api.anthropic.com`) cost 2-5k instructions a request.
/// The same destination gets the same name, so its requests share one pool as before. Nothing
/// of the name leaves rein: the connector connects (and TLS checks the certificate against)
/// the real destination, an HTTP/1.1 request line is in origin form (the path alone), and the
/// `Host` header is the endpoint's own ([`host_header`]). `~` is no DNS name's character, so
/// no real host is taken for a name.
#[derive(Debug, Default)]
struct PoolNames {
    destinations: std::sync::RwLock<Vec<(Scheme, Authority)>>,
}

impl PoolNames {
    /// `uri` with its authority replaced by its destination's name; `uri` as it is once
    /// [`MAX_POOL_NAMES`] destinations are named.
    fn name(&self, uri: Uri) -> Uri {
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else { return uri };
        let index = {
            let mut destinations =
                self.destinations.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            let known =
                destinations.iter().position(|(known, at)| known == scheme && at == authority);
            match known {
                Some(index) => index,
                None if destinations.len() < MAX_POOL_NAMES => {
                    destinations.push((scheme.clone(), authority.clone()));
                    destinations.len() - 1
                }
                None => return uri,
            }
        };
        let Ok(name) = Authority::try_from(format!("~{index:x}")) else { return uri };
        with_authority(uri, name)
    }

    /// The destination `uri` names (its scheme and authority, with `uri`'s path); `uri` as it
    /// is when it names none.
    fn destination(&self, uri: Uri) -> Uri {
        let index = uri
            .host()
            .and_then(|host| host.strip_prefix('~'))
            .and_then(|number| usize::from_str_radix(number, 16).ok());
        let Some(index) = index else { return uri };
        let destinations =
            self.destinations.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((_, authority)) = destinations.get(index) else { return uri };
        with_authority(uri, authority.clone())
    }
}

/// `uri` with `authority` in place of its own (`uri` as it is should that not make a URI).
fn with_authority(uri: Uri, authority: Authority) -> Uri {
    let mut parts = uri.clone().into_parts();
    parts.authority = Some(authority);
    Uri::from_parts(parts).unwrap_or(uri)
}

impl tower_service::Service<Uri> for Bounded<HttpsConnector<HttpConnector>> {
    type Response = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let uri = match &self.names {
            Some(names) => names.destination(uri),
            None => uri,
        };
        let connecting = self.inner.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(Box::new(ConnectTimedOut) as BoxError),
            }
        })
    }
}

/// An error and its sources as one line ("client error (Connect): tcp connect error:
/// Connection refused (os error 111)"). URLs are stripped by the callers, so no query
/// string (and nothing a user put in one) reaches the text.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An error with a source, as hyper-util's connector wraps the socket's error.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("tcp open error")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// Out of descriptors (the process's or the system's), socket buffers or memory is rein's
    /// own host; a refused or reset connection is the provider's.
    #[test]
    fn a_socket_rein_cannot_open_is_a_local_failure_not_the_providers() {
        use nix::errno::Errno;
        let limit = Duration::from_secs(1);
        for errno in [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM] {
            let error = Wrapped(std::io::Error::from_raw_os_error(errno as i32));
            let failure = before_headers(&error, limit);
            assert!(matches!(failure, Failure::LocalResources { .. }), "{errno}: {failure:?}");
        }
        for errno in [Errno::ECONNREFUSED, Errno::ECONNRESET, Errno::EHOSTUNREACH] {
            let error = Wrapped(std::io::Error::from_raw_os_error(errno as i32));
            let failure = before_headers(&error, limit);
            assert!(matches!(failure, Failure::Connection { .. }), "{errno}: {failure:?}");
        }
    }

    /// A destination the proxy rules cover goes to the proxy, in absolute form, with the
    /// same headers and body; one they exclude goes direct.
    #[tokio::test]
    async fn proxied_destinations_go_through_the_proxy() {
        let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        let seen = tokio::spawn(async move {
            let (mut socket, _) = proxy.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&request).contains("{\"x\":1}") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "proxy: client closed early");
                request.extend_from_slice(&buf[..n]);
            }
            let reply =
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
            socket.write_all(reply.as_bytes()).await.unwrap();
            String::from_utf8(request).unwrap()
        });
        let rules =
            Matcher::builder().http(format!("http://{proxy_addr}")).no("direct.internal").build();
        let proxy = reqwest::Proxy::http(format!("http://{proxy_addr}")).unwrap();
        let client =
            HttpClient::with_proxies(&HttpClientConfig::default(), rules, Some(proxy)).unwrap();

        let direct = client
            .endpoint(Url::parse("http://direct.internal/v1").unwrap(), HttpVersion::Http1)
            .unwrap();
        assert!(!direct.via_proxy);
        let endpoint = client
            .endpoint(Url::parse("http://provider.example/v1/chat").unwrap(), HttpVersion::Http1)
            .unwrap();
        assert!(endpoint.via_proxy);
        let mut headers = HeaderMap::new();
        headers.insert("x-test", HeaderValue::from_static("yes"));
        let upstream =
            client.post(&endpoint, &headers, Bytes::from_static(b"{\"x\":1}")).await.unwrap();
        assert_eq!(upstream.status, StatusCode::OK);
        let request = seen.await.unwrap();
        assert!(
            request.starts_with("POST http://provider.example/v1/chat HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains("x-test: yes\r\n"), "{request}");
    }

    /// A direct HTTP/1.1 request names its host once, with the port when it is not the
    /// scheme's default, as hyper's client would; the provider's own `Host` stays.
    #[tokio::test]
    async fn a_direct_request_names_its_host_and_port_once() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let seen = tokio::spawn(async move {
            let mut heads = Vec::new();
            for _ in 0..2 {
                let (mut socket, _) = server.accept().await.unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !String::from_utf8_lossy(&request).contains("{}") {
                    let n = socket.read(&mut buf).await.unwrap();
                    assert!(n > 0, "client closed early");
                    request.extend_from_slice(&buf[..n]);
                }
                let reply = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                socket.write_all(reply.as_bytes()).await.unwrap();
                heads.push(String::from_utf8(request).unwrap().to_lowercase());
            }
            heads
        });
        let rules = Matcher::builder().build();
        let client = HttpClient::with_proxies(&HttpClientConfig::default(), rules, None).unwrap();
        let url = Url::parse(&format!("http://{addr}/v1/chat/completions")).unwrap();
        let endpoint = client.endpoint(url, HttpVersion::Http1).unwrap();
        let body = || Bytes::from_static(b"{}");
        client.post(&endpoint, &HeaderMap::new(), body()).await.unwrap();
        let mut own = HeaderMap::new();
        own.insert(HOST, HeaderValue::from_static("api.example"));
        client.post(&endpoint, &own, body()).await.unwrap();
        let heads = seen.await.unwrap();
        for head in &heads {
            assert!(head.starts_with("post /v1/chat/completions http/1.1\r\n"), "{head}");
            assert!(!head.contains('~'), "no pool name leaves rein: {head}");
        }
        assert_eq!(heads[0].matches("host:").count(), 1, "{}", heads[0]);
        assert!(heads[0].contains(&format!("\r\nhost: {addr}\r\n")), "{}", heads[0]);
        assert_eq!(heads[1].matches("host:").count(), 1, "{}", heads[1]);
        assert!(heads[1].contains("\r\nhost: api.example\r\n"), "{}", heads[1]);

        let host = |url: &str| host_header(&url.parse().unwrap());
        assert_eq!(host("http://a.example:80/v1").unwrap(), "a.example");
        assert_eq!(host("https://a.example:443/v1").unwrap(), "a.example");
        assert_eq!(host("https://a.example:80/v1").unwrap(), "a.example:80");
        assert_eq!(host("http://a.example:8443/v1").unwrap(), "a.example:8443");
        let h2 = Url::parse(&format!("http://{addr}/v1")).unwrap();
        assert!(client.endpoint(h2, HttpVersion::Http2).unwrap().host.is_none(), "h2: :authority");
    }

    /// Endpoints of one destination share a name (and so hyper's pool of connections to it);
    /// another destination, or another scheme, has its own; a name goes back to its
    /// destination, anything else as it came.
    #[test]
    fn a_destination_has_one_pool_name() {
        let names = PoolNames::default();
        let uri = |text: &str| text.parse::<Uri>().unwrap();
        let chat = names.name(uri("http://127.0.0.1:8080/v1/chat/completions?x=1"));
        assert_eq!(chat.to_string(), "http://~0/v1/chat/completions?x=1");
        assert_eq!(names.name(uri("http://127.0.0.1:8080/v1/messages")).authority().unwrap(), "~0");
        assert_eq!(names.name(uri("https://127.0.0.1:8080/v1")).authority().unwrap(), "~1");
        assert_eq!(names.name(uri("http://api.example/v1")).authority().unwrap(), "~2");
        assert_eq!(
            names.destination(chat).to_string(),
            "http://127.0.0.1:8080/v1/chat/completions?x=1"
        );
        assert_eq!(
            names.destination(uri("https://~1/v1")).to_string(),
            "https://127.0.0.1:8080/v1"
        );
        for other in ["http://api.example/v1", "http://~9/v1", "http://~zz/v1", "http://a~0/v1"] {
            assert_eq!(names.destination(uri(other)), uri(other), "{other}");
        }
        // Once every name is taken, a new destination's requests carry its own authority.
        for port in 3..MAX_POOL_NAMES {
            names.name(uri(&format!("http://127.0.0.1:{port}/")));
        }
        let unnamed = uri("http://203.0.113.7:9000/v1");
        assert_eq!(names.name(unnamed.clone()), unnamed);
        assert_eq!(names.name(uri("http://api.example/v2")).authority().unwrap(), "~2");
    }

    /// Two providers at one destination (two endpoints) take turns on one kept-alive
    /// connection, as they would on hyper's pool keyed by the real authority.
    #[tokio::test]
    async fn endpoints_of_one_destination_share_its_connections() {
        let client = HttpClient::with_proxies(
            &HttpClientConfig::default(),
            Matcher::builder().build(),
            None,
        )
        .unwrap();
        let (addr, connections) = counting_server(1, false).await;
        let url = |path: &str| Url::parse(&format!("http://{addr}{path}")).unwrap();
        let chat = client.endpoint(url("/v1/chat/completions"), HttpVersion::Http1).unwrap();
        let other = client.endpoint(url("/sse/v1/chat/completions"), HttpVersion::Http1).unwrap();
        for endpoint in [&chat, &other, &chat] {
            let answer = client.post(endpoint, &HeaderMap::new(), Bytes::from_static(b"{}")).await;
            assert_eq!(body_text(answer.unwrap()).await, "HTTP/1.1");
        }
        assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A server on loopback that counts the connections it accepts and answers every request
    /// once `together` requests are open at once (so the client must hold them concurrently),
    /// in whichever HTTP version the connection speaks (`h2_only`: HTTP/2 alone).
    async fn counting_server(
        together: usize,
        h2_only: bool,
    ) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use hyper_util::server::conn::auto;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let barrier = Arc::new(tokio::sync::Barrier::new(together));
        let counted = connections.clone();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<_>| {
                        let barrier = barrier.clone();
                        async move {
                            barrier.wait().await;
                            let version = format!("{:?}", request.version());
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from(version),
                            )))
                        }
                    });
                    let mut builder = auto::Builder::new(TokioExecutor::new());
                    if h2_only {
                        builder = builder.http2_only();
                    }
                    let _ = builder.serve_connection(TokioIo::new(socket), service).await;
                });
            }
        });
        (addr, connections)
    }

    async fn body_text(upstream: Upstream) -> String {
        let chunks: Vec<_> = upstream.body.collect().await;
        let bytes: Vec<u8> = chunks.into_iter().flat_map(|c| c.unwrap().to_vec()).collect();
        String::from_utf8(bytes).unwrap()
    }

    /// HTTP/2 (prior knowledge over http://) carries every request open at once on one
    /// connection; HTTP/1.1 opens a connection for each. A version left unset is HTTP/1.1.
    #[tokio::test]
    async fn http2_requests_share_one_connection_and_http1_ones_each_have_their_own() {
        let together = 8;
        let client = HttpClient::with_proxies(
            &HttpClientConfig::default(),
            Matcher::builder().build(),
            None,
        )
        .unwrap();
        for (version, connections_expected, seen) in [
            (HttpVersion::Http2, 1, "HTTP/2.0"),
            (HttpVersion::Http1, together, "HTTP/1.1"),
            (HttpVersion::default(), together, "HTTP/1.1"),
        ] {
            let (addr, connections) = counting_server(together, false).await;
            let url = Url::parse(&format!("http://{addr}/v1/chat/completions")).unwrap();
            let endpoint = client.endpoint(url, version).unwrap();
            let sends: Vec<_> = (0..together)
                .map(|_| client.post(&endpoint, &HeaderMap::new(), Bytes::from_static(b"{}")))
                .collect();
            let answers = futures_util::future::join_all(sends).await;
            for answer in answers {
                let upstream = answer.unwrap();
                assert_eq!(upstream.status, StatusCode::OK);
                assert_eq!(body_text(upstream).await, seen, "{version:?}");
            }
            let opened = connections.load(std::sync::atomic::Ordering::SeqCst);
            assert_eq!(opened, connections_expected, "{version:?}: {together} requests at once");
        }
    }

    /// The version is what is spoken, not a hint: HTTP/1.1 to a server that speaks only
    /// HTTP/2 fails as a connection failure (the provider's), and HTTP/2 to it is answered.
    #[tokio::test]
    async fn http1_to_a_server_speaking_only_http2_is_a_connection_failure() {
        let client = HttpClient::with_proxies(
            &HttpClientConfig::default(),
            Matcher::builder().build(),
            None,
        )
        .unwrap();
        let (addr, _) = counting_server(1, true).await;
        let url = Url::parse(&format!("http://{addr}/v1/chat/completions")).unwrap();
        let http1 = client.endpoint(url.clone(), HttpVersion::Http1).unwrap();
        let failed = client.post(&http1, &HeaderMap::new(), Bytes::from_static(b"{}")).await;
        assert!(matches!(failed, Err(Failure::Connection { .. })), "{:?}", failed.err());
        let http2 = client.endpoint(url, HttpVersion::Http2).unwrap();
        let answered = client.post(&http2, &HeaderMap::new(), Bytes::from_static(b"{}")).await;
        assert_eq!(body_text(answered.unwrap()).await, "HTTP/2.0");
    }

    /// Over TLS the version is what ALPN offers: by default nothing (TLS without ALPN is
    /// HTTP/1.1), so a provider's edge that prefers HTTP/2 does not get every stream on one
    /// capped connection; with `http2`, only `h2`.
    #[tokio::test]
    async fn over_tls_alpn_offers_only_the_configured_version() {
        crate::install_crypto_provider();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = cert.der().clone();
        let key_der = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let mut server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key_der)
            .unwrap();
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (negotiated_tx, mut negotiated) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                let acceptor = acceptor.clone();
                let negotiated_tx = negotiated_tx.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(socket).await else { return };
                    let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                    negotiated_tx.send(alpn).unwrap();
                    let service = hyper::service::service_fn(|request: Request<_>| async move {
                        let version = format!("{:?}", request.version());
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from(version),
                        )))
                    });
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                });
            }
        });
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).unwrap();
        let tls =
            rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        let client = HttpClient::build(
            &HttpClientConfig::default(),
            Matcher::builder().build(),
            None,
            Some(tls),
        )
        .unwrap();
        let url = Url::parse(&format!("https://localhost:{port}/v1/messages")).unwrap();
        for (version, alpn, seen) in [
            (HttpVersion::default(), None, "HTTP/1.1"),
            (HttpVersion::Http2, Some(b"h2".as_slice()), "HTTP/2.0"),
        ] {
            let endpoint = client.endpoint(url.clone(), version).unwrap();
            let answer = client.post(&endpoint, &HeaderMap::new(), Bytes::from_static(b"{}")).await;
            assert_eq!(body_text(answer.unwrap()).await, seen, "{version:?}");
            assert_eq!(negotiated.recv().await.unwrap().as_deref(), alpn, "{version:?}");
        }
    }
}
