//! `POST /admin/routes/{route}/coverage`: the route's coverage check run on a question and its
//! evidence, on its own, for `rein eval --sweep coverage` to score each case of a dataset
//! without the decline getting in the way. The body is `{"question": "...", "evidence": [...]}`
//! (or `messages` instead of `question`: the last user message is checked, as on a call); the
//! answer is the verdict (`score`, `cutoff`, `covered`, `method`, `label`, `calls`) and the
//! route's whole check (`check`), so a sweep can write it back with a new cutoff. Nothing is
//! handed off, noted in a run or counted in the SLIs. Refusals: 400 naming the field, 404 for
//! an unknown route, 409 for a route without a coverage check.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::Gateway;
use super::error::{ApiError, status};
use super::intake;
use crate::wire::{self, ErrorKind};

pub(super) fn router() -> Router<Arc<Gateway>> {
    Router::new().route("/routes/{route}/coverage", post(coverage))
}

const SHAPE: &str = "{\"question\": string, \"evidence\": [{\"id\", \"source\"?, \"text\"?, \"fields\"?}]} (or \"messages\" instead of \"question\")";

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::admin(StatusCode::BAD_REQUEST, message)
}

/// The question and the passages of a request body.
fn read(route: &str, body: &[u8]) -> Result<(String, rein_core::validate::Evidence), ApiError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("body must be {SHAPE}: {e}")))?;
    let Value::Object(fields) = value else { return Err(bad(format!("body must be {SHAPE}"))) };
    if let Some(unknown) =
        fields.keys().find(|key| !matches!(key.as_str(), "question" | "messages" | "evidence"))
    {
        return Err(bad(format!(
            "`{unknown}`: unknown field; the body takes `question` or `messages`, and `evidence`"
        )));
    }
    let question = match (fields.get("question"), fields.get("messages")) {
        (Some(_), Some(_)) => return Err(bad("give one of `question` or `messages`, not both")),
        (Some(Value::String(question)), None) if !question.trim().is_empty() => question.clone(),
        (Some(_), None) => return Err(bad("`question` must be a non-empty string")),
        (None, Some(messages)) => {
            let call = json!({"model": route, "messages": messages});
            let parsed = wire::openai::parse_request(call.to_string().as_bytes())
                .map_err(|error| bad(error.to_string()))?;
            match parsed.request.last_user_text() {
                Some(text) if !text.trim().is_empty() => text.to_string(),
                _ => return Err(bad("`messages` has no user message to check")),
            }
        }
        (None, None) => return Err(bad("`question` is required (or `messages`)")),
    };
    let evidence = wire::evidence_list(fields.get("evidence"), "evidence")
        .map_err(|error| bad(error.to_string()))?;
    if evidence.is_empty() {
        return Err(bad(
            "`evidence` must hold at least one item: the coverage check runs on a call's evidence, and a call without any is answered unchecked",
        ));
    }
    Ok((question, evidence))
}

async fn coverage(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match verdict(&gateway, &route, &headers, &body).await {
        Ok(verdict) => axum::Json(verdict).into_response(),
        Err(error) => error.into_response(),
    }
}

async fn verdict(
    gateway: &Gateway,
    route: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, ApiError> {
    let runtime = gateway.current();
    let Some(config) = runtime.config.routes.get(route) else {
        return Err(ApiError::admin(StatusCode::NOT_FOUND, format!("no route named `{route}`")));
    };
    let Some(check) = &config.escalation.coverage else {
        return Err(ApiError::admin(
            StatusCode::CONFLICT,
            format!(
                "route `{route}` has no coverage check (`coverage = {{ route = \"...\", cutoff = ... }}` under `[routes.{route}]`)"
            ),
        ));
    };
    let (question, evidence) = read(route, body)?;
    let ctx = intake::call_context(headers).map_err(|problem| bad(problem.message))?;
    let judged = check.judge(&gateway.runtime.engine, &ctx, &question, evidence.items()).await;
    let verdict = judged.map_err(|error| {
        ApiError::admin(
            status(ErrorKind::of_call_error(&error)),
            format!("the coverage check could not be made: {error}"),
        )
    })?;
    Ok(json!({
        "route": route,
        "score": verdict.score,
        "cutoff": verdict.cutoff,
        "covered": verdict.covered,
        "method": verdict.method,
        "label": verdict.label,
        "calls": verdict.calls,
        "check": check,
    }))
}
