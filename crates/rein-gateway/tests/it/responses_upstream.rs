//! OpenAI's Responses API as an upstream: a Chat Completions caller served by a tier whose
//! provider has `api = "responses"` (the simulator answering `POST /v1/responses`), streaming
//! and not, plain text and a tool call; `response.failed` and a cut stream retried on the
//! tier; a Responses tier answering 500s falling back to a Chat Completions tier; and a
//! Responses API caller served by a Responses tier.

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::gateway::start_with;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
client_keys_env = ["CLIENT_KEY"]
admin_key_env = "ADMIN_KEY"

[store]
sqlite_path = ":memory:"

[providers.responses]
kind = "sim"
format = "openai"
api = "responses"

[providers.responses-whole]
kind = "sim"
format = "openai"
api = "responses"
stream = false

[providers.chat]
kind = "sim"
format = "openai"

[routes.resp]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
backoff_cap_ms = 100

[[routes.resp.tiers]]
name = "responses"
provider = "responses"
model = "gpt-sim-responses"

[routes.resp-whole]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
backoff_cap_ms = 100

[[routes.resp-whole.tiers]]
name = "responses"
provider = "responses-whole"
model = "gpt-sim-responses"

[routes.flaky]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
attempts = 3
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.flaky.tiers]]
name = "responses"
provider = "responses"
model = "sim:stream_error:after=2,cut:after=3,ok"

[routes.fallback]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.fallback.tiers]]
name = "responses"
provider = "responses"
model = "sim:500"

[[routes.fallback.tiers]]
name = "chat"
provider = "chat"
model = "gpt-sim-chat"
"#;

const KEY: &str = "client-secret-1";

fn chat(route: &str, stream: bool) -> Value {
    json!({
        "model": route,
        "stream": stream,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "where is my order?"}
        ]
    })
}

fn with_tool(mut body: Value) -> Value {
    body["tools"] = json!([{"type": "function", "function": {
        "name": "lookup_order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
    }}]);
    body["tool_choice"] = json!("required");
    body
}

/// The data lines of a Chat Completions stream, read to its end.
async fn read_chunks(response: reqwest::Response) -> (String, Vec<Value>) {
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let chunks = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    (text, chunks)
}

#[tokio::test]
async fn a_chat_completions_caller_is_answered_by_a_responses_tier() {
    let gw = start_with(CONFIG, None).await;
    for route in ["resp", "resp-whole"] {
        let response = gw.post("/v1/chat/completions", Some(KEY), chat(route, false)).await;
        assert_eq!(response.status(), 200, "{route}");
        assert_eq!(response.headers()["x-rein-outcome"], "answered", "{route}");
        assert_eq!(response.headers()["x-rein-tier"], "responses", "{route}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["model"], "gpt-sim-responses", "{route}");
        let text = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(text.ends_with(rein_sim::SENTINEL), "{route}: the whole answer: {text}");
        assert_eq!(body["choices"][0]["finish_reason"], "stop", "{route}");
        assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{route}");
        assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 0, "{route}");

        let response =
            gw.post("/v1/chat/completions", Some(KEY), with_tool(chat(route, false))).await;
        assert_eq!(response.status(), 200, "{route}");
        let body: Value = response.json().await.unwrap();
        let choice = &body["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{route}");
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "lookup_order", "{route}");
        assert!(call["id"].as_str().unwrap().starts_with("call_"), "{route}");
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert!(arguments["order_id"].is_string(), "{route}: {arguments}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_streamed_chat_completions_call_is_served_by_a_responses_tier() {
    let gw = start_with(CONFIG, None).await;
    for route in ["resp", "resp-whole"] {
        let response = gw.post("/v1/chat/completions", Some(KEY), chat(route, true)).await;
        assert_eq!(response.status(), 200, "{route}");
        let (text, chunks) = read_chunks(response).await;
        assert!(text.trim_end().ends_with("data: [DONE]"), "{route}: {text}");
        let answer: String =
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        assert!(answer.ends_with(rein_sim::SENTINEL), "{route}: the whole answer: {answer}");
        assert!(
            chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "stop"),
            "{route}: {text}"
        );

        let response =
            gw.post("/v1/chat/completions", Some(KEY), with_tool(chat(route, true))).await;
        assert_eq!(response.status(), 200, "{route}");
        let (text, chunks) = read_chunks(response).await;
        let calls: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
            .flatten()
            .collect();
        let name = calls.iter().find_map(|c| c["function"]["name"].as_str());
        assert_eq!(name, Some("lookup_order"), "{route}: {text}");
        let arguments: String =
            calls.iter().filter_map(|c| c["function"]["arguments"].as_str()).collect();
        let arguments: Value = serde_json::from_str(&arguments).unwrap();
        assert!(arguments["order_id"].is_string(), "{route}: {arguments}");
        assert!(
            chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "tool_calls"),
            "{route}: {text}"
        );
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_responses_tier_answering_500s_falls_back_to_chat_completions() {
    let gw = start_with(CONFIG, None).await;
    for stream in [false, true] {
        let response = gw.post("/v1/chat/completions", Some(KEY), chat("fallback", stream)).await;
        assert_eq!(response.status(), 200, "stream {stream}");
        assert_eq!(response.headers()["x-rein-outcome"], "fallback", "stream {stream}");
        assert_eq!(response.headers()["x-rein-tier"], "chat", "stream {stream}");
        // Both attempts on the Responses tier, then the one that answered.
        assert_eq!(response.headers()["x-rein-attempts"], "3", "stream {stream}");
        let answer = if stream {
            let (_, chunks) = read_chunks(response).await;
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect()
        } else {
            let body: Value = response.json().await.unwrap();
            body["choices"][0]["message"]["content"].as_str().unwrap().to_owned()
        };
        assert!(answer.ends_with(rein_sim::SENTINEL), "stream {stream}: {answer}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn stop_sequences_skip_the_responses_tier_which_cannot_carry_them() {
    let gw = start_with(CONFIG, None).await;
    let mut body = chat("resp", false);
    body["stop"] = json!(["END"]);
    let response = gw.post("/v1/chat/completions", Some(KEY), body).await;
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(status.is_server_error(), "{status}: {text}");
    assert!(text.contains("last unsendable"), "{text}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_responses_caller_is_served_by_a_responses_tier() {
    let gw = start_with(CONFIG, None).await;
    let body = json!({"model": "resp", "instructions": "Be brief.", "input": "where is my order?"});
    let response = gw.post("/v1/responses", Some(KEY), body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-tier"], "responses");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    let text = body["output"][0]["content"][0]["text"].as_str().unwrap();
    assert!(text.ends_with(rein_sim::SENTINEL), "the whole answer: {text}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn response_failed_and_a_cut_stream_are_retried_on_the_responses_tier() {
    let gw = start_with(CONFIG, None).await;
    let response = gw.post("/v1/chat/completions", Some(KEY), chat("flaky", false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-outcome"], "answered");
    // `response.failed`, then a stream cut before `response.completed`, then the answer.
    assert_eq!(response.headers()["x-rein-attempts"], "3");
    let body: Value = response.json().await.unwrap();
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.ends_with(rein_sim::SENTINEL), "the whole answer: {text}");
    gw.stop().await.unwrap();
}
