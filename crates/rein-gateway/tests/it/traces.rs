//! Every call is a trace and a record: the response names its trace id (the caller's, from
//! `traceparent`), the embedded trace store keeps the call's timeline (one span per attempt, with
//! its clock and disposition, under the caller's span), and the SLIs over a window count it, in
//! `/admin/sli` and in the metrics. No message content is kept unless the route opts in, and no
//! key ever.

use serde_json::{Value, json};

use crate::gateway::{Running, start_with};
use crate::ladder::HEAD;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn config(extra: &str) -> String {
    format!(
        r#"{HEAD}
{extra}

[routes.flaky]
deadline_ms = 5000
first_token_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100
labels = ["question_type"]

[[routes.flaky.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"

[[routes.flaky.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim-fallback"

[routes.steady]
trace_content = true

[[routes.steady.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim-primary"
"#
    )
}

async fn ask(gw: &Running, route: &str, message: &str) -> reqwest::Response {
    gw.client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .header("traceparent", format!("00-{TRACE_ID}-{PARENT}-01"))
        .header("x-rein-labels", "question_type=delivery, locale=de")
        .json(&json!({"model": route, "messages": [{"role": "user", "content": message}]}))
        .send()
        .await
        .unwrap()
}

async fn admin(gw: &Running, path: &str) -> (u16, Value) {
    let response = gw.client.get(gw.url(path)).bearer_auth("admin-secret-1").send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

#[tokio::test]
async fn a_retried_fallback_call_is_one_kept_trace_and_counts_in_the_slis() {
    let gw = start_with(&config(""), None).await;
    let response = ask(&gw, "flaky", "where is my parcel?").await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["x-rein-trace-id"], TRACE_ID, "the caller's trace is honoured");
    assert_eq!(headers["x-rein-outcome"], "fallback");
    let request_id = headers["x-rein-request-id"].to_str().unwrap().to_string();

    let (status, body) = admin(&gw, &format!("/admin/traces/{TRACE_ID}")).await;
    assert_eq!(status, 200, "{body}");
    let calls = body["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    let trace = &calls[0]["trace"];
    assert_eq!(trace["trace_id"], TRACE_ID);
    let spans = trace["spans"].as_array().unwrap();
    let root = &spans[0];
    assert_eq!(root["parent_id"], PARENT, "rein's span hangs under the caller's");
    assert_eq!(attr(root, "gen_ai.operation.name"), "chat");
    assert_eq!(attr(root, "gen_ai.request.model"), "flaky");
    assert_eq!(attr(root, "gen_ai.provider.name"), "anthropic");
    assert_eq!(attr(root, "rein.outcome"), "fallback");
    assert_eq!(attr(root, "rein.label.question_type"), "delivery");
    assert!(attr(root, "rein.label.locale").is_null(), "only the route's label keys");
    let attempts: Vec<&Value> = spans.iter().filter(|s| s["kind"] == "client").collect();
    let on_primary: Vec<&&Value> =
        attempts.iter().filter(|s| attr(s, "rein.tier") == "primary").collect();
    assert!(on_primary.len() >= 2, "the primary was retried: {spans:?}");
    for attempt in &on_primary {
        assert_eq!(attempt["parent_id"], root["span_id"]);
        assert_eq!(attr(attempt, "gen_ai.provider.name"), "openai");
        assert_eq!(attr(attempt, "error.type"), "overloaded");
        assert!(attr(attempt, "rein.disposition").is_string());
        assert_eq!(attr(attempt, "http.response.status_code"), 529);
    }
    let last = attempts.last().unwrap();
    assert_eq!(attr(last, "rein.tier"), "fallback");
    assert_eq!(attr(last, "rein.disposition"), "answered");
    assert!(spans.iter().any(|s| s["name"] == "wait"), "the backoff is a span");
    let events: Vec<&str> =
        root["events"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(events.contains(&"tier_skipped"), "moving down is an event: {events:?}");
    let tree = calls[0]["tree"].as_str().unwrap();
    assert!(tree.contains("chat flaky (fallback)") && tree.contains("tier=primary"), "{tree}");
    let text = trace.to_string();
    assert!(!text.contains("where is my parcel"), "no message content: {text}");
    assert!(!text.contains("client-secret-1"), "no key");
    // The same call by its request id.
    let (status, by_request) = admin(&gw, &format!("/admin/traces/{request_id}")).await;
    assert_eq!((status, &by_request["calls"][0]["trace"]), (200, trace));

    let (_, list) = admin(&gw, "/admin/traces?notable=true").await;
    let listed = &list["traces"][0];
    assert_eq!(
        (&listed["trace_id"], &listed["outcome"], &listed["notable"]),
        (&json!(TRACE_ID), &json!("fallback"), &json!(true))
    );

    // One steady answer beside it: the route's SLIs are its own.
    assert_eq!(ask(&gw, "steady", "hello").await.status(), 200);
    let (status, slis) = admin(&gw, "/admin/sli?window=1h").await;
    assert_eq!(status, 200, "{slis}");
    assert_eq!(slis["calls"], 2);
    let route = |name: &str| {
        slis["routes"].as_array().unwrap().iter().find(|r| r["route"] == name).unwrap()["slis"]
            .clone()
    };
    let flaky = route("flaky");
    assert_eq!(flaky["availability"], 1.0);
    assert_eq!(flaky["fallback_beyond_plan"], 1.0);
    assert_eq!(flaky["success_first_try"], 0.0);
    assert_eq!(flaky["success_after_retries"], 1.0);
    assert_eq!(route("steady")["fallback_beyond_plan"], 0.0);
    assert_eq!(route("steady")["success_first_try"], 1.0);
    let label = slis["slices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["slice"] == "label" && s["value"] == "delivery" && s["route"] == "flaky")
        .expect("a slice per declared label value");
    assert_eq!(label["calls"], 1);
    assert_eq!(slis["series"]["flaky"].as_array().unwrap().len(), 12);

    let metrics = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        "rein_sli_calls_total{route=\"flaky\"} 1",
        "rein_sli_fallback_beyond_plan_total{route=\"flaky\"} 1",
        "rein_sli_answered_total{route=\"steady\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    assert!(!metrics.contains("rein_sli_unavailable_total{route=\"flaky\"} 1"));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_route_that_opts_in_exports_its_messages_and_others_never_do() {
    let gw = start_with(&config(""), None).await;
    let response = ask(&gw, "steady", "tell me about my order").await;
    assert_eq!(response.status(), 200);
    let trace_id = response.headers()["x-rein-trace-id"].to_str().unwrap().to_string();
    let (_, body) = admin(&gw, &format!("/admin/traces/{trace_id}")).await;
    let root = &body["calls"][0]["trace"]["spans"][0];
    assert!(
        attr(root, "gen_ai.input.messages").as_str().unwrap().contains("tell me about my order")
    );
    assert!(attr(root, "gen_ai.output.messages").is_string());
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_call_without_a_traceparent_starts_its_own_trace() {
    let gw = start_with(&config(""), None).await;
    let response = gw
        .client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .json(&json!({"model": "steady", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let trace_id = response.headers()["x-rein-trace-id"].to_str().unwrap().to_string();
    assert_eq!(trace_id.len(), 32);
    assert_ne!(trace_id, TRACE_ID);
    let (_, body) = admin(&gw, &format!("/admin/traces/{trace_id}")).await;
    assert!(body["calls"][0]["trace"]["spans"][0]["parent_id"].is_null());
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn routine_traces_past_the_rate_are_not_written_but_every_call_counts() {
    let gw = start_with(&config("[traces]\nroutine_per_second = 1"), None).await;
    let mut request_ids = Vec::new();
    for _ in 0..3 {
        let response = ask(&gw, "steady", "hello").await;
        assert_eq!(response.status(), 200);
        request_ids.push(response.headers()["x-rein-request-id"].to_str().unwrap().to_string());
    }
    assert_eq!(ask(&gw, "flaky", "where is my parcel?").await.status(), 200);

    // The route's bucket holds one: the first routine call's trace is written (the three calls
    // come well inside a second of each other), the next two are not; the notable one is.
    let (status, _) = admin(&gw, &format!("/admin/traces/{}", request_ids[0])).await;
    assert_eq!(status, 200);
    for request_id in &request_ids[1..] {
        let (status, body) = admin(&gw, &format!("/admin/traces/{request_id}")).await;
        assert_eq!(status, 404, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("routine_per_second"), "{message}");
    }
    let (_, list) = admin(&gw, "/admin/traces").await;
    let listed: Vec<&str> =
        list["traces"].as_array().unwrap().iter().map(|t| t["route"].as_str().unwrap()).collect();
    assert_eq!(listed, ["flaky", "steady"], "{list}");
    let (_, slis) = admin(&gw, "/admin/sli?window=1h").await;
    assert_eq!(slis["calls"], 4, "every call's record is written: {slis}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_queries_are_400s_naming_what_is_wrong_and_the_admin_key_guards_them() {
    let gw = start_with(&config(""), None).await;
    let (status, body) = admin(&gw, "/admin/sli?window=soon").await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("`window`"), "{body}");
    let (status, body) = admin(&gw, "/admin/sli?buckets=0").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = admin(&gw, "/admin/traces?outcome=fine").await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("`outcome`"));
    let (status, _) = admin(&gw, "/admin/traces/0123456789abcdef0123456789abcdef").await;
    assert_eq!(status, 404);
    let (status, _) = admin(&gw, "/admin/traces/bad%20id").await;
    assert_eq!(status, 400);
    for path in ["/admin/sli", "/admin/traces", "/admin/traces/x"] {
        let response = gw.client.get(gw.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn with_recording_off_nothing_is_kept_and_the_sli_api_says_so() {
    let gw = start_with(&config("[traces]\nenabled = false"), None).await;
    assert_eq!(ask(&gw, "steady", "hi").await.status(), 200);
    let (status, body) = admin(&gw, "/admin/sli").await;
    assert_eq!(status, 409);
    assert!(body["error"]["message"].as_str().unwrap().contains("enabled = false"));
    let (_, list) = admin(&gw, "/admin/traces").await;
    assert_eq!(list["traces"], json!([]));
    gw.stop().await.unwrap();
}

/// The SLI and recorder metrics the alert rules name, exported once model calls have fallen
/// back, been degraded, been diverted by the kill switch and been handed off (the tool
/// exercise in tools.rs leaves these to this one). `rein_quality_score` has no series until
/// a call carries a judge's score, so it is checked by name only.
#[tokio::test]
async fn every_model_call_metric_the_alert_rules_name_is_exported_by_model_calls() {
    let fenced = format!("sim:{}", rein_sim::say_spec("```json\n{\"a\": 1}\n```"));
    let extra = format!(
        r#"
[routes.fenced]
[routes.fenced.output.schema]
type = "object"
required = ["a"]
[[routes.fenced.tiers]]
name = "primary"
provider = "sim-openai"
model = "{fenced}"

[routes.dead]
degraded = {{ template = "We are on it." }}
degraded_rules = [{{ name = "known_outage", pattern = "outage", template = "There is a known outage.", handoff = true }}]
[[routes.dead.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"

[routes.human]
handoff_reply = {{ template = "A person will reply." }}
[routes.human.handoff_rules]
[[routes.human.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim-primary"
"#
    );
    let gw = start_with(&config(&extra), None).await;
    assert_eq!(ask(&gw, "fenced", "json please").await.headers()["x-rein-repairs"], "1");
    assert_eq!(ask(&gw, "flaky", "where is my parcel?").await.status(), 200);
    assert_eq!(ask(&gw, "dead", "hello?").await.headers()["x-rein-outcome"], "degraded");
    let _ = ask(&gw, "dead", "is there an outage?").await;
    let human = gw
        .client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .header("x-rein-conversation-id", "conv-1")
        .json(&json!({"model": "human", "messages": [{"role": "user", "content": "I want to talk to a human"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(human.headers()["x-rein-outcome"], "handed_off");
    let flip = gw
        .client
        .post(gw.url("/admin/kill"))
        .bearer_auth("admin-secret-1")
        .json(&json!({"route": "human", "engaged": true, "reason": "drill"}))
        .send()
        .await
        .unwrap();
    assert_eq!(flip.status(), 200);
    let _ = ask(&gw, "human", "hello").await;

    let metrics = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let series: Vec<&str> = metrics.lines().filter(|l| !l.starts_with('#')).collect();
    for name in crate::tools::CHECKED_BY_THE_GATEWAY_SLI_TESTS {
        if name.starts_with("rein_quality_score") {
            let family = name.trim_end_matches("_bucket").trim_end_matches("_sum");
            let family = family.trim_end_matches("_count");
            let source = include_str!("../../src/metrics.rs");
            assert!(source.contains(&format!("\"{}\"", &family["rein_".len()..])), "{family}");
            continue;
        }
        assert!(
            series
                .iter()
                .any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} "))),
            "`{name}` is not exported:\n{metrics}"
        );
    }
    assert!(metrics.contains("rein_sli_unavailable_total{route=\"dead\"} 2"), "{metrics}");
    assert!(metrics.contains("rein_sli_degraded_total{route=\"dead\"}"), "{metrics}");
    gw.stop().await.unwrap();
}
