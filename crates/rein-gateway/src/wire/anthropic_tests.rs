//! Tests of the Anthropic request parser, response renderer and error bodies, on bodies shaped
//! as the official `anthropic` Python and TypeScript SDKs send them.

use serde_json::{Map, Value, json};

use rein_core::{Outcome, Role};

use super::*;
use crate::wire::fixtures;

/// Parses `body`, checking that the one-pass path and the JSON-tree path agree on it.
fn parse(body: Value) -> Result<AnthropicRequest, WireError> {
    parse_bytes(body.to_string().as_bytes())
}

fn parse_bytes(body: &[u8]) -> Result<AnthropicRequest, WireError> {
    let parsed = parse_request(body);
    assert_eq!(
        parsed,
        parse_tree(body),
        "the two paths differ on {}",
        String::from_utf8_lossy(body)
    );
    parsed
}

fn snapshot_json(name: &str, value: &Value) {
    insta::with_settings!({sort_maps => true}, {
        insta::assert_json_snapshot!(name, value);
    });
}

#[test]
fn common_bodies_take_the_one_pass_path() {
    let fast = |body: Value| serde_json::from_slice::<RawRequest>(body.to_string().as_bytes());
    let user = json!([{"role": "user", "content": "hi"}]);
    assert!(fast(json!({"model": "m", "max_tokens": 64, "messages": user})).is_ok());
    assert!(
        fast(json!({"model": "m", "max_tokens": 64, "messages": user, "stream": true,
        "system": [{"type": "text", "text": "Be brief."}], "temperature": 0.2,
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"}, "rein": {"evidence": []}}))
        .is_ok()
    );
    // A field rein does not model goes the tree way, to reach `extra`.
    let with_extra =
        json!({"model": "m", "max_tokens": 64, "messages": user, "metadata": {"user_id": "u1"}});
    assert!(fast(with_extra.clone()).is_err());
    let parsed = parse(with_extra).unwrap();
    assert_eq!(parsed.request.extra.get("metadata"), Some(&json!({"user_id": "u1"})));
}

#[test]
fn parses_a_plain_sdk_request() {
    // anthropic-python: client.messages.create(max_tokens=1024, messages=[...], model=...)
    let parsed = parse(json!({
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Hello, Claude"}],
        "model": "support"
    }))
    .unwrap();
    assert_eq!(parsed.route, "support");
    assert!(!parsed.stream);
    assert_eq!(parsed.request.max_tokens, Some(1024));
    assert_eq!(parsed.request.messages, [Message::user("Hello, Claude")]);
    assert!(parsed.request.extra.is_empty());
}

#[test]
fn parses_a_full_tool_conversation() {
    let parsed = parse(json!({
        "model": "support",
        "max_tokens": 2048,
        "system": [
            {"type": "text", "text": "You are a support agent."},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Where is order A-17?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Look it up.", "signature": "EqQBCgIYAh..."},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01A", "name": "get_order",
                 "input": {"order_id": "A-17"}},
                {"type": "tool_use", "id": "call_9xY", "name": "get_weather",
                 "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A",
                 "content": [{"type": "text", "text": "shipped"}]},
                {"type": "tool_result", "tool_use_id": "call_9xY", "content": "timeout",
                 "is_error": true},
                {"type": "text", "text": "Thanks!"}
            ]},
            {"role": "assistant", "content": "Your order"}
        ],
        "tools": [{
            "name": "get_order",
            "description": "Look up an order",
            "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}},
                             "required": ["order_id"]}
        }, {"type": "custom", "name": "get_weather",
            "input_schema": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": false},
        "temperature": 0.3,
        "top_p": 0.95,
        "top_k": 40,
        "stop_sequences": ["\n\nHuman:"],
        "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "service_tier": null,
        "stream": true
    }))
    .unwrap();
    assert!(parsed.stream);
    let roles: Vec<Role> = parsed.request.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Tool, Role::User, Role::Assistant],
        "tool results come before the turn's text; the prefill stays last"
    );
    assert_eq!(parsed.request.messages[3].content, "Error: timeout");
    assert_eq!(parsed.request.messages[1].tool_calls[1].id, "call_9xY");
    snapshot_json("tool_conversation_request", &json!(parsed));
}

#[test]
fn tool_choices_map_to_canonical() {
    let choice = |choice: Value| {
        parse(json!({"model": "m", "max_tokens": 1, "tool_choice": choice,
                     "messages": [{"role": "user", "content": "x"}]}))
        .unwrap()
        .request
        .tool_choice
    };
    assert_eq!(choice(json!({"type": "auto"})), Some(ToolChoice::Auto));
    assert_eq!(choice(json!({"type": "any"})), Some(ToolChoice::Required));
    assert_eq!(choice(json!({"type": "none"})), Some(ToolChoice::None));
    assert_eq!(
        choice(json!({"type": "tool", "name": "get_order"})),
        Some(ToolChoice::Tool { name: "get_order".into() })
    );
}

#[test]
fn bad_requests_name_the_field() {
    let user = json!([{"role": "user", "content": "hi"}]);
    let body = |value: Value| value.to_string().into_bytes();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("malformed_json", b"{\"model\": ".to_vec()),
        ("missing_model", body(json!({"max_tokens": 10, "messages": user}))),
        ("missing_max_tokens", body(json!({"model": "m", "messages": user}))),
        ("missing_messages", body(json!({"model": "m", "max_tokens": 10}))),
        ("messages_not_an_array", body(json!({"model": "m", "max_tokens": 10, "messages": {}}))),
        ("max_tokens_negative", body(json!({"model": "m", "max_tokens": -1, "messages": user}))),
        (
            "unknown_role",
            body(json!({"model": "m", "max_tokens": 10,
                        "messages": [{"role": "system", "content": "hi"}]})),
        ),
        (
            "image_block",
            body(json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBOR"}}
            ]}]})),
        ),
        (
            "document_in_tool_result",
            body(json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                    {"type": "document", "source": {"type": "text", "data": "x"}}
                ]}
            ]}]})),
        ),
        (
            "tool_use_without_id",
            body(json!({"model": "m", "max_tokens": 10, "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}
            ]})),
        ),
        (
            "server_tool",
            body(json!({"model": "m", "max_tokens": 10, "messages": user,
                        "tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
        ),
        (
            "tool_without_schema",
            body(json!({"model": "m", "max_tokens": 10, "messages": user,
                        "tools": [{"name": "f"}]})),
        ),
        (
            "tool_choice_tool_without_name",
            body(json!({"model": "m", "max_tokens": 10, "messages": user,
                        "tool_choice": {"type": "tool"}})),
        ),
        (
            "system_with_image",
            body(json!({"model": "m", "max_tokens": 10, "messages": user,
                        "system": [{"type": "image"}]})),
        ),
        (
            "evidence_id_not_a_string",
            body(json!({"model": "m", "max_tokens": 10, "messages": user,
                        "rein": {"evidence": [{"id": "118"}, {"id": ["140"]}]}})),
        ),
    ];
    let mut bodies = Map::new();
    for (name, body) in cases {
        let error = parse_bytes(&body).expect_err(name);
        bodies
            .insert(name.into(), json!({"param": error.param(), "body": wire_error_body(&error)}));
    }
    assert_eq!(
        bodies["missing_max_tokens"]["body"]["error"]["message"],
        "`max_tokens` is required"
    );
    assert_eq!(bodies["image_block"]["param"], "messages[0].content[1].type");
    assert_eq!(bodies["evidence_id_not_a_string"]["param"], "rein.evidence[1].id");
    snapshot_json("bad_requests", &Value::Object(bodies));
}

fn completion(response: ChatResponse, outcome: Outcome, tier: Option<(usize, &str)>) -> Completion {
    Completion { response, report: fixtures::report(outcome, tier) }
}

#[test]
fn renders_text_from_an_openai_tier() {
    let body = render_response(
        &completion(fixtures::text_response(), Outcome::Fallback, Some((1, "gpt"))),
        &fixtures::meta("msg_rein_1"),
    );
    assert_eq!(body["model"], "gpt-4o-2024-08-06");
    snapshot_json("text_response", &body);
}

#[test]
fn renders_thinking_text_and_tool_use() {
    let body = render_response(
        &completion(fixtures::tool_response(), Outcome::Answered, Some((0, "primary"))),
        &fixtures::meta("msg_rein_2"),
    );
    assert_eq!(body["content"][2]["input"], json!({"order_id": "A-17"}));
    assert_eq!(body["content"][3]["id"], "call_9xY");
    snapshot_json("tool_response", &body);
}

#[test]
fn invalid_tool_arguments_become_an_empty_input() {
    let mut response = fixtures::tool_response();
    response.tool_calls[0].arguments = "{\"order_id\": \"A-1".into();
    response.tool_calls[1].arguments = "[1, 2]".into();
    let body = render_response(
        &completion(response, Outcome::Answered, Some((0, "primary"))),
        &fixtures::meta("msg_rein_3"),
    );
    assert_eq!(body["content"][2]["input"], json!({}));
    assert_eq!(body["content"][3]["input"], json!({}));
}

#[test]
fn renders_a_refusal_as_text() {
    let body = render_response(
        &completion(fixtures::refusal_response(), Outcome::Answered, Some((0, "primary"))),
        &fixtures::meta("msg_rein_4"),
    );
    assert_eq!(body["content"], json!([{"type": "text", "text": "I can't help with that."}]));
    assert_eq!(body["stop_reason"], "refusal");
}

#[test]
fn stop_reasons_map_back() {
    let cases = [
        (StopReason::EndTurn, "end_turn"),
        (StopReason::StopSequence, "stop_sequence"),
        (StopReason::MaxTokens, "max_tokens"),
        (StopReason::ToolUse, "tool_use"),
        (StopReason::ContentFilter, "refusal"),
        (StopReason::Refusal, "refusal"),
        (StopReason::PauseTurn, "pause_turn"),
        (
            StopReason::Other("model_context_window_exceeded".into()),
            "model_context_window_exceeded",
        ),
    ];
    for (reason, expected) in cases {
        assert_eq!(stop_reason(Some(&reason)), expected, "{reason:?}");
    }
}

#[test]
fn error_bodies() {
    let kinds = [
        (ErrorKind::InvalidRequest, "`max_tokens` is required"),
        (ErrorKind::Authentication, "invalid x-api-key"),
        (ErrorKind::PermissionDenied, "This key may not use route `support`."),
        (ErrorKind::NotFound, "model: nope"),
        (ErrorKind::RequestTooLarge, "Request exceeds the maximum allowed number of bytes."),
        (ErrorKind::UnsupportedMediaType, "Send `content-type: application/json`."),
        (ErrorKind::RateLimited, "Rate limit reached for route `support`."),
        (ErrorKind::Internal, "Internal server error"),
        (ErrorKind::Unavailable, "Overloaded"),
        (ErrorKind::Timeout, "The deadline passed before any answer."),
    ];
    let bodies: Map<String, Value> = kinds
        .iter()
        .map(|(kind, message)| {
            (crate::server::status(*kind).as_u16().to_string(), error_body(*kind, message))
        })
        .collect();
    assert_eq!(bodies["401"]["error"]["type"], "authentication_error");
    snapshot_json("error_bodies", &Value::Object(bodies));
}

#[test]
fn call_error_bodies() {
    let report = || Box::new(fixtures::report(Outcome::Stopped, None));
    let errors = [
        CallError::UnknownRoute("nope".into()),
        CallError::ContentPolicy { reason: "flagged".into(), report: report() },
        CallError::ContentFilter { reason: "the output was filtered".into(), report: report() },
        CallError::ContextLength { reason: "210000 > 200000 tokens".into(), report: report() },
        CallError::Interrupted { reason: "stream broke".into(), report: report() },
    ];
    let bodies: Vec<Value> = errors
        .iter()
        .map(|error| {
            let (kind, body) = call_error_body(error);
            json!({"status": crate::server::status(kind).as_u16(), "body": body})
        })
        .collect();
    assert_eq!(bodies[2]["status"], 400);
    assert_eq!(bodies[2]["body"]["error"]["type"], "invalid_request_error");
    snapshot_json("call_error_bodies", &Value::Array(bodies));
}

#[test]
fn the_rein_object_is_read_as_evidence_and_never_forwarded() {
    // anthropic-python: messages.create(..., extra_body={"rein": {"evidence": [...]}}).
    let parsed = parse(json!({
        "model": "support",
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "Can I change my order?"}],
        "top_k": 5,
        "rein": {"evidence": [{"id": "140", "source": "search", "text": "48 hours."}]}
    }))
    .unwrap();
    assert_eq!(parsed.evidence.ids_from("search").collect::<Vec<_>>(), ["140"]);
    assert!(!parsed.request.extra.contains_key("rein"), "never reaches a provider");
    assert!(parsed.request.extra.contains_key("top_k"));
}

#[test]
fn renders_a_declined_call_as_the_safe_reply() {
    let response = ChatResponse {
        id: "degraded-support".into(),
        model: "rein-degraded".into(),
        text: "A person will reply within 2 hours.".into(),
        stop_reason: Some(StopReason::EndTurn),
        ..ChatResponse::default()
    };
    let body = render_response(
        &completion(response, Outcome::Declined, None),
        &fixtures::meta("msg_rein_6"),
    );
    assert_eq!(body["rein"]["outcome"], "declined");
    assert_eq!(
        body["content"],
        json!([{"type": "text", "text": "A person will reply within 2 hours."}])
    );
    assert_eq!(body["stop_reason"], "end_turn");
}

/// Found by the `anthropic_request` fuzz target: a string that is not UTF-8, in a field the
/// parser does not know, passed the one-pass path (serde skips such strings unread) and was
/// refused by the tree path. JSON is UTF-8: both refuse it, saying where.
#[test]
fn fuzz_anthropic_request_text_not_utf8_in_an_unknown_field_is_refused() {
    let body: &[u8] = b"{\"model\":\"m\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"nctenot\":[{\"typ\xa3\xa3\xa3\xa3\xa3\xa3\xa3\xa3\xa3\xa3\xa3\xa3\xa3\xa3\xa3e\":\"document\",\"source\":{\"type\":\"text\",\"data\":\"x\"}}]}]}]}";
    let refused = parse_bytes(body).unwrap_err();
    assert!(matches!(refused, WireError::MalformedJson { .. }), "{refused:?}");
    assert!(refused.to_string().contains("column 130"), "{refused}");
}

/// The `openai_request` finding (`crash-80854e6e…`) in a Messages body: a number no `f64` holds,
/// in a field the one-pass path skips unread (a block's unknown key), refused by the tree path.
/// Both refuse it as malformed JSON.
#[test]
fn fuzz_anthropic_request_a_number_out_of_range_in_a_skipped_field_is_refused_as_by_the_tree() {
    let body = br#"{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"hi","later":4e400}]}]}"#;
    let refused = parse_bytes(body).unwrap_err();
    assert!(matches!(refused, WireError::MalformedJson { .. }), "{refused:?}");
    assert!(refused.to_string().contains("number out of range"), "{refused}");
    assert_eq!(parse_bytes(body), parse_request_tree(body));
}

/// Found by the `anthropic_request` fuzz target in CI (`crash-edd33763…`) the day the number
/// scan came in: a body ending in a backslash inside a string made the scan step past the text's
/// end and panic. It is malformed JSON, refused by both paths.
#[test]
fn fuzz_anthropic_request_a_body_cut_after_a_backslash_in_a_string_is_refused() {
    let found: &[u8] = include_bytes!(
        "../../../../fuzz/corpus/anthropic_request/crash-edd337633dce553931bc87623d6a11a73549b572"
    );
    assert!(matches!(parse_bytes(found), Err(WireError::MalformedJson { .. })));
}

/// The `openai_request` target's lone-surrogate finding (`crash-f5617f61…`) in a `/v1/messages`
/// body: refused by both paths; a surrogate pair parses by both.
#[test]
fn fuzz_anthropic_request_a_lone_surrogate_in_an_unknown_field_is_refused_as_by_the_tree() {
    let lone = br#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi","cl$e":"\udE119nt"}]}"#;
    assert_eq!(parse_bytes(lone), parse_request_tree(lone));
    assert!(matches!(parse_bytes(lone), Err(WireError::MalformedJson { .. })));
    let pair = br#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi \ud83d\ude00","note":"\uD83D\uDE00"}]}"#;
    assert!(parse_bytes(pair).is_ok());
    assert_eq!(parse_bytes(pair), parse_request_tree(pair));
}
