//! The levers an operator pulls when a route's quality drops, most easily undone first, each one
//! admin call and audited (who, when, why): revert the settings version
//! (`POST /admin/routes/{route}/revert`, in `admin`), pin a tier's previous model snapshot
//! (`POST .../pin-model`: a new settings version equal to the active one with that tier's model
//! replaced, revertable like any version), route the route's calls to a named tier without a
//! deploy (`POST .../route-to`, `DELETE .../route-to` or `{"tier": null}` to release: recorded
//! in the store before it applies, replayed at start, synced by every replica with the kill
//! switch), and the kill switch (`/admin/kill`). `GET .../levers` says which are engaged and
//! since when; the dashboard shows the same beside the quality score.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rein_core::{KillFlip, KillScope, RouteToFlip};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Gateway;
use super::admin::{error, known_route, parse_body};

/// How many of a route's route-to flips `GET .../levers` lists, newest first.
const HISTORY: usize = 20;

pub(super) fn router() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/routes/{route}/levers", get(levers))
        .route("/routes/{route}/route-to", post(route_to).delete(release))
        .route("/routes/{route}/pin-model", post(pin_model))
}

/// `author` and `reason` must be given: every lever is audited.
pub(super) fn audited(author: &str, reason: &str) -> Option<Response> {
    if author.trim().is_empty() {
        return Some(error(StatusCode::BAD_REQUEST, "`author` must name who pulled the lever"));
    }
    reason
        .trim()
        .is_empty()
        .then(|| error(StatusCode::BAD_REQUEST, "`reason` must say why the lever was pulled"))
}

/// The tier names of `route` in the config in force.
fn tiers_of(gateway: &Gateway, route: &str) -> Vec<String> {
    gateway
        .current()
        .config
        .routes
        .get(route)
        .map(|config| config.tiers.iter().map(|tier| tier.name.clone()).collect())
        .unwrap_or_default()
}

/// `tier` must be one of the route's tiers: a 400 naming the field otherwise.
fn known_tier(gateway: &Gateway, route: &str, tier: &str) -> Option<Response> {
    let tiers = tiers_of(gateway, route);
    (!tiers.iter().any(|name| name == tier)).then(|| {
        error(
            StatusCode::BAD_REQUEST,
            format!("`tier`: route `{route}` has no tier `{tier}` (tiers: {})", tiers.join(", ")),
        )
    })
}

/// The last flip of the kill switch's `scope`, while it leaves the switch engaged.
fn kill_engaged(audit: &[KillFlip], scope: &KillScope) -> Value {
    match audit.iter().rev().find(|flip| &flip.scope == scope) {
        Some(flip) if flip.engaged => {
            json!({ "reason": flip.reason, "since_unix_ms": flip.at_unix_ms })
        }
        _ => Value::Null,
    }
}

/// Which levers are engaged on `route` and since when, as `GET .../levers` answers (the
/// dashboard renders the same). `engaged` lists them, most easily undone first;
/// `route_to_history` the route's latest route-to flips, newest first, with who, when and why.
pub(super) fn levers_view(gateway: &Gateway, route: &str) -> Value {
    let runtime = &gateway.runtime;
    let mut engaged = Vec::new();
    let settings = match runtime.store.active_settings(route) {
        Ok(Some(active)) => {
            if let Some(lever) = &active.lever {
                engaged.push(lever.clone());
            }
            serde_json::to_value(&active).unwrap_or(Value::Null)
        }
        Ok(None) => Value::Null,
        Err(failure) => json!({ "error": failure.to_string() }),
    };
    let tiers = tiers_of(gateway, route);
    let route_to = match runtime.engine.levers().route_to(route) {
        Some(flip) => {
            engaged.push("route_to".to_string());
            // A reload may have removed its tier: then every tier is tried, and this says so.
            let applies = flip.tier.as_ref().is_some_and(|tier| tiers.contains(tier));
            json!({
                "tier": flip.tier,
                "applies": applies,
                "author": flip.author,
                "reason": flip.reason,
                "since_unix_ms": flip.at_unix_ms,
            })
        }
        None => Value::Null,
    };
    let audit = runtime.engine.kill_switch().audit();
    let kill_route = kill_engaged(&audit, &KillScope::Route(route.to_string()));
    let kill_global = kill_engaged(&audit, &KillScope::Global);
    if !kill_route.is_null() || !kill_global.is_null() {
        engaged.push("kill_switch".to_string());
    }
    let history: Vec<RouteToFlip> = runtime
        .engine
        .levers()
        .audit()
        .into_iter()
        .rev()
        .filter(|flip| flip.route == route)
        .take(HISTORY)
        .collect();
    let drill = runtime.engine.levers().drill(route);
    let drillable = gateway.current().config.routes.get(route).is_some_and(|r| r.drillable);
    json!({
        "route": route,
        "engaged": engaged,
        "settings": settings,
        "route_to": route_to,
        "route_to_history": history,
        "kill_switch": { "route": kill_route, "global": kill_global },
        "failover_drill": drill,
        "drillable": drillable,
        "tiers": tiers,
    })
}

async fn levers(State(gateway): State<Arc<Gateway>>, Path(route): Path<String>) -> Response {
    if let Some(response) = known_route(&gateway, &route) {
        return response;
    }
    axum::Json(levers_view(&gateway, &route)).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteTo {
    /// The tier the route's calls start at; `null` releases the lever.
    tier: Option<String>,
    author: String,
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Release {
    author: String,
    reason: String,
}

async fn route_to(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(response) = known_route(&gateway, &route) {
        return response;
    }
    let request: RouteTo = match parse_body(
        &body,
        "{\"tier\": string | null, \"author\": string, \"reason\": string}",
    ) {
        Ok(parsed) => parsed,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    if let Some(response) = audited(&request.author, &request.reason) {
        return response;
    }
    if let Some(tier) = &request.tier
        && let Some(response) = known_tier(&gateway, &route, tier)
    {
        return response;
    }
    flip_route_to(&gateway, RouteToFlip::now(route, request.tier, request.author, request.reason))
        .await
}

async fn release(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(response) = known_route(&gateway, &route) {
        return response;
    }
    let request: Release = match parse_body(&body, "{\"author\": string, \"reason\": string}") {
        Ok(parsed) => parsed,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    if let Some(response) = audited(&request.author, &request.reason) {
        return response;
    }
    flip_route_to(&gateway, RouteToFlip::now(route, None, request.author, request.reason)).await
}

/// Record the flip, then apply it through the sync every replica runs, so all of them apply
/// flips in the store's order; a flip the store could not keep does not take effect.
async fn flip_route_to(gateway: &Gateway, flip: RouteToFlip) -> Response {
    if let Err(failure) = gateway.runtime.tool_store().route_to_record(&flip).await {
        tracing::error!("cannot record a route-to flip: {failure}");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the flip could not be recorded in the store, so it was not applied; try again",
        );
    }
    if let Err(failure) = gateway.runtime.sync_route_to().await {
        // Recorded: the next periodic sync applies it.
        tracing::warn!("route-to flip recorded but not yet applied: {failure}");
    }
    axum::Json(flip).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinModel {
    tier: String,
    model: String,
    author: String,
    reason: String,
}

async fn pin_model(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(response) = known_route(&gateway, &route) {
        return response;
    }
    let request: PinModel = match parse_body(
        &body,
        "{\"tier\": string, \"model\": string, \"author\": string, \"reason\": string}",
    ) {
        Ok(parsed) => parsed,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    if let Some(response) = audited(&request.author, &request.reason) {
        return response;
    }
    if let Some(response) = known_tier(&gateway, &route, &request.tier) {
        return response;
    }
    if request.model.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "`model` must name the snapshot to pin");
    }
    let pinned = gateway.runtime.store.pin_model(
        &route,
        &request.tier,
        request.model.trim(),
        &request.author,
        &request.reason,
    );
    let info = match pinned {
        Ok(info) => info,
        Err(rein_store::StoreError::NoSuchTier { .. }) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("`tier`: the active settings of `{route}` have no tier `{}`", request.tier),
            );
        }
        Err(failure @ rein_store::StoreError::NoSuchVersion { .. }) => {
            return error(StatusCode::CONFLICT, failure.to_string());
        }
        Err(failure) => return error(StatusCode::INTERNAL_SERVER_ERROR, failure.to_string()),
    };
    if let Err(e) = gateway.runtime.refresh_routes().await {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("version {} stored but not applied: {e}", info.version),
        );
    }
    axum::Json(info).into_response()
}
