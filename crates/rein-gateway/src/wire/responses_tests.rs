//! Tests of the Responses request parser, Response renderer, error bodies and stream encoder,
//! on bodies shaped as the official `openai` SDKs send them for `client.responses.create`.

use bytes::Bytes;
use serde_json::{Value, json};

use rein_core::{Outcome, Released, Role};

use super::*;
use crate::wire::fixtures::{self, frames_json};

fn parse(body: Value) -> Result<ResponsesRequest, WireError> {
    parse_request(body.to_string().as_bytes())
}

fn snapshot_json(name: &str, value: &Value) {
    insta::with_settings!({sort_maps => true}, {
        insta::assert_json_snapshot!(name, value);
    });
}

#[test]
fn parses_text_input_with_instructions() {
    let parsed = parse(json!({
        "model": "support",
        "instructions": "Be brief.",
        "input": "Where is my order?",
        "max_output_tokens": 200,
        "store": false,
    }))
    .unwrap();
    assert_eq!(parsed.route, "support");
    assert!(!parsed.stream);
    assert_eq!(parsed.request.system.as_deref(), Some("Be brief."));
    assert_eq!(parsed.request.messages, [Message::user("Where is my order?")]);
    assert_eq!(parsed.request.max_tokens, Some(200));
    assert_eq!(parsed.echo.instructions, json!("Be brief."));
    assert_eq!(parsed.echo.max_output_tokens, json!(200));
}

#[test]
fn parses_a_tool_loop_in_items() {
    // The items a Responses tool loop sends back: the model's call, then its output.
    let parsed = parse(json!({
        "model": "support",
        "input": [
            {"role": "developer", "content": "Use the tools."},
            {"role": "user", "content": [{"type": "input_text", "text": "Order A-17?"}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_order",
             "arguments": "{\"order_id\":\"A-17\"}", "status": "completed"},
            {"type": "function_call", "call_id": "call_2", "name": "get_weather",
             "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "{\"status\":\"shipped\"}"},
            {"type": "function_call_output", "call_id": "call_2",
             "output": [{"type": "input_text", "text": "sunny"}]},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "It shipped.", "annotations": []}]},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [{"type": "function", "name": "get_order", "description": "Look up an order",
                   "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                                  "required": ["order_id"]}, "strict": true}],
        "tool_choice": {"type": "function", "name": "get_order"},
        "stream": true,
        "user": "u-1",
        "reasoning": {"effort": "low"},
    }))
    .unwrap();
    assert!(parsed.stream);
    let request = &parsed.request;
    assert_eq!(request.system.as_deref(), Some("Use the tools."));
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Tool, Role::Assistant, Role::User]
    );
    assert_eq!(request.messages[1].tool_calls.len(), 2, "the calls of one turn are one message");
    assert_eq!(request.messages[1].tool_calls[0].id, "call_1");
    assert_eq!(request.messages[3].tool_call_id.as_deref(), Some("call_2"));
    assert_eq!(request.messages[3].content, "sunny");
    assert_eq!(request.tools[0].name, "get_order");
    assert_eq!(request.tool_choice, Some(ToolChoice::Tool { name: "get_order".into() }));
    assert_eq!(request.extra.get("user"), Some(&json!("u-1")));
    assert_eq!(request.extra.get("reasoning_effort"), Some(&json!("low")));
    assert_eq!(request.extra_format, Some(rein_core::WireFormat::OpenAi));
}

#[test]
fn parses_text_format_json_schema() {
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}},
                        "required": ["answer"], "additionalProperties": false});
    let parsed = parse(json!({
        "model": "support",
        "input": "hi",
        "text": {"format": {"type": "json_schema", "name": "reply", "schema": schema,
                            "strict": true}},
    }))
    .unwrap();
    assert_eq!(
        parsed.request.response_format,
        Some(ResponseFormat::JsonSchema {
            name: "reply".into(),
            schema: schema.clone(),
            strict: true
        })
    );
    assert_eq!(parsed.echo.text["format"]["schema"], schema);
    let parsed =
        parse(json!({"model": "m", "input": "hi", "text": {"format": {"type": "json_object"}}}))
            .unwrap();
    assert_eq!(parsed.request.response_format, Some(ResponseFormat::JsonObject));
}

#[test]
fn the_rein_object_is_read_and_never_forwarded() {
    let parsed = parse(json!({
        "model": "support", "input": "hi",
        "rein": {"evidence": [{"id": "140", "source": "search", "text": "Ships in 2 days"}],
                 "labels": {"question_type": "delivery"}},
    }))
    .unwrap();
    assert_eq!(parsed.evidence.len(), 1);
    assert_eq!(parsed.labels.get("question_type").map(String::as_str), Some("delivery"));
    assert!(parsed.request.extra.get("rein").is_none());
}

#[test]
fn bad_requests_name_the_field() {
    let cases = [
        (
            "previous_response_id",
            json!({"model": "m", "input": "hi", "previous_response_id": "resp_1"}),
        ),
        ("conversation", json!({"model": "m", "input": "hi", "conversation": "conv_1"})),
        ("background", json!({"model": "m", "input": "hi", "background": true})),
        (
            "web_search_tool",
            json!({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}),
        ),
        (
            "file_search_tool",
            json!({"model": "m", "input": "hi",
            "tools": [{"type": "function", "name": "f"}, {"type": "file_search", "vector_store_ids": []}]}),
        ),
        ("missing_model", json!({"input": "hi"})),
        ("missing_input", json!({"model": "m"})),
        ("bad_role", json!({"model": "m", "input": [{"role": "robot", "content": "hi"}]})),
        (
            "image_part",
            json!({"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://x/y.png"}]}]}),
        ),
        (
            "call_without_name",
            json!({"model": "m", "input": [
            {"type": "function_call", "call_id": "c", "arguments": "{}"}]}),
        ),
        (
            "item_reference",
            json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}),
        ),
        ("unknown_field", json!({"model": "m", "input": "hi", "prompt": {"id": "pmpt_1"}})),
        ("zero_max_output_tokens", json!({"model": "m", "input": "hi", "max_output_tokens": 0})),
        (
            "schema_without_name",
            json!({"model": "m", "input": "hi",
            "text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}),
        ),
        (
            "bad_tool_choice",
            json!({"model": "m", "input": "hi", "tool_choice": {"type": "web_search_preview"}}),
        ),
        ("bad_temperature", json!({"model": "m", "input": "hi", "temperature": "hot"})),
    ];
    let mut bodies = serde_json::Map::new();
    for (name, body) in cases {
        let error = parse(body).expect_err(name);
        assert!(error.param().is_some(), "{name}: {error}");
        bodies.insert(name.into(), wire_error_body(&error));
    }
    assert_eq!(bodies["previous_response_id"]["error"]["param"], json!("previous_response_id"));
    assert_eq!(bodies["web_search_tool"]["error"]["param"], json!("tools[0].type"));
    assert_eq!(bodies["file_search_tool"]["error"]["param"], json!("tools[1].type"));
    snapshot_json("bad_requests", &Value::Object(bodies));
}

fn completion(response: ChatResponse) -> Completion {
    Completion { response, report: fixtures::report(Outcome::Answered, Some((0, "primary"))) }
}

#[test]
fn renders_a_text_answer() {
    let echo = parse(json!({"model": "support", "input": "hi", "instructions": "Be brief."}))
        .unwrap()
        .echo;
    let body = render_response(
        &completion(fixtures::text_response()),
        &fixtures::meta("resp_rein1"),
        &echo,
    );
    assert!(body.get("rein").is_none(), "only OpenAI's documented fields");
    snapshot_json("text_response", &body);
}

#[test]
fn renders_function_calls_from_a_claude_tier() {
    let body = render_response(
        &completion(fixtures::tool_response()),
        &fixtures::meta("resp_rein2"),
        &Echo::default(),
    );
    let types: Vec<&str> =
        body["output"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["message", "function_call", "function_call"]);
    assert_eq!(body["output"][1]["call_id"], json!("toolu_01A"));
    assert_eq!(body["usage"]["total_tokens"], json!(155));
    snapshot_json("tool_response", &body);
}

#[test]
fn a_cut_answer_is_incomplete() {
    let mut response = fixtures::text_response();
    response.stop_reason = Some(rein_core::StopReason::MaxTokens);
    let body =
        render_response(&completion(response), &fixtures::meta("resp_rein3"), &Echo::default());
    assert_eq!(body["status"], json!("incomplete"));
    assert_eq!(body["incomplete_details"], json!({"reason": "max_output_tokens"}));
}

#[test]
fn call_errors_are_openai_errors_naming_input() {
    let (kind, body) = match fixtures::context_length_failure() {
        Released::Failed(error) => call_error_body(&error),
        _ => unreachable!(),
    };
    assert_eq!(kind, ErrorKind::InvalidRequest);
    assert_eq!(body["error"]["param"], json!("input"));
    assert_eq!(body["error"]["code"], json!("context_length_exceeded"));
}

fn encode_all(stream: &mut ResponsesStream, items: &[Released]) -> Vec<Bytes> {
    items.iter().flat_map(|item| stream.encode(item)).collect()
}

/// The `type` of each frame, checking that each frame's `event:` line names it and that the
/// sequence numbers count up from 0.
fn event_types(frames: &[Bytes]) -> Vec<String> {
    let json = frames_json(frames);
    json.as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(at, frame)| {
            assert_eq!(frame["event"], frame["data"]["type"]);
            assert_eq!(frame["data"]["sequence_number"], json!(at));
            frame["event"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn streams_a_text_answer_in_openai_s_event_order() {
    let mut stream = ResponsesStream::new(fixtures::meta("resp_rein4"), Echo::default());
    let frames = encode_all(&mut stream, &fixtures::text_answer_items());
    assert!(stream.is_finished());
    assert_eq!(
        event_types(&frames),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    snapshot_json("stream_text", &frames_json(&frames));
}

#[test]
fn streams_function_calls_in_openai_s_event_order() {
    let mut stream = ResponsesStream::new(fixtures::meta("resp_rein5"), Echo::default());
    let frames = encode_all(&mut stream, &fixtures::tool_answer_items());
    let types = event_types(&frames);
    let call: Vec<&str> = [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    .to_vec();
    let mut expected: Vec<&str> = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ];
    expected.extend(&call);
    expected.extend(&call);
    expected.push("response.completed");
    assert_eq!(types, expected);
    let json = frames_json(&frames);
    let last = &json.as_array().unwrap().last().unwrap()["data"]["response"];
    // The completed Response holds the items the events built, with their ids.
    assert_eq!(last["output"][1]["id"], json[9]["data"]["item"]["id"]);
    assert_eq!(last["output"][1]["arguments"], json!(r#"{"order_id":"A-17"}"#));
    snapshot_json("stream_tool_calls", &json);
}

#[test]
fn a_failure_mid_stream_is_response_failed_never_completed() {
    let mut stream = ResponsesStream::new(fixtures::meta("resp_rein6"), Echo::default());
    let frames = encode_all(&mut stream, &fixtures::interrupted_items());
    let types = event_types(&frames);
    assert_eq!(types.last().map(String::as_str), Some("response.failed"));
    assert!(!types.iter().any(|t| t == "response.completed" || t == "response.output_item.done"));
    assert!(stream.is_finished());
    assert!(stream.encode(&fixtures::completed(fixtures::text_response())).is_empty());
    snapshot_json("stream_failed", &frames_json(&frames));
}

#[test]
fn a_failure_before_the_stream_started_is_an_error_event() {
    let mut stream = ResponsesStream::new(fixtures::meta("resp_rein7"), Echo::default());
    let frames = stream.encode(&fixtures::context_length_failure());
    assert_eq!(event_types(&frames), ["error"]);
    snapshot_json("stream_error", &frames_json(&frames));
}

#[test]
fn a_stream_that_ends_without_a_terminal_item_fails() {
    let mut stream = ResponsesStream::new(fixtures::meta("resp_rein8"), Echo::default());
    let items = fixtures::text_answer_items();
    let mut frames = encode_all(&mut stream, &items[..3]);
    frames.extend(stream.close());
    assert_eq!(event_types(&frames).last().map(String::as_str), Some("response.failed"));
    assert!(stream.close().is_empty());
}

#[test]
fn an_answer_released_whole_is_still_streamed_as_items() {
    let mut stream = ResponsesStream::new(fixtures::meta("resp_rein9"), Echo::default());
    let frames = stream.encode(&fixtures::completed(fixtures::text_response()));
    let types = event_types(&frames);
    assert!(types.contains(&"response.output_text.delta".to_string()), "{types:?}");
    assert_eq!(types.last().map(String::as_str), Some("response.completed"));
}

#[test]
fn a_refusal_streams_as_a_refusal_part() {
    let mut stream = ResponsesStream::new(fixtures::meta("resp_rein10"), Echo::default());
    let frames = encode_all(&mut stream, &fixtures::refusal_items());
    let types = event_types(&frames);
    assert!(types.contains(&"response.refusal.delta".to_string()), "{types:?}");
    assert!(types.contains(&"response.refusal.done".to_string()), "{types:?}");
    let json = frames_json(&frames);
    let last = &json.as_array().unwrap().last().unwrap()["data"]["response"];
    assert_eq!(last["output"][0]["content"][0]["type"], json!("refusal"));
}

#[test]
fn an_empty_answer_streams_one_empty_message_without_empty_deltas() {
    let mut stream = ResponsesStream::new(fixtures::meta("resp_rein11"), Echo::default());
    let empty = ChatResponse { text: String::new(), ..fixtures::text_response() };
    let frames = stream.encode(&fixtures::completed(empty));
    let types = event_types(&frames);
    assert!(!types.contains(&"response.output_text.delta".to_string()), "{types:?}");
    let json = frames_json(&frames);
    let last = &json.as_array().unwrap().last().unwrap()["data"]["response"];
    assert_eq!(last["status"], json!("completed"));
    assert_eq!(last["output"][0]["content"][0]["text"], json!(""));
    assert_eq!(last["model"], json!("gpt-4o-2024-08-06"));
}
