//! What was observed when an attempt failed, before anyone decides what it means.
//!
//! Adapters and the engine's clocks produce a [`Failure`]; [`crate::classify`](mod@crate::classify) is the one place
//! that turns it into a decision. A `Failure` records facts (status, the body's error type and
//! code, the server's pushback headers, which clock fired), never a verdict.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which provider wire format produced an error body. Classification reads some codes
/// differently per format (Anthropic's 529 has no OpenAI equivalent, for instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WireFormat {
    #[serde(rename = "openai")]
    OpenAi,
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Amazon Bedrock's Converse API: errors are typed by the `x-amzn-ErrorType` header
    /// (`ThrottlingException`, ...), streams are AWS event-stream frames.
    #[serde(rename = "bedrock")]
    Bedrock,
    /// Google's Gemini API (`generateContent`): errors are `{"error": {"code", "message",
    /// "status", "details"}}`, and the adapter reads `status` as the error type.
    #[serde(rename = "gemini")]
    Gemini,
}

/// One of the clocks that bound an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// Establishing the connection and receiving response headers.
    Connect,
    /// From sending the request until the first token of the answer.
    FirstToken,
    /// Between two events once the stream has started producing tokens.
    StreamIdle,
    /// The cap on one whole attempt.
    Attempt,
}

impl Clock {
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::Connect => "connect",
            Clock::FirstToken => "first_token",
            Clock::StreamIdle => "stream_idle",
            Clock::Attempt => "attempt",
        }
    }
}

/// An HTTP error response, as parsed from its status, body and headers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HttpError {
    pub status: u16,
    /// `error.type` from the body (OpenAI `invalid_request_error`, Anthropic `overloaded_error`;
    /// Gemini's `error.status`, `RESOURCE_EXHAUSTED`).
    pub error_type: Option<String>,
    /// `error.code` from the body (OpenAI `insufficient_quota`, `context_length_exceeded`;
    /// for Gemini the `ErrorInfo` reason, `API_KEY_INVALID`, or the `QuotaFailure`'s quota id).
    pub code: Option<String>,
    /// `error.message` from the body, or the raw body text when it was not JSON.
    pub message: String,
    /// The server's requested wait, from `retry-after-ms` or `retry-after` (seconds or date).
    pub retry_after: Option<Duration>,
    /// The `x-should-retry` header, when present.
    pub should_retry: Option<bool>,
    /// The provider's request id (`x-request-id`, `request-id`), for support tickets.
    pub request_id: Option<String>,
}

/// What went wrong with one attempt.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Failure {
    /// The provider answered with an error status.
    #[error("{format:?} returned HTTP {}: {}", http.status, http.message)]
    Http { format: WireFormat, http: HttpError },
    /// No response headers arrived: refused, reset, DNS or TLS failure.
    #[error("connection failed before a response: {detail}")]
    Connection { detail: String },
    /// rein could not open a connection on its own host: out of file descriptors, sockets or
    /// memory. Nothing reached the provider, so this says nothing about its health.
    #[error("rein could not open a connection on this host: {detail}")]
    LocalResources { detail: String },
    /// One of rein's clocks fired.
    #[error("the {} clock fired after {} ms", clock.as_str(), after.as_millis())]
    ClockFired { clock: Clock, after: Duration },
    /// The provider sent an error event inside a stream that had already started.
    #[error("error event mid-stream: {message}")]
    StreamError {
        format: WireFormat,
        error_type: Option<String>,
        code: Option<String>,
        message: String,
    },
    /// The adapter could not express the request in this provider's format (e.g. tool
    /// arguments that are not JSON, for a provider that needs them parsed). Nothing was sent.
    #[error("the request cannot be sent in this provider's format: {detail}")]
    Unsendable { detail: String },
    /// The stream ended before the model's stop reason arrived: the answer is cut off.
    #[error("stream ended before the answer was complete")]
    StreamCut,
    /// A chunk or body could not be understood.
    #[error("malformed response: {detail}")]
    Malformed { detail: String },
    /// The response passed one of the provider's size limits and was not read further: a
    /// body that never ends, an endless stream, or one event larger than any real answer.
    #[error("the response exceeded the provider's `{}` ({limit_bytes} bytes); not read further", limit.key())]
    ResponseTooLarge { limit: ResponseLimit, limit_bytes: u64 },
}

/// Which of a provider's response size limits was passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseLimit {
    /// The whole success body, JSON or event stream (`max_response_bytes`).
    Response,
    /// One server-sent event or line of an event stream (`max_event_bytes`).
    Event,
}

impl ResponseLimit {
    /// The config key that sets this limit.
    pub fn key(self) -> &'static str {
        match self {
            ResponseLimit::Response => "max_response_bytes",
            ResponseLimit::Event => "max_event_bytes",
        }
    }
}

impl Failure {
    /// The HTTP status, when the failure was an error response.
    pub fn status(&self) -> Option<u16> {
        match self {
            Failure::Http { http, .. } => Some(http.status),
            _ => None,
        }
    }
}

/// A short label for logs and metrics.
impl fmt::Display for WireFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WireFormat::OpenAi => "openai",
            WireFormat::Anthropic => "anthropic",
            WireFormat::Bedrock => "bedrock",
            WireFormat::Gemini => "gemini",
        })
    }
}
