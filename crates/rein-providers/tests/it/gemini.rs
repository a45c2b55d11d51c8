//! The Gemini adapter: the exact request on the wire (path with the model and method, the key
//! only in `x-goog-api-key`, the body), recorded answers and streams decoded, a stream that
//! ends without `finishReason` left incomplete, and Google's error bodies read and classified.

use std::time::Duration;

use rein_core::classify::{FailureKind, classify};
use rein_core::{
    ChatRequest, Failure, Message, Provider, ResponseFormat, StopReason, StreamEvent, ToolCall,
    ToolChoice, ToolSpec, Usage, WireFormat,
};
use rein_providers::{
    GeminiConfig, GeminiProvider, Secret, parse_http_error, replay, replay_gemini_response,
    replay_gemini_stream,
};
use reqwest::header::HeaderMap;
use serde_json::{Map, json};

use crate::server::{Reply, response, serve, sse_response};
use crate::{TEST_KEY, assemble, client, collect, fixture, ok_events};

fn gemini(base_url: &str, streaming: bool) -> GeminiProvider {
    // The raw server's base URL ends in `/v1`; Gemini's is the bare host.
    let mut config = GeminiConfig::new("gemini-test", base_url.trim_end_matches("/v1"));
    config.api_key = Some(Secret::new(TEST_KEY));
    config.streaming = streaming;
    GeminiProvider::new(config, client()).expect("gemini provider")
}

fn conversation() -> ChatRequest {
    let mut extra = Map::new();
    extra.insert(
        "safetySettings".into(),
        json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]),
    );
    ChatRequest {
        model: "gemini-2.5-flash".into(),
        system: Some("You are terse.".into()),
        messages: vec![
            Message::user("Weather in Paris, and the time?"),
            Message {
                tool_calls: vec![
                    ToolCall {
                        id: "call_1".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                    ToolCall {
                        id: "call_2".into(),
                        name: "get_time".into(),
                        arguments: String::new(),
                    },
                ],
                ..Message::assistant("")
            },
            Message::tool_result("call_1", r#"{"celsius": 18}"#),
            Message::tool_result("call_2", "14:05"),
            Message::user("Thanks. Summarise."),
        ],
        max_tokens: Some(256),
        temperature: Some(0.2),
        top_p: Some(0.9),
        stop: vec!["END".into()],
        tools: vec![
            ToolSpec {
                name: "get_weather".into(),
                description: Some("Current weather for a city".into()),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            },
            ToolSpec {
                name: "get_time".into(),
                description: None,
                parameters: json!({"type": "object"}),
            },
        ],
        tool_choice: Some(ToolChoice::Tool { name: "get_weather".into() }),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "summary".into(),
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            strict: true,
        }),
        logprobs: Some(3),
        extra,
        extra_format: Some(WireFormat::Gemini),
    }
}

#[tokio::test]
async fn gemini_stream_request_is_exact_and_the_key_stays_out_of_the_url() {
    let server = serve(Reply::Pieces(sse_response(&fixture("gemini/streams/text.sse"), 4))).await;
    let events = collect(gemini(&server.base_url, true).send(&conversation()).await.unwrap()).await;
    assert_eq!(assemble(&events).text, "The capital of Wyoming is **Cheyenne**.\n");

    let captured = server.captured().await;
    assert_eq!(
        captured.request_line,
        "POST /v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse HTTP/1.1"
    );
    assert!(!captured.request_line.contains(TEST_KEY));
    assert_eq!(captured.header("x-goog-api-key"), Some(TEST_KEY));
    assert_eq!(captured.header("authorization"), None);
    assert_eq!(captured.header("content-type"), Some("application/json"));
    assert_eq!(
        captured.json(),
        json!({
            "contents": [
                {"role": "user", "parts": [{"text": "Weather in Paris, and the time?"}]},
                {"role": "model", "parts": [
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                     "thoughtSignature": "skip_thought_signature_validator"},
                    {"functionCall": {"name": "get_time", "args": {}}},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"celsius": 18}}},
                    {"functionResponse": {"name": "get_time", "response": {"output": "14:05"}}},
                    {"text": "Thanks. Summarise."},
                ]},
            ],
            "systemInstruction": {"parts": [{"text": "You are terse."}]},
            "tools": [{"functionDeclarations": [
                {"name": "get_weather", "description": "Current weather for a city",
                 "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "get_time", "parametersJsonSchema": {"type": "object"}},
            ]}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
            "generationConfig": {
                "maxOutputTokens": 256,
                "temperature": 0.2,
                "topP": 0.9,
                "stopSequences": ["END"],
                "responseMimeType": "application/json",
                "responseJsonSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            },
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        })
    );
}

#[tokio::test]
async fn gemini_non_streaming_posts_generate_content_and_leaves_other_formats_extra_out() {
    let body = fixture("gemini/responses/text.json");
    let server =
        serve(Reply::Pieces(vec![response(200, &[("content-type", "application/json")], &body)]))
            .await;
    let mut request = ChatRequest {
        model: "models/gemini-2.5-flash".into(),
        messages: vec![
            Message::user("Explain AI"),
            Message::assistant("Sure."),
            Message::user("Briefly."),
        ],
        response_format: Some(ResponseFormat::JsonObject),
        tool_choice: Some(ToolChoice::Required),
        extra_format: Some(WireFormat::OpenAi),
        ..ChatRequest::default()
    };
    request.extra.insert("seed".into(), json!(7));
    let events = collect(gemini(&server.base_url, false).send(&request).await.unwrap()).await;
    let answer = assemble(&events);
    assert_eq!(
        answer.text,
        "Google's headquarters, also known as the Googleplex, is located in **Mountain View, California**.\n"
    );
    assert_eq!(answer.stop_reason, Some(StopReason::EndTurn));

    let captured = server.captured().await;
    assert_eq!(
        captured.request_line,
        "POST /v1beta/models/gemini-2.5-flash:generateContent HTTP/1.1"
    );
    assert_eq!(
        captured.json(),
        json!({
            "contents": [
                {"role": "user", "parts": [{"text": "Explain AI"}]},
                {"role": "model", "parts": [{"text": "Sure."}]},
                {"role": "user", "parts": [{"text": "Briefly."}]},
            ],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
            "generationConfig": {"responseMimeType": "application/json"},
        })
    );
}

#[test]
fn gemini_base_url_with_the_version_is_not_doubled() {
    let mut config = GeminiConfig::new("g", "https://generativelanguage.googleapis.com/v1beta/");
    config.streaming = false;
    let provider = GeminiProvider::new(config, client()).unwrap();
    assert_eq!(
        provider.endpoint("gemini-2.0-flash").as_str(),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent"
    );
}

#[test]
fn gemini_tool_arguments_that_are_not_json_are_unsendable() {
    let provider = gemini("http://127.0.0.1:9", true);
    let mut request = conversation();
    request.messages[1].tool_calls[0].arguments = "{city".into();
    assert!(matches!(provider.request_body(&request), Err(Failure::Unsendable { .. })));
}

/// A recorded request body (see the fixtures README), as JSON.
fn recorded_request(file: &str) -> serde_json::Value {
    serde_json::from_slice(&fixture(&format!("gemini/requests/{file}"))).expect("recorded request")
}

fn user_turn(model: &str, text: &str) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        messages: vec![Message::user(text)],
        ..ChatRequest::default()
    }
}

/// rein's body for the requests Google's JS SDK recorded against the live API, compared as JSON
/// values. Where the SDK adds something rein leaves out (an empty `generationConfig`, a `user`
/// role on the system instruction, both optional in the API reference), the difference is
/// removed from the recording by name, so anything else that differs fails.
#[test]
fn gemini_request_bodies_match_the_sdks_recorded_requests() {
    let provider = gemini("http://127.0.0.1:9", false);

    let recorded = recorded_request("response_json_schema.json");
    let schema = recorded["generationConfig"]["responseJsonSchema"].clone();
    let request = ChatRequest {
        response_format: Some(ResponseFormat::JsonSchema {
            name: "object".into(),
            schema,
            strict: true,
        }),
        ..user_turn("gemini-2.5-flash", "populate the following object")
    };
    assert_eq!(provider.request_body(&request).unwrap(), recorded);

    let mut recorded = recorded_request("function_declaration.json");
    let declaration = &recorded["tools"][0]["functionDeclarations"][0];
    let request = ChatRequest {
        tools: vec![ToolSpec {
            name: "concatStringFunction".into(),
            description: Some("this is a concat string function".into()),
            parameters: declaration["parametersJsonSchema"].clone(),
        }],
        tool_choice: Some(ToolChoice::Tool { name: "concatStringFunction".into() }),
        ..user_turn("gemini-2.5-flash", "put word: hello and word: world into a string")
    };
    assert_eq!(recorded.as_object_mut().unwrap().remove("generationConfig"), Some(json!({})));
    assert_eq!(provider.request_body(&request).unwrap(), recorded);

    // Sampling options rein has no field for ride in `extra`, merged into `generationConfig`.
    let recorded = recorded_request("specified_parameters.json");
    let mut request = ChatRequest {
        max_tokens: Some(200),
        ..user_turn("gemini-2.5-flash", "why is the sky blue?")
    };
    request.extra.insert(
        "generationConfig".into(),
        json!({"candidateCount": 1, "thinkingConfig": {"thinkingBudget": 50}}),
    );
    assert_eq!(provider.request_body(&request).unwrap(), recorded);

    let mut recorded = recorded_request("system_instruction.json");
    let request = ChatRequest {
        system: Some("I say high you say low".into()),
        ..user_turn("gemini-2.5-flash", "high")
    };
    assert_eq!(recorded.as_object_mut().unwrap().remove("generationConfig"), Some(json!({})));
    assert_eq!(
        recorded["systemInstruction"].as_object_mut().unwrap().remove("role"),
        Some(json!("user"))
    );
    assert_eq!(provider.request_body(&request).unwrap(), recorded);
}

/// One recorded function-calling turn, both ways: the call the API answered with (no call id,
/// as Gemini 2.0 sends it) is decoded, sent back with its result, and the body rein builds for
/// that second request is the one the SDK sent.
#[test]
fn gemini_function_call_round_trip_matches_the_recorded_second_request() {
    let answer =
        assemble(&replay_gemini_response(&fixture("gemini/responses/function_call_divide.json")));
    assert_eq!(answer.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(answer.tool_calls.len(), 1);
    let call = answer.tool_calls[0].clone();
    assert_eq!(call.id, "call_e9SfaP31Evq0nvgPjqSm8AU_0");

    let request = ChatRequest {
        messages: vec![
            Message::user("Divide 10 by 2 using the customDivide function"),
            Message { tool_calls: vec![call.clone()], ..Message::assistant("") },
            // The SDK's result object, sent as it is.
            Message::tool_result(&call.id, r#"{"output": 42}"#),
        ],
        tools: vec![ToolSpec {
            name: "customDivide".into(),
            description: Some("Custom divide function".into()),
            parameters: json!({
                "type": "object",
                "properties": {"numerator": {"type": "number"}, "denominator": {"type": "number"}},
            }),
        }],
        tool_choice: Some(ToolChoice::Auto),
        ..user_turn("gemini-2.0-flash", "")
    };
    let mut recorded = recorded_request("function_response.json");
    assert_eq!(recorded.as_object_mut().unwrap().remove("generationConfig"), Some(json!({})));
    // The one addition: Google's stand-in signature on the replayed call (gemini-2.0 sent none).
    let replayed = &mut recorded["contents"][1]["parts"][0];
    assert!(replayed.get("functionCall").is_some());
    replayed["thoughtSignature"] = json!("skip_thought_signature_validator");
    let body = gemini("http://127.0.0.1:9", false).request_body(&request).unwrap();
    assert_eq!(body, recorded);
}

/// Gemini 3 rejects a replayed function call without its thought signature (400
/// INVALID_ARGUMENT). The recorded thinking answer signs its call; rein's tool call cannot carry
/// that signature back, so the follow-up marks the call with the value Google documents for
/// unsigned calls, on the first call of each model turn only.
#[test]
fn gemini_replayed_calls_carry_the_documented_stand_in_signature() {
    let body = fixture("gemini/responses/function_call.json");
    let recorded: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(recorded["candidates"][0]["content"]["parts"][1]["thoughtSignature"].is_string());
    let call = assemble(&replay_gemini_response(&body)).tool_calls.remove(0);

    let second = ToolCall { id: "call_b".into(), name: "now".into(), arguments: "{}".into() };
    let request = ChatRequest {
        messages: vec![
            Message::user("How many days until New Year's Eve?"),
            Message { tool_calls: vec![call.clone(), second], ..Message::assistant("") },
            Message::tool_result(&call.id, "2026-12-02T09:52:00Z"),
            Message::tool_result("call_b", "2026-12-02T09:52:00Z"),
        ],
        ..user_turn("gemini-3-pro-preview", "")
    };
    let body = gemini("http://127.0.0.1:9", false).request_body(&request).unwrap();
    assert_eq!(
        body["contents"][1],
        json!({"role": "model", "parts": [
            {"functionCall": {"name": "now", "args": {}},
             "thoughtSignature": "skip_thought_signature_validator"},
            {"functionCall": {"name": "now", "args": {}}},
        ]})
    );
    assert!(
        body["contents"][2]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|part| part.get("thoughtSignature").is_none())
    );
}

#[test]
fn gemini_answers_decode() {
    let text = assemble(&replay_gemini_response(&fixture("gemini/responses/text.json")));
    assert_eq!(
        text.text,
        "Google's headquarters, also known as the Googleplex, is located in **Mountain View, California**.\n"
    );
    assert_eq!(text.id, "", "this answer carries no responseId");
    assert_eq!(text.model, "gemini-2.0-flash");
    assert_eq!(text.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(text.usage, Usage { input_tokens: 7, output_tokens: 22 });

    let thinking = assemble(&replay_gemini_response(&fixture("gemini/responses/thinking.json")));
    assert_eq!(thinking.id, "2pmHaJqQEoqC-8YP6eStyAY");
    assert_eq!(thinking.text, "Mountain View");
    assert!(thinking.thinking.starts_with("**Thinking About Google's Headquarters**"));
    // Thinking tokens are billed as output.
    assert_eq!(thinking.usage, Usage { input_tokens: 14, output_tokens: 26 });

    let call =
        assemble(&replay(WireFormat::Gemini, &fixture("gemini/responses/function_call.json")));
    assert_eq!(call.model, "gemini-2.5-pro");
    assert_eq!(call.stop_reason, Some(StopReason::ToolUse));
    assert!(call.text.is_empty());
    assert!(call.thinking.starts_with("**Thinking Through the New Year's Eve Calculation**"));
    assert_eq!(
        call.tool_calls,
        vec![ToolCall {
            id: "call_38CHaLjMG6TujrEPtvTiuQk_0".into(),
            name: "now".into(),
            arguments: "{}".into(),
        }]
    );
    assert_eq!(call.usage, Usage { input_tokens: 38, output_tokens: 509 });

    let cut = assemble(&replay_gemini_response(&fixture("gemini/responses/max_tokens.json")));
    assert_eq!(cut.stop_reason, Some(StopReason::MaxTokens));
    assert!(!cut.stop_reason.unwrap().is_complete());
    assert!(cut.text.ends_with("3.  **Wavelengths and Scattering:**\n"));
    assert_eq!(cut.usage, Usage { input_tokens: 7, output_tokens: 197 });

    let structured =
        assemble(&replay_gemini_response(&fixture("gemini/responses/json_schema.json")));
    let object: serde_json::Value = serde_json::from_str(&structured.text).expect("JSON text");
    assert_eq!(object["inner"]["innerNumber"], json!(100));
    assert_eq!(structured.stop_reason, Some(StopReason::EndTurn));

    // No content, only `finishReason: OTHER`: kept verbatim, never made up into a stop rein knows.
    let other =
        assemble(&replay_gemini_response(&fixture("gemini/responses/other_no_content.json")));
    assert_eq!(other.stop_reason, Some(StopReason::Other("OTHER".into())));
    assert!(other.text.is_empty());
}

/// Every recorded answer's usage, read by rein, adds up to the `totalTokenCount` Google sent:
/// nothing billed is dropped (URL context's tool prompt is input, thinking is output).
#[test]
fn gemini_recorded_usage_adds_up_to_the_total_token_count() {
    let total = |body: &[u8]| -> u32 {
        let json: serde_json::Value = serde_json::from_slice(body).unwrap();
        json["usageMetadata"]["totalTokenCount"].as_u64().unwrap() as u32
    };
    for file in [
        "text.json",
        "thinking.json",
        "function_call.json",
        "function_call_divide.json",
        "max_tokens.json",
        "json_schema.json",
        "safety.json",
        "url_context.json",
    ] {
        let body = fixture(&format!("gemini/responses/{file}"));
        let usage = assemble(&replay_gemini_response(&body)).usage;
        assert_eq!(usage.input_tokens + usage.output_tokens, total(&body), "{file}");
    }
    for file in
        ["text.sse", "thinking.sse", "function_call.sse", "max_tokens.sse", "url_context.sse"]
    {
        let body = fixture(&format!("gemini/streams/{file}"));
        let text = String::from_utf8(body.clone()).unwrap();
        let last = text.lines().filter_map(|l| l.strip_prefix("data: ")).next_back().unwrap();
        let usage = assemble(&replay_gemini_stream(&body)).usage;
        assert_eq!(usage.input_tokens + usage.output_tokens, total(last.as_bytes()), "{file}");
    }
    let url = assemble(&replay_gemini_response(&fixture("gemini/responses/url_context.json")));
    assert_eq!(url.usage.input_tokens, 15 + 424, "the tool's prompt is input");
}

#[test]
fn gemini_content_filter_stops_keep_what_came_before() {
    let safety = assemble(&replay_gemini_response(&fixture("gemini/responses/safety.json")));
    assert_eq!(safety.stop_reason, Some(StopReason::ContentFilter));
    assert_eq!(safety.text, "Safety error incoming in 5, 4, 3, 2...");

    let safety = assemble(&replay_gemini_stream(&fixture("gemini/streams/safety.sse")));
    assert_eq!(safety.stop_reason, Some(StopReason::ContentFilter));
    assert_eq!(safety.text, "No");

    // Recitation: eight chunks of text, then a last chunk with only the finish reason.
    let events = ok_events(replay_gemini_stream(&fixture("gemini/streams/recitation.sse")));
    assert_eq!(events.iter().filter(|e| matches!(e, StreamEvent::TextDelta { .. })).count(), 8);
    assert_eq!(
        events[events.len() - 3..],
        [
            StreamEvent::Usage { usage: Usage { input_tokens: 9, output_tokens: 261 } },
            StreamEvent::Stop { reason: StopReason::ContentFilter },
            StreamEvent::Done,
        ]
    );
    let recited = assemble(&replay_gemini_stream(&fixture("gemini/streams/recitation.sse")));
    assert_eq!(recited.text, "text1text2text3text4text5text6text7text8");
}

#[test]
fn gemini_blocked_prompt_is_a_content_policy_rejection() {
    for failure in [
        replay_gemini_response(&fixture("gemini/responses/prompt_blocked.json")),
        replay_gemini_stream(&fixture("gemini/streams/prompt_blocked.sse")),
    ]
    .map(|events| events.into_iter().find_map(Result::err).expect("a failure"))
    {
        assert!(failure.to_string().contains("(SAFETY)"), "{failure}");
        assert_eq!(classify(&failure).kind, FailureKind::ContentPolicy);
    }
}

#[test]
fn gemini_streams_decode_and_end_at_the_finish_reason() {
    let events = ok_events(replay_gemini_stream(&fixture("gemini/streams/text.sse")));
    assert_eq!(
        events,
        vec![
            StreamEvent::Start { id: String::new(), model: "gemini-2.0-flash".into() },
            StreamEvent::TextDelta { text: "The".into() },
            StreamEvent::TextDelta { text: " capital of Wyoming".into() },
            StreamEvent::TextDelta { text: " is **Cheyenne**.\n".into() },
            StreamEvent::Usage { usage: Usage { input_tokens: 7, output_tokens: 10 } },
            StreamEvent::Stop { reason: StopReason::EndTurn },
            StreamEvent::Done,
        ]
    );

    let thinking = assemble(&replay_gemini_stream(&fixture("gemini/streams/thinking.sse")));
    assert_eq!(thinking.id, "0J-HaJetAqv0jrEPwu-tsQ0");
    assert_eq!(thinking.thinking.matches("**").count(), 6, "three thought summaries");
    assert!(thinking.text.starts_with("The sky is blue because tiny gas molecules"));
    assert!(thinking.text.ends_with("making the sky appear blue to our eyes."));
    assert_eq!(thinking.usage, Usage { input_tokens: 10, output_tokens: 588 });

    let call = assemble(&replay_gemini_stream(&fixture("gemini/streams/function_call.sse")));
    assert!(call.thinking.starts_with("**Calculating the Days**"));
    assert_eq!(call.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(call.tool_calls.len(), 1);
    assert_eq!(call.tool_calls[0].name, "now");
    assert_eq!(call.tool_calls[0].arguments, "{}");
    assert_eq!(call.tool_calls[0].id, "call_48SHaPHpHKbG-8YPtZCawAk_0");

    let cut = assemble(&replay_gemini_stream(&fixture("gemini/streams/max_tokens.sse")));
    assert_eq!(cut.stop_reason, Some(StopReason::MaxTokens));
    assert_eq!(cut.usage, Usage { input_tokens: 7, output_tokens: 198 });

    // A chunk whose content has no parts, and an image part, add nothing and break nothing.
    let image = assemble(&replay_gemini_stream(&fixture("gemini/streams/empty_parts.sse")));
    assert_eq!(image.text, "Here's a cute cartoon kitten playing with a ball of yarn for you! ");
    assert_eq!(image.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(image.usage, Usage { input_tokens: 16, output_tokens: 1307 });
}

#[test]
fn gemini_stream_without_a_finish_reason_is_never_complete() {
    let events = ok_events(replay_gemini_stream(&fixture("gemini/streams/cut.sse")));
    assert!(events.contains(&StreamEvent::TextDelta { text: "The".into() }));
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::Stop { .. } | StreamEvent::Done)));
}

#[test]
fn gemini_error_events_and_malformed_chunks_fail_the_stream() {
    let error = b"data: {\"error\": {\"code\": 503, \"message\": \"The model is overloaded.\", \"status\": \"UNAVAILABLE\"}}\n\n";
    let failure = replay_gemini_stream(error).into_iter().find_map(Result::err).unwrap();
    assert_eq!(classify(&failure).kind, FailureKind::Overloaded);

    let malformed =
        b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"w\n\ndata: {}\n\n";
    let failure = replay_gemini_stream(malformed).into_iter().find_map(Result::err).unwrap();
    assert_eq!(classify(&failure).kind, FailureKind::MalformedResponse);

    let bad_call = b"data: {\"candidates\": [{\"content\": {\"parts\": []}, \"finishReason\": \"MALFORMED_FUNCTION_CALL\"}]}\n\n";
    let failure = replay_gemini_stream(bad_call).into_iter().find_map(Result::err).unwrap();
    assert_eq!(classify(&failure).kind, FailureKind::MalformedResponse);
}

/// A recorded error: file, status, `status` read, code read, kind, RetryInfo's wait in seconds.
type ErrorCase = (&'static str, u16, &'static str, Option<&'static str>, FailureKind, Option<u64>);

/// Google's error bodies: what is read from each and what it is classified as.
#[test]
fn gemini_error_bodies_are_read_and_classified_by_status() {
    let cases: &[ErrorCase] = &[
        (
            "429_resource_exhausted.json",
            429,
            "RESOURCE_EXHAUSTED",
            Some("GenerateRequestsPerMinutePerProjectPerModel-FreeTier"),
            FailureKind::RateLimited,
            Some(58),
        ),
        (
            "429_per_day.json",
            429,
            "RESOURCE_EXHAUSTED",
            Some("GenerateRequestsPerDayPerProjectPerModel"),
            FailureKind::QuotaExhausted,
            None,
        ),
        (
            "400_api_key_invalid.json",
            400,
            "INVALID_ARGUMENT",
            Some("API_KEY_INVALID"),
            FailureKind::Unauthorized,
            None,
        ),
        // The streaming endpoint's form: the same object in a one-element array.
        (
            "400_api_key_invalid_stream.json",
            400,
            "INVALID_ARGUMENT",
            Some("API_KEY_INVALID"),
            FailureKind::Unauthorized,
            None,
        ),
        (
            "400_context_length.json",
            400,
            "INVALID_ARGUMENT",
            None,
            FailureKind::ContextLength,
            None,
        ),
        (
            "400_invalid_argument.json",
            400,
            "INVALID_ARGUMENT",
            None,
            FailureKind::InvalidRequest,
            None,
        ),
        (
            "400_failed_precondition.json",
            400,
            "FAILED_PRECONDITION",
            None,
            FailureKind::QuotaExhausted,
            None,
        ),
        (
            "403_permission_denied.json",
            403,
            "PERMISSION_DENIED",
            Some("SERVICE_DISABLED"),
            FailureKind::Forbidden,
            None,
        ),
        (
            "403_api_key_service_blocked.json",
            403,
            "PERMISSION_DENIED",
            Some("API_KEY_SERVICE_BLOCKED"),
            FailureKind::Forbidden,
            None,
        ),
        ("404_not_found.json", 404, "NOT_FOUND", None, FailureKind::NotFound, None),
        ("404_not_found_stream.json", 404, "NOT_FOUND", None, FailureKind::NotFound, None),
        ("500_internal.json", 500, "INTERNAL", None, FailureKind::ServerError, None),
        ("503_unavailable.json", 503, "UNAVAILABLE", None, FailureKind::Overloaded, None),
        (
            "504_deadline_exceeded.json",
            504,
            "DEADLINE_EXCEEDED",
            None,
            FailureKind::RequestTimeout,
            None,
        ),
    ];
    for (file, status, rpc, code, kind, wait) in cases {
        let body = fixture(&format!("gemini/errors/{file}"));
        let http = parse_http_error(WireFormat::Gemini, *status, &HeaderMap::new(), &body);
        assert_eq!(http.error_type.as_deref(), Some(*rpc), "{file}");
        assert_eq!(http.code.as_deref(), *code, "{file}");
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let error = if json.is_array() { &json[0]["error"] } else { &json["error"] };
        assert_eq!(Some(http.message.as_str()), error["message"].as_str(), "{file}");
        assert_eq!(http.retry_after, wait.map(Duration::from_secs), "{file}");
        let failure = Failure::Http { format: WireFormat::Gemini, http };
        assert_eq!(classify(&failure).kind, *kind, "{file}");
    }
}

/// A streaming call to a model that does not exist: Google answers 404 with
/// `content-type: text/event-stream` and a plain JSON body (recorded by the JS SDK).
#[tokio::test]
async fn gemini_stream_404_with_an_event_stream_content_type_is_read_as_an_error() {
    let body = fixture("gemini/errors/404_not_found_stream.json");
    let server =
        serve(Reply::Pieces(vec![response(404, &[("content-type", "text/event-stream")], &body)]))
            .await;
    let request = user_turn("custom-gemini-2.0-flash", "why is the sky blue?");
    let failure = gemini(&server.base_url, true).send(&request).await.err().expect("a failure");
    assert_eq!(classify(&failure).kind, FailureKind::NotFound);
    assert!(
        failure.to_string().contains("models/custom-gemini-2.0-flash is not found"),
        "{failure}"
    );
}

#[tokio::test]
async fn gemini_429_over_http_carries_retry_info_as_the_wait() {
    let body = fixture("gemini/errors/429_resource_exhausted.json");
    let server =
        serve(Reply::Pieces(vec![response(429, &[("content-type", "application/json")], &body)]))
            .await;
    let request = ChatRequest {
        model: "gemini-3-flash".into(),
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    };
    let failure = gemini(&server.base_url, true).send(&request).await.err().expect("a failure");
    let classified = classify(&failure);
    assert_eq!(classified.kind, FailureKind::RateLimited);
    assert_eq!(classified.retry_after, Some(Duration::from_secs(58)));
    assert!(!failure.to_string().contains(TEST_KEY));
}
