//! Recorded streams and non-streaming answers of both formats, decoded the way a live
//! response is (through the public replay functions, which share the live decoder).

use rein_core::{Failure, StopReason, StreamEvent, TokenLogprob, ToolCall, Usage, WireFormat};
use rein_providers::{replay, replay_anthropic_stream, replay_openai_stream};

use crate::{assemble, fixture, ok_events};

fn start(id: &str, model: &str) -> StreamEvent {
    StreamEvent::Start { id: id.into(), model: model.into() }
}

fn text(t: &str) -> StreamEvent {
    StreamEvent::TextDelta { text: t.into() }
}

fn usage(input_tokens: u32, output_tokens: u32) -> StreamEvent {
    StreamEvent::Usage { usage: Usage { input_tokens, output_tokens } }
}

fn stop(reason: StopReason) -> StreamEvent {
    StreamEvent::Stop { reason }
}

#[test]
fn openai_text_with_logprobs_and_usage_chunk() {
    let events = ok_events(replay_openai_stream(&fixture("openai/streams/text_with_logprobs.sse")));
    let logprob = |token: &str, logprob: f64| StreamEvent::Logprobs {
        tokens: vec![TokenLogprob { token: token.into(), logprob, top: vec![] }],
    };
    assert_eq!(
        events,
        vec![
            start("chatcmpl-9tXjliCPGY1wrAHNJ4DBnWJxKYyuf", "gpt-4o-2024-08-06"),
            text("Foo"),
            logprob("Foo", -0.0067602484),
            text("."),
            logprob(".", -2.4962392),
            stop(StopReason::EndTurn),
            usage(9, 2),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn openai_parallel_tool_calls_assemble_by_index() {
    let events = replay_openai_stream(&fixture("openai/streams/parallel_tool_calls.sse"));
    let response = assemble(&events);
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "call_lQnnsesjFMWMQ5IeWPHzR4th".into(),
                name: "GetWeatherArgs".into(),
                arguments: r#"{"city": "Edinburgh", "country": "UK", "units": "c"}"#.into(),
            },
            ToolCall {
                id: "call_2xjOUgaCdiwAcl9ZBL9LyMUU".into(),
                name: "get_stock_price".into(),
                arguments: r#"{"ticker": "AAPL", "exchange": "NASDAQ"}"#.into(),
            },
        ]
    );
    assert_eq!(response.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(response.usage, Usage { input_tokens: 149, output_tokens: 60 });
    assert_eq!(events.last(), Some(&Ok(StreamEvent::Done)));
    let starts = events.iter().filter(|e| matches!(e, Ok(StreamEvent::ToolCallStart { .. })));
    assert_eq!(starts.count(), 2, "one start per call, not per fragment");
}

#[test]
fn openai_tool_call_in_the_first_chunk() {
    let events = replay_openai_stream(&fixture("openai/streams/tool_call.sse"));
    let ok = ok_events(events.clone());
    assert_eq!(ok[0], start("chatcmpl-9tXjtfxZZh2FYaFVxXKf2jiqNDiSo", "gpt-4o-2024-08-06"));
    assert_eq!(
        ok[1],
        StreamEvent::ToolCallStart {
            index: 0,
            id: "call_5uxEBMFySqqQGu02I5QHA8k6".into(),
            name: "get_weather".into()
        }
    );
    let response = assemble(&events);
    assert_eq!(response.tool_calls[0].arguments, r#"{"city":"New York City"}"#);
    assert_eq!(response.text, "");
}

#[test]
fn openai_refusal_deltas_become_a_refusal() {
    let events = replay_openai_stream(&fixture("openai/streams/refusal.sse"));
    let response = assemble(&events);
    assert_eq!(
        response.refusal.as_deref(),
        Some("I'm sorry, but I can't assist with that request.")
    );
    assert_eq!(response.text, "");
    // finish_reason is "stop"; the builder turns a refused answer into Refusal.
    assert_eq!(response.stop_reason, Some(StopReason::Refusal));
}

#[test]
fn openai_length_is_max_tokens() {
    let events = replay_openai_stream(&fixture("openai/streams/length.sse"));
    let response = assemble(&events);
    assert_eq!(response.stop_reason, Some(StopReason::MaxTokens));
    assert_eq!(response.text, "{\"");
    assert_eq!(response.usage, Usage { input_tokens: 17, output_tokens: 1 });
}

#[test]
fn openai_error_object_mid_stream_ends_the_stream() {
    let events = replay_openai_stream(&fixture("openai/streams/mid_stream_error.sse"));
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[1], Ok(text("Hel")));
    assert_eq!(
        events[2],
        Err(Failure::StreamError {
            format: WireFormat::OpenAi,
            error_type: Some("server_error".into()),
            code: None,
            message: "The server had an error while processing your request. Sorry about that!"
                .into(),
        })
    );
}

#[test]
fn openai_compatible_padding_comments_and_reasoning() {
    let events = ok_events(replay_openai_stream(&fixture("openai/streams/padded_compatible.sse")));
    assert_eq!(
        events,
        vec![
            start("gen-1", "qwen3:8b"),
            StreamEvent::ThinkingDelta { text: "Think.".into() },
            text("Hi"),
            stop(StopReason::EndTurn),
            usage(5, 2),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn openai_malformed_chunk_is_a_malformed_failure() {
    let body = b"data: {\"id\":\"x\",\"choices\":[]}\n\ndata: {not json}\n\ndata: [DONE]\n\n";
    let events = replay_openai_stream(body);
    assert_eq!(events.len(), 2);
    assert!(matches!(&events[1], Err(Failure::Malformed { .. })), "{events:?}");
}

#[test]
fn truncated_final_record_ends_quietly_without_done() {
    let mut body = fixture("openai/streams/length.sse");
    body.truncate(body.len() - "data: [DONE]\n\n".len() - 40);
    let events = replay_openai_stream(&body);
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    assert!(!events.contains(&Ok(StreamEvent::Done)));
}

#[test]
fn anthropic_basic_stream() {
    let events = ok_events(replay_anthropic_stream(&fixture("anthropic/streams/basic.sse")));
    assert_eq!(
        events,
        vec![
            start("msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK", "claude-3-opus-latest"),
            usage(11, 1),
            text("Hello"),
            text(" there"),
            text("!"),
            stop(StopReason::EndTurn),
            usage(0, 6),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn anthropic_tool_use_stream() {
    let events = replay_anthropic_stream(&fixture("anthropic/streams/tool_use.sse"));
    let response = assemble(&events);
    assert_eq!(response.text, "I'll check the current weather in Paris for you.");
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "toolu_01NRLabsLyVHZPKxbKvkfSMn".into(),
            name: "get_weather".into(),
            arguments: r#"{"location": "Paris"}"#.into(),
        }]
    );
    assert_eq!(response.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(response.usage, Usage { input_tokens: 377, output_tokens: 65 });
    assert_eq!(response.id, "msg_019Q1hrJbZG26Fb9BQhrkHEr");
}

#[test]
fn anthropic_thinking_stream_with_spaced_json() {
    let events = ok_events(replay_anthropic_stream(&fixture("anthropic/streams/thinking.sse")));
    assert_eq!(
        events,
        vec![
            start("msg_01...", "claude-sonnet-4-5"),
            StreamEvent::ThinkingDelta {
                text: "Let me solve this step by step:\n\n1. First break down 27 * 453".into()
            },
            StreamEvent::ThinkingDelta { text: "\n2. 453 = 400 + 50 + 3".into() },
            text("27 * 453 = 12,231"),
            stop(StopReason::EndTurn),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn anthropic_refusal_stop_reason() {
    let events = replay_anthropic_stream(&fixture("anthropic/streams/refusal.sse"));
    let response = assemble(&events);
    assert_eq!(response.stop_reason, Some(StopReason::Refusal));
    assert_eq!(response.usage, Usage { input_tokens: 20, output_tokens: 120 });
}

#[test]
fn anthropic_error_event_mid_stream() {
    let events = replay_anthropic_stream(&fixture("anthropic/streams/mid_stream_error.sse"));
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(events[2], Ok(text("Partial")));
    assert_eq!(
        events[3],
        Err(Failure::StreamError {
            format: WireFormat::Anthropic,
            error_type: Some("overloaded_error".into()),
            code: None,
            message: "Overloaded".into(),
        })
    );
}

#[test]
fn anthropic_padding_unknown_events_cache_usage_and_argumentless_tool() {
    let events =
        ok_events(replay_anthropic_stream(&fixture("anthropic/streams/padded_unknown_events.sse")));
    assert_eq!(
        events,
        vec![
            start("msg_pad", "claude-haiku-4-5"),
            usage(1103, 1),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "toolu_noargs".into(),
                name: "get_time".into()
            },
            StreamEvent::ToolCallDelta { index: 0, arguments: "{}".into() },
            stop(StopReason::ToolUse),
            usage(0, 9),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn anthropic_malformed_event_is_a_malformed_failure() {
    let body = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\n\n";
    let events = replay_anthropic_stream(body);
    assert!(matches!(events.last(), Some(Err(Failure::Malformed { .. }))), "{events:?}");
}

#[test]
fn openai_non_streaming_tool_calls() {
    let events = replay(WireFormat::OpenAi, &fixture("openai/responses/tool_calls.json"));
    let response = assemble(&events);
    assert_eq!(response.id, "chatcmpl-ABfvyvfNWKcl7Ohqos4UFrmMs1v4C");
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[1].name, "get_stock_price");
    assert_eq!(response.tool_calls[1].arguments, r#"{"ticker": "AAPL", "exchange": "NASDAQ"}"#);
    assert_eq!(response.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(response.usage, Usage { input_tokens: 149, output_tokens: 60 });
    assert_eq!(events.last(), Some(&Ok(StreamEvent::Done)));
}

#[test]
fn openai_non_streaming_refusal() {
    let response = assemble(&replay(WireFormat::OpenAi, &fixture("openai/responses/refusal.json")));
    assert_eq!(response.refusal.as_deref(), Some("I'm very sorry, but I can't assist with that."));
    assert_eq!(response.stop_reason, Some(StopReason::Refusal));
}

#[test]
fn anthropic_non_streaming_answers() {
    let response = assemble(&replay(
        WireFormat::Anthropic,
        &fixture("anthropic/responses/structured_text.json"),
    ));
    assert_eq!(response.text, r#"{"name":"John Doe","age":30}"#);
    assert_eq!(response.model, "claude-sonnet-4-5-20250929");
    assert_eq!(response.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(response.usage, Usage { input_tokens: 222, output_tokens: 14 });

    let response = assemble(&replay(
        WireFormat::Anthropic,
        &fixture("anthropic/responses/thinking_tool_use.json"),
    ));
    assert!(response.thinking.starts_with("The user wants to know the current weather in Paris."));
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "toolu_01CswdEQBMshySk6Y9DFKrfq".into(),
            name: "get_weather".into(),
            arguments: r#"{"location":"Paris"}"#.into(),
        }]
    );
}

#[test]
fn non_streaming_error_bodies_with_200_are_stream_errors() {
    let events =
        replay(WireFormat::Anthropic, &fixture("anthropic/errors/529_overloaded_error.json"));
    assert!(matches!(
        &events[..],
        [Err(Failure::StreamError { format: WireFormat::Anthropic, error_type: Some(t), .. })] if t == "overloaded_error"
    ));
    let events = replay(WireFormat::OpenAi, &fixture("openai/errors/500_server_error.json"));
    assert!(matches!(&events[..], [Err(Failure::StreamError { format: WireFormat::OpenAi, .. })]));
}

#[test]
fn openai_azure_prompt_filter_chunk_does_not_hide_the_model() {
    // Constructed from Azure's documented stream shape: an anonymous first chunk carrying
    // prompt_filter_results, then ordinary chunks with content_filter_results.
    let body = concat!(
        "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{\"content\":\"\",\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1727346142,\"id\":\"chatcmpl-azure\",\"model\":\"gpt-4o-2024-08-06\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp_1\"}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}},\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1727346142,\"id\":\"chatcmpl-azure\",\"model\":\"gpt-4o-2024-08-06\",\"object\":\"chat.completion.chunk\"}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{},\"finish_reason\":\"content_filter\",\"index\":0,\"logprobs\":null}],\"created\":1727346142,\"id\":\"chatcmpl-azure\",\"model\":\"gpt-4o-2024-08-06\",\"object\":\"chat.completion.chunk\"}\n\n",
        "data: [DONE]\n\n",
    );
    let events = ok_events(replay_openai_stream(body.as_bytes()));
    assert_eq!(
        events,
        vec![
            start("chatcmpl-azure", "gpt-4o-2024-08-06"),
            text("Hi"),
            stop(StopReason::ContentFilter),
            StreamEvent::Done,
        ]
    );
}
