//! The Gemini API adapter: `POST {base_url}/v1beta/models/{model}:generateContent`, or
//! `:streamGenerateContent?alt=sse` when streaming, with the API key in the `x-goog-api-key`
//! header (never in the URL, where Google's examples put it, because URLs land in logs). The
//! model is part of the path, so the endpoint is resolved per request; a model id written as
//! `models/NAME` is taken as `NAME`, and a `base_url` that already ends in `/v1beta` or `/v1`
//! gets only `models/...`. Errors are Google's `{"error": {"code", "message", "status",
//! "details"}}`, read by `http_error`.

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
use crate::config::{ConfigError, GEMINI_DEFAULT_BASE_URL, GeminiConfig};
use crate::secret::Redactor;
use crate::stream::{Reading, response_events};

pub(crate) use stream::GeminiDecoder;

/// An adapter for one Gemini API provider. Cheap to clone; shares the pooled client.
#[derive(Clone)]
pub struct GeminiProvider {
    name: String,
    base: Url,
    /// Whether `base` already names the API version.
    versioned: bool,
    headers: HeaderMap,
    streaming: bool,
    limits: crate::config::ResponseLimits,
    http_version: crate::config::HttpVersion,
    client: HttpClient,
    redactor: Redactor,
}

impl GeminiProvider {
    pub fn new(config: GeminiConfig, client: HttpClient) -> Result<Self, ConfigError> {
        let (base, versioned, headers) = Self::prepare(&config)?;
        // The endpoint depends on the model; one is resolved now so a bad base fails here.
        let shown = config.base_url.as_deref().unwrap_or(GEMINI_DEFAULT_BASE_URL);
        crate::live_endpoint(
            &client,
            &config.name,
            model_url(&base, versioned, "m", false),
            shown,
            config.http_version,
        )?;
        let redactor = Redactor::new(config.api_key.iter().chain(config.headers.values()));
        Ok(Self {
            name: config.name,
            base,
            versioned,
            headers,
            streaming: config.streaming,
            limits: config.limits,
            http_version: config.http_version,
            client,
            redactor,
        })
    }

    /// Everything [`GeminiProvider::new`] derives from `config` alone: the base URL, whether it
    /// names the version, and the fixed headers, or what is wrong with the config.
    pub(crate) fn prepare(config: &GeminiConfig) -> Result<(Url, bool, HeaderMap), ConfigError> {
        let name = config.name.clone();
        if name.trim().is_empty() {
            return Err(ConfigError::Empty { provider: name, key: "name" });
        }
        crate::check_limits(&name, config.limits)?;
        let base_url =
            config.base_url.clone().unwrap_or_else(|| GEMINI_DEFAULT_BASE_URL.to_owned());
        let base = crate::parse_base_url(&name, &base_url)?;
        let versioned = matches!(
            base.path_segments().and_then(|mut s| s.rfind(|segment| !segment.is_empty())),
            Some("v1beta" | "v1")
        );
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        crate::insert_static_headers(&name, &config.headers, &mut headers)?;
        if let Some(key) = config.api_key.as_ref().filter(|key| !key.is_empty()) {
            let mut value = HeaderValue::from_str(key.expose())
                .map_err(|_| ConfigError::InvalidApiKey { provider: name.clone() })?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-goog-api-key"), value);
        }
        Ok((base, versioned, headers))
    }

    /// Where a request for `model` goes.
    pub fn endpoint(&self, model: &str) -> Url {
        model_url(&self.base, self.versioned, model, self.streaming)
    }

    /// The request body this provider would send for `request`. Fails only when a tool call's
    /// arguments are not JSON, or a tool result answers no call in the conversation.
    pub fn request_body(&self, request: &ChatRequest) -> Result<serde_json::Value, Failure> {
        request::build_body(request)
    }
}

/// `{base}/v1beta/models/{model}:generateContent`, or the streaming method with `alt=sse`.
fn model_url(base: &Url, versioned: bool, model: &str, streaming: bool) -> Url {
    let model = model.strip_prefix("models/").unwrap_or(model);
    let method = if streaming { "streamGenerateContent" } else { "generateContent" };
    let resource = format!("{model}:{method}");
    let mut url = base.clone();
    if versioned {
        crate::append_path(&mut url, &["models", &resource]);
    } else {
        crate::append_path(&mut url, &["v1beta", "models", &resource]);
    }
    if streaming {
        url.set_query(Some("alt=sse"));
    }
    url
}

impl fmt::Debug for GeminiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeminiProvider")
            .field("name", &self.name)
            .field("base", &crate::redacted_url(&self.base))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("streaming", &self.streaming)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Provider for GeminiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn format(&self) -> WireFormat {
        WireFormat::Gemini
    }

    fn send(&self, request: &ChatRequest) -> BoxFuture<'static, Result<EventStream, Failure>> {
        let endpoint = self
            .client
            .endpoint(self.endpoint(&request.model), self.http_version)
            .map_err(|error| Failure::Unsendable {
                detail: format!("the model id makes no valid URL: {error}"),
            });
        let sending = match (&endpoint, self.request_body(request)) {
            (Ok(endpoint), Ok(body)) => {
                Ok(self.client.post(endpoint, &self.headers, crate::to_bytes(&body)))
            }
            (Err(failure), _) => Err(failure.clone()),
            (_, Err(failure)) => Err(failure),
        };
        let streaming = self.streaming;
        let redactor = self.redactor.clone();
        let reading = Reading { limits: self.limits, prefill: None, redactor: redactor.clone() };
        let name = self.name.clone();
        Box::pin(async move {
            let scrub = |failure| redactor.failure(failure);
            let response = sending.map_err(scrub)?.await.map_err(scrub)?;
            response_events(
                &name,
                response,
                WireFormat::Gemini,
                streaming,
                GeminiDecoder::default(),
                response::parse_response,
                reading,
            )
            .await
        })
    }
}

/// Decodes a recorded `streamGenerateContent?alt=sse` body as a live stream would be decoded.
pub fn replay_gemini_stream(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_sse(body, GeminiDecoder::default())
}

/// Decodes a recorded non-streaming `generateContent` body into the events it stands for.
pub fn replay_gemini_response(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_json(body, response::parse_response)
}
