//! rein's provider adapters: each turns a canonical [`ChatRequest`] into one HTTP call in a
//! provider's wire format and the reply into [`StreamEvent`]s, behind rein-core's
//! [`Provider`] trait. Four formats: OpenAI Chat Completions ([`OpenAiProvider`]:
//! api.openai.com, any OpenAI-compatible server, Azure deployments; or, with `api =
//! "responses"`, OpenAI's Responses API through the same provider), Anthropic Messages
//! ([`AnthropicProvider`]), Amazon Bedrock's Converse API, or InvokeModel for Claude
//! ([`BedrockProvider`], SigV4 and event-stream frames) and Google's Gemini API
//! ([`GeminiProvider`]); Google Vertex AI ([`VertexProvider`]) serves Claude and Gemini in the
//! last two formats, with OAuth tokens from a service-account key or the metadata server.
//!
//! Adapters record what they observed and decide nothing: they never retry, never sleep and
//! set no timeout but the TCP/TLS connect bound of the shared [`HttpClient`]. Error responses
//! become [`Failure::Http`] with the body's type/code/message and the pushback headers
//! ([`parse_http_error`]); classification happens in rein-core. API keys travel as
//! [`Secret`]s and never appear in `Debug`, `Display`, errors or logs.
//!
//! Module map: `config` (serde config and its errors), `client` (the pooled client and
//! transport-error mapping), `sse` (line parser), `stream` (body → events driver),
//! `http_error` (error responses), `openai`, `anthropic`, `bedrock` and `gemini` (request
//! bodies, stream decoders, non-streaming parsers; `bedrock` also signing and event-stream
//! framing), `vertex` (Vertex AI's paths and its access tokens, on the Anthropic and Gemini
//! builders and decoders), `json_scan` (the one-pass reader of the common upstream chunk and
//! answer) and `json_write` (strings and numbers written as serde_json writes them, for the
//! bodies the gateway writes directly).

// `Failure` is rein-core's type and the `Provider` trait returns it by value; the error path
// is cold, so its size (an `HttpError` of several strings) costs nothing worth a `Box`.
#![allow(clippy::result_large_err)]

mod anthropic;
mod bedrock;
mod client;
mod config;
mod gemini;
mod http_error;
mod json_scan;
mod openai;
mod secret;
mod sse;
mod stream;
mod vertex;

use std::collections::BTreeMap;
use std::sync::Arc;

use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use rein_core::{Failure, Provider, WireFormat};

#[doc(hidden)]
pub use anthropic::replay_anthropic_stream_chunks;
pub use anthropic::{AnthropicProvider, replay_anthropic_response, replay_anthropic_stream};
pub use bedrock::{
    AwsCredentials, BedrockProvider, EVENT_STREAM_CONTENT_TYPE, SigningScope,
    replay_bedrock_response, replay_bedrock_stream, sigv4_headers,
};
pub use client::{HttpClient, error_chain};
pub use config::{
    ANTHROPIC_DEFAULT_BASE_URL, ANTHROPIC_DEFAULT_MAX_TOKENS, ANTHROPIC_DEFAULT_VERSION,
    AnthropicConfig, AzureConfig, BedrockApi, BedrockConfig, ClientBuildError, ConfigError,
    DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_RESPONSE_BYTES, GCE_METADATA_DEFAULT_HOST,
    GEMINI_DEFAULT_BASE_URL, GeminiConfig, HttpClientConfig, HttpVersion, MaxTokensField,
    OPENAI_DEFAULT_BASE_URL, OpenAiApi, OpenAiAuth, OpenAiConfig, ProviderConfig, ResponseLimits,
    ServiceAccountKey, VERTEX_ANTHROPIC_VERSION, VERTEX_DEFAULT_REFRESH_MARGIN_MS,
    VERTEX_DEFAULT_TOKEN_TIMEOUT_MS, VERTEX_SCOPE, VertexConfig, VertexCredentials,
    VertexPublisher,
};
pub use gemini::{GeminiProvider, replay_gemini_response, replay_gemini_stream};
pub use http_error::{parse_http_error, retry_after, wait_in_message};
#[doc(hidden)]
pub use openai::replay_openai_stream_chunks;
pub use openai::{
    OpenAiProvider, replay_openai_response, replay_openai_stream, replay_responses_response,
    replay_responses_stream,
};
pub use rein_core::json_write;
pub use secret::Secret;
pub use vertex::{
    JWT_BEARER_GRANT, METADATA_TOKEN_PATH, VertexProvider,
    default_base_url as vertex_default_base_url,
};

#[doc(no_inline)]
pub use rein_core::{ChatRequest, StreamEvent};

/// Makes ring rustls' process-wide crypto provider, unless one is installed already. rein
/// builds rustls on ring (no C crypto library to compile) and reqwest without a provider of
/// its own, so building a reqwest client before any provider is installed panics: call this
/// first (rein's own clients do).
pub fn install_crypto_provider() {
    // An error only says a provider is installed already, which is all that is needed.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Builds the adapter a config entry describes, sharing `client`'s connection pool.
pub fn build_provider(
    config: ProviderConfig,
    client: &HttpClient,
) -> Result<Arc<dyn Provider>, ConfigError> {
    Ok(match config {
        ProviderConfig::OpenAi(config) => Arc::new(OpenAiProvider::new(config, client.clone())?),
        ProviderConfig::Anthropic(config) => {
            Arc::new(AnthropicProvider::new(config, client.clone())?)
        }
        ProviderConfig::Bedrock(config) => Arc::new(BedrockProvider::new(config, client.clone())?),
        ProviderConfig::Gemini(config) => Arc::new(GeminiProvider::new(config, client.clone())?),
        ProviderConfig::Vertex(config) => Arc::new(VertexProvider::new(config, client.clone())?),
    })
}

/// Decodes a recorded body of any format (SSE or event-stream frames when it does not look
/// like JSON, JSON otherwise), as the adapter would decode it live. For the simulator, evals
/// and tests.
pub fn replay(format: WireFormat, body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    let is_json = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    match (format, is_json) {
        (WireFormat::Bedrock, false) => replay_bedrock_stream(body),
        (WireFormat::Bedrock, true) => replay_bedrock_response(body),
        (WireFormat::OpenAi, false) => replay_openai_stream(body),
        (WireFormat::OpenAi, true) => replay_openai_response(body),
        (WireFormat::Anthropic, false) => replay_anthropic_stream(body),
        (WireFormat::Anthropic, true) => replay_anthropic_response(body),
        (WireFormat::Gemini, false) => replay_gemini_stream(body),
        (WireFormat::Gemini, true) => replay_gemini_response(body),
    }
}

/// A request body as bytes (serializing a JSON value cannot fail).
pub(crate) fn to_bytes(body: &Value) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(body).unwrap_or_default())
}

/// Merges a request's `extra` fields into the body, last: a key the body lacks is added, a
/// key it has is replaced, except that two objects are merged key by key (so `extra` can add
/// `output_config.effort` without dropping the `format` the adapter put there).
pub(crate) fn merge_extra(body: &mut Map<String, Value>, extra: &Map<String, Value>) {
    for (key, value) in extra {
        match (body.get_mut(key), value) {
            (Some(Value::Object(existing)), Value::Object(addition)) => {
                for (inner_key, inner_value) in addition {
                    existing.insert(inner_key.clone(), inner_value.clone());
                }
            }
            _ => {
                body.insert(key.clone(), value.clone());
            }
        }
    }
}

pub(crate) fn parse_base_url(provider: &str, base_url: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(base_url.trim()).map_err(|e| ConfigError::InvalidBaseUrl {
        provider: provider.to_owned(),
        url: base_url.to_owned(),
        reason: e.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(ConfigError::UnsupportedScheme {
            provider: provider.to_owned(),
            url: base_url.to_owned(),
        });
    }
    Ok(url)
}

/// The endpoint requests go to, on `client` (`shown` is the base URL as configured, for the
/// error).
pub(crate) fn live_endpoint(
    client: &HttpClient,
    provider: &str,
    url: Url,
    shown: &str,
    version: HttpVersion,
) -> Result<client::Endpoint, ConfigError> {
    client.endpoint(url, version).map_err(|error| ConfigError::InvalidBaseUrl {
        provider: provider.to_owned(),
        url: shown.to_owned(),
        reason: error.to_string(),
    })
}

/// Checks a provider's response limits.
pub(crate) fn check_limits(provider: &str, limits: ResponseLimits) -> Result<(), ConfigError> {
    let ResponseLimits { max_response_bytes, max_event_bytes } = limits;
    if max_response_bytes == 0 || max_event_bytes == 0 || max_event_bytes > max_response_bytes {
        return Err(ConfigError::InvalidLimits {
            provider: provider.to_owned(),
            max_response_bytes,
            max_event_bytes,
        });
    }
    Ok(())
}

/// Appends path segments after the base URL's own path (a trailing `/` is ignored).
pub(crate) fn append_path(url: &mut Url, segments: &[&str]) {
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
}

/// A URL for `Debug`: no query string and no user info, which is where people put keys.
pub(crate) fn redacted_url(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    let query_note = if url.query().is_some() { "?…" } else { "" };
    format!("{shown}{query_note}")
}

pub(crate) fn insert_static_headers(
    provider: &str,
    configured: &BTreeMap<String, Secret>,
    headers: &mut HeaderMap,
) -> Result<(), ConfigError> {
    for (name, value) in configured {
        let invalid = |reason: String| ConfigError::InvalidHeader {
            provider: provider.to_owned(),
            header: name.clone(),
            reason,
        };
        let header_name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|e| invalid(e.to_string()))?;
        let mut header_value =
            HeaderValue::from_str(value.expose()).map_err(|e| invalid(e.to_string()))?;
        header_value.set_sensitive(true);
        headers.insert(header_name, header_value);
    }
    Ok(())
}
