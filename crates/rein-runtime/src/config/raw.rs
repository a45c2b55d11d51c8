//! The config file as written: serde structs that mirror the TOML one to one, with
//! `deny_unknown_fields` so a typo is an error that names the key. Units are in key names.
//! Nothing here is checked beyond types; [`super::validate`] turns these into typed settings.

use std::collections::BTreeMap;

use rein_core::validate::{BuiltinRule, ProblemKindSelector};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub retry_budget: RawRetryBudget,
    #[serde(default)]
    pub upstream: RawUpstream,
    #[serde(default)]
    pub providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    pub routes: BTreeMap<String, RawRoute>,
    /// Tool calls (`POST /v1/tools/{tool}`): concurrency partitions, tools with their ladders,
    /// and the outbox's replay settings, as `rein_tools` reads them.
    #[serde(default)]
    pub bulkheads: BTreeMap<String, rein_tools::config::BulkheadConfig>,
    #[serde(default)]
    pub tools: BTreeMap<String, rein_tools::config::ToolConfig>,
    #[serde(default)]
    pub outbox: rein_tools::config::OutboxConfig,
    /// Upstream MCP servers whose tools the gateway serves at `/mcp`, each call through a ladder.
    #[serde(default)]
    pub mcp: rein_tools::config::McpConfig,
    /// Agent runs (`x-rein-run-id`): their stop conditions and how long an idle run is kept.
    #[serde(default)]
    pub runs: RawRuns,
    /// Where escalated conversations go: the hand-off tool, the trace link, canary drafts.
    #[serde(default)]
    pub handoffs: super::escalation::RawHandoffs,
    /// Dollars per million tokens, per model id, for the spend cap.
    #[serde(default)]
    pub prices: BTreeMap<String, rein_core::run::ModelPrice>,
    /// Recorded calls, the trace store and OTLP export.
    #[serde(default)]
    pub traces: super::traces::RawTraces,
    /// The golden-prompt probe.
    #[serde(default)]
    pub probe: super::probe::RawProbe,
    /// The online judge.
    #[serde(default)]
    pub judge: super::judge::RawJudge,
}

/// `[runs]`: the stop conditions of every agent run (the spec's defaults), what a tool call in a
/// stopped run tells the model, and how long an idle run is remembered.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRuns {
    pub max_model_calls: u32,
    pub max_same_call: u32,
    pub max_same_error: u32,
    pub deadline_ms: u64,
    pub idle_ms: u64,
    /// What the model is told when a tool call is refused in a stopped run.
    pub stopped_detail: String,
    /// What one conversation may spend, in dollars (each answer's usage priced by `[prices]`);
    /// absent: no cap.
    pub max_spend_usd: Option<f64>,
    /// How long a conversation's spend and questions are remembered.
    pub conversation_idle_ms: u64,
    /// Per tool: its own `max_same_call` / `max_same_error`.
    pub tools: BTreeMap<String, super::escalation::ToolLimits>,
}

impl Default for RawRuns {
    fn default() -> Self {
        let limits = rein_core::run::RunLimits::default();
        Self {
            max_model_calls: limits.max_model_calls,
            max_same_call: limits.max_same_call,
            max_same_error: limits.max_same_error,
            deadline_ms: u64::try_from(limits.deadline.as_millis()).unwrap_or(u64::MAX),
            idle_ms: 3_600_000,
            stopped_detail: "This run was stopped: do not call tools again. Tell the customer you could not finish, and that their message has been passed on.".into(),
            max_spend_usd: None,
            conversation_idle_ms: 7 * 24 * 3_600_000,
            tools: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Environment variables holding the client API keys callers must present.
    #[serde(default)]
    pub client_keys_env: Vec<String>,
    /// Environment variable holding the admin API key.
    #[serde(default)]
    pub admin_key_env: Option<String>,
    #[serde(default = "default_body_limit")]
    pub max_body_bytes: usize,
    /// How long shutdown waits for in-flight requests and streams.
    #[serde(default = "default_drain_ms")]
    pub drain_timeout_ms: u64,
    /// How long, after the shutdown signal, `/readyz` says draining while rein still accepts
    /// (so a load balancer takes it out first); 0 stops accepting at once.
    #[serde(default)]
    pub drain_delay_ms: u64,
    /// Worker threads, each with its own event loop and upstream connection pool; 0 = one per
    /// CPU core.
    #[serde(default)]
    pub workers: usize,
    /// How often a replica applies kill-switch flips recorded by the others.
    #[serde(default = "default_kill_sync_ms")]
    pub kill_sync_ms: u64,
    /// How long a client may take to send a request's headers, from its first byte.
    #[serde(default = "default_header_read_timeout_ms")]
    pub header_read_timeout_ms: u64,
    /// How long a client may take to send a request's body, from its headers.
    #[serde(default = "default_body_read_timeout_ms")]
    pub body_read_timeout_ms: u64,
    /// How long a connection with no request in flight stays open.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Open client connections at most, over all workers; more are closed as they arrive.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Serve `/metrics` and the dashboard without the admin key on a non-loopback address.
    #[serde(default)]
    pub metrics_public: bool,
    /// TLS on the listener: PEM files, re-read on every reload.
    #[serde(default)]
    pub tls: Option<RawTls>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// The certificate chain (PEM), leaf first.
    pub cert_path: String,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_path: String,
}

impl Default for RawServer {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            client_keys_env: Vec::new(),
            admin_key_env: None,
            max_body_bytes: default_body_limit(),
            drain_timeout_ms: default_drain_ms(),
            drain_delay_ms: 0,
            workers: 0,
            kill_sync_ms: default_kill_sync_ms(),
            header_read_timeout_ms: default_header_read_timeout_ms(),
            body_read_timeout_ms: default_body_read_timeout_ms(),
            idle_timeout_ms: default_idle_timeout_ms(),
            max_connections: default_max_connections(),
            metrics_public: false,
            tls: None,
        }
    }
}

// A real client sends its headers in milliseconds; 10 s is Go's common `ReadHeaderTimeout` and
// closes slow-header (slowloris) connections long before they pile up.
fn default_header_read_timeout_ms() -> u64 {
    10_000
}

// nginx's `client_body_timeout` (60 s); a 32 MiB body needs about 4.5 Mbit/s to make it.
fn default_body_read_timeout_ms() -> u64 {
    60_000
}

// nginx's `keepalive_timeout` (75 s): longer than the SDKs' own pool idle times, so a client
// rarely reuses a connection rein is closing.
fn default_idle_timeout_ms() -> u64 {
    75_000
}

fn default_max_connections() -> usize {
    4_096
}

fn default_kill_sync_ms() -> u64 {
    1_000
}

fn default_listen() -> String {
    "127.0.0.1:8787".to_string()
}

// The providers' own limits: Anthropic's Messages API takes 32 MB, and images travel base64.
fn default_body_limit() -> usize {
    32 * 1024 * 1024
}

fn default_drain_ms() -> u64 {
    30_000
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// The embedded SQLite database (WAL), relative to the working directory.
    #[serde(default = "default_sqlite_path")]
    pub sqlite_path: String,
    /// Environment variable holding a `postgres://` URL: tool state (outbox, idempotency keys,
    /// holds, cache) then lives in Postgres, shared by every replica that names the same one.
    #[serde(default)]
    pub postgres_url_env: Option<String>,
}

impl Default for RawStore {
    fn default() -> Self {
        Self { sqlite_path: default_sqlite_path(), postgres_url_env: None }
    }
}

fn default_sqlite_path() -> String {
    "rein.sqlite".to_string()
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetryBudget {
    #[serde(default = "default_ratio")]
    pub ratio: f64,
    #[serde(default = "default_min_retries")]
    pub min_retries_per_s: f64,
    #[serde(default = "default_window_s")]
    pub window_s: u64,
}

impl Default for RawRetryBudget {
    fn default() -> Self {
        Self {
            ratio: default_ratio(),
            min_retries_per_s: default_min_retries(),
            window_s: default_window_s(),
        }
    }
}

fn default_ratio() -> f64 {
    0.2
}

fn default_min_retries() -> f64 {
    1.0
}

fn default_window_s() -> u64 {
    10
}

/// The pooled HTTP client every provider shares.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// TCP and TLS connection setup (the connect clock).
    #[serde(default = "default_connect_ms")]
    pub connect_ms: u64,
    /// How long an idle pooled connection is kept.
    #[serde(default = "default_pool_idle_ms")]
    pub pool_idle_ms: u64,
}

impl Default for RawUpstream {
    fn default() -> Self {
        Self { connect_ms: default_connect_ms(), pool_idle_ms: default_pool_idle_ms() }
    }
}

fn default_connect_ms() -> u64 {
    2_000
}

fn default_pool_idle_ms() -> u64 {
    90_000
}

/// Which API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// api.openai.com.
    Openai,
    /// api.anthropic.com.
    Anthropic,
    /// Any server speaking OpenAI Chat Completions (vLLM, Ollama, llama.cpp server, ...).
    OpenaiCompatible,
    /// Azure OpenAI deployments.
    AzureOpenai,
    /// Amazon Bedrock's Converse API (or InvokeModel, `api = "invoke"`), SigV4-signed (`region`,
    /// AWS credentials).
    Bedrock,
    /// Google's Gemini API (generativelanguage.googleapis.com), with an API key.
    Gemini,
    /// Google Vertex AI: Claude or Gemini (`publisher`), with OAuth tokens from a
    /// service-account key (`credentials_file`) or the metadata server.
    Vertex,
    /// rein's own simulator, started in-process (no network, no key).
    Sim,
    /// Recorded answers (`rein record`) served in-process from a cassette file; a request the
    /// cassette does not hold fails loudly (no network, no key).
    Replay,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    pub kind: ProviderKind,
    #[serde(default)]
    pub base_url: Option<String>,
    /// Environment variable that holds the API key. The key itself never appears in config.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Extra static headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Azure: the `api-version` query parameter.
    #[serde(default)]
    pub api_version: Option<String>,
    /// Azure: the deployment name.
    #[serde(default)]
    pub deployment: Option<String>,
    /// Anthropic: `max_tokens` to send when the caller gave none.
    #[serde(default)]
    pub default_max_tokens: Option<u32>,
    /// Bedrock: the AWS region (default: the `AWS_REGION` or `AWS_DEFAULT_REGION` variable).
    /// Vertex: the location (default: `GOOGLE_CLOUD_LOCATION`, else `CLOUD_ML_REGION`).
    #[serde(default)]
    pub region: Option<String>,
    /// Vertex: the Google Cloud project (default: `GOOGLE_CLOUD_PROJECT`, else the key file's
    /// `project_id`).
    #[serde(default)]
    pub project: Option<String>,
    /// Vertex: whose models, `anthropic` (Claude) or `google` (Gemini). Required.
    #[serde(default)]
    pub publisher: Option<String>,
    /// Vertex: the service-account JSON key (default: the file `GOOGLE_APPLICATION_CREDENTIALS`
    /// names; without either, the metadata server).
    #[serde(default)]
    pub credentials_file: Option<String>,
    /// Vertex: how long before its expiry an access token is replaced (default 300000).
    #[serde(default)]
    pub token_refresh_margin_ms: Option<u64>,
    /// Bedrock: the variable holding the access key id (default `AWS_ACCESS_KEY_ID`).
    #[serde(default)]
    pub access_key_id_env: Option<String>,
    /// Bedrock: the variable holding the secret access key (default `AWS_SECRET_ACCESS_KEY`).
    #[serde(default)]
    pub secret_access_key_env: Option<String>,
    /// Bedrock: the variable holding a session token, if any (default `AWS_SESSION_TOKEN`).
    #[serde(default)]
    pub session_token_env: Option<String>,
    /// Bedrock: the profile of the shared credentials file (`~/.aws/credentials`, or
    /// `AWS_SHARED_CREDENTIALS_FILE`) read when the variables are unset (default: `AWS_PROFILE`,
    /// else `default`).
    #[serde(default)]
    pub profile: Option<String>,
    /// Sim, replay: which wire format the in-process tier speaks (`openai`, `anthropic` or
    /// `bedrock`; `gemini` for sim).
    #[serde(default)]
    pub format: Option<String>,
    /// Which API of the provider requests go to: for kind `bedrock` (and `sim` with format
    /// `bedrock`), `converse` (default) or `invoke` (InvokeModel, Claude models only); for the
    /// OpenAI kinds (and `sim` with format `openai`), `chat_completions` (default) or
    /// `responses`.
    #[serde(default)]
    pub api: Option<String>,
    /// Sim: a scenario file with a fault timeline.
    #[serde(default)]
    pub scenario: Option<String>,
    /// Replay: the cassette file (`rein record`) whose answers it serves.
    #[serde(default)]
    pub cassette: Option<String>,
    /// Whether rein asks this upstream to stream its answer (default true). With false the
    /// answer comes as one JSON body, and rein still streams it to a caller who asked to
    /// stream (some compatible servers answer tool calls only without streaming).
    #[serde(default)]
    pub stream: Option<bool>,
    /// Most bytes of one success response, JSON or stream (default 32 MiB); past it the
    /// attempt fails as `response_too_large`.
    #[serde(default)]
    pub max_response_bytes: Option<usize>,
    /// Most bytes of one event (or line) of a stream (default 4 MiB).
    #[serde(default)]
    pub max_event_bytes: Option<usize>,
    /// The HTTP version rein speaks to this upstream: `http1` (default) or `http2` (`h2` by ALPN
    /// over TLS, prior knowledge over `http://`; every request to the host on one connection per
    /// event-loop thread, for servers that allow as many concurrent streams as rein sends).
    #[serde(default)]
    pub http_version: Option<rein_providers::HttpVersion>,
    /// Anthropic: enforce `json_object` by prefilling the answer with `{`. Unset: for the
    /// models known to take a prefill (Claude 4.6 and later refuse one).
    #[serde(default)]
    pub json_prefill: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    #[serde(default)]
    pub first_token_ms: Option<u64>,
    #[serde(default)]
    pub stream_idle_ms: Option<u64>,
    #[serde(default)]
    pub attempt_ms: Option<u64>,
    #[serde(default)]
    pub min_attempt_ms: Option<u64>,
    #[serde(default)]
    pub attempts: Option<u32>,
    #[serde(default)]
    pub backoff_base_ms: Option<u64>,
    #[serde(default)]
    pub backoff_cap_ms: Option<u64>,
    #[serde(default)]
    pub backoff_floor_ms: Option<u64>,
    /// Per kind of timeout (`first_token`, `stream_idle`, `attempt`, `stream_cut`): `retry`
    /// on the same tier (the default, within the attempts and the deadline's plan) or
    /// `next_tier` at once.
    #[serde(default)]
    pub on_timeout: Option<rein_core::TimeoutMoves>,
    /// How long a held stream may stay silent before rein sends the head and an SSE comment
    /// (0: never).
    #[serde(default)]
    pub stream_keepalive_ms: Option<u64>,
    /// Passthrough only: a stream that breaks after text reached the caller is continued by a
    /// later tier that takes a prefill.
    #[serde(default)]
    pub continuation: Option<bool>,
    /// `checked` or `passthrough`.
    #[serde(default)]
    pub release: Option<String>,
    #[serde(default)]
    pub failover: Option<RawFailover>,
    #[serde(default)]
    pub degraded: Option<RawDegraded>,
    /// The decided reply of a stopped run (defaults to the degraded reply).
    #[serde(default)]
    pub stopped_reply: Option<RawDegraded>,
    /// What an answer must satisfy before it is used (the validation ladder). Absent: any
    /// whole answer is used as it is.
    #[serde(default)]
    pub output: Option<RawOutput>,
    /// Rules on the customer's message that send the conversation to a person before any model
    /// is asked (present: on, with the defaults for what it leaves out).
    #[serde(default)]
    pub handoff_rules: Option<rein_core::handoff::HandoffRules>,
    /// The coverage check before drafting.
    #[serde(default)]
    pub coverage: Option<rein_core::coverage::CoverageCheck>,
    /// What a customer whose conversation went to a person is told.
    #[serde(default)]
    pub handoff_reply: Option<RawDegraded>,
    /// This route's own run limits (over `[runs]`).
    #[serde(default)]
    pub runs: Option<super::escalation::RawRouteRuns>,
    /// The degraded mode's rules that act without a model, in order.
    #[serde(default)]
    pub degraded_rules: Vec<super::escalation::RawDegradedRule>,
    /// The label keys (`x-rein-labels`) this route's metrics are sliced by; others are kept
    /// with the call but never become a metric label.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Traces carry the messages and the answer (off: no message content leaves rein).
    #[serde(default)]
    pub trace_content: bool,
    /// `rein drill` may run against this route (off: every drill is refused).
    #[serde(default)]
    pub drillable: bool,
    #[serde(default)]
    pub tiers: Vec<RawTier>,
}

/// `[routes.<name>.output]`: the route's output contract. An empty table still checks the stop
/// reason (cut off → asked again with a higher ceiling, refusal → the safe reply, content
/// filter → the caller gets the reason).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    /// The answer must be JSON (implied by a schema).
    #[serde(default)]
    pub json: Option<bool>,
    /// An inline JSON Schema, written as a TOML table.
    #[serde(default)]
    pub schema: Option<Value>,
    /// A JSON Schema in a `.json` file, relative to the working directory.
    #[serde(default)]
    pub schema_file: Option<String>,
    /// The highest token ceiling a cut-off answer may be asked again with.
    #[serde(default)]
    pub max_tokens_cap: Option<u32>,
    /// Built-in business rules, in order: `{ rule = "cited_ids_returned", ids_at = "/ids" }`.
    #[serde(default)]
    pub rules: Vec<BuiltinRule>,
    /// HTTP rules, run after the built-in ones, in order.
    #[serde(default)]
    pub webhooks: Vec<RawWebhook>,
    /// Problems the answer may have and still be used (logged): `{ kind = "schema/required",
    /// path_prefix = "/order_id" }`.
    #[serde(default)]
    pub fail_open: Vec<ProblemKindSelector>,
    /// A second model (another route) that judges whether the evidence supports the answer.
    #[serde(default)]
    pub judge: Option<RawJudge>,
}

/// The judge rung: `{ route = "judge", fail = false }`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawJudge {
    /// The route that judges (its own tiers, clocks and prompt).
    pub route: String,
    /// Whether "not supported" fails the answer; otherwise the verdict is recorded and logged.
    #[serde(default)]
    pub fail: bool,
}

/// A business rule behind an HTTP endpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawWebhook {
    /// The rule's name in problems, logs and fail-open selectors.
    pub name: String,
    pub url: String,
    /// How long one check may take; past it the check failed (never passed).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawFailover {
    /// Name of the tier that gets the share.
    pub tier: String,
    /// Fraction of calls, 0.0–1.0.
    pub share: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawDegraded {
    /// Static text, or a template with `{{name}}` placeholders.
    pub template: String,
    /// Sent when a placeholder has no value; defaults to the template itself.
    #[serde(default)]
    pub fallback_text: Option<String>,
    /// `reply` (the default: the text is the answer) or `error` (a 503 in the caller's format
    /// carrying the text and the attempts).
    #[serde(default)]
    pub deliver: Option<rein_core::Delivery>,
    /// What a caller that asked for JSON gets (a TOML table, sent as a JSON object); without
    /// it such a caller gets the error, never prose.
    #[serde(default)]
    pub json: Option<Value>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTier {
    pub name: String,
    pub provider: String,
    pub model: String,
    #[serde(default)]
    pub context_window: Option<u32>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub attempts: Option<u32>,
    #[serde(default)]
    pub allowed_fails: Option<u32>,
    #[serde(default)]
    pub cooldown_s: Option<u64>,
    /// The tier continues an answer from an assistant prefill (default: true for the Anthropic
    /// format, which documents it; false for the OpenAI format, whose API answers afresh).
    #[serde(default)]
    pub prefill: Option<bool>,
}
