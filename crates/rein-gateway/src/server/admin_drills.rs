//! The admin API's drills, for what only production has, each refused (403) on a route the
//! config does not mark `drillable = true`: a failover drill (`POST
//! /admin/routes/{route}/drill/failover`: a share of the route's calls start at its failover tier
//! until an expiry the gateway enforces itself, so a drill whose operator went away ends anyway;
//! `DELETE` ends it early), the kill-switch drill (`POST .../drill/kill-switch` flips the route's
//! switch with reason `drill`, recorded like any flip, and flips it back itself after `seconds`
//! (default 60) if the drill has not; it refuses to engage a switch already on and to release one
//! a drill did not engage), and the hand-off drill (`POST .../drill/handoff`
//! seeds conversations under the trigger `drill` into the hand-off queue and delivers them like
//! real ones). `rein drill` drives them and reports.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rein_core::{KillFlip, KillScope};
use serde::Deserialize;
use serde_json::json;

use super::Gateway;
use super::admin::{error, known_route, parse_body};

/// The reason of a kill-switch drill's flip on.
const DRILL_REASON: &str = "drill";
/// The reason of a kill-switch drill's flip back.
const DRILL_OVER: &str = "drill over";
/// The longest failover drill.
const MAX_DRILL: Duration = Duration::from_secs(3600);
/// The most conversations one hand-off drill seeds.
const MAX_SEEDED: usize = 50;

pub(super) fn router() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/routes/{route}/drill/failover", post(failover).delete(failover_stop))
        .route("/routes/{route}/drill/kill-switch", post(kill_switch))
        .route("/routes/{route}/drill/handoff", post(handoff))
}

/// A drill runs only against a route that exists and is marked drillable.
fn drillable(gateway: &Gateway, route: &str) -> Option<Response> {
    if let Some(response) = known_route(gateway, route) {
        return Some(response);
    }
    let marked = gateway.current().config.routes.get(route).is_some_and(|r| r.drillable);
    (!marked).then(|| {
        error(
            StatusCode::FORBIDDEN,
            format!(
                "route `{route}` is not drillable: set `drillable = true` under [routes.{route}] to allow drills on it"
            ),
        )
    })
}

fn author_given(author: &str) -> Option<Response> {
    author
        .trim()
        .is_empty()
        .then(|| error(StatusCode::BAD_REQUEST, "`author` must name who runs the drill"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Failover {
    share: f64,
    seconds: u64,
    author: String,
}

async fn failover(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(refused) = drillable(&gateway, &route) {
        return refused;
    }
    let request: Failover =
        match parse_body(&body, "{\"share\": number, \"seconds\": number, \"author\": string}") {
            Ok(parsed) => parsed,
            Err(message) => return error(StatusCode::BAD_REQUEST, message),
        };
    if let Some(response) = author_given(&request.author) {
        return response;
    }
    if !(request.share > 0.0 && request.share <= 1.0) {
        return error(StatusCode::BAD_REQUEST, "`share` must be above 0 and at most 1");
    }
    let length = Duration::from_secs(request.seconds);
    if length.is_zero() || length > MAX_DRILL {
        return error(
            StatusCode::BAD_REQUEST,
            format!("`seconds` must be between 1 and {}", MAX_DRILL.as_secs()),
        );
    }
    let engine = &gateway.runtime.engine;
    let (Some(tiers), Some(fallback)) = (engine.tier_names(&route), engine.failover_tier(&route))
    else {
        return error(
            StatusCode::CONFLICT,
            format!("route `{route}` has one tier: there is no fallback to drill"),
        );
    };
    let drill = engine.levers().start_drill(&route, request.share, length, &request.author);
    axum::Json(json!({
        "route": route,
        "primary": tiers.first(),
        "fallback": fallback,
        "share": drill.share,
        "author": drill.author,
        "started_unix_ms": drill.started_unix_ms,
        "ends_unix_ms": drill.ends_unix_ms,
    }))
    .into_response()
}

async fn failover_stop(State(gateway): State<Arc<Gateway>>, Path(route): Path<String>) -> Response {
    if let Some(refused) = drillable(&gateway, &route) {
        return refused;
    }
    let stopped = gateway.runtime.engine.levers().stop_drill(&route);
    axum::Json(json!({ "route": route, "stopped": stopped })).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KillDrill {
    engaged: bool,
    author: String,
    /// How long the switch may stay on before the gateway flips it back itself (default 60).
    #[serde(default)]
    seconds: Option<u64>,
}

/// How long a kill-switch drill's flip stays on when its drill does not flip it back.
const KILL_DRILL_DEFAULT: Duration = Duration::from_secs(60);

/// Flip the drill's switch back at `after` unless something else flipped the route since.
fn release_when_forgotten(gateway: Arc<Gateway>, engaged: KillFlip, after: Duration) {
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let runtime = &gateway.runtime;
        let audit = runtime.engine.kill_switch().audit();
        let last = audit.iter().rev().find(|flip| flip.scope == engaged.scope);
        if last != Some(&engaged) {
            return;
        }
        let release = KillFlip::now(engaged.scope.clone(), false, DRILL_EXPIRED);
        match runtime.tool_store().kill_record(&release).await {
            Ok(_) => {
                tracing::warn!(scope = ?engaged.scope, "kill-switch drill expired: switch released");
                if let Err(failure) = runtime.sync_kill_switch().await {
                    tracing::warn!(
                        "kill switch drill release recorded but not yet applied: {failure}"
                    );
                }
            }
            Err(failure) => {
                tracing::error!("cannot release an expired kill-switch drill: {failure}")
            }
        }
    });
}

/// The reason of the flip back when a drill's switch outlived its time.
const DRILL_EXPIRED: &str = "drill expired";

async fn kill_switch(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(refused) = drillable(&gateway, &route) {
        return refused;
    }
    let request: KillDrill = match parse_body(&body, "{\"engaged\": bool, \"author\": string}") {
        Ok(parsed) => parsed,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    if let Some(response) = author_given(&request.author) {
        return response;
    }
    let expiry = request.seconds.map_or(KILL_DRILL_DEFAULT, Duration::from_secs);
    if expiry.is_zero() || expiry > MAX_DRILL {
        return error(
            StatusCode::BAD_REQUEST,
            format!("`seconds` must be between 1 and {}", MAX_DRILL.as_secs()),
        );
    }
    let runtime = &gateway.runtime;
    let scope = KillScope::Route(route.clone());
    let audit = runtime.engine.kill_switch().audit();
    let last = audit.iter().rev().find(|flip| flip.scope == scope);
    let global = audit.iter().rev().find(|flip| flip.scope == KillScope::Global);
    if request.engaged {
        if last.is_some_and(|flip| flip.engaged) || global.is_some_and(|flip| flip.engaged) {
            return error(
                StatusCode::CONFLICT,
                format!(
                    "the kill switch is already engaged on `{route}`: no drill during a real one"
                ),
            );
        }
    } else if !last.is_some_and(|flip| flip.engaged && flip.reason == DRILL_REASON) {
        return error(
            StatusCode::CONFLICT,
            format!(
                "the kill switch on `{route}` was not engaged by a drill: a drill does not release it"
            ),
        );
    }
    let reason = if request.engaged { DRILL_REASON } else { DRILL_OVER };
    let record = KillFlip::now(scope, request.engaged, reason);
    if let Err(failure) = runtime.tool_store().kill_record(&record).await {
        tracing::error!("cannot record a kill switch drill flip: {failure}");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the flip could not be recorded in the store, so it was not applied; try again",
        );
    }
    tracing::warn!(route = %route, engaged = request.engaged, author = %request.author, "kill-switch drill");
    if let Err(failure) = runtime.sync_kill_switch().await {
        tracing::warn!("kill switch drill flip recorded but not yet applied: {failure}");
    }
    if request.engaged {
        // A drill whose operator went away does not leave customers on the degraded reply.
        release_when_forgotten(gateway.clone(), record.clone(), expiry);
    }
    axum::Json(json!({ "flip": record, "author": request.author })).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HandoffDrill {
    count: usize,
    author: String,
}

async fn handoff(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = drillable(&gateway, &route) {
        return refused;
    }
    let request: HandoffDrill = match parse_body(&body, "{\"count\": number, \"author\": string}") {
        Ok(parsed) => parsed,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    if let Some(response) = author_given(&request.author) {
        return response;
    }
    if !(1..=MAX_SEEDED).contains(&request.count) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("`count` must be between 1 and {MAX_SEEDED}"),
        );
    }
    let ctx = match super::intake::call_context(&headers) {
        Ok(ctx) => ctx,
        Err(problem) => return error(StatusCode::BAD_REQUEST, problem.message),
    };
    let snapshot = gateway.current();
    let seeded = gateway
        .runtime
        .escalations
        .seed_drill(
            &snapshot.config.handoffs,
            &snapshot.tools,
            &ctx,
            &route,
            request.count,
            &request.author,
        )
        .await;
    match seeded {
        Ok(handoffs) => {
            let seeded: Vec<_> = handoffs
                .iter()
                .map(|h| {
                    json!({
                        "id": h.id,
                        "conversation_id": h.conversation_id,
                        "created_unix_ms": h.created_unix_ms,
                    })
                })
                .collect();
            axum::Json(json!({ "route": route, "author": request.author, "handoffs": seeded }))
                .into_response()
        }
        Err(failure) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the hand-off store is unavailable: {failure}"),
        ),
    }
}
