//! The Bedrock paths, Converse and InvokeModel: a signed request gets a Converse body (or a
//! Messages body) or an event stream whose frames pass their CRC checks (InvokeModel's are
//! `chunk`s of Anthropic events); an unsigned one is refused as Bedrock refuses it; the error
//! faults carry Bedrock's types; `malformed` sends a frame whose CRC fails.

// Helpers of tests: failing loudly is their job.
#![allow(clippy::unwrap_used)]

use aws_smithy_eventstream::frame::read_message_from;
use aws_smithy_types::event_stream::{HeaderValue, Message};
use bytes::{Buf, Bytes};
use futures_util::StreamExt;
use rein_sim::healthy_text;
use serde_json::{Value, json};

use crate::support::*;

const PATH: &str = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse";
const SIGNED: &str = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20250101/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=0123";

fn converse_body(text: &str) -> Value {
    json!({
        "messages": [{"role": "user", "content": [{"text": text}]}],
        "inferenceConfig": {"maxTokens": 512}
    })
}

async fn converse(
    sim: &Sim,
    path: &str,
    body: &Value,
    fault: Option<&str>,
    signed: bool,
) -> reqwest::Response {
    let mut request = sim.client.post(sim.url(path)).json(body);
    if signed {
        request = request.header("authorization", SIGNED).header("x-amz-date", "20250101T000000Z");
    }
    if let Some(fault) = fault {
        request = request.header("x-sim-fault", fault);
    }
    request.send().await.unwrap()
}

async fn bytes_of(response: reqwest::Response) -> (Vec<u8>, bool) {
    let mut stream = response.bytes_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(_) => return (bytes, false),
        }
    }
    (bytes, true)
}

/// Splits a body into frames, each read (CRCs checked) or its error.
fn frames(bytes: &[u8]) -> Vec<Result<Message, String>> {
    let mut rest = Bytes::copy_from_slice(bytes);
    let mut out = Vec::new();
    while rest.remaining() >= 4 {
        let total = (&rest[..4]).get_u32() as usize;
        if rest.len() < total {
            out.push(Err("cut".to_owned()));
            break;
        }
        let frame = rest.split_to(total);
        out.push(read_message_from(frame).map_err(|e| e.to_string()));
    }
    out
}

fn header<'a>(message: &'a Message, name: &str) -> &'a str {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| match h.value() {
            HeaderValue::String(s) => Some(s.as_str()),
            _ => None,
        })
        .unwrap_or_default()
}

fn payload(message: &Message) -> Value {
    serde_json::from_slice(message.payload()).unwrap()
}

#[tokio::test]
async fn a_signed_converse_call_gets_a_converse_body() {
    let sim = sim().await;
    let body = converse_body("What is the capital of Norway?");
    let response = converse(&sim, PATH, &body, None, true).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-amzn-requestid"));
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["output"]["message"]["role"], "assistant");
    let text = value["output"]["message"]["content"][0]["text"].as_str().unwrap();
    // The same conversation gets the same answer on every path.
    let anthropic = json!({"model": "m", "max_tokens": 512, "messages": [{"role": "user", "content": "What is the capital of Norway?"}]});
    assert_eq!(text, healthy_text(&anthropic));
    assert_eq!(value["stopReason"], "end_turn");
    assert_eq!(value["usage"]["outputTokens"], token_count(text));
}

#[tokio::test]
async fn converse_stream_frames_pass_their_crcs_in_bedrock_order() {
    let sim = sim().await;
    let path = PATH.replace("/converse", "/converse-stream");
    let response = converse(&sim, &path, &converse_body("stream please"), None, true).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/vnd.amazon.eventstream"
    );
    let (bytes, clean) = bytes_of(response).await;
    assert!(clean);
    let messages: Vec<Message> = frames(&bytes).into_iter().map(Result::unwrap).collect();
    let types: Vec<&str> = messages.iter().map(|m| header(m, ":event-type")).collect();
    assert_eq!(types.first(), Some(&"messageStart"));
    assert_eq!(&types[types.len() - 3..], &["contentBlockStop", "messageStop", "metadata"]);
    assert!(types[1..types.len() - 3].iter().all(|t| *t == "contentBlockDelta"));
    let stop = messages.iter().find(|m| header(m, ":event-type") == "messageStop").unwrap();
    assert_eq!(payload(stop)["stopReason"], "end_turn");
}

#[tokio::test]
async fn an_unsigned_request_is_refused_as_bedrock_refuses_it() {
    let sim = sim().await;
    let response = converse(&sim, PATH, &converse_body("hi"), None, false).await;
    assert_eq!(response.status(), 403);
    assert!(
        response.headers()["x-amzn-errortype"]
            .to_str()
            .unwrap()
            .starts_with("MissingAuthenticationTokenException")
    );
}

#[tokio::test]
async fn error_faults_carry_bedrock_types() {
    let sim = sim().await;
    let cases = [
        ("429", 429, "ThrottlingException"),
        ("529", 503, "ServiceUnavailableException"),
        ("500", 500, "InternalServerException"),
        // Bedrock answers an expired token with 403, not 401.
        ("401", 403, "ExpiredTokenException"),
        ("403", 403, "AccessDeniedException"),
        ("context_length", 400, "ValidationException"),
    ];
    for (fault, status, error_type) in cases {
        let response = converse(&sim, PATH, &converse_body("hi"), Some(fault), true).await;
        assert_eq!(response.status(), status, "{fault}");
        let typed = response.headers()["x-amzn-errortype"].to_str().unwrap().to_owned();
        assert!(typed.starts_with(&format!("{error_type}:")), "{fault}: {typed}");
        let value: Value = response.json().await.unwrap();
        assert!(value["message"].as_str().is_some_and(|m| !m.is_empty()), "{fault}");
    }
}

#[tokio::test]
async fn stream_faults_break_the_frames() {
    let sim = sim().await;
    let path = PATH.replace("/converse", "/converse-stream");
    // A frame whose message CRC is wrong.
    let response =
        converse(&sim, &path, &converse_body("stream please"), Some("malformed:after=1"), true)
            .await;
    let (bytes, _) = bytes_of(response).await;
    let read = frames(&bytes);
    assert!(read.iter().any(Result::is_err), "a frame fails its CRC");
    // An exception frame mid-stream.
    let response =
        converse(&sim, &path, &converse_body("stream please"), Some("stream_error:after=1"), true)
            .await;
    let (bytes, _) = bytes_of(response).await;
    let last = frames(&bytes).pop().unwrap().unwrap();
    assert_eq!(header(&last, ":message-type"), "exception");
    assert_eq!(header(&last, ":exception-type"), "throttlingException");
    // A cut: no `messageStop`.
    let response =
        converse(&sim, &path, &converse_body("stream please"), Some("cut:after=1"), true).await;
    let (bytes, clean) = bytes_of(response).await;
    assert!(!clean);
    let read = frames(&bytes);
    assert!(!read.iter().flatten().any(|m| header(m, ":event-type") == "messageStop"));
}

const INVOKE: &str = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke";

/// AWS's documented InvokeModel body for Claude.
fn invoke_body(text: &str) -> Value {
    json!({
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 512,
        "messages": [{"role": "user", "content": text}]
    })
}

/// The Anthropic event a `chunk` frame carries.
fn chunk_event(message: &Message) -> Value {
    use base64::Engine as _;
    let encoded = payload(message)["bytes"].as_str().unwrap().to_owned();
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
    serde_json::from_slice(&decoded).unwrap()
}

#[tokio::test]
async fn a_signed_invoke_call_gets_a_messages_body() {
    let sim = sim().await;
    let response =
        converse(&sim, INVOKE, &invoke_body("What is the capital of Norway?"), None, true).await;
    assert_eq!(response.status(), 200);
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["type"], "message");
    assert!(value["id"].as_str().unwrap().starts_with("msg_bdrk_"), "{value}");
    let text = value["content"][0]["text"].as_str().unwrap();
    let anthropic = json!({"model": "m", "max_tokens": 512, "messages": [{"role": "user", "content": "What is the capital of Norway?"}]});
    assert_eq!(text, healthy_text(&anthropic));
    assert_eq!(value["stop_reason"], "end_turn");
    assert_eq!(value["usage"]["output_tokens"], token_count(text));
    // Without `anthropic_version`, Bedrock's validation error; unsigned, its 403.
    let mut bare = invoke_body("hi");
    bare.as_object_mut().unwrap().remove("anthropic_version");
    let response = converse(&sim, INVOKE, &bare, None, true).await;
    assert_eq!(response.status(), 400);
    assert!(
        response.headers()["x-amzn-errortype"]
            .to_str()
            .unwrap()
            .starts_with("ValidationException:")
    );
    let response = converse(&sim, INVOKE, &invoke_body("hi"), None, false).await;
    assert_eq!(response.status(), 403);
    // Error faults carry Bedrock's types on this path too.
    let response = converse(&sim, INVOKE, &invoke_body("hi"), Some("429"), true).await;
    assert_eq!(response.status(), 429);
    assert!(
        response.headers()["x-amzn-errortype"]
            .to_str()
            .unwrap()
            .starts_with("ThrottlingException:")
    );
}

#[tokio::test]
async fn invoke_stream_chunks_carry_anthropic_events_and_the_invocation_metrics() {
    let sim = sim().await;
    let path = format!("{INVOKE}-with-response-stream");
    let response = converse(&sim, &path, &invoke_body("stream please"), None, true).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/vnd.amazon.eventstream"
    );
    let (bytes, clean) = bytes_of(response).await;
    assert!(clean);
    let messages: Vec<Message> = frames(&bytes).into_iter().map(Result::unwrap).collect();
    assert!(messages.iter().all(|m| header(m, ":event-type") == "chunk"));
    let events: Vec<Value> = messages.iter().map(chunk_event).collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"message_start"));
    assert_eq!(&types[types.len() - 3..], &["content_block_stop", "message_delta", "message_stop"]);
    assert!(!types.contains(&"ping"));
    let text: String =
        events.iter().filter_map(|e| e.pointer("/delta/text").and_then(Value::as_str)).collect();
    let metrics = &events.last().unwrap()["amazon-bedrock-invocationMetrics"];
    assert_eq!(metrics["outputTokenCount"], token_count(&text));
    assert!(metrics["inputTokenCount"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn invoke_stream_faults_break_the_frames() {
    let sim = sim().await;
    let path = format!("{INVOKE}-with-response-stream");
    let body = invoke_body("stream please");
    let response = converse(&sim, &path, &body, Some("malformed:after=1"), true).await;
    let (bytes, _) = bytes_of(response).await;
    assert!(frames(&bytes).iter().any(Result::is_err), "a frame fails its CRC");
    let response = converse(&sim, &path, &body, Some("stream_error:after=1"), true).await;
    let (bytes, _) = bytes_of(response).await;
    let last = frames(&bytes).pop().unwrap().unwrap();
    assert_eq!(header(&last, ":message-type"), "exception");
    assert_eq!(header(&last, ":exception-type"), "throttlingException");
    let response = converse(&sim, &path, &body, Some("cut:after=1"), true).await;
    let (bytes, clean) = bytes_of(response).await;
    assert!(!clean);
    let read = frames(&bytes);
    assert!(!read.iter().flatten().any(|m| chunk_event(m)["type"] == "message_stop"));
}
