//! Agent runs through the gateway: rein counts a run's model and tool calls itself (in the
//! store) and holds the run to its stop conditions. The spec's swapped-digit loop: an agent
//! (a `rein sim` model that keeps asking for the same lookup) calls `look_up_order` for an
//! order that does not exist, against a real HTTP order backend; after the second identical
//! failing call the run is stopped, a third call never reaches the backend, and the customer
//! gets the route's decided reply.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};

use crate::gateway::{Running, start_with};
use crate::ladder::HEAD;

const DECIDED: &str =
    "I couldn't find that order. Could you check the number? I've also passed this to the team.";

/// The order backend: `GET /orders/{id}`, which knows order 44781 only, counting its calls.
async fn order_backend() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    async fn order(
        State(hits): State<Arc<AtomicUsize>>,
        Path(id): Path<String>,
    ) -> (StatusCode, axum::Json<Value>) {
        hits.fetch_add(1, Ordering::SeqCst);
        if id == "44781" {
            (StatusCode::OK, axum::Json(json!({"order_id": id, "status": "out for delivery"})))
        } else if id.starts_with('9') {
            // Orders 9xxx live in an archive that is down: the same error for any of them.
            let body = json!({"error": "the order archive is unavailable"});
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body))
        } else {
            (StatusCode::NOT_FOUND, axum::Json(json!({"error": format!("no order {id}")})))
        }
    }
    let app = axum::Router::new().route("/orders/{id}", get(order)).with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), hits)
}

fn config(backend: &str, runs: &str) -> String {
    format!(
        r#"{HEAD}
[runs]
{runs}

[routes.support]
stopped_reply = {{ template = "{DECIDED}" }}

[[routes.support.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim-agent"

[tools.look_up_order]
kind = "read"

[[tools.look_up_order.rungs]]
kind = "http"
source = "orders"
method = "GET"
url = "{backend}/orders/{{order_id}}"
timeout_ms = 2000
"#
    )
}

/// The agent's tool, whose schema makes the sim's model ask for order 44718 every time.
fn tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "look_up_order",
        "parameters": {"type": "object", "required": ["order_id"],
                       "properties": {"order_id": {"type": "string", "const": "44718"}}}
    }}])
}

async fn model_call(gw: &Running, messages: &[Value]) -> reqwest::Response {
    gw.client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .header("x-rein-run-id", "run-1")
        .header("x-rein-conversation-id", "conv-1")
        .json(&json!({"model": "support", "messages": messages, "tools": tools(),
                      "tool_choice": "required"}))
        .send()
        .await
        .unwrap()
}

async fn tool_call(gw: &Running, arguments: &Value) -> reqwest::Response {
    gw.client
        .post(gw.url("/v1/tools/look_up_order"))
        .bearer_auth("client-secret-1")
        .header("x-rein-run-id", "run-1")
        .header("x-rein-conversation-id", "conv-1")
        .json(arguments)
        .send()
        .await
        .unwrap()
}

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response.headers().get(name).and_then(|v| v.to_str().ok()).map(String::from)
}

#[tokio::test]
async fn the_swapped_digit_loop_is_stopped_after_the_second_identical_failing_call() {
    let (backend, hits) = order_backend().await;
    let gw = start_with(&config(&backend, ""), None).await;
    let mut messages = vec![json!({"role": "user", "content": "Where is order 44718?"})];
    let mut statuses = Vec::new();
    let mut answer = None;
    // The agent's loop: ask the model, run the tool it asks for, hand back the result, until
    // the model answers in words.
    for _ in 0..5 {
        let response = model_call(&gw, &messages).await;
        assert_eq!(response.status(), 200);
        let outcome = header(&response, "x-rein-outcome");
        let body: Value = response.json().await.unwrap();
        let message = &body["choices"][0]["message"];
        let Some(call) = message["tool_calls"].get(0) else {
            answer = Some((outcome, body.clone()));
            break;
        };
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"order_id": "44718"}));
        let response = tool_call(&gw, &arguments).await;
        statuses.push(header(&response, "x-rein-run-status"));
        let envelope: Value = response.json().await.unwrap();
        messages.push(message.clone());
        messages.push(
            json!({"role": "tool", "tool_call_id": call["id"], "content": envelope.to_string()}),
        );
    }
    // The first failing lookup leaves the run going; the second identical one stops it, and
    // the model's next turn is the route's decided reply, no provider asked.
    assert_eq!(statuses, [None, Some("stopped_repeated_call".into())]);
    let (outcome, body) = answer.expect("the loop ends with an answer");
    assert_eq!(outcome.as_deref(), Some("stopped"));
    assert_eq!(body["choices"][0]["message"]["content"], DECIDED);
    assert_eq!(hits.load(Ordering::SeqCst), 2, "the backend saw two lookups");
    let refused = tool_call(&gw, &json!({"order_id": "44718"})).await;
    let envelope: Value = refused.json().await.unwrap();
    assert_eq!(envelope["status"], "stopped");
    assert_eq!(envelope["stop"], "stopped_repeated_call");
    assert!(envelope["detail"].as_str().unwrap().contains("do not call tools again"));
    assert_eq!(hits.load(Ordering::SeqCst), 2, "a call in a stopped run never reaches the backend");

    // The customer gets the route's decided reply, and no provider is asked.
    let response = model_call(&gw, &messages).await;
    assert_eq!(header(&response, "x-rein-outcome").as_deref(), Some("stopped"));
    assert_eq!(header(&response, "x-rein-run-status").as_deref(), Some("stopped_repeated_call"));
    assert_eq!(header(&response, "x-rein-attempts").as_deref(), Some("0"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], DECIDED);
    assert_eq!(body["rein"]["run_status"], "stopped_repeated_call");
    // Counted once, however many calls the stopped run makes after.
    assert_eq!(stops(&gw, "stopped_repeated_call").await, 1);
    gw.stop().await.unwrap();
}

/// `rein_run_stops_total{status}` as `/metrics` says.
async fn stops(gw: &Running, status: &str) -> u64 {
    let text = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let series = format!("rein_run_stops_total{{status=\"{status}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |value| value.trim().parse().unwrap())
}

#[tokio::test]
async fn a_run_past_its_deadline_is_stopped() {
    let (backend, hits) = order_backend().await;
    let gw = start_with(&config(&backend, "deadline_ms = 300"), None).await;
    let messages = [json!({"role": "user", "content": "hello"})];
    let response = model_call(&gw, &messages).await;
    assert_eq!(header(&response, "x-rein-run-status"), None);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let response = tool_call(&gw, &json!({"order_id": "44781"})).await;
    assert_eq!(header(&response, "x-rein-run-status").as_deref(), Some("stopped_deadline"));
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing ran after the deadline");
    let response = model_call(&gw, &messages).await;
    assert_eq!(header(&response, "x-rein-run-status").as_deref(), Some("stopped_deadline"));
    assert_eq!(stops(&gw, "stopped_deadline").await, 1);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_run_past_its_model_calls_gets_the_decided_reply() {
    let (backend, _) = order_backend().await;
    let gw = start_with(&config(&backend, "max_model_calls = 2"), None).await;
    let messages = [json!({"role": "user", "content": "hello"})];
    for _ in 0..2 {
        let response = model_call(&gw, &messages).await;
        assert_eq!(header(&response, "x-rein-outcome").as_deref(), Some("answered"));
    }
    let response = model_call(&gw, &messages).await;
    assert_eq!(header(&response, "x-rein-run-status").as_deref(), Some("stopped_max_model_calls"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], DECIDED);
    assert_eq!(stops(&gw, "stopped_max_model_calls").await, 1);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn calls_without_a_run_id_are_not_counted() {
    let (backend, hits) = order_backend().await;
    let gw = start_with(&config(&backend, ""), None).await;
    for _ in 0..4 {
        let response = gw
            .client
            .post(gw.url("/v1/tools/look_up_order"))
            .bearer_auth("client-secret-1")
            .json(&json!({"order_id": "44718"}))
            .send()
            .await
            .unwrap();
        assert_eq!(header(&response, "x-rein-run-status"), None);
    }
    assert_eq!(hits.load(Ordering::SeqCst), 4);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn two_replicas_on_one_postgres_stop_a_run_at_the_same_count() {
    use crate::gateway::{env, start_with_env};
    use rein_runtime::EnvSource;

    let postgres = rein_store::testing::TempPostgres::shared().unwrap();
    let url = postgres.create_database().await.unwrap();
    let (backend, _) = order_backend().await;
    let text = config(&backend, "max_model_calls = 3").replace(
        "sqlite_path = \":memory:\"",
        "sqlite_path = \":memory:\"\npostgres_url_env = \"PG_URL\"",
    );
    let base = env();
    let with_pg: EnvSource = Arc::new(move |name: &str| match name {
        "PG_URL" => Some(url.clone()),
        other => base(other),
    });
    let a = start_with_env(&text, None, with_pg.clone()).await;
    let b = start_with_env(&text, None, with_pg).await;
    let messages = [json!({"role": "user", "content": "hello"})];
    // One run split across the replicas: calls 1 and 3 on A, 2 and 4 on B.
    let mut statuses = Vec::new();
    for replica in [&a, &b, &a, &b] {
        let response = model_call(replica, &messages).await;
        statuses.push(header(&response, "x-rein-run-status"));
    }
    assert_eq!(statuses, [None, None, None, Some("stopped_max_model_calls".into())]);
    // Stopped for both: A's next call in the run gets the decided reply too.
    let response = model_call(&a, &messages).await;
    assert_eq!(header(&response, "x-rein-run-status").as_deref(), Some("stopped_max_model_calls"));
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test]
async fn a_conversation_past_its_spend_cap_is_stopped_in_every_later_run() {
    let (backend, _) = order_backend().await;
    // $1,000 per million tokens: each sim answer costs about a cent, over the $0.005 cap.
    let text = config(&backend, "max_spend_usd = 0.005").replace(
        "[routes.support]",
        "[prices.sim-agent]\ninput_per_mtok = 1000.0\noutput_per_mtok = 1000.0\n\n[routes.support]",
    );
    let gw = start_with(&text, None).await;
    let messages = [json!({"role": "user", "content": "hello"})];
    let first = model_call(&gw, &messages).await;
    assert_eq!(header(&first, "x-rein-outcome").as_deref(), Some("answered"));
    let second = model_call(&gw, &messages).await;
    assert_eq!(header(&second, "x-rein-run-status").as_deref(), Some("stopped_spend"));
    assert_eq!(header(&second, "x-rein-attempts").as_deref(), Some("0"));
    // The cap is the conversation's: a new message in it is stopped too.
    let next_run = gw
        .client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .header("x-rein-run-id", "run-2")
        .header("x-rein-conversation-id", "conv-1")
        .json(&json!({"model": "support", "messages": messages}))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&next_run, "x-rein-run-status").as_deref(), Some("stopped_spend"));
    // Another conversation is not.
    let other = gw
        .client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .header("x-rein-run-id", "run-3")
        .header("x-rein-conversation-id", "conv-2")
        .json(&json!({"model": "support", "messages": messages}))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&other, "x-rein-outcome").as_deref(), Some("answered"));
    assert_eq!(stops(&gw, "stopped_spend").await, 2);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_tool_may_have_its_own_limit_on_identical_calls() {
    let (backend, hits) = order_backend().await;
    let text = config(&backend, "[runs.tools.look_up_order]\nmax_same_call = 3");
    let gw = start_with(&text, None).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let response = tool_call(&gw, &json!({"order_id": "44781"})).await;
        statuses.push(header(&response, "x-rein-run-status"));
    }
    // The default would stop the third; this tool allows three.
    assert_eq!(statuses, [None, None, None, Some("stopped_repeated_call".into())]);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn counts_a_caller_sends_are_never_trusted() {
    let (backend, _) = order_backend().await;
    let gw = start_with(&config(&backend, "max_model_calls = 2"), None).await;
    let messages = [json!({"role": "user", "content": "hello"})];
    let mut statuses = Vec::new();
    for _ in 0..3 {
        // A caller claiming the run is fresh, in headers and in the body's `rein` object.
        let response = gw
            .client
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth("client-secret-1")
            .header("x-rein-run-id", "run-1")
            .header("x-rein-conversation-id", "conv-1")
            .header("x-rein-model-calls", "0")
            .header("x-rein-run-model-calls", "0")
            .header("x-rein-run-status", "running")
            .json(&json!({"model": "support", "messages": messages}))
            .send()
            .await
            .unwrap();
        statuses.push(header(&response, "x-rein-run-status"));
    }
    assert_eq!(statuses, [None, None, Some("stopped_max_model_calls".into())]);
    let spoofed = gw
        .client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .header("x-rein-run-id", "run-1")
        .json(
            &json!({"model": "support", "messages": messages, "rein": {"run": {"model_calls": 0}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(spoofed.status(), 400, "rein's own object takes no counts");
    let body: Value = spoofed.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("rein.run"), "{body}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_same_tool_error_twice_in_a_row_stops_the_run() {
    let (backend, hits) = order_backend().await;
    let gw = start_with(&config(&backend, ""), None).await;
    // Two different orders, the same failure: the next call would fail the same way.
    let first = tool_call(&gw, &json!({"order_id": "9001"})).await;
    assert_eq!(header(&first, "x-rein-run-status"), None);
    let second = tool_call(&gw, &json!({"order_id": "9002"})).await;
    assert_eq!(header(&second, "x-rein-run-status").as_deref(), Some("stopped_repeated_error"));
    let third = tool_call(&gw, &json!({"order_id": "44781"})).await;
    let envelope: Value = third.json().await.unwrap();
    assert_eq!(envelope["status"], "stopped");
    assert_eq!(hits.load(Ordering::SeqCst), 2, "nothing runs in a stopped run");
    let response = model_call(&gw, &[json!({"role": "user", "content": "hello"})]).await;
    assert_eq!(header(&response, "x-rein-run-status").as_deref(), Some("stopped_repeated_error"));
    assert_eq!(stops(&gw, "stopped_repeated_error").await, 1);
    gw.stop().await.unwrap();
}
