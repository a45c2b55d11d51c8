//! The Anthropic Messages adapter: `POST {base_url}/v1/messages` with `x-api-key`,
//! `anthropic-version` and `content-type` headers. A `base_url` that already ends in `/v1` (the
//! OpenAI adapter's convention, and this crate's default) gets only `/messages`, so both
//! `https://api.anthropic.com` and `https://api.anthropic.com/v1` reach the same endpoint.

pub(crate) mod request;
pub(crate) mod response;
mod stream;
mod wire;

use std::fmt;

use futures_util::future::BoxFuture;
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use rein_core::{ChatRequest, EventStream, Failure, Provider, StreamEvent, WireFormat};

use crate::client::HttpClient;
use crate::config::{ANTHROPIC_DEFAULT_BASE_URL, AnthropicConfig, ConfigError};
use crate::secret::Redactor;
use crate::stream::{Reading, response_events};

use request::BodyOptions;
pub(crate) use stream::AnthropicDecoder;

/// An adapter for one Anthropic-format provider. Cheap to clone; shares the pooled client.
#[derive(Clone)]
pub struct AnthropicProvider {
    name: String,
    endpoint: crate::client::Endpoint,
    headers: HeaderMap,
    options: BodyOptions,
    limits: crate::config::ResponseLimits,
    client: HttpClient,
    redactor: Redactor,
}

impl AnthropicProvider {
    pub fn new(config: AnthropicConfig, client: HttpClient) -> Result<Self, ConfigError> {
        let (endpoint, headers, options) = Self::prepare(&config)?;
        let shown = config.base_url.as_deref().unwrap_or(ANTHROPIC_DEFAULT_BASE_URL);
        let endpoint =
            crate::live_endpoint(&client, &config.name, endpoint, shown, config.http_version)?;
        let redactor = Redactor::new(config.api_key.iter().chain(config.headers.values()));
        let (name, limits) = (config.name, config.limits);
        Ok(Self { name, endpoint, headers, options, limits, client, redactor })
    }

    /// Everything [`AnthropicProvider::new`] derives from `config` alone: the endpoint, the
    /// fixed headers and the body options, or what is wrong with the config.
    pub(crate) fn prepare(
        config: &AnthropicConfig,
    ) -> Result<(Url, HeaderMap, BodyOptions), ConfigError> {
        let name = config.name.clone();
        if name.trim().is_empty() {
            return Err(ConfigError::Empty { provider: name, key: "name" });
        }
        crate::check_limits(&name, config.limits)?;
        let base_url =
            config.base_url.clone().unwrap_or_else(|| ANTHROPIC_DEFAULT_BASE_URL.to_owned());
        let mut endpoint = crate::parse_base_url(&name, &base_url)?;
        let ends_in_version = endpoint
            .path_segments()
            .and_then(|mut segments| segments.rfind(|segment| !segment.is_empty()))
            == Some("v1");
        if ends_in_version {
            crate::append_path(&mut endpoint, &["messages"]);
        } else {
            crate::append_path(&mut endpoint, &["v1", "messages"]);
        }

        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let version = HeaderValue::from_str(&config.anthropic_version).map_err(|e| {
            ConfigError::InvalidHeader {
                provider: name.clone(),
                header: "anthropic_version".into(),
                reason: e.to_string(),
            }
        })?;
        headers.insert(HeaderName::from_static("anthropic-version"), version);
        crate::insert_static_headers(&name, &config.headers, &mut headers)?;
        if let Some(key) = config.api_key.as_ref().filter(|key| !key.is_empty()) {
            let mut value = HeaderValue::from_str(key.expose())
                .map_err(|_| ConfigError::InvalidApiKey { provider: name.clone() })?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-api-key"), value);
        }
        let options = BodyOptions {
            streaming: config.streaming,
            default_max_tokens: config.default_max_tokens,
            json_prefill: config.json_prefill,
        };
        Ok((endpoint, headers, options))
    }

    pub fn endpoint(&self) -> &Url {
        &self.endpoint.url
    }

    /// The request body this provider would send for `request`. Fails only when an assistant
    /// tool call's arguments are not JSON (Anthropic needs them as a JSON `input`).
    pub fn request_body(&self, request: &ChatRequest) -> Result<serde_json::Value, Failure> {
        request::build_body(request, self.options)
    }
}

impl fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("name", &self.name)
            .field("endpoint", &crate::redacted_url(&self.endpoint.url))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("options", &self.options)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn format(&self) -> WireFormat {
        WireFormat::Anthropic
    }

    fn send(&self, request: &ChatRequest) -> BoxFuture<'static, Result<EventStream, Failure>> {
        let sending = self
            .request_body(request)
            .map(|body| self.client.post(&self.endpoint, &self.headers, crate::to_bytes(&body)));
        let streaming = self.options.streaming;
        let redactor = self.redactor.clone();
        let reading = Reading {
            limits: self.limits,
            prefill: request::prefill(request, self.options),
            redactor: redactor.clone(),
        };
        let name = self.name.clone();
        Box::pin(async move {
            let scrub = |failure| redactor.failure(failure);
            let response = sending.map_err(scrub)?.await.map_err(scrub)?;
            response_events(
                &name,
                response,
                WireFormat::Anthropic,
                streaming,
                AnthropicDecoder::default(),
                response::parse_response,
                reading,
            )
            .await
        })
    }
}

/// Decodes a recorded Messages SSE body as a live stream would be decoded.
pub fn replay_anthropic_stream(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_sse(body, AnthropicDecoder::default())
}

/// Decodes a recorded Messages SSE body arriving in `chunks` (with `max_event_bytes` per
/// event) as a live stream cut into those chunks would be decoded. For the fuzz targets.
#[doc(hidden)]
pub fn replay_anthropic_stream_chunks(
    chunks: &[&[u8]],
    max_event_bytes: usize,
) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_sse_chunks(chunks, max_event_bytes, AnthropicDecoder::default())
}

/// Decodes a recorded non-streaming Messages body into the events it stands for.
pub fn replay_anthropic_response(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_json(body, response::parse_response)
}

/// The `anthropic_version` Bedrock's InvokeModel takes for Claude.
pub(crate) const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The body Bedrock's InvokeModel takes for a Claude model: this adapter's Messages body
/// without `model` (the URL names it) and `stream` (the path says it), with
/// `anthropic_version: bedrock-2023-05-31`. `extra` fields meant for Bedrock go in too.
pub(crate) fn bedrock_invoke_body(
    request: &ChatRequest,
    default_max_tokens: u32,
) -> Result<serde_json::Value, Failure> {
    let options = BodyOptions { streaming: false, default_max_tokens, json_prefill: None };
    let mut body = request::build_body(request, options)?;
    if let Some(object) = body.as_object_mut() {
        object.remove("model");
        object.remove("stream");
        object.insert("anthropic_version".into(), BEDROCK_ANTHROPIC_VERSION.into());
        if request.extra_format == Some(WireFormat::Bedrock) {
            crate::merge_extra(object, &request.extra);
        }
    }
    Ok(body)
}

/// The prefill an InvokeModel body for `request` carries, as for Anthropic's own API (decided
/// by the model id, which on Bedrock reads `anthropic.claude-…`).
pub(crate) fn bedrock_invoke_prefill(request: &ChatRequest) -> Option<&'static str> {
    let options = BodyOptions { streaming: false, default_max_tokens: 0, json_prefill: None };
    request::prefill(request, options)
}

pub(crate) use response::parse_response as parse_messages_response;
