//! The admin API, behind its own key: the kill switch (read, flip, audit), tier cooldown states,
//! config reload and the effective config with secrets masked (the outbox, approvals and tool
//! breakers are in `admin_tools`). Answers are JSON; errors are
//! `{"error": {"message": ...}}`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rein_core::{KillFlip, KillScope};
use serde::Deserialize;
use serde_json::json;

use super::{Gateway, StartError};

pub(super) fn router() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/kill", get(kill_state).post(kill_flip))
        .route("/tiers", get(tiers))
        .route("/reload", post(reload))
        .route("/config", get(config))
        .route("/routes/{route}/versions", get(versions).post(new_version))
        .route("/routes/{route}/diff", get(diff))
        .route("/routes/{route}/revert", post(revert))
        .merge(super::admin_tools::router())
        .merge(super::admin_coverage::router())
        .merge(super::admin_levers::router())
        .merge(super::admin_drills::router())
        .merge(super::admin_handoffs::router())
        .merge(super::admin_slis::router())
        .merge(super::probe::router())
}

pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": { "message": message.into() } }))).into_response()
}

/// Parse a JSON body; the error says the shape it must have and what was wrong.
pub(super) fn parse_body<T: serde::de::DeserializeOwned>(
    body: &[u8],
    shape: &str,
) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("body must be {shape}: {e}"))
}

/// Every admin route passes this first, before any extractor reads the request: the admin API
/// off without an admin key, and 401 without the right one.
pub(super) async fn guard(
    State(gateway): State<Arc<Gateway>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match denied(&gateway, request.headers()) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

fn denied(gateway: &Gateway, headers: &HeaderMap) -> Option<Response> {
    let runtime = gateway.current();
    if runtime.config.server.admin_key.is_none() {
        return Some(error(
            StatusCode::FORBIDDEN,
            "the admin API is off: set `server.admin_key_env` to the environment variable holding the admin key",
        ));
    }
    (!super::admin_allowed(&runtime, headers)).then(|| {
        error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong admin key (`Authorization: Bearer <admin key>`)",
        )
    })
}

async fn kill_state(State(gateway): State<Arc<Gateway>>) -> Response {
    let switch = gateway.runtime.engine.kill_switch();
    let routes: Vec<_> = gateway
        .runtime
        .engine
        .route_names()
        .into_iter()
        .map(|route| json!({ "route": route, "engaged_reason": switch.engaged_for(&route) }))
        .collect();
    axum::Json(json!({ "routes": routes, "audit": switch.audit() })).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Flip {
    /// A route name; absent for the global switch.
    #[serde(default)]
    route: Option<String>,
    engaged: bool,
    reason: String,
}

async fn kill_flip(State(gateway): State<Arc<Gateway>>, body: Bytes) -> Response {
    let flip: Flip =
        match parse_body(&body, "{\"route\"?: string, \"engaged\": bool, \"reason\": string}") {
            Ok(parsed) => parsed,
            Err(message) => return error(StatusCode::BAD_REQUEST, message),
        };
    if flip.reason.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "`reason` must say why the switch is flipped");
    }
    let scope = match flip.route {
        None => KillScope::Global,
        Some(route) if gateway.runtime.engine.route_names().contains(&route) => {
            KillScope::Route(route)
        }
        Some(route) => return error(StatusCode::NOT_FOUND, format!("no route named `{route}`")),
    };
    // Recorded first, then applied through the same sync every replica runs, so all of them
    // apply flips in the store's order; a flip the store could not keep does not take effect.
    let record = KillFlip::now(scope, flip.engaged, flip.reason);
    if let Err(failure) = gateway.runtime.tool_store().kill_record(&record).await {
        tracing::error!("cannot record a kill switch flip: {failure}");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the flip could not be recorded in the store, so it was not applied; try again",
        );
    }
    if let Err(failure) = gateway.runtime.sync_kill_switch().await {
        // Recorded: the next periodic sync applies it.
        tracing::warn!("kill switch flip recorded but not yet applied: {failure}");
    }
    axum::Json(record).into_response()
}

async fn tiers(State(gateway): State<Arc<Gateway>>) -> Response {
    axum::Json(json!({ "tiers": gateway.runtime.engine.tier_states() })).into_response()
}

async fn reload(State(gateway): State<Arc<Gateway>>) -> Response {
    match gateway.reload().await {
        Ok(version) => axum::Json(json!({ "version": version })).into_response(),
        Err(StartError::Config(problems)) => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({
                "error": {
                    "message": "the new config is invalid; the old one stays in force",
                    "problems": problems.problems.iter().map(|p| json!({"key": p.key, "message": p.message})).collect::<Vec<_>>(),
                }
            })),
        )
            .into_response(),
        Err(other) => error(StatusCode::BAD_REQUEST, format!("reload refused, the old config stays in force: {other}")),
    }
}

async fn config(State(gateway): State<Arc<Gateway>>) -> Response {
    let runtime = gateway.current();
    axum::Json(json!({ "version": runtime.version, "config": &runtime.config })).into_response()
}

fn store_error(failure: rein_store::StoreError) -> Response {
    let status = match failure {
        rein_store::StoreError::NoSuchVersion { .. } => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, failure.to_string())
}

/// The route must exist in the config in force.
pub(super) fn known_route(gateway: &Gateway, route: &str) -> Option<Response> {
    (!gateway.current().config.routes.contains_key(route))
        .then(|| error(StatusCode::NOT_FOUND, format!("no route named `{route}`")))
}

async fn versions(State(gateway): State<Arc<Gateway>>, Path(route): Path<String>) -> Response {
    if let Some(response) = known_route(&gateway, &route) {
        return response;
    }
    match gateway.runtime.store.versions(&route) {
        Ok(versions) => axum::Json(json!({ "route": route, "versions": versions })).into_response(),
        Err(e) => store_error(e),
    }
}

#[derive(Debug, Deserialize)]
struct DiffQuery {
    from: i64,
    to: i64,
}

async fn diff(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    Query(query): Query<DiffQuery>,
) -> Response {
    if let Some(response) = known_route(&gateway, &route) {
        return response;
    }
    match gateway.runtime.store.diff(&route, query.from, query.to) {
        Ok(changes) => axum::Json(
            json!({ "route": route, "from": query.from, "to": query.to, "changes": changes }),
        )
        .into_response(),
        Err(e) => store_error(e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewVersion {
    settings: rein_store::RouteSettings,
    author: String,
    #[serde(default)]
    note: String,
}

async fn new_version(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(response) = known_route(&gateway, &route) {
        return response;
    }
    let request: NewVersion = match parse_body(
        &body,
        "{\"settings\": {\"tiers\": {<tier>: {\"model\", \"system_prompt\"?, ...}}}, \"author\": string, \"note\"?: string}",
    ) {
        Ok(parsed) => parsed,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    if request.author.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "`author` must name who made the change");
    }
    let runtime = gateway.current();
    let tiers: Vec<&str> =
        runtime.config.routes[&route].tiers.iter().map(|t| t.name.as_str()).collect();
    for (tier, settings) in &request.settings.tiers {
        if !tiers.contains(&tier.as_str()) {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "`settings.tiers.{tier}`: route `{route}` has no such tier (tiers: {})",
                    tiers.join(", ")
                ),
            );
        }
        if settings.model.trim().is_empty() {
            return error(
                StatusCode::BAD_REQUEST,
                format!("`settings.tiers.{tier}.model` must not be empty"),
            );
        }
        if settings.temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
            return error(
                StatusCode::BAD_REQUEST,
                format!("`settings.tiers.{tier}.temperature` must be between 0.0 and 2.0"),
            );
        }
    }
    let info = match gateway.runtime.store.record_settings(
        &route,
        &request.settings,
        &request.author,
        &request.note,
    ) {
        Ok(info) => info,
        Err(e) => return store_error(e),
    };
    if let Err(e) = gateway.runtime.refresh_routes().await {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("version {} stored but not applied: {e}", info.version),
        );
    }
    axum::Json(info).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Revert {
    version: i64,
    author: String,
    reason: String,
}

async fn revert(
    State(gateway): State<Arc<Gateway>>,
    Path(route): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(response) = known_route(&gateway, &route) {
        return response;
    }
    let request: Revert =
        match parse_body(&body, "{\"version\": number, \"author\": string, \"reason\": string}") {
            Ok(parsed) => parsed,
            Err(message) => return error(StatusCode::BAD_REQUEST, message),
        };
    if request.reason.trim().is_empty() || request.author.trim().is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "`author` and `reason` must say who reverted and why",
        );
    }
    let info = match gateway.runtime.store.activate(
        &route,
        request.version,
        &request.author,
        &request.reason,
    ) {
        Ok(info) => info,
        Err(e) => return store_error(e),
    };
    if let Err(e) = gateway.runtime.refresh_routes().await {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("version {} activated but not applied: {e}", info.version),
        );
    }
    axum::Json(info).into_response()
}
