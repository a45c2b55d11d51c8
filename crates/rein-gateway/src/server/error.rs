//! The one place rein's own HTTP errors are made: every refusal (auth, bad input, unknown route,
//! a call that ended in an error) becomes a status and a body in the caller's wire format, so
//! an SDK raises its matching exception type with rein's message.

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
}

impl Api {
    pub fn label(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        }
    }
}

/// An error on its way to the caller.
#[derive(Debug)]
pub struct ApiError {
    pub api: Api,
    pub status: StatusCode,
    pub body: Value,
    pub request_id: String,
    /// Close the connection after this answer (the request body was not read whole).
    pub close: bool,
}

impl ApiError {
    pub fn new(api: Api, kind: ErrorKind, message: &str, request_id: &str) -> Self {
        let body = match api {
            Api::OpenAi => wire::openai::error_body(kind, message, None),
            Api::Anthropic => wire::anthropic::error_body(kind, message),
        };
        Self { api, status: kind.status(), body, request_id: request_id.to_string(), close: false }
    }

    /// A body that failed to parse, naming the field.
    pub fn wire(api: Api, error: &WireError, request_id: &str) -> Self {
        let body = match api {
            Api::OpenAi => wire::openai::wire_error_body(error),
            Api::Anthropic => wire::anthropic::wire_error_body(error),
        };
        Self {
            api,
            status: error.kind().status(),
            body,
            request_id: request_id.to_string(),
            close: false,
        }
    }

    /// A call the engine ended with an error.
    pub fn call(api: Api, error: &CallError, request_id: &str) -> Self {
        let (status, body) = match api {
            Api::OpenAi => wire::openai::call_error_body(error),
            Api::Anthropic => wire::anthropic::call_error_body(error),
        };
        Self { api, status, body, request_id: request_id.to_string(), close: false }
    }
}

impl ApiError {
    /// The same error, answered with `Connection: close`.
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        if let Ok(value) = HeaderValue::from_str(&self.request_id) {
            let name = match self.api {
                Api::OpenAi => "x-request-id",
                Api::Anthropic => "request-id",
            };
            response.headers_mut().insert(name, value.clone());
            response.headers_mut().insert("x-rein-request-id", value);
        }
        // The SDKs retry some statuses on their own; rein has already done what retrying made
        // sense, so it tells them not to.
        response.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
        if self.close {
            response
                .headers_mut()
                .insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
