//! The Responses API path (`POST /v1/responses`): healthy answers that match the other
//! endpoints' (text, tool calls, structured output), the `response` object and the typed event
//! stream closed by `response.completed` (or `response.incomplete` at the token ceiling), the
//! same fault language (OpenAI error bodies, a cut stream without its closing event,
//! `response.failed` mid-stream), and a Chat Completions body refused as the API refuses it.

use rein_sim::{healthy_answer, healthy_text};
use serde_json::{Value, json};

use crate::support::*;

fn responses_body(text: &str) -> Value {
    json!({"model": "gpt-sim", "input": [{"role": "user", "content": text}], "store": false})
}

fn streamed(mut body: Value) -> Value {
    body["stream"] = json!(true);
    body
}

fn weather_tool() -> Value {
    json!({
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    })
}

#[tokio::test]
async fn healthy_response_object_answers_like_chat_completions() {
    let sim = sim().await;
    let mut body = responses_body("Capital of Norway?");
    body["instructions"] = json!("Be brief.");
    let response = sim.post("/v1/responses", &body, None).await;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "x-request-id").is_some());
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["object"], "response");
    assert_eq!(value["status"], "completed");
    assert!(value["id"].as_str().unwrap().starts_with("resp_"));
    let item = &value["output"][0];
    assert_eq!(item["type"], "message");
    assert_eq!(item["content"][0]["type"], "output_text");
    let chat = json!({"model": "gpt-sim", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of Norway?"},
    ]});
    assert_eq!(item["content"][0]["text"], healthy_text(&chat));
    let usage = &value["usage"];
    assert_eq!(
        usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap(),
        usage["total_tokens"].as_u64().unwrap()
    );
    let log = sim.handle.log();
    let entry = log.last().unwrap();
    assert_eq!(entry.path, "/v1/responses");
    assert_eq!(entry.format.as_deref(), Some("openai"));
    assert_eq!(entry.model.as_deref(), Some("gpt-sim"));
}

#[tokio::test]
async fn stream_is_typed_events_closed_by_response_completed() {
    let sim = sim().await;
    let response =
        sim.post("/v1/responses", &streamed(responses_body("stream please")), None).await;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "content-type").unwrap().starts_with("text/event-stream"));
    let (text, clean) = read_all(response).await;
    assert!(clean);
    let frames = sse_frames(&text);
    for (number, frame) in frames.iter().enumerate() {
        let event = frame.json();
        assert_eq!(frame.event.as_deref(), event["type"].as_str(), "the event line names the type");
        assert_eq!(event["sequence_number"], json!(number));
    }
    let events: Vec<Value> = frames.iter().map(SseFrame::json).collect();
    assert_eq!(events[0]["type"], "response.created");
    assert_eq!(events[0]["response"]["status"], "in_progress");
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, healthy_text(&openai_body("stream please")));
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["output"][0]["content"][0]["text"], json!(deltas));
    assert!(last["response"]["usage"]["output_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn tool_call_streams_its_arguments_as_deltas() {
    let sim = sim().await;
    let mut body = streamed(responses_body("Weather in Oslo?"));
    body["tools"] = json!([weather_tool()]);
    body["tool_choice"] = json!({"type": "function", "name": "get_weather"});
    let response = sim.post("/v1/responses", &body, None).await;
    let (text, clean) = read_all(response).await;
    assert!(clean);
    let events: Vec<Value> = sse_frames(&text).iter().map(SseFrame::json).collect();
    let added = events.iter().find(|e| e["type"] == "response.output_item.added").unwrap();
    assert_eq!(added["item"]["type"], "function_call");
    assert_eq!(added["item"]["name"], "get_weather");
    assert!(added["item"]["call_id"].as_str().unwrap().starts_with("call_"));
    let arguments: String = events
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let chat = json!({"model": "gpt-sim",
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": weather_tool()["parameters"]}}],
        "tool_choice": "required"});
    let expected = healthy_answer(&chat).tool_call.unwrap();
    assert_eq!(arguments, expected.arguments);
    let done =
        events.iter().find(|e| e["type"] == "response.function_call_arguments.done").unwrap();
    assert_eq!(done["arguments"], json!(arguments));
    assert_eq!(events.last().unwrap()["type"], "response.completed");
}

#[tokio::test]
async fn tool_turns_in_input_are_read_like_chat_completions_turns() {
    let sim = sim().await;
    let mut body = responses_body("Weather in Oslo?");
    body["input"].as_array_mut().unwrap().extend([
        json!({"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}),
        json!({"type": "function_call_output", "call_id": "call_1", "output": "{\"celsius\":3}"}),
    ]);
    body["tools"] = json!([weather_tool()]);
    let value: Value = sim.post("/v1/responses", &body, None).await.json().await.unwrap();
    let chat = json!({"model": "gpt-sim",
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"celsius\":3}"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": weather_tool()["parameters"]}}]});
    assert_eq!(value["output"][0]["content"][0]["text"], healthy_text(&chat));
}

#[tokio::test]
async fn structured_output_follows_text_format() {
    let sim = sim().await;
    let mut body = responses_body("An event, please.");
    body["text"] = json!({"format": {
        "type": "json_schema",
        "name": "event",
        "schema": {"type": "object", "properties": {"name": {"type": "string"}, "day": {"type": "integer"}},
                   "required": ["name", "day"], "additionalProperties": false},
        "strict": true
    }});
    let value: Value = sim.post("/v1/responses", &body, None).await.json().await.unwrap();
    let text = value["output"][0]["content"][0]["text"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(text).unwrap();
    assert!(parsed["name"].is_string(), "{text}");
    assert!(parsed["day"].is_i64(), "{text}");
}

#[tokio::test]
async fn the_token_ceiling_ends_with_response_incomplete() {
    let sim = sim().await;
    let mut body = streamed(responses_body("a long answer please"));
    body["max_output_tokens"] = json!(2);
    let (text, _) = read_all(sim.post("/v1/responses", &body, None).await).await;
    let events: Vec<Value> = sse_frames(&text).iter().map(SseFrame::json).collect();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(last["response"]["incomplete_details"]["reason"], "max_output_tokens");
    let deltas = events.iter().filter(|e| e["type"] == "response.output_text.delta").count();
    assert_eq!(deltas, 2);
}

#[tokio::test]
async fn faults_are_openai_error_bodies_cuts_and_response_failed() {
    let sim = sim().await;
    let response =
        sim.post("/v1/responses", &responses_body("hi"), Some("429:retry_after=2")).await;
    assert_eq!(response.status(), 429);
    assert_eq!(header(&response, "retry-after").as_deref(), Some("2"));
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["error"]["code"], "rate_limit_exceeded");
    let response = sim.post("/v1/responses", &responses_body("hi"), Some("500")).await;
    assert_eq!(response.status(), 500);
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["error"]["type"], "server_error");

    let body = streamed(responses_body("a longer answer please"));
    let (text, clean) = read_all(sim.post("/v1/responses", &body, Some("cut:after=2")).await).await;
    assert!(!clean, "the connection is cut");
    assert!(!text.contains("response.completed"), "{text}");
    assert_eq!(text.matches("\"response.output_text.delta\"").count(), 2);

    let (text, clean) =
        read_all(sim.post("/v1/responses", &body, Some("stream_error:after=2")).await).await;
    assert!(clean);
    let frames = sse_frames(&text);
    let last = frames.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("response.failed"));
    assert_eq!(last.json()["response"]["error"]["code"], "server_error");
    assert!(!text.contains("response.completed"));

    // Without a stream to break, the same fault is the equivalent 500.
    let response =
        sim.post("/v1/responses", &responses_body("hi"), Some("stream_error:after=2")).await;
    assert_eq!(response.status(), 500);

    // The model names the fault too.
    let mut body = responses_body("hi");
    body["model"] = json!("sim:503");
    assert_eq!(sim.post("/v1/responses", &body, None).await.status(), 503);
}

#[tokio::test]
async fn a_chat_completions_body_is_refused() {
    let sim = sim().await;
    let response = sim.post("/v1/responses", &openai_body("hi"), None).await;
    assert_eq!(response.status(), 400);
    let value: Value = response.json().await.unwrap();
    assert!(value["error"]["message"].as_str().unwrap().contains("'messages'"), "{value}");
    // Chat Completions' nested tool shape lacks the flat `name`.
    let mut body = responses_body("hi");
    body["tools"] = json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
    let response = sim.post("/v1/responses", &body, None).await;
    assert_eq!(response.status(), 400);
}
