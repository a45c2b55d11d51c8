//! The assembled application: one [`Runtime`] holds the engine (which lives as long as the
//! process: retry budgets, breakers and the kill switch survive reloads), the stores, the
//! upstream clients and the current [`Snapshot`] of the config with its tool dispatcher, swapped
//! atomically on a reload so calls in flight finish on the config they started with.
//!
//! A reload never weakens auth and never reports a setting as applied that it cannot apply: the
//! auth rules are checked against the address actually served, and a setting fixed at start
//! (the socket, the stores, TLS on or off) is refused by key when it changes.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use rand::RngExt;
use rein_core::{Engine, Observer};
use rein_store::tools::ToolStore;
use rein_tools::{Dispatcher, NoopObserver, ToolObserver};

use crate::config::{Config, ConfigError, ConfigProblem, Secret, process_env};
use crate::escalation::Escalations;
use crate::runs::RunStops;
pub use crate::upstreams::CONFIG_AUTHOR;
use crate::upstreams::{BuildError, Upstreams, record_config_settings};

/// A source of environment variables (the process environment in the binary, a map in tests).
pub type EnvSource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The config in force, with its version number (1 at start, +1 per successful reload), and
/// the tool dispatcher built from it.
#[derive(Debug)]
pub struct Snapshot {
    pub config: Config,
    pub version: u64,
    pub tools: Arc<Dispatcher>,
}

/// Why the runtime could not start or reload.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Build(#[from] BuildError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
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

/// Settings taken once at start. A reload whose config differs in one of them is refused by
/// key: it would otherwise be reported as applied while the old value stays in force.
#[derive(Debug, Clone, PartialEq)]
struct Fixed {
    listen: std::net::SocketAddr,
    workers: usize,
    sqlite_path: String,
    postgres_url: Option<Secret>,
    tls: bool,
    judge_queue: usize,
    judge_concurrency: usize,
}

impl Fixed {
    fn of(config: &Config) -> Self {
        Self {
            listen: config.server.listen,
            workers: config.server.workers,
            sqlite_path: config.store.sqlite_path.clone(),
            postgres_url: config.store.postgres_url.clone(),
            tls: config.server.tls.is_some(),
            judge_queue: config.judge.queue,
            judge_concurrency: config.judge.concurrency,
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
        check("judge.queue", new.judge_queue == self.judge_queue);
        check("judge.concurrency", new.judge_concurrency == self.judge_concurrency);
        changed
    }
}

/// Where the config comes from, for reloads: a file, text given at start, or nothing (a
/// runtime built from a validated [`Config`] alone cannot reload).
#[derive(Debug, Clone)]
enum Source {
    File(PathBuf),
    Text(String),
    Nothing,
}

impl Source {
    async fn read(&self) -> Result<String, StartError> {
        match self {
            Source::File(path) => tokio::fs::read_to_string(path)
                .await
                .map_err(|source| StartError::Read { path: path.display().to_string(), source }),
            Source::Text(text) => Ok(text.clone()),
            Source::Nothing => Err(StartError::Read {
                path: "(none)".into(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no config given"),
            }),
        }
    }
}

/// Builds a [`Runtime`].
pub struct RuntimeBuilder {
    source: Source,
    env: EnvSource,
    overrides: Overrides,
    observer: Option<Arc<dyn Observer>>,
    tool_observer: Arc<dyn ToolObserver>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("source", &self.source)
            .field("overrides", &self.overrides)
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// Read the config from the file at `path`, at start and at every reload.
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.source = Source::File(path.into());
        self
    }

    /// Read the config from `path` when given, else run `text` (the embedded default); with
    /// neither, a reload has nothing to read.
    pub fn source(self, path: Option<PathBuf>, text: Option<String>) -> Self {
        match (path, text) {
            (Some(path), _) => self.path(path),
            (None, Some(text)) => self.text(text),
            (None, None) => self,
        }
    }

    /// Run the config `text` (the embedded default), at start and at every reload.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.source = Source::Text(text.into());
        self
    }

    /// Read secrets from `env` instead of the process environment.
    pub fn env(mut self, env: EnvSource) -> Self {
        self.env = env;
        self
    }

    /// Command-line settings over the file's (`rein serve --listen`), kept across reloads.
    pub fn overrides(mut self, overrides: Overrides) -> Self {
        self.overrides = overrides;
        self
    }

    /// Report every call to `observer` (metrics).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Report every tool call to `observer` (metrics).
    pub fn tool_observer(mut self, observer: Arc<dyn ToolObserver>) -> Self {
        self.tool_observer = observer;
        self
    }

    /// Read, validate and assemble.
    pub async fn build(self) -> Result<Runtime, StartError> {
        let text = self.source.read().await?;
        let config = Config::from_toml(&text, &*self.env)?;
        self.build_from(config).await
    }

    /// Assemble an already validated config (a reload re-reads the path or text, if any).
    pub async fn build_from(self, mut config: Config) -> Result<Runtime, StartError> {
        self.overrides.apply(&mut config);
        // The file was checked against its own `server.listen`; check the address served.
        let unsafe_auth = config.server.auth_problems(config.server.listen);
        if !unsafe_auth.is_empty() {
            return Err(ConfigError { problems: unsafe_auth }.into());
        }
        let fixed = Fixed::of(&config);
        let upstreams = Upstreams::new(&config)?;
        let acts = Arc::new(crate::degraded::DegradedRules::default());
        let mut engine = Engine::builder()
            .retry_budget(config.retry_budget)
            .jitter(Arc::new(rein_core::SeededJitter::new(rand::rng().random())))
            .degraded_acts(acts.clone());
        if let Some(observer) = self.observer {
            engine = engine.observer(observer);
        }
        let engine = engine.build();
        let store = Arc::new(
            rein_store::Store::open_path(&config.store.sqlite_path).map_err(BuildError::Store)?,
        );
        record_config_settings(&config, &store).map_err(BuildError::Store)?;
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
        // So does the route-to lever.
        let route_to = tool_store.route_to_flips_after(0).await.map_err(BuildError::Store)?;
        let route_to_seen = route_to.last().map_or(0, |(number, _)| *number);
        engine.levers().restore(route_to.into_iter().map(|(_, flip)| flip));
        let tool_http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .map_err(|error| BuildError::Client(error.to_string()))?;
        let stops_store = tool_store.clone();
        let escalations = Escalations::new(tool_store.clone());
        let parts = ToolParts { store: tool_store, http: tool_http, observer: self.tool_observer };
        let tools = parts.dispatcher(&config);
        let sink = match crate::otlp::OtlpConfig::of(&config.traces) {
            Some(otlp) => {
                let exporter = crate::otlp::OtlpExporter::new(&otlp)
                    .map_err(|error| BuildError::Client(format!("traces.otlp: {error}")))?;
                Some(Arc::new(exporter) as Arc<dyn crate::recorder::TraceSink>)
            }
            None => None,
        };
        let recorder = crate::recorder::Recorder::new(&config.traces, sink);
        let judge = crate::online_judge::OnlineJudge::new(&config.judge);
        let current = Arc::new(ArcSwap::from_pointee(Snapshot { config, version: 1, tools }));
        acts.connect(current.clone(), escalations.clone());
        Ok(Runtime {
            current,
            escalations,
            engine,
            store,
            tools: parts,
            upstreams,
            source: self.source,
            env: self.env,
            kill_seen: tokio::sync::Mutex::new(kill_seen),
            route_to_seen: tokio::sync::Mutex::new(route_to_seen),
            reloads: AtomicU64::new(0),
            stops: RunStops::new(stops_store),
            replay_kick: tokio::sync::Notify::new(),
            recorder,
            judge,
            fixed,
            overrides: self.overrides,
        })
    }
}

/// What every tool dispatcher is built on, kept across reloads.
#[derive(Debug)]
struct ToolParts {
    /// Tool state: outbox, idempotency keys, holds, read cache (SQLite, or Postgres when
    /// `store.postgres_url_env` is set). Opened once; a reload keeps it.
    store: Arc<dyn ToolStore>,
    /// The client behind tools' http rungs (no redirects, rustls).
    http: reqwest::Client,
    observer: Arc<dyn ToolObserver>,
}

impl ToolParts {
    /// The tool dispatcher for `config`.
    fn dispatcher(&self, config: &Config) -> Arc<Dispatcher> {
        let plan = config.tools_plan.clone();
        let dispatcher = Dispatcher::from_plan(plan, self.store.clone(), self.http.clone())
            .with_observer(self.observer.clone());
        self.observer.configured(&dispatcher.primaries());
        Arc::new(dispatcher)
    }
}

/// The assembled application (see the module docs).
pub struct Runtime {
    current: Arc<ArcSwap<Snapshot>>,
    pub engine: Engine,
    /// The embedded store (route settings versions).
    pub store: Arc<rein_store::Store>,
    tools: ToolParts,
    upstreams: Upstreams,
    source: Source,
    env: EnvSource,
    /// The sequence number of the last kill-switch flip applied here; held while syncing, so
    /// flips apply once each, in the store's order.
    kill_seen: tokio::sync::Mutex<i64>,
    /// The same for the route-to lever's flips.
    route_to_seen: tokio::sync::Mutex<i64>,
    reloads: AtomicU64,
    /// Every agent run's stop conditions, counted in the tool store (shared by replicas).
    pub stops: RunStops,
    /// Hand-offs to a person: kept in the tool store, delivered through the hand-off tool.
    pub escalations: Escalations,
    /// Wakes the outbox replay worker (an approval or an operator's replay made an item due).
    pub replay_kick: tokio::sync::Notify,
    /// Finished calls' records and traces, written to the store and exported off the request
    /// path (`[traces]`, fixed at start).
    pub recorder: crate::recorder::Recorder,
    /// Sampled answers judged off the request path (`[judge]`; its queue and concurrency fixed
    /// at start).
    pub judge: crate::online_judge::OnlineJudge,
    /// What was fixed at start and a reload cannot change (the socket, the stores, TLS on/off).
    fixed: Fixed,
    overrides: Overrides,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("version", &self.current().version)
            .field("routes", &self.engine.route_names())
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A builder: no config source yet, secrets from the process environment, no observers.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            source: Source::Nothing,
            env: Arc::new(process_env),
            overrides: Overrides::default(),
            observer: None,
            tool_observer: Arc::new(NoopObserver),
        }
    }

    /// The library entry point: parse, validate and assemble `text`, reading the secrets it
    /// names through `env`.
    pub async fn from_toml(
        text: &str,
        env: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Result<Runtime, StartError> {
        Self::builder().text(text).env(Arc::new(env)).build().await
    }

    /// The config in force and the dispatcher built from it.
    pub fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The address served (`server.listen`, or the command line's), fixed at start.
    pub fn listen(&self) -> std::net::SocketAddr {
        self.fixed.listen
    }

    /// How many reloads have been applied.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// The tool state store.
    pub fn tool_store(&self) -> &Arc<dyn ToolStore> {
        &self.tools.store
    }

    /// Whether the `kind = "replay"` providers' replays went as recorded: no request missed its
    /// cassette and every recorded interaction played. A test calls it at its end.
    #[cfg(feature = "sim")]
    pub fn verify_replays(&self) -> Result<(), crate::upstreams::ReplayMismatch> {
        self.upstreams.verify_replays()
    }

    /// Re-read the config and swap it in. An invalid config is refused and the old one kept.
    pub async fn reload(&self) -> Result<u64, StartError> {
        let text = self.source.read().await?;
        let config = Config::from_toml(&text, &*self.env)?;
        self.apply(config).await
    }

    /// Swap in a validated config, refusing it whole (by key) when it changes a setting fixed at
    /// start or would leave the served socket less protected than the rules require.
    pub async fn apply(&self, mut config: Config) -> Result<u64, StartError> {
        self.overrides.apply(&mut config);
        let mut problems = self.fixed.changed_in(&config);
        problems.extend(config.server.auth_problems(self.fixed.listen));
        if !problems.is_empty() {
            return Err(ConfigError { problems }.into());
        }
        record_config_settings(&config, &self.store).map_err(BuildError::Store)?;
        let routes = self.upstreams.routes(&config, Some(&self.engine), &self.store).await?;
        let tools = self.tools.dispatcher(&config);
        let version = self.current().version + 1;
        self.engine.replace_routes(routes);
        self.current.store(Arc::new(Snapshot { config, version, tools }));
        self.reloads.fetch_add(1, Ordering::Relaxed);
        tracing::info!(version, "config reloaded");
        Ok(version)
    }

    /// Rebuild the routes from the current config and the store's active versions (after a
    /// settings change or a revert through the admin API).
    pub async fn refresh_routes(&self) -> Result<(), StartError> {
        let current = self.current();
        let routes =
            self.upstreams.routes(&current.config, Some(&self.engine), &self.store).await?;
        self.engine.replace_routes(routes);
        Ok(())
    }

    /// Apply the kill-switch flips recorded since the last sync, by any replica sharing the
    /// store, in the order the store numbered them. Returns how many were applied.
    pub async fn sync_kill_switch(&self) -> Result<usize, rein_store::StoreError> {
        let mut seen = self.kill_seen.lock().await;
        let flips = self.tools.store.kill_flips_after(*seen).await?;
        let applied = flips.len();
        for (number, flip) in flips {
            self.engine.kill_switch().apply(flip);
            *seen = number;
        }
        Ok(applied)
    }

    /// Apply the route-to lever's flips recorded since the last sync, by any replica sharing
    /// the store, in the store's order. Returns how many were applied.
    pub async fn sync_route_to(&self) -> Result<usize, rein_store::StoreError> {
        let mut seen = self.route_to_seen.lock().await;
        let flips = self.tools.store.route_to_flips_after(*seen).await?;
        let applied = flips.len();
        for (number, flip) in flips {
            self.engine.levers().apply(flip);
            *seen = number;
        }
        Ok(applied)
    }

    /// Start the background workers (the outbox replay, the kill-switch and route-to sync, the
    /// online judge) on the current tokio runtime, which stop when `stop` turns true, and the
    /// recorder on a thread of its own
    /// ([`crate::recorder::Recorder::spawn_on_own_thread`]), which records until
    /// [`crate::recorder::Recorder::stop`] or until this runtime is dropped.
    pub fn spawn_workers(self: &Arc<Self>, stop: tokio::sync::watch::Receiver<bool>) {
        tokio::spawn(crate::workers::replay_outbox(self.clone(), stop.clone()));
        let current = self.current.clone();
        let kinds: crate::recorder::ProviderKinds = Arc::new(move || {
            let snapshot = current.load();
            snapshot
                .config
                .providers
                .iter()
                .map(|(name, provider)| (name.clone(), provider.genai_name().to_string()))
                .collect()
        });
        self.recorder.spawn_on_own_thread(self.tools.store.clone(), kinds);
        self.judge.spawn(self.clone(), stop.clone());
        tokio::spawn(crate::workers::sync_kill_switch(self.clone(), stop));
    }
}
