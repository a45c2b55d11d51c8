//! `POST /v1/tools/{tool}`: an agent's tool call, dispatched through the tool's ladder by
//! `rein_tools`. The body is the call's arguments (a JSON object); per-call context comes in
//! headers (`Idempotency-Key`, `x-rein-conversation-id`, `x-rein-deadline-ms`, and
//! `x-rein-run-id`, under which an `ok` result becomes evidence for the run's model calls, per
//! the tool's `evidence` config). The answer is
//! the envelope the model should see: `200` when the call is settled (`ok`, `refused`, `busy`),
//! `202` when it is accepted but has not executed (`queued`, `pending_approval`). The caller's
//! mistakes get an error body in the OpenAI error shape that names the problem: 400 (`param`
//! names the argument a URL cannot take, e.g. `..` as a path segment), 404, 409
//! (the same key is in flight; `retry-after(-ms)` says when it is settled), 422 (the key was used with other arguments), 503 (store down).

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rein_tools::{ToolError, ToolStatus};
use serde_json::{Value, json};

use super::Gateway;
use super::context::{CONVERSATION_HEADER, IDEMPOTENCY_HEADER, call_context};

/// An error answer for a tool call that was not dispatched.
fn error(status: StatusCode, kind: &str, param: Option<&str>, message: &str, id: &str) -> Response {
    let body = json!({
        "error": { "message": message, "type": kind, "param": param, "code": Value::Null }
    });
    let mut response = (status, Json(body)).into_response();
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert("x-rein-request-id", value);
    }
    response
}

pub(super) async fn call(
    State(gateway): State<Arc<Gateway>>,
    Path(tool): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let request_id = super::new_id("req_");
    let runtime = gateway.current();
    if !super::client_allowed(&runtime, &headers) {
        gateway.metrics.http_error("tools", 401);
        return error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            None,
            "Incorrect API key provided. Send a rein client key as `Authorization: Bearer <key>`.",
            &request_id,
        );
    }
    let invalid = |param: Option<&str>, message: &str| {
        gateway.metrics.http_error("tools", 400);
        error(StatusCode::BAD_REQUEST, "invalid_request_error", param, message, &request_id)
    };
    let ctx = match call_context(&headers) {
        Ok(ctx) => ctx,
        Err(problem) => return invalid(Some(problem.header), &problem.message),
    };
    let content_type =
        headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.to_ascii_lowercase().starts_with("application/json") {
        let shown = if content_type.is_empty() { "none" } else { content_type };
        gateway.metrics.http_error("tools", 415);
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            None,
            &format!("Content-Type must be application/json (got {shown})"),
            &request_id,
        );
    }
    let server = &runtime.config.server;
    let bytes = match super::body::read_request(body, &headers, server).await {
        Ok(bytes) => bytes,
        Err(failure) => {
            let status = failure.status();
            gateway.metrics.http_error("tools", status.as_u16());
            let message = failure.message(server);
            let mut response = error(status, "invalid_request_error", None, &message, &request_id);
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
    };
    let args: Value = match serde_json::from_slice(&bytes) {
        Ok(value @ Value::Object(_)) => value,
        Ok(_) => {
            return invalid(None, "The body must be a JSON object: the tool call's arguments.");
        }
        Err(e) => return invalid(None, &format!("The body is not valid JSON: {e}")),
    };
    match runtime.tools.call(&ctx, &tool, args).await {
        Ok(outcome) => {
            if let Some(run) = &ctx.run_id {
                gateway
                    .runtime
                    .runs
                    .record(run, runtime.tools.evidence_of(&tool, &outcome.envelope));
            }
            let status = match outcome.status {
                ToolStatus::Queued | ToolStatus::PendingApproval => StatusCode::ACCEPTED,
                ToolStatus::Ok | ToolStatus::Refused | ToolStatus::Busy => StatusCode::OK,
            };
            tracing::info!(
                request_id,
                tool,
                status = outcome.status.as_str(),
                rung = outcome.served_by.as_deref().unwrap_or("-"),
                replayed = outcome.replayed,
                "tool call finished"
            );
            let retry_after_ms = outcome.envelope.get("retry_after_ms").and_then(Value::as_u64);
            let key =
                outcome.envelope.get("idempotency_key").and_then(Value::as_str).map(str::to_string);
            let mut response = (status, Json(outcome.envelope)).into_response();
            let headers = response.headers_mut();
            let mut set = |name: &'static str, value: &str| {
                if let Ok(value) = HeaderValue::from_str(value) {
                    headers.insert(name, value);
                }
            };
            set("x-rein-request-id", &request_id);
            set("x-rein-outcome", outcome.status.as_str());
            set("x-rein-replayed", if outcome.replayed { "true" } else { "false" });
            if let Some(rung) = &outcome.served_by {
                set("x-rein-rung", rung);
            }
            if let Some(key) = &key {
                set("idempotency-key", key);
            }
            if let Some(ms) = retry_after_ms {
                set("retry-after-ms", &ms.to_string());
                set("retry-after", &ms.div_ceil(1000).max(1).to_string());
            }
            response
        }
        Err(failure) => {
            let message = failure.to_string();
            let (status, kind, param) = match &failure {
                ToolError::UnknownTool(_) => (StatusCode::NOT_FOUND, "not_found_error", None),
                ToolError::BadArgs(_) => (StatusCode::BAD_REQUEST, "invalid_request_error", None),
                ToolError::BadArgument { argument, .. } => {
                    (StatusCode::BAD_REQUEST, "invalid_request_error", Some(argument.as_str()))
                }
                ToolError::MissingConversation { .. } => {
                    (StatusCode::BAD_REQUEST, "invalid_request_error", Some(CONVERSATION_HEADER))
                }
                ToolError::KeyMismatch { .. } => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency_error",
                    Some(IDEMPOTENCY_HEADER),
                ),
                ToolError::KeyInFlight { .. } => {
                    (StatusCode::CONFLICT, "idempotency_error", Some(IDEMPOTENCY_HEADER))
                }
                ToolError::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "api_error", None),
            };
            if let ToolError::Store(store) = &failure {
                tracing::error!(request_id, tool, "tool store failed: {store}");
            }
            gateway.metrics.http_error("tools", status.as_u16());
            let message = match &failure {
                ToolError::Store(_) => {
                    "rein's tool store is unavailable; nothing was sent. Retry with the same idempotency key.".to_string()
                }
                _ => message,
            };
            let mut response = error(status, kind, param, &message, &request_id);
            if let ToolError::KeyInFlight { retry_after_ms, .. } = &failure {
                // By then the first request has finished or its key can be taken over.
                let headers = response.headers_mut();
                headers.insert("retry-after-ms", HeaderValue::from(*retry_after_ms));
                headers
                    .insert("retry-after", HeaderValue::from(retry_after_ms.div_ceil(1000).max(1)));
            }
            response
        }
    }
}
