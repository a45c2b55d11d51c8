//! Tests of the OpenAI request parser, response renderer and error bodies, on bodies shaped as
//! the official `openai` Python and Node SDKs send them.

use serde_json::{Value, json};

use rein_core::{Completion, Outcome, Role, ToolChoice};

use super::*;
use crate::wire::fixtures;

/// Parses `body`, checking that the one-pass path and the JSON-tree path agree on it.
fn parse(body: Value) -> Result<OpenAiRequest, WireError> {
    parse_bytes(body.to_string().as_bytes())
}

fn parse_bytes(body: &[u8]) -> Result<OpenAiRequest, WireError> {
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
fn parses_a_plain_sdk_request() {
    // openai-python: client.chat.completions.create(model=..., messages=[...])
    let parsed = parse(json!({
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Where is my order?"}
        ],
        "model": "support"
    }))
    .unwrap();
    assert_eq!(parsed.route, "support");
    assert!(!parsed.stream);
    assert_eq!(parsed.request.system.as_deref(), Some("You are a helpful assistant."));
    assert_eq!(parsed.request.messages, [Message::user("Where is my order?")]);
    assert!(parsed.request.model.is_empty(), "the tier sets the provider's model");
}

#[test]
fn common_bodies_take_the_one_pass_path() {
    let fast = |body: Value| serde_json::from_slice::<RawRequest>(body.to_string().as_bytes());
    let user = json!([{"role": "user", "content": "hi", "name": "ana"}]);
    assert!(fast(json!({"model": "m", "messages": user})).is_ok());
    assert!(
        fast(json!({"model": "m", "messages": user, "stream": true,
        "stream_options": {"include_usage": true}, "temperature": 0.2, "max_tokens": 9,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "auto", "response_format": {"type": "json_object"},
        "rein": {"evidence": []}}))
        .is_ok()
    );
    // A field rein does not model goes the tree way, to reach `extra`.
    assert!(fast(json!({"model": "m", "messages": user, "seed": 7})).is_err());
    let parsed = parse(json!({"model": "m", "messages": user, "seed": 7})).unwrap();
    assert_eq!(parsed.request.extra.get("seed"), Some(&json!(7)));
}

#[test]
fn parses_a_full_tool_conversation() {
    let parsed = parse(json!({
        "model": "support",
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "system", "content": "Answer in English."},
            {"role": "user", "content": [
                {"type": "text", "text": "What's the weather in Paris?"},
                {"type": "text", "text": "And in Rome?"}
            ], "name": "ana"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_abc", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "toolu_01X", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_abc", "content": "18C sunny"},
            {"role": "tool", "tool_call_id": "toolu_01X",
             "content": [{"type": "text", "text": "22C"}]}
        ],
        "tools": [{
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]},
                "strict": true
            }
        }, {"type": "function", "function": {"name": "now"}}],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "max_completion_tokens": 512,
        "max_tokens": 100,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": ["\n\nUser:", "END"],
        "seed": 7,
        "user": "user-123",
        "metadata": {"ticket": "T-1"},
        "store": false,
        "frequency_penalty": 0.5,
        "presence_penalty": 0,
        "logit_bias": null,
        "stream": true,
        "stream_options": {"include_usage": true}
    }))
    .unwrap();
    assert!(parsed.stream && parsed.include_usage);
    assert_eq!(parsed.request.max_tokens, Some(512), "max_completion_tokens wins");
    assert_eq!(parsed.request.messages[1].role, Role::Assistant);
    assert_eq!(parsed.request.messages[3].tool_call_id.as_deref(), Some("toolu_01X"));
    snapshot_json("tool_conversation_request", &json!(parsed));
}

#[test]
fn parses_response_format_tool_choice_and_logprobs() {
    let parsed = parse(json!({
        "model": "extract",
        "messages": [{"role": "user", "content": "Extract the order id."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "order", "strict": true,
                            "schema": {"type": "object", "properties": {"id": {"type": "string"}}}}
        },
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "logprobs": true,
        "top_logprobs": 3,
        "n": 1,
        "stop": "END"
    }))
    .unwrap();
    assert_eq!(parsed.request.tool_choice, Some(ToolChoice::Tool { name: "lookup".into() }));
    assert_eq!(parsed.request.logprobs, Some(3));
    assert_eq!(parsed.request.stop, ["END"]);
    snapshot_json("structured_request", &json!(parsed));

    let required = parse(json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                "tool_choice": "required", "response_format": {"type": "json_object"},
                                "logprobs": false, "top_logprobs": 2}))
    .unwrap();
    assert_eq!(required.request.tool_choice, Some(ToolChoice::Required));
    assert_eq!(required.request.response_format, Some(ResponseFormat::JsonObject));
    assert_eq!(required.request.logprobs, None);
}

#[test]
fn the_rein_object_is_read_as_evidence_and_never_forwarded() {
    // openai-python: create(..., extra_body={"rein": {"evidence": [...]}}) puts it top-level.
    let parsed = parse(json!({
        "model": "support",
        "messages": [{"role": "user", "content": "Can I change my order?"}],
        "seed": 7,
        "rein": {"evidence": [
            {"id": "140", "source": "search", "text": "Changes close 48 hours before delivery."},
            {"id": "A10234", "source": "look_up_order", "fields": {"status": "preparing"}}
        ]}
    }))
    .unwrap();
    assert_eq!(parsed.evidence.len(), 2);
    assert_eq!(parsed.evidence.text_of("140"), Some("Changes close 48 hours before delivery."));
    assert_eq!(parsed.evidence.items()[1].fields, json!({"status": "preparing"}));
    assert!(!parsed.request.extra.contains_key("rein"), "never reaches a provider");
    assert!(parsed.request.extra.contains_key("seed"));
    assert_eq!(json!(parsed)["evidence"][0]["id"], "140");
    // Without it: no evidence, and nothing new in the parsed shape.
    let plain = parse(json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
                             "rein": null}))
    .unwrap();
    assert!(plain.evidence.is_empty());
    assert!(json!(plain).get("evidence").is_none());
}

#[test]
fn an_echoed_refusal_keeps_its_words() {
    let parsed = parse(json!({"model": "m", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": null, "refusal": "I can't help with that."},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}
    ]}))
    .unwrap();
    assert_eq!(parsed.request.messages[1].content, "I can't help with that.");
    assert_eq!(parsed.request.messages[2].content, "No.");
}

#[test]
fn bad_requests_name_the_field() {
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("malformed_json", b"{\"model\": \"m\", ".to_vec()),
        ("not_an_object", b"[]".to_vec()),
        ("missing_model", json!({"messages": user}).to_string().into_bytes()),
        ("null_model", json!({"model": null, "messages": user}).to_string().into_bytes()),
        ("missing_messages", json!({"model": "m"}).to_string().into_bytes()),
        ("messages_not_an_array", json!({"model": "m", "messages": "hi"}).to_string().into_bytes()),
        ("empty_messages", json!({"model": "m", "messages": []}).to_string().into_bytes()),
        (
            "unknown_role",
            json!({"model": "m", "messages": [{"role": "robot", "content": "hi"}]})
                .to_string()
                .into_bytes(),
        ),
        (
            "content_wrong_type",
            json!({"model": "m", "messages": [{"role": "user", "content": 5}]})
                .to_string()
                .into_bytes(),
        ),
        (
            "image_part",
            json!({"model": "m", "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "a"},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
                ]}
            ]})
            .to_string()
            .into_bytes(),
        ),
        ("n_is_2", json!({"model": "m", "messages": user, "n": 2}).to_string().into_bytes()),
        (
            "temperature_is_a_string",
            json!({"model": "m", "messages": user, "temperature": "hot"}).to_string().into_bytes(),
        ),
        (
            "tool_without_call_id",
            json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]})
                .to_string()
                .into_bytes(),
        ),
        (
            "tool_function_without_name",
            json!({"model": "m", "messages": user,
                   "tools": [{"type": "function", "function": {"parameters": {}}}]})
            .to_string()
            .into_bytes(),
        ),
        (
            "custom_tool",
            json!({"model": "m", "messages": user, "tools": [{"type": "custom", "custom": {}}]})
                .to_string()
                .into_bytes(),
        ),
        (
            "unknown_tool_choice",
            json!({"model": "m", "messages": user, "tool_choice": "sometimes"})
                .to_string()
                .into_bytes(),
        ),
        (
            "unknown_response_format",
            json!({"model": "m", "messages": user, "response_format": {"type": "yaml"}})
                .to_string()
                .into_bytes(),
        ),
        (
            "json_schema_without_schema_object",
            json!({"model": "m", "messages": user, "response_format": {"type": "json_schema"}})
                .to_string()
                .into_bytes(),
        ),
        (
            "legacy_functions",
            json!({"model": "m", "messages": user, "functions": [{"name": "f"}]})
                .to_string()
                .into_bytes(),
        ),
        (
            "audio_modality",
            json!({"model": "m", "messages": user, "modalities": ["text", "audio"]})
                .to_string()
                .into_bytes(),
        ),
        (
            "tool_call_arguments_not_a_string",
            json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}
            ]}]})
            .to_string()
            .into_bytes(),
        ),
    ];
    let more: Vec<(&str, Value)> = vec![
        ("message_not_an_object", json!({"model": "m", "messages": ["hi"]})),
        ("role_not_a_string", json!({"model": "m", "messages": [{"role": 5, "content": "x"}]})),
        ("top_logprobs_too_big", json!({"model": "m", "messages": user, "top_logprobs": 300})),
        ("max_tokens_fractional", json!({"model": "m", "messages": user, "max_tokens": 10.5})),
        ("stop_not_strings", json!({"model": "m", "messages": user, "stop": [1]})),
        (
            "evidence_item_without_id",
            json!({"model": "m", "messages": user, "rein": {"evidence": [
                {"id": "118"}, {"id": "140"}, {"source": "search", "text": "no id"}
            ]}}),
        ),
        ("rein_not_an_object", json!({"model": "m", "messages": user, "rein": ["x"]})),
    ];
    let cases = cases
        .into_iter()
        .chain(more.into_iter().map(|(name, body)| (name, body.to_string().into_bytes())));
    let mut bodies = Map::new();
    for (name, body) in cases {
        let error = parse_bytes(&body).expect_err(name);
        bodies.insert(name.into(), wire_error_body(&error));
    }
    assert_eq!(
        bodies["unknown_role"]["error"]["message"],
        "`messages[0].role`: unknown variant `robot`, expected one of `system`, `developer`, \
         `user`, `assistant`, `tool`"
    );
    assert_eq!(bodies["image_part"]["error"]["param"], "messages[2].content[0].type");
    assert_eq!(bodies["missing_model"]["error"]["param"], "model");
    assert_eq!(bodies["evidence_item_without_id"]["error"]["param"], "rein.evidence[2].id");
    snapshot_json("bad_requests", &Value::Object(bodies));
}

fn completion(response: ChatResponse, outcome: Outcome, tier: Option<(usize, &str)>) -> Completion {
    Completion { response, report: fixtures::report(outcome, tier) }
}

#[test]
fn renders_a_text_answer() {
    let body = render_response(
        &completion(fixtures::text_response(), Outcome::Answered, Some((0, "primary"))),
        &fixtures::meta("chatcmpl-rein-1"),
    );
    assert_eq!(body["model"], "gpt-4o-2024-08-06");
    snapshot_json("text_response", &body);
}

#[test]
fn renders_tool_calls_from_a_claude_tier() {
    let body = render_response(
        &completion(fixtures::tool_response(), Outcome::Fallback, Some((1, "claude"))),
        &fixtures::meta("chatcmpl-rein-2"),
    );
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(body["choices"][0]["message"]["tool_calls"][0]["id"], "toolu_01A");
    snapshot_json("tool_response", &body);
}

#[test]
fn renders_a_refusal_with_null_content() {
    let body = render_response(
        &completion(fixtures::refusal_response(), Outcome::Answered, Some((0, "primary"))),
        &fixtures::meta("chatcmpl-rein-3"),
    );
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    assert_eq!(message["refusal"], "I can't help with that.");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}

#[test]
fn renders_logprobs() {
    let body = render_response(
        &completion(fixtures::logprob_response(), Outcome::Answered, Some((0, "primary"))),
        &fixtures::meta("chatcmpl-rein-4"),
    );
    snapshot_json("logprobs_response", &body["choices"][0]["logprobs"]);
}

#[test]
fn renders_a_degraded_reply() {
    let response = ChatResponse {
        id: "degraded-support".into(),
        model: "rein-degraded".into(),
        text: "A person will reply within 2 hours.".into(),
        stop_reason: Some(StopReason::EndTurn),
        ..ChatResponse::default()
    };
    let body = render_response(
        &completion(response, Outcome::Degraded, None),
        &fixtures::meta("chatcmpl-rein-5"),
    );
    assert_eq!(
        body["rein"],
        json!({"outcome": "degraded", "route": "support", "tier": null, "settings_version": 3,
                                    "attempts": 1})
    );
    assert_eq!(body["usage"]["total_tokens"], 0);
}

#[test]
fn finish_reasons_map_back() {
    let cases = [
        (StopReason::EndTurn, "stop"),
        (StopReason::StopSequence, "stop"),
        (StopReason::MaxTokens, "length"),
        (StopReason::ToolUse, "tool_calls"),
        (StopReason::ContentFilter, "content_filter"),
        (StopReason::Refusal, "stop"),
        (StopReason::PauseTurn, "stop"),
        (StopReason::Other("function_call".into()), "function_call"),
    ];
    for (reason, expected) in cases {
        assert_eq!(finish_reason(Some(&reason)), expected, "{reason:?}");
    }
}

#[test]
fn error_bodies() {
    let kinds = [
        (ErrorKind::InvalidRequest, "`temperature`: invalid type", Some("temperature")),
        (ErrorKind::Authentication, "Incorrect API key provided.", None),
        (ErrorKind::PermissionDenied, "This key may not use route `support`.", None),
        (ErrorKind::NotFound, "The model `nope` does not exist.", Some("model")),
        (ErrorKind::RequestTooLarge, "The request body is larger than 4 MiB.", None),
        (ErrorKind::UnsupportedMediaType, "Send `content-type: application/json`.", None),
        (ErrorKind::RateLimited, "Rate limit reached for route `support`.", None),
        (ErrorKind::Internal, "The server had an error.", None),
        (ErrorKind::Unavailable, "rein is shutting down.", None),
        (ErrorKind::Timeout, "The deadline passed before any answer.", None),
    ];
    let bodies: Map<String, Value> = kinds
        .iter()
        .map(|(kind, message, param)| {
            (crate::server::status(*kind).as_u16().to_string(), error_body(*kind, message, *param))
        })
        .collect();
    assert_eq!(bodies["401"]["error"]["type"], "invalid_request_error");
    assert_eq!(bodies["401"]["error"]["code"], "invalid_api_key");
    snapshot_json("error_bodies", &Value::Object(bodies));
}

#[test]
fn call_error_bodies() {
    let report = || Box::new(fixtures::report(Outcome::Stopped, None));
    let errors = [
        CallError::UnknownRoute("nope".into()),
        CallError::ContentPolicy { reason: "flagged as violent".into(), report: report() },
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
    assert_eq!(bodies[2]["body"]["error"]["code"], "content_filter");
    snapshot_json("call_error_bodies", &Value::Array(bodies));
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
        &fixtures::meta("chatcmpl-rein-6"),
    );
    assert_eq!(body["rein"]["outcome"], "declined");
    assert_eq!(body["choices"][0]["message"]["content"], "A person will reply within 2 hours.");
    assert_eq!(body["choices"][0]["message"]["refusal"], Value::Null);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}

#[test]
fn models_list() {
    let body = models_body(&["support".into(), "extract".into()], 1_760_000_000);
    assert_eq!(body["data"][1]["id"], "extract");
    assert_eq!(body["object"], "list");
}

#[test]
fn the_typed_rendering_is_byte_for_byte_the_json_tree_rendering() {
    let mut empty_text = fixtures::text_response();
    empty_text.text.clear();
    let mut versioned = fixtures::report(Outcome::Answered, Some((0, "primary")));
    versioned.settings_version = Some(7);
    let cases = [
        completion(fixtures::text_response(), Outcome::Answered, Some((0, "primary"))),
        completion(fixtures::tool_response(), Outcome::Fallback, Some((1, "claude"))),
        completion(fixtures::refusal_response(), Outcome::Declined, None),
        completion(fixtures::logprob_response(), Outcome::Answered, Some((0, "primary"))),
        completion(empty_text, Outcome::Degraded, None),
        Completion { response: fixtures::text_response(), report: versioned },
    ];
    for (index, case) in cases.iter().enumerate() {
        let meta = fixtures::meta("chatcmpl-rein-typed");
        let tree = serde_json::to_vec(&render_response(case, &meta)).unwrap();
        let typed = render_response_bytes(case, &meta);
        assert_eq!(
            String::from_utf8(typed).unwrap(),
            String::from_utf8(tree).unwrap(),
            "case {index}"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// The answer written directly (every answer without logprobs) is byte for byte the tree's
    /// rendering, whatever its strings hold and whichever optional parts it has.
    #[test]
    fn a_directly_written_answer_is_byte_for_byte_the_tree_rendering(
        text in proptest::prelude::any::<String>(),
        refusal in proptest::option::of(proptest::prelude::any::<String>()),
        calls in proptest::collection::vec(
            (".{0,12}", "[a-z_\"\\\n]{0,10}", "\\PC{0,30}"),
            0..3,
        ),
        model in "\\PC{0,20}",
        stop in proptest::option::of(0usize..8),
        other in ".{0,8}",
        version in proptest::option::of(proptest::prelude::any::<i64>()),
        usage in (proptest::prelude::any::<u32>(), proptest::prelude::any::<u32>()),
        served in proptest::option::of((0usize..3, "[a-z\"]{1,8}")),
        route in ".{0,10}",
        run_stopped in proptest::option::of("[a-z_]{1,20}"),
        created in proptest::prelude::any::<u64>(),
    ) {
        let stop_reason = stop.map(|index| fixtures::stop_reason(index, &other));
        let response = ChatResponse {
            model,
            text,
            refusal,
            tool_calls: calls
                .into_iter()
                .map(|(id, name, arguments)| rein_core::ToolCall { id, name, arguments })
                .collect(),
            stop_reason,
            usage: rein_core::Usage { input_tokens: usage.0, output_tokens: usage.1 },
            ..ChatResponse::default()
        };
        let report = fixtures::summary_report(served.as_ref(), route, version, run_stopped);
        let case = Completion { response, report };
        let meta = ResponseMeta::new("chatcmpl-\"prop\"", created);
        let tree = serde_json::to_vec(&render_response(&case, &meta)).unwrap();
        proptest::prop_assert_eq!(
            String::from_utf8(render_response_bytes(&case, &meta)).unwrap(),
            String::from_utf8(tree).unwrap()
        );
    }
}

/// Found by the `openai_request` fuzz target: a string that is not UTF-8, in a field the parser
/// does not know, passed the one-pass path (serde skips such strings unread) and was refused by
/// the tree path. JSON is UTF-8: both refuse it, saying where.
#[test]
fn fuzz_openai_request_text_not_utf8_in_an_unknown_field_is_refused() {
    let body: &[u8] = b"{\"model\":\"held\",\"stream\":true,\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"conbbbbtent\":\"where is my o\xf6der?\"}]}";
    let refused = parse_bytes(body).unwrap_err();
    assert!(matches!(refused, WireError::MalformedJson { .. }), "{refused:?}");
    assert!(refused.to_string().contains("column 103"), "{refused}");
}

/// Found by the `openai_request` fuzz target (`crash-80854e6e…`): a number no `f64` holds
/// (`…e999…`), among keys `response_format` does not know, was skipped unread by the one-pass
/// path, which then refused the body for another reason (no `json_schema`), while the tree path
/// refused it as malformed JSON. A body whose only fault is that number was accepted by one path
/// and refused by the other. Both now refuse it as malformed, saying where.
#[test]
fn fuzz_openai_request_a_number_out_of_range_in_a_skipped_field_is_refused_as_by_the_tree() {
    let found: &[u8] = include_bytes!(
        "../../../../fuzz/corpus/openai_request/crash-80854e6ed8f0a6f58c8db2598da5344e4375b10a"
    );
    assert_eq!(parse_bytes(found), parse_request_tree(found));
    assert!(matches!(parse_bytes(found), Err(WireError::MalformedJson { .. })));

    let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object","later":1.5e999}}"#;
    let refused = parse_bytes(body).unwrap_err();
    assert!(refused.to_string().contains("number out of range"), "{refused}");
    assert_eq!(parse_bytes(body), parse_request_tree(body));
    // In range, or inside a string, it is no fault.
    for fine in [
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object","later":1.5e300}}"#.as_slice(),
        br#"{"model":"m","messages":[{"role":"user","content":"1e999 \"2e999\""}],"response_format":{"type":"json_object","later":-1e-999}}"#,
    ] {
        assert!(parse_bytes(fine).is_ok(), "{}", String::from_utf8_lossy(fine));
        assert_eq!(parse_bytes(fine), parse_request_tree(fine));
    }
}

/// Found by the `openai_request` fuzz target in CI (`crash-35dfa93a…`) the day the number scan
/// came in: a body cut off just after a backslash inside a string made the scan step past the
/// text's end and panic. A body ending in an escape is malformed JSON, refused by both paths.
#[test]
fn fuzz_openai_request_a_body_cut_after_a_backslash_in_a_string_is_refused() {
    let found: &[u8] = include_bytes!(
        "../../../../fuzz/corpus/openai_request/crash-35dfa93a29893027b4f8cb9fcd1c5eff9e479cd4"
    );
    assert!(matches!(parse_bytes(found), Err(WireError::MalformedJson { .. })));
    let cut = br#"{"model":"m","messages":[{"role":"user","content":"hi\"#;
    assert!(matches!(parse_bytes(cut), Err(WireError::MalformedJson { .. })));
}

/// Found by the long run of the `openai_request` fuzz target (`crash-f5617f61…`, after 93.7 M
/// executions): a lone surrogate escape (`\udE11`) in a string of a field the parser does not
/// know passed the one pass (serde skips such a string without decoding it) and was refused by
/// the tree path (`serde_json::Value` refuses a lone surrogate). A body with a surrogate escape
/// now takes the tree path; a pair (what `ensure_ascii` encoders write for an emoji) parses.
#[test]
fn fuzz_openai_request_a_lone_surrogate_in_an_unknown_field_is_refused_as_by_the_tree() {
    let found: &[u8] = include_bytes!(
        "../../../../fuzz/corpus/openai_request/crash-f5617f61d7fc8f6c65630cf93db84d3303d0541f"
    );
    assert_eq!(parse_bytes(found), parse_request_tree(found));
    assert!(matches!(parse_bytes(found), Err(WireError::MalformedJson { .. })));
    let pair = br#"{"model":"m","messages":[{"role":"user","content":"hi \ud83d\ude00","note":"\uD83D\uDE00"}]}"#;
    assert!(parse_bytes(pair).is_ok());
    assert_eq!(parse_bytes(pair), parse_request_tree(pair));
}
