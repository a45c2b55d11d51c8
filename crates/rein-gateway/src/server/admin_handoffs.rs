//! The admin API's hand-off half, behind the admin key: the queue of conversations sent to a
//! person (list, show with the whole packet), a reviewer's decision on a draft (approve it, edit
//! it, reject it; only the first decision counts, a second gets 409), and the review stats per
//! trigger: the edit rate (flagged when it stays under `[handoffs] edit_rate_floor`) and the
//! share of canary drafts reviewers caught. A canary is marked only in the store: the queue and
//! a hand-off's page show it like any other, so a reviewer cannot tell.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rein_store::handoffs::{Handoff, HandoffFilter, ReviewDecision};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Gateway;
use super::admin::{error, parse_body};

pub(super) fn router() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/handoffs", get(list))
        .route("/handoffs/stats", get(stats))
        .route("/handoffs/{id}", get(show))
        .route("/handoffs/{id}/decision", post(decide))
}

fn store_error(failure: rein_store::StoreError) -> Response {
    tracing::error!("admin: hand-off store failed: {failure}");
    error(StatusCode::SERVICE_UNAVAILABLE, format!("the hand-off store is unavailable: {failure}"))
}

/// A hand-off as reviewers and operators see it: everything but the canary mark.
fn view(handoff: &Handoff, with_packet: bool) -> Value {
    let mut value = serde_json::to_value(handoff).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.remove("canary");
        if !with_packet {
            map.remove("packet");
            let message = handoff.packet.get("customer_message").cloned().unwrap_or(Value::Null);
            map.insert("customer_message".into(), message);
            let reason = handoff.packet.get("reason").cloned().unwrap_or(Value::Null);
            map.insert("reason".into(), reason);
        }
    }
    value
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    trigger: Option<String>,
    /// `pending` (undecided), `decided` or `all` (the default).
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    limit: Option<i64>,
}

async fn list(State(gateway): State<Arc<Gateway>>, Query(query): Query<ListQuery>) -> Response {
    let decided = match query.state.as_deref() {
        None | Some("all") => None,
        Some("pending") => Some(false),
        Some("decided") => Some(true),
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("`state` must be pending, decided or all (got `{other}`)"),
            );
        }
    };
    if let Some(trigger) = &query.trigger
        && rein_core::handoff::Trigger::parse(trigger).is_none()
        && trigger != rein_runtime::escalation::DRILL_TRIGGER
    {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "`trigger` must be handoff_rule, coverage, checks_failed, stop_condition, gate, degraded or drill (got `{trigger}`)"
            ),
        );
    }
    let filter = HandoffFilter { trigger: query.trigger.clone(), decided };
    let limit = query.limit.unwrap_or(100).clamp(1, 10_000);
    match gateway.runtime.escalations.list(&filter, limit).await {
        Ok(handoffs) => {
            let listed: Vec<Value> = handoffs.iter().map(|h| view(h, false)).collect();
            axum::Json(json!({ "handoffs": listed })).into_response()
        }
        Err(failure) => store_error(failure),
    }
}

async fn show(State(gateway): State<Arc<Gateway>>, Path(id): Path<i64>) -> Response {
    match gateway.runtime.escalations.get(id).await {
        Ok(Some(handoff)) => axum::Json(view(&handoff, true)).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no hand-off {id}")),
        Err(failure) => store_error(failure),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    /// `approve`, `edit` or `reject`.
    decision: String,
    by: String,
    /// The reviewer's version of the draft (required with `edit`).
    #[serde(default)]
    draft: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

async fn decide(State(gateway): State<Arc<Gateway>>, Path(id): Path<i64>, body: Bytes) -> Response {
    let shape = r#"{"decision": "approve" | "edit" | "reject", "by": "<reviewer>", "draft": "<edited text, with edit>", "note": "..."}"#;
    let request: DecisionBody = match parse_body(&body, shape) {
        Ok(request) => request,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let decision = match request.decision.as_str() {
        "approve" => ReviewDecision::Approved,
        "edit" => ReviewDecision::Edited,
        "reject" => ReviewDecision::Rejected,
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("`decision` must be approve, edit or reject (got `{other}`)"),
            );
        }
    };
    if request.by.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "`by` must name the reviewer");
    }
    let draft = request.draft.as_deref().filter(|d| !d.trim().is_empty());
    match (decision, draft) {
        (ReviewDecision::Edited, None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "`draft` is required with `edit`: the reviewer's version",
            );
        }
        (ReviewDecision::Approved | ReviewDecision::Rejected, Some(_)) => {
            return error(StatusCode::BAD_REQUEST, "`draft` goes only with `edit`");
        }
        _ => {}
    }
    let note = request.note.unwrap_or_default();
    let escalations = &gateway.runtime.escalations;
    match escalations.decide(id, decision, &request.by, draft, &note).await {
        Ok(Some(handoff)) => {
            gateway.metrics.handoff_reviewed(&handoff.trigger, &request.decision);
            tracing::info!(handoff = id, decision = %request.decision, by = %request.by, "hand-off reviewed");
            axum::Json(json!({ "handoff": view(&handoff, false) })).into_response()
        }
        Ok(None) => match escalations.get(id).await {
            Ok(Some(_)) => error(
                StatusCode::CONFLICT,
                format!("hand-off {id} was already decided; nothing changed"),
            ),
            Ok(None) => error(StatusCode::NOT_FOUND, format!("no hand-off {id}")),
            Err(failure) => store_error(failure),
        },
        Err(failure) => store_error(failure),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatsQuery {
    /// Hand-offs made at or after this time (unix ms; default: the last 30 days).
    #[serde(default)]
    since_ms: Option<i64>,
}

async fn stats(State(gateway): State<Arc<Gateway>>, Query(query): Query<StatsQuery>) -> Response {
    let now = i64::try_from(rein_core::clock::unix_ms()).unwrap_or(i64::MAX);
    let since = query.since_ms.unwrap_or(now - 30 * 24 * 3_600_000);
    let config = gateway.current().config.handoffs.clone();
    match gateway.runtime.escalations.review_stats(&config, since).await {
        Ok(triggers) => axum::Json(json!({
            "since_ms": since,
            "edit_rate_floor": config.edit_rate_floor,
            "edit_rate_min_decided": config.edit_rate_min_decided,
            "triggers": triggers,
        }))
        .into_response(),
        Err(failure) => store_error(failure),
    }
}
