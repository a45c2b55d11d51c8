//! rein's traces exported over OTLP to a real collector (Arize Phoenix, see [`super::phoenix`]):
//! a call that failed twice on its primary (first-token and attempt clocks) and was answered by
//! its fallback, under a caller's `traceparent`, is sent with [`OtlpExporter`] over
//! HTTP/protobuf and over gRPC to one Phoenix, read back through Phoenix's API and compared span
//! by span (ids, the caller's span as the root's parent, times, rein's and the GenAI
//! attributes, events, status). An export without the collector's key, or to an endpoint where
//! nothing listens, fails within its timeout without naming the key.

use std::collections::BTreeMap;
use std::time::Duration;

use rein_core::context::TraceParent;
use rein_core::model::Usage;
use rein_core::report::ServedBy;
use rein_core::trace::{CallInfo, Trace, TraceIds};
use rein_core::{AttemptRecord, CallReport, Clock, Failure, Outcome, SkipReason, Step, classify};
use rein_runtime::otlp::{OtlpConfig, OtlpExporter, Protocol};
use serde_json::{Value, json};

use super::phoenix::Phoenix;

const PROJECT: &str = "rein-otlp-test";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn attempt(tier: usize, name: &str, number: u32, started: u64, failure: Option<Failure>) -> Step {
    let classified = failure.as_ref().map(classify);
    Step::Attempt(AttemptRecord {
        tier,
        tier_name: name.into(),
        provider: format!("{name}-provider"),
        model: format!("{name}-model"),
        number,
        started_ms: started,
        elapsed_ms: 100,
        failure,
        classified,
        probe: false,
    })
}

/// Two failed attempts on the primary, a wait between them, one answered on the fallback.
fn report() -> CallReport {
    let first_token =
        Failure::ClockFired { clock: Clock::FirstToken, after: Duration::from_millis(100) };
    let attempt_cap =
        Failure::ClockFired { clock: Clock::Attempt, after: Duration::from_millis(100) };
    CallReport {
        route: "support".into(),
        settings_version: None,
        outcome: Outcome::Fallback,
        served_by: Some(ServedBy {
            tier: 1,
            tier_name: "fallback".into(),
            provider: "fallback-provider".into(),
            model: "fallback-model-2026".into(),
            failover: false,
        }),
        steps: vec![
            attempt(0, "primary", 1, 0, Some(first_token)),
            Step::Wait { tier: 0, at_ms: 100, wait_ms: 50, pushback: false },
            attempt(0, "primary", 2, 150, Some(attempt_cap)),
            Step::TierSkipped {
                tier: 0,
                tier_name: "primary".into(),
                at_ms: 250,
                reason: SkipReason::AttemptsExhausted,
            },
            attempt(1, "fallback", 1, 250, None),
        ],
        alerts: vec![],
        elapsed_ms: 360,
        rejected_draft: None,
        labels: BTreeMap::new(),
    }
}

/// A fresh trace (its own trace id) of the call, under the caller's span.
fn trace() -> Trace {
    let trace_id = rein_core::trace::new_trace_id();
    let parent = TraceParent::parse(&format!("00-{trace_id}-{CALLER_SPAN}-01")).unwrap();
    let info = CallInfo {
        ids: Some(TraceIds::for_call(Some(&parent))),
        request_id: "req_otlp".into(),
        started_unix_ms: rein_core::clock::unix_ms(),
        api: "openai".into(),
        request_model: "support".into(),
        usage: Some(Usage { input_tokens: 12, output_tokens: 7 }),
        provider_kinds: [
            ("primary-provider".to_string(), "openai".to_string()),
            ("fallback-provider".to_string(), "anthropic".to_string()),
        ]
        .into(),
        ..CallInfo::default()
    };
    Trace::of_call(&report(), info)
}

fn config(endpoint: String, protocol: Protocol, headers: Vec<(String, String)>) -> OtlpConfig {
    OtlpConfig {
        endpoint,
        protocol,
        headers,
        timeout: Duration::from_secs(10),
        service_name: PROJECT.into(),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix milliseconds of a UTC ISO 8601 time as Phoenix writes it
/// (`2026-01-02T03:04:05.678000+00:00`, or with `Z`).
fn unix_ms(iso: &str) -> u64 {
    let utc = iso.strip_suffix("+00:00").or_else(|| iso.strip_suffix('Z')).unwrap_or_else(|| {
        panic!("not a UTC time: {iso}");
    });
    let (date, time) = utc.split_once('T').unwrap();
    let date: Vec<i64> = date.split('-').map(|part| part.parse().unwrap()).collect();
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let hms: Vec<i64> = hms.split(':').map(|part| part.parse().unwrap()).collect();
    let millis: i64 = format!("{fraction:0<3}")[..3].parse().unwrap();
    let seconds =
        days_from_civil(date[0], date[1], date[2]) * 86_400 + hms[0] * 3_600 + hms[1] * 60 + hms[2];
    u64::try_from(seconds * 1_000 + millis).unwrap()
}

/// Phoenix's spans of `trace` match it span by span.
fn assert_same(trace: &Trace, spans: &[Value]) {
    assert_eq!(spans.len(), trace.spans.len(), "{spans:#?}");
    let by_id: BTreeMap<&str, &Value> =
        spans.iter().map(|span| (span["context"]["span_id"].as_str().unwrap(), span)).collect();
    assert!(spans.iter().all(|span| span["context"]["trace_id"] == json!(trace.trace_id)));

    let root = trace.root().unwrap();
    let got_root = by_id[root.span_id.as_str()];
    assert_eq!(got_root["parent_id"], json!(CALLER_SPAN), "the caller's span is the root's parent");
    assert_eq!(got_root["name"], json!("chat support"));
    assert_eq!(got_root["status_code"], json!("UNSET"));
    let attrs = &got_root["attributes"];
    for (key, value) in [
        ("gen_ai.operation.name", json!("chat")),
        ("gen_ai.request.model", json!("support")),
        ("gen_ai.provider.name", json!("anthropic")),
        ("gen_ai.response.model", json!("fallback-model-2026")),
        ("gen_ai.usage.input_tokens", json!(12)),
        ("gen_ai.usage.output_tokens", json!(7)),
        ("rein.outcome", json!("fallback")),
        ("rein.attempts", json!(3)),
        ("rein.failover", json!(false)),
        ("rein.request_id", json!("req_otlp")),
    ] {
        assert_eq!(attrs[key], value, "root attribute {key}: {attrs:#}");
    }
    let events = got_root["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["name"], json!("tier_skipped"));
    assert_eq!(events[0]["attributes"]["rein.reason"], json!("attempts_exhausted"));
    assert_eq!(unix_ms(events[0]["timestamp"].as_str().unwrap()), trace.started_unix_ms + 250);

    for span in &trace.spans {
        let got = by_id
            .get(span.span_id.as_str())
            .unwrap_or_else(|| panic!("span {} ({}) is not in Phoenix", span.span_id, span.name));
        assert_eq!(got["name"], json!(span.name));
        assert_eq!(got["parent_id"], json!(span.parent_id));
        let start = unix_ms(got["start_time"].as_str().unwrap());
        let end = unix_ms(got["end_time"].as_str().unwrap());
        assert_eq!(
            (start, end),
            (trace.started_unix_ms + span.start_ms, trace.started_unix_ms + span.end_ms),
            "times of {}",
            span.name
        );
        let status = if span.error.is_some() { "ERROR" } else { "UNSET" };
        assert_eq!(got["status_code"], json!(status), "status of {}", span.name);
        if let Some(error) = &span.error {
            assert_eq!(got["status_message"], json!(error));
        }
    }

    let mut attempts: Vec<&Value> =
        spans.iter().filter(|span| span["attributes"].get("rein.attempt").is_some()).collect();
    attempts.sort_by_key(|span| unix_ms(span["start_time"].as_str().unwrap()));
    assert_eq!(attempts.len(), 3, "one span per attempt");
    assert!(attempts.iter().all(|span| span["parent_id"] == json!(root.span_id)));
    let summary: Vec<(Value, Value, Value, Value)> = attempts
        .iter()
        .map(|span| {
            let attrs = &span["attributes"];
            (
                attrs["rein.tier"].clone(),
                attrs["rein.clock"].clone(),
                attrs["rein.disposition"].clone(),
                attrs["gen_ai.provider.name"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (json!("primary"), json!("first_token"), json!("retry_tier"), json!("openai")),
            (json!("primary"), json!("attempt"), json!("retry_tier"), json!("openai")),
            (json!("fallback"), Value::Null, json!("answered"), json!("anthropic")),
        ]
    );
    assert_eq!(attempts[2]["attributes"]["gen_ai.request.model"], json!("fallback-model"));
    let wait = spans.iter().find(|span| span["name"] == json!("wait")).unwrap();
    assert_eq!(wait["attributes"]["rein.wait_ms"], json!(50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_reach_phoenix_over_http_and_grpc_with_the_collectors_key() {
    let phoenix = Phoenix::start(PROJECT).await;
    for (protocol, endpoint) in [
        (Protocol::HttpProtobuf, phoenix.otlp_http_url()),
        (Protocol::Grpc, phoenix.otlp_grpc_url()),
    ] {
        // Without the key Phoenix refuses the spans, and the error does not show the key.
        let wrong = vec![("authorization".to_string(), "Bearer not-the-key-0123456789".into())];
        let refused = OtlpExporter::new(&config(endpoint.clone(), protocol, wrong)).unwrap();
        let error = refused.export(&[trace()]).await.unwrap_err();
        assert!(!error.contains("not-the-key"), "{protocol:?}: {error}");

        let exporter =
            OtlpExporter::new(&config(endpoint, protocol, vec![phoenix.auth_header()])).unwrap();
        assert!(!format!("{exporter:?}").contains(phoenix.api_key()));
        let trace = trace();
        let sent = exporter.export(std::slice::from_ref(&trace)).await;
        assert_eq!(sent, Ok(trace.spans.len()), "{protocol:?}");
        let spans = phoenix.spans(&trace.trace_id).await;
        assert_same(&trace, &spans);
    }
}

#[tokio::test]
async fn an_export_to_a_dead_endpoint_fails_within_its_timeout() {
    // A port where nothing listens (refused at once), and one that accepts connections but
    // never reads or answers (only the timeout ends the export).
    let refusing = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let key = ("authorization".to_string(), "Bearer dead-endpoint-secret".to_string());
    for port in [refusing, silent_port] {
        for (protocol, endpoint) in [
            (Protocol::HttpProtobuf, format!("http://127.0.0.1:{port}/v1/traces")),
            (Protocol::Grpc, format!("http://127.0.0.1:{port}")),
        ] {
            let mut config = config(endpoint, protocol, vec![key.clone()]);
            config.timeout = Duration::from_secs(2);
            let exporter = OtlpExporter::new(&config).unwrap();
            let started = tokio::time::Instant::now();
            let error = exporter.export(&[trace()]).await.unwrap_err();
            let took = started.elapsed();
            assert!(took < Duration::from_millis(2_500), "{protocol:?} on {port} took {took:?}");
            assert!(error.contains(&format!("127.0.0.1:{port}")), "{protocol:?}: {error}");
            assert!(!error.contains("dead-endpoint-secret"), "{protocol:?}: {error}");
        }
    }
    drop(silent);
}

/// The whole path: a gateway with `[traces.otlp]` pointing at Phoenix serves a call that retries
/// on its primary, falls back and passes its checks; Phoenix's own API then holds one trace
/// with one span per attempt (clock, disposition), the GenAI attributes, the caller's span as
/// the parent, and neither the message nor any key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_call_that_falls_back_reaches_phoenix_as_one_trace() {
    let phoenix = Phoenix::start("rein-e2e").await;
    let (_, auth) = phoenix.auth_header();
    let config = format!(
        r#"{head}
[traces]
service_name = "rein-e2e"
[traces.otlp]
endpoint = "{endpoint}"
headers_env = {{ authorization = "PHOENIX_AUTH" }}

[routes.flaky]
deadline_ms = 5000
first_token_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100
[routes.flaky.output.schema]
type = "object"
[[routes.flaky.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"
[[routes.flaky.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim:{json}"
"#,
        head = crate::ladder::HEAD,
        endpoint = phoenix.otlp_http_url(),
        json = rein_sim::say_spec("{\"ok\": true}"),
    );
    let vars: std::collections::HashMap<String, String> = [
        ("CLIENT_KEY".to_string(), "client-secret-1".to_string()),
        ("ADMIN_KEY".to_string(), "admin-secret-1".to_string()),
        ("PHOENIX_AUTH".to_string(), auth.clone()),
    ]
    .into();
    let env: rein_runtime::EnvSource =
        std::sync::Arc::new(move |name: &str| vars.get(name).cloned());
    let gw = crate::gateway::start_with_env(&config, None, env).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let response = gw
        .client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .header("traceparent", format!("00-{trace_id}-{CALLER_SPAN}-01"))
        .json(&json!({"model": "flaky", "messages": [{"role": "user", "content": "where is my parcel?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-outcome"], "fallback");
    assert_eq!(response.headers()["x-rein-trace-id"], trace_id);

    let spans = phoenix.spans(trace_id).await;
    assert!(spans.iter().all(|s| s["context"]["trace_id"] == json!(trace_id)), "one trace");
    let root = spans
        .iter()
        .find(|s| s["parent_id"] == json!(CALLER_SPAN))
        .expect("a root under the caller's span");
    let root_id = root["context"]["span_id"].clone();
    assert_eq!(root["name"], json!("chat flaky"));
    let attrs = &root["attributes"];
    assert_eq!(attrs["gen_ai.operation.name"], json!("chat"));
    assert_eq!(attrs["gen_ai.request.model"], json!("flaky"));
    assert_eq!(attrs["gen_ai.provider.name"], json!("anthropic"));
    assert_eq!(attrs["rein.outcome"], json!("fallback"));
    assert!(attrs["gen_ai.response.model"].is_string());
    let events: Vec<&str> =
        root["events"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(events.contains(&"check"), "the fallback's answer passed its checks: {events:?}");
    let attempts: Vec<&Value> =
        spans.iter().filter(|s| s["parent_id"] == root_id && s["name"] != json!("wait")).collect();
    let primary: Vec<&&Value> =
        attempts.iter().filter(|s| s["attributes"]["rein.tier"] == json!("primary")).collect();
    assert!(primary.len() >= 2, "the primary was retried: {attempts:#?}");
    for attempt in &primary {
        assert_eq!(attempt["attributes"]["gen_ai.provider.name"], json!("openai"));
        assert_eq!(attempt["attributes"]["error.type"], json!("overloaded"));
        assert!(attempt["attributes"]["rein.disposition"].is_string());
        assert_eq!(attempt["status_code"], json!("ERROR"));
    }
    let fallback: Vec<&&Value> =
        attempts.iter().filter(|s| s["attributes"]["rein.tier"] == json!("fallback")).collect();
    assert_eq!(fallback.len(), 1);
    assert_eq!(fallback[0]["attributes"]["rein.disposition"], json!("answered"));
    let text = serde_json::to_string(&spans).unwrap();
    assert!(!text.contains("where is my parcel"), "no message content");
    for secret in ["client-secret-1", "admin-secret-1", phoenix.api_key()] {
        assert!(!text.contains(secret), "no key in the spans");
    }
    let metrics = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("rein_trace_spans_exported_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    gw.stop().await.unwrap();
}

/// With the collector down, calls are answered as before and the spans they lose are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_collector_down_calls_still_answer_and_dropped_spans_are_counted() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let config = format!(
        r#"{head}
[traces.otlp]
endpoint = "http://127.0.0.1:{port}/v1/traces"
timeout_ms = 500

[routes.chat]
[[routes.chat.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim-primary"
"#,
        head = crate::ladder::HEAD
    );
    let gw = crate::gateway::start_with(&config, None).await;
    for _ in 0..5 {
        let response = gw
            .client
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth("client-secret-1")
            .json(&json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let mut dropped = 0.0;
    for _ in 0..100 {
        let metrics = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
        dropped = metrics
            .lines()
            .find(|l| l.starts_with("rein_trace_spans_dropped_total{reason=\"export_failed\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        if dropped >= 10.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(dropped >= 10.0, "5 calls of 2 spans each were lost and counted: {dropped}");
    // The calls themselves were recorded all the same.
    let slis: Value = gw
        .client
        .get(gw.url("/admin/sli"))
        .bearer_auth("admin-secret-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(slis["calls"], 5);
    gw.stop().await.unwrap();
}
