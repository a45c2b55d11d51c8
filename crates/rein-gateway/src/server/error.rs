//! The one place rein's own HTTP errors are made: every refusal (auth, bad input, unknown route,
//! a call that ended in an error, a tool call not dispatched, an admin request refused) becomes
//! a status, a body and headers through one `IntoResponse`, in the caller's wire format for model
//! calls, so an SDK raises its matching exception type with rein's message. The status of each
//! kind of error is decided here too ([`status`]): the wire formats know bodies, not statuses.

use axum::Json;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rein_core::CallError;
use serde_json::Value;

use crate::wire::{self, ErrorKind, WireError};

/// Which wire format the caller speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    OpenAi,
    Anthropic,
    /// OpenAI's Responses API: OpenAI's error bodies and headers.
    Responses,
}

impl Api {
    pub fn label(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
            Api::Responses => "responses",
        }
    }
}

/// The HTTP status of each kind of error: the one place an error becomes a status code.
pub fn status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Authentication => StatusCode::UNAUTHORIZED,
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorKind::NotFound | ErrorKind::UnknownPath => StatusCode::NOT_FOUND,
        ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        ErrorKind::RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Misconfigured => StatusCode::BAD_GATEWAY,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
    }
}

/// Which endpoint family an error answers, and so the shape of its body and headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// A model call, in the caller's wire format; the SDKs are told not to retry.
    Chat(Api),
    /// A tool call: OpenAI's error shape with `param`, and no word on retrying (a `409` of a
    /// key in flight says when to come back).
    Tools,
    /// The admin API: `{"error": {"message": ...}}`, for operators and the CLI.
    Admin,
}

/// An error on its way to the caller: the one place every refusal of rein's (chat, tools,
/// admin) becomes a status, a body and headers.
#[derive(Debug)]
pub struct ApiError {
    surface: Surface,
    pub status: StatusCode,
    pub body: Value,
    request_id: Option<String>,
    /// Close the connection after this answer (the request body was not read whole).
    close: bool,
    /// More headers (`retry-after`).
    headers: Vec<(&'static str, HeaderValue)>,
}

impl ApiError {
    fn chat(api: Api, status: StatusCode, body: Value, request_id: &str) -> Self {
        Self {
            surface: Surface::Chat(api),
            status,
            body,
            request_id: Some(request_id.to_string()),
            close: false,
            headers: Vec::new(),
        }
    }

    pub fn new(api: Api, kind: ErrorKind, message: &str, request_id: &str) -> Self {
        let body = match api {
            Api::OpenAi => wire::openai::error_body(kind, message, None),
            Api::Anthropic => wire::anthropic::error_body(kind, message),
            Api::Responses => wire::responses::error_body(kind, message),
        };
        Self::chat(api, status(kind), body, request_id)
    }

    /// A body that failed to parse, naming the field.
    pub fn wire(api: Api, error: &WireError, request_id: &str) -> Self {
        let body = match api {
            Api::OpenAi => wire::openai::wire_error_body(error),
            Api::Anthropic => wire::anthropic::wire_error_body(error),
            Api::Responses => wire::responses::wire_error_body(error),
        };
        Self::chat(api, status(error.kind()), body, request_id)
    }

    /// A call the engine ended with an error.
    pub fn call(api: Api, error: &CallError, request_id: &str) -> Self {
        let (kind, body) = match api {
            Api::OpenAi => wire::openai::call_error_body(error),
            Api::Anthropic => wire::anthropic::call_error_body(error),
            Api::Responses => wire::responses::call_error_body(error),
        };
        Self::chat(api, status(kind), body, request_id)
    }

    /// A tool call that was not dispatched: `kind` is the body's `type`, `param` names the
    /// argument or header at fault.
    pub fn tool(
        status: StatusCode,
        kind: &str,
        param: Option<&str>,
        message: &str,
        request_id: &str,
    ) -> Self {
        let body = serde_json::json!({
            "error": { "message": message, "type": kind, "param": param, "code": Value::Null }
        });
        Self {
            surface: Surface::Tools,
            status,
            body,
            request_id: Some(request_id.to_string()),
            close: false,
            headers: Vec::new(),
        }
    }

    /// An admin request refused.
    pub fn admin(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            surface: Surface::Admin,
            status,
            body: serde_json::json!({ "error": { "message": message.into() } }),
            request_id: None,
            close: false,
            headers: Vec::new(),
        }
    }

    /// The same error, answered with `Connection: close`.
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    /// The same error with one more header.
    pub fn header(mut self, name: &'static str, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        let headers = response.headers_mut();
        if let Some(value) =
            self.request_id.as_deref().and_then(|id| HeaderValue::from_str(id).ok())
        {
            match self.surface {
                Surface::Chat(Api::OpenAi | Api::Responses) => {
                    headers.insert("x-request-id", value.clone());
                }
                Surface::Chat(Api::Anthropic) => {
                    headers.insert("request-id", value.clone());
                }
                Surface::Tools | Surface::Admin => {}
            }
            headers.insert("x-rein-request-id", value);
        }
        if let Surface::Chat(_) = self.surface {
            // The SDKs retry some statuses on their own; rein has already done what retrying
            // made sense, so it tells them not to.
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        if self.close {
            headers.insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
