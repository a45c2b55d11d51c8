//! The Amazon Bedrock adapter, on the Converse API (one format for every Bedrock model,
//! Anthropic's included): `POST {base_url}/model/{model}/converse`, or `/converse-stream`
//! when streaming, whose answer is AWS event-stream frames rather than SSE. With
//! [`BedrockApi::Invoke`] it speaks InvokeModel instead, for Claude models: `/invoke` (or
//! `/invoke-with-response-stream`) with Anthropic's Messages body (built by the Anthropic
//! adapter, `anthropic_version: bedrock-2023-05-31`, no `model` or `stream`); the answer is a
//! Messages body, or event-stream `chunk` frames each carrying one Anthropic stream event in
//! base64, decoded by the Anthropic adapter's decoder (`stream`). Every request is
//! signed with SigV4 (`sign`) for the `bedrock` service in the provider's region, at the
//! moment it is sent. The model id is percent-encoded into the path as the AWS SDKs do
//! (`anthropic.claude-3-haiku-20240307-v1%3A0`). Errors carry their type in the
//! `x-amzn-ErrorType` header (`ThrottlingException:http://...`), read by
//! [`parse_http_error`](crate::parse_http_error) and classified in rein-core.

mod request;
mod response;
mod sign;
mod stream;

use std::fmt;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue};

use rein_core::{ChatRequest, EventStream, Failure, Provider, StreamEvent, WireFormat};

use crate::client::{HttpClient, Upstream};
use crate::config::{BedrockApi, BedrockConfig, ConfigError, HttpVersion, ResponseLimits};
use crate::secret::Redactor;
use crate::stream::{JsonParser, Reading};

pub use sign::{AwsCredentials, SigningScope, sigv4_headers};
use stream::{EventStreamPump, event_stream_events};

/// The content type of a ConverseStream answer.
pub const EVENT_STREAM_CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// The SigV4 signing name of Bedrock Runtime.
const SERVICE: &str = "bedrock";

/// An adapter for one Bedrock provider. Cheap to clone; shares the pooled client.
#[derive(Clone)]
pub struct BedrockProvider {
    name: String,
    base_url: Url,
    region: String,
    credentials: AwsCredentials,
    streaming: bool,
    api: BedrockApi,
    default_max_tokens: u32,
    limits: ResponseLimits,
    http_version: HttpVersion,
    client: HttpClient,
    redactor: Redactor,
}

impl BedrockProvider {
    pub fn new(config: BedrockConfig, client: HttpClient) -> Result<Self, ConfigError> {
        let (base_url, credentials) = Self::prepare(&config)?;
        // The endpoint is per model; checking the base once here surfaces a bad URL at start.
        let shown = crate::redacted_url(&base_url);
        crate::live_endpoint(&client, &config.name, base_url.clone(), &shown, config.http_version)?;
        let redactor = Redactor::new(
            [&credentials.access_key_id, &credentials.secret_access_key]
                .into_iter()
                .chain(credentials.session_token.as_ref()),
        );
        Ok(Self {
            name: config.name,
            base_url,
            region: config.region,
            credentials,
            streaming: config.streaming,
            api: config.api,
            default_max_tokens: config.default_max_tokens,
            limits: config.limits,
            http_version: config.http_version,
            client,
            redactor,
        })
    }

    /// Everything [`BedrockProvider::new`] derives from `config` alone: the base URL and the
    /// credentials, or what is wrong with the config.
    pub(crate) fn prepare(config: &BedrockConfig) -> Result<(Url, AwsCredentials), ConfigError> {
        let name = config.name.clone();
        if name.trim().is_empty() {
            return Err(ConfigError::Empty { provider: name, key: "name" });
        }
        let region = config.region.trim();
        if region.is_empty() {
            return Err(ConfigError::Empty { provider: name, key: "region" });
        }
        crate::check_limits(&name, config.limits)?;
        let base_url = config
            .base_url
            .clone()
            .unwrap_or_else(|| format!("https://bedrock-runtime.{region}.amazonaws.com"));
        let base_url = crate::parse_base_url(&name, &base_url)?;
        let present = |secret: &Option<crate::Secret>, key| {
            secret
                .clone()
                .filter(|secret| !secret.is_empty())
                .ok_or(ConfigError::MissingAwsCredential { provider: name.clone(), key })
        };
        let credentials = AwsCredentials {
            access_key_id: present(&config.access_key_id, "access_key_id")?,
            secret_access_key: present(&config.secret_access_key, "secret_access_key")?,
            session_token: config.session_token.clone().filter(|token| !token.is_empty()),
        };
        Ok((base_url, credentials))
    }

    /// The URL a request for `model` goes to.
    pub fn endpoint_for(&self, model: &str) -> Url {
        let action = match (self.api, self.streaming) {
            (BedrockApi::Converse, false) => "converse",
            (BedrockApi::Converse, true) => "converse-stream",
            (BedrockApi::Invoke, false) => "invoke",
            (BedrockApi::Invoke, true) => "invoke-with-response-stream",
        };
        let mut url = self.base_url.clone();
        let base = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{base}/model/{}/{action}", encode_label(model)));
        url
    }

    /// The request body this provider would send for `request`.
    pub fn request_body(&self, request: &ChatRequest) -> Result<serde_json::Value, Failure> {
        match self.api {
            BedrockApi::Converse => request::build_body(request, self.default_max_tokens),
            BedrockApi::Invoke => {
                crate::anthropic::bedrock_invoke_body(request, self.default_max_tokens)
            }
        }
    }

    /// The signed request (signed at `now`, since the Unix epoch): endpoint, headers, body.
    fn signed(
        &self,
        request: &ChatRequest,
        now: Duration,
    ) -> Result<(crate::client::Endpoint, HeaderMap, bytes::Bytes), Failure> {
        let body = crate::to_bytes(&self.request_body(request)?);
        let url = self.endpoint_for(&request.model);
        let unsendable = |detail: String| Failure::Unsendable { detail };
        let host = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => return Err(unsendable("the endpoint has no host".into())),
        };
        let accept = if self.streaming { EVENT_STREAM_CONTENT_TYPE } else { "application/json" };
        let to_sign = [("host", host.as_str()), ("content-type", "application/json")];
        let scope = SigningScope { region: &self.region, service: SERVICE, time: now };
        let added = sigv4_headers(&self.credentials, scope, "POST", url.as_str(), &to_sign, &body)
            .map_err(unsendable)?;
        let mut headers = HeaderMap::new();
        let invalid = |_| unsendable("a signed header is not a valid HTTP header".into());
        headers.insert(HOST, HeaderValue::from_str(&host).map_err(invalid)?);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        for (name, value) in added {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| unsendable("a signed header name is not valid".into()))?;
            let mut value = HeaderValue::from_str(&value).map_err(invalid)?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let endpoint =
            self.client.endpoint(url, self.http_version).map_err(|error| Failure::Unsendable {
                detail: format!("the model's endpoint is not a valid URI: {error}"),
            })?;
        Ok((endpoint, headers, body))
    }
}

/// Percent-encodes a path label as the AWS SDKs do: everything but unreserved characters.
fn encode_label(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    for byte in label.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl fmt::Debug for BedrockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BedrockProvider")
            .field("name", &self.name)
            .field("base_url", &crate::redacted_url(&self.base_url))
            .field("region", &self.region)
            .field("credentials", &self.credentials)
            .field("streaming", &self.streaming)
            .field("api", &self.api)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Provider for BedrockProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn format(&self) -> WireFormat {
        WireFormat::Bedrock
    }

    fn send(&self, request: &ChatRequest) -> BoxFuture<'static, Result<EventStream, Failure>> {
        let sending = self
            .signed(request, Duration::from_millis(rein_core::clock::unix_ms()))
            .map(|(endpoint, headers, body)| self.client.post(&endpoint, &headers, body));
        let redactor = self.redactor.clone();
        let (prefill, parse): (_, JsonParser) = match self.api {
            BedrockApi::Converse => (None, response::parse_response),
            BedrockApi::Invoke => (
                crate::anthropic::bedrock_invoke_prefill(request),
                crate::anthropic::parse_messages_response,
            ),
        };
        let reading = Reading { limits: self.limits, prefill, redactor: redactor.clone() };
        let (name, model, streaming) = (self.name.clone(), request.model.clone(), self.streaming);
        Box::pin(async move {
            let scrub = |failure| redactor.failure(failure);
            let response = sending.map_err(scrub)?.await.map_err(scrub)?;
            response_events(&name, &model, response, streaming, parse, reading).await
        })
    }
}

/// Turns response headers into the attempt's outcome, as `crate::stream::response_events`
/// does for SSE providers: an error status becomes [`Failure::Http`]; a success is read as
/// event-stream frames or JSON by `content-type` (falling back to what was asked for), the JSON
/// by `parse` (a Converse or a Messages body).
async fn response_events(
    provider: &str,
    model: &str,
    response: Upstream,
    streaming: bool,
    parse: JsonParser,
    reading: Reading,
) -> Result<EventStream, Failure> {
    let Upstream { status, headers, body } = response;
    if !status.is_success() {
        let body = crate::client::read_error_body(body).await;
        let http = crate::parse_http_error(WireFormat::Bedrock, status.as_u16(), &headers, &body);
        tracing::debug!(provider, status = http.status, error_type = ?http.error_type, "provider error response");
        return Err(reading.redactor.failure(Failure::Http { format: WireFormat::Bedrock, http }));
    }
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > reading.limits.max_response_bytes as u64) {
        return Err(reading.too_large());
    }
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let frames = if content_type.starts_with(EVENT_STREAM_CONTENT_TYPE) {
        true
    } else if content_type.starts_with("application/json") {
        false
    } else {
        streaming
    };
    let redactor = reading.redactor.clone();
    let events = if frames {
        event_stream_events(body, EventStreamPump::new(model, reading))
    } else {
        let model = model.to_owned();
        crate::stream::json_events(body, parse, reading)
            .map(move |item| match item {
                Ok(StreamEvent::Start { id, model: said }) if said.is_empty() => {
                    Ok(StreamEvent::Start { id, model: model.clone() })
                }
                other => other,
            })
            .boxed()
    };
    Ok(events.map(move |item| item.map_err(|failure| redactor.failure(failure))).boxed())
}

/// Decodes a recorded ConverseStream or InvokeModelWithResponseStream body (event-stream frames)
/// as a live stream would be.
pub fn replay_bedrock_stream(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    stream::replay_event_stream(body)
}

/// Decodes a recorded non-streaming Converse or InvokeModel body into the events it stands for:
/// an InvokeModel answer for Claude is a Messages body (`"type": "message"`).
pub fn replay_bedrock_response(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    let messages = serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|json| json.get("type").and_then(serde_json::Value::as_str) == Some("message"));
    if messages {
        crate::stream::replay_json(body, crate::anthropic::parse_messages_response)
    } else {
        crate::stream::replay_json(body, response::parse_response)
    }
}
