//! The OpenAI Chat Completions adapter: `POST {base_url}/chat/completions` with
//! `Authorization: Bearer KEY`, for api.openai.com, any OpenAI-compatible server by base URL
//! (vLLM, Ollama, llama.cpp, gateways), and Azure OpenAI deployments
//! (`{base_url}/openai/deployments/{deployment}/chat/completions?api-version=..` with an
//! `api-key` header). With `api = responses` the same provider calls OpenAI's Responses API
//! instead (`{base_url}/responses`; Azure `{base_url}/openai/v1/responses`, or with a dated
//! `api_version` `{base_url}/openai/responses?api-version=..`): see
//! [`responses`].

mod chunk_scan;
mod request;
mod response;
mod responses;
mod stream;
mod wire;

use std::fmt;

use futures_util::future::BoxFuture;
use reqwest::Url;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};

use rein_core::{ChatRequest, EventStream, Failure, Provider, StreamEvent, WireFormat};

use crate::client::HttpClient;
use crate::config::{
    ConfigError, MaxTokensField, OPENAI_DEFAULT_BASE_URL, OpenAiApi, OpenAiAuth, OpenAiConfig,
};
use crate::secret::Redactor;
use crate::stream::{Reading, response_events};

pub(crate) use request::BodyOptions;
#[cfg(test)]
pub(crate) use response::parse_response as parse_openai_response;
pub use responses::{replay_responses_response, replay_responses_stream};
pub(crate) use stream::OpenAiDecoder;

/// An adapter for one OpenAI-format provider. Cheap to clone; shares the pooled client.
#[derive(Clone)]
pub struct OpenAiProvider {
    name: String,
    endpoint: crate::client::Endpoint,
    headers: HeaderMap,
    options: BodyOptions,
    /// The API called and, for the Responses API on Azure, the deployment sent as `model`.
    api: OpenAiApi,
    deployment: Option<String>,
    limits: crate::config::ResponseLimits,
    client: HttpClient,
    redactor: Redactor,
}

impl OpenAiProvider {
    pub fn new(config: OpenAiConfig, client: HttpClient) -> Result<Self, ConfigError> {
        let (endpoint, headers, options) = Self::prepare(&config)?;
        let shown = config.base_url.as_deref().unwrap_or(OPENAI_DEFAULT_BASE_URL);
        let endpoint =
            crate::live_endpoint(&client, &config.name, endpoint, shown, config.http_version)?;
        let redactor = Redactor::new(config.api_key.iter().chain(config.headers.values()));
        let (name, limits, api) = (config.name, config.limits, config.api);
        let deployment = config.azure.map(|azure| azure.deployment);
        Ok(Self { name, endpoint, headers, options, api, deployment, limits, client, redactor })
    }

    /// Everything [`OpenAiProvider::new`] derives from `config` alone: the endpoint, the fixed
    /// headers and the body options, or what is wrong with the config.
    pub(crate) fn prepare(
        config: &OpenAiConfig,
    ) -> Result<(Url, HeaderMap, BodyOptions), ConfigError> {
        let name = config.name.clone();
        if name.trim().is_empty() {
            return Err(ConfigError::Empty { provider: name, key: "name" });
        }
        crate::check_limits(&name, config.limits)?;
        let base_url = match (&config.base_url, &config.azure) {
            (Some(url), _) => url.clone(),
            (None, Some(_)) => return Err(ConfigError::AzureNeedsBaseUrl { provider: name }),
            (None, None) => OPENAI_DEFAULT_BASE_URL.to_owned(),
        };
        let mut endpoint = crate::parse_base_url(&name, &base_url)?;
        match &config.azure {
            Some(azure) => {
                if azure.deployment.trim().is_empty() {
                    return Err(ConfigError::Empty { provider: name, key: "azure.deployment" });
                }
                match config.api {
                    OpenAiApi::ChatCompletions => {
                        if azure.api_version.trim().is_empty() {
                            return Err(ConfigError::Empty {
                                provider: name,
                                key: "azure.api_version",
                            });
                        }
                        crate::append_path(
                            &mut endpoint,
                            &["openai", "deployments", &azure.deployment, "chat", "completions"],
                        );
                        endpoint.query_pairs_mut().append_pair("api-version", &azure.api_version);
                    }
                    // The deployment goes in `model`. Azure's v1 API needs no version (`preview`
                    // opts into preview features); a dated version (`2025-04-01-preview`) is
                    // the earlier `/openai/responses?api-version=..` endpoint.
                    OpenAiApi::Responses => {
                        let version = azure.api_version.trim();
                        let dated = version.starts_with(|c: char| c.is_ascii_digit());
                        let path: &[&str] = if dated {
                            &["openai", "responses"]
                        } else {
                            &["openai", "v1", "responses"]
                        };
                        crate::append_path(&mut endpoint, path);
                        if !version.is_empty() {
                            endpoint.query_pairs_mut().append_pair("api-version", version);
                        }
                    }
                }
            }
            None => match config.api {
                OpenAiApi::ChatCompletions => {
                    crate::append_path(&mut endpoint, &["chat", "completions"])
                }
                OpenAiApi::Responses => crate::append_path(&mut endpoint, &["responses"]),
            },
        }

        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        crate::insert_static_headers(&name, &config.headers, &mut headers)?;
        if let Some(key) = config.api_key.as_ref().filter(|key| !key.is_empty()) {
            let auth = config.auth.unwrap_or(if config.azure.is_some() {
                OpenAiAuth::ApiKey
            } else {
                OpenAiAuth::Bearer
            });
            let (header, value) = match auth {
                OpenAiAuth::Bearer => (AUTHORIZATION, format!("Bearer {}", key.expose())),
                OpenAiAuth::ApiKey => {
                    (reqwest::header::HeaderName::from_static("api-key"), key.expose().to_owned())
                }
            };
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| ConfigError::InvalidApiKey { provider: name.clone() })?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }

        let max_tokens_field =
            config.max_tokens_field.unwrap_or(if endpoint.host_str() == Some("api.openai.com") {
                MaxTokensField::MaxCompletionTokens
            } else {
                MaxTokensField::MaxTokens
            });
        let options = BodyOptions { streaming: config.streaming, max_tokens_field };
        Ok((endpoint, headers, options))
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint.url
    }

    /// The request body this provider would send for `request`: Chat Completions or Responses,
    /// as configured. (A request the Responses API cannot carry, one with stop sequences, is
    /// refused when sent.)
    pub fn request_body(&self, request: &ChatRequest) -> serde_json::Value {
        match self.api {
            OpenAiApi::ChatCompletions => request::build_body(request, self.options),
            OpenAiApi::Responses => {
                responses::build_body(request, self.options.streaming, self.deployment.as_deref())
            }
        }
    }
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values may be credentials: names only.
        f.debug_struct("OpenAiProvider")
            .field("name", &self.name)
            .field("endpoint", &crate::redacted_url(&self.endpoint.url))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("options", &self.options)
            .field("api", &self.api)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn format(&self) -> WireFormat {
        WireFormat::OpenAi
    }

    fn send(&self, request: &ChatRequest) -> BoxFuture<'static, Result<EventStream, Failure>> {
        if self.api == OpenAiApi::Responses {
            return self.send_responses(request);
        }
        let body = request::body_bytes(request, self.options);
        let sending = self.client.post(&self.endpoint, &self.headers, body);
        let streaming = self.options.streaming;
        let redactor = self.redactor.clone();
        let reading = Reading { limits: self.limits, prefill: None, redactor: redactor.clone() };
        let name = self.name.clone();
        Box::pin(async move {
            let response = sending.await.map_err(|failure| redactor.failure(failure))?;
            response_events(
                &name,
                response,
                WireFormat::OpenAi,
                streaming,
                OpenAiDecoder::default(),
                response::parse_response,
                reading,
            )
            .await
        })
    }
}

impl OpenAiProvider {
    /// [`Provider::send`] through the Responses API.
    fn send_responses(
        &self,
        request: &ChatRequest,
    ) -> BoxFuture<'static, Result<EventStream, Failure>> {
        let streaming = self.options.streaming;
        if let Some(failure) = responses::unsendable(request) {
            return Box::pin(std::future::ready(Err(failure)));
        }
        let body = responses::build_body(request, streaming, self.deployment.as_deref());
        let body = crate::to_bytes(&body);
        let sending = self.client.post(&self.endpoint, &self.headers, body);
        let redactor = self.redactor.clone();
        let reading = Reading { limits: self.limits, prefill: None, redactor: redactor.clone() };
        let name = self.name.clone();
        Box::pin(async move {
            let response = sending.await.map_err(|failure| redactor.failure(failure))?;
            response_events(
                &name,
                response,
                WireFormat::OpenAi,
                streaming,
                responses::ResponsesDecoder::default(),
                responses::parse_response,
                reading,
            )
            .await
        })
    }
}

/// Decodes a recorded Chat Completions SSE body as a live stream would be decoded.
pub fn replay_openai_stream(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_sse(body, OpenAiDecoder::default())
}

/// Decodes a recorded Chat Completions SSE body arriving in `chunks` (with `max_event_bytes` per
/// event) as a live stream cut into those chunks would be decoded. For the fuzz targets.
#[doc(hidden)]
pub fn replay_openai_stream_chunks(
    chunks: &[&[u8]],
    max_event_bytes: usize,
) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_sse_chunks(chunks, max_event_bytes, OpenAiDecoder::default())
}

/// Decodes a recorded non-streaming Chat Completions body into the events it stands for.
pub fn replay_openai_response(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_json(body, response::parse_response)
}
