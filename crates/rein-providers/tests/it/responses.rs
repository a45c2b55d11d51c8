//! OpenAI's Responses API as an upstream (`api = responses`): the exact request on the wire
//! (`POST {base_url}/responses`, the body checked against OpenAI's documented examples),
//! recorded answers and streams decoded (text, a tool call whose argument deltas are
//! reassembled once, usage, `incomplete`, `refusal`), a cut stream left without `Done`,
//! `response.failed` and the `error` event classified by their codes, Azure's v1 endpoint, and
//! stop sequences refused before anything is sent.

use rein_core::classify::{FailureKind, classify};
use rein_core::{
    ChatRequest, Failure, Message, Provider, ResponseFormat, StopReason, StreamEvent, ToolCall,
    ToolChoice, ToolSpec, Usage, WireFormat,
};
use rein_providers::{
    AzureConfig, OpenAiApi, OpenAiProvider, replay_responses_response, replay_responses_stream,
};
use serde_json::{Map, json};

use crate::server::{Reply, response, serve, sse_response};
use crate::{TEST_KEY, assemble, client, collect, fixture, ok_events, openai_config};

fn responses(base_url: &str, streaming: bool) -> OpenAiProvider {
    let mut config = openai_config(base_url);
    config.api = OpenAiApi::Responses;
    config.streaming = streaming;
    OpenAiProvider::new(config, client()).expect("responses provider")
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("Get current temperature for a given location.".into()),
        parameters: json!({
            "type": "object",
            "properties": {"location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}},
            "required": ["location"],
            "additionalProperties": false
        }),
    }
}

fn conversation() -> ChatRequest {
    ChatRequest {
        model: "gpt-4.1".into(),
        system: Some("You are terse.".into()),
        messages: vec![
            Message::user("What is the weather like in Paris today?"),
            Message {
                tool_calls: vec![ToolCall {
                    id: "call_12345xyz".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"location":"Paris, France"}"#.into(),
                }],
                ..Message::assistant("")
            },
            Message::tool_result("call_12345xyz", "14"),
            Message::assistant("It is 14°C."),
            Message::user("Thanks. Summarise as JSON."),
        ],
        max_tokens: Some(256),
        temperature: Some(0.2),
        top_p: Some(0.9),
        tools: vec![weather_tool()],
        tool_choice: Some(ToolChoice::Tool { name: "get_weather".into() }),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "summary".into(),
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            strict: true,
        }),
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn responses_stream_request_is_exact() {
    let server =
        serve(Reply::Pieces(sse_response(&fixture("openai/responses/streams/text.sse"), 5))).await;
    let events =
        collect(responses(&server.base_url, true).send(&conversation()).await.unwrap()).await;
    assert_eq!(assemble(&events).text, "Hi there! How can I assist you today?");

    let captured = server.captured().await;
    assert_eq!(captured.request_line, "POST /v1/responses HTTP/1.1");
    assert_eq!(captured.header("authorization"), Some(format!("Bearer {TEST_KEY}").as_str()));
    assert_eq!(captured.header("content-type"), Some("application/json"));
    assert_eq!(
        captured.json(),
        json!({
            "model": "gpt-4.1",
            "instructions": "You are terse.",
            "input": [
                {"role": "user", "content": "What is the weather like in Paris today?"},
                {"type": "function_call", "call_id": "call_12345xyz", "name": "get_weather",
                 "arguments": "{\"location\":\"Paris, France\"}"},
                {"type": "function_call_output", "call_id": "call_12345xyz", "output": "14"},
                {"role": "assistant", "content": "It is 14°C."},
                {"role": "user", "content": "Thanks. Summarise as JSON."},
            ],
            "tools": [{
                "type": "function",
                "name": "get_weather",
                "description": "Get current temperature for a given location.",
                "parameters": {
                    "type": "object",
                    "properties": {"location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}},
                    "required": ["location"],
                    "additionalProperties": false
                },
            }],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {"format": {
                "type": "json_schema",
                "name": "summary",
                "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
                "strict": true,
            }},
            "max_output_tokens": 256,
            "temperature": 0.2,
            "top_p": 0.9,
            "store": false,
            "stream": true,
        })
    );
}

/// The function-calling guide's request: `input` with the user's message, the flat function
/// tool (the guide adds `"strict": true`, which rein's tools do not carry), then the follow-up
/// with the call and its output appended to `input`.
#[test]
fn responses_body_matches_the_documented_function_calling_example() {
    let provider = responses("https://api.openai.com/v1", false);
    let mut request = ChatRequest {
        model: "gpt-4.1".into(),
        messages: vec![Message::user("What is the weather like in Paris today?")],
        tools: vec![weather_tool()],
        ..ChatRequest::default()
    };
    let documented_tool = json!({
        "type": "function",
        "name": "get_weather",
        "description": "Get current temperature for a given location.",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}},
            "required": ["location"],
            "additionalProperties": false
        }
    });
    assert_eq!(
        provider.request_body(&request),
        json!({
            "model": "gpt-4.1",
            "input": [{"role": "user", "content": "What is the weather like in Paris today?"}],
            "tools": [documented_tool],
            "store": false,
        })
    );
    request.messages.push(Message {
        tool_calls: vec![ToolCall {
            id: "call_12345xyz".into(),
            name: "get_weather".into(),
            arguments: "{\"location\":\"Paris, France\"}".into(),
        }],
        ..Message::assistant("")
    });
    request.messages.push(Message::tool_result("call_12345xyz", "14"));
    let body = provider.request_body(&request);
    assert_eq!(
        body["input"],
        json!([
            {"role": "user", "content": "What is the weather like in Paris today?"},
            {"type": "function_call", "call_id": "call_12345xyz", "name": "get_weather",
             "arguments": "{\"location\":\"Paris, France\"}"},
            {"type": "function_call_output", "call_id": "call_12345xyz", "output": "14"},
        ])
    );
}

/// The structured-outputs guide's `text.format` (flat: `name`, `schema`, `strict` beside
/// `type`), and `json_object` mode.
#[test]
fn responses_json_output_is_text_format() {
    let provider = responses("https://api.openai.com/v1", false);
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "date": {"type": "string"},
            "participants": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["name", "date", "participants"],
        "additionalProperties": false
    });
    let mut request = ChatRequest {
        model: "gpt-4o-2024-08-06".into(),
        system: Some("Extract the event information.".into()),
        messages: vec![Message::user("Alice and Bob are going to a science fair on Friday.")],
        response_format: Some(ResponseFormat::JsonSchema {
            name: "calendar_event".into(),
            schema: schema.clone(),
            strict: true,
        }),
        ..ChatRequest::default()
    };
    let body = provider.request_body(&request);
    assert_eq!(
        body["text"],
        json!({"format": {"type": "json_schema", "name": "calendar_event", "schema": schema, "strict": true}})
    );
    assert_eq!(body["instructions"], json!("Extract the event information."));
    request.response_format = Some(ResponseFormat::JsonObject);
    assert_eq!(provider.request_body(&request)["text"], json!({"format": {"type": "json_object"}}));
}

#[tokio::test]
async fn responses_non_streaming_decodes_the_recorded_answer() {
    let body = fixture("openai/responses/responses/text.json");
    let server =
        serve(Reply::Pieces(vec![response(200, &[("content-type", "application/json")], &body)]))
            .await;
    let request = ChatRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![Message::user("What's the weather like in SF?")],
        ..ChatRequest::default()
    };
    let events = collect(responses(&server.base_url, false).send(&request).await.unwrap()).await;
    let answer = assemble(&events);
    assert!(answer.text.starts_with("I can't provide real-time updates"), "{}", answer.text);
    assert!(answer.text.ends_with("prepared for variable weather!"));
    assert_eq!(answer.id, "resp_689a0b2545288193953c892439b42e2800b2e36c65a1fd4b");
    assert_eq!(answer.model, "gpt-4o-mini-2024-07-18");
    assert_eq!(answer.usage, Usage { input_tokens: 14, output_tokens: 50 });
    assert_eq!(answer.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(events.last(), Some(&Ok(StreamEvent::Done)));

    let captured = server.captured().await;
    assert_eq!(
        captured.json(),
        json!({
            "model": "gpt-4o-mini",
            "input": [{"role": "user", "content": "What's the weather like in SF?"}],
            "store": false,
        })
    );
}

#[test]
fn responses_function_call_answer_skips_reasoning_and_stops_for_the_tool() {
    let events =
        replay_responses_response(&fixture("openai/responses/responses/function_call.json"));
    let answer = assemble(&events);
    assert_eq!(answer.tool_calls.len(), 1);
    assert_eq!(answer.tool_calls[0].id, "call_12345xyz");
    assert_eq!(answer.tool_calls[0].name, "get_weather");
    assert_eq!(answer.tool_calls[0].arguments, r#"{"location":"Paris, France"}"#);
    assert_eq!(answer.text, "");
    assert_eq!(answer.thinking, "");
    assert_eq!(answer.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(answer.usage, Usage { input_tokens: 291, output_tokens: 23 });
}

#[test]
fn responses_incomplete_refusal_and_failed_answers() {
    let incomplete = assemble(&replay_responses_response(&fixture(
        "openai/responses/responses/incomplete.json",
    )));
    assert_eq!(incomplete.stop_reason, Some(StopReason::MaxTokens));
    assert!(incomplete.text.starts_with("In a peaceful grove"));

    let mut filtered: serde_json::Value =
        serde_json::from_slice(&fixture("openai/responses/responses/incomplete.json")).unwrap();
    filtered["incomplete_details"]["reason"] = json!("content_filter");
    let body = serde_json::to_vec(&filtered).unwrap();
    let filtered = assemble(&replay_responses_response(&body));
    assert_eq!(filtered.stop_reason, Some(StopReason::ContentFilter));

    let refusal =
        assemble(&replay_responses_response(&fixture("openai/responses/responses/refusal.json")));
    assert_eq!(refusal.refusal.as_deref(), Some("I'm sorry, I can't help with that."));
    assert_eq!(refusal.text, "");

    let failed = replay_responses_response(&fixture("openai/responses/responses/failed.json"));
    match failed.as_slice() {
        [Err(failure @ Failure::StreamError { code, message, .. })] => {
            assert_eq!(code.as_deref(), Some("server_error"));
            assert_eq!(message, "The model failed to generate a response.");
            assert_eq!(classify(failure).kind, FailureKind::ServerError);
        }
        other => panic!("expected the failure, got {other:?}"),
    }
}

#[tokio::test]
async fn responses_stream_decodes_text_usage_and_the_end() {
    let server =
        serve(Reply::Pieces(sse_response(&fixture("openai/responses/streams/text.sse"), 7))).await;
    let request = ChatRequest {
        model: "gpt-4.1".into(),
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    };
    let events =
        ok_events(collect(responses(&server.base_url, true).send(&request).await.unwrap()).await);
    assert_eq!(
        events.first(),
        Some(&StreamEvent::Start {
            id: "resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654".into(),
            model: "gpt-4.1-2025-04-14".into(),
        })
    );
    let deltas = events.iter().filter(|e| matches!(e, StreamEvent::TextDelta { .. })).count();
    assert_eq!(deltas, 10);
    let n = events.len();
    assert_eq!(
        events[n - 3..],
        [
            StreamEvent::Usage { usage: Usage { input_tokens: 37, output_tokens: 11 } },
            StreamEvent::Stop { reason: StopReason::EndTurn },
            StreamEvent::Done,
        ]
    );
}

#[test]
fn responses_stream_tool_call_arguments_are_reassembled_once() {
    let events =
        ok_events(replay_responses_stream(&fixture("openai/responses/streams/function_call.sse")));
    // The call is rein's call 0, though a reasoning item is output 0.
    assert!(events.contains(&StreamEvent::ToolCallStart {
        index: 0,
        id: "call_1234xyz".into(),
        name: "get_weather".into(),
    }));
    let arguments: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallDelta { index: 0, arguments } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    // Seven deltas; `.done` and `output_item.done` repeat the whole and add nothing.
    assert_eq!(arguments.len(), 7);
    let answer = assemble(&events.iter().cloned().map(Ok).collect::<Vec<_>>());
    assert_eq!(answer.tool_calls.len(), 1);
    assert_eq!(answer.tool_calls[0].arguments, r#"{"location":"Paris, France"}"#);
    assert_eq!(answer.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(answer.usage, Usage { input_tokens: 291, output_tokens: 23 });
}

#[test]
fn responses_stream_with_only_the_done_arguments_still_carries_them() {
    let stream = concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-4.1\",\"status\":\"in_progress\",\"output\":[]}}\n\n",
        "event: response.output_item.added\n",
        "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"get_weather\",\"arguments\":\"\"}}\n\n",
        "event: response.function_call_arguments.done\n",
        "data: {\"type\":\"response.function_call_arguments.done\",\"item_id\":\"fc_1\",\"output_index\":0,\"arguments\":\"{\\\"location\\\":\\\"Oslo\\\"}\"}\n\n",
        "event: response.output_item.done\n",
        "data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Oslo\\\"}\"}}\n\n",
        "event: response.completed\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-4.1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":6}}}\n\n",
    );
    let events = replay_responses_stream(stream.as_bytes());
    let answer = assemble(&events);
    assert_eq!(answer.tool_calls.len(), 1);
    assert_eq!(answer.tool_calls[0].id, "call_1");
    assert_eq!(answer.tool_calls[0].arguments, r#"{"location":"Oslo"}"#);
}

#[test]
fn responses_stream_skips_events_it_does_not_read_whatever_their_shape() {
    let stream = concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-4.1\",\"status\":\"in_progress\"}}\n\n",
        "event: response.some_future_event\n",
        "data: {\"type\":\"response.some_future_event\",\"delta\":{\"nested\":true},\"item\":[1,2]}\n\n",
        "event: response.reasoning_summary_text.delta\n",
        "data: {\"type\":\"response.reasoning_summary_text.delta\",\"item_id\":\"rs_1\",\"output_index\":0,\"summary_index\":0,\"delta\":\"thinking\"}\n\n",
        "event: response.output_text.delta\n",
        "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":1,\"content_index\":0,\"delta\":\"Hello\"}\n\n",
        "event: response.completed\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-4.1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
    );
    let events = ok_events(replay_responses_stream(stream.as_bytes()));
    let answer = assemble(&events.iter().cloned().map(Ok).collect::<Vec<_>>());
    assert_eq!(answer.text, "Hello");
    assert_eq!(answer.thinking, "", "reasoning is skipped");
    assert_eq!(events.last(), Some(&StreamEvent::Done));
    // A line that is not JSON at all is still malformed.
    let broken = b"event: response.output_text.delta\ndata: {\"type\":\"response.output\n\n";
    assert!(matches!(replay_responses_stream(broken).last(), Some(Err(Failure::Malformed { .. }))));
}

#[test]
fn responses_cut_stream_has_no_end() {
    let events = ok_events(replay_responses_stream(&fixture("openai/responses/streams/cut.sse")));
    assert!(!events.contains(&StreamEvent::Done));
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::Stop { .. })));
    let answer = assemble(&events.into_iter().map(Ok).collect::<Vec<_>>());
    assert_eq!(answer.text, "Hi there! How");
}

#[test]
fn responses_incomplete_stream_stops_at_max_tokens() {
    let events =
        ok_events(replay_responses_stream(&fixture("openai/responses/streams/incomplete.sse")));
    let n = events.len();
    assert_eq!(
        events[n - 3..],
        [
            StreamEvent::Usage { usage: Usage { input_tokens: 37, output_tokens: 4 } },
            StreamEvent::Stop { reason: StopReason::MaxTokens },
            StreamEvent::Done,
        ]
    );
}

#[test]
fn responses_failed_and_error_events_classify_by_their_code() {
    let events = replay_responses_stream(&fixture("openai/responses/streams/failed.sse"));
    let (last, before) = events.split_last().unwrap();
    assert_eq!(before.iter().filter(|e| matches!(e, Ok(StreamEvent::TextDelta { .. }))).count(), 3);
    match last {
        Err(failure @ Failure::StreamError { format, code, .. }) => {
            assert_eq!(*format, WireFormat::OpenAi);
            assert_eq!(code.as_deref(), Some("server_error"));
            assert_eq!(classify(failure).kind, FailureKind::ServerError);
        }
        other => panic!("expected response.failed, got {other:?}"),
    }

    let events = replay_responses_stream(&fixture("openai/responses/streams/error_event.sse"));
    match events.last() {
        Some(Err(failure @ Failure::StreamError { code, message, .. })) => {
            assert_eq!(code.as_deref(), Some("rate_limit_exceeded"));
            assert!(message.starts_with("Rate limit reached"));
            assert_eq!(classify(failure).kind, FailureKind::RateLimited);
        }
        other => panic!("expected the error event, got {other:?}"),
    }

    // The error event in its nested spelling, with an invalid prompt: a 400's equivalent.
    let nested = b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"code\":\"invalid_prompt\",\"message\":\"Invalid prompt: flagged.\"}}\n\n";
    match replay_responses_stream(nested).last() {
        Some(Err(failure)) => assert_eq!(classify(failure).kind, FailureKind::InvalidRequest),
        other => panic!("expected the error event, got {other:?}"),
    }
}

#[tokio::test]
async fn responses_http_errors_are_openai_error_bodies() {
    let body = fixture("openai/errors/429_rate_limit_exceeded.json");
    let server = serve(Reply::Pieces(vec![response(
        429,
        &[("content-type", "application/json"), ("retry-after", "2")],
        &body,
    )]))
    .await;
    let request = ChatRequest {
        model: "gpt-4.1".into(),
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    };
    let failure = match responses(&server.base_url, true).send(&request).await {
        Err(failure) => failure,
        Ok(_) => panic!("a 429 is a failure"),
    };
    assert!(matches!(failure, Failure::Http { format: WireFormat::OpenAi, .. }));
    assert_eq!(classify(&failure).kind, FailureKind::RateLimited);
    assert_eq!(classify(&failure).retry_after, Some(std::time::Duration::from_secs(2)));
}

#[tokio::test]
async fn responses_refuses_stop_sequences_before_sending() {
    // Nothing listens here: a request that went out would fail with a connection error.
    let provider = responses("http://127.0.0.1:9/v1", true);
    let request = ChatRequest {
        model: "gpt-4.1".into(),
        messages: vec![Message::user("hi")],
        stop: vec!["END".into()],
        ..ChatRequest::default()
    };
    match provider.send(&request).await {
        Err(failure @ Failure::Unsendable { .. }) => {
            assert_eq!(classify(&failure).kind, FailureKind::Unsendable);
        }
        Err(other) => panic!("expected Unsendable, got {other:?}"),
        Ok(_) => panic!("expected Unsendable, got a stream"),
    }
}

#[test]
fn responses_extra_fields_merge_only_when_tied_to_no_caller_format() {
    let provider = responses("https://api.openai.com/v1", false);
    let mut extra = Map::new();
    extra.insert("reasoning".into(), json!({"effort": "low"}));
    let mut request = ChatRequest {
        model: "o4-mini".into(),
        messages: vec![Message::user("hi")],
        extra,
        ..ChatRequest::default()
    };
    assert_eq!(provider.request_body(&request)["reasoning"], json!({"effort": "low"}));
    request.extra_format = Some(WireFormat::OpenAi);
    assert!(provider.request_body(&request).get("reasoning").is_none());
}

#[test]
fn responses_on_azure_posts_to_the_v1_endpoint_with_the_deployment_as_model() {
    let mut config = openai_config("https://my-resource.openai.azure.com");
    config.api = OpenAiApi::Responses;
    config.azure =
        Some(AzureConfig { deployment: "gpt-4.1-prod".into(), api_version: String::new() });
    let provider = OpenAiProvider::new(config.clone(), client()).unwrap();
    assert_eq!(
        provider.endpoint().as_str(),
        "https://my-resource.openai.azure.com/openai/v1/responses"
    );
    let request = ChatRequest {
        model: "gpt-4.1".into(),
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    };
    assert_eq!(provider.request_body(&request)["model"], json!("gpt-4.1-prod"));
    // A version, when given, is sent.
    config.azure = Some(AzureConfig { deployment: "d".into(), api_version: "preview".into() });
    let provider = OpenAiProvider::new(config.clone(), client()).unwrap();
    assert_eq!(
        provider.endpoint().as_str(),
        "https://my-resource.openai.azure.com/openai/v1/responses?api-version=preview"
    );
    // A dated version is the earlier preview endpoint.
    config.azure =
        Some(AzureConfig { deployment: "d".into(), api_version: "2025-04-01-preview".into() });
    let provider = OpenAiProvider::new(config.clone(), client()).unwrap();
    assert_eq!(
        provider.endpoint().as_str(),
        "https://my-resource.openai.azure.com/openai/responses?api-version=2025-04-01-preview"
    );
    // Chat Completions on Azure still needs its version.
    config.api = OpenAiApi::ChatCompletions;
    config.azure = Some(AzureConfig { deployment: "d".into(), api_version: String::new() });
    assert!(OpenAiProvider::new(config, client()).is_err());
}

#[test]
fn responses_is_chosen_by_the_api_key_of_the_config() {
    let config: rein_providers::OpenAiConfig =
        serde_json::from_value(json!({"name": "o", "api": "responses"})).unwrap();
    assert_eq!(config.api, OpenAiApi::Responses);
    let config: rein_providers::OpenAiConfig =
        serde_json::from_value(json!({"name": "o"})).unwrap();
    assert_eq!(config.api, OpenAiApi::ChatCompletions);
    let provider = OpenAiProvider::new(config, client()).unwrap();
    assert_eq!(provider.endpoint().as_str(), "https://api.openai.com/v1/chat/completions");
    assert_eq!(
        responses("https://api.openai.com/v1", true).endpoint().as_str(),
        "https://api.openai.com/v1/responses"
    );
}
