//! What `rein serve` sends to its upstreams and makes of their answers, against test servers
//! that check the request: a provider set to `stream = false` is never asked to stream, yet a
//! caller who streams still gets a stream (checked and passthrough); an Anthropic `base_url`
//! works with or without `/v1`; `json_object` on an Anthropic tier is prefilled with `{` and the
//! caller's answer starts with it; and a checked Anthropic stream's `message_start` carries the
//! real input token count.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::upstream_caps::{Gateway, serve_upstream};

/// Every request body the upstream received, in order.
type Seen = Arc<Mutex<Vec<Value>>>;

/// Like a compatible server that answers tool calls only without streaming: a request that
/// asks to stream is refused.
async fn no_streaming(State(seen): State<Seen>, Json(body): Json<Value>) -> Response {
    let asked_to_stream = body.get("stream") == Some(&json!(true));
    seen.lock().unwrap().push(body);
    if asked_to_stream {
        let error = json!({"error": {"message": "tools are only supported without streaming",
                                     "type": "invalid_request_error"}});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    Json(json!({
        "id": "c1", "object": "chat.completion", "model": "local-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Your order shipped."},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 4},
    }))
    .into_response()
}

const INPUT_TOKENS: u32 = 21;
const OUTPUT_TOKENS: u32 = 7;

/// A Messages endpoint (axum answers 404 on any other path). It continues a `{` prefill with
/// the rest of a JSON object, and answers anything else with prose.
async fn messages(State(seen): State<Seen>, Json(body): Json<Value>) -> Response {
    let prefilled = body["messages"].as_array().and_then(|m| m.last())
        == Some(&json!({"role": "assistant", "content": "{"}));
    let stream = body.get("stream") == Some(&json!(true));
    seen.lock().unwrap().push(body);
    let text = if prefilled { r#""order": "A-1"}"# } else { "Here is your order: A-1." };
    let model = "claude-3-5-haiku-20241022";
    if !stream {
        return Json(json!({
            "id": "msg_up", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
        }))
        .into_response();
    }
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_up", "type": "message",
               "role": "assistant", "model": model, "content": [], "stop_reason": null,
               "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
               "usage": {"output_tokens": OUTPUT_TOKENS}}),
        json!({"type": "message_stop"}),
    ];
    let sse: String = events
        .iter()
        .map(|event| format!("event: {}\ndata: {event}\n\n", event["type"].as_str().unwrap()))
        .collect();
    ([(CONTENT_TYPE, "text/event-stream")], sse).into_response()
}

struct Setup {
    gateway: Gateway,
    openai_seen: Seen,
    anthropic_seen: Seen,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let openai_seen = Seen::default();
    let anthropic_seen = Seen::default();
    let app = axum::Router::new()
        .route("/local/v1/chat/completions", post(no_streaming).with_state(openai_seen.clone()))
        .route("/v1/messages", post(messages).with_state(anthropic_seen.clone()));
    let upstream = serve_upstream(app).await;
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"
workers = 1

[store]
sqlite_path = ":memory:"

[providers.local]
kind = "openai_compatible"
base_url = "{upstream}/local/v1"
stream = false

[providers.local-default]
kind = "openai_compatible"
base_url = "{upstream}/local/v1"

[providers.claude]
kind = "anthropic"
base_url = "{upstream}"
api_key_env = "UPSTREAM_TEST_KEY"

[providers.claude-v1]
kind = "anthropic"
base_url = "{upstream}/v1"
api_key_env = "UPSTREAM_TEST_KEY"

[routes.local]
release = "checked"
[[routes.local.tiers]]
name = "primary"
provider = "local"
model = "local-model"

[routes.local-passthrough]
release = "passthrough"
[[routes.local-passthrough.tiers]]
name = "primary"
provider = "local"
model = "local-model"

[routes.local-default]
degraded = {{ template = "A person will reply within 2 hours." }}
[[routes.local-default.tiers]]
name = "primary"
provider = "local-default"
model = "local-model"
attempts = 1

[routes.claude]
release = "checked"
[[routes.claude.tiers]]
name = "primary"
provider = "claude"
model = "claude-3-5-haiku-20241022"
attempts = 1

[routes.claude-v1]
release = "checked"
[[routes.claude-v1.tiers]]
name = "primary"
provider = "claude-v1"
model = "claude-3-5-haiku-20241022"
attempts = 1
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let gateway =
        Gateway::start(dir.path(), &config, &[("UPSTREAM_TEST_KEY", "sk-upstream")], "warn");
    Setup { gateway, openai_seen, anthropic_seen, client: reqwest::Client::new(), _dir: dir }
}

impl Setup {
    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client.post(format!("{}{path}", self.gateway.url)).json(&body).send().await.unwrap()
    }
}

fn chat(route: &str, stream: bool) -> Value {
    json!({"model": route, "stream": stream,
           "messages": [{"role": "user", "content": "where is my order?"}]})
}

/// The `data:` payloads of an SSE body, `[DONE]` left out.
fn sse_data(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

#[tokio::test]
async fn a_provider_set_not_to_stream_is_never_asked_to_and_callers_still_stream() {
    let setup = setup().await;

    let response = setup.post("/v1/chat/completions", chat("local", false)).await;
    assert_eq!(response.headers()["x-rein-outcome"], "answered");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "Your order shipped.");

    for route in ["local", "local-passthrough"] {
        let response = setup.post("/v1/chat/completions", chat(route, true)).await;
        assert_eq!(response.status(), 200, "{route}");
        if route == "local" {
            // A checked stream knows its outcome before the first byte.
            assert_eq!(response.headers()["x-rein-outcome"], "answered");
        }
        assert!(
            response.headers()[CONTENT_TYPE.as_str()]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let text = response.text().await.unwrap();
        assert!(text.trim_end().ends_with("data: [DONE]"), "{route}: {text}");
        let content: String = sse_data(&text)
            .iter()
            .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(content, "Your order shipped.", "{route}");
    }

    let seen = setup.openai_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for body in &seen {
        assert!(body.get("stream").is_none(), "asked to stream: {body}");
        assert!(body.get("stream_options").is_none(), "{body}");
    }

    // The default is unchanged: a provider without the setting asks to stream, and this
    // upstream refuses that.
    let response = setup.post("/v1/chat/completions", chat("local-default", false)).await;
    assert_eq!(response.headers()["x-rein-outcome"], "degraded");
    let last = setup.openai_seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last["stream"], json!(true));
}

#[tokio::test]
async fn an_anthropic_base_url_with_or_without_v1_reaches_v1_messages() {
    let setup = setup().await;
    for route in ["claude", "claude-v1"] {
        let response = setup.post("/v1/chat/completions", chat(route, false)).await;
        assert_eq!(response.status(), 200, "{route}");
        assert_eq!(response.headers()["x-rein-outcome"], "answered", "{route}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "Here is your order: A-1.");
    }
    assert_eq!(setup.anthropic_seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn json_object_on_an_anthropic_tier_is_prefilled_and_answered_in_one_attempt() {
    let setup = setup().await;
    for stream in [false, true] {
        let mut request = chat("claude", stream);
        request["response_format"] = json!({"type": "json_object"});
        let response = setup.post("/v1/chat/completions", request).await;
        assert_eq!(response.headers()["x-rein-outcome"], "answered");
        assert_eq!(response.headers()["x-rein-attempts"], "1");
        assert_eq!(response.headers()["x-rein-reasks"], "0", "no re-ask was needed");
        let content = if stream {
            let text = response.text().await.unwrap();
            sse_data(&text)
                .iter()
                .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
                .collect::<String>()
        } else {
            let body: Value = response.json().await.unwrap();
            body["choices"][0]["message"]["content"].as_str().unwrap().to_string()
        };
        assert_eq!(content, r#"{"order": "A-1"}"#);
        let parsed: Value = serde_json::from_str(&content).unwrap();
        assert_eq!(parsed["order"], "A-1");
    }
    let seen = setup.anthropic_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for body in &seen {
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "where is my order?"},
                {"role": "assistant", "content": "{"},
            ])
        );
        assert!(body.get("output_config").is_none(), "{body}");
    }
}

#[tokio::test]
async fn a_checked_anthropic_stream_reports_the_input_tokens_in_message_start() {
    let setup = setup().await;
    let request = json!({"model": "claude", "max_tokens": 100, "stream": true,
                         "messages": [{"role": "user", "content": "where is my order?"}]});
    let response = setup.post("/v1/messages", request).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-outcome"], "answered");
    let events = sse_data(&response.text().await.unwrap());
    let start = events.iter().find(|e| e["type"] == "message_start").unwrap();
    assert_eq!(start["message"]["usage"]["input_tokens"], INPUT_TOKENS);
    let delta = events.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(
        delta["usage"],
        json!({"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}),
        "the final usage is the answer's"
    );
    assert_eq!(events.last().unwrap()["type"], "message_stop");
}
