//! The Bedrock Converse adapter: SigV4 against AWS's published test vectors, the event-stream
//! reader against smithy-rs's framing examples (CRCs included), request bodies, recorded and
//! constructed answers, errors typed by `x-amzn-ErrorType`, and one signed request end to end
//! over HTTP.

use std::time::Duration;

use aws_smithy_eventstream::frame::{read_message_from, write_message_to};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message as Frame};
use bytes::Bytes;
use rein_core::{
    ChatRequest, Disposition, Failure, FailureKind, Message, Provider, ResponseFormat, Role,
    StopReason, StreamEvent, ToolCall, ToolChoice, ToolSpec, Usage, WireFormat, classify,
};
use rein_providers::{
    AwsCredentials, BedrockConfig, BedrockProvider, Secret, SigningScope, parse_http_error,
    replay_bedrock_response, replay_bedrock_stream, sigv4_headers,
};
use reqwest::header::{HeaderMap, HeaderValue as HttpHeaderValue};
use serde_json::{Value, json};

use crate::server::{Reply, chunk, response, serve};
use crate::{assemble, client, collect, fixture, ok_events};

const ACCESS_KEY: &str = "AKIDEXAMPLE";
const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const MODEL: &str = "anthropic.claude-3-haiku-20240307-v1:0";

/// One case of the AWS SigV4 test suite (as shipped in `aws-sigv4`'s own tests): signing the
/// request with the context's credentials, region, service and time gives the published
/// signature and `Authorization` header.
fn check_vector(name: &str) {
    let dir = format!("bedrock/sigv4/{name}");
    let context: Value =
        serde_json::from_slice(&fixture(&format!("{dir}/context.json"))).expect("context");
    let request = String::from_utf8(fixture(&format!("{dir}/request.txt"))).expect("utf8");
    let mut lines = request.lines();
    let first = lines.next().expect("request line");
    let mut parts = first.split(' ');
    let (method, path) = (parts.next().expect("method"), parts.next().expect("path"));
    let headers: Vec<(String, String)> = lines
        .take_while(|line| !line.is_empty())
        .map(|line| {
            let (name, value) = line.split_once(':').expect("header");
            (name.to_ascii_lowercase(), value.to_owned())
        })
        .collect();
    let host = &headers.iter().find(|(n, _)| n == "host").expect("host").1;
    let creds = &context["credentials"];
    let credentials = AwsCredentials {
        access_key_id: Secret::new(creds["access_key_id"].as_str().expect("id")),
        secret_access_key: Secret::new(creds["secret_access_key"].as_str().expect("key")),
        session_token: creds["token"].as_str().map(Secret::new),
    };
    // The context's timestamp, 2015-08-30T12:36:00Z.
    assert_eq!(context["timestamp"], "2015-08-30T12:36:00Z");
    let scope = SigningScope {
        region: context["region"].as_str().expect("region"),
        service: context["service"].as_str().expect("service"),
        time: Duration::from_secs(1_440_938_160),
    };
    let signed: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let added =
        sigv4_headers(&credentials, scope, method, &format!("https://{host}{path}"), &signed, b"")
            .expect("signed");
    let expected_signature =
        String::from_utf8(fixture(&format!("{dir}/header-signature.txt"))).expect("utf8");
    let authorization = &added.iter().find(|(n, _)| n == "authorization").expect("auth").1;
    assert!(
        authorization.ends_with(&format!("Signature={}", expected_signature.trim())),
        "{name}: {authorization}"
    );
    let signed_request =
        String::from_utf8(fixture(&format!("{dir}/header-signed-request.txt"))).expect("utf8");
    assert!(signed_request.contains(&format!("Authorization:{authorization}")), "{name}");
    for (header, value) in &added {
        let line = signed_request
            .lines()
            .find(|line| line.to_ascii_lowercase().starts_with(&format!("{header}:")))
            .unwrap_or_else(|| panic!("{name}: {header} not in the published request"));
        assert!(line.ends_with(value.as_str()), "{name}: {line} vs {value}");
    }
}

#[test]
fn sigv4_matches_aws_published_vectors() {
    check_vector("get-vanilla");
    check_vector("post-vanilla");
    check_vector("get-vanilla-with-session-token");
}

#[test]
fn event_stream_reader_checks_both_crcs_on_aws_framing_examples() {
    for valid in ["valid_with_all_headers_and_payload", "valid_empty_payload", "valid_no_headers"] {
        let bytes = fixture(&format!("bedrock/eventstream/{valid}"));
        read_message_from(Bytes::from(bytes)).unwrap_or_else(|e| panic!("{valid}: {e}"));
    }
    for invalid in ["invalid_message_checksum", "invalid_prelude_checksum"] {
        let bytes = fixture(&format!("bedrock/eventstream/{invalid}"));
        assert!(read_message_from(Bytes::from(bytes.clone())).is_err(), "{invalid}");
        // Through the adapter's decoder: a clean failure, never an answer.
        let events = replay_bedrock_stream(&bytes);
        assert!(
            matches!(events.as_slice(), [Err(Failure::Malformed { .. })]),
            "{invalid}: {events:?}"
        );
    }
}

fn string(value: &'static str) -> HeaderValue {
    HeaderValue::String(value.into())
}

/// One ConverseStream frame, as Bedrock writes it.
fn event(event_type: &'static str, payload: Value) -> Vec<u8> {
    let frame = Frame::new_from_parts(
        vec![
            Header::new(":event-type", string(event_type)),
            Header::new(":content-type", string("application/json")),
            Header::new(":message-type", string("event")),
        ],
        serde_json::to_vec(&payload).expect("json"),
    );
    let mut out = Vec::new();
    write_message_to(&frame, &mut out).expect("frame");
    out
}

fn exception(exception_type: &'static str, message: &str) -> Vec<u8> {
    let frame = Frame::new_from_parts(
        vec![
            Header::new(":exception-type", string(exception_type)),
            Header::new(":content-type", string("application/json")),
            Header::new(":message-type", string("exception")),
        ],
        serde_json::to_vec(&json!({"message": message})).expect("json"),
    );
    let mut out = Vec::new();
    write_message_to(&frame, &mut out).expect("frame");
    out
}

/// A text answer in ConverseStream's order: `messageStop` before `metadata`.
fn text_stream() -> Vec<Vec<u8>> {
    vec![
        event("messageStart", json!({"p": "abcdefghijkl", "role": "assistant"})),
        event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Hello"}})),
        event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": " there"}})),
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event("messageStop", json!({"stopReason": "end_turn"})),
        event(
            "metadata",
            json!({"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}, "metrics": {"latencyMs": 300}}),
        ),
    ]
}

fn text(t: &str) -> StreamEvent {
    StreamEvent::TextDelta { text: t.into() }
}

#[test]
fn converse_stream_text_decodes_in_order_and_is_done_after_metadata() {
    let events = ok_events(replay_bedrock_stream(&text_stream().concat()));
    assert_eq!(
        events,
        vec![
            StreamEvent::Start { id: String::new(), model: String::new() },
            text("Hello"),
            text(" there"),
            StreamEvent::Stop { reason: StopReason::EndTurn },
            StreamEvent::Usage { usage: Usage { input_tokens: 10, output_tokens: 5 } },
            StreamEvent::Done,
        ]
    );
}

/// A real ConverseStream body (Claude asked for the cosine of 7 with a `cosine` tool): text,
/// then a tool call whose input comes as an empty fragment and then the whole object, then
/// `messageStop` and `metadata` (with `serviceTier`, which the reader ignores).
#[test]
fn recorded_converse_stream_with_a_tool_call_decodes() {
    let bytes = fixture("bedrock/streams/tool_use.eventstream");
    let events = replay_bedrock_stream(&bytes);
    assert!(matches!(events.last(), Some(Ok(StreamEvent::Done))), "{events:?}");
    let response = assemble(&events);
    assert_eq!(
        response.text,
        "To calculate the cosine of 7, we can use the \"cosine\" function that is available to us. Let's use this function to get the result."
    );
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].id, "tooluse_QklrEHKjRu6Oc4BQUfy7ZQ");
    assert_eq!(response.tool_calls[0].name, "cosine");
    assert_eq!(response.tool_calls[0].arguments, r#"{"x": 7}"#);
    assert_eq!(response.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(response.usage, Usage { input_tokens: 386, output_tokens: 75 });
    // Cut before `metadata`: the message stopped, so the end of the body completes it.
    let metadata_at = bytes.len() - 235;
    let events = replay_bedrock_stream(&bytes[..metadata_at]);
    assert!(matches!(events.last(), Some(Ok(StreamEvent::Done))), "{events:?}");
    // Cut before `messageStop`: never complete.
    let events = replay_bedrock_stream(&bytes[..metadata_at - 133]);
    assert!(!events.iter().any(|e| matches!(e, Ok(StreamEvent::Done))), "{events:?}");
}

#[test]
fn converse_stream_tool_use_assembles_its_input_fragments() {
    let frames = [
        event("messageStart", json!({"role": "assistant"})),
        event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Looking."}})),
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event(
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "top_song"}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"sign\": "}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "\"WZPZ\"}"}}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 1})),
        event("messageStop", json!({"stopReason": "tool_use"})),
        event("metadata", json!({"usage": {"inputTokens": 375, "outputTokens": 74}})),
    ];
    let response = assemble(&replay_bedrock_stream(&frames.concat()));
    assert_eq!(response.text, "Looking.");
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "tooluse_1".into(),
            name: "top_song".into(),
            arguments: r#"{"sign": "WZPZ"}"#.into()
        }]
    );
    assert_eq!(response.stop_reason, Some(StopReason::ToolUse));
}

#[test]
fn a_stream_cut_before_message_stop_or_with_a_bad_crc_is_never_a_complete_answer() {
    let frames = text_stream();
    // Cut after the deltas, and again inside a frame: no `Stop`, no `Done`.
    let cut = frames[..3].concat();
    for end in [cut.len(), cut.len() - 7] {
        let events = replay_bedrock_stream(&cut[..end]);
        assert!(!events.iter().any(|e| matches!(e, Ok(StreamEvent::Done))), "{events:?}");
    }
    // One flipped payload byte in the last frame: its message CRC fails.
    let mut bad = frames.concat();
    let at = bad.len() - 10;
    bad[at] ^= 0x20;
    let events = replay_bedrock_stream(&bad);
    assert!(matches!(events.last(), Some(Err(Failure::Malformed { .. }))), "{events:?}");
    assert!(!events.iter().any(|e| matches!(e, Ok(StreamEvent::Done))));
}

#[test]
fn stream_exceptions_are_typed_and_classified() {
    let cases = [
        ("throttlingException", FailureKind::RateLimited),
        ("serviceUnavailableException", FailureKind::Overloaded),
        ("modelStreamErrorException", FailureKind::StreamInterrupted),
        ("internalServerException", FailureKind::ServerError),
        ("validationException", FailureKind::InvalidRequest),
    ];
    for (kind, expected) in cases {
        let mut bytes = text_stream()[..2].concat();
        bytes.extend(exception(kind, "Too many tokens, please wait before trying again."));
        let events = replay_bedrock_stream(&bytes);
        let failure = events.last().and_then(|e| e.as_ref().err()).expect("failure");
        assert!(
            matches!(failure, Failure::StreamError { format: WireFormat::Bedrock, error_type: Some(t), .. } if t == kind)
        );
        assert_eq!(classify(failure).kind, expected, "{kind}");
    }
}

#[test]
fn converse_responses_parse() {
    let response = assemble(&replay_bedrock_response(&fixture("bedrock/responses/text.json")));
    assert_eq!(response.text, "Hello! How can I help you today?");
    assert_eq!(response.usage, Usage { input_tokens: 12, output_tokens: 12 });
    assert_eq!(response.stop_reason, Some(StopReason::EndTurn));
    let response = assemble(&replay_bedrock_response(&fixture("bedrock/responses/tool_use.json")));
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "top_song");
    assert_eq!(response.tool_calls[0].arguments, r#"{"sign":"WZPZ"}"#);
    assert_eq!(response.stop_reason, Some(StopReason::ToolUse));
}

/// Bedrock's documented errors, typed by `x-amzn-ErrorType`, each with the kind and move a
/// user would expect (the status alone would mislead: 429 is a throttle or a model loading,
/// 403 a denied action or an expired token).
#[test]
fn bedrock_errors_classify_by_type() {
    use Disposition::{NextLargerContextTier, RetryTier, SkipTierAndAlert};
    #[rustfmt::skip]
    let cases = [
        (429, "ThrottlingException", "Too many requests, please wait before trying again.", FailureKind::RateLimited, RetryTier),
        (503, "ServiceUnavailableException", "Bedrock is unable to process your request.", FailureKind::Overloaded, RetryTier),
        (429, "ModelNotReadyException", "Model is not ready for inference. Wait and try your request again.", FailureKind::Overloaded, RetryTier),
        (500, "InternalServerException", "The system encountered an unexpected error during processing. Try your request again.", FailureKind::ServerError, RetryTier),
        (400, "ValidationException", "Input is too long for requested model.", FailureKind::ContextLength, NextLargerContextTier),
        (400, "ValidationException", "messages: roles must alternate between \"user\" and \"assistant\"", FailureKind::InvalidRequest, SkipTierAndAlert),
        (403, "AccessDeniedException", "You don't have access to the model with the specified model ID.", FailureKind::Forbidden, SkipTierAndAlert),
        (403, "ExpiredTokenException", "The security token included in the request is expired", FailureKind::Unauthorized, SkipTierAndAlert),
        (403, "UnrecognizedClientException", "The security token included in the request is invalid.", FailureKind::Unauthorized, SkipTierAndAlert),
        (404, "ResourceNotFoundException", "Could not resolve the foundation model from the provided model identifier.", FailureKind::NotFound, SkipTierAndAlert),
        (400, "ServiceQuotaExceededException", "Your request exceeded the quota for this account.", FailureKind::QuotaExhausted, SkipTierAndAlert),
    ];
    for (status, error_type, message, kind, disposition) in cases {
        let mut headers = HeaderMap::new();
        let typed = format!("{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/");
        headers.insert("x-amzn-errortype", HttpHeaderValue::from_str(&typed).expect("header"));
        headers.insert("x-amzn-requestid", HttpHeaderValue::from_static("9f1c-req"));
        let body = serde_json::to_vec(&json!({"message": message})).expect("json");
        let http = parse_http_error(WireFormat::Bedrock, status, &headers, &body);
        assert_eq!(http.error_type.as_deref(), Some(error_type));
        assert_eq!(http.message, message);
        assert_eq!(http.request_id.as_deref(), Some("9f1c-req"));
        let classified = classify(&Failure::Http { format: WireFormat::Bedrock, http });
        assert_eq!((classified.kind, classified.disposition), (kind, disposition), "{error_type}");
    }
    // Without the header, the body's `__type` names it.
    let body =
        br#"{"__type":"com.amazon.coral.service#ThrottlingException","message":"slow down"}"#;
    let http = parse_http_error(WireFormat::Bedrock, 429, &HeaderMap::new(), body);
    assert_eq!(http.error_type.as_deref(), Some("ThrottlingException"));
}

fn provider(base_url: &str, streaming: bool) -> BedrockProvider {
    let mut config = BedrockConfig::new("bedrock-test", "us-east-1");
    config.base_url = Some(base_url.to_owned());
    config.access_key_id = Some(Secret::new(ACCESS_KEY));
    config.secret_access_key = Some(Secret::new(SECRET_KEY));
    config.session_token = Some(Secret::new("session-token-0123456789"));
    config.streaming = streaming;
    BedrockProvider::new(config, client()).expect("bedrock provider")
}

fn request() -> ChatRequest {
    ChatRequest {
        model: MODEL.into(),
        system: Some("Be brief.".into()),
        messages: vec![
            Message::user("What is the top song on WZPZ?"),
            Message {
                role: Role::Assistant,
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "tooluse_1".into(),
                    name: "top_song".into(),
                    arguments: r#"{"sign":"WZPZ"}"#.into(),
                }],
                tool_call_id: None,
            },
            Message {
                role: Role::Tool,
                content: "Elemental Hotel".into(),
                tool_calls: vec![],
                tool_call_id: Some("tooluse_1".into()),
            },
        ],
        max_tokens: Some(512),
        temperature: Some(0.5),
        stop: vec!["END".into()],
        tools: vec![ToolSpec {
            name: "top_song".into(),
            description: Some("Get the most popular song played on a radio station.".into()),
            parameters: json!({"type": "object", "properties": {"sign": {"type": "string"}}, "required": ["sign"]}),
        }],
        tool_choice: Some(ToolChoice::Auto),
        ..ChatRequest::default()
    }
}

#[test]
fn converse_request_body_is_exact() {
    let body = provider("http://127.0.0.1:9", true).request_body(&request()).expect("body");
    assert_eq!(
        body,
        json!({
            "messages": [
                {"role": "user", "content": [{"text": "What is the top song on WZPZ?"}]},
                {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "top_song", "input": {"sign": "WZPZ"}}}]},
                {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "Elemental Hotel"}]}}]},
            ],
            "system": [{"text": "Be brief."}],
            "inferenceConfig": {"maxTokens": 512, "temperature": 0.5, "stopSequences": ["END"]},
            "toolConfig": {
                "tools": [{"toolSpec": {
                    "name": "top_song",
                    "description": "Get the most popular song played on a radio station.",
                    "inputSchema": {"json": {"type": "object", "properties": {"sign": {"type": "string"}}, "required": ["sign"]}},
                }}],
                "toolChoice": {"auto": {}},
            },
        })
    );
}

/// Structured outputs on Converse (the API reference's `OutputConfig` / `OutputFormat` /
/// `JsonSchemaDefinition`): the schema travels as a JSON string, with its name; a JSON-object
/// request (which Converse cannot say) sends no `outputConfig`.
#[test]
fn a_json_schema_goes_as_output_config_with_the_schema_as_a_string() {
    let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"], "additionalProperties": false});
    let mut asked = ChatRequest {
        model: MODEL.into(),
        messages: vec![Message::user("where is my order?")],
        response_format: Some(ResponseFormat::JsonSchema {
            name: "Order".into(),
            schema: schema.clone(),
            strict: true,
        }),
        ..ChatRequest::default()
    };
    let body = provider("http://127.0.0.1:9", true).request_body(&asked).expect("body");
    let format = &body["outputConfig"]["textFormat"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["structure"]["jsonSchema"]["name"], "Order");
    let sent = format["structure"]["jsonSchema"]["schema"].as_str().expect("a string");
    assert_eq!(serde_json::from_str::<Value>(sent).expect("JSON"), schema);

    asked.response_format = Some(ResponseFormat::JsonObject);
    let body = provider("http://127.0.0.1:9", true).request_body(&asked).expect("body");
    assert!(body.get("outputConfig").is_none(), "{body}");
}

#[tokio::test]
async fn a_signed_converse_stream_call_over_http() {
    let mut pieces = vec![
        b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec(),
    ];
    // Frames split at odd places: the reader must not care.
    let body = text_stream().concat();
    pieces.extend(body.chunks(37).map(chunk));
    pieces.push(b"0\r\n\r\n".to_vec());
    let server = serve(Reply::Pieces(pieces)).await;
    let provider = provider(&server.base_url, true);
    let events = collect(provider.send(&request()).await.expect("stream")).await;
    let response = assemble(&events);
    assert_eq!(response.text, "Hello there");
    assert_eq!(response.model, MODEL);
    assert!(matches!(events.last(), Some(Ok(StreamEvent::Done))));
    let captured = server.captured().await;
    assert!(
        captured
            .request_line
            .contains("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream HTTP/1.1"),
        "{}",
        captured.request_line
    );
    let authorization = captured.header("authorization").expect("signed");
    assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
    assert!(authorization.contains("/us-east-1/bedrock/aws4_request"));
    assert!(
        authorization.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token")
    );
    assert!(!authorization.contains(SECRET_KEY));
    assert_eq!(captured.header("x-amz-security-token"), Some("session-token-0123456789"));
    assert!(captured.header("x-amz-date").is_some());
    assert_eq!(captured.json()["inferenceConfig"]["maxTokens"], 512);
}

#[tokio::test]
async fn a_throttled_converse_call_is_a_rate_limit_with_its_wait() {
    let body = br#"{"message":"Too many requests, please wait before trying again."}"#;
    let reply = response(
        429,
        &[
            ("content-type", "application/json"),
            (
                "x-amzn-errortype",
                "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            ),
            ("retry-after", "2"),
        ],
        body,
    );
    let server = serve(Reply::Pieces(vec![reply])).await;
    let failure = provider(&server.base_url, false).send(&request()).await.err().expect("failure");
    let classified = classify(&failure);
    assert_eq!(classified.kind, FailureKind::RateLimited);
    assert!(
        matches!(&failure, Failure::Http { http, .. } if http.retry_after == Some(Duration::from_secs(2))),
        "{failure:?}"
    );
    assert!(format!("{failure:?}").contains("Too many requests"));
    assert!(!format!("{failure:?}").contains(SECRET_KEY));
    let captured = server.captured().await;
    assert!(captured.request_line.contains("/converse HTTP/1.1"), "{}", captured.request_line);
}

#[test]
fn missing_credentials_are_named_by_key() {
    let mut config = BedrockConfig::new("b", "us-east-1");
    config.access_key_id = Some(Secret::new(ACCESS_KEY));
    let error = BedrockProvider::new(config, client()).expect_err("no secret key");
    assert_eq!(error.key(), "secret_access_key");
    assert!(!error.to_string().contains(ACCESS_KEY));
}
