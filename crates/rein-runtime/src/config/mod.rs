//! The gateway's config: TOML parsed into raw structs ([`raw`]), then validated into typed
//! settings with errors that name the key and the fix. Secrets are read from environment
//! variables through an injected lookup (so tests need no process environment), held in
//! [`Secret`], and never printed.

mod cli;
pub mod credentials;
pub mod escalation;
pub mod judge;
mod output;
pub mod probe;
pub mod raw;
pub mod snippet;
mod tls;
pub mod traces;
mod vertex;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rein_core::{
    ClockPolicy, CooldownPolicy, DegradedReply, ReleaseMode, RetryBudgetPolicy, RetryPolicy,
    TierParams, TimeoutMoves, WireFormat,
};
use serde::Serialize;

pub use cli::{Listen, client_key_env, with_listen};
pub use output::{DEFAULT_MAX_TOKENS_CAP, DEFAULT_WEBHOOK_TIMEOUT_MS, OutputConfig, WebhookConfig};
pub use raw::ProviderKind;
use raw::{RawConfig, RawProvider, RawRoute};
pub use rein_core::Secret;
use rein_core::problems::Problems;
pub use rein_core::problems::{ConfigError, ConfigProblem};

/// Looks up an environment variable.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, for the binary.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub retry_budget: RetryBudgetPolicy,
    pub upstream: UpstreamConfig,
    pub providers: BTreeMap<String, ProviderConfig>,
    pub routes: BTreeMap<String, RouteConfig>,
    /// `[bulkheads.*]`, `[tools.*]` and `[outbox]` as written.
    pub tools: rein_tools::ToolsConfig,
    /// `[runs]`: agent runs' stop conditions.
    pub runs: RunsConfig,
    /// `[handoffs]`: where escalated conversations go.
    pub handoffs: escalation::HandoffsConfig,
    /// `[prices]`: dollars per million tokens, per model.
    pub prices: BTreeMap<String, rein_core::run::ModelPrice>,
    /// `[traces]`: recorded calls, the trace store, OTLP export.
    pub traces: traces::TracesConfig,
    /// `[probe]`: the golden-prompt probe.
    pub probe: probe::ProbeConfig,
    /// `[judge]`: the online judge's sampling of live answers.
    pub judge: judge::JudgeConfig,
    /// The same sections validated and compiled by `rein_tools`, once: what the dispatcher runs.
    #[serde(skip)]
    pub tools_plan: Arc<rein_tools::ToolsPlan>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub client_keys: Vec<Secret>,
    pub admin_key: Option<Secret>,
    pub max_body_bytes: usize,
    #[serde(rename = "drain_timeout_ms", with = "rein_core::clock::millis")]
    pub drain_timeout: Duration,
    #[serde(rename = "drain_delay_ms", with = "rein_core::clock::millis")]
    pub drain_delay: Duration,
    /// Worker threads (`server.workers`); 0 = one per CPU core.
    pub workers: usize,
    /// How often this replica applies kill-switch flips recorded by others.
    #[serde(rename = "kill_sync_ms", with = "rein_core::clock::millis")]
    pub kill_sync: Duration,
    /// The client connections' clocks and cap (`server.header_read_timeout_ms`, ...).
    pub edge: EdgeLimits,
    /// `/metrics` and the dashboard answer without the admin key off loopback.
    pub metrics_public: bool,
    /// TLS on the listener (`server.tls`).
    pub tls: Option<TlsFiles>,
}

/// What bounds a client connection: the clocks on its reads and how many may be open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EdgeLimits {
    #[serde(rename = "header_read_timeout_ms", with = "rein_core::clock::millis")]
    pub header_read_timeout: Duration,
    #[serde(rename = "body_read_timeout_ms", with = "rein_core::clock::millis")]
    pub body_read_timeout: Duration,
    #[serde(rename = "idle_timeout_ms", with = "rein_core::clock::millis")]
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

/// The listener's certificate chain and key, as PEM files, and the pair read from them when the
/// config was validated.
#[derive(Debug, Clone, Serialize)]
pub struct TlsFiles {
    pub cert_path: String,
    pub key_path: String,
    #[serde(skip)]
    pub key: std::sync::Arc<rustls::sign::CertifiedKey>,
}

impl ServerConfig {
    /// What makes this server unsafe to run on `listen`: client keys are required off
    /// loopback, and the admin key must differ from every client key (else any caller could
    /// flip the kill switch). Checked at start, at every reload and by `rein check`, against the
    /// address actually served (a `--listen` override included).
    pub fn auth_problems(&self, listen: SocketAddr) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if !listen.ip().is_loopback() && self.client_keys.is_empty() {
            problems.push(ConfigProblem {
                key: "server.client_keys_env".into(),
                message: format!(
                    "rein refuses to listen on the non-loopback address {listen} without client keys: set `server.client_keys_env` to the environment variables holding them, or listen on 127.0.0.1"
                ),
            });
        }
        if let Some(admin) = &self.admin_key
            && self.client_keys.iter().any(|client| client.expose() == admin.expose())
        {
            problems.push(ConfigProblem {
                key: "server.admin_key_env".into(),
                message: "the admin key equals a client key: give the admin API a key of its own"
                    .into(),
            });
        }
        problems
    }

    /// The number of worker threads to run: `workers`, or one per CPU core.
    pub fn worker_threads(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// The pooled HTTP client shared by every provider.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamConfig {
    /// The connect clock.
    #[serde(rename = "connect_ms", with = "rein_core::clock::millis")]
    pub connect: Duration,
    #[serde(rename = "pool_idle_ms", with = "rein_core::clock::millis")]
    pub pool_idle: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreConfig {
    pub sqlite_path: String,
    /// Tool state in Postgres (from `store.postgres_url_env`); `None`: in the SQLite file.
    pub postgres_url: Option<Secret>,
}

/// One provider, validated: the kind the file names and the adapter's own config, built here
/// once (its key read from the environment, its defaults filled in).
#[derive(Debug, Clone, Serialize)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    /// What the adapter is built from. For `kind = "sim"` its base URL is the in-process
    /// simulator's, filled in when the simulator starts.
    pub adapter: rein_providers::ProviderConfig,
    /// For `sim`: the scenario file it plays.
    pub scenario: Option<String>,
    /// For `replay`: the cassette file it serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassette: Option<String>,
}

impl ProviderConfig {
    /// The provider as OpenTelemetry's GenAI conventions name it (`gen_ai.provider.name`); the
    /// simulator by the format it speaks.
    pub fn genai_name(&self) -> &'static str {
        match (self.kind, &self.adapter) {
            (ProviderKind::Anthropic, _) => "anthropic",
            (ProviderKind::Bedrock, _) | (_, rein_providers::ProviderConfig::Bedrock(_)) => {
                "aws.bedrock"
            }
            (ProviderKind::AzureOpenai, _) => "azure.ai.openai",
            (ProviderKind::Openai | ProviderKind::OpenaiCompatible, _) => "openai",
            (ProviderKind::Gemini, _) => "gcp.gemini",
            (ProviderKind::Vertex, _) | (_, rein_providers::ProviderConfig::Vertex(_)) => {
                "gcp.vertex_ai"
            }
            (
                ProviderKind::Sim | ProviderKind::Replay,
                rein_providers::ProviderConfig::Anthropic(_),
            ) => "anthropic",
            (
                ProviderKind::Sim | ProviderKind::Replay,
                rein_providers::ProviderConfig::OpenAi(_),
            ) => "openai",
            (
                ProviderKind::Sim | ProviderKind::Replay,
                rein_providers::ProviderConfig::Gemini(_),
            ) => "gcp.gemini",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RouteConfig {
    pub clocks: ClockPolicy,
    pub retry: RetryPolicy,
    /// `[routes.<name>.on_timeout]`: which timeouts are retried on the tier, which go on.
    pub on_timeout: TimeoutMoves,
    pub release: ReleaseMode,
    /// Passthrough: a broken stream is continued by a later tier that takes a prefill.
    pub continuation: bool,
    /// While a streamed answer is held (checked mode, or passthrough before its first token),
    /// the response head and an SSE comment go out after this long, and a comment after every
    /// such quiet gap, so a client's read timeout never fires while rein retries. Zero: off.
    #[serde(rename = "stream_keepalive_ms", with = "rein_core::clock::millis")]
    pub stream_keepalive: Duration,
    /// (index of the tier, share).
    pub failover: Option<(usize, f64)>,
    /// `[routes.<name>.degraded]`; `None`: a call no tier answers fails, saying why.
    pub degraded: Option<DegradedReply>,
    /// `[routes.<name>.stopped_reply]`: what a call in a stopped run gets.
    pub stopped_reply: Option<DegradedReply>,
    /// The output contract (`[routes.<name>.output]`); `None` uses any whole answer as it is.
    pub output: Option<OutputConfig>,
    /// Hand-off rules, the coverage check, the hand-off reply, run limits, acting degraded
    /// rules.
    pub escalation: escalation::RouteEscalation,
    /// The label keys this route's metrics are sliced by (at most [`MAX_ROUTE_LABELS`]).
    pub labels: Vec<String>,
    /// Traces of this route's calls carry the messages and the answer
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`); off by default.
    pub trace_content: bool,
    /// `drillable = true`: `rein drill` (failover, kill switch, hand-off) may run against it.
    pub drillable: bool,
    pub tiers: Vec<TierConfig>,
}

/// The most label keys a route's metrics are sliced by.
pub const MAX_ROUTE_LABELS: usize = 8;

/// `[runs]`, validated.
#[derive(Debug, Clone, Serialize)]
pub struct RunsConfig {
    pub limits: rein_core::run::RunLimits,
    #[serde(rename = "idle_ms", with = "rein_core::clock::millis")]
    pub idle: Duration,
    pub stopped_detail: String,
    /// How long a conversation's spend and questions are kept.
    #[serde(rename = "conversation_idle_ms", with = "rein_core::clock::millis")]
    pub conversation_idle: Duration,
    /// Per tool: its own limits over `limits`.
    pub tools: BTreeMap<String, escalation::ToolLimits>,
}

impl RunsConfig {
    /// The limits a call of `tool` is held to.
    pub fn for_tool(&self, tool: &str) -> rein_core::run::RunLimits {
        let mut limits = self.limits;
        if let Some(own) = self.tools.get(tool) {
            limits.max_same_call = own.max_same_call.unwrap_or(limits.max_same_call);
            limits.max_same_error = own.max_same_error.unwrap_or(limits.max_same_error);
        }
        limits
    }

    /// The limits a model call on `route` is held to.
    pub fn for_route(&self, route: Option<&RouteConfig>) -> rein_core::run::RunLimits {
        let mut limits = self.limits;
        if let Some(own) = route.map(|route| &route.escalation) {
            limits.max_model_calls = own.max_model_calls.unwrap_or(limits.max_model_calls);
            limits.deadline = own.deadline.unwrap_or(limits.deadline);
            limits.max_spend_micro_usd = own.max_spend_micro_usd.or(limits.max_spend_micro_usd);
        }
        limits
    }
}

/// The default `stream_keepalive_ms`: well inside the read timeouts clients and proxies use
/// (30–60 s), and longer than most answers take, so most errors still arrive as a status.
pub const DEFAULT_STREAM_KEEPALIVE_MS: u64 = 10_000;

#[derive(Debug, Clone, Serialize)]
pub struct TierConfig {
    pub name: String,
    pub provider: String,
    pub model: String,
    pub context_window: Option<u32>,
    pub params: TierParams,
    pub attempts: Option<u32>,
    pub cooldown: CooldownPolicy,
    /// `None`: by the provider's wire format.
    pub prefill: Option<bool>,
}

impl Config {
    /// Parse and validate a TOML config.
    pub fn from_toml(text: &str, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
        let deserializer = toml::Deserializer::parse(text)
            .map_err(|error| ConfigError::single("(file)", error.to_string()))?;
        let raw: RawConfig = serde_path_to_error::deserialize(deserializer).map_err(|error| {
            let key = error.path().to_string();
            let key = if key == "." || key.is_empty() { "(file)".to_string() } else { key };
            ConfigError::single(key, error.into_inner().message().to_string())
        })?;
        validate(raw, env)
    }
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

/// Turn raw settings into typed ones, collecting every problem.
pub fn validate(raw: RawConfig, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
    let mut problems = Problems::new();

    let listen = match raw.server.listen.parse::<SocketAddr>() {
        Ok(addr) => Some(addr),
        Err(_) => {
            problems.add(
                "server.listen",
                format!("`{}` is not an address like 127.0.0.1:8787", raw.server.listen),
            );
            None
        }
    };
    let mut client_keys = Vec::new();
    for (i, name) in raw.server.client_keys_env.iter().enumerate() {
        match env(name).filter(|v| !v.is_empty()) {
            Some(value) => client_keys.push(Secret::new(value)),
            None => problems.add(
                format!("server.client_keys_env[{i}]"),
                format!("environment variable `{name}` is not set"),
            ),
        }
    }
    let postgres_url = match &raw.store.postgres_url_env {
        Some(name) => match env(name).filter(|v| !v.is_empty()) {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Some(Secret::new(url))
            }
            Some(_) => {
                problems.add(
                    "store.postgres_url_env",
                    format!("environment variable `{name}` must hold a postgres:// URL"),
                );
                None
            }
            None => {
                problems.add(
                    "store.postgres_url_env",
                    format!("environment variable `{name}` is not set"),
                );
                None
            }
        },
        None => None,
    };
    let tools = rein_tools::ToolsConfig {
        bulkheads: raw.bulkheads.clone(),
        tools: raw.tools.clone(),
        outbox: raw.outbox,
        mcp: raw.mcp.clone(),
    };
    let tools_plan = tools.compile(env);
    if let Err(error) = &tools_plan {
        for problem in &error.problems {
            problems.add(problem.key.clone(), problem.message.clone());
        }
    }
    let admin_key = match &raw.server.admin_key_env {
        Some(name) => match env(name).filter(|v| !v.is_empty()) {
            Some(value) => Some(Secret::new(value)),
            None => {
                problems.add(
                    "server.admin_key_env",
                    format!("environment variable `{name}` is not set"),
                );
                None
            }
        },
        None => None,
    };
    for (key, value) in [
        ("server.header_read_timeout_ms", raw.server.header_read_timeout_ms),
        ("server.body_read_timeout_ms", raw.server.body_read_timeout_ms),
        ("server.idle_timeout_ms", raw.server.idle_timeout_ms),
    ] {
        if value == 0 {
            problems.add(key, "must be at least 1 (milliseconds)");
        }
    }
    if raw.server.max_connections == 0 {
        problems.add("server.max_connections", "must be at least 1");
    }
    let tls = match &raw.server.tls {
        Some(tls) => match tls::load(&tls.cert_path, &tls.key_path) {
            Ok(key) => Some(TlsFiles {
                cert_path: tls.cert_path.clone(),
                key_path: tls.key_path.clone(),
                key,
            }),
            Err(problem) => {
                problems.add(problem.key, problem.message);
                None
            }
        },
        None => None,
    };
    if raw.upstream.connect_ms == 0 {
        problems.add("upstream.connect_ms", "must be greater than 0");
    }
    if raw.server.max_body_bytes == 0 {
        problems.add("server.max_body_bytes", "must be greater than 0");
    }
    if raw.server.workers > 1024 {
        problems.add("server.workers", "must be at most 1024 (0 = one per CPU core)");
    }

    let budget = &raw.retry_budget;
    if !(0.0..=10.0).contains(&budget.ratio) {
        problems
            .add("retry_budget.ratio", format!("({}) must be between 0.0 and 10.0", budget.ratio));
    }
    if budget.min_retries_per_s < 0.0 {
        problems.add("retry_budget.min_retries_per_s", "must not be negative");
    }
    if budget.window_s == 0 {
        problems.add("retry_budget.window_s", "must be at least 1");
    }

    let mut providers = BTreeMap::new();
    for (name, provider) in &raw.providers {
        if let Some(config) = validate_provider(name, provider, env, &mut problems) {
            providers.insert(name.clone(), config);
        }
    }

    if raw.server.kill_sync_ms == 0 {
        problems.add("server.kill_sync_ms", "must be at least 1 (milliseconds between syncs)");
    }
    // A gateway for agents' tools alone (MCP servers, tools) needs no model route.
    if raw.routes.is_empty() && raw.tools.is_empty() && raw.mcp.servers.is_empty() {
        problems.add("routes", "no routes: add at least one `[routes.<name>]` with a tier");
    }
    for (name, route) in &raw.routes {
        if let Some(judge) = route.output.as_ref().and_then(|o| o.judge.as_ref()) {
            let key = format!("routes.{name}.output.judge.route");
            if judge.route == *name {
                problems.add(key, "a route cannot judge itself: name another route");
            } else if !raw.routes.contains_key(&judge.route) {
                problems.add(key, format!("`{}` is not a route of this config", judge.route));
            }
        }
    }
    let mut routes = BTreeMap::new();
    let route_names: Vec<&str> = raw.routes.keys().map(String::as_str).collect();
    for (name, route) in &raw.routes {
        if let Some(mut config) = validate_route(name, route, &raw.providers, &mut problems) {
            let written = escalation::RawRouteEscalation {
                handoff_rules: route.handoff_rules.as_ref(),
                coverage: route.coverage.as_ref(),
                handoff_reply: route.handoff_reply.as_ref().map(reply_of),
                runs: route.runs.as_ref(),
                degraded_rules: &route.degraded_rules,
            };
            config.escalation = escalation::validate_route_escalation(
                name,
                written,
                &route_names,
                &tools,
                &mut problems,
            );
            routes.insert(name.clone(), config);
        }
    }
    let handoffs = escalation::validate_handoffs(&raw.handoffs, &tools, &mut problems);
    let prices = escalation::validate_prices(&raw.prices, &mut problems);
    let traces = traces::validate_traces(&raw.traces, env, &mut problems);
    let known_routes: std::collections::BTreeSet<String> = raw.routes.keys().cloned().collect();
    let probe = probe::validate_probe(&raw.probe, &known_routes, &mut problems);
    let route_labels = raw
        .routes
        .iter()
        .map(|(name, route)| (name.clone(), route.labels.iter().cloned().collect()))
        .collect();
    let judge = judge::validate_judge(&raw.judge, &route_labels, &mut problems);
    for tool in raw.runs.tools.keys() {
        if !tools.tools.contains_key(tool) {
            problems.add(format!("runs.tools.{tool}"), "is not a configured tool");
        }
    }
    let max_spend_micro_usd = match raw.runs.max_spend_usd {
        Some(dollars) => {
            let micro = escalation::micro_usd(dollars);
            if micro.is_none() {
                problems.add("runs.max_spend_usd", "must be an amount of 0 or more");
            }
            micro
        }
        None => None,
    };

    let Some(listen) = listen else {
        problems.add("server.listen", "invalid");
        return Err(problems.into_error());
    };
    let server = ServerConfig {
        listen,
        client_keys,
        admin_key,
        max_body_bytes: raw.server.max_body_bytes,
        drain_timeout: ms(raw.server.drain_timeout_ms),
        drain_delay: ms(raw.server.drain_delay_ms),
        workers: raw.server.workers,
        kill_sync: ms(raw.server.kill_sync_ms),
        edge: EdgeLimits {
            header_read_timeout: ms(raw.server.header_read_timeout_ms),
            body_read_timeout: ms(raw.server.body_read_timeout_ms),
            idle_timeout: ms(raw.server.idle_timeout_ms),
            max_connections: raw.server.max_connections,
        },
        metrics_public: raw.server.metrics_public,
        tls,
    };
    // A key variable that is not set is a problem of its own already: the auth rules judge the
    // keys once all are set.
    if server.client_keys.len() == raw.server.client_keys_env.len() {
        problems.extend(server.auth_problems(listen));
    }
    let runs = &raw.runs;
    for (key, value) in [
        ("runs.max_model_calls", runs.max_model_calls),
        ("runs.max_same_call", runs.max_same_call),
        ("runs.max_same_error", runs.max_same_error),
    ] {
        if value == 0 {
            problems.add(key, "must be at least 1");
        }
    }
    if runs.deadline_ms == 0 {
        problems.add("runs.deadline_ms", "must be greater than 0");
    }
    if runs.idle_ms == 0 {
        problems.add("runs.idle_ms", "must be greater than 0");
    }
    problems.into_result()?;
    let tools_plan = Arc::new(tools_plan?);
    Ok(Config {
        server,
        store: StoreConfig { sqlite_path: raw.store.sqlite_path, postgres_url },
        retry_budget: RetryBudgetPolicy {
            ratio: budget.ratio,
            min_retries_per_s: budget.min_retries_per_s,
            window: Duration::from_secs(budget.window_s.max(1)),
        },
        upstream: UpstreamConfig {
            connect: ms(raw.upstream.connect_ms),
            pool_idle: ms(raw.upstream.pool_idle_ms),
        },
        providers,
        routes,
        tools,
        runs: RunsConfig {
            limits: rein_core::run::RunLimits {
                max_model_calls: raw.runs.max_model_calls,
                max_same_call: raw.runs.max_same_call,
                max_same_error: raw.runs.max_same_error,
                deadline: ms(raw.runs.deadline_ms),
                max_spend_micro_usd,
            },
            idle: ms(raw.runs.idle_ms),
            stopped_detail: raw.runs.stopped_detail.clone(),
            conversation_idle: ms(raw.runs.conversation_idle_ms),
            tools: raw.runs.tools.clone(),
        },
        handoffs,
        prices,
        traces,
        probe,
        judge,
        tools_plan,
    })
}

/// A decided reply as written, validated.
fn reply_of(d: &raw::RawDegraded) -> DegradedReply {
    DegradedReply {
        template: d.template.clone(),
        fallback_text: d.fallback_text.clone().unwrap_or_else(|| d.template.clone()),
        json: d.json.clone(),
        deliver: d.deliver.unwrap_or_default(),
    }
}

fn validate_provider(
    name: &str,
    raw: &RawProvider,
    env: EnvLookup<'_>,
    problems: &mut Problems,
) -> Option<ProviderConfig> {
    let key = |field: &str| format!("providers.{name}.{field}");
    let mut ok = true;
    let needs_key = matches!(
        raw.kind,
        ProviderKind::Openai
            | ProviderKind::Anthropic
            | ProviderKind::AzureOpenai
            | ProviderKind::Gemini
    );
    let api_key = match &raw.api_key_env {
        Some(var) => match env(var).filter(|v| !v.is_empty()) {
            Some(value) => Some(Secret::new(value)),
            None => {
                problems
                    .add(key("api_key_env"), format!("environment variable `{var}` is not set"));
                ok = false;
                None
            }
        },
        None if needs_key => {
            problems.add(
                key("api_key_env"),
                "is required for this kind: name the environment variable that holds the API key",
            );
            ok = false;
            None
        }
        None => None,
    };
    match raw.kind {
        ProviderKind::OpenaiCompatible if raw.base_url.is_none() => {
            problems.add(
                key("base_url"),
                "is required for kind `openai_compatible` (e.g. http://localhost:8000/v1)",
            );
            ok = false;
        }
        ProviderKind::AzureOpenai => {
            // Azure's v1 endpoint, which the Responses API goes through, takes no version.
            let responses = raw.api.as_deref() == Some("responses");
            for (field, value) in [
                ("base_url", &raw.base_url),
                ("deployment", &raw.deployment),
                ("api_version", &raw.api_version),
            ] {
                if value.is_none() && !(responses && field == "api_version") {
                    problems.add(key(field), "is required for kind `azure_openai`");
                    ok = false;
                }
            }
        }
        _ => {}
    }
    let in_process = matches!(raw.kind, ProviderKind::Sim | ProviderKind::Replay);
    let sim_format = match (in_process, raw.format.as_deref()) {
        (true, None | Some("openai")) => WireFormat::OpenAi,
        (true, Some("anthropic")) => WireFormat::Anthropic,
        (true, Some("bedrock")) => WireFormat::Bedrock,
        // The simulator speaks Gemini; recorded cassettes do not (yet).
        (true, Some("gemini")) if raw.kind == ProviderKind::Sim => WireFormat::Gemini,
        // Vertex AI's paths, in the publisher's format (Anthropic's or Gemini's), decided below.
        (true, Some("vertex")) if raw.kind == ProviderKind::Sim => WireFormat::OpenAi,
        (true, Some(other)) => {
            problems.add(
                key("format"),
                format!(
                    "`{other}` is not a wire format here: use `openai`, `anthropic` or `bedrock` (or `gemini` or `vertex` with kind `sim`)"
                ),
            );
            ok = false;
            WireFormat::OpenAi
        }
        (false, Some(_)) => {
            problems.add(key("format"), "only applies to kinds `sim` and `replay`");
            ok = false;
            WireFormat::OpenAi
        }
        (false, None) => WireFormat::OpenAi,
    };
    let sim_bedrock = in_process && sim_format == WireFormat::Bedrock;
    if sim_bedrock && raw.kind == ProviderKind::Replay {
        problems.add(
            key("format"),
            "`bedrock` is served by kind `sim` only; replay has no Bedrock cassettes yet",
        );
        ok = false;
    }
    let sim_anthropic = in_process && sim_format == WireFormat::Anthropic;
    let sim_vertex = raw.kind == ProviderKind::Sim && raw.format.as_deref() == Some("vertex");
    let is_vertex = raw.kind == ProviderKind::Vertex || sim_vertex;
    // `api`: which of a provider's APIs rein calls (Bedrock: Converse or InvokeModel; the
    // OpenAI kinds: Chat Completions or the Responses API).
    let speaks_bedrock = raw.kind == ProviderKind::Bedrock || sim_bedrock;
    let speaks_openai = matches!(
        raw.kind,
        ProviderKind::Openai | ProviderKind::OpenaiCompatible | ProviderKind::AzureOpenai
    ) || (in_process && sim_format == WireFormat::OpenAi && !sim_vertex);
    let mut bedrock_api = rein_providers::BedrockApi::Converse;
    let mut openai_api = rein_providers::OpenAiApi::ChatCompletions;
    let api_problem = match (raw.api.as_deref(), speaks_bedrock, speaks_openai) {
        (None, ..) | (Some("converse"), true, _) | (Some("chat_completions"), _, true) => None,
        (Some("invoke"), true, _) => {
            bedrock_api = rein_providers::BedrockApi::Invoke;
            None
        }
        (Some("responses"), _, true) if raw.kind != ProviderKind::Replay => {
            openai_api = rein_providers::OpenAiApi::Responses;
            None
        }
        (Some("responses"), _, true) => Some(
            "`responses` is served by kind `sim` only; replay has no Responses API cassettes"
                .to_owned(),
        ),
        (Some("converse" | "invoke"), false, _) => {
            Some("only applies to kind `bedrock` (or `sim` with format `bedrock`)".to_owned())
        }
        (Some("chat_completions" | "responses"), _, false) => Some(
            "only applies to kinds `openai`, `openai_compatible`, `azure_openai`, and `sim` with format `openai`".to_owned(),
        ),
        (Some(other), true, _) => {
            Some(format!("`{other}` is not a Bedrock API here: use `converse` or `invoke`"))
        }
        (Some(other), _, true) => Some(format!(
            "`{other}` is not an API of this kind: use `chat_completions` (the default) or `responses`"
        )),
        (Some(other), false, false) => Some(format!(
            "`{other}`: `api` applies only to Bedrock (`converse`, `invoke`) and the OpenAI kinds (`chat_completions`, `responses`)"
        )),
    };
    if let Some(reason) = api_problem {
        problems.add(key("api"), reason);
        ok = false;
    }
    if raw.scenario.is_some() && raw.kind != ProviderKind::Sim {
        problems.add(key("scenario"), "only applies to kind `sim`");
        ok = false;
    }
    match (&raw.cassette, raw.kind) {
        (None, ProviderKind::Replay) => {
            problems.add(
                key("cassette"),
                "is required for kind `replay`: the cassette file `rein record` wrote",
            );
            ok = false;
        }
        (Some(_), kind) if kind != ProviderKind::Replay => {
            problems.add(key("cassette"), "only applies to kind `replay`");
            ok = false;
        }
        (Some(path), _) => {
            if let Err(message) = check_cassette(path) {
                problems.add(key("cassette"), message);
                ok = false;
            }
        }
        (None, _) => {}
    }
    let speaks_anthropic = raw.kind == ProviderKind::Anthropic
        || sim_anthropic
        || (is_vertex && raw.publisher.as_deref() == Some("anthropic"));
    if raw.json_prefill.is_some() && !speaks_anthropic {
        problems.add(
            key("json_prefill"),
            "only applies to the Anthropic format (kind `anthropic`, `vertex` with publisher `anthropic`, or `sim` or `replay` with format `anthropic`)",
        );
        ok = false;
    }
    let max_response_bytes =
        raw.max_response_bytes.unwrap_or(rein_providers::DEFAULT_MAX_RESPONSE_BYTES);
    let max_event_bytes = raw.max_event_bytes.unwrap_or(rein_providers::DEFAULT_MAX_EVENT_BYTES);
    if max_response_bytes == 0 {
        problems.add(
            key("max_response_bytes"),
            format!(
                "must be at least 1 (the default is {})",
                rein_providers::DEFAULT_MAX_RESPONSE_BYTES
            ),
        );
        ok = false;
    }
    if max_event_bytes == 0 {
        problems.add(
            key("max_event_bytes"),
            format!(
                "must be at least 1 (the default is {})",
                rein_providers::DEFAULT_MAX_EVENT_BYTES
            ),
        );
        ok = false;
    } else if max_event_bytes > max_response_bytes && max_response_bytes > 0 {
        problems.add(
            key("max_event_bytes"),
            format!(
                "({max_event_bytes}) is larger than `{}` ({max_response_bytes}): one event cannot exceed the whole response",
                key("max_response_bytes")
            ),
        );
        ok = false;
    }
    let bedrock = match raw.kind {
        ProviderKind::Bedrock => aws_settings(raw, env, &key, problems),
        _ => {
            if raw.region.is_some() && !is_vertex {
                problems.add(key("region"), "only applies to kinds `bedrock` and `vertex`");
                ok = false;
            }
            for (field, set) in [
                ("access_key_id_env", raw.access_key_id_env.is_some()),
                ("secret_access_key_env", raw.secret_access_key_env.is_some()),
                ("session_token_env", raw.session_token_env.is_some()),
            ] {
                if set {
                    problems.add(key(field), "only applies to kind `bedrock`");
                    ok = false;
                }
            }
            None
        }
    };
    if raw.kind == ProviderKind::Bedrock && (bedrock.is_none() || raw.api_key_env.is_some()) {
        if raw.api_key_env.is_some() {
            problems.add(
                key("api_key_env"),
                "does not apply to kind `bedrock`, which signs with AWS credentials (`access_key_id_env`, `secret_access_key_env`)",
            );
        }
        ok = false;
    }
    for (field, set) in [
        ("project", raw.project.is_some()),
        ("publisher", raw.publisher.is_some()),
        ("token_refresh_margin_ms", raw.token_refresh_margin_ms.is_some()),
    ] {
        if set && !is_vertex {
            problems
                .add(key(field), "only applies to kind `vertex` (or `sim` with format `vertex`)");
            ok = false;
        }
    }
    if raw.credentials_file.is_some() && raw.kind != ProviderKind::Vertex {
        problems.add(key("credentials_file"), "only applies to kind `vertex`");
        ok = false;
    }
    if is_vertex && !raw.headers.is_empty() {
        problems.add(key("headers"), "does not apply to kind `vertex`: it sends no static headers");
        ok = false;
    }
    if raw.kind == ProviderKind::Vertex && raw.api_key_env.is_some() {
        problems.add(
            key("api_key_env"),
            "does not apply to kind `vertex`, which sends OAuth access tokens (`credentials_file`, or the metadata server)",
        );
        ok = false;
    }
    let vertex = match (raw.kind, sim_vertex) {
        (ProviderKind::Vertex, _) => vertex::settings(name, raw, env, &key, problems),
        (_, true) => vertex::sim_settings(name, raw, &key, problems),
        _ => None,
    };
    if is_vertex && vertex.is_none() {
        ok = false;
    }
    if !ok {
        return None;
    }
    let limits = rein_providers::ResponseLimits { max_response_bytes, max_event_bytes };
    let http_version = raw.http_version.unwrap_or_default();
    let headers: BTreeMap<String, Secret> =
        raw.headers.iter().map(|(k, v)| (k.clone(), Secret::new(v.clone()))).collect();
    let openai = |base_url: Option<String>| {
        let mut adapter = rein_providers::OpenAiConfig::new(name, String::new());
        adapter.base_url = base_url;
        adapter.api_key = api_key.clone();
        adapter.headers = headers.clone();
        adapter.streaming = raw.stream.unwrap_or(true);
        adapter.limits = limits;
        adapter.http_version = http_version;
        adapter.api = openai_api;
        adapter
    };
    let anthropic = |base_url: Option<String>| {
        let mut adapter = rein_providers::AnthropicConfig::new(name, String::new());
        adapter.base_url = base_url;
        adapter.api_key = api_key.clone();
        adapter.headers = headers.clone();
        adapter.streaming = raw.stream.unwrap_or(true);
        adapter.limits = limits;
        adapter.http_version = http_version;
        adapter.json_prefill = raw.json_prefill;
        if let Some(max_tokens) = raw.default_max_tokens {
            adapter.default_max_tokens = max_tokens;
        }
        adapter
    };
    let gemini = |base_url: Option<String>| {
        let mut adapter = rein_providers::GeminiConfig::new(name, String::new());
        adapter.base_url = base_url;
        adapter.api_key = api_key.clone();
        adapter.headers = headers.clone();
        adapter.streaming = raw.stream.unwrap_or(true);
        adapter.limits = limits;
        adapter.http_version = http_version;
        adapter
    };
    use rein_providers::ProviderConfig as Adapter;
    let base_url = raw.base_url.clone();
    let adapter = match raw.kind {
        ProviderKind::Openai | ProviderKind::OpenaiCompatible => Adapter::OpenAi(openai(base_url)),
        ProviderKind::AzureOpenai => {
            let mut adapter = openai(base_url);
            adapter.auth = Some(rein_providers::OpenAiAuth::ApiKey);
            adapter.azure = Some(rein_providers::AzureConfig {
                deployment: raw.deployment.clone().unwrap_or_default(),
                api_version: raw.api_version.clone().unwrap_or_default(),
            });
            Adapter::OpenAi(adapter)
        }
        ProviderKind::Anthropic => Adapter::Anthropic(anthropic(base_url)),
        ProviderKind::Gemini => Adapter::Gemini(gemini(base_url)),
        ProviderKind::Sim | ProviderKind::Replay if sim_anthropic => {
            Adapter::Anthropic(anthropic(None))
        }
        ProviderKind::Bedrock | ProviderKind::Sim | ProviderKind::Replay
            if bedrock.is_some() || sim_bedrock =>
        {
            // The simulator checks that a request is signed, not with which key.
            let aws = bedrock.unwrap_or_else(|| AwsSettings {
                region: "us-east-1".to_owned(),
                access_key_id: Secret::new("AKIDSIMULATOR"),
                secret_access_key: Secret::new("sim-secret-access-key"),
                session_token: None,
            });
            let mut adapter = rein_providers::BedrockConfig::new(name, aws.region);
            adapter.base_url = if in_process { None } else { base_url };
            adapter.access_key_id = Some(aws.access_key_id);
            adapter.secret_access_key = Some(aws.secret_access_key);
            adapter.session_token = aws.session_token;
            adapter.streaming = raw.stream.unwrap_or(true);
            adapter.api = bedrock_api;
            adapter.limits = limits;
            adapter.http_version = http_version;
            if let Some(max_tokens) = raw.default_max_tokens {
                adapter.default_max_tokens = max_tokens;
            }
            Adapter::Bedrock(adapter)
        }
        ProviderKind::Sim if sim_format == WireFormat::Gemini => Adapter::Gemini(gemini(None)),
        ProviderKind::Sim | ProviderKind::Replay | ProviderKind::Bedrock | ProviderKind::Vertex => {
            Adapter::OpenAi(openai(None))
        }
    };
    // Kind `vertex`, and the simulator's Vertex tier, build from their own settings.
    let adapter = match vertex {
        Some(mut vertex) => {
            vertex.streaming = raw.stream.unwrap_or(true);
            vertex.limits = limits;
            vertex.http_version = http_version;
            vertex.json_prefill = raw.json_prefill;
            if let Some(max_tokens) = raw.default_max_tokens {
                vertex.default_max_tokens = max_tokens;
            }
            if let Some(margin) = raw.token_refresh_margin_ms {
                vertex.token_refresh_margin_ms = margin;
            }
            Adapter::Vertex(vertex)
        }
        None => adapter,
    };
    // The adapter's own checks (a URL that parses, header names and values it can send), so a
    // config that validates also builds.
    if let Err(error) = adapter.check() {
        problems.add(key(&error.key()), error.reason());
        return None;
    }
    Some(ProviderConfig {
        kind: raw.kind,
        adapter,
        scenario: raw.scenario.clone(),
        cassette: raw.cassette.clone(),
    })
}

/// A Bedrock provider's region and credentials, read from the environment.
struct AwsSettings {
    region: String,
    access_key_id: Secret,
    secret_access_key: Secret,
    session_token: Option<Secret>,
}

/// The region (`region`, else `AWS_REGION` / `AWS_DEFAULT_REGION`) and the credentials, from
/// the variables the provider names (default `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`), else from the profile (`profile`, else `AWS_PROFILE`, else
/// `default`) of the shared credentials file. Each missing one is a problem naming its key and
/// variable, never a value.
fn aws_settings(
    raw: &RawProvider,
    env: EnvLookup<'_>,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) -> Option<AwsSettings> {
    let places = AwsPlaces::of(raw, env);
    let region = places.region.map(|(region, _)| region);
    if region.is_none() {
        problems.add(
            key("region"),
            "is required for kind `bedrock` (or set `AWS_REGION`): the region is part of the endpoint and of every signature",
        );
    }
    let read = |var: &str| env(var).filter(|value| !value.is_empty()).map(Secret::new);
    let mut access_key_id = read(&places.access_key_id_var);
    let mut secret_access_key = read(&places.secret_access_key_var);
    let mut session_token = read(&places.session_token_var);
    let profile = places.profile;
    // Without the variables, the shared credentials file's profile, as the AWS SDKs do.
    if access_key_id.is_none()
        && secret_access_key.is_none()
        && let Some(found) =
            places.credentials_file.and_then(|path| profile_credentials(&path, &profile))
    {
        access_key_id = found.access_key_id;
        secret_access_key = found.secret_access_key;
        session_token = found.session_token;
    }
    for (field, var, value) in [
        ("access_key_id_env", &places.access_key_id_var, &access_key_id),
        ("secret_access_key_env", &places.secret_access_key_var, &secret_access_key),
    ] {
        if value.is_none() {
            problems.add(
                key(field),
                format!(
                    "environment variable `{var}` is not set (nor is the profile `{profile}` of the shared credentials file): Bedrock signs every request with it"
                ),
            );
        }
    }
    Some(AwsSettings {
        region: region?,
        access_key_id: access_key_id?,
        secret_access_key: secret_access_key?,
        session_token,
    })
}

/// Where a Bedrock provider's region and keys are read from, in the order the AWS SDKs use: the
/// loader ([`aws_settings`]) reads them, `rein check` ([`credentials`]) names them.
pub(super) struct AwsPlaces {
    /// The region and what named it: `None` for `region` in the config, else the variable.
    pub(super) region: Option<(String, Option<&'static str>)>,
    pub(super) access_key_id_var: String,
    pub(super) secret_access_key_var: String,
    pub(super) session_token_var: String,
    /// `profile`, else `AWS_PROFILE`, else `default`.
    pub(super) profile: String,
    /// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials` when `HOME` is known.
    pub(super) credentials_file: Option<String>,
    /// Whether `AWS_SHARED_CREDENTIALS_FILE` named the file.
    pub(super) credentials_file_from_env: bool,
}

impl AwsPlaces {
    pub(super) fn of(raw: &RawProvider, env: EnvLookup<'_>) -> Self {
        let region = match &raw.region {
            Some(region) => Some((region.clone(), None)),
            None => env("AWS_REGION")
                .map(|region| (region, Some("AWS_REGION")))
                .or_else(|| env("AWS_DEFAULT_REGION").map(|r| (r, Some("AWS_DEFAULT_REGION")))),
        }
        .filter(|(region, _)| !region.trim().is_empty());
        let var = |configured: &Option<String>, default: &str| {
            configured.clone().unwrap_or_else(|| default.to_owned())
        };
        let named_file = env("AWS_SHARED_CREDENTIALS_FILE");
        AwsPlaces {
            region,
            access_key_id_var: var(&raw.access_key_id_env, "AWS_ACCESS_KEY_ID"),
            secret_access_key_var: var(&raw.secret_access_key_env, "AWS_SECRET_ACCESS_KEY"),
            session_token_var: var(&raw.session_token_env, "AWS_SESSION_TOKEN"),
            profile: raw
                .profile
                .clone()
                .or_else(|| env("AWS_PROFILE"))
                .unwrap_or_else(|| "default".to_owned()),
            credentials_file_from_env: named_file.is_some(),
            credentials_file: named_file
                .or_else(|| env("HOME").map(|home| format!("{home}/.aws/credentials"))),
        }
    }
}

/// Credentials of one profile of an AWS shared credentials file (INI: `[profile]`,
/// `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`).
#[derive(Default)]
struct ProfileCredentials {
    access_key_id: Option<Secret>,
    secret_access_key: Option<Secret>,
    session_token: Option<Secret>,
}

/// Reads `profile` from the credentials file at `path` (its first 64 KiB); `None` when the
/// file cannot be read or has no such profile.
fn profile_credentials(path: &str, profile: &str) -> Option<ProfileCredentials> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(64 * 1024).read_to_string(&mut text).ok()?;
    parse_profile(&text, profile)
}

fn parse_profile(text: &str, profile: &str) -> Option<ProfileCredentials> {
    let mut found: Option<ProfileCredentials> = None;
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = section.trim() == profile;
            if inside {
                found.get_or_insert_with(ProfileCredentials::default);
            }
            continue;
        }
        let (true, Some(credentials), Some((name, value))) =
            (inside, found.as_mut(), line.split_once('='))
        else {
            continue;
        };
        let value = Some(value.trim()).filter(|v| !v.is_empty()).map(Secret::new);
        match name.trim() {
            "aws_access_key_id" => credentials.access_key_id = value,
            "aws_secret_access_key" => credentials.secret_access_key = value,
            "aws_session_token" => credentials.session_token = value,
            _ => {}
        }
    }
    found
}

/// A replay provider's cassette: readable and valid (checked again when the provider starts).
#[cfg(feature = "sim")]
fn check_cassette(path: &str) -> Result<(), String> {
    rein_sim::cassette::Cassette::from_file(std::path::Path::new(path))
        .map(|_| ())
        .map_err(|error| error.to_string())
}

/// Without the simulator the cassette is not read here; building the provider says why.
#[cfg(not(feature = "sim"))]
fn check_cassette(_path: &str) -> Result<(), String> {
    Ok(())
}

fn validate_route(
    name: &str,
    raw: &RawRoute,
    providers: &BTreeMap<String, RawProvider>,
    problems: &mut Problems,
) -> Option<RouteConfig> {
    let key = |field: &str| format!("routes.{name}.{field}");
    let before = problems.len();
    let defaults = ClockPolicy::default();
    let attempt = raw.attempt_ms.map_or(defaults.attempt, ms);
    let clocks = ClockPolicy {
        first_token: raw.first_token_ms.map_or(defaults.first_token, ms),
        stream_idle: raw.stream_idle_ms.map_or(defaults.stream_idle, ms),
        attempt,
        deadline: raw.deadline_ms.map_or(defaults.deadline, ms),
        min_attempt: raw.min_attempt_ms.map_or(attempt, ms),
    };
    for (field, value) in [
        ("first_token_ms", clocks.first_token),
        ("stream_idle_ms", clocks.stream_idle),
        ("attempt_ms", clocks.attempt),
        ("deadline_ms", clocks.deadline),
    ] {
        if value.is_zero() {
            problems.add(key(field), "must be greater than 0");
        }
    }
    let millis = |d: Duration| d.as_millis();
    if clocks.deadline < clocks.min_attempt {
        problems.add(
            key("deadline_ms"),
            format!(
                "({}) is less than `min_attempt_ms` ({}): no attempt could ever start; raise the deadline or lower `attempt_ms`/`min_attempt_ms`",
                millis(clocks.deadline),
                millis(clocks.min_attempt)
            ),
        );
    }
    if clocks.first_token > clocks.attempt {
        problems.add(
            key("first_token_ms"),
            format!(
                "({}) is more than `attempt_ms` ({}): the attempt cap would always fire first",
                millis(clocks.first_token),
                millis(clocks.attempt)
            ),
        );
    }
    if clocks.stream_idle > clocks.attempt {
        problems.add(
            key("stream_idle_ms"),
            format!(
                "({}) is more than `attempt_ms` ({})",
                millis(clocks.stream_idle),
                millis(clocks.attempt)
            ),
        );
    }

    let defaults = RetryPolicy::default();
    let retry = RetryPolicy {
        attempts: raw.attempts.unwrap_or(defaults.attempts),
        base: raw.backoff_base_ms.map_or(defaults.base, ms),
        cap: raw.backoff_cap_ms.map_or(defaults.cap, ms),
        floor: raw.backoff_floor_ms.map_or(defaults.floor, ms),
    };
    if retry.attempts == 0 {
        problems.add(key("attempts"), "must be at least 1 (the first attempt counts)");
    }
    if retry.floor > retry.cap {
        problems.add(
            key("backoff_floor_ms"),
            format!(
                "({}) is more than `backoff_cap_ms` ({})",
                millis(retry.floor),
                millis(retry.cap)
            ),
        );
    }
    if retry.cap >= clocks.deadline {
        problems.add(
            key("backoff_cap_ms"),
            format!("({}) is not less than `deadline_ms` ({}): a wait that long could never be followed by an attempt", millis(retry.cap), millis(clocks.deadline)),
        );
    }

    let stream_keepalive = ms(raw.stream_keepalive_ms.unwrap_or(DEFAULT_STREAM_KEEPALIVE_MS));
    let release = match raw.release.as_deref() {
        None | Some("checked") => ReleaseMode::Checked,
        Some("passthrough") => ReleaseMode::Passthrough,
        Some(other) => {
            problems.add(
                key("release"),
                format!("`{other}` is not a release mode: use `checked` or `passthrough`"),
            );
            ReleaseMode::Checked
        }
    };

    if raw.continuation == Some(true) && release != ReleaseMode::Passthrough {
        problems.add(
            key("continuation"),
            "only applies to `release = \"passthrough\"` (a checked stream is retried unseen)",
        );
    }
    if raw.tiers.is_empty() {
        problems.add(key("tiers"), "a route needs at least one tier (`[[routes.<name>.tiers]]`)");
    }
    let mut tiers = Vec::new();
    for (i, tier) in raw.tiers.iter().enumerate() {
        let tier_key = |field: &str| format!("routes.{name}.tiers[{i}].{field}");
        if raw.tiers[..i].iter().any(|t| t.name == tier.name) {
            problems.add(
                tier_key("name"),
                format!("`{}` is used by an earlier tier of this route", tier.name),
            );
        }
        if !providers.contains_key(&tier.provider) {
            let known: Vec<&str> = providers.keys().map(String::as_str).collect();
            problems.add(
                tier_key("provider"),
                format!(
                    "`{}` is not a configured provider (known: {})",
                    tier.provider,
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ),
            );
        }
        if tier.model.trim().is_empty() {
            problems.add(tier_key("model"), "must not be empty");
        }
        if let Some(t) = tier.temperature
            && !(0.0..=2.0).contains(&t)
        {
            problems.add(tier_key("temperature"), format!("({t}) must be between 0.0 and 2.0"));
        }
        if tier.attempts == Some(0) {
            problems.add(tier_key("attempts"), "must be at least 1");
        }
        if tier.allowed_fails == Some(0) {
            problems.add(tier_key("allowed_fails"), "must be at least 1");
        }
        let cooldown_defaults = CooldownPolicy::default();
        tiers.push(TierConfig {
            name: tier.name.clone(),
            provider: tier.provider.clone(),
            model: tier.model.clone(),
            context_window: tier.context_window,
            params: TierParams {
                system_prompt: tier.system_prompt.clone(),
                max_tokens: tier.max_tokens,
                temperature: tier.temperature,
                top_p: tier.top_p,
            },
            attempts: tier.attempts,
            prefill: tier.prefill,
            cooldown: CooldownPolicy {
                allowed_fails: tier.allowed_fails.unwrap_or(cooldown_defaults.allowed_fails),
                cooldown: tier.cooldown_s.map_or(cooldown_defaults.cooldown, Duration::from_secs),
            },
        });
    }

    let failover = match &raw.failover {
        None => None,
        Some(failover) => {
            if !(0.0..=1.0).contains(&failover.share) {
                problems.add(
                    key("failover.share"),
                    format!("({}) must be between 0.0 and 1.0", failover.share),
                );
            }
            match raw.tiers.iter().position(|t| t.name == failover.tier) {
                Some(0) => {
                    problems.add(
                        key("failover.tier"),
                        "names the first tier; the failover share goes to a later one",
                    );
                    None
                }
                Some(index) => Some((index, failover.share)),
                None => {
                    problems.add(
                        key("failover.tier"),
                        format!("`{}` is not a tier of this route", failover.tier),
                    );
                    None
                }
            }
        }
    };

    let degraded = raw.degraded.as_ref().map(reply_of);
    let stopped_reply = raw.stopped_reply.as_ref().map(reply_of);
    if let Some(json) = raw.degraded.as_ref().and_then(|d| d.json.as_ref())
        && !json.is_object()
    {
        problems
            .add(key("degraded.json"), "must be a table: the JSON object a structured caller gets");
    }

    if raw.labels.len() > MAX_ROUTE_LABELS {
        problems.add(
            key("labels"),
            format!(
                "at most {MAX_ROUTE_LABELS} label keys: each one multiplies the route's series"
            ),
        );
    }
    for label in &raw.labels {
        if !rein_core::context::is_label_key(label) {
            problems.add(
                key("labels"),
                format!(
                    "`{label}` is not a label key (a-z, 0-9, `_`, `.`, `-`, starting with a letter)"
                ),
            );
        }
    }
    let output = raw.output.as_ref().and_then(|output| {
        output::validate_output(name, output, &raw.tiers, clocks.deadline, problems)
    });

    (problems.len() == before).then_some(RouteConfig {
        clocks,
        retry,
        on_timeout: raw.on_timeout.unwrap_or_default(),
        continuation: raw.continuation.unwrap_or(false),
        stopped_reply,
        stream_keepalive,
        release,
        failover,
        degraded,
        output,
        escalation: escalation::RouteEscalation::default(),
        labels: raw.labels.clone(),
        trace_content: raw.trace_content,
        drillable: raw.drillable,
        tiers,
    })
}

#[cfg(test)]
mod aws_profile_tests {
    use super::parse_profile;

    #[test]
    fn a_profile_is_read_from_its_own_section_only() {
        let text = "# shared credentials\n[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = default-secret\n\n[work]\naws_access_key_id=AKIDWORK\naws_secret_access_key = work-secret\naws_session_token = work-token\n";
        let work = parse_profile(text, "work").expect("work");
        assert_eq!(work.access_key_id.as_ref().map(|s| s.expose()), Some("AKIDWORK"));
        assert_eq!(work.secret_access_key.as_ref().map(|s| s.expose()), Some("work-secret"));
        assert_eq!(work.session_token.as_ref().map(|s| s.expose()), Some("work-token"));
        let default = parse_profile(text, "default").expect("default");
        assert_eq!(default.access_key_id.as_ref().map(|s| s.expose()), Some("AKIDDEFAULT"));
        assert!(default.session_token.is_none());
        assert!(parse_profile(text, "absent").is_none());
    }
}
