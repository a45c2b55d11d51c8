//! What the config file says about each provider and about the shared HTTP client, as serde
//! structs (`deny_unknown_fields`, units in key names), and the errors that name what is wrong
//! when a provider cannot be built from them. Secrets arrive already resolved: the caller reads
//! environment variables, this crate only carries the value (see [`crate::Secret`]).
//!
//! ## base_url conventions
//! For OpenAI `base_url` includes the API version prefix, as the OpenAI SDKs expect:
//! `https://api.openai.com/v1`, `http://localhost:11434/v1` (Ollama), `http://host:8000/v1`
//! (vLLM); the adapter appends only the resource, `{base_url}/chat/completions`. For
//! Anthropic both spellings work: `https://api.anthropic.com/v1` (this crate's default) and
//! `https://api.anthropic.com` (what Anthropic's SDKs take) both post to `.../v1/messages`;
//! the adapter adds `v1` when the path does not already end in it. Azure deployments are the
//! exception: `base_url` is the resource endpoint (`https://NAME.openai.azure.com`) and the
//! adapter builds `{base_url}/openai/deployments/{deployment}/chat/completions?api-version=..`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::secret::Secret;

/// The OpenAI base URL used when a config gives none.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The Gemini API host used when a config gives none.
pub const GEMINI_DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";
/// The Anthropic base URL used when a config gives none.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com/v1";
/// The `anthropic-version` header sent unless the config overrides it.
pub const ANTHROPIC_DEFAULT_VERSION: &str = "2023-06-01";
/// Anthropic requires `max_tokens`; this is sent when neither the request nor the config has one.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 4096;
/// The default cap on one success response, JSON or event stream: 32 MiB. The largest real
/// answers are streams of 100k+ output tokens, and a Chat Completions chunk costs ~200 bytes
/// of framing per token (id, model, fingerprint, choice), so 128k tokens stream as ~26 MB; the
/// same answer as one JSON body is about 1 MB. Per-token logprobs multiply the stream's size,
/// so a route that asks for them on very long answers may need more.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;
/// The default cap on one server-sent event (or line) of a stream: 4 MiB. Providers send a
/// few hundred bytes per event and stream tool arguments in fragments; even a server that
/// sends a whole long answer as one event stays near 1 MB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// How much of a success response a provider may send before the attempt fails with
/// [`rein_core::Failure::ResponseTooLarge`]. Error bodies are read only up to a small fixed
/// size regardless (enough for any provider's error JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResponseLimits {
    /// The whole body: a JSON answer, or all the bytes of a streamed one.
    pub max_response_bytes: usize,
    /// One event (or line) of a stream.
    pub max_event_bytes: usize,
}

impl Default for ResponseLimits {
    fn default() -> Self {
        Self {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

/// One `[[provider]]` entry: which wire format it speaks and how to reach it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "format")]
pub enum ProviderConfig {
    /// OpenAI Chat Completions, any OpenAI-compatible server, or an Azure OpenAI deployment.
    #[serde(rename = "openai")]
    OpenAi(OpenAiConfig),
    /// Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic(AnthropicConfig),
    /// Amazon Bedrock's Converse API, SigV4-signed.
    #[serde(rename = "bedrock")]
    Bedrock(BedrockConfig),
    #[serde(rename = "gemini")]
    Gemini(GeminiConfig),
    /// Google Vertex AI: Claude (`rawPredict`) or Gemini (`generateContent`), OAuth-authorized.
    #[serde(rename = "vertex")]
    Vertex(VertexConfig),
}

impl ProviderConfig {
    pub fn name(&self) -> &str {
        match self {
            ProviderConfig::OpenAi(config) => &config.name,
            ProviderConfig::Anthropic(config) => &config.name,
            ProviderConfig::Bedrock(config) => &config.name,
            ProviderConfig::Gemini(config) => &config.name,
            ProviderConfig::Vertex(config) => &config.name,
        }
    }

    /// Whether [`build_provider`](crate::build_provider) can build an adapter from this config:
    /// the same checks, without a client (for validating a config file before anything starts).
    pub fn check(&self) -> Result<(), ConfigError> {
        match self {
            ProviderConfig::OpenAi(config) => crate::OpenAiProvider::prepare(config).map(drop),
            ProviderConfig::Anthropic(config) => {
                crate::AnthropicProvider::prepare(config).map(drop)
            }
            ProviderConfig::Bedrock(config) => crate::BedrockProvider::prepare(config).map(drop),
            ProviderConfig::Gemini(config) => crate::GeminiProvider::prepare(config).map(drop),
            ProviderConfig::Vertex(config) => crate::VertexProvider::prepare(config).map(drop),
        }
    }
}

/// Which body field carries the output-token ceiling on an OpenAI-format server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_tokens`: what OpenAI-compatible servers (vLLM, Ollama, llama.cpp) and older
    /// Azure API versions understand.
    MaxTokens,
    /// `max_completion_tokens`: what api.openai.com requires for reasoning models and
    /// accepts for all others.
    MaxCompletionTokens,
}

/// How the API key is presented to an OpenAI-format server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenAiAuth {
    /// `Authorization: Bearer KEY` (OpenAI and most compatible servers).
    Bearer,
    /// `api-key: KEY` (Azure OpenAI, including its `/openai/v1` endpoint).
    ApiKey,
}

/// Which OpenAI API a provider is called through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenAiApi {
    /// `POST {base_url}/chat/completions`.
    #[default]
    ChatCompletions,
    /// `POST {base_url}/responses`, for models served only there. Azure:
    /// `{base_url}/openai/v1/responses` (with a dated `api_version`, the earlier
    /// `{base_url}/openai/responses?api-version=..`), the deployment as the body's `model`.
    Responses,
}

/// An Azure OpenAI deployment: the model is chosen by the URL, not the body.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AzureConfig {
    pub deployment: String,
    /// The `api-version` query parameter, e.g. `2024-10-21`. With the Responses API (the
    /// `/openai/v1` endpoint, which needs none) it may be empty; when set it is sent.
    pub api_version: String,
}

/// A provider speaking OpenAI Chat Completions.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiConfig {
    /// The name routes, metrics and the retry budget use for this provider.
    pub name: String,
    /// Defaults to [`OPENAI_DEFAULT_BASE_URL`]; required with `azure`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Already resolved. Local servers (Ollama, llama.cpp) often need none.
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Static headers added to every request (`OpenAI-Organization`, a gateway's own key...).
    /// Values are treated as secrets.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// Stream the answer (`stream: true` with `stream_options.include_usage`). When false the
    /// call is sent non-streaming and the JSON answer is turned into the same events.
    #[serde(default = "default_true")]
    pub streaming: bool,
    /// Defaults to `max_completion_tokens` when the host is `api.openai.com`, `max_tokens`
    /// everywhere else (OpenAI-compatible servers and Azure).
    #[serde(default)]
    pub max_tokens_field: Option<MaxTokensField>,
    /// Defaults to `api_key` with `azure`, `bearer` otherwise.
    #[serde(default)]
    pub auth: Option<OpenAiAuth>,
    #[serde(default)]
    pub azure: Option<AzureConfig>,
    /// Chat Completions (the default) or the Responses API.
    #[serde(default)]
    pub api: OpenAiApi,
    #[serde(default)]
    pub limits: ResponseLimits,
    /// The HTTP version this provider is spoken to in (default HTTP/1.1).
    #[serde(default)]
    pub http_version: HttpVersion,
}

impl OpenAiConfig {
    /// A config for `base_url` with every option at its default.
    pub fn new(name: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base_url: Some(base_url.into()),
            api_key: None,
            headers: BTreeMap::new(),
            streaming: true,
            max_tokens_field: None,
            auth: None,
            azure: None,
            api: OpenAiApi::ChatCompletions,
            limits: ResponseLimits::default(),
            http_version: HttpVersion::default(),
        }
    }
}

/// A provider speaking Anthropic Messages.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AnthropicConfig {
    pub name: String,
    /// Defaults to [`ANTHROPIC_DEFAULT_BASE_URL`]. With or without the `/v1`: the adapter adds
    /// it when the path does not end in it, as Anthropic's SDKs do with their base URL.
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Static headers (`anthropic-beta`, ...). Values are treated as secrets.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// The `anthropic-version` header.
    #[serde(default = "default_anthropic_version")]
    pub anthropic_version: String,
    /// Sent as `max_tokens` when the request has no ceiling of its own.
    #[serde(default = "default_anthropic_max_tokens")]
    pub default_max_tokens: u32,
    #[serde(default = "default_true")]
    pub streaming: bool,
    /// Whether a `json_object` request is enforced by prefilling the answer with `{` (an
    /// assistant turn at the end of `messages`). Unset: prefill for the models known to accept
    /// it (Claude 2, 3, 4.0, 4.1 and 4.5 ids); Claude 4.6 and later reject a prefill with a
    /// 400, and an unknown model id gets none, so only rein's checks enforce the JSON there.
    #[serde(default)]
    pub json_prefill: Option<bool>,
    #[serde(default)]
    pub limits: ResponseLimits,
    /// The HTTP version this provider is spoken to in (default HTTP/1.1).
    #[serde(default)]
    pub http_version: HttpVersion,
}

impl AnthropicConfig {
    pub fn new(name: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base_url: Some(base_url.into()),
            api_key: None,
            headers: BTreeMap::new(),
            anthropic_version: default_anthropic_version(),
            default_max_tokens: ANTHROPIC_DEFAULT_MAX_TOKENS,
            streaming: true,
            json_prefill: None,
            limits: ResponseLimits::default(),
            http_version: HttpVersion::default(),
        }
    }
}

/// A provider on Amazon Bedrock: `POST {base_url}/model/{model}/converse` (or `/converse-stream`),
/// or with [`BedrockApi::Invoke`] `/invoke` (or `/invoke-with-response-stream`), signed with
/// SigV4 for the `bedrock` service in `region`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BedrockConfig {
    pub name: String,
    /// The AWS region (`us-east-1`): part of the default endpoint and of every signature.
    pub region: String,
    /// Defaults to `https://bedrock-runtime.{region}.amazonaws.com` (a simulator, a VPC
    /// endpoint).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Already resolved, like every secret here.
    #[serde(default)]
    pub access_key_id: Option<Secret>,
    #[serde(default)]
    pub secret_access_key: Option<Secret>,
    /// With temporary (STS, SSO) credentials.
    #[serde(default)]
    pub session_token: Option<Secret>,
    /// Sent as `inferenceConfig.maxTokens` when the request has no ceiling of its own.
    #[serde(default = "default_anthropic_max_tokens")]
    pub default_max_tokens: u32,
    /// ConverseStream (or InvokeModelWithResponseStream) when true, Converse (or InvokeModel)
    /// otherwise.
    #[serde(default = "default_true")]
    pub streaming: bool,
    /// Which Bedrock Runtime API the requests go to (default Converse).
    #[serde(default)]
    pub api: BedrockApi,
    #[serde(default)]
    pub limits: ResponseLimits,
    /// The HTTP version this provider is spoken to in (default HTTP/1.1).
    #[serde(default)]
    pub http_version: HttpVersion,
}

/// The Bedrock Runtime API a provider speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BedrockApi {
    /// Converse / ConverseStream: one format for every Bedrock model.
    #[default]
    Converse,
    /// InvokeModel / InvokeModelWithResponseStream with the model's native body: Anthropic's
    /// Messages body (`anthropic_version: bedrock-2023-05-31`), for Claude models only.
    Invoke,
}

impl BedrockConfig {
    pub fn new(name: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            region: region.into(),
            base_url: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            default_max_tokens: ANTHROPIC_DEFAULT_MAX_TOKENS,
            streaming: true,
            api: BedrockApi::Converse,
            limits: ResponseLimits::default(),
            http_version: HttpVersion::default(),
        }
    }
}

/// A Gemini API provider (`generativelanguage.googleapis.com`): `base_url` is the host, with
/// or without `/v1beta`; the key goes in `x-goog-api-key`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GeminiConfig {
    pub name: String,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub api_key: Option<Secret>,
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    #[serde(default = "default_true")]
    pub streaming: bool,
    #[serde(default)]
    pub limits: ResponseLimits,
    /// The HTTP version this provider is spoken to in (default HTTP/1.1).
    #[serde(default)]
    pub http_version: HttpVersion,
}

impl GeminiConfig {
    pub fn new(name: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base_url: Some(base_url.into()),
            api_key: None,
            headers: BTreeMap::new(),
            streaming: true,
            limits: ResponseLimits::default(),
            http_version: HttpVersion::default(),
        }
    }
}

/// The `anthropic_version` body field Claude on Vertex AI takes (what Anthropic's Vertex SDK
/// sends).
pub const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
/// The OAuth scope of Vertex AI's access tokens.
pub const VERTEX_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The metadata server's host when `GCE_METADATA_HOST` names none.
pub const GCE_METADATA_DEFAULT_HOST: &str = "metadata.google.internal";
/// How long before its expiry a cached access token is replaced: 5 minutes.
pub const VERTEX_DEFAULT_REFRESH_MARGIN_MS: u64 = 300_000;
/// The bound on one access-token fetch, connect to last byte: 10 s.
pub const VERTEX_DEFAULT_TOKEN_TIMEOUT_MS: u64 = 10_000;

/// Whose models a Vertex AI provider calls, which decides the method and the body's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VertexPublisher {
    /// Claude: `:rawPredict` / `:streamRawPredict` with an Anthropic Messages body.
    Anthropic,
    /// Gemini: `:generateContent` / `:streamGenerateContent?alt=sse`.
    Google,
}

impl VertexPublisher {
    pub fn as_str(self) -> &'static str {
        match self {
            VertexPublisher::Anthropic => "anthropic",
            VertexPublisher::Google => "google",
        }
    }
}

/// The fields of a service-account JSON key that an access token is made from (the file has
/// more, which are ignored). `Debug` shows no private key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ServiceAccountKey {
    pub client_email: String,
    /// PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    pub private_key: Secret,
    #[serde(default)]
    pub private_key_id: Option<String>,
    /// Where the signed assertion is exchanged for a token (`https://oauth2.googleapis.com/token`).
    pub token_uri: String,
    #[serde(default)]
    pub project_id: Option<String>,
}

impl ServiceAccountKey {
    /// Reads a service-account key file's JSON. The error names the field that is missing or
    /// wrong, never a value.
    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        #[derive(Deserialize)]
        struct Typed {
            #[serde(rename = "type")]
            kind: Option<String>,
        }
        let typed: Typed = serde_json::from_slice(bytes)
            .map_err(|e| format!("is not JSON (line {}, column {})", e.line(), e.column()))?;
        if let Some(kind) = typed.kind.as_deref().filter(|kind| *kind != "service_account") {
            return Err(format!(
                "holds a `{kind}` credential; Vertex providers take a service-account key (`\"type\": \"service_account\"`)"
            ));
        }
        let key: Self = serde_json::from_slice(bytes).map_err(|e| {
            // serde's messages name the field, not its value.
            let text = e.to_string();
            let text = text.split(" at line").next().unwrap_or(&text).to_owned();
            format!("is not a service-account key: {text}")
        })?;
        for (field, value) in [
            ("client_email", key.client_email.as_str()),
            ("private_key", key.private_key.expose()),
            ("token_uri", key.token_uri.as_str()),
        ] {
            if value.trim().is_empty() {
                return Err(format!("has an empty `{field}`"));
            }
        }
        Ok(key)
    }
}

/// Where a Vertex provider's access tokens come from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum VertexCredentials {
    /// A service-account key: an RS256-signed JWT assertion exchanged at its `token_uri`.
    ServiceAccount {
        /// The key file it was read from, for messages (`rein check`, errors).
        #[serde(default)]
        path: Option<String>,
        key: ServiceAccountKey,
    },
    /// The metadata server of the machine (GCE, GKE, Cloud Run):
    /// `http://{host}/computeMetadata/v1/instance/service-accounts/default/token`.
    Metadata {
        /// [`GCE_METADATA_DEFAULT_HOST`] unless `GCE_METADATA_HOST` names another.
        host: String,
    },
}

impl VertexCredentials {
    /// Where tokens come from, in words, with no secret: for messages.
    pub fn describe(&self) -> String {
        match self {
            VertexCredentials::ServiceAccount { path, key } => match path {
                Some(path) => format!(
                    "service-account key `{path}` ({}, token endpoint {})",
                    key.client_email, key.token_uri
                ),
                None => format!(
                    "service-account key of {} (token endpoint {})",
                    key.client_email, key.token_uri
                ),
            },
            VertexCredentials::Metadata { host } => format!("the metadata server at {host}"),
        }
    }
}

/// A provider on Google Vertex AI: `POST {base}/v1/projects/{project}/locations/{region}/
/// publishers/{publisher}/models/{model}:{method}` with `Authorization: Bearer <token>`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VertexConfig {
    pub name: String,
    /// The Google Cloud project id.
    pub project: String,
    /// The Vertex location (`us-east5`, `europe-west1`, `global`).
    pub region: String,
    pub publisher: VertexPublisher,
    /// Defaults to `https://{region}-aiplatform.googleapis.com`, or
    /// `https://aiplatform.googleapis.com` for `global` (tests, private endpoints).
    #[serde(default)]
    pub base_url: Option<String>,
    pub credentials: VertexCredentials,
    /// A cached token is replaced this long before it expires.
    #[serde(default = "default_refresh_margin_ms")]
    pub token_refresh_margin_ms: u64,
    /// The bound on one token fetch.
    #[serde(default = "default_token_timeout_ms")]
    pub token_timeout_ms: u64,
    /// Claude: sent as `max_tokens` when the request has no ceiling of its own.
    #[serde(default = "default_anthropic_max_tokens")]
    pub default_max_tokens: u32,
    /// Claude: as [`AnthropicConfig::json_prefill`].
    #[serde(default)]
    pub json_prefill: Option<bool>,
    #[serde(default = "default_true")]
    pub streaming: bool,
    #[serde(default)]
    pub limits: ResponseLimits,
    /// The HTTP version this provider is spoken to in (default HTTP/1.1).
    #[serde(default)]
    pub http_version: HttpVersion,
}

impl VertexConfig {
    pub fn new(
        name: impl Into<String>,
        project: impl Into<String>,
        region: impl Into<String>,
        publisher: VertexPublisher,
        credentials: VertexCredentials,
    ) -> Self {
        Self {
            name: name.into(),
            project: project.into(),
            region: region.into(),
            publisher,
            base_url: None,
            credentials,
            token_refresh_margin_ms: VERTEX_DEFAULT_REFRESH_MARGIN_MS,
            token_timeout_ms: VERTEX_DEFAULT_TOKEN_TIMEOUT_MS,
            default_max_tokens: ANTHROPIC_DEFAULT_MAX_TOKENS,
            json_prefill: None,
            streaming: true,
            limits: ResponseLimits::default(),
            http_version: HttpVersion::default(),
        }
    }
}

fn default_refresh_margin_ms() -> u64 {
    VERTEX_DEFAULT_REFRESH_MARGIN_MS
}

fn default_token_timeout_ms() -> u64 {
    VERTEX_DEFAULT_TOKEN_TIMEOUT_MS
}

/// The HTTP version a provider is spoken to in.
///
/// HTTP/1.1 is the default because model calls are long: a streamed answer holds its request
/// open for tens of seconds, and an HTTP/2 server caps the requests open on one connection
/// (`SETTINGS_MAX_CONCURRENT_STREAMS`, 100 to 256 at the large providers). hyper's pool keeps one
/// HTTP/2 connection per host and opens no second one at the cap (as RFC 9113 §9.1 asks), so
/// past it requests would wait for a stream to end while their clocks run. Over HTTP/1.1 every
/// request in flight has its own connection and none waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpVersion {
    /// HTTP/1.1 (TLS offers no ALPN protocol, which is HTTP/1.1).
    #[default]
    Http1,
    /// HTTP/2 only: `h2` by ALPN over TLS, prior knowledge (h2c) over `http://`. Every request
    /// to the host shares one connection per event-loop thread, so a thousand open streams hold
    /// a few connections instead of a thousand; for servers that allow that many streams (a
    /// self-hosted model server, `rein sim`), not for a provider's capped edge.
    Http2,
}

/// Settings of the one pooled HTTP client every provider shares. No request or read timeout
/// exists here on purpose: the engine owns every clock but the TCP/TLS connect bound.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpClientConfig {
    /// Bound on establishing TCP + TLS; firing becomes `ClockFired { clock: Connect }`.
    pub connect_timeout_ms: u64,
    /// How long an idle pooled connection is kept.
    pub pool_idle_timeout_ms: u64,
    pub pool_max_idle_per_host: usize,
    /// TCP keepalive probe interval on pooled connections (0 disables).
    pub tcp_keepalive_ms: u64,
}

impl Default for HttpClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 10_000,
            pool_idle_timeout_ms: 90_000,
            pool_max_idle_per_host: 64,
            tcp_keepalive_ms: 30_000,
        }
    }
}

impl HttpClientConfig {
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }
}

/// Why a provider could not be built from its config. Each variant names the provider and
/// the key, and says what would fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("provider `{provider}`: `{key}` must not be empty")]
    Empty { provider: String, key: &'static str },
    #[error("provider `{provider}`: `base_url` ({url}) is not a valid URL: {reason}")]
    InvalidBaseUrl { provider: String, url: String, reason: String },
    #[error("provider `{provider}`: `base_url` ({url}) must start with http:// or https://")]
    UnsupportedScheme { provider: String, url: String },
    #[error(
        "provider `{provider}`: `base_url` is required with `azure` (https://NAME.openai.azure.com)"
    )]
    AzureNeedsBaseUrl { provider: String },
    #[error("provider `{provider}`: header `{header}` is not a valid HTTP header: {reason}")]
    InvalidHeader { provider: String, header: String, reason: String },
    #[error("provider `{provider}`: the API key is not a valid HTTP header value")]
    InvalidApiKey { provider: String },
    #[error("provider `{provider}`: `{key}` is missing: Bedrock signs every request with it")]
    MissingAwsCredential { provider: String, key: &'static str },
    #[error("provider `{provider}`: `{key}` is not usable: {reason}")]
    InvalidSetting { provider: String, key: &'static str, reason: String },
    #[error(
        "provider `{provider}`: `max_response_bytes` ({max_response_bytes}) and `max_event_bytes` ({max_event_bytes}) must be above 0, and an event cannot be larger than the response"
    )]
    InvalidLimits { provider: String, max_response_bytes: usize, max_event_bytes: usize },
}

impl ConfigError {
    /// The config key the error is about, relative to the provider's entry (`base_url`,
    /// `headers.<name>`, `azure.deployment`, ...).
    pub fn key(&self) -> String {
        match self {
            ConfigError::Empty { key, .. } => (*key).to_string(),
            ConfigError::InvalidBaseUrl { .. }
            | ConfigError::UnsupportedScheme { .. }
            | ConfigError::AzureNeedsBaseUrl { .. } => "base_url".into(),
            ConfigError::InvalidHeader { header, .. } if header == "anthropic_version" => {
                header.clone()
            }
            ConfigError::InvalidHeader { header, .. } => format!("headers.{header}"),
            ConfigError::InvalidApiKey { .. } => "api_key".into(),
            ConfigError::MissingAwsCredential { key, .. } => (*key).to_string(),
            ConfigError::InvalidSetting { key, .. } => (*key).to_string(),
            ConfigError::InvalidLimits { .. } => "max_event_bytes".into(),
        }
    }

    /// What is wrong, without the provider's name (which the key already places).
    pub fn reason(&self) -> String {
        let shown = self.to_string();
        let prefix = match self {
            ConfigError::Empty { provider, .. }
            | ConfigError::InvalidBaseUrl { provider, .. }
            | ConfigError::UnsupportedScheme { provider, .. }
            | ConfigError::AzureNeedsBaseUrl { provider }
            | ConfigError::InvalidHeader { provider, .. }
            | ConfigError::InvalidApiKey { provider }
            | ConfigError::MissingAwsCredential { provider, .. }
            | ConfigError::InvalidSetting { provider, .. }
            | ConfigError::InvalidLimits { provider, .. } => format!("provider `{provider}`: "),
        };
        let reason = shown.strip_prefix(&prefix).unwrap_or(&shown);
        let key = format!("`{}` ", self.key());
        reason.strip_prefix(&key).unwrap_or(reason).to_string()
    }
}

/// Why the shared HTTP client could not be built (a TLS backend failure, in practice).
#[derive(Debug, thiserror::Error)]
#[error("could not build the HTTP client: {detail}")]
pub struct ClientBuildError {
    pub detail: String,
}

fn default_true() -> bool {
    true
}

fn default_anthropic_version() -> String {
    ANTHROPIC_DEFAULT_VERSION.to_owned()
}

fn default_anthropic_max_tokens() -> u32 {
    ANTHROPIC_DEFAULT_MAX_TOKENS
}
