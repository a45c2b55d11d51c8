//! `POST /v1/responses` through a real gateway in front of the simulator: a Responses caller
//! served by an OpenAI-format tier and, on fallback, by an Anthropic-format tier, whole and
//! streamed; a function-call loop round-tripped; `text.format` json_schema checked; a stream
//! cut after its first tokens ending in `response.failed`; bad input as OpenAI's 400s.

use serde_json::{Value, json};

use crate::gateway::{CONFIG, Running, start, start_with};

const KEY: Option<&str> = Some("client-secret-1");

async fn create(gw: &Running, body: Value) -> reqwest::Response {
    gw.post("/v1/responses", KEY, body).await
}

/// The events of an SSE body as (event name, data); checks that each names its `type` and
/// that sequence numbers count from 0.
fn events(body: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for frame in body.split("\n\n").filter(|frame| !frame.trim().is_empty()) {
        let mut name = String::new();
        let mut data = Value::Null;
        for line in frame.lines() {
            if let Some(event) = line.strip_prefix("event: ") {
                name = event.to_string();
            } else if let Some(payload) = line.strip_prefix("data: ") {
                data = serde_json::from_str(payload).unwrap();
            }
        }
        if name.is_empty() {
            continue; // a keep-alive comment
        }
        assert_eq!(data["type"], json!(name), "{frame}");
        assert_eq!(data["sequence_number"], json!(out.len()), "{frame}");
        out.push((name, data));
    }
    out
}

async fn stream(
    gw: &Running,
    mut body: Value,
) -> (reqwest::header::HeaderMap, Vec<(String, Value)>) {
    body["stream"] = json!(true);
    let response = create(gw, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (headers, events(&text))
}

fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().unwrap().iter())
        .filter_map(|part| part["text"].as_str())
        .collect()
}

#[tokio::test]
async fn a_responses_caller_is_served_by_openai_and_anthropic_tiers() {
    let gw = start().await;
    for (route, tier, outcome) in
        [("chat", "primary", "answered"), ("flaky", "fallback", "fallback")]
    {
        let body = json!({"model": route, "instructions": "Be brief.", "input": "where is my order?",
                          "max_output_tokens": 300, "store": false});
        let response = create(&gw, body.clone()).await;
        assert_eq!(response.status(), 200, "{route}");
        assert_eq!(response.headers()["x-rein-tier"], tier);
        assert_eq!(response.headers()["x-rein-outcome"], outcome);
        assert!(response.headers().contains_key("x-request-id"));
        let whole: Value = response.json().await.unwrap();
        assert_eq!(whole["object"], "response");
        assert_eq!(whole["status"], "completed");
        assert!(whole["id"].as_str().unwrap().starts_with("resp_"));
        assert_eq!(whole["instructions"], "Be brief.");
        assert_eq!(whole["max_output_tokens"], 300);
        assert!(whole.get("rein").is_none(), "only OpenAI's documented fields");
        assert!(output_text(&whole).ends_with(rein_sim::SENTINEL), "{whole}");
        let usage = &whole["usage"];
        assert_eq!(
            usage["total_tokens"].as_u64().unwrap(),
            usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()
        );

        let (headers, events) = stream(&gw, body).await;
        assert_eq!(headers["x-rein-tier"], tier);
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names[..4],
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added"
            ]
        );
        assert_eq!(
            names[names.len() - 5..],
            [
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        let deltas: String = events
            .iter()
            .filter(|(name, _)| name == "response.output_text.delta")
            .map(|(_, data)| data["delta"].as_str().unwrap())
            .collect();
        let done = &events.last().unwrap().1["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(output_text(done), deltas, "the deltas add up to the completed text");
        assert!(deltas.ends_with(rein_sim::SENTINEL));
        assert!(done["usage"]["output_tokens"].as_u64().unwrap() > 0);
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn function_calls_round_trip_through_either_format() {
    let gw = start().await;
    let tools = json!([{"type": "function", "name": "lookup_order", "description": "Look up an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"], "additionalProperties": false}, "strict": true}]);
    // `chat` is answered by the OpenAI-format tier, `flaky` by the Anthropic-format fallback.
    for route in ["chat", "flaky"] {
        let ask = json!({"model": route, "input": "use the tool please", "tools": tools});
        let response = create(&gw, ask.clone()).await;
        assert_eq!(response.status(), 200, "{route}");
        let first: Value = response.json().await.unwrap();
        let call = first["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["type"] == "function_call")
            .unwrap_or_else(|| panic!("{route}: no function call in {first}"))
            .clone();
        assert_eq!(call["name"], "lookup_order");
        assert_eq!(call["status"], "completed");
        assert!(call["id"].as_str().unwrap().starts_with("fc_"));
        let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert!(arguments["order_id"].is_string(), "{arguments}");

        // Streamed: the call's events, and the completed Response holds the same call.
        let (_, events) = stream(&gw, ask).await;
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        assert!(names.contains(&"response.function_call_arguments.delta"), "{names:?}");
        let done = events
            .iter()
            .find(|(name, _)| name == "response.function_call_arguments.done")
            .unwrap();
        let completed = &events.last().unwrap().1["response"];
        let streamed_call = completed["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["type"] == "function_call")
            .unwrap();
        assert_eq!(done.1["arguments"], streamed_call["arguments"]);
        assert_eq!(done.1["item_id"], streamed_call["id"]);

        // The caller runs the tool and sends the call and its output back, statelessly.
        let back = json!({"model": route, "tools": tools, "input": [
            {"role": "user", "content": "use the tool please"},
            call.clone(),
            {"type": "function_call_output", "call_id": call["call_id"], "output": "{\"status\":\"shipped\"}"},
        ]});
        let response = create(&gw, back).await;
        assert_eq!(response.status(), 200, "{route}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["status"], "completed");
        assert!(output_text(&answer).ends_with(rein_sim::SENTINEL), "{route}: {answer}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_json_schema_format_is_answered_and_checked() {
    let gw = start().await;
    let schema = json!({"type": "object", "properties": {"eta_days": {"type": "integer"}},
                        "required": ["eta_days"], "additionalProperties": false});
    for route in ["chat", "flaky"] {
        let body = json!({"model": route, "input": "when does it ship?",
            "text": {"format": {"type": "json_schema", "name": "eta", "schema": schema, "strict": true}}});
        let response = create(&gw, body.clone()).await;
        assert_eq!(response.status(), 200);
        let whole: Value = response.json().await.unwrap();
        assert_eq!(whole["text"]["format"]["name"], "eta");
        let answer: Value = serde_json::from_str(&output_text(&whole)).unwrap();
        assert!(answer["eta_days"].is_i64(), "{answer}");
        let (_, events) = stream(&gw, body).await;
        let done = &events.last().unwrap().1["response"];
        let answer: Value = serde_json::from_str(&output_text(done)).unwrap();
        assert!(answer["eta_days"].is_i64(), "{answer}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_stream_cut_after_its_first_tokens_ends_in_response_failed() {
    let config = format!(
        r#"{CONFIG}
[routes.cut]
release = "passthrough"
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 500
attempt_ms = 2000
backoff_cap_ms = 100

[[routes.cut.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:cut:after=3"
"#
    );
    let gw = start_with(&config, None).await;
    let (_, events) = stream(&gw, json!({"model": "cut", "input": "hi"})).await;
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert!(names.contains(&"response.output_text.delta"), "{names:?}");
    assert_eq!(names.last(), Some(&"response.failed"), "{names:?}");
    assert!(!names.contains(&"response.completed"));
    let failed = &events.last().unwrap().1["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], "server_error");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_an_openai_400_naming_the_field() {
    let gw = start().await;
    let cases = [
        (
            json!({"model": "chat", "input": "hi", "previous_response_id": "resp_123"}),
            "previous_response_id",
        ),
        (
            json!({"model": "chat", "input": "hi", "tools": [{"type": "web_search"}]}),
            "tools[0].type",
        ),
        (json!({"model": "chat", "input": [{"role": "robot", "content": "hi"}]}), "input[0].role"),
        (json!({"model": "chat"}), "input"),
        (
            json!({"model": "chat", "input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nope"}}}}),
            "text.format.schema",
        ),
    ];
    for (body, param) in cases {
        let response = create(&gw, body).await;
        assert_eq!(response.status(), 400, "{param}");
        assert!(response.headers().contains_key("x-request-id"));
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        assert_eq!(body["error"]["param"], param, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(param), "{body}");
    }
    let unknown = create(&gw, json!({"model": "nope", "input": "hi"})).await;
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    let unauthorized =
        gw.post("/v1/responses", Some("wrong"), json!({"model": "chat", "input": "hi"})).await;
    assert_eq!(unauthorized.status(), 401);
    let body: Value = unauthorized.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    gw.stop().await.unwrap();
}
