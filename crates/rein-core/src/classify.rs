//! Failure classification: the one place that decides what an observed [`Failure`] means.
//!
//! Two steps, both exhaustive. `kind_of` reads the facts (the body's error type and code first,
//! the status only to narrow) into a [`FailureKind`]; [`decide`] maps every kind to a
//! [`Disposition`] and a [`Fault`] with a `match` that has no catch-all arm, so adding a kind does
//! not compile until someone decides its move. The server's own pushback (`x-should-retry`,
//! `retry-after`) is applied last.

use std::time::Duration;

use serde::Serialize;

use crate::failure::{Clock, Failure, HttpError, WireFormat};

/// What kind of failure was observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The provider is overloaded (OpenAI 503, Anthropic 529 `overloaded_error`).
    Overloaded,
    /// A rate limit that clears by waiting (429 `rate_limit_exceeded` / `rate_limit_error`).
    RateLimited,
    /// Credits exhausted, spend or usage cap reached: waiting will not help (OpenAI 429
    /// `insufficient_quota`, Anthropic 429 spend cap, Anthropic 400 credit balance).
    QuotaExhausted,
    /// 500 and other 5xx.
    ServerError,
    /// 408 Request Timeout.
    RequestTimeout,
    /// 409 Conflict (providers use it for transient lock contention).
    Conflict,
    /// No response: refused, reset before headers, DNS, TLS.
    ConnectionFailed,
    /// rein's own host ran out of file descriptors, sockets or memory opening the connection.
    LocalResources,
    /// One of rein's clocks fired.
    ClockFired(Clock),
    /// The stream broke after it started: an error event, or the connection closed early.
    StreamInterrupted,
    /// A chunk or body that could not be parsed.
    MalformedResponse,
    /// The prompt does not fit the model's context window.
    ContextLength,
    /// The provider's content policy rejected the request.
    ContentPolicy,
    /// Any other malformed request (400, 422).
    InvalidRequest,
    /// 401: the key is wrong.
    Unauthorized,
    /// 403: the key lacks permission.
    Forbidden,
    /// 404: unknown model or path.
    NotFound,
    /// 413: request too large for the endpoint.
    PayloadTooLarge,
    /// Another 4xx that nothing above describes.
    OtherClientError,
    /// The adapter could not build this request for this provider; nothing was sent.
    Unsendable,
    /// The response passed the provider's size limit (`max_response_bytes`,
    /// `max_event_bytes`) and was cut off by rein.
    ResponseTooLarge,
}

impl FailureKind {
    /// The label used in metrics, logs and trace steps.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Overloaded => "overloaded",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::QuotaExhausted => "quota_exhausted",
            FailureKind::ServerError => "server_error",
            FailureKind::RequestTimeout => "request_timeout",
            FailureKind::Conflict => "conflict",
            FailureKind::ConnectionFailed => "connection_failed",
            FailureKind::LocalResources => "local_resources",
            FailureKind::ClockFired(Clock::Connect) => "clock_connect",
            FailureKind::ClockFired(Clock::FirstToken) => "clock_first_token",
            FailureKind::ClockFired(Clock::StreamIdle) => "clock_stream_idle",
            FailureKind::ClockFired(Clock::Attempt) => "clock_attempt",
            FailureKind::StreamInterrupted => "stream_interrupted",
            FailureKind::MalformedResponse => "malformed_response",
            FailureKind::ContextLength => "context_length",
            FailureKind::ContentPolicy => "content_policy",
            FailureKind::InvalidRequest => "invalid_request",
            FailureKind::Unauthorized => "unauthorized",
            FailureKind::Forbidden => "forbidden",
            FailureKind::NotFound => "not_found",
            FailureKind::PayloadTooLarge => "payload_too_large",
            FailureKind::OtherClientError => "other_client_error",
            FailureKind::Unsendable => "unsendable",
            FailureKind::ResponseTooLarge => "response_too_large",
        }
    }
}

/// The move decided for a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Transient: try this tier again (if the deadline, attempts and retry budget allow).
    RetryTier,
    /// This tier will not answer now; try the next one.
    NextTier,
    /// The prompt is too long for this tier: try the next tier with a larger context window.
    NextLargerContextTier,
    /// This tier is misconfigured or out of money for every request: skip it, tell a person,
    /// never retry it.
    SkipTierAndAlert,
    /// No tier will do better: end the call and tell the caller why.
    Stop,
}

/// Whose fault the failure is. Kept apart from the disposition: it decides whether the failure
/// counts against the tier's health (cooldown) and which status the caller sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The provider is unwell (overload, 5xx, slow, dropped connection).
    Provider,
    /// Our account or config with the provider (keys, quota, unknown model).
    Account,
    /// The request itself (too long, malformed, against policy).
    Request,
    /// rein's own host (out of file descriptors or memory): the provider was not reached.
    Gateway,
}

/// A failure together with its decided move.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classified {
    pub kind: FailureKind,
    pub disposition: Disposition,
    pub fault: Fault,
    /// The wait the provider asked for, which replaces rein's backoff when it fits the deadline.
    pub retry_after: Option<Duration>,
    /// Why, in a few words, for logs and the call report.
    pub reason: &'static str,
}

/// Classify one observed failure.
pub fn classify(failure: &Failure) -> Classified {
    let (kind, retry_after, should_retry) = match failure {
        Failure::Http { format, http } => {
            (kind_of_http(*format, http), http.retry_after, http.should_retry)
        }
        Failure::Connection { .. } => (FailureKind::ConnectionFailed, None, None),
        Failure::LocalResources { .. } => (FailureKind::LocalResources, None, None),
        Failure::ClockFired { clock, .. } => (FailureKind::ClockFired(*clock), None, None),
        Failure::StreamError { error_type, code, message, .. } => {
            (kind_of_stream_error(error_type.as_deref(), code.as_deref(), message), None, None)
        }
        Failure::Unsendable { .. } => (FailureKind::Unsendable, None, None),
        Failure::StreamCut => (FailureKind::StreamInterrupted, None, None),
        Failure::Malformed { .. } => (FailureKind::MalformedResponse, None, None),
        Failure::ResponseTooLarge { .. } => (FailureKind::ResponseTooLarge, None, None),
    };
    let (mut disposition, fault, mut reason) = decide(kind);
    // The server's explicit word overrides the status-based guess, in both directions, but never
    // turns a permanent account or request failure into a retry.
    match should_retry {
        Some(false) if disposition == Disposition::RetryTier => {
            disposition = Disposition::NextTier;
            reason = "provider said x-should-retry: false";
        }
        Some(true) if kind == FailureKind::OtherClientError => {
            disposition = Disposition::RetryTier;
            reason = "provider said x-should-retry: true";
        }
        _ => {}
    }
    Classified { kind, disposition, fault, retry_after, reason }
}

/// The decided move for each kind of failure. No catch-all arm: a new kind must be decided here.
pub fn decide(kind: FailureKind) -> (Disposition, Fault, &'static str) {
    use Disposition::*;
    use Fault::*;
    match kind {
        FailureKind::Overloaded => (RetryTier, Provider, "provider overloaded; transient"),
        FailureKind::RateLimited => (RetryTier, Provider, "rate limited; clears by waiting"),
        FailureKind::QuotaExhausted => {
            (SkipTierAndAlert, Account, "credits or spend cap exhausted; waiting will not help")
        }
        FailureKind::ServerError => (RetryTier, Provider, "provider server error; transient"),
        FailureKind::RequestTimeout => (RetryTier, Provider, "provider request timeout; transient"),
        FailureKind::Conflict => (RetryTier, Provider, "conflict; transient"),
        FailureKind::ConnectionFailed => (RetryTier, Provider, "connection failed; transient"),
        // Descriptors free up as other calls end; the backoff gives them time, and the retry
        // budget bounds how many calls retry at once. The tier's health is not touched.
        FailureKind::LocalResources => {
            (RetryTier, Gateway, "rein's host is out of file descriptors or memory; transient")
        }
        FailureKind::ClockFired(Clock::Connect) => (RetryTier, Provider, "connect clock fired"),
        FailureKind::ClockFired(Clock::FirstToken) => {
            (RetryTier, Provider, "first token did not arrive in time")
        }
        FailureKind::ClockFired(Clock::StreamIdle) => (RetryTier, Provider, "stream went idle"),
        FailureKind::ClockFired(Clock::Attempt) => {
            (RetryTier, Provider, "attempt ran past its cap")
        }
        FailureKind::StreamInterrupted => (RetryTier, Provider, "stream broke mid-answer"),
        FailureKind::MalformedResponse => (RetryTier, Provider, "malformed response chunk"),
        FailureKind::ContextLength => {
            (NextLargerContextTier, Request, "prompt exceeds this model's context window")
        }
        FailureKind::ContentPolicy => {
            (Stop, Request, "rejected by the provider's content policy; no retry")
        }
        FailureKind::InvalidRequest => {
            (SkipTierAndAlert, Request, "tier rejected the request as invalid; never retried")
        }
        FailureKind::Unauthorized => (SkipTierAndAlert, Account, "invalid API key"),
        FailureKind::Forbidden => (SkipTierAndAlert, Account, "API key lacks permission"),
        FailureKind::NotFound => (SkipTierAndAlert, Account, "model or endpoint not found"),
        FailureKind::PayloadTooLarge => {
            (SkipTierAndAlert, Request, "request too large for this endpoint")
        }
        FailureKind::OtherClientError => (SkipTierAndAlert, Request, "unrecognised client error"),
        FailureKind::Unsendable => {
            (NextTier, Request, "request cannot be expressed in this provider's format")
        }
        // A provider that sends more than any real answer needs (a body that never ends, a
        // stream that loops) would most likely do it again, and each try costs the whole limit
        // in bytes and time: the next tier is the better bet. It counts against the tier's
        // health, so one that keeps doing it cools down.
        FailureKind::ResponseTooLarge => {
            (NextTier, Provider, "response exceeded the provider's size limit; not retried here")
        }
    }
}

fn kind_of_http(format: WireFormat, http: &HttpError) -> FailureKind {
    let error_type = http.error_type.as_deref().unwrap_or("");
    let code = http.code.as_deref().unwrap_or("");
    let message = http.message.to_ascii_lowercase();

    if format == WireFormat::Gemini
        && let Some(kind) = kind_of_google_status(error_type, code, &message)
    {
        return kind;
    }
    // An OAuth token endpoint's refusal (RFC 6749 §5.2), as a Vertex provider reports a token
    // fetch that failed: the key or its signed assertion was not accepted.
    if matches!(error_type, "invalid_grant" | "invalid_client" | "unauthorized_client") {
        return FailureKind::Unauthorized;
    }
    // The body says more than the status: read it first.
    if is_quota_exhausted(error_type, code, &message) {
        return FailureKind::QuotaExhausted;
    }
    if is_context_length(code, &message) {
        return FailureKind::ContextLength;
    }
    if is_content_policy(code, &message) {
        return FailureKind::ContentPolicy;
    }
    // OpenAI sends a 429 `rate_limit_exceeded` for one request bigger than the per-minute token
    // limit: no amount of waiting lets it through, so it is a too-large request, not a rate limit.
    if http.status == 429 && message.contains("request too large") {
        return FailureKind::PayloadTooLarge;
    }
    match (format, error_type) {
        (WireFormat::Anthropic, "overloaded_error") => return FailureKind::Overloaded,
        (WireFormat::Anthropic, "rate_limit_error") => return FailureKind::RateLimited,
        (WireFormat::Anthropic, "api_error") => return FailureKind::ServerError,
        (WireFormat::Anthropic, "timeout_error") => return FailureKind::RequestTimeout,
        (WireFormat::Anthropic, "authentication_error") => return FailureKind::Unauthorized,
        (WireFormat::Anthropic, "permission_error") => return FailureKind::Forbidden,
        (WireFormat::Anthropic, "not_found_error") => return FailureKind::NotFound,
        (WireFormat::Anthropic, "request_too_large") => return FailureKind::PayloadTooLarge,
        // Bedrock types every error (`x-amzn-ErrorType`); its statuses are shared (a 429 is
        // a throttle or a model still loading, a 400 any validation failure).
        (WireFormat::Bedrock, "ThrottlingException") => return FailureKind::RateLimited,
        (WireFormat::Bedrock, "ServiceUnavailableException" | "ModelNotReadyException") => {
            return FailureKind::Overloaded;
        }
        (WireFormat::Bedrock, "InternalServerException" | "ModelErrorException") => {
            return FailureKind::ServerError;
        }
        (WireFormat::Bedrock, "ModelTimeoutException") => return FailureKind::RequestTimeout,
        (WireFormat::Bedrock, "ValidationException") => return FailureKind::InvalidRequest,
        (
            WireFormat::Bedrock,
            "UnrecognizedClientException"
            | "ExpiredTokenException"
            | "InvalidSignatureException"
            | "IncompleteSignatureException"
            | "MissingAuthenticationTokenException",
        ) => return FailureKind::Unauthorized,
        (WireFormat::Bedrock, "AccessDeniedException") => return FailureKind::Forbidden,
        (WireFormat::Bedrock, "ResourceNotFoundException") => return FailureKind::NotFound,
        (WireFormat::Bedrock, "ServiceQuotaExceededException") => {
            return FailureKind::QuotaExhausted;
        }
        _ => {}
    }
    match http.status {
        529 | 503 => FailureKind::Overloaded,
        429 => FailureKind::RateLimited,
        408 => FailureKind::RequestTimeout,
        409 => FailureKind::Conflict,
        401 => FailureKind::Unauthorized,
        403 => FailureKind::Forbidden,
        404 => FailureKind::NotFound,
        413 => FailureKind::PayloadTooLarge,
        400 | 422 => FailureKind::InvalidRequest,
        500..=599 => FailureKind::ServerError,
        _ => FailureKind::OtherClientError,
    }
}

/// Gemini's errors name a google.rpc status, which says more than the HTTP status; `None`
/// leaves the failure to the generic reading (status and wording).
fn kind_of_google_status(status: &str, code: &str, message: &str) -> Option<FailureKind> {
    Some(match status {
        // Google's 429 message always says "You exceeded your current quota, please check your
        // plan and billing details", for per-minute limits too, so the wording cannot tell a
        // quota that clears from one that does not. The quota's id can: a per-day quota will
        // not clear within a call, and a spending cap or spent prepaid credits never do. A
        // per-minute one carries RetryInfo, whose delay is the wait.
        "RESOURCE_EXHAUSTED" => {
            if code.contains("PerDay")
                || message.contains("spending cap")
                || message.contains("credits are depleted")
            {
                FailureKind::QuotaExhausted
            } else {
                FailureKind::RateLimited
            }
        }
        "UNAVAILABLE" => FailureKind::Overloaded,
        "INTERNAL" | "UNKNOWN" => FailureKind::ServerError,
        "DEADLINE_EXCEEDED" => FailureKind::RequestTimeout,
        "ABORTED" => FailureKind::Conflict,
        "UNAUTHENTICATED" => FailureKind::Unauthorized,
        "PERMISSION_DENIED" => FailureKind::Forbidden,
        "NOT_FOUND" => FailureKind::NotFound,
        // Billing not enabled, or the API not offered where the account is: nothing but a
        // person fixes it.
        "FAILED_PRECONDITION" => FailureKind::QuotaExhausted,
        // A wrong key is a 400 `INVALID_ARGUMENT` with the reason `API_KEY_INVALID`.
        "INVALID_ARGUMENT" if code == "API_KEY_INVALID" => FailureKind::Unauthorized,
        "INVALID_ARGUMENT" if is_context_length(code, message) => FailureKind::ContextLength,
        "INVALID_ARGUMENT" if is_content_policy(code, message) => FailureKind::ContentPolicy,
        "INVALID_ARGUMENT" => FailureKind::InvalidRequest,
        _ => return None,
    })
}

fn kind_of_stream_error(
    error_type: Option<&str>,
    code: Option<&str>,
    message: &str,
) -> FailureKind {
    let message = message.to_ascii_lowercase();
    let code = code.unwrap_or("");
    match error_type.unwrap_or("") {
        _ if is_content_policy(code, &message) => FailureKind::ContentPolicy,
        _ if code == "rate_limit_exceeded" => FailureKind::RateLimited,
        // The Responses API's `response.failed` / `error` codes, read as their HTTP
        // equivalents: a 500, a timeout, a 400, an exhausted quota, an over-long prompt.
        _ if code == "server_error" => FailureKind::ServerError,
        _ if code == "vector_store_timeout" => FailureKind::RequestTimeout,
        _ if !code.is_empty() && is_quota_exhausted("", code, "") => FailureKind::QuotaExhausted,
        _ if code == "context_length_exceeded" => FailureKind::ContextLength,
        _ if is_invalid_input(code) => FailureKind::InvalidRequest,
        // Bedrock's exception frames (ConverseStream, InvokeModelWithResponseStream), read like
        // the HTTP exceptions of the same name: a request it refuses goes to the next tier, not
        // back to the same one.
        "validationException" if is_context_length("", &message) => FailureKind::ContextLength,
        "validationException" => FailureKind::InvalidRequest,
        "modelTimeoutException" => FailureKind::RequestTimeout,
        "internalServerException" => FailureKind::ServerError,
        "overloaded_error" | "serviceUnavailableException" => FailureKind::Overloaded,
        "rate_limit_error" | "rate_limit_exceeded" | "throttlingException" => {
            FailureKind::RateLimited
        }
        // Gemini's mid-stream `{"error": ...}` names a google.rpc status.
        "UNAVAILABLE" => FailureKind::Overloaded,
        "RESOURCE_EXHAUSTED" => FailureKind::RateLimited,
        _ => FailureKind::StreamInterrupted,
    }
}

/// Credits gone or a spend cap hit: read from the body, because the status (429 or 400) is the
/// same as for failures that do clear.
fn is_quota_exhausted(error_type: &str, code: &str, message: &str) -> bool {
    matches!(
        code,
        "insufficient_quota"
            | "billing_hard_limit_reached"
            | "billing_not_active"
            | "enforced_spend_limit_reached"
    ) || error_type == "insufficient_quota"
        || message.contains("credit balance is too low")
        || message.contains("spend limit")
        || message.contains("spending limit")
        || message.contains("usage limit")
        || message.contains("billing hard limit")
        || message.contains("exceeded your current quota")
}

fn is_context_length(code: &str, message: &str) -> bool {
    code == "context_length_exceeded"
        || message.contains("prompt is too long")
        || message.contains("maximum context length")
        || message.contains("context window")
        || message.contains("exceed context limit")
        // Bedrock's ValidationException for a prompt over the model's window.
        || message.contains("input is too long")
        // Gemini: "The input token count (1200000) exceeds the maximum number of tokens
        // allowed (1048576)."
        || message.contains("exceeds the maximum number of tokens allowed")
}

/// The Responses API's codes for a request it cannot answer as sent (`ResponseError.code`):
/// the prompt, or an image in it. (`image_content_policy_violation` is a content-policy
/// refusal instead.)
fn is_invalid_input(code: &str) -> bool {
    matches!(
        code,
        "invalid_prompt"
            | "invalid_image"
            | "invalid_image_format"
            | "invalid_base64_image"
            | "invalid_image_url"
            | "image_too_large"
            | "image_too_small"
            | "image_parse_error"
            | "invalid_image_mode"
            | "image_file_too_large"
            | "unsupported_image_media_type"
            | "empty_image_file"
            | "failed_to_download_image"
            | "image_file_not_found"
    )
}

fn is_content_policy(code: &str, message: &str) -> bool {
    code == "content_policy_violation"
        || code == "image_content_policy_violation"
        || code == "content_filter"
        || message.contains("content policy")
        || message.contains("content filtering policy")
        || message.contains("usage polic")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_api_stream_codes_read_as_their_http_equivalents() {
        let failed = |code: &str| Failure::StreamError {
            format: WireFormat::OpenAi,
            error_type: None,
            code: Some(code.to_string()),
            message: "The model failed to generate a response.".to_string(),
        };
        for (code, kind) in [
            ("server_error", FailureKind::ServerError),
            ("rate_limit_exceeded", FailureKind::RateLimited),
            ("vector_store_timeout", FailureKind::RequestTimeout),
            ("invalid_prompt", FailureKind::InvalidRequest),
            ("invalid_image", FailureKind::InvalidRequest),
            ("image_file_not_found", FailureKind::InvalidRequest),
            ("image_content_policy_violation", FailureKind::ContentPolicy),
            ("insufficient_quota", FailureKind::QuotaExhausted),
            ("context_length_exceeded", FailureKind::ContextLength),
            ("something_new", FailureKind::StreamInterrupted),
        ] {
            assert_eq!(classify(&failed(code)).kind, kind, "{code}");
        }
        // A Chat Completions error object mid-stream has its type and no code: unchanged.
        let chat = Failure::StreamError {
            format: WireFormat::OpenAi,
            error_type: Some("server_error".to_string()),
            code: None,
            message: "The server had an error while processing your request.".to_string(),
        };
        assert_eq!(classify(&chat).kind, FailureKind::StreamInterrupted);
    }

    fn http(format: WireFormat, status: u16, error_type: &str, code: &str, msg: &str) -> Failure {
        Failure::Http {
            format,
            http: HttpError {
                status,
                error_type: (!error_type.is_empty()).then(|| error_type.to_string()),
                code: (!code.is_empty()).then(|| code.to_string()),
                message: msg.to_string(),
                ..HttpError::default()
            },
        }
    }

    #[test]
    fn same_429_status_two_meanings() {
        let clears =
            http(WireFormat::OpenAi, 429, "requests", "rate_limit_exceeded", "Rate limit reached");
        let never = http(
            WireFormat::OpenAi,
            429,
            "insufficient_quota",
            "insufficient_quota",
            "You exceeded your current quota, please check your plan and billing details.",
        );
        assert_eq!(classify(&clears).disposition, Disposition::RetryTier);
        assert_eq!(classify(&never).kind, FailureKind::QuotaExhausted);
        assert_eq!(classify(&never).disposition, Disposition::SkipTierAndAlert);
    }

    #[test]
    fn a_request_larger_than_the_minute_limit_is_not_retried() {
        let failure = http(
            WireFormat::OpenAi,
            429,
            "tokens",
            "rate_limit_exceeded",
            "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 30601.",
        );
        assert_eq!(classify(&failure).kind, FailureKind::PayloadTooLarge);
        assert_ne!(classify(&failure).disposition, Disposition::RetryTier);
    }

    #[test]
    fn running_out_of_descriptors_on_reins_host_is_not_the_providers_fault() {
        let failure =
            Failure::LocalResources { detail: "Too many open files (os error 24)".into() };
        let classified = classify(&failure);
        assert_eq!(classified.kind, FailureKind::LocalResources);
        assert_eq!(classified.kind.as_str(), "local_resources");
        assert_eq!(classified.disposition, Disposition::RetryTier);
        assert_eq!(classified.fault, Fault::Gateway);
    }

    #[test]
    fn should_retry_false_demotes_a_retry() {
        let mut failure = http(WireFormat::OpenAi, 500, "server_error", "", "boom");
        if let Failure::Http { http, .. } = &mut failure {
            http.should_retry = Some(false);
        }
        assert_eq!(classify(&failure).disposition, Disposition::NextTier);
    }

    #[test]
    fn a_response_past_its_size_limit_goes_to_the_next_tier_on_the_providers_account() {
        for limit in [crate::failure::ResponseLimit::Response, crate::failure::ResponseLimit::Event]
        {
            let failure = Failure::ResponseTooLarge { limit, limit_bytes: 1024 };
            let classified = classify(&failure);
            assert_eq!(classified.kind, FailureKind::ResponseTooLarge);
            assert_eq!(classified.kind.as_str(), "response_too_large");
            assert_eq!(classified.disposition, Disposition::NextTier);
            assert_eq!(classified.fault, Fault::Provider);
            assert!(failure.to_string().contains(limit.key()), "{failure}");
        }
    }

    #[test]
    fn should_retry_true_never_lifts_a_permanent_failure() {
        let mut failure =
            http(WireFormat::OpenAi, 401, "invalid_request_error", "invalid_api_key", "bad key");
        if let Failure::Http { http, .. } = &mut failure {
            http.should_retry = Some(true);
        }
        assert_eq!(classify(&failure).disposition, Disposition::SkipTierAndAlert);
    }
}
