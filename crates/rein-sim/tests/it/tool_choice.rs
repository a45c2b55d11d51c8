//! Forced tool use: a named `tool_choice` (OpenAI `{"type":"function","function":{"name":…}}`,
//! Anthropic `{"type":"tool","name":…}`) makes the simulator call that tool, whole and streamed,
//! in both wire formats, with arguments shaped by that tool's schema. `required`/`any` call the
//! first tool; a name the request does not offer is a 400 naming the field, as the providers
//! answer.

// The helpers below are test code: failing loudly is their job.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use crate::support::*;

fn openai_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "search_docs", "parameters": {
            "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
        {"type": "function", "function": {"name": "lookup_order", "parameters": {
            "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}
    ])
}

fn anthropic_tools() -> Value {
    json!([
        {"name": "search_docs", "input_schema": {
            "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
        {"name": "lookup_order", "input_schema": {
            "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}
    ])
}

fn openai_request(choice: Value) -> Value {
    let mut body = openai_body("where is my order");
    body["tools"] = openai_tools();
    body["tool_choice"] = choice;
    body
}

fn anthropic_request(choice: Value) -> Value {
    let mut body = anthropic_body("where is my order");
    body["tools"] = anthropic_tools();
    body["tool_choice"] = choice;
    body
}

/// The tool an OpenAI response calls and its arguments, whole or streamed.
async fn openai_call(sim: &Sim, mut body: Value) -> (String, Value) {
    let value: Value = sim.openai(&body, None).await.json().await.unwrap();
    let call = &value["choices"][0]["message"]["tool_calls"][0]["function"];
    let name = call["name"].as_str().unwrap_or_default().to_owned();
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();

    body["stream"] = json!(true);
    let (text, clean) = read_all(sim.openai(&body, None).await).await;
    assert!(clean);
    let frames = sse_frames(&text);
    let chunks: Vec<Value> = frames[..frames.len() - 1].iter().map(SseFrame::json).collect();
    let deltas: Vec<&Value> =
        chunks.iter().map(|c| &c["choices"][0]["delta"]["tool_calls"][0]).collect();
    assert_eq!(deltas[0]["function"]["name"], name.as_str(), "the stream names the same tool");
    let streamed: String =
        deltas.iter().filter_map(|d| d["function"]["arguments"].as_str()).collect();
    assert_eq!(serde_json::from_str::<Value>(&streamed).unwrap(), arguments);
    (name, arguments)
}

/// The tool an Anthropic response calls and its input, whole or streamed.
async fn anthropic_call(sim: &Sim, mut body: Value) -> (String, Value) {
    let value: Value = sim.anthropic(&body, None).await.json().await.unwrap();
    assert_eq!(value["stop_reason"], "tool_use");
    let block = &value["content"][0];
    let name = block["name"].as_str().unwrap_or_default().to_owned();

    body["stream"] = json!(true);
    let (text, _) = read_all(sim.anthropic(&body, None).await).await;
    let frames = sse_frames(&text);
    assert_eq!(frames[1].json()["content_block"]["name"], name.as_str());
    let partial: String = frames
        .iter()
        .map(SseFrame::json)
        .filter(|v| v["delta"]["type"] == "input_json_delta")
        .map(|v| v["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), block["input"]);
    (name, block["input"].clone())
}

#[tokio::test]
async fn a_named_tool_choice_calls_that_tool_in_both_formats() {
    let sim = sim().await;
    let named = json!({"type": "function", "function": {"name": "lookup_order"}});
    let (name, arguments) = openai_call(&sim, openai_request(named)).await;
    assert_eq!(name, "lookup_order");
    assert_eq!(arguments, json!({"order_id": "sim-order_id"}));

    let named = json!({"type": "tool", "name": "lookup_order"});
    let (name, input) = anthropic_call(&sim, anthropic_request(named)).await;
    assert_eq!(name, "lookup_order");
    assert_eq!(input, json!({"order_id": "sim-order_id"}));
}

#[tokio::test]
async fn required_calls_the_first_tool() {
    let sim = sim().await;
    let (name, arguments) = openai_call(&sim, openai_request(json!("required"))).await;
    assert_eq!((name.as_str(), arguments), ("search_docs", json!({"query": "sim-query"})));
    let (name, _) = anthropic_call(&sim, anthropic_request(json!({"type": "any"}))).await;
    assert_eq!(name, "search_docs");
}

#[tokio::test]
async fn a_named_tool_the_request_does_not_offer_is_a_400() {
    let sim = sim().await;
    let named = json!({"type": "function", "function": {"name": "cancel_order"}});
    let response = sim.openai(&openai_request(named), None).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("tool_choice: ") && message.contains("cancel_order"), "{body}");

    let named = json!({"type": "tool", "name": "cancel_order"});
    let response = sim.anthropic(&anthropic_request(named), None).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("tool_choice: ") && message.contains("cancel_order"), "{body}");
}
