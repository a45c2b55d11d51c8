//! The admin API's tool half, behind the admin key: the outbox (list, show, replay now, mark
//! executed, drop), gate holds waiting for a person (list, approve, reject) and the tools' rung
//! breakers. An approval puts the held write in the outbox and wakes the replay worker, which
//! sends it once with its original idempotency key; only the first decision on a hold counts (a
//! second one gets 409). A write whose outcome is unknown and whose tool has no machine
//! duplicate guard waits in state `review`: an operator checks the backend, then marks it
//! executed (`POST /admin/outbox/{id}/executed`, with the result found) or releases it for
//! replay (`POST /admin/outbox/{id}/replay`: it did not execute).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rein_store::tools::{HoldState, OutboxItem, OutboxState};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Gateway;
use super::admin::{error, parse_body};

pub(super) fn router() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/outbox", get(outbox_list))
        .route("/outbox/{id}", get(outbox_show))
        .route("/outbox/{id}/replay", post(outbox_replay))
        .route("/outbox/{id}/drop", post(outbox_drop))
        .route("/outbox/{id}/executed", post(outbox_executed))
        .route("/approvals", get(approvals))
        .route("/approvals/{id}", get(approval))
        .route("/approvals/{id}/approve", post(approve))
        .route("/approvals/{id}/reject", post(reject))
        .route("/tools", get(tools))
}

fn tool_error(failure: rein_tools::ToolError) -> Response {
    tracing::error!("admin: tool store failed: {failure}");
    error(StatusCode::SERVICE_UNAVAILABLE, format!("{failure}"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    limit: Option<i64>,
}

impl ListQuery {
    /// The `state` filter (`all` or absent: none), or a message that lists the states there
    /// are.
    fn state<T: serde::de::DeserializeOwned>(&self, states: &str) -> Result<Option<T>, String> {
        match self.state.as_deref() {
            None | Some("all") => Ok(None),
            Some(text) => serde_json::from_value(Value::String(text.to_string()))
                .map(Some)
                .map_err(|_| format!("`state` must be {states} or all (got `{text}`)")),
        }
    }

    fn limit(&self) -> i64 {
        self.limit.unwrap_or(100).clamp(1, 10_000)
    }
}

/// An item as operators read it: its age and attempts up front.
fn item_json(item: &OutboxItem, now_unix_ms: i64) -> Value {
    let mut value = serde_json::to_value(item).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.insert("age_ms".into(), json!((now_unix_ms - item.created_unix_ms).max(0)));
    }
    value
}

async fn outbox_list(
    State(gateway): State<Arc<Gateway>>,
    Query(query): Query<ListQuery>,
) -> Response {
    let state: Option<OutboxState> = match query.state("pending, review, done, failed, dropped") {
        Ok(state) => state,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let limit = query.limit();
    let tools = gateway.current().tools.clone();
    let now = tools.now_unix_ms();
    match (tools.outbox_list(state, limit).await, tools.outbox_stats().await) {
        (Ok(items), Ok(stats)) => axum::Json(json!({
            "items": items.iter().map(|item| item_json(item, now)).collect::<Vec<_>>(),
            "stats": stats,
        }))
        .into_response(),
        (Err(failure), _) | (_, Err(failure)) => tool_error(failure),
    }
}

async fn outbox_show(State(gateway): State<Arc<Gateway>>, Path(id): Path<i64>) -> Response {
    let tools = gateway.current().tools.clone();
    match tools.outbox_get(id).await {
        Ok(Some(item)) => axum::Json(item_json(&item, tools.now_unix_ms())).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no outbox item {id}")),
        Err(failure) => tool_error(failure),
    }
}

async fn outbox_replay(State(gateway): State<Arc<Gateway>>, Path(id): Path<i64>) -> Response {
    let tools = gateway.current().tools.clone();
    match tools.outbox_replay_now(id).await {
        Ok(true) => {
            gateway.runtime.replay_kick.notify_one();
            axum::Json(json!({ "id": id, "due": "now" })).into_response()
        }
        Ok(false) => error(
            StatusCode::CONFLICT,
            format!("outbox item {id} does not exist or is already done or dropped"),
        ),
        Err(failure) => tool_error(failure),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reasoned {
    #[serde(default)]
    by: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

fn reasoned(body: &[u8]) -> Result<Reasoned, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Reasoned { by: None, reason: None, note: None });
    }
    parse_body(body, "{\"by\"?: string, \"reason\"?: string, \"note\"?: string}")
}

async fn outbox_drop(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<i64>,
    body: Bytes,
) -> Response {
    let request = match reasoned(&body) {
        Ok(request) => request,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let Some(reason) = request.reason.filter(|r| !r.trim().is_empty()) else {
        return error(StatusCode::BAD_REQUEST, "`reason` must say why the write is dropped");
    };
    let by = request.by.unwrap_or_else(|| "admin".to_string());
    let tools = gateway.current().tools.clone();
    // An item under a live lease is being sent right now and may execute: dropping it would
    // store "it has NOT executed" as its key's answer about a write that then runs. Refuse
    // until the send is over. (The store's drop checks the lease again in its transaction, so
    // a claim between this read and the drop still wins.)
    match tools.outbox_get(id).await {
        Ok(Some(item))
            if item.state == OutboxState::Pending
                && item.lease_until_unix_ms.is_some_and(|until| until > tools.now_unix_ms()) =>
        {
            return error(
                StatusCode::CONFLICT,
                format!(
                    "outbox item {id} is being sent right now and may execute; nothing changed. Retry the drop once the send is over."
                ),
            );
        }
        Ok(_) => {}
        Err(failure) => return tool_error(failure),
    }
    match tools.outbox_drop(id, &by, &reason).await {
        Ok(true) => axum::Json(json!({ "id": id, "state": "dropped" })).into_response(),
        Ok(false) => error(
            StatusCode::CONFLICT,
            format!(
                "outbox item {id} does not exist, is already done or dropped, or is being sent right now"
            ),
        ),
        Err(failure) => tool_error(failure),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Executed {
    #[serde(default)]
    by: Option<String>,
    /// The write's result as the operator found it at the backend.
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    note: Option<String>,
}

async fn outbox_executed(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<i64>,
    body: Bytes,
) -> Response {
    let request: Executed = if body.iter().all(u8::is_ascii_whitespace) {
        Executed { by: None, result: None, note: None }
    } else {
        match parse_body(&body, "{\"by\": string, \"result\"?: any, \"note\"?: string}") {
            Ok(request) => request,
            Err(message) => return error(StatusCode::BAD_REQUEST, message),
        }
    };
    let Some(by) = request.by.filter(|b| !b.trim().is_empty()) else {
        return error(StatusCode::BAD_REQUEST, "`by` must name the person who checked the backend");
    };
    let tools = gateway.current().tools.clone();
    let note = request.note.unwrap_or_default();
    match tools.outbox_mark_executed(id, &by, request.result, &note).await {
        Ok(true) => axum::Json(json!({ "id": id, "state": "done" })).into_response(),
        Ok(false) => error(
            StatusCode::CONFLICT,
            format!(
                "outbox item {id} does not exist, is not pending or in review, or is being sent right now; nothing changed"
            ),
        ),
        Err(failure) => tool_error(failure),
    }
}

async fn approvals(
    State(gateway): State<Arc<Gateway>>,
    Query(query): Query<ListQuery>,
) -> Response {
    let state: Option<HoldState> = match query.state("pending, approved, rejected") {
        Ok(state) => state,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let limit = query.limit();
    match gateway.current().tools.holds(state, limit).await {
        Ok(holds) => axum::Json(json!({ "holds": holds })).into_response(),
        Err(failure) => tool_error(failure),
    }
}

/// One hold: where an MCP client's approval request sends the person.
async fn approval(State(gateway): State<Arc<Gateway>>, Path(id): Path<i64>) -> Response {
    match gateway.current().tools.hold(id).await {
        Ok(Some(hold)) => axum::Json(json!({ "hold": hold })).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no hold {id}")),
        Err(failure) => tool_error(failure),
    }
}

async fn decide(gateway: Arc<Gateway>, id: i64, body: Bytes, approve: bool) -> Response {
    let request = match reasoned(&body) {
        Ok(request) => request,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let Some(by) = request.by.filter(|b| !b.trim().is_empty()) else {
        return error(StatusCode::BAD_REQUEST, "`by` must name the person deciding");
    };
    let note = request.note.or(request.reason).unwrap_or_default();
    match gateway.current().tools.decide(id, approve, &by, &note).await {
        Ok(Some(hold)) => {
            if approve {
                gateway.runtime.replay_kick.notify_one();
            }
            axum::Json(json!({ "hold": hold })).into_response()
        }
        Ok(None) => error(
            StatusCode::CONFLICT,
            format!("hold {id} does not exist or was already decided; nothing changed"),
        ),
        Err(failure) => tool_error(failure),
    }
}

async fn approve(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<i64>,
    body: Bytes,
) -> Response {
    decide(gateway, id, body, true).await
}

async fn reject(State(gateway): State<Arc<Gateway>>, Path(id): Path<i64>, body: Bytes) -> Response {
    decide(gateway, id, body, false).await
}

async fn tools(State(gateway): State<Arc<Gateway>>) -> Response {
    let tools = gateway.current().tools.clone();
    let list: Vec<_> =
        tools.tools().into_iter().map(|(name, kind)| json!({"tool": name, "kind": kind})).collect();
    axum::Json(json!({ "tools": list, "breakers": tools.breakers() })).into_response()
}
