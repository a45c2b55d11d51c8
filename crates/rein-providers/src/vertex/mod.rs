//! The Google Vertex AI adapter, for Claude and for Gemini. Claude (`publisher = anthropic`):
//! `POST {base}/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`
//! (`:streamRawPredict` when streaming), the Anthropic Messages body without `model` and with
//! `"anthropic_version": "vertex-2023-10-16"`, read by the Anthropic adapter's decoders. Gemini
//! (`publisher = google`): `.../publishers/google/models/{model}:generateContent`
//! (`:streamGenerateContent?alt=sse`), the Gemini adapter's body and decoders. The base is
//! `https://{region}-aiplatform.googleapis.com`, or `https://aiplatform.googleapis.com` for
//! the `global` region. Every request carries `Authorization: Bearer <token>` from
//! [`auth`]'s cache; a 401 drops that token so the next attempt fetches another.
//!
//! Errors come as Google's `{"error": {"code", "message", "status", "details"}}` for both
//! publishers, and Claude can also answer Anthropic's own (`overloaded_error`, 529): the body's
//! shape decides how it is read, and a Google body is reported as [`WireFormat::Gemini`]'s so
//! rein-core reads its google.rpc status and `RetryInfo`.

mod auth;

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;
use reqwest::Url;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use rein_core::{ChatRequest, EventStream, Failure, Provider, WireFormat};

use crate::anthropic::AnthropicDecoder;
use crate::anthropic::request::BodyOptions;
use crate::client::HttpClient;
use crate::config::{
    ConfigError, HttpVersion, ResponseLimits, VERTEX_ANTHROPIC_VERSION, VertexConfig,
    VertexPublisher,
};
use crate::gemini::GeminiDecoder;
use crate::secret::{Redactor, Secret};
use crate::stream::{Reading, response_events};

pub use auth::{JWT_BEARER_GRANT, METADATA_TOKEN_PATH};

/// An adapter for one Vertex AI provider. Cheap to clone; shares the pooled client and the
/// token cache.
#[derive(Clone)]
pub struct VertexProvider {
    name: String,
    base: Url,
    project: String,
    region: String,
    publisher: VertexPublisher,
    options: BodyOptions,
    limits: ResponseLimits,
    http_version: HttpVersion,
    client: HttpClient,
    tokens: auth::TokenSource,
    redactor: Redactor,
}

impl VertexProvider {
    pub fn new(config: VertexConfig, client: HttpClient) -> Result<Self, ConfigError> {
        let (base, prepared) = Self::prepare(&config)?;
        let shown = base.to_string();
        crate::live_endpoint(
            &client,
            &config.name,
            model_url(&base, &config, "m"),
            &shown,
            config.http_version,
        )?;
        let format = format_of(config.publisher);
        let tokens = auth::TokenSource::new(
            &config.name,
            prepared,
            format,
            client.clone(),
            Duration::from_millis(config.token_refresh_margin_ms),
            Duration::from_millis(config.token_timeout_ms),
        )?;
        let redactor = match &config.credentials {
            crate::VertexCredentials::ServiceAccount { key, .. } => {
                Redactor::new([&key.private_key])
            }
            crate::VertexCredentials::Metadata { .. } => Redactor::default(),
        };
        Ok(Self {
            options: BodyOptions {
                streaming: config.streaming,
                default_max_tokens: config.default_max_tokens,
                json_prefill: config.json_prefill,
            },
            name: config.name,
            base,
            project: config.project,
            region: config.region,
            publisher: config.publisher,
            limits: config.limits,
            http_version: config.http_version,
            client,
            tokens,
            redactor,
        })
    }

    /// Everything [`VertexProvider::new`] derives from `config` alone: the base URL and the
    /// checked credentials, or what is wrong with the config.
    pub(crate) fn prepare(config: &VertexConfig) -> Result<(Url, auth::Prepared), ConfigError> {
        let name = config.name.clone();
        for (key, value) in [("name", &config.name), ("project", &config.project)] {
            if value.trim().is_empty() {
                return Err(ConfigError::Empty { provider: name, key });
            }
        }
        if config.region.trim().is_empty() {
            return Err(ConfigError::Empty { provider: name, key: "region" });
        }
        if !config.region.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(ConfigError::InvalidSetting {
                provider: name,
                key: "region",
                reason: format!(
                    "`{}` is not a Vertex location (like `us-east5`, `europe-west1` or `global`)",
                    config.region
                ),
            });
        }
        crate::check_limits(&name, config.limits)?;
        let base_url = config.base_url.clone().unwrap_or_else(|| default_base_url(&config.region));
        let base = crate::parse_base_url(&name, &base_url)?;
        let prepared = auth::prepare(&name, &config.credentials)?;
        Ok((base, prepared))
    }

    /// Where a request for `model` goes.
    pub fn endpoint(&self, model: &str) -> Url {
        endpoint_url(
            &self.base,
            &self.project,
            &self.region,
            self.publisher,
            model,
            self.options.streaming,
        )
    }

    /// Where tokens come from, in words (no secret).
    pub fn token_source(&self) -> &str {
        self.tokens.label()
    }

    /// The request body this provider would send for `request`: Anthropic's Messages body
    /// without `model` and with `anthropic_version`, or Gemini's `generateContent` body.
    pub fn request_body(&self, request: &ChatRequest) -> Result<Value, Failure> {
        match self.publisher {
            VertexPublisher::Anthropic => {
                let mut body = crate::anthropic::request::build_body(request, self.options)?;
                if let Some(object) = body.as_object_mut() {
                    object.remove("model");
                    object.insert("anthropic_version".into(), json!(VERTEX_ANTHROPIC_VERSION));
                }
                Ok(body)
            }
            VertexPublisher::Google => crate::gemini::request::build_body(request),
        }
    }
}

/// `https://{region}-aiplatform.googleapis.com`, or `https://aiplatform.googleapis.com` for
/// the `global` region.
pub fn default_base_url(region: &str) -> String {
    match region.trim() {
        "global" => "https://aiplatform.googleapis.com".to_owned(),
        region => format!("https://{region}-aiplatform.googleapis.com"),
    }
}

fn format_of(publisher: VertexPublisher) -> WireFormat {
    match publisher {
        VertexPublisher::Anthropic => WireFormat::Anthropic,
        VertexPublisher::Google => WireFormat::Gemini,
    }
}

fn model_url(base: &Url, config: &VertexConfig, model: &str) -> Url {
    endpoint_url(base, &config.project, &config.region, config.publisher, model, config.streaming)
}

/// `{base}/v1/projects/{project}/locations/{region}/publishers/{publisher}/models/{model}:{method}`.
fn endpoint_url(
    base: &Url,
    project: &str,
    region: &str,
    publisher: VertexPublisher,
    model: &str,
    streaming: bool,
) -> Url {
    let method = match (publisher, streaming) {
        (VertexPublisher::Anthropic, false) => "rawPredict",
        (VertexPublisher::Anthropic, true) => "streamRawPredict",
        (VertexPublisher::Google, false) => "generateContent",
        (VertexPublisher::Google, true) => "streamGenerateContent",
    };
    let resource = format!("{model}:{method}");
    let mut url = base.clone();
    crate::append_path(
        &mut url,
        &[
            "v1",
            "projects",
            project,
            "locations",
            region,
            "publishers",
            publisher.as_str(),
            "models",
            &resource,
        ],
    );
    if publisher == VertexPublisher::Google && streaming {
        url.set_query(Some("alt=sse"));
    }
    url
}

impl fmt::Debug for VertexProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VertexProvider")
            .field("name", &self.name)
            .field("base", &crate::redacted_url(&self.base))
            .field("project", &self.project)
            .field("region", &self.region)
            .field("publisher", &self.publisher)
            .field("tokens", &self.tokens.label())
            .field("options", &self.options)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Provider for VertexProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn format(&self) -> WireFormat {
        format_of(self.publisher)
    }

    fn send(&self, request: &ChatRequest) -> BoxFuture<'static, Result<EventStream, Failure>> {
        let endpoint = self
            .client
            .endpoint(self.endpoint(&request.model), self.http_version)
            .map_err(|error| Failure::Unsendable {
                detail: format!("the model id makes no valid URL: {error}"),
            });
        let body = self.request_body(request);
        let prefill = match self.publisher {
            VertexPublisher::Anthropic => crate::anthropic::request::prefill(request, self.options),
            VertexPublisher::Google => None,
        };
        let (client, tokens, redactor) =
            (self.client.clone(), self.tokens.clone(), self.redactor.clone());
        let (name, publisher, streaming) =
            (self.name.clone(), self.publisher, self.options.streaming);
        let reading = Reading { limits: self.limits, prefill, redactor: redactor.clone() };
        Box::pin(async move {
            let scrub = |failure| redactor.failure(failure);
            let (endpoint, body) = (endpoint?, body?);
            let token = tokens.token().await.map_err(scrub)?;
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(AUTHORIZATION, bearer(&token)?);
            let upstream =
                client.post(&endpoint, &headers, crate::to_bytes(&body)).await.map_err(scrub)?;
            let format = format_of(publisher);
            if !upstream.status.is_success() {
                let status = upstream.status.as_u16();
                if status == 401 {
                    tokens.drop_token(&token).await;
                }
                let body = crate::client::read_error_body(upstream.body).await;
                let format = match crate::http_error::is_google_error(&body) {
                    true => WireFormat::Gemini,
                    false => format,
                };
                let http = crate::parse_http_error(format, status, &upstream.headers, &body);
                tracing::debug!(provider = %name, status, error_type = ?http.error_type, "vertex error response");
                return Err(scrub(Failure::Http { format, http }));
            }
            match publisher {
                VertexPublisher::Anthropic => {
                    response_events(
                        &name,
                        upstream,
                        format,
                        streaming,
                        AnthropicDecoder::default(),
                        crate::anthropic::response::parse_response,
                        reading,
                    )
                    .await
                }
                VertexPublisher::Google => {
                    response_events(
                        &name,
                        upstream,
                        format,
                        streaming,
                        GeminiDecoder::default(),
                        crate::gemini::response::parse_response,
                        reading,
                    )
                    .await
                }
            }
        })
    }
}

/// The `Authorization` value, marked sensitive so the HTTP stack never prints it.
fn bearer(token: &Secret) -> Result<HeaderValue, Failure> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
        Failure::Malformed { detail: "the access token is not a valid HTTP header value".into() }
    })?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_global_region_has_no_region_in_the_host() {
        assert_eq!(default_base_url("global"), "https://aiplatform.googleapis.com");
        assert_eq!(default_base_url("us-east5"), "https://us-east5-aiplatform.googleapis.com");
    }
}
