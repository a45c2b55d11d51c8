//! The Bedrock adapter on InvokeModel for Claude (`api = invoke`): the request body against
//! AWS's documented example, a recorded InvokeModelWithResponseStream body (real event-stream
//! frames, CRCs included) and a recorded InvokeModel answer decoded, a bad CRC and a cut frame
//! never read as a complete answer, exception frames typed and classified, and signed calls to
//! both invoke paths over HTTP.

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message as Frame};
use rein_core::{
    ChatRequest, Failure, FailureKind, Message, Provider, ResponseFormat, StopReason, StreamEvent,
    Usage, WireFormat, classify,
};
use rein_providers::{
    BedrockApi, BedrockConfig, BedrockProvider, Secret, replay, replay_bedrock_response,
    replay_bedrock_stream,
};
use serde_json::json;

use crate::server::{Reply, chunk, response, serve};
use crate::{assemble, client, collect, fixture};

const ACCESS_KEY: &str = "AKIDEXAMPLE";
const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const MODEL: &str = "anthropic.claude-3-haiku-20240307-v1:0";
/// The message of a real `throttlingException` frame of InvokeModelWithResponseStream, as
/// botocore reported it (github.com/BerriAI/litellm issue #589, aws-samples/aws-genai-llm-chatbot
/// issue #220).
const RECORDED_THROTTLE: &str = "Too many requests, please wait before trying again. You have sent too many requests.  Wait before trying again.";
/// The recorded stream's answer, chunk by chunk.
const RECORDED_TEXT: &str = "Hi! 👋 How are you doing today?";

fn provider(base_url: &str, streaming: bool) -> BedrockProvider {
    let mut config = BedrockConfig::new("bedrock-invoke", "us-east-1");
    config.base_url = Some(base_url.to_owned());
    config.access_key_id = Some(Secret::new(ACCESS_KEY));
    config.secret_access_key = Some(Secret::new(SECRET_KEY));
    config.streaming = streaming;
    config.api = BedrockApi::Invoke;
    BedrockProvider::new(config, client()).expect("bedrock provider")
}

/// The request of AWS's "Invoke Anthropic Claude on Amazon Bedrock using the Invoke Model API"
/// example (Bedrock user guide, code examples).
fn documented_request() -> ChatRequest {
    ChatRequest {
        model: MODEL.into(),
        messages: vec![Message::user(
            "Describe the purpose of a 'hello world' program in one line.",
        )],
        max_tokens: Some(512),
        temperature: Some(0.5),
        ..ChatRequest::default()
    }
}

/// The recorded InvokeModelWithResponseStream body: ten `chunk` frames.
fn recorded_stream() -> Vec<u8> {
    fixture("bedrock/invoke/text.eventstream")
}

/// The byte offsets where each frame of an event-stream body starts.
fn frame_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        starts.push(at);
        let total = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        at += total as usize;
    }
    starts
}

fn exception(exception_type: &'static str, message: &str) -> Vec<u8> {
    let string = |value: &'static str| HeaderValue::String(value.into());
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

#[test]
fn invoke_request_body_is_aws_documented_example() {
    let provider = provider("http://127.0.0.1:9", false);
    let body = provider.request_body(&documented_request()).expect("body");
    // The example's `native_request`, as its .NET and Python versions send it.
    assert_eq!(
        body,
        json!({
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 512,
            "temperature": 0.5,
            "messages": [{"role": "user", "content": "Describe the purpose of a 'hello world' program in one line."}],
        })
    );
    assert_eq!(
        provider.endpoint_for(MODEL).as_str(),
        "http://127.0.0.1:9/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke"
    );
    let streaming = self::provider("http://127.0.0.1:9", true);
    let body = streaming.request_body(&documented_request()).expect("body");
    assert!(body.get("stream").is_none() && body.get("model").is_none(), "{body}");
    assert_eq!(
        streaming.endpoint_for(MODEL).path(),
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream"
    );
    // Fields meant for Bedrock reach the body; the Converse adapter's body shape does not.
    let mut request = documented_request();
    request.extra_format = Some(WireFormat::Bedrock);
    request.extra.insert("top_k".into(), json!(250));
    let body = streaming.request_body(&request).expect("body");
    assert_eq!(body["top_k"], 250);
    assert!(body.get("inferenceConfig").is_none());
}

#[test]
fn recorded_invoke_stream_decodes_with_its_invocation_metrics() {
    let events = replay_bedrock_stream(&recorded_stream());
    assert!(
        matches!(
            events.first(),
            Some(Ok(StreamEvent::Start { id, model }))
                if id == "msg_bdrk_012GBPzpcoMCLP1b2pcJsSHk" && model == "claude-sonnet-4-5-20250929"
        ),
        "{events:?}"
    );
    assert!(matches!(events.last(), Some(Ok(StreamEvent::Done))), "{events:?}");
    // The invocation metrics come just before the end.
    assert_eq!(
        events[events.len() - 2],
        Ok(StreamEvent::Usage { usage: Usage { input_tokens: 10, output_tokens: 15 } })
    );
    let response = assemble(&events);
    assert_eq!(response.text, RECORDED_TEXT);
    assert_eq!(response.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(response.usage, Usage { input_tokens: 10, output_tokens: 15 });
    // Through the format-wide replay too (what the simulator and evals use).
    assert_eq!(replay(WireFormat::Bedrock, &recorded_stream()), events);
}

#[test]
fn a_bad_crc_or_a_cut_frame_is_never_a_complete_invoke_answer() {
    let bytes = recorded_stream();
    let starts = frame_starts(&bytes);
    assert_eq!(starts.len(), 10);
    // One payload byte of the fourth frame changed: its message CRC no longer matches.
    let mut bad = bytes.clone();
    bad[starts[3] + 100] ^= 0x01;
    let events = replay_bedrock_stream(&bad);
    assert!(matches!(events.last(), Some(Err(Failure::Malformed { .. }))), "{events:?}");
    assert!(!events.iter().any(|e| matches!(e, Ok(StreamEvent::Done))));
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            Ok(StreamEvent::TextDelta { text }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hi", "the frames before the bad one were read");
    // The body cut inside the last frame (`message_stop`): every token, no end.
    let cut = &bytes[..starts[9] + 40];
    let events = replay_bedrock_stream(cut);
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    assert!(!events.iter().any(|e| matches!(e, Ok(StreamEvent::Done))), "{events:?}");
    assert_eq!(assemble(&events).text, RECORDED_TEXT);
    // Cut after a whole frame, before `message_stop`: no end either.
    let events = replay_bedrock_stream(&bytes[..starts[9]]);
    assert!(!events.iter().any(|e| matches!(e, Ok(StreamEvent::Done))), "{events:?}");
}

#[test]
fn invoke_stream_exceptions_are_typed_and_classified() {
    let cases = [
        ("throttlingException", FailureKind::RateLimited),
        ("serviceUnavailableException", FailureKind::Overloaded),
        ("modelStreamErrorException", FailureKind::StreamInterrupted),
        ("internalServerException", FailureKind::ServerError),
        ("modelTimeoutException", FailureKind::RequestTimeout),
        ("validationException", FailureKind::InvalidRequest),
    ];
    let bytes = recorded_stream();
    let starts = frame_starts(&bytes);
    for (kind, expected) in cases {
        let mut body = bytes[..starts[3]].to_vec();
        body.extend(exception(kind, RECORDED_THROTTLE));
        let events = replay_bedrock_stream(&body);
        let failure = events.last().and_then(|e| e.as_ref().err()).expect("failure");
        assert!(
            matches!(failure, Failure::StreamError { format: WireFormat::Bedrock, error_type: Some(t), message, .. }
                if t == kind && message == RECORDED_THROTTLE),
            "{failure:?}"
        );
        assert_eq!(classify(failure).kind, expected, "{kind}");
    }
}

#[test]
fn recorded_invoke_answer_parses() {
    let body = fixture("bedrock/invoke/text.json");
    let events = replay_bedrock_response(&body);
    assert_eq!(replay(WireFormat::Bedrock, &body), events);
    let response = assemble(&events);
    assert_eq!(response.id, "msg_bdrk_01SK3CsA23VBbZig4HqemAoo");
    assert_eq!(response.model, "claude-3-7-sonnet-20250219");
    assert!(response.text.starts_with("# Whispers of the Heart\n\n"), "{}", response.text);
    assert!(response.text.ends_with("A love to cherish forever."));
    assert_eq!(response.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(response.usage, Usage { input_tokens: 13, output_tokens: 153 });
    assert!(matches!(events.last(), Some(Ok(StreamEvent::Done))));
}

#[tokio::test]
async fn a_signed_invoke_with_response_stream_call_over_http() {
    let mut pieces = vec![
        b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec(),
    ];
    // Frames split at odd places: the reader must not care.
    pieces.extend(recorded_stream().chunks(37).map(chunk));
    pieces.push(b"0\r\n\r\n".to_vec());
    let server = serve(Reply::Pieces(pieces)).await;
    let provider = provider(&server.base_url, true);
    let events = collect(provider.send(&documented_request()).await.expect("stream")).await;
    assert_eq!(events, replay_bedrock_stream(&recorded_stream()));
    assert_eq!(assemble(&events).text, RECORDED_TEXT);
    let captured = server.captured().await;
    assert!(
        captured.request_line.contains(
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream HTTP/1.1"
        ),
        "{}",
        captured.request_line
    );
    let authorization = captured.header("authorization").expect("signed");
    assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
    assert!(authorization.contains("/us-east-1/bedrock/aws4_request"));
    assert!(!authorization.contains(SECRET_KEY));
    assert_eq!(captured.header("accept"), Some("application/vnd.amazon.eventstream"));
    let sent = captured.json();
    assert_eq!(sent["anthropic_version"], "bedrock-2023-05-31");
    assert!(sent.get("model").is_none() && sent.get("stream").is_none(), "{sent}");
}

#[tokio::test]
async fn a_signed_invoke_call_answers_a_messages_body_and_errors_are_typed() {
    let body = fixture("bedrock/invoke/text.json");
    let reply = response(200, &[("content-type", "application/json")], &body);
    let server = serve(Reply::Pieces(vec![reply])).await;
    let events = collect(
        provider(&server.base_url, false).send(&documented_request()).await.expect("answer"),
    )
    .await;
    assert_eq!(assemble(&events).usage, Usage { input_tokens: 13, output_tokens: 153 });
    let captured = server.captured().await;
    assert!(captured.request_line.contains("/invoke HTTP/1.1"), "{}", captured.request_line);
    assert!(captured.header("authorization").is_some());
    assert_eq!(captured.header("content-type"), Some("application/json"));
    assert_eq!(captured.header("accept"), Some("application/json"));
    // The bytes on the wire: AWS's example body (keys in serde_json's order; JSON objects are
    // unordered), nothing more.
    assert_eq!(
        String::from_utf8(captured.body.clone()).unwrap(),
        r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":512,"messages":[{"content":"Describe the purpose of a 'hello world' program in one line.","role":"user"}],"temperature":0.5}"#
    );

    let error = br#"{"message":"Input is too long for requested model."}"#;
    let reply = response(
        400,
        &[
            ("content-type", "application/json"),
            (
                "x-amzn-errortype",
                "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            ),
        ],
        error,
    );
    let server = serve(Reply::Pieces(vec![reply])).await;
    let failure =
        provider(&server.base_url, false).send(&documented_request()).await.err().expect("failure");
    assert!(
        matches!(&failure, Failure::Http { format: WireFormat::Bedrock, http } if http.error_type.as_deref() == Some("ValidationException")),
        "{failure:?}"
    );
    assert_eq!(classify(&failure).kind, FailureKind::ContextLength);
}

/// A `json_object` request to a model that takes a prefill: the body ends with the assistant's
/// `{`, and the streamed answer has it back in front.
#[tokio::test]
async fn a_json_object_prefill_is_put_back_in_front_of_the_streamed_answer() {
    let mut request = documented_request();
    request.response_format = Some(ResponseFormat::JsonObject);
    let body = provider("http://127.0.0.1:9", true).request_body(&request).expect("body");
    let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
    assert_eq!(last, Some(json!({"role": "assistant", "content": "{"})));
    let mut pieces = vec![
        b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\ncontent-length: "
            .to_vec(),
    ];
    let stream = recorded_stream();
    pieces[0].extend(format!("{}\r\nconnection: close\r\n\r\n", stream.len()).into_bytes());
    pieces.push(stream);
    let server = serve(Reply::Pieces(pieces)).await;
    let events =
        collect(provider(&server.base_url, true).send(&request).await.expect("stream")).await;
    assert_eq!(assemble(&events).text, format!("{{{RECORDED_TEXT}"));
}
