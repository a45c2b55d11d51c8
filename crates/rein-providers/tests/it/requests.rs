//! The exact requests the adapters put on the wire, captured by the raw server: URL, headers
//! and the full JSON body, including tools, a tool-call turn and tool results.

use rein_core::{
    ChatRequest, Failure, Message, Provider, ResponseFormat, StopReason, ToolCall, ToolChoice,
    ToolSpec,
};
use rein_providers::{AzureConfig, MaxTokensField, OpenAiConfig, OpenAiProvider, Secret};
use serde_json::{Map, json};

use crate::server::{Reply, response, serve, sse_response};
use crate::{
    TEST_KEY, anthropic, anthropic_config, assemble, client, collect, fixture, openai_config,
};

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("Current weather for a city".into()),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    }
}

fn time_tool() -> ToolSpec {
    ToolSpec { name: "get_time".into(), description: None, parameters: json!({"type": "object"}) }
}

/// A conversation with every kind of turn: the assistant called two tools in parallel, both
/// results came back, and the user followed up.
fn conversation() -> ChatRequest {
    let mut extra = Map::new();
    extra.insert("seed".into(), json!(7));
    ChatRequest {
        model: "m-1".into(),
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
            Message::tool_result("call_1", "18C, clear"),
            Message::tool_result("call_2", "14:05"),
            Message::user("Thanks. Summarise."),
        ],
        max_tokens: Some(256),
        temperature: Some(0.2),
        top_p: Some(0.9),
        stop: vec!["END".into()],
        tools: vec![weather_tool(), time_tool()],
        tool_choice: Some(ToolChoice::Tool { name: "get_weather".into() }),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "summary".into(),
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            strict: true,
        }),
        logprobs: Some(3),
        extra,
        extra_format: None,
    }
}

/// `extra` written for one wire format never reaches a provider of the other: an OpenAI-only
/// field would make Anthropic answer 400 and break a cross-provider fallback.
#[test]
fn extra_fields_stay_with_their_own_format() {
    use rein_providers::{
        AnthropicConfig, AnthropicProvider, HttpClient, HttpClientConfig, OpenAiConfig,
        OpenAiProvider,
    };
    let client = HttpClient::new(&HttpClientConfig::default()).unwrap();
    let openai =
        OpenAiProvider::new(OpenAiConfig::new("o", "http://127.0.0.1:9/v1"), client.clone())
            .unwrap();
    let anthropic =
        AnthropicProvider::new(AnthropicConfig::new("a", "http://127.0.0.1:9/v1"), client).unwrap();
    let mut request = conversation();
    request.extra_format = Some(rein_core::WireFormat::OpenAi);
    assert_eq!(openai.request_body(&request)["seed"], json!(7));
    assert!(anthropic.request_body(&request).unwrap().get("seed").is_none());
    request.extra_format = Some(rein_core::WireFormat::Anthropic);
    assert!(openai.request_body(&request).get("seed").is_none());
    assert_eq!(anthropic.request_body(&request).unwrap()["seed"], json!(7));
}

#[tokio::test]
async fn openai_request_is_exact() {
    let server =
        serve(Reply::Pieces(sse_response(&fixture("openai/streams/tool_call.sse"), 4))).await;
    let mut config = openai_config(&server.base_url);
    config.headers.insert("OpenAI-Organization".into(), Secret::new("org-123"));
    let provider = OpenAiProvider::new(config, client()).unwrap();
    let events = collect(provider.send(&conversation()).await.unwrap()).await;
    assert_eq!(assemble(&events).stop_reason, Some(StopReason::ToolUse));

    let captured = server.captured().await;
    assert_eq!(captured.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(captured.header("authorization"), Some(format!("Bearer {TEST_KEY}").as_str()));
    assert_eq!(captured.header("content-type"), Some("application/json"));
    assert_eq!(captured.header("openai-organization"), Some("org-123"));
    assert_eq!(captured.header("api-key"), None);
    assert_eq!(
        captured.json(),
        json!({
            "model": "m-1",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Weather in Paris, and the time?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18C, clear"},
                {"role": "tool", "tool_call_id": "call_2", "content": "14:05"},
                {"role": "user", "content": "Thanks. Summarise."},
            ],
            "max_tokens": 256,
            "temperature": 0.2,
            "top_p": 0.9,
            "stop": ["END"],
            "tools": [
                {"type": "function", "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                }},
                {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
            ],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "summary",
                "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
                "strict": true,
            }},
            "logprobs": true,
            "top_logprobs": 3,
            "stream": true,
            "stream_options": {"include_usage": true},
            "seed": 7,
        })
    );
}

#[test]
fn openai_simple_choices_and_formats() {
    let provider =
        OpenAiProvider::new(openai_config("http://localhost:11434/v1"), client()).unwrap();
    let cases = [
        (ToolChoice::Auto, json!("auto"), ResponseFormat::Text, json!({"type": "text"})),
        (
            ToolChoice::None,
            json!("none"),
            ResponseFormat::JsonObject,
            json!({"type": "json_object"}),
        ),
        (ToolChoice::Required, json!("required"), ResponseFormat::Text, json!({"type": "text"})),
    ];
    for (choice, wire_choice, format, wire_format) in cases {
        let request = ChatRequest {
            tool_choice: Some(choice),
            response_format: Some(format),
            logprobs: Some(0),
            ..ChatRequest::default()
        };
        let body = provider.request_body(&request);
        assert_eq!(body["tool_choice"], wire_choice);
        assert_eq!(body["response_format"], wire_format);
        assert_eq!(body["logprobs"], json!(true));
        assert!(body.get("top_logprobs").is_none(), "0 alternatives: field omitted");
    }
}

#[test]
fn openai_max_tokens_field_follows_the_host_unless_configured() {
    let request = ChatRequest { max_tokens: Some(50), ..ChatRequest::default() };
    let body = |config: OpenAiConfig| {
        OpenAiProvider::new(config, client()).unwrap().request_body(&request)
    };

    let official = body(openai_config("https://api.openai.com/v1"));
    assert_eq!(official["max_completion_tokens"], json!(50));
    assert!(official.get("max_tokens").is_none());

    let compatible = body(openai_config("http://127.0.0.1:8000/v1"));
    assert_eq!(compatible["max_tokens"], json!(50));
    assert!(compatible.get("max_completion_tokens").is_none());

    let mut forced = openai_config("http://127.0.0.1:8000/v1");
    forced.max_tokens_field = Some(MaxTokensField::MaxCompletionTokens);
    assert_eq!(body(forced)["max_completion_tokens"], json!(50));
}

#[tokio::test]
async fn azure_deployment_url_and_api_key_header() {
    let server = serve(Reply::Pieces(sse_response(&fixture("openai/streams/length.sse"), 2))).await;
    let resource = server.base_url.trim_end_matches("/v1").to_owned();
    let mut config = openai_config(&resource);
    config.azure =
        Some(AzureConfig { deployment: "gpt-4o prod".into(), api_version: "2024-10-21".into() });
    let provider = OpenAiProvider::new(config, client()).unwrap();
    collect(
        provider
            .send(&ChatRequest { max_tokens: Some(9), ..ChatRequest::default() })
            .await
            .unwrap(),
    )
    .await;

    let captured = server.captured().await;
    assert_eq!(
        captured.request_line,
        "POST /openai/deployments/gpt-4o%20prod/chat/completions?api-version=2024-10-21 HTTP/1.1"
    );
    assert_eq!(captured.header("api-key"), Some(TEST_KEY));
    assert_eq!(captured.header("authorization"), None);
    assert_eq!(captured.json()["max_tokens"], json!(9));
}

#[tokio::test]
async fn openai_non_streaming_mode() {
    let body = fixture("openai/responses/tool_calls.json");
    let server =
        serve(Reply::Pieces(vec![response(200, &[("content-type", "application/json")], &body)]))
            .await;
    let mut config = openai_config(&server.base_url);
    config.streaming = false;
    let provider = OpenAiProvider::new(config, client()).unwrap();
    let events = collect(provider.send(&Message::user("hi").into_request()).await.unwrap()).await;
    let answer = assemble(&events);
    assert_eq!(answer.tool_calls.len(), 2);

    let sent = server.captured().await.json();
    assert!(sent.get("stream").is_none());
    assert!(sent.get("stream_options").is_none());
}

#[tokio::test]
async fn json_answer_to_a_streaming_request_is_still_read() {
    // Some compatible servers ignore `stream: true`.
    let body = fixture("openai/responses/refusal.json");
    let server = serve(Reply::Pieces(vec![response(
        200,
        &[("content-type", "application/json; charset=utf-8")],
        &body,
    )]))
    .await;
    let events =
        collect(crate::openai(&server.base_url).send(&ChatRequest::default()).await.unwrap()).await;
    assert_eq!(
        assemble(&events).refusal.as_deref(),
        Some("I'm very sorry, but I can't assist with that.")
    );
}

#[tokio::test]
async fn anthropic_request_is_exact() {
    let server =
        serve(Reply::Pieces(sse_response(&fixture("anthropic/streams/tool_use.sse"), 5))).await;
    let mut request = conversation();
    request.tool_choice = Some(ToolChoice::Required);
    request.max_tokens = None;
    request.logprobs = Some(5);
    request.extra.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": 1024}));
    request.extra.insert("output_config".into(), json!({"effort": "low"}));
    let events = collect(anthropic(&server.base_url).send(&request).await.unwrap()).await;
    assert_eq!(assemble(&events).tool_calls[0].name, "get_weather");

    let captured = server.captured().await;
    assert_eq!(captured.request_line, "POST /v1/messages HTTP/1.1");
    assert_eq!(captured.header("x-api-key"), Some(TEST_KEY));
    assert_eq!(captured.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(captured.header("content-type"), Some("application/json"));
    assert_eq!(captured.header("authorization"), None);
    assert_eq!(
        captured.json(),
        json!({
            "model": "m-1",
            "system": "You are terse.",
            "messages": [
                {"role": "user", "content": "Weather in Paris, and the time?"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18C, clear"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "14:05"},
                    {"type": "text", "text": "Thanks. Summarise."},
                ]},
            ],
            "max_tokens": 4096,
            "temperature": 0.2,
            "top_p": 0.9,
            "stop_sequences": ["END"],
            "tools": [
                {"name": "get_weather", "description": "Current weather for a city",
                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "get_time", "input_schema": {"type": "object"}},
            ],
            "tool_choice": {"type": "any"},
            "output_config": {
                "format": {"type": "json_schema", "schema": {"type": "object", "properties": {"text": {"type": "string"}}}},
                "effort": "low",
            },
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "stream": true,
            "seed": 7,
        })
    );
}

#[test]
fn anthropic_choices_text_and_configured_defaults() {
    let mut config = anthropic_config("https://api.anthropic.com/v1/");
    config.default_max_tokens = 1000;
    config.anthropic_version = "2024-01-01".into();
    config.streaming = false;
    let provider = rein_providers::AnthropicProvider::new(config, client()).unwrap();
    assert_eq!(provider.endpoint().as_str(), "https://api.anthropic.com/v1/messages");
    let cases = [
        (ToolChoice::Auto, json!({"type": "auto"})),
        (ToolChoice::None, json!({"type": "none"})),
        (ToolChoice::Tool { name: "f".into() }, json!({"type": "tool", "name": "f"})),
    ];
    for (choice, wire) in cases {
        let request = ChatRequest {
            tool_choice: Some(choice),
            response_format: Some(ResponseFormat::JsonObject),
            messages: vec![Message::user("a"), Message::assistant("b")],
            ..ChatRequest::default()
        };
        let body = provider.request_body(&request).unwrap();
        assert_eq!(body["tool_choice"], wire);
        assert_eq!(body["max_tokens"], json!(1000));
        assert!(body.get("output_config").is_none(), "no JSON-object mode on Anthropic");
        assert!(body.get("stream").is_none());
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
        );
    }
}

#[tokio::test]
async fn anthropic_rejects_tool_arguments_that_are_not_json_before_sending() {
    let provider = anthropic("http://127.0.0.1:9/v1");
    let request = ChatRequest {
        messages: vec![Message {
            tool_calls: vec![ToolCall {
                id: "call_x".into(),
                name: "f".into(),
                arguments: "{oops".into(),
            }],
            ..Message::assistant("")
        }],
        ..ChatRequest::default()
    };
    match provider.send(&request).await {
        Err(Failure::Unsendable { detail }) => assert!(detail.contains("call_x"), "{detail}"),
        Err(other) => panic!("expected Unsendable, got {other:?}"),
        Ok(_) => panic!("expected Unsendable, got a stream"),
    }
}

trait IntoRequest {
    fn into_request(self) -> ChatRequest;
}

impl IntoRequest for Message {
    fn into_request(self) -> ChatRequest {
        ChatRequest { model: "m".into(), messages: vec![self], ..ChatRequest::default() }
    }
}
