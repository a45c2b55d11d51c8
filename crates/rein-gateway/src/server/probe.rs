//! The golden-prompt probe (`[probe]`): its questions sent through the production path, the
//! gateway's own `POST /v1/chat/completions` on its listening address with a client key, so a
//! probe answer passes the edge, the run steps, the engine and the checks a customer's does.
//! Each answer is checked by its question's `expect` and tagged with the tier and model that
//! answered. A worker runs it every `every_ms` ± `jitter`; `POST /admin/probe/run` runs it now
//! and `GET /admin/probe` shows the last run. Each run sets `rein_probe_score{route}` (the share
//! of a route's questions that passed), which an alert rule watches.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rein_runtime::config::probe::ProbeQuestion;
use serde::Serialize;
use serde_json::{Value, json};

use super::Gateway;
use super::admin::error;

/// One question's answer in a probe run.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeResult {
    pub id: String,
    pub route: String,
    /// `pass`, `fail` or `error` (no answer to check).
    pub result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub tier: Option<String>,
    pub model: Option<String>,
    pub outcome: Option<String>,
    pub trace_id: Option<String>,
    pub elapsed_ms: u64,
}

/// One run of the probe.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeRun {
    pub at_unix_ms: u64,
    pub elapsed_ms: u64,
    /// The share of questions that passed.
    pub score: f64,
    pub results: Vec<ProbeResult>,
}

/// The probe's state: where the gateway listens, the last run, one run at a time.
#[derive(Debug, Default)]
pub(crate) struct Probe {
    addr: std::sync::OnceLock<SocketAddr>,
    last: std::sync::Mutex<Option<ProbeRun>>,
    running: tokio::sync::Mutex<()>,
}

impl Probe {
    /// The address probe calls go to (the listener's, as a client on this host reaches it).
    pub(crate) fn listening_on(&self, addr: SocketAddr) {
        let reachable = match addr.ip() {
            ip if ip.is_unspecified() && ip.is_ipv4() => {
                SocketAddr::from(([127, 0, 0, 1], addr.port()))
            }
            ip if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port()))
            }
            _ => addr,
        };
        let _ = self.addr.set(reachable);
    }

    pub(crate) fn last(&self) -> Option<ProbeRun> {
        self.last.lock().map(|last| last.clone()).unwrap_or_default()
    }
}

pub(super) fn router() -> Router<Arc<Gateway>> {
    Router::new().route("/probe", get(show)).route("/probe/run", post(run_now))
}

async fn show(State(gateway): State<Arc<Gateway>>) -> Response {
    let questions = gateway.current().config.probe.questions.len();
    Json(json!({"questions": questions, "last": gateway.probe.last()})).into_response()
}

async fn run_now(State(gateway): State<Arc<Gateway>>) -> Response {
    if gateway.current().config.probe.questions.is_empty() {
        return error(
            axum::http::StatusCode::CONFLICT,
            "the probe has no questions: add `[[probe.questions]]` to the config",
        );
    }
    match run_once(&gateway).await {
        Some(run) => Json(run).into_response(),
        None => error(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "the gateway is not listening yet; the probe has nowhere to send",
        ),
    }
}

/// The worker: a run every `every_ms` ± `jitter` (re-read from the config in force each time),
/// until `stop`.
pub(super) async fn schedule(gateway: Arc<Gateway>, mut stop: tokio::sync::watch::Receiver<bool>) {
    use rand::RngExt;
    loop {
        let wait = {
            let probe = &gateway.current().config.probe;
            probe.next_wait(rand::rng().random::<f64>())
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
                continue;
            }
        }
        if !gateway.current().config.probe.questions.is_empty() {
            run_once(&gateway).await;
        }
    }
}

/// Run every question once; `None` before the gateway listens.
pub(crate) async fn run_once(gateway: &Gateway) -> Option<ProbeRun> {
    let addr = *gateway.probe.addr.get()?;
    let _one = gateway.probe.running.lock().await;
    let runtime = gateway.current();
    let config = &runtime.config;
    let scheme = if config.server.tls.is_some() { "https" } else { "http" };
    // The call goes to this gateway's own listener: its certificate names the host clients use,
    // not the loopback address, so it is not checked here.
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(config.server.tls.is_some())
        .timeout(config.probe.timeout + Duration::from_secs(5))
        .build()
        .ok()?;
    let key = config.server.client_keys.first().map(|key| key.expose().to_string());
    let started = tokio::time::Instant::now();
    let at_unix_ms = rein_core::clock::unix_ms();
    let mut results = Vec::with_capacity(config.probe.questions.len());
    for question in &config.probe.questions {
        let url = format!("{scheme}://{addr}/v1/chat/completions");
        results.push(ask(&client, &url, key.as_deref(), config.probe.timeout, question).await);
    }
    let passed = results.iter().filter(|r| r.result == "pass").count();
    let run = ProbeRun {
        at_unix_ms,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        score: passed as f64 / results.len().max(1) as f64,
        results,
    };
    let counted = run.results.iter().map(|r| (r.route.as_str(), r.id.as_str(), r.result));
    gateway.metrics.probe_ran(counted, i64::try_from(at_unix_ms / 1000).unwrap_or(i64::MAX));
    for result in run.results.iter().filter(|r| r.result != "pass") {
        tracing::warn!(
            question = %result.id,
            route = %result.route,
            result = result.result,
            tier = result.tier.as_deref().unwrap_or("-"),
            detail = result.detail.as_deref().unwrap_or(""),
            "probe question failed"
        );
    }
    if let Ok(mut last) = gateway.probe.last.lock() {
        *last = Some(run.clone());
    }
    Some(run)
}

/// One question through the gateway, and its check.
async fn ask(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    timeout: Duration,
    question: &ProbeQuestion,
) -> ProbeResult {
    let started = tokio::time::Instant::now();
    let mut body = json!({
        "model": question.route,
        "messages": [{"role": "user", "content": question.question}],
    });
    if !question.evidence.is_empty() {
        let items: Vec<Value> = question.evidence.iter().map(|e| e.to_json()).collect();
        body["rein"] = json!({"evidence": items});
    }
    let mut request = client
        .post(url)
        .header("x-rein-deadline-ms", timeout.as_millis().to_string())
        .header("x-rein-labels", format!("probe={}", question.id))
        .json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let mut result = ProbeResult {
        id: question.id.clone(),
        route: question.route.clone(),
        result: "error",
        detail: None,
        tier: None,
        model: None,
        outcome: None,
        trace_id: None,
        elapsed_ms: 0,
    };
    match request.send().await {
        Err(failure) => result.detail = Some(format!("no answer: {failure}")),
        Ok(response) => {
            let header = |name: &str| {
                response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
            };
            result.tier = header("x-rein-tier");
            result.model = header("x-rein-model");
            result.outcome = header("x-rein-outcome");
            result.trace_id = header("x-rein-trace-id");
            let status = response.status();
            let answer: Value = response.json().await.unwrap_or(Value::Null);
            if status.is_success() {
                let text = answer.pointer("/choices/0/message/content").and_then(Value::as_str);
                match question.expect.check(text.unwrap_or(""), &question.evidence).await {
                    Ok(()) => result.result = "pass",
                    Err(why) => {
                        result.result = "fail";
                        result.detail = Some(why);
                    }
                }
            } else {
                let message = answer.pointer("/error/message").and_then(Value::as_str);
                result.detail =
                    Some(format!("the gateway answered {status}: {}", message.unwrap_or("")));
            }
        }
    }
    result.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    result
}
