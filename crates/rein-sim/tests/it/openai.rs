//! The OpenAI path: healthy answers (whole, streamed, with usage, logprobs, tools and JSON)
//! and every error fault's status, body and headers.

use rein_sim::{SENTINEL, healthy_answer, healthy_text};
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn healthy_answer_is_whole_and_deterministic() {
    let sim = sim().await;
    let body = openai_body("What is the capital of Norway?");
    let response = sim.openai(&body, None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type").unwrap(), "application/json");
    assert!(header(&response, "x-request-id").unwrap().starts_with("req_"));
    let first: Value = response.json().await.unwrap();
    assert_eq!(first["object"], "chat.completion");
    assert_eq!(first["model"], "gpt-sim");
    let content = first["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(content, healthy_text(&body));
    assert!(content.ends_with(SENTINEL));
    assert_eq!(first["choices"][0]["finish_reason"], "stop");
    assert_eq!(first["choices"][0]["message"]["refusal"], Value::Null);
    let usage = &first["usage"];
    assert_eq!(usage["prompt_tokens"], 6);
    assert_eq!(usage["completion_tokens"], token_count(content));
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );

    let second: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(second["choices"][0]["message"]["content"], content);
    assert_ne!(second["id"], first["id"], "ids are per response");
}

#[tokio::test]
async fn healthy_stream_framing_with_usage() {
    let sim = sim().await;
    let mut body = openai_body("stream please");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let response = sim.openai(&body, None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type").unwrap(), "text/event-stream; charset=utf-8");
    let (text, clean) = read_all(response).await;
    assert!(clean);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let frames = sse_frames(&text);
    assert!(frames.iter().all(|f| f.event.is_none()));
    let (done, chunks) = frames.split_last().unwrap();
    assert_eq!(done.data, "[DONE]");
    let chunks: Vec<Value> = chunks.iter().map(SseFrame::json).collect();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "gpt-sim");
        assert_eq!(chunk["id"], chunks[0]["id"]);
        assert!(chunk.get("usage").is_some(), "include_usage puts usage on every chunk");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let expected = healthy_text(&body);
    assert_eq!(openai_stream_text(&frames), expected);
    let tokens = token_count(&expected);
    // role chunk + one per token + finish chunk + usage chunk.
    assert_eq!(chunks.len(), tokens + 3);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["usage"], Value::Null);
    let usage_chunk = &chunks[chunks.len() - 1];
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], tokens);
}

#[tokio::test]
async fn stream_without_include_usage_has_no_usage() {
    let sim = sim().await;
    let mut body = openai_body("no usage");
    body["stream"] = json!(true);
    let (text, clean) = read_all(sim.openai(&body, None).await).await;
    assert!(clean);
    let frames = sse_frames(&text);
    for frame in &frames[..frames.len() - 1] {
        assert!(frame.json().get("usage").is_none());
    }
    assert_eq!(openai_stream_text(&frames), healthy_text(&body));
}

#[tokio::test]
async fn logprobs_when_asked() {
    let sim = sim().await;
    let mut body = openai_body("is this covered?");
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(2);
    let value: Value = sim.openai(&body, None).await.json().await.unwrap();
    let entries = value["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(entries.len(), value["usage"]["completion_tokens"].as_u64().unwrap() as usize);
    let joined: String = entries.iter().map(|e| e["token"].as_str().unwrap()).collect();
    assert_eq!(joined, healthy_text(&body));
    for entry in entries {
        let lp = entry["logprob"].as_f64().unwrap();
        assert!((-0.5..=0.0).contains(&lp));
        assert_eq!(entry["top_logprobs"].as_array().unwrap().len(), 2);
        assert_eq!(entry["top_logprobs"][0]["token"], entry["token"]);
    }
    // Without the flag: null.
    let plain: Value = sim.openai(&openai_body("x"), None).await.json().await.unwrap();
    assert_eq!(plain["choices"][0]["logprobs"], Value::Null);
}

fn with_tool(mut body: Value) -> Value {
    body["tools"] = json!([{"type": "function", "function": {
        "name": "lookup_order",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "include_items": {"type": "boolean"}
            },
            "required": ["order_id", "include_items"]
        }
    }}]);
    body
}

#[tokio::test]
async fn tool_calls_when_required() {
    let sim = sim().await;
    let mut body = with_tool(openai_body("where is my order"));
    body["tool_choice"] = json!("required");
    let value: Value = sim.openai(&body, None).await.json().await.unwrap();
    let choice = &value["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["function"]["name"], "lookup_order");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"order_id": "sim-order_id", "include_items": true}));
    assert_eq!(
        healthy_answer(&body).tool_call.unwrap().arguments,
        call["function"]["arguments"].as_str().unwrap()
    );

    // Streamed: the first chunk names the call, the argument deltas add up.
    body["stream"] = json!(true);
    let (text, clean) = read_all(sim.openai(&body, None).await).await;
    assert!(clean);
    let frames = sse_frames(&text);
    let chunks: Vec<Value> = frames[..frames.len() - 1].iter().map(SseFrame::json).collect();
    let first = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(first["function"]["name"], "lookup_order");
    assert_eq!(first["id"], call["id"]);
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(streamed, call["function"]["arguments"].as_str().unwrap());
    assert_eq!(chunks[chunks.len() - 1]["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn tool_word_triggers_a_call_and_tool_results_get_text() {
    let sim = sim().await;
    let body = with_tool(openai_body("use the tool please"));
    let value: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(value["choices"][0]["finish_reason"], "tool_calls");
    // After the tool result, a text answer (no loop).
    let mut follow_up = body.clone();
    let call = value["choices"][0]["message"].clone();
    follow_up["messages"]
        .as_array_mut()
        .unwrap()
        .extend([call, json!({"role": "tool", "tool_call_id": "x", "content": "shipped"})]);
    let value: Value = sim.openai(&follow_up, None).await.json().await.unwrap();
    assert_eq!(value["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn json_schema_answers_fit_the_schema() {
    let sim = sim().await;
    let mut body = openai_body("classify");
    body["response_format"] = json!({"type": "json_schema", "json_schema": {
        "name": "label", "strict": true,
        "schema": {"type": "object", "properties": {
            "label": {"type": "string", "enum": ["billing", "shipping"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}
        }, "required": ["label", "confidence"], "additionalProperties": false}
    }});
    let value: Value = sim.openai(&body, None).await.json().await.unwrap();
    let content = value["choices"][0]["message"]["content"].as_str().unwrap();
    let answer: Value = serde_json::from_str(content).unwrap();
    assert_eq!(answer, json!({"label": "billing", "confidence": 1.0}));
}

/// (spec, status, type, code, words the message contains, header that must be present).
type ErrorCase = (&'static str, u16, &'static str, Option<&'static str>, &'static str, Header);
type Header = Option<(&'static str, &'static str)>;

const ERRORS: &[ErrorCase] = &[
    ("429", 429, "requests", Some("rate_limit_exceeded"), "Rate limit reached", None),
    (
        "429:retry_after=2",
        429,
        "requests",
        Some("rate_limit_exceeded"),
        "Rate limit",
        Some(("retry-after", "2")),
    ),
    (
        "429:retry_after=0.5",
        429,
        "requests",
        Some("rate_limit_exceeded"),
        "Rate limit",
        Some(("retry-after", "0.5")),
    ),
    (
        "429:retry_after_ms=1500",
        429,
        "requests",
        Some("rate_limit_exceeded"),
        "Rate limit",
        Some(("retry-after-ms", "1500")),
    ),
    (
        "insufficient_quota",
        429,
        "insufficient_quota",
        Some("insufficient_quota"),
        "You exceeded your current quota",
        None,
    ),
    (
        "spend_cap",
        429,
        "invalid_request_error",
        Some("billing_hard_limit_reached"),
        "Billing hard limit",
        None,
    ),
    (
        "529:retry_after=1",
        529,
        "service_unavailable_error",
        Some("server_is_overloaded"),
        "overloaded",
        Some(("retry-after", "1")),
    ),
    (
        "503",
        503,
        "service_unavailable_error",
        Some("server_is_overloaded"),
        "The engine is currently overloaded, please try again later",
        None,
    ),
    (
        "503:retry_after=3",
        503,
        "service_unavailable_error",
        Some("server_is_overloaded"),
        "overloaded",
        Some(("retry-after", "3")),
    ),
    ("500", 500, "server_error", None, "The server had an error", None),
    ("408", 408, "timeout_error", None, "timed out", None),
    ("409", 409, "invalid_request_error", Some("conflict"), "conflicted", None),
    (
        "context_length",
        400,
        "invalid_request_error",
        Some("context_length_exceeded"),
        "maximum context length is 128000 tokens. However, your messages resulted in 210000 tokens",
        None,
    ),
    (
        "content_policy:reason=violence",
        400,
        "invalid_request_error",
        Some("content_policy_violation"),
        "(reason: violence)",
        None,
    ),
    ("401", 401, "invalid_request_error", Some("invalid_api_key"), "Incorrect API key", None),
    (
        "403",
        403,
        "request_forbidden",
        Some("unsupported_country_region_territory"),
        "not supported",
        None,
    ),
    (
        "404",
        404,
        "invalid_request_error",
        Some("model_not_found"),
        "The model `gpt-sim` does not exist",
        None,
    ),
    ("413", 413, "invalid_request_error", Some("request_too_large"), "too large", None),
    (
        "500:should_retry=false",
        500,
        "server_error",
        None,
        "error",
        Some(("x-should-retry", "false")),
    ),
    (
        "spend_cap:status=400",
        400,
        "invalid_request_error",
        Some("billing_hard_limit_reached"),
        "Billing",
        None,
    ),
];

#[tokio::test]
async fn error_faults_send_openai_error_bodies() {
    let sim = sim().await;
    for &(spec, status, kind, code, words, extra) in ERRORS {
        for stream in [false, true] {
            let mut body = openai_body(spec);
            body["stream"] = json!(stream);
            let response = sim.openai(&body, Some(spec)).await;
            assert_eq!(response.status(), status, "{spec}");
            assert_eq!(header(&response, "content-type").unwrap(), "application/json");
            assert!(header(&response, "x-request-id").is_some(), "{spec}");
            if !spec.contains("retry_after") {
                assert!(header(&response, "retry-after").is_none(), "{spec}");
                assert!(header(&response, "retry-after-ms").is_none(), "{spec}");
            }
            if let Some((name, value)) = extra {
                assert_eq!(header(&response, name).as_deref(), Some(value), "{spec}");
            }
            let value: Value = response.json().await.unwrap();
            let error = value["error"].as_object().unwrap();
            let mut keys: Vec<&str> = error.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(keys, ["code", "message", "param", "type"], "{spec}");
            assert_eq!(error["type"], kind, "{spec}");
            assert_eq!(error["code"].as_str(), code, "{spec}");
            let message = error["message"].as_str().unwrap();
            assert!(message.contains(words), "{spec}: {message}");
        }
    }
}

#[tokio::test]
async fn model_field_picks_the_fault() {
    let sim = sim().await;
    let mut body = openai_body("hi");
    body["model"] = json!("sim:529");
    let response = sim.openai(&body, None).await;
    assert_eq!(response.status(), 529);
    body["model"] = json!("sim:ok");
    let response = sim.openai(&body, None).await;
    assert_eq!(response.status(), 200);
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["model"], "sim:ok");
    // The header wins over the model.
    body["model"] = json!("sim:529");
    assert_eq!(sim.openai(&body, Some("ok")).await.status(), 200);
}

#[tokio::test]
async fn unknown_faults_are_loud() {
    let sim = sim().await;
    let response = sim.openai(&openai_body("hi"), Some("52")).await;
    assert_eq!(response.status(), 400);
    let value: Value = response.json().await.unwrap();
    let message = value["error"]["message"].as_str().unwrap();
    assert!(message.contains("bad fault spec `52`"), "{message}");
    assert!(message.contains("unknown fault `52`"), "{message}");

    let mut body = openai_body("hi");
    body["model"] = json!("sim:cut:afterr=3");
    let response = sim.openai(&body, None).await;
    assert_eq!(response.status(), 400);
    let value: Value = response.json().await.unwrap();
    assert!(value["error"]["message"].as_str().unwrap().contains("afterr"));
}

#[tokio::test]
async fn answer_shapes() {
    let sim = sim().await;
    let body = openai_body("shape me");
    let whole = healthy_text(&body);

    let value: Value = sim.openai(&body, Some("max_tokens")).await.json().await.unwrap();
    assert_eq!(value["choices"][0]["finish_reason"], "length");
    let cut = value["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(whole.starts_with(cut) && cut.len() < whole.len());
    assert!(!cut.ends_with(SENTINEL));

    let value: Value = sim.openai(&body, Some("refusal")).await.json().await.unwrap();
    assert_eq!(value["choices"][0]["message"]["content"], Value::Null);
    assert!(value["choices"][0]["message"]["refusal"].as_str().unwrap().contains("can't help"));

    let value: Value = sim.openai(&body, Some("code_fence")).await.json().await.unwrap();
    let content = value["choices"][0]["message"]["content"].as_str().unwrap();
    let inner = content.strip_prefix("```json\n").unwrap().strip_suffix("\n```").unwrap();
    let _: Value = serde_json::from_str(inner).unwrap();

    // JSON cut at max_tokens does not parse.
    let mut json_body = openai_body("json please");
    json_body["response_format"] = json!({"type": "json_object"});
    let value: Value = sim.openai(&json_body, Some("max_tokens")).await.json().await.unwrap();
    let content = value["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(serde_json::from_str::<Value>(content).is_err(), "{content}");

    // Refusal, streamed.
    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    let (text, _) = read_all(sim.openai(&stream_body, Some("refusal")).await).await;
    let refusal: String = sse_frames(&text)
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(&f.data).ok())
        .filter_map(|v| v["choices"][0]["delta"]["refusal"].as_str().map(str::to_owned))
        .collect();
    assert!(refusal.contains("can't help"));
}

#[tokio::test]
async fn reject_prefill_only_rejects_prefills() {
    let sim = sim().await;
    let body = openai_body("hi");
    assert_eq!(sim.openai(&body, Some("reject_prefill")).await.status(), 200);
    let mut prefill = body.clone();
    prefill["messages"].as_array_mut().unwrap().push(json!({"role": "assistant", "content": "{"}));
    let response = sim.openai(&prefill, Some("reject_prefill")).await;
    assert_eq!(response.status(), 400);
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["error"]["type"], "invalid_request_error");
    assert!(value["error"]["message"].as_str().unwrap().contains("prefill"));
}

#[tokio::test]
async fn models_and_unknown_paths() {
    let sim = sim().await;
    let value: Value =
        sim.client.get(sim.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(value["object"], "list");
    assert_eq!(value["data"][0]["object"], "model");
    let value: Value = sim
        .client
        .get(sim.url("/v1/models"))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(value["data"][0]["type"], "model");
    assert_eq!(value["has_more"], false);
    let response =
        sim.client.get(sim.url("/v1/models")).header("x-sim-fault", "503").send().await.unwrap();
    assert_eq!(response.status(), 503);
    let response = sim.client.post(sim.url("/v1/nope")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let value: Value = response.json().await.unwrap();
    assert!(value["error"]["message"].as_str().unwrap().contains("/v1/nope"));
}

#[tokio::test]
async fn bad_json_is_a_400() {
    let sim = sim().await;
    let response = sim
        .client
        .post(sim.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["error"]["type"], "invalid_request_error");
}
