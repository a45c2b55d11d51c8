//! The HTTP server: routes, the [`Gateway`] (a [`Runtime`] and what only HTTP needs: metrics,
//! TLS, the open connections), reload of the listener's certificate and graceful shutdown. The
//! runtime owns the config, its reload and the background workers.

mod admin;
mod admin_coverage;
mod admin_drills;
mod admin_handoffs;
mod admin_levers;
mod admin_slis;
mod admin_tools;
mod chat;
mod dashboard;
mod edge;
mod error;
mod intake;
mod mcp;
mod preface;
pub mod probe;
mod record;
mod run;
pub(crate) mod tls;
mod tools;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;

use rein_runtime::config::Config;
use rein_runtime::{BuildError, EnvSource, Runtime, RuntimeBuilder, Snapshot, StartError};

use crate::metrics::{Metrics, MetricsObserver, ToolMetricsObserver, VerdictMetrics};
use crate::wire::ErrorKind;

pub use error::{Api, ApiError, status};
pub use intake::{
    CONVERSATION_HEADER, DEADLINE_HEADER, IDEMPOTENCY_HEADER, RUN_HEADER, TRACEPARENT_HEADER,
    admin_allowed, client_allowed, new_id,
};

/// Everything a running gateway shares between requests: the runtime it serves, and what only
/// HTTP needs (metrics, TLS, the connections, the draining flag).
pub struct Gateway {
    pub runtime: Arc<Runtime>,
    pub metrics: Arc<Metrics>,
    draining: AtomicBool,
    /// TLS on the listener: the resolver a reload gives a renewed certificate to.
    tls: Option<(Arc<tls::CertResolver>, tokio_rustls::TlsAcceptor)>,
    /// Client connections open now, over every worker.
    edge: edge::OpenConnections,
    /// The golden-prompt probe: where it calls, its last run.
    pub(crate) probe: probe::Probe,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("runtime", &self.runtime).finish_non_exhaustive()
    }
}

impl Gateway {
    /// Whether the listener speaks TLS (links rein gives back use `https`).
    pub(crate) fn serves_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Build a gateway from an already validated config; a reload re-reads `config_path` (or
    /// `default_config`).
    pub async fn from_config(
        config: Config,
        config_path: Option<PathBuf>,
        default_config: Option<String>,
        env: EnvSource,
    ) -> Result<Arc<Self>, StartError> {
        let builder = Runtime::builder().source(config_path, default_config).env(env);
        Self::start(builder, Some(config)).await
    }

    /// Build the runtime `builder` describes (from `config` when given, else from its source)
    /// with the gateway's metrics observing it, and the gateway around it.
    pub async fn start(
        builder: RuntimeBuilder,
        config: Option<Config>,
    ) -> Result<Arc<Self>, StartError> {
        let metrics = Arc::new(Metrics::new());
        let builder = builder
            .observer(Arc::new(MetricsObserver(metrics.clone())))
            .tool_observer(Arc::new(ToolMetricsObserver(metrics.clone())));
        let runtime = match config {
            Some(config) => builder.build_from(config).await?,
            None => builder.build().await?,
        };
        runtime.judge.observe(Arc::new(VerdictMetrics(metrics.clone())));
        let tls = match &runtime.current().config.server.tls {
            Some(files) => {
                let resolver = tls::CertResolver::new(files.key.clone());
                let acceptor = tls::acceptor(resolver.clone())
                    .map_err(|error| BuildError::Client(format!("TLS: {error}")))?;
                Some((resolver, acceptor))
            }
            None => None,
        };
        Ok(Arc::new(Self {
            runtime: Arc::new(runtime),
            metrics,
            draining: AtomicBool::new(false),
            tls,
            edge: edge::OpenConnections::default(),
            probe: probe::Probe::default(),
        }))
    }

    /// The config in force and the dispatcher built from it.
    pub fn current(&self) -> Arc<Snapshot> {
        self.runtime.current()
    }

    /// The TLS acceptor for new connections, when the listener speaks TLS.
    fn tls_acceptor(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.tls.as_ref().map(|(_, acceptor)| acceptor.clone())
    }

    /// Re-read the config and swap it in (see [`Runtime::reload`]); a renewed TLS certificate
    /// takes effect for new connections.
    pub async fn reload(&self) -> Result<u64, StartError> {
        let version = self.runtime.reload().await?;
        self.renew_certificate();
        Ok(version)
    }

    /// Swap in a validated config (see [`Runtime::apply`]).
    pub async fn apply(&self, config: Config) -> Result<u64, StartError> {
        let version = self.runtime.apply(config).await?;
        self.renew_certificate();
        Ok(version)
    }

    /// Validation read the files: a renewed certificate is in the config now in force.
    fn renew_certificate(&self) {
        if let (Some(files), Some((resolver, _))) = (&self.current().config.server.tls, &self.tls) {
            resolver.replace(files.key.clone());
        }
    }

    /// Serve on `listener` until `shutdown` resolves, then stop accepting and drain in-flight
    /// requests and streams for up to `server.drain_timeout_ms`.
    ///
    /// Connections are served by `server.workers` event loops (one per core by default): this
    /// task's runtime plus one single-threaded runtime per extra worker thread, each accepting
    /// from its own handle on the same listening socket. A request stays on the thread that
    /// accepted it, together with the upstream connections it uses (the providers' client keeps
    /// one pool per thread), so serving it wakes no other thread.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let gateway = self.clone();
        tokio::spawn(async move {
            shutdown.await;
            gateway.draining.store(true, Ordering::SeqCst);
            // Load balancers see `/readyz` answer 503 "draining" and move traffic away while
            // new connections are still served, then the listener closes.
            let delay = gateway.current().config.server.drain_delay;
            if !delay.is_zero() {
                tracing::info!(
                    delay_ms = delay.as_millis() as u64,
                    "shutting down: /readyz says draining; still serving until the delay ends"
                );
                tokio::time::sleep(delay).await;
            }
            tracing::info!("shutting down: draining in-flight requests");
            stop_tx.send_replace(true);
        });

        self.runtime.spawn_workers(stop_rx.clone());
        self.probe.listening_on(listener.local_addr()?);
        tokio::spawn(probe::schedule(self.clone(), stop_rx.clone()));
        let workers = self.current().config.server.worker_threads();
        let listener = listener.into_std()?;
        let mut finished = Vec::with_capacity(workers);
        for index in 1..workers {
            let socket = listener.try_clone()?;
            let gateway = self.clone();
            let stop = stop_rx.clone();
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            std::thread::Builder::new().name(format!("rein-worker-{index}")).spawn(move || {
                let result = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|runtime| {
                        runtime.block_on(async move {
                            let socket = TcpListener::from_std(socket)?;
                            edge::serve_connections(gateway, socket, stop).await
                        })
                    });
                let _ = done_tx.send(result);
            })?;
            finished.push(done_rx);
        }
        let first = TcpListener::from_std(listener)?;
        let mut local = tokio::spawn(edge::serve_connections(self.clone(), first, stop_rx.clone()));
        let all = async move {
            let mut result = (&mut local).await.map_err(std::io::Error::other)?;
            for done in finished {
                let worker =
                    done.await.unwrap_or_else(|_| Err(std::io::Error::other("worker thread died")));
                result = result.and(worker);
            }
            result
        };
        tokio::pin!(all);
        let mut stopping = stop_rx;
        let drain = self.current().config.server.drain_timeout;
        let ended = tokio::select! {
            result = &mut all => Some(result),
            _ = stopping.wait_for(|stop| *stop) => None,
        };
        let result = match ended {
            Some(result) => result,
            None => match tokio::time::timeout(drain, all).await {
                Ok(result) => result,
                Err(_) => {
                    tracing::warn!(
                        drain_ms = drain.as_millis() as u64,
                        "drain timeout: closing the remaining connections"
                    );
                    Ok(())
                }
            },
        };
        // The calls that ended while the connections drained are queued: write them, then end.
        self.runtime.recorder.stop(RECORDER_STOP_WAIT).await;
        // Last, what the store queued without anyone waiting (a run's spend and draft).
        if let Err(error) = self.runtime.tool_store().settle().await {
            tracing::warn!(%error, "shutting down: the store's queued writes did not all run");
        }
        result
    }
}

/// How long a shutdown waits, after the connections are drained, for the recorder to write the
/// calls still queued.
const RECORDER_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The listening socket's accept queue. tokio's default (1,024) drops connections when thousands
/// of clients connect within a few seconds; the kernel caps it at `net.core.somaxconn`.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Bind the configured address.
pub async fn bind(gateway: &Gateway) -> Result<TcpListener, StartError> {
    let addr = gateway.current().config.server.listen;
    listen(addr).map_err(|source| StartError::Bind { addr: addr.to_string(), source })
}

/// A listener on `addr` with address reuse (as `TcpListener::bind` sets) and a backlog of
/// [`LISTEN_BACKLOG`].
fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The whole HTTP surface.
pub fn router(gateway: Arc<Gateway>) -> Router {
    let mut router = Router::new();
    for (path, api) in chat::ENDPOINTS {
        let call = move |State(gateway): State<Arc<Gateway>>, request: axum::extract::Request| {
            chat::serve(gateway, api, request)
        };
        router = router.route(path, post(call));
    }
    router
        .route("/v1/tools/{tool}", post(tools::call))
        .nest_service(
            "/mcp",
            Router::new()
                .fallback_service(mcp::service(gateway.clone()))
                .layer(axum::middleware::from_fn_with_state(gateway.clone(), mcp::guard)),
        )
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/", get(dashboard::page))
        .route("/traces/{id}", get(dashboard::trace_page))
        .nest(
            "/admin",
            admin::router()
                .route_layer(axum::middleware::from_fn_with_state(gateway.clone(), admin::guard)),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(gateway)
}

/// The caller's API, told by the header only Anthropic's SDKs send.
fn api_of(headers: &HeaderMap) -> Api {
    if headers.contains_key("anthropic-version") { Api::Anthropic } else { Api::OpenAi }
}

/// The caller's API and a request id for a model listing, or the refusal without a client key.
fn listing_call(gateway: &Gateway, headers: &HeaderMap) -> Result<(Api, String), ApiError> {
    let api = api_of(headers);
    let request_id = new_id("req_");
    if !client_allowed(&gateway.current(), headers) {
        let message = "Incorrect API key provided.";
        return Err(ApiError::new(api, ErrorKind::Authentication, message, &request_id));
    }
    Ok((api, request_id))
}

async fn models(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let (api, request_id) = match listing_call(&gateway, &headers) {
        Ok(call) => call,
        Err(refused) => return refused.into_response(),
    };
    let created = rein_core::clock::unix_ms() / 1000;
    let routes = gateway.runtime.engine.route_names();
    let body = match api {
        Api::OpenAi | Api::Responses => crate::wire::openai::models_body(&routes, created),
        Api::Anthropic => crate::wire::anthropic::models_body(&routes, created),
    };
    let mut response = axum::Json(body).into_response();
    set_request_id(&mut response, api, &request_id);
    response
}

/// `GET /v1/models/{id}`: one route, as a model.
async fn model(
    State(gateway): State<Arc<Gateway>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    let (api, request_id) = match listing_call(&gateway, &headers) {
        Ok(call) => call,
        Err(refused) => return refused.into_response(),
    };
    if !gateway.runtime.engine.route_names().contains(&id) {
        let message = format!("no route named `{id}`");
        return ApiError::new(api, ErrorKind::NotFound, &message, &request_id).into_response();
    }
    let created = rein_core::clock::unix_ms() / 1000;
    let body = match api {
        Api::OpenAi | Api::Responses => {
            serde_json::json!({"id": id, "object": "model", "created": created, "owned_by": "rein"})
        }
        Api::Anthropic => crate::wire::anthropic::model_object(&id, created),
    };
    let mut response = axum::Json(body).into_response();
    set_request_id(&mut response, api, &request_id);
    response
}

/// Any other path: a 404 in the caller's format, so an SDK raises `NotFoundError` with a message.
async fn not_found(headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let message = format!("rein does not serve `{}`", uri.path());
    ApiError::new(api_of(&headers), ErrorKind::UnknownPath, &message, &new_id("req_"))
        .into_response()
}

/// A known path with a method it does not take: a 405 in the caller's format.
async fn method_not_allowed(
    headers: HeaderMap,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> Response {
    let message = format!("`{}` does not take {method}", uri.path());
    ApiError::new(api_of(&headers), ErrorKind::MethodNotAllowed, &message, &new_id("req_"))
        .into_response()
}

fn set_request_id(response: &mut Response, api: Api, request_id: &str) {
    if let Ok(value) = axum::http::HeaderValue::from_str(request_id) {
        let name = if api == Api::Anthropic { "request-id" } else { "x-request-id" };
        response.headers_mut().insert(name, value.clone());
        response.headers_mut().insert("x-rein-request-id", value);
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(gateway): State<Arc<Gateway>>) -> Response {
    if gateway.draining.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response()
    } else if gateway.runtime.engine.route_names().is_empty() {
        (StatusCode::SERVICE_UNAVAILABLE, "no routes\n").into_response()
    } else {
        "ready\n".into_response()
    }
}

/// Off loopback, `/metrics` (route names, tiers, kill-switch state) is for operators: it needs
/// the admin key unless `server.metrics_public = true`. The dashboard has a stricter rule of its
/// own (see `dashboard`).
fn operator_view_refused(gateway: &Gateway, headers: &HeaderMap) -> Option<Response> {
    let runtime = gateway.current();
    if gateway.runtime.listen().ip().is_loopback()
        || runtime.config.server.metrics_public
        || admin_allowed(&runtime, headers)
    {
        return None;
    }
    let message = "this page needs the admin key (`Authorization: Bearer <admin key>`) when rein listens off loopback, or `server.metrics_public = true`\n";
    Some(
        (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], message).into_response(),
    )
}

async fn metrics(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if let Some(refused) = operator_view_refused(&gateway, &headers) {
        return refused;
    }
    let tools = gateway.current().tools.clone();
    match tools.outbox_stats().await {
        Ok(stats) => gateway.metrics.set_outbox(&stats, tools.now_unix_ms()),
        Err(error) => tracing::warn!("metrics: cannot read the outbox's numbers: {error}"),
    }
    gateway.metrics.set_recorder(gateway.runtime.recorder.stats());
    gateway.metrics.set_log_writer();
    let body = gateway.metrics.render(&gateway.runtime.engine);
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body)
        .into_response()
}

/// `text` made safe for HTML, in an element or a quoted attribute.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[cfg(test)]
mod tests {
    /// More clients connect at once than tokio's default accept queue (1,024) holds, and nobody
    /// accepts yet: with the larger backlog every one of them connects at once; with the default,
    /// those past 1,025 wait for a SYN retry that the full queue drops again.
    #[tokio::test]
    async fn a_burst_past_tokios_default_backlog_connects_without_being_accepted() {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        const CLIENTS: usize = 1_100;
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        if soft < 2 * CLIENTS as u64 {
            setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
        }
        let listener = super::listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = (0..CLIENTS).map(|_| async move {
            // Real time: the kernel's SYN retry (1 s, then 3 s) is what a full queue costs.
            tokio::time::timeout(
                std::time::Duration::from_millis(2500),
                tokio::net::TcpStream::connect(addr),
            )
            .await
        });
        let results = futures_util::future::join_all(connects).await;
        let connected: Vec<_> = results.into_iter().filter_map(|r| r.ok()?.ok()).collect();
        assert_eq!(connected.len(), CLIENTS, "connections completed before any accept");
        drop(listener);
    }

    #[test]
    fn ids_are_the_prefix_and_32_hex_digits_and_differ() {
        let a = super::new_id("req_");
        let b = super::new_id("req_");
        assert_ne!(a, b);
        for id in [&a, &b] {
            let hex = id.strip_prefix("req_").unwrap();
            assert_eq!(hex.len(), 32, "{id}");
            assert!(hex.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{id}");
        }
        // 64 ids cover every digit somewhere: the nibbles are all used, not a fixed pattern.
        let ids: String = (0..64).map(|_| super::new_id("")).collect();
        assert!("0123456789abcdef".chars().all(|d| ids.contains(d)));
    }
}
