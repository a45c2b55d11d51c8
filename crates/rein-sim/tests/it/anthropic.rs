//! The Anthropic path: healthy messages and streams (exact event sequence), tool use, shapes
//! and the main error faults.

use rein_sim::{SENTINEL, healthy_text};
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn healthy_message() {
    let sim = sim().await;
    let body = anthropic_body("What is the capital of Norway?");
    let response = sim.anthropic(&body, None).await;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "request-id").unwrap().starts_with("req_"));
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["type"], "message");
    assert_eq!(value["role"], "assistant");
    assert_eq!(value["model"], "claude-sim");
    assert!(value["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(value["content"][0]["type"], "text");
    let text = value["content"][0]["text"].as_str().unwrap();
    assert_eq!(text, healthy_text(&body));
    assert!(text.ends_with(SENTINEL));
    assert_eq!(value["stop_reason"], "end_turn");
    assert_eq!(value["stop_sequence"], Value::Null);
    assert_eq!(value["usage"]["input_tokens"], 6);
    assert_eq!(value["usage"]["output_tokens"], token_count(text));
}

#[tokio::test]
async fn same_conversation_same_answer_on_both_paths() {
    let sim = sim().await;
    let openai: Value = sim.openai(&openai_body("same words"), None).await.json().await.unwrap();
    let anthropic: Value =
        sim.anthropic(&anthropic_body("same words"), None).await.json().await.unwrap();
    assert_eq!(openai["choices"][0]["message"]["content"], anthropic["content"][0]["text"]);
}

#[tokio::test]
async fn healthy_stream_event_sequence() {
    let sim = sim().await;
    let mut body = anthropic_body("stream please");
    body["stream"] = json!(true);
    let response = sim.anthropic(&body, None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type").unwrap(), "text/event-stream; charset=utf-8");
    let (text, clean) = read_all(response).await;
    assert!(clean);
    let frames = sse_frames(&text);
    let events: Vec<&str> = frames.iter().map(|f| f.event.as_deref().unwrap()).collect();
    let expected = healthy_text(&body);
    let tokens = token_count(&expected);
    let mut want = vec!["message_start", "content_block_start", "ping"];
    want.extend(std::iter::repeat_n("content_block_delta", tokens));
    want.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(events, want);
    for frame in &frames {
        assert_eq!(frame.json()["type"], frame.event.as_deref().unwrap());
    }
    assert_eq!(anthropic_stream_text(&frames), expected);
    let start = frames[0].json();
    assert_eq!(start["message"]["model"], "claude-sim");
    assert_eq!(start["message"]["usage"]["input_tokens"], 2);
    let delta = frames[frames.len() - 2].json();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], tokens);
    assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
}

#[tokio::test]
async fn tool_use_streams_input_json() {
    let sim = sim().await;
    let mut body = anthropic_body("check the weather");
    body["tools"] = json!([{
        "name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}
    }]);
    body["tool_choice"] = json!({"type": "tool", "name": "get_weather"});
    let value: Value = sim.anthropic(&body, None).await.json().await.unwrap();
    assert_eq!(value["stop_reason"], "tool_use");
    assert_eq!(value["content"][0]["type"], "tool_use");
    assert!(value["content"][0]["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(value["content"][0]["input"], json!({"city": "sim-city"}));

    body["stream"] = json!(true);
    let (text, _) = read_all(sim.anthropic(&body, None).await).await;
    let frames = sse_frames(&text);
    let start = frames[1].json();
    assert_eq!(start["content_block"]["type"], "tool_use");
    assert_eq!(start["content_block"]["name"], "get_weather");
    let partial: String = frames
        .iter()
        .map(SseFrame::json)
        .filter(|v| v["delta"]["type"] == "input_json_delta")
        .map(|v| v["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), json!({"city": "sim-city"}));
    let delta = frames[frames.len() - 2].json();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn shapes_set_the_stop_reason() {
    let sim = sim().await;
    let body = anthropic_body("shape me");
    let value: Value = sim.anthropic(&body, Some("max_tokens")).await.json().await.unwrap();
    assert_eq!(value["stop_reason"], "max_tokens");
    assert!(!value["content"][0]["text"].as_str().unwrap().ends_with(SENTINEL));
    let value: Value = sim.anthropic(&body, Some("refusal")).await.json().await.unwrap();
    assert_eq!(value["stop_reason"], "refusal");

    let mut short = body.clone();
    short["max_tokens"] = json!(4);
    let value: Value = sim.anthropic(&short, None).await.json().await.unwrap();
    assert_eq!(value["stop_reason"], "max_tokens");
    assert_eq!(value["usage"]["output_tokens"], 4);
}

#[tokio::test]
async fn max_tokens_is_required() {
    let sim = sim().await;
    let body = json!({"model": "claude-sim", "messages": [{"role": "user", "content": "x"}]});
    let response = sim.anthropic(&body, None).await;
    assert_eq!(response.status(), 400);
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["error"]["type"], "invalid_request_error");
    assert!(value["error"]["message"].as_str().unwrap().contains("max_tokens"));
}

const ERRORS: &[(&str, u16, &str, &str)] = &[
    ("529", 529, "overloaded_error", "Overloaded"),
    ("429", 429, "rate_limit_error", "rate limit"),
    (
        "insufficient_quota",
        400,
        "invalid_request_error",
        "Your credit balance is too low to access the Anthropic API",
    ),
    (
        "spend_cap",
        429,
        "rate_limit_error",
        "You have reached your specified workspace API usage limits",
    ),
    ("500", 500, "api_error", "Internal server error"),
    (
        "context_length",
        400,
        "invalid_request_error",
        "prompt is too long: 210000 tokens > 200000 maximum",
    ),
    (
        "context_length:tokens=250000;max=100000",
        400,
        "invalid_request_error",
        "prompt is too long: 250000 tokens > 100000 maximum",
    ),
    ("content_policy:reason=self_harm", 400, "invalid_request_error", "(reason: self_harm)"),
    ("401", 401, "authentication_error", "x-api-key"),
    ("403", 403, "permission_error", "permission"),
    ("404", 404, "not_found_error", "claude-sim"),
    ("413", 413, "request_too_large", "maximum allowed number of bytes"),
    ("409", 409, "conflict_error", "conflict"),
];

#[tokio::test]
async fn error_faults_send_anthropic_error_bodies() {
    let sim = sim().await;
    for &(spec, status, kind, words) in ERRORS {
        let response = sim.anthropic(&anthropic_body(spec), Some(spec)).await;
        assert_eq!(response.status(), status, "{spec}");
        let request_id = header(&response, "request-id").unwrap();
        let value: Value = response.json().await.unwrap();
        assert_eq!(value["type"], "error", "{spec}");
        assert_eq!(value["error"]["type"], kind, "{spec}");
        assert_eq!(value["request_id"], request_id.as_str(), "{spec}");
        let message = value["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{spec}: {message}");
    }
    let response = sim.anthropic(&anthropic_body("x"), Some("529:retry_after=4")).await;
    assert_eq!(header(&response, "retry-after").as_deref(), Some("4"));
    let response = sim.anthropic(&anthropic_body("x"), Some("spend_cap")).await;
    assert!(header(&response, "retry-after").is_none());
    let value: Value = sim.anthropic(&anthropic_body("x"), Some("529")).await.json().await.unwrap();
    assert_eq!(
        value,
        json!({
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
            "request_id": value["request_id"]
        })
    );
}
