//! The HTTP server: routes, shared state, config reload and graceful shutdown.
//!
//! One [`Gateway`] holds the engine (which lives as long as the process: retry budgets, breakers
//! and the kill switch survive reloads) and the current config snapshot, swapped atomically on a
//! reload so requests in flight finish on the config they started with.

mod admin;
mod admin_tools;
mod body;
mod chat;
mod context;
mod edge;
mod error;
pub(crate) mod tls;
mod tools;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use rand::RngExt;
use rein_core::Engine;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::config::{Config, ConfigError, ConfigProblem, Secret, process_env};
use crate::metrics::{Metrics, MetricsObserver};
use crate::runtime::{BuildError, Upstreams};
use crate::wire::ErrorKind;

pub use context::{
    CONVERSATION_HEADER, DEADLINE_HEADER, IDEMPOTENCY_HEADER, RUN_HEADER, TRACEPARENT_HEADER,
};
pub use error::{Api, ApiError};

/// The config in force, with its version number (1 at start, +1 per successful reload), and
/// the tool dispatcher built from it.
#[derive(Debug)]
pub struct Runtime {
    pub config: Config,
    pub version: u64,
    pub tools: Arc<rein_tools::Dispatcher>,
}

impl Runtime {
    /// Whether the request carries a valid client key (always, when none are configured: rein
    /// then only listens on loopback, which config validation enforces).
    pub fn client_allowed(&self, headers: &HeaderMap) -> bool {
        let keys = &self.config.server.client_keys;
        keys.is_empty()
            || presented(headers).iter().any(|given| keys.iter().any(|key| same(key, given)))
    }

    /// Whether the request carries the admin key. No admin key configured: the admin API is off.
    pub fn admin_allowed(&self, headers: &HeaderMap) -> bool {
        match &self.config.server.admin_key {
            Some(key) => presented(headers).iter().any(|given| same(key, given)),
            None => false,
        }
    }
}

/// Keys presented as `Authorization: Bearer <key>` or `x-api-key: <key>`.
fn presented(headers: &HeaderMap) -> Vec<&str> {
    let mut keys = Vec::new();
    if let Some(value) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())
        && let Some(token) = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))
    {
        keys.push(token.trim());
    }
    if let Some(value) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        keys.push(value.trim());
    }
    keys
}

fn same(key: &Secret, given: &str) -> bool {
    key.expose().as_bytes().ct_eq(given.as_bytes()).into()
}

/// Everything a running gateway shares between requests.
pub struct Gateway {
    runtime: ArcSwap<Runtime>,
    pub engine: Engine,
    pub metrics: Arc<Metrics>,
    /// The embedded store (route settings versions).
    pub store: Arc<rein_store::Store>,
    /// Tool state: outbox, idempotency keys, holds, read cache (SQLite, or Postgres when
    /// `store.postgres_url_env` is set). Opened once; a reload keeps it.
    pub tool_store: Arc<dyn rein_store::tools::ToolStore>,
    /// The client behind tools' http rungs (no redirects, rustls).
    tool_http: reqwest::Client,
    upstreams: Upstreams,
    config_path: Option<PathBuf>,
    /// Replaces the config file when there is none (the embedded default).
    default_config: Option<String>,
    /// Where secrets named by the config are read from (the process environment in the binary).
    env: EnvSource,
    draining: AtomicBool,
    /// The sequence number of the last kill-switch flip applied here; held while syncing, so
    /// flips apply once each, in the store's order.
    kill_seen: tokio::sync::Mutex<i64>,
    reloads: AtomicU64,
    /// Evidence from tool calls, by run id, for the checks of later model calls in the run.
    pub runs: crate::runs::RunEvidence,
    /// Wakes the outbox replay worker (an approval or an operator's replay made an item due).
    pub replay_kick: tokio::sync::Notify,
    /// What was fixed at start and a reload cannot change (the socket, the stores, TLS on/off).
    fixed: Fixed,
    /// TLS on the listener: the resolver a reload gives a renewed certificate to.
    tls: Option<(Arc<tls::CertResolver>, tokio_rustls::TlsAcceptor)>,
    /// Client connections open now, over every worker.
    edge: edge::OpenConnections,
    overrides: Overrides,
}

/// Settings taken once at start. A reload whose config differs in one of them is refused by
/// key: it would otherwise be reported as applied while the old value stays in force.
#[derive(Debug, Clone, PartialEq)]
struct Fixed {
    listen: std::net::SocketAddr,
    workers: usize,
    sqlite_path: String,
    postgres_url: Option<Secret>,
    tls: bool,
}

impl Fixed {
    fn of(config: &Config) -> Self {
        Self {
            listen: config.server.listen,
            workers: config.server.workers,
            sqlite_path: config.store.sqlite_path.clone(),
            postgres_url: config.store.postgres_url.clone(),
            tls: config.server.tls.is_some(),
        }
    }

    /// The keys of `config` that differ from what is in force, each as a problem.
    fn changed_in(&self, config: &Config) -> Vec<ConfigProblem> {
        let new = Self::of(config);
        let mut changed = Vec::new();
        let mut check = |key: &str, same: bool| {
            if !same {
                changed.push(ConfigProblem {
                    key: key.to_string(),
                    message: "changed: restart to apply (a reload cannot change it)".into(),
                });
            }
        };
        check("server.listen", new.listen == self.listen);
        check("server.workers", new.workers == self.workers);
        check("server.tls", new.tls == self.tls);
        check("store.sqlite_path", new.sqlite_path == self.sqlite_path);
        check("store.postgres_url_env", new.postgres_url == self.postgres_url);
        changed
    }
}

/// What the command line sets over the config file, kept across reloads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    /// `rein serve --listen` / `--port`: the address served instead of `server.listen`.
    pub listen: Option<std::net::SocketAddr>,
}

impl Overrides {
    fn apply(&self, config: &mut Config) {
        if let Some(listen) = self.listen {
            config.server.listen = listen;
        }
    }
}

/// A source of environment variables.
pub type EnvSource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("version", &self.runtime().version)
            .field("routes", &self.engine.route_names())
            .field("config_path", &self.config_path)
            .finish_non_exhaustive()
    }
}

/// Why the gateway could not start or reload.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Build(#[from] BuildError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
}

impl Gateway {
    /// Build a gateway from a config file, or from `default_config` text when `path` is `None`.
    pub async fn new(
        path: Option<PathBuf>,
        default_config: Option<String>,
    ) -> Result<Arc<Self>, StartError> {
        let env: EnvSource = Arc::new(process_env);
        let text = read_config(path.as_ref(), default_config.as_deref()).await?;
        let config = Config::from_toml(&text, &*env)?;
        Self::from_config_with_overrides(config, path, default_config, env, Overrides::default())
            .await
    }

    /// Build a gateway from an already validated config.
    pub async fn from_config(
        config: Config,
        config_path: Option<PathBuf>,
        default_config: Option<String>,
        env: EnvSource,
    ) -> Result<Arc<Self>, StartError> {
        Self::from_config_with_overrides(
            config,
            config_path,
            default_config,
            env,
            Overrides::default(),
        )
        .await
    }

    /// [`Gateway::from_config`] with command-line settings over the file's (`rein serve
    /// --listen`), kept across reloads.
    pub async fn from_config_with_overrides(
        mut config: Config,
        config_path: Option<PathBuf>,
        default_config: Option<String>,
        env: EnvSource,
        overrides: Overrides,
    ) -> Result<Arc<Self>, StartError> {
        overrides.apply(&mut config);
        // The file was checked against its own `server.listen`; check the address served.
        let unsafe_auth = config.server.auth_problems(config.server.listen);
        if !unsafe_auth.is_empty() {
            return Err(ConfigError { problems: unsafe_auth }.into());
        }
        let tls = match &config.server.tls {
            Some(files) => {
                let resolver = tls::CertResolver::new(files.key.clone());
                let acceptor = tls::acceptor(resolver.clone())
                    .map_err(|error| BuildError::Client(format!("TLS: {error}")))?;
                Some((resolver, acceptor))
            }
            None => None,
        };
        let fixed = Fixed::of(&config);
        let metrics = Arc::new(Metrics::new());
        let upstreams = Upstreams::new(&config)?;
        let engine = Engine::builder()
            .retry_budget(config.retry_budget)
            .jitter(Arc::new(rein_core::SeededJitter::new(rand::rng().random())))
            .observer(Arc::new(MetricsObserver(metrics.clone())))
            .build();
        let store = Arc::new(
            rein_store::Store::open_path(&config.store.sqlite_path).map_err(BuildError::Store)?,
        );
        crate::runtime::record_config_settings(&config, &store).map_err(BuildError::Store)?;
        let routes = upstreams.routes(&config, Some(&engine), &store).await?;
        engine.replace_routes(routes);
        let tool_store = match &config.store.postgres_url {
            Some(url) => rein_store::tools::open_tool_store(url.expose(), None).await,
            None => {
                rein_store::tools::open_tool_store(&config.store.sqlite_path, Some(store.clone()))
                    .await
            }
        }
        .map_err(BuildError::Store)?;
        // The kill switch comes back as the operators left it (on every replica sharing the store).
        let flips = tool_store.kill_flips_after(0).await.map_err(BuildError::Store)?;
        let kill_seen = flips.last().map_or(0, |(number, _)| *number);
        engine.kill_switch().restore(flips.into_iter().map(|(_, flip)| flip));
        let tool_http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .map_err(|error| BuildError::Client(error.to_string()))?;
        let tools = build_tools(&config, &tool_store, &tool_http, &env, &metrics)?;
        Ok(Arc::new(Self {
            runtime: ArcSwap::from_pointee(Runtime { config, version: 1, tools }),
            engine,
            metrics,
            store,
            tool_store,
            tool_http,
            upstreams,
            config_path,
            default_config,
            env,
            draining: AtomicBool::new(false),
            kill_seen: tokio::sync::Mutex::new(kill_seen),
            reloads: AtomicU64::new(0),
            runs: crate::runs::RunEvidence::default(),
            replay_kick: tokio::sync::Notify::new(),
            fixed,
            overrides,
            tls,
            edge: edge::OpenConnections::default(),
        }))
    }

    /// The TLS acceptor for new connections, when the listener speaks TLS.
    fn tls_acceptor(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.tls.as_ref().map(|(_, acceptor)| acceptor.clone())
    }

    /// Apply the kill-switch flips recorded since the last sync, by any replica sharing the
    /// store, in the order the store numbered them. Returns how many were applied.
    pub async fn sync_kill_switch(&self) -> Result<usize, rein_store::StoreError> {
        let mut seen = self.kill_seen.lock().await;
        let flips = self.tool_store.kill_flips_after(*seen).await?;
        let applied = flips.len();
        for (number, flip) in flips {
            self.engine.kill_switch().apply(flip);
            *seen = number;
        }
        Ok(applied)
    }

    /// Sync the kill switch every `server.kill_sync_ms` until `stop`.
    async fn sync_kill_switch_until(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let every = self.runtime().config.server.kill_sync;
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
            if let Err(failure) = self.sync_kill_switch().await {
                tracing::warn!("cannot read kill switch flips from the store: {failure}");
            }
        }
    }

    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.load_full()
    }

    pub fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    /// Re-read the config and swap it in. An invalid config is refused and the old one kept.
    pub async fn reload(&self) -> Result<u64, StartError> {
        let text = read_config(self.config_path.as_ref(), self.default_config.as_deref()).await?;
        let config = Config::from_toml(&text, &*self.env)?;
        self.apply(config).await
    }

    /// Swap in a validated config, refusing it whole (by key) when it changes a setting fixed at
    /// start or would leave the served socket less protected than the rules require. A renewed
    /// TLS certificate is read and takes effect for new connections.
    pub async fn apply(&self, mut config: Config) -> Result<u64, StartError> {
        self.overrides.apply(&mut config);
        let mut problems = self.fixed.changed_in(&config);
        problems.extend(config.server.auth_problems(self.fixed.listen));
        // Validation read the files: a renewed certificate is already in `config`.
        let renewed = config.server.tls.as_ref().map(|files| files.key.clone());
        if !problems.is_empty() {
            return Err(ConfigError { problems }.into());
        }
        if let (Some(key), Some((resolver, _))) = (renewed, &self.tls) {
            resolver.replace(key);
        }
        crate::runtime::record_config_settings(&config, &self.store).map_err(BuildError::Store)?;
        let routes = self.upstreams.routes(&config, Some(&self.engine), &self.store).await?;
        let tools =
            build_tools(&config, &self.tool_store, &self.tool_http, &self.env, &self.metrics)?;
        let version = self.runtime().version + 1;
        self.engine.replace_routes(routes);
        self.runtime.store(Arc::new(Runtime { config, version, tools }));
        self.reloads.fetch_add(1, Ordering::Relaxed);
        tracing::info!(version, "config reloaded");
        Ok(version)
    }

    /// The outbox replay worker: every `outbox.poll_ms` (or at once when kicked), claim due
    /// queued writes under a lease and send each with its original idempotency key, until
    /// `stop`. Replicas sharing a Postgres store each run one; leases keep them apart. Once an
    /// hour it also runs the retention pass (`outbox.keys_retain_ms`, `outbox.cache_retain_ms`).
    async fn replay_outbox(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let owner = format!("{}-{}", std::process::id(), new_id(""));
        let mut next_prune = tokio::time::Instant::now();
        loop {
            let tools = self.runtime().tools.clone();
            // Once an hour: forget finished keys and cache entries past their retention.
            if tokio::time::Instant::now() >= next_prune {
                next_prune += PRUNE_EVERY;
                match tools.prune().await {
                    Ok(pruned) => tracing::debug!(?pruned, "retention pass"),
                    Err(error) => tracing::warn!("retention pass failed: {error}"),
                }
            }
            let batch = i64::from(self.runtime().config.tools.outbox.batch.max(1));
            let report = tools.replay_due(&owner, batch).await;
            if report.claimed > 0 {
                tracing::info!(
                    claimed = report.claimed,
                    done = report.done,
                    retried = report.retried,
                    failed = report.failed,
                    "outbox replay pass"
                );
            }
            // A full batch may have more behind it: go again at once.
            if report.claimed >= batch as usize && report.store_errors == 0 {
                continue;
            }
            let poll = Duration::from_millis(self.runtime().config.tools.outbox.poll_ms.max(1));
            tokio::select! {
                _ = tokio::time::sleep(poll) => {}
                _ = self.replay_kick.notified() => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }

    /// Rebuild the routes from the current config and the store's active versions (after a
    /// settings change or a revert through the admin API).
    pub async fn refresh_routes(&self) -> Result<(), StartError> {
        let runtime = self.runtime();
        let routes =
            self.upstreams.routes(&runtime.config, Some(&self.engine), &self.store).await?;
        self.engine.replace_routes(routes);
        Ok(())
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
            let delay = gateway.runtime().config.server.drain_delay;
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

        tokio::spawn(self.clone().replay_outbox(stop_rx.clone()));
        tokio::spawn(self.clone().sync_kill_switch_until(stop_rx.clone()));
        let workers = self.runtime().config.server.worker_threads();
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
        tokio::select! {
            result = &mut all => return result,
            _ = stopping.wait_for(|stop| *stop) => {}
        }
        let drain = self.runtime().config.server.drain_timeout;
        match tokio::time::timeout(drain, all).await {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!(
                    drain_ms = drain.as_millis() as u64,
                    "drain timeout: closing the remaining connections"
                );
                Ok(())
            }
        }
    }
}

/// How often the replay worker runs the tool store's retention pass.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The tool dispatcher for `config`, reporting to `metrics`.
fn build_tools(
    config: &Config,
    store: &Arc<dyn rein_store::tools::ToolStore>,
    http: &reqwest::Client,
    env: &EnvSource,
    metrics: &Arc<Metrics>,
) -> Result<Arc<rein_tools::Dispatcher>, BuildError> {
    let dispatcher =
        rein_tools::Dispatcher::with_env(&config.tools, store.clone(), http.clone(), &**env)
            .map_err(|error| BuildError::Tools(error.to_string()))?
            .with_observer(Arc::new(crate::metrics::ToolMetricsObserver(metrics.clone())));
    metrics.set_tool_primaries(dispatcher.primaries());
    Ok(Arc::new(dispatcher))
}

async fn read_config(path: Option<&PathBuf>, default: Option<&str>) -> Result<String, StartError> {
    match (path, default) {
        (Some(path), _) => tokio::fs::read_to_string(path)
            .await
            .map_err(|source| StartError::Read { path: path.display().to_string(), source }),
        (None, Some(text)) => Ok(text.to_string()),
        (None, None) => Err(StartError::Read {
            path: "(none)".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no config given"),
        }),
    }
}

/// Bind the configured address.
pub async fn bind(gateway: &Gateway) -> Result<TcpListener, StartError> {
    let addr = gateway.runtime().config.server.listen;
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr: addr.to_string(), source })
}

/// A fresh random id with a prefix (`req_`, `chatcmpl-`, `msg_`).
pub fn new_id(prefix: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let value: u128 = rand::rng().random();
    let mut id = String::with_capacity(prefix.len() + 32);
    id.push_str(prefix);
    for nibble in (0..32).rev() {
        id.push(char::from(HEX[((value >> (nibble * 4)) & 0xf) as usize]));
    }
    id
}

/// The whole HTTP surface.
pub fn router(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::openai_chat))
        .route("/v1/messages", post(chat::anthropic_messages))
        .route("/v1/tools/{tool}", post(tools::call))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/", get(dashboard))
        .nest("/admin", admin::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(gateway)
}

/// The caller's API, told by the header only Anthropic's SDKs send.
fn api_of(headers: &HeaderMap) -> Api {
    if headers.contains_key("anthropic-version") { Api::Anthropic } else { Api::OpenAi }
}

async fn models(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let api = api_of(&headers);
    let request_id = new_id("req_");
    if !gateway.runtime().client_allowed(&headers) {
        return ApiError::new(
            api,
            ErrorKind::Authentication,
            "Incorrect API key provided.",
            &request_id,
        )
        .into_response();
    }
    let created = rein_core::clock::unix_ms() / 1000;
    let routes = gateway.engine.route_names();
    let body = match api {
        Api::OpenAi => crate::wire::openai::models_body(&routes, created),
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
    let api = api_of(&headers);
    let request_id = new_id("req_");
    if !gateway.runtime().client_allowed(&headers) {
        return ApiError::new(
            api,
            ErrorKind::Authentication,
            "Incorrect API key provided.",
            &request_id,
        )
        .into_response();
    }
    if !gateway.engine.route_names().contains(&id) {
        let message = format!("no route named `{id}`");
        return ApiError::new(api, ErrorKind::NotFound, &message, &request_id).into_response();
    }
    let created = rein_core::clock::unix_ms() / 1000;
    let body = match api {
        Api::OpenAi => {
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
    } else if gateway.engine.route_names().is_empty() {
        (StatusCode::SERVICE_UNAVAILABLE, "no routes\n").into_response()
    } else {
        "ready\n".into_response()
    }
}

/// Off loopback, `/metrics` and the dashboard (route names, tiers, kill-switch reasons) are for
/// operators: they need the admin key unless `server.metrics_public = true`.
fn operator_view_refused(gateway: &Gateway, headers: &HeaderMap) -> Option<Response> {
    let runtime = gateway.runtime();
    if gateway.fixed.listen.ip().is_loopback()
        || runtime.config.server.metrics_public
        || runtime.admin_allowed(headers)
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
    let tools = gateway.runtime().tools.clone();
    match tools.outbox_stats().await {
        Ok(stats) => gateway.metrics.set_outbox(&stats, tools.now_unix_ms()),
        Err(error) => tracing::warn!("metrics: cannot read the outbox's numbers: {error}"),
    }
    let body = gateway.metrics.render(&gateway.engine);
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body)
        .into_response()
}

async fn dashboard(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if let Some(refused) = operator_view_refused(&gateway, &headers) {
        return refused;
    }
    let runtime = gateway.runtime();
    let mut rows = String::new();
    for tier in gateway.engine.tier_states() {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:?}</td></tr>",
            escape(&tier.route),
            escape(&tier.tier),
            escape(&tier.provider),
            escape(&tier.model),
            tier.state
        ));
    }
    let mut kills = String::new();
    for flip in gateway.engine.kill_switch().audit().iter().rev().take(20) {
        kills.push_str(&format!(
            "<li>{} {:?} engaged={} — {}</li>",
            flip.at_unix_ms,
            flip.scope,
            flip.engaged,
            escape(&flip.reason)
        ));
    }
    Html(format!(
        "<!doctype html><meta charset=utf-8><title>rein</title>\
         <style>body{{font:14px system-ui;margin:2em}}td,th{{padding:4px 12px;text-align:left}}</style>\
         <h1>rein</h1><p>config version {} · routes: {}</p>\
         <h2>Tiers</h2><table><tr><th>route</th><th>tier</th><th>provider</th><th>model</th><th>breaker</th></tr>{rows}</table>\
         <h2>Kill switch</h2><ul>{kills}</ul><p><a href=/metrics>metrics</a></p>",
        runtime.version,
        escape(&gateway.engine.route_names().join(", ")),
    ))
    .into_response()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
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
