//! The admin API's measurement half, behind the admin key: the SLIs of recorded calls over a
//! window (`GET /admin/sli?window=1h`, `&since_ms=` for a span inside it such as a drill's, per
//! route, tier and label, and per route over time in
//! buckets for charts) and the embedded trace store (`GET /admin/traces`, newest first, and
//! `GET /admin/traces/{id}` by trace id or request id, with the call's timeline as a tree). Both
//! first wait briefly for the recorder to write what is queued, so a call made just before is
//! in the answer. `GET /admin/judge/verdicts` lists the online judge's verdicts (newest first,
//! over a window, by route, only the failed ones) with how many sampled answers still wait.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rein_core::sli::{self, Slice};
use rein_store::calls::{TraceFilter, VerdictFilter};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Gateway;
use super::admin::error;

pub(super) fn router() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/sli", get(slis))
        .route("/traces", get(traces))
        .route("/traces/{id}", get(trace))
        .route("/judge/verdicts", get(verdicts))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VerdictsQuery {
    /// Of calls made within this window (default 7d).
    #[serde(default)]
    window: Option<String>,
    #[serde(default)]
    route: Option<String>,
    /// Only failed answers.
    #[serde(default)]
    failed: Option<bool>,
    #[serde(default)]
    limit: Option<i64>,
}

async fn verdicts(
    State(gateway): State<Arc<Gateway>>,
    Query(query): Query<VerdictsQuery>,
) -> Response {
    let text = query.window.as_deref().unwrap_or("7d");
    let window = match sli::parse_window(text) {
        Ok(window) => window,
        Err(why) => return error(StatusCode::BAD_REQUEST, format!("`window`: {why}")),
    };
    let now = rein_core::clock::unix_ms() as i64;
    let since = now - i64::try_from(window.as_millis()).unwrap_or(i64::MAX).min(now);
    let filter = VerdictFilter {
        since_unix_ms: since,
        route: query.route.clone(),
        failed: query.failed.unwrap_or(false),
    };
    let limit = query.limit.unwrap_or(100).clamp(1, 10_000);
    let stats = gateway.runtime.judge.stats();
    match gateway.runtime.tool_store().verdicts_list(&filter, limit).await {
        Ok(list) => axum::Json(json!({
            "window": text,
            "pending": stats.pending(),
            "dropped": stats.dropped.load(std::sync::atomic::Ordering::Relaxed),
            "verdicts": list,
        }))
        .into_response(),
        Err(failure) => store_error(failure),
    }
}

/// The most recorded calls one SLI answer reads; beyond, it says it was truncated.
const MAX_CALLS: i64 = 200_000;
/// How long a read waits for the recorder to write what is queued.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

fn store_error(failure: rein_store::StoreError) -> Response {
    tracing::error!("admin: the call store failed: {failure}");
    error(StatusCode::SERVICE_UNAVAILABLE, format!("the call store is unavailable: {failure}"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SliQuery {
    /// `90s`, `15m`, `1h` (the default), `7d`.
    #[serde(default)]
    pub window: Option<String>,
    #[serde(default)]
    pub route: Option<String>,
    /// Buckets of the over-time series (default 12, at most 200).
    #[serde(default)]
    pub buckets: Option<usize>,
    /// Only the calls made at or after this time (Unix ms), inside the window: a drill's own
    /// span.
    #[serde(default)]
    pub since_ms: Option<i64>,
}

/// The SLIs `query` asks for, as `/admin/sli` answers them (the dashboard renders the same).
pub(super) async fn sli_view(gateway: &Gateway, query: &SliQuery) -> Result<Value, Response> {
    let text = query.window.as_deref().unwrap_or("1h");
    let window = sli::parse_window(text)
        .map_err(|why| error(StatusCode::BAD_REQUEST, format!("`window`: {why}")))?;
    let buckets = query.buckets.unwrap_or(12);
    if !(1..=200).contains(&buckets) {
        return Err(error(StatusCode::BAD_REQUEST, "`buckets` must be between 1 and 200"));
    }
    let runtime = &gateway.runtime;
    if !runtime.recorder.enabled() {
        return Err(error(
            StatusCode::CONFLICT,
            "calls are not recorded: `[traces] enabled = false` in the config",
        ));
    }
    runtime.recorder.flush(FLUSH_WAIT).await;
    let now = rein_core::clock::unix_ms() as i64;
    let since = now - i64::try_from(window.as_millis()).unwrap_or(i64::MAX).min(now);
    let since = query.since_ms.map_or(since, |from| from.clamp(since, now));
    let calls = runtime
        .tool_store()
        .calls_since(since, query.route.as_deref(), MAX_CALLS)
        .await
        .map_err(store_error)?;
    let truncated = calls.len() as i64 >= MAX_CALLS;
    let records: Vec<sli::CallRecord> = calls.iter().map(|(_, record)| record.clone()).collect();
    let slices: Vec<Value> = sli::breakdown(&records)
        .into_iter()
        .map(|(slice, slis)| {
            let mut value = serde_json::to_value(&slis).unwrap_or(Value::Null);
            if let (Value::Object(map), Value::Object(head)) =
                (&mut value, serde_json::to_value(&slice).unwrap_or(Value::Null))
            {
                for (key, field) in head {
                    map.insert(key, field);
                }
            }
            value
        })
        .collect();
    let routes: Vec<Value> = sli::breakdown(&records)
        .into_iter()
        .filter_map(|(slice, slis)| match slice {
            Slice::Route { route } => Some(json!({ "route": route, "slis": slis })),
            _ => None,
        })
        .collect();
    let series = sli::over_time(&calls, since, now, buckets);
    Ok(json!({
        "window": text,
        "window_ms": window.as_millis() as u64,
        "since_unix_ms": since,
        "until_unix_ms": now,
        "calls": records.len(),
        "truncated": truncated,
        "routes": routes,
        "slices": slices,
        "series": series,
    }))
}

async fn slis(State(gateway): State<Arc<Gateway>>, Query(query): Query<SliQuery>) -> Response {
    match sli_view(&gateway, &query).await {
        Ok(view) => axum::Json(view).into_response(),
        Err(response) => response,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TracesQuery {
    #[serde(default)]
    route: Option<String>,
    #[serde(default)]
    outcome: Option<String>,
    /// Only calls not answered on the first try.
    #[serde(default)]
    notable: Option<bool>,
    #[serde(default)]
    limit: Option<i64>,
}

const OUTCOMES: [&str; 8] = [
    "answered",
    "fallback",
    "degraded",
    "stopped",
    "interrupted",
    "declined",
    "handed_off",
    "clarified",
];

async fn traces(State(gateway): State<Arc<Gateway>>, Query(query): Query<TracesQuery>) -> Response {
    if let Some(outcome) = &query.outcome
        && !OUTCOMES.contains(&outcome.as_str())
    {
        return error(
            StatusCode::BAD_REQUEST,
            format!("`outcome` must be one of {} (got `{outcome}`)", OUTCOMES.join(", ")),
        );
    }
    gateway.runtime.recorder.flush(FLUSH_WAIT).await;
    let filter = TraceFilter {
        route: query.route.clone(),
        outcome: query.outcome.clone(),
        notable: query.notable.unwrap_or(false),
    };
    let limit = query.limit.unwrap_or(50).clamp(1, 1_000);
    match gateway.runtime.tool_store().traces_list(&filter, limit).await {
        Ok(list) => axum::Json(json!({ "traces": list })).into_response(),
        Err(failure) => store_error(failure),
    }
}

async fn trace(State(gateway): State<Arc<Gateway>>, Path(id): Path<String>) -> Response {
    if id.is_empty()
        || id.len() > 128
        || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return error(StatusCode::BAD_REQUEST, "a trace is named by its trace id or request id");
    }
    gateway.runtime.recorder.flush(FLUSH_WAIT).await;
    match gateway.runtime.tool_store().trace_get(&id).await {
        Ok(traces) if traces.is_empty() => error(
            StatusCode::NOT_FOUND,
            format!(
                "no kept trace `{id}` (every call not answered on the first try keeps its trace for the retention window; a routine call's is written while its route is under `[traces] routine_per_second` and kept among the newest `keep_last`)"
            ),
        ),
        Ok(traces) => {
            let calls: Vec<Value> = traces
                .iter()
                .map(|trace| json!({ "trace": trace, "tree": trace.render_tree() }))
                .collect();
            axum::Json(json!({ "id": id, "calls": calls })).into_response()
        }
        Err(failure) => store_error(failure),
    }
}
