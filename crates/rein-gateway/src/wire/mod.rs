//! The wire formats rein speaks to callers: OpenAI Chat Completions (`openai`), OpenAI
//! Responses (`responses`) and Anthropic Messages (`anthropic`). Pure translation with no I/O:
//! a request body becomes a canonical
//! [`ChatRequest`](rein_core::ChatRequest) plus the route it names; a
//! [`Completion`](rein_core::Completion) becomes the response body; the engine's
//! [`Released`](rein_core::Released) items become SSE frames; and errors become bodies in the
//! caller's format. Each format carries any canonical answer, whichever provider produced it,
//! so an OpenAI SDK can be served by a Claude tier and back.
//!
//! Chat Completions and Messages bodies also carry a top-level `rein` object (outcome, route,
//! tier, attempts; the official SDKs ignore fields they do not know); a Response object keeps
//! to OpenAI's documented fields, and its callers read the same in the `x-rein-*` headers.

mod anthropic_stream;
mod evidence;
mod json;
mod openai_stream;
mod responses_stream;

pub mod anthropic;
pub mod openai;
pub mod responses;

use serde_json::{Value, json};

use rein_core::{CallError, CallReport};

pub use anthropic::{AnthropicRequest, AnthropicStream};
pub(crate) use evidence::evidence_list;
pub use openai::{OpenAiRequest, OpenAiStream};
pub use responses::{ResponsesRequest, ResponsesStream};

/// What the caller is told for one response: the ids and times rein assigns, not the provider's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseMeta {
    /// The response id the caller sees, used verbatim: `chatcmpl-…` for OpenAI, `msg_…` for
    /// Anthropic.
    pub id: String,
    /// When the response was created, in Unix seconds (OpenAI's `created`).
    pub created: u64,
}

impl ResponseMeta {
    pub fn new(id: impl Into<String>, created: u64) -> Self {
        Self { id: id.into(), created }
    }
}

/// The kinds of error rein answers with, each with one HTTP status. Each format maps a kind to
/// its own `type` and `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// 400: the request is malformed or asks for something rein cannot do.
    InvalidRequest,
    /// 401: missing or wrong API key.
    Authentication,
    /// 403: the key may not use this route.
    PermissionDenied,
    /// 404: no route with the requested `model` name.
    NotFound,
    /// 404: no such path.
    UnknownPath,
    /// 405: the path exists, the method does not.
    MethodNotAllowed,
    /// 408: the request body did not arrive in time.
    RequestTimeout,
    /// 413: the body is larger than rein accepts.
    RequestTooLarge,
    /// 415: the body is not `application/json`.
    UnsupportedMediaType,
    /// 429: rein's own rate limit.
    RateLimited,
    /// 500: something failed inside rein.
    Internal,
    /// 502: every provider refused rein's own setup (a key, a permission, a model name).
    Misconfigured,
    /// 503: rein cannot take the call right now (overloaded, shutting down, no tier answered).
    Unavailable,
    /// 504: the deadline passed before any answer.
    Timeout,
}

impl ErrorKind {
    /// The kind a call that ended without an answer is reported as.
    pub fn of_call_error(error: &CallError) -> Self {
        match error {
            CallError::UnknownRoute(_) => ErrorKind::NotFound,
            CallError::ContentPolicy { .. }
            | CallError::ContentFilter { .. }
            | CallError::ContextLength { .. } => ErrorKind::InvalidRequest,
            // Only a stream can be interrupted; a plain response never sees this.
            CallError::Interrupted { .. } => ErrorKind::Internal,
            CallError::Degraded { .. } => ErrorKind::Unavailable,
            CallError::Unserved { misconfigured: true, .. } => ErrorKind::Misconfigured,
            CallError::Unserved { misconfigured: false, .. } => ErrorKind::Unavailable,
        }
    }
}

/// A caller's JSON Schema must compile: rein checks answers against it, and a schema it cannot
/// use would leave the answer silently unchecked.
pub(crate) fn check_caller_schema(
    schema: &serde_json::Value,
    field: &str,
) -> Result<(), WireError> {
    rein_core::validate::CompiledSchema::new(schema)
        .map(|_| ())
        .map_err(|error| WireError::invalid(field, format!("not a usable JSON Schema: {error}")))
}

/// A request body that cannot be translated. Always a 400; `param` is the JSON path of the
/// offending field (`messages[0].role`), and the message names it too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("the request body is not valid JSON: {detail}")]
    MalformedJson { detail: String },
    #[error("the request body must be a JSON object, not {found}")]
    NotAnObject { found: &'static str },
    #[error("`{field}` is required")]
    Missing { field: String },
    #[error("`{field}`: {detail}")]
    Invalid { field: String, detail: String },
    #[error("`{field}`: {what} is not supported yet")]
    Unsupported { field: String, what: String },
}

impl WireError {
    /// The JSON path of the offending field, when there is one.
    pub fn param(&self) -> Option<&str> {
        match self {
            WireError::MalformedJson { .. } | WireError::NotAnObject { .. } => None,
            WireError::Missing { field }
            | WireError::Invalid { field, .. }
            | WireError::Unsupported { field, .. } => Some(field),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidRequest
    }

    pub(crate) fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        WireError::Invalid { field: field.into(), detail: detail.into() }
    }

    pub(crate) fn missing(field: impl Into<String>) -> Self {
        WireError::Missing { field: field.into() }
    }

    pub(crate) fn unsupported(field: impl Into<String>, what: impl Into<String>) -> Self {
        WireError::Unsupported { field: field.into(), what: what.into() }
    }
}

/// The `rein` object every body carries: what happened to the call.
pub fn rein_summary(report: &CallReport) -> Value {
    let mut summary = json!({
        "outcome": report.outcome.as_str(),
        "route": report.route,
        "tier": report.served_by.as_ref().map(|served| served.tier_name.clone()),
        "attempts": report.attempt_count(),
        "settings_version": report.settings_version,
    });
    if let (Some(status), Value::Object(map)) = (report.run_status(), &mut summary) {
        map.insert("run_status".into(), json!(status));
    }
    summary
}

/// [`rein_summary`] written straight into `out`: the same bytes its tree serializes to (keys in
/// the same sorted order), for the answers and last chunks written without a tree.
pub(crate) fn push_summary(out: &mut Vec<u8>, report: &CallReport) {
    use rein_providers::json_write::{push_i64, push_opt_str, push_str, push_u64};
    out.extend_from_slice(br#"{"attempts":"#);
    push_u64(out, report.attempt_count() as u64);
    out.extend_from_slice(br#","outcome":"#);
    push_str(out, report.outcome.as_str());
    out.extend_from_slice(br#","route":"#);
    push_str(out, &report.route);
    if let Some(status) = report.run_status() {
        out.extend_from_slice(br#","run_status":"#);
        push_str(out, status);
    }
    out.extend_from_slice(br#","settings_version":"#);
    match report.settings_version {
        Some(version) => push_i64(out, version),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(br#","tier":"#);
    push_opt_str(out, report.served_by.as_ref().map(|served| served.tier_name.as_str()));
    out.push(b'}');
}

#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_status() {
        let statuses: Vec<u16> = [
            ErrorKind::InvalidRequest,
            ErrorKind::Authentication,
            ErrorKind::PermissionDenied,
            ErrorKind::NotFound,
            ErrorKind::RequestTooLarge,
            ErrorKind::UnsupportedMediaType,
            ErrorKind::RateLimited,
            ErrorKind::Internal,
            ErrorKind::Misconfigured,
            ErrorKind::Unavailable,
            ErrorKind::Timeout,
        ]
        .iter()
        .map(|kind| crate::server::status(*kind).as_u16())
        .collect();
        assert_eq!(statuses, [400, 401, 403, 404, 413, 415, 429, 500, 502, 503, 504]);
    }

    #[test]
    fn call_errors_map_to_kinds() {
        let report = Box::new(fixtures::report(rein_core::Outcome::Stopped, None));
        assert_eq!(
            ErrorKind::of_call_error(&CallError::UnknownRoute("x".into())),
            ErrorKind::NotFound
        );
        assert_eq!(
            ErrorKind::of_call_error(&CallError::ContextLength {
                reason: "too long".into(),
                report
            }),
            ErrorKind::InvalidRequest
        );
    }

    #[test]
    fn wire_errors_name_their_field() {
        let error = WireError::invalid("messages[0].role", "unknown variant `robot`");
        assert_eq!(error.param(), Some("messages[0].role"));
        assert_eq!(error.to_string(), "`messages[0].role`: unknown variant `robot`");
        assert_eq!(WireError::missing("model").to_string(), "`model` is required");
    }
}
