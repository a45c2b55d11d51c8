//! Turning a validated [`Config`] into live parts: provider adapters over one pooled HTTP
//! client, in-process simulators for `kind = "sim"` providers and replay servers for
//! `kind = "replay"` ones (the real adapter talks to either over loopback HTTP, so the code
//! path is the production one), and the engine's routes with their output contracts (compiled
//! schema, built-in rules, then webhook rules over a second pooled client, and the fail-open
//! selectors).
//!
//! A reload builds everything anew except what must survive it: the pooled clients, simulators
//! and replay servers whose settings did not change (a replay keeps what it has played), and
//! the cooldown state of every tier that still points at the same provider and model (an outage
//! does not end because someone edited a prompt).

use std::collections::BTreeMap;
use std::sync::Arc;
#[cfg(feature = "sim")]
use std::sync::Mutex;

use rein_core::validate::{OutputContract, RuleSet};
use rein_core::{Engine, FailoverShare, Provider, Route, Tier};
use rein_providers::{
    HttpClient, HttpClientConfig, ProviderConfig as AdapterConfig, build_provider,
};
#[cfg(feature = "sim")]
use rein_sim::replay::{ReplayError, ReplayHandle};
#[cfg(feature = "sim")]
use rein_sim::{Scenario, SimConfig, SimHandle};
use rein_store::{RouteSettings, Store, StoreError, TierSettings};

use crate::config::{Config, OutputConfig, ProviderConfig, ProviderKind, RouteConfig};
use crate::webhook::{self, WebhookRule};

/// The author recorded for settings versions that come from the config file.
pub const CONFIG_AUTHOR: &str = "config";

/// Why a config could not be made live (after it validated).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("`providers.{provider}`: {message}")]
    Provider { provider: String, message: String },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("`routes.{route}.output`: {message}")]
    Output { route: String, message: String },
}

/// A route's prompts and model settings as the config file writes them.
pub fn settings_of(route: &RouteConfig) -> RouteSettings {
    RouteSettings {
        tiers: route
            .tiers
            .iter()
            .map(|tier| {
                (
                    tier.name.clone(),
                    TierSettings {
                        model: tier.model.clone(),
                        system_prompt: tier.params.system_prompt.clone(),
                        max_tokens: tier.params.max_tokens,
                        temperature: tier.params.temperature,
                        top_p: tier.params.top_p,
                    },
                )
            })
            .collect(),
    }
}

/// Record the config's settings of every route as a new version when they changed since the
/// config last wrote one. An operator's revert stays in force until the config itself changes.
pub fn record_config_settings(config: &Config, store: &Store) -> Result<(), StoreError> {
    for (name, route) in &config.routes {
        let settings = settings_of(route);
        let unchanged =
            store.latest_by(name, CONFIG_AUTHOR)?.is_some_and(|v| v.settings == settings);
        if !unchanged {
            store.record_settings(name, &settings, CONFIG_AUTHOR, "from the config file")?;
        }
    }
    Ok(())
}

/// The parts that live across reloads.
#[derive(Debug)]
pub struct Upstreams {
    client: HttpClient,
    /// The client every webhook rule sends through.
    webhooks: reqwest::Client,
    #[cfg(feature = "sim")]
    sims: Mutex<BTreeMap<String, (SimKey, Arc<SimHandle>)>>,
    /// The replay server of each `kind = "replay"` provider, by the cassette it serves.
    #[cfg(feature = "sim")]
    replays: Mutex<BTreeMap<String, (String, Arc<ReplayHandle>)>>,
}

/// Replay providers whose replay did not go as recorded, by provider name.
#[cfg(feature = "sim")]
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(|(name, error)| format!("`providers.{name}`: {error}")).collect::<Vec<_>>().join("\n"))]
pub struct ReplayMismatch(pub Vec<(String, ReplayError)>);

#[cfg(feature = "sim")]
#[derive(Debug, Clone, PartialEq, Eq)]
struct SimKey {
    scenario: Option<String>,
}

impl Upstreams {
    pub fn new(config: &Config) -> Result<Self, BuildError> {
        let client = HttpClient::new(&HttpClientConfig {
            connect_timeout_ms: config.upstream.connect.as_millis() as u64,
            pool_idle_timeout_ms: config.upstream.pool_idle.as_millis() as u64,
            ..HttpClientConfig::default()
        })
        .map_err(|e| BuildError::Client(e.to_string()))?;
        let webhooks = webhook::client(config.upstream.connect).map_err(BuildError::Client)?;
        Ok(Self {
            client,
            webhooks,
            #[cfg(feature = "sim")]
            sims: Mutex::new(BTreeMap::new()),
            #[cfg(feature = "sim")]
            replays: Mutex::new(BTreeMap::new()),
        })
    }

    /// The replay server of a `kind = "replay"` provider: the running one when it serves the
    /// same cassette, else a new one on a loopback port.
    #[cfg(feature = "sim")]
    async fn replay_base_url(
        &self,
        name: &str,
        provider: &ProviderConfig,
    ) -> Result<String, BuildError> {
        let fail = |message: String| BuildError::Provider { provider: name.to_string(), message };
        let path = provider.cassette.clone().unwrap_or_default();
        if let Some((existing, replay)) = lock(&self.replays).get(name)
            && *existing == path
        {
            return Ok(format!("{}/v1", replay.base_url()));
        }
        let cassette = rein_sim::cassette::Cassette::from_file(std::path::Path::new(&path))
            .map_err(|e| fail(e.to_string()))?;
        let replay = rein_sim::replay::start(cassette)
            .await
            .map_err(|e| fail(format!("cannot start the replay server: {e}")))?;
        let base = format!("{}/v1", replay.base_url());
        lock(&self.replays).insert(name.to_string(), (path, Arc::new(replay)));
        Ok(base)
    }

    /// Without the `sim` feature there is no replay server to start.
    #[cfg(not(feature = "sim"))]
    async fn replay_base_url(
        &self,
        name: &str,
        _provider: &ProviderConfig,
    ) -> Result<String, BuildError> {
        Err(BuildError::Provider {
            provider: name.to_string(),
            message: "`kind = \"replay\"` needs a build of rein with the simulator (the `sim` feature of rein-runtime)".to_string(),
        })
    }

    /// Whether every replay provider's replay went as recorded so far: no request missed its
    /// cassette, and every recorded interaction played. For a test's end.
    #[cfg(feature = "sim")]
    pub fn verify_replays(&self) -> Result<(), ReplayMismatch> {
        let failed: Vec<(String, ReplayError)> = lock(&self.replays)
            .iter()
            .filter_map(|(name, (_, replay))| replay.verify().err().map(|e| (name.clone(), e)))
            .collect();
        if failed.is_empty() { Ok(()) } else { Err(ReplayMismatch(failed)) }
    }

    /// The in-process simulator of a `kind = "sim"` provider: the running one when its
    /// settings did not change, else a new one on a loopback port.
    #[cfg(feature = "sim")]
    async fn sim_base_url(
        &self,
        name: &str,
        provider: &ProviderConfig,
    ) -> Result<String, BuildError> {
        Ok(format!("{}/v1", self.sim(name, provider).await?.base_url()))
    }

    /// Without the `sim` feature there is no simulator to start.
    #[cfg(not(feature = "sim"))]
    async fn sim_base_url(
        &self,
        name: &str,
        _provider: &ProviderConfig,
    ) -> Result<String, BuildError> {
        Err(BuildError::Provider {
            provider: name.to_string(),
            message: "`kind = \"sim\"` needs a build of rein with the simulator (the `sim` feature of rein-runtime)".to_string(),
        })
    }

    #[cfg(feature = "sim")]
    async fn sim(
        &self,
        name: &str,
        provider: &ProviderConfig,
    ) -> Result<Arc<SimHandle>, BuildError> {
        let key = SimKey { scenario: provider.scenario.clone() };
        if let Some((existing, sim)) = lock(&self.sims).get(name)
            && *existing == key
        {
            return Ok(sim.clone());
        }
        let fail = |message: String| BuildError::Provider { provider: name.to_string(), message };
        let scenario = match &provider.scenario {
            None => None,
            Some(path) => {
                let text = tokio::fs::read_to_string(path)
                    .await
                    .map_err(|e| fail(format!("cannot read scenario `{path}`: {e}")))?;
                Some(
                    Scenario::from_toml_str(&text)
                        .map_err(|e| fail(format!("scenario `{path}`: {e}")))?,
                )
            }
        };
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let sim = rein_sim::bind(addr, SimConfig { scenario, ..SimConfig::default() })
            .await
            .map_err(|e| fail(format!("cannot start the simulator: {e}")))?;
        let sim = Arc::new(sim);
        lock(&self.sims).insert(name.to_string(), (key, sim.clone()));
        Ok(sim)
    }

    /// The adapter of provider `name`: its validated config as it is, or, for `kind = "sim"`
    /// and `kind = "replay"`, pointed at the in-process simulator or replay server.
    async fn provider(
        &self,
        name: &str,
        config: &ProviderConfig,
    ) -> Result<Arc<dyn Provider>, BuildError> {
        let mut adapter = config.adapter.clone();
        let base = match config.kind {
            ProviderKind::Sim => Some(self.sim_base_url(name, config).await?),
            ProviderKind::Replay => Some(self.replay_base_url(name, config).await?),
            _ => None,
        };
        if base.is_some() {
            match &mut adapter {
                AdapterConfig::OpenAi(openai) => openai.base_url = base,
                AdapterConfig::Anthropic(anthropic) => anthropic.base_url = base,
                // Bedrock paths start at the host (`/model/{id}/converse`).
                AdapterConfig::Bedrock(bedrock) => {
                    bedrock.base_url = base.map(|b| b.trim_end_matches("/v1").to_owned());
                }
                AdapterConfig::Gemini(gemini) => gemini.base_url = base,
                // Vertex paths start at the host; tokens come from the simulator's `/token`,
                // signed with its test key.
                AdapterConfig::Vertex(vertex) => {
                    let host = base.map(|b| b.trim_end_matches("/v1").to_owned());
                    if let Some(key) = host.as_deref().and_then(sim_vertex_key) {
                        vertex.credentials =
                            rein_providers::VertexCredentials::ServiceAccount { path: None, key };
                    }
                    vertex.base_url = host;
                }
            }
        }
        build_provider(adapter, &self.client).map_err(|e| BuildError::Provider {
            provider: name.to_string(),
            message: e.to_string(),
        })
    }

    /// Build every route of `config`, keeping the cooldown state of unchanged tiers from
    /// `engine`'s current routes. Each tier runs the route's active settings version from
    /// `store` (model, prompt, parameters), or the config for tiers the version does not name.
    pub async fn routes(
        &self,
        config: &Config,
        engine: Option<&Engine>,
        store: &Store,
    ) -> Result<Vec<Route>, BuildError> {
        let mut providers: BTreeMap<&str, Arc<dyn Provider>> = BTreeMap::new();
        for (name, provider) in &config.providers {
            providers.insert(name, self.provider(name, provider).await?);
        }
        let mut routes = Vec::new();
        for (name, route) in &config.routes {
            let active = store.active_version(name)?;
            let mut tiers = Vec::new();
            for tier in &route.tiers {
                let mut tier = tier.clone();
                if let Some(settings) =
                    active.as_ref().and_then(|v| v.settings.tiers.get(&tier.name))
                {
                    tier.model = settings.model.clone();
                    tier.params.system_prompt = settings.system_prompt.clone();
                    tier.params.max_tokens = settings.max_tokens;
                    tier.params.temperature = settings.temperature;
                    tier.params.top_p = settings.top_p;
                }
                let tier = &tier;
                let Some(provider) = providers.get(tier.provider.as_str()) else {
                    return Err(BuildError::Provider {
                        provider: tier.provider.clone(),
                        message: "is not configured".into(),
                    });
                };
                let mut built = Tier::new(&tier.name, provider.clone(), &tier.model)
                    .with_cooldown(tier.cooldown)
                    .with_params(tier.params.clone());
                built.context_window = tier.context_window;
                built.attempts = tier.attempts;
                built.prefill =
                    tier.prefill.unwrap_or(provider.format() == rein_core::WireFormat::Anthropic);
                if let Some(existing) = engine.and_then(|e| e.cooldown_of(name, &tier.name))
                    && existing.provider == tier.provider
                    && existing.model == tier.model
                    && existing.cooldown.policy() == tier.cooldown
                {
                    built.cooldown = existing.cooldown;
                }
                tiers.push(built);
            }
            let mut built = Route::new(name, tiers);
            built.clocks = route.clocks;
            built.retry = route.retry;
            built.on_timeout = route.on_timeout;
            built.release = route.release;
            built.continuation = route.continuation;
            built.degraded = route.degraded.clone();
            built.stopped_reply = route.stopped_reply.clone();
            built.labels = route.labels.clone();
            built.failover = route.failover.map(|(tier, share)| FailoverShare { tier, share });
            built.settings_version = active.map(|v| v.version);
            if let Some(output) = &route.output {
                built.contract = Some(self.contract(name, output, engine)?);
                built.max_tokens_cap = output.max_tokens_cap;
            }
            routes.push(built);
        }
        Ok(routes)
    }

    /// A route's output contract: built-in rules first, then webhooks, each in config order.
    fn contract(
        &self,
        route: &str,
        output: &OutputConfig,
        engine: Option<&Engine>,
    ) -> Result<OutputContract, BuildError> {
        let mut rules = RuleSet::from_builtin(output.rules.iter().cloned());
        let mut fail_open = output.fail_open.clone();
        for config in &output.webhooks {
            let rule = WebhookRule::new(config, self.webhooks.clone()).map_err(|error| {
                BuildError::Output { route: route.to_string(), message: error.to_string() }
            })?;
            rules.push(Arc::new(rule));
        }
        if let Some((judge, fail)) = &output.judge {
            let Some(engine) = engine else {
                return Err(BuildError::Output {
                    route: route.to_string(),
                    message: "a judge needs the engine".into(),
                });
            };
            rules.push(Arc::new(rein_core::JudgeRule::new(engine, judge.clone())));
            if !fail {
                fail_open.push(rein_core::JudgeRule::advisory());
            }
        }
        Ok(OutputContract {
            json: output.json,
            schema: output.compiled_schema.clone(),
            rules,
            fail_open,
        })
    }
}

#[cfg(feature = "sim")]
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The simulator's test service-account key, its `token_uri` the simulator's at `base`.
#[cfg(feature = "sim")]
fn sim_vertex_key(base: &str) -> Option<rein_providers::ServiceAccountKey> {
    let json = rein_sim::vertex::test_service_account(&format!("{base}/token"));
    rein_providers::ServiceAccountKey::from_json(json.as_bytes()).ok()
}

/// Without the simulator there is no test key (and no simulator base URL to reach).
#[cfg(not(feature = "sim"))]
fn sim_vertex_key(_base: &str) -> Option<rein_providers::ServiceAccountKey> {
    None
}
