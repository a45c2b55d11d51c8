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
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rein_runtime::Snapshot;
use rein_runtime::config::ServerConfig;
use rein_runtime::runs::RunStep;
use rein_tools::{ToolError, ToolOutcome, ToolStatus};
use serde_json::Value;

use rein_core::trace::SpanEvent;

use super::intake::{self, Admitted, CONVERSATION_HEADER, IDEMPOTENCY_HEADER, Refusal};
use super::record::ToolRecording;
use super::{ApiError, Gateway};

pub(super) async fn call(
    State(gateway): State<Arc<Gateway>>,
    Path(tool): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let runtime = gateway.current();
    let (request_id, admitted) = intake::admit(&runtime, &headers, body).await;
    let answered = match admitted {
        Ok(call) => dispatch(&gateway, &runtime, &tool, call, &request_id).await,
        Err(refusal) => Err(refused(refusal, &runtime.config.server, &request_id)),
    };
    match answered {
        Ok(response) => response,
        Err(error) => {
            gateway.metrics.http_error("tools", error.status.as_u16());
            error.into_response()
        }
    }
}

/// A call the edge turned away, in the OpenAI error shape the tool endpoint speaks.
fn refused(refusal: Refusal, server: &ServerConfig, request_id: &str) -> ApiError {
    let invalid = "invalid_request_error";
    match refusal {
        Refusal::Unauthorized => ApiError::tool(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            None,
            "Incorrect API key provided. Send a rein client key as `Authorization: Bearer <key>`.",
            request_id,
        ),
        Refusal::Header(problem) => ApiError::tool(
            StatusCode::BAD_REQUEST,
            invalid,
            Some(problem.header),
            &problem.message,
            request_id,
        ),
        Refusal::MediaType(message) => {
            ApiError::tool(StatusCode::UNSUPPORTED_MEDIA_TYPE, invalid, None, &message, request_id)
        }
        Refusal::Body(error) => {
            let message = error.message(server);
            ApiError::tool(error.status(), invalid, None, &message, request_id).closing()
        }
    }
}

/// The arguments, then the dispatcher; every refusal is an [`ApiError`].
async fn dispatch(
    gateway: &Gateway,
    runtime: &Snapshot,
    tool: &str,
    call: Admitted,
    request_id: &str,
) -> Result<Response, ApiError> {
    let invalid = |param: Option<&str>, message: &str| {
        ApiError::tool(StatusCode::BAD_REQUEST, "invalid_request_error", param, message, request_id)
    };
    let Admitted { ctx, body: bytes } = call;
    let recording = ToolRecording::start(&ctx, tool);
    let args: Value = match serde_json::from_slice(&bytes) {
        Ok(value @ Value::Object(_)) => value,
        Ok(_) => {
            return Err(invalid(
                None,
                "The body must be a JSON object: the tool call's arguments.",
            ));
        }
        Err(e) => return Err(invalid(None, &format!("The body is not valid JSON: {e}"))),
    };
    let settled = settle(gateway, runtime, tool, &ctx, args, recording, request_id, None)
        .await
        .map_err(|failure| tool_error(&failure, tool, request_id))?;
    let mut response = match settled.kind {
        Settled::Stopped { status } => {
            stopped(tool, &status, &runtime.config.runs.stopped_detail, request_id)
        }
        Settled::Done { outcome, run_status } => {
            let mut response = answered(outcome, request_id);
            if let Some(status) = run_status
                && let Ok(value) = HeaderValue::from_str(&status)
            {
                response.headers_mut().insert("x-rein-run-status", value);
            }
            response
        }
    };
    super::chat::trace_header(response.headers_mut(), settled.trace_id.as_deref());
    Ok(response)
}

/// How a tool call through rein ended, whatever the caller's protocol.
pub(super) struct SettledCall {
    pub kind: Settled,
    /// The call's trace, when it is kept.
    pub trace_id: Option<String>,
}

pub(super) enum Settled {
    /// The agent's run is stopped (`status`): nothing ran.
    Stopped { status: String },
    /// The dispatcher's outcome, and the run's new status when this call stopped it.
    Done { outcome: ToolOutcome, run_status: Option<String> },
}

/// One tool call with its run's stop conditions around it (the same for the tool endpoint and
/// MCP): a stopped run refuses it; otherwise the ladder runs (`caller` for recognising a
/// re-issue), an `ok` result becomes evidence for the run, the run's tallies move, a stop or a
/// gate goes to a person, and the call's trace is recorded.
#[allow(clippy::too_many_arguments)]
pub(super) async fn settle(
    gateway: &Gateway,
    runtime: &Snapshot,
    tool: &str,
    ctx: &rein_core::CallContext,
    args: Value,
    mut recording: ToolRecording,
    request_id: &str,
    caller: Option<&str>,
) -> Result<SettledCall, ToolError> {
    // The run's stop conditions, counted by rein (a tool it does not know is the dispatcher's
    // 404, not a step of the run).
    let stops = &gateway.runtime.stops;
    let runs = &runtime.config.runs;
    let same_call = match runtime.tools.knows(tool, ctx.deadline()).await {
        true => match stops.tool_call(runs, ctx, tool, &args).await? {
            RunStep::Go { same_call } => {
                if ctx.run_id.is_some() {
                    let at = recording.now_ms();
                    let guard = SpanEvent::new("run_guard", at).with("rein.same_call", same_call);
                    recording.event(guard);
                }
                same_call
            }
            RunStep::Stopped { status, now } => {
                recording.event(stop_event(recording.now_ms(), &status));
                if now {
                    gateway.metrics.run_stopped(&status);
                    let created = stop_handoff(gateway, runtime, ctx, request_id, &status).await;
                    recording.event(stop_handoff_event(recording.now_ms(), &status, created));
                }
                let trace_id = recording.trace_id().map(str::to_string);
                recording.finish(gateway, "stopped", None);
                return Ok(SettledCall { kind: Settled::Stopped { status }, trace_id });
            }
        },
        false => 0,
    };
    let logged_args = ctx.run_id.as_ref().map(|_| args.clone());
    let outcome = runtime.tools.call_as(ctx, tool, args, caller).await?;
    let mut run_status = None;
    if let Some(run) = &ctx.run_id {
        let items = runtime.tools.evidence_of(tool, &outcome.envelope);
        if !items.is_empty() {
            let at = recording.now_ms();
            recording.event(SpanEvent::new("evidence", at).with("rein.items", items.len()));
        }
        stops.record_evidence(run, items).await?;
        let args = logged_args.unwrap_or_default();
        let status = outcome.status.as_str();
        stops.log_tool(ctx, tool, &args, status, &outcome.envelope).await?;
        let error = (outcome.status != ToolStatus::Ok).then(|| failure_of(&outcome.envelope));
        run_status = stops.tool_result(runs, ctx, tool, same_call, error.as_deref()).await?;
    }
    if let Some(status) = &run_status {
        recording.event(stop_event(recording.now_ms(), status));
        gateway.metrics.run_stopped(status);
        let created = stop_handoff(gateway, runtime, ctx, request_id, status).await;
        recording.event(stop_handoff_event(recording.now_ms(), status, created));
    }
    if outcome.status == ToolStatus::PendingApproval && !outcome.replayed {
        // A gate in code held the action for a person: an escalation of its own.
        let route = run_route(gateway, ctx).await;
        gateway.metrics.escalated(&route, rein_core::handoff::Trigger::Gate.as_str());
    }
    tracing::info!(
        request_id,
        tool,
        status = outcome.status.as_str(),
        rung = outcome.served_by.as_deref().unwrap_or("-"),
        replayed = outcome.replayed,
        "tool call finished"
    );
    let trace_id = recording.trace_id().map(str::to_string);
    recording.finish(gateway, outcome.status.as_str(), Some(&outcome));
    Ok(SettledCall { kind: Settled::Done { outcome, run_status }, trace_id })
}

/// The route the call's run last made a model call on (`-` when none is known).
async fn run_route(gateway: &Gateway, ctx: &rein_core::CallContext) -> String {
    match gateway.runtime.stops.info(ctx).await {
        Ok(Some(info)) => info.route.unwrap_or_else(|| "-".to_string()),
        _ => "-".to_string(),
    }
}

/// A run this tool call stopped goes to a person, with the stop as its trigger. Whether this
/// made the hand-off, or `None` when it could not be kept.
async fn stop_handoff(
    gateway: &Gateway,
    runtime: &Snapshot,
    ctx: &rein_core::CallContext,
    request_id: &str,
    status: &str,
) -> Option<bool> {
    let route = run_route(gateway, ctx).await;
    let known = (route != "-").then(|| route.clone());
    let stop = rein_runtime::escalation::Escalation::stopped(status, known);
    super::run::hand_off(gateway, runtime, ctx, request_id, &route, stop).await
}

/// The run stopped (`status`), on the call's trace.
fn stop_event(at_ms: u64, status: &str) -> SpanEvent {
    SpanEvent::new("run_stopped", at_ms).with("rein.run_status", status)
}

/// The stop's hand-off, on the call's trace.
fn stop_handoff_event(at_ms: u64, status: &str, created: Option<bool>) -> SpanEvent {
    let stop = rein_core::handoff::Trigger::StopCondition;
    super::record::handoff_event(at_ms, stop, status, created)
}

/// What a tool result failed with, for the run's same-error count: its status and detail.
fn failure_of(envelope: &Value) -> String {
    let status = envelope.get("status").and_then(Value::as_str).unwrap_or("failed");
    let detail = envelope.get("detail").and_then(Value::as_str).unwrap_or("");
    format!("{status}: {detail}")
}

/// A tool call in a stopped run: nothing ran, and the envelope tells the model what to say.
pub(super) fn stopped(tool: &str, status: &str, detail: &str, request_id: &str) -> Response {
    tracing::info!(request_id, tool, status, "tool call refused: the run is stopped");
    let mut response = Json(rein_tools::envelope::stopped(tool, status, detail)).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        ("x-rein-request-id", request_id),
        ("x-rein-outcome", "stopped"),
        ("x-rein-run-status", status),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    }
    response
}

/// The envelope the model should see, with headers that say what happened.
fn answered(outcome: ToolOutcome, request_id: &str) -> Response {
    let status = match outcome.status {
        ToolStatus::Queued | ToolStatus::PendingApproval => StatusCode::ACCEPTED,
        ToolStatus::Ok | ToolStatus::Refused | ToolStatus::Busy | ToolStatus::Stopped => {
            StatusCode::OK
        }
    };
    let retry_after_ms = outcome.envelope.get("retry_after_ms").and_then(Value::as_u64);
    let key = outcome.envelope.get("idempotency_key").and_then(Value::as_str).map(str::to_string);
    let mut response = (status, Json(outcome.envelope)).into_response();
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    set("x-rein-request-id", request_id);
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

/// A call the dispatcher refused, as the caller's mistake (4xx) or rein's store failing (503).
fn tool_error(failure: &ToolError, tool: &str, request_id: &str) -> ApiError {
    let (status, kind, param) = match failure {
        ToolError::UnknownTool(_) => (StatusCode::NOT_FOUND, "not_found_error", None),
        ToolError::BadArgs(_) => (StatusCode::BAD_REQUEST, "invalid_request_error", None),
        ToolError::BadArgument { argument, .. } => {
            (StatusCode::BAD_REQUEST, "invalid_request_error", Some(argument.as_str()))
        }
        ToolError::MissingConversation { .. } => {
            (StatusCode::BAD_REQUEST, "invalid_request_error", Some(CONVERSATION_HEADER))
        }
        ToolError::KeyMismatch { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_error", Some(IDEMPOTENCY_HEADER))
        }
        ToolError::KeyInFlight { .. } => {
            (StatusCode::CONFLICT, "idempotency_error", Some(IDEMPOTENCY_HEADER))
        }
        ToolError::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "api_error", None),
    };
    let message = match failure {
        ToolError::Store(store) => {
            tracing::error!(request_id, tool, "tool store failed: {store}");
            "rein's tool store is unavailable; nothing was sent. Retry with the same idempotency key.".to_string()
        }
        other => other.to_string(),
    };
    let error = ApiError::tool(status, kind, param, &message, request_id);
    match failure {
        // By then the first request has finished or its key can be taken over.
        ToolError::KeyInFlight { retry_after_ms, .. } => error
            .header("retry-after-ms", HeaderValue::from(*retry_after_ms))
            .header("retry-after", HeaderValue::from(retry_after_ms.div_ceil(1000).max(1))),
        _ => error,
    }
}
