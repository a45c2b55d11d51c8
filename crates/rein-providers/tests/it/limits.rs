//! Response size limits through a real HTTP response: a JSON body that never ends, an endless
//! stream, one endless event, a `content-length` past the limit, and an endless error body all
//! end the attempt with a bounded read, and the server sees the connection go long before it
//! has written what it wanted to. Answers within the limits are read as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rein_core::failure::ResponseLimit;
use rein_core::{ChatRequest, Failure, Provider, StreamEvent};
use rein_providers::{ConfigError, OpenAiProvider, ResponseLimits};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::server::{chunk, read_request};
use crate::{anthropic_config, client, collect, openai_config};

/// Most bytes an endless server writes before it gives up by itself.
const SERVER_WRITES_AT_MOST: usize = 64 * 1024 * 1024;

const LIMITS: ResponseLimits =
    ResponseLimits { max_response_bytes: 256 * 1024, max_event_bytes: 16 * 1024 };

/// A server for one request: writes `head`, then `piece` as HTTP chunks until the client goes
/// away or [`SERVER_WRITES_AT_MOST`] is reached. Counts the body bytes it managed to write.
struct Endless {
    base_url: String,
    written: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Endless {
    async fn start(head: &'static str, opening: Vec<u8>, piece: Vec<u8>) -> Endless {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let written = Arc::new(AtomicUsize::new(0));
        let count = written.clone();
        let task = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            read_request(&mut stream).await;
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let mut first = Some(opening);
            while count.load(Ordering::Relaxed) < SERVER_WRITES_AT_MOST {
                let data = first.take().unwrap_or_else(|| piece.clone());
                if stream.write_all(&chunk(&data)).await.is_err() {
                    return;
                }
                count.fetch_add(data.len(), Ordering::Relaxed);
            }
        });
        Endless { base_url: format!("http://{addr}/v1"), written, task }
    }

    /// Waits for the server to stop (the client closed the connection) and returns how much
    /// it wrote.
    async fn finish(self) -> usize {
        self.task.await.unwrap();
        self.written.load(Ordering::Relaxed)
    }
}

const JSON_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

fn limited_openai(base_url: &str) -> OpenAiProvider {
    let mut config = openai_config(base_url);
    config.limits = LIMITS;
    OpenAiProvider::new(config, client()).unwrap()
}

fn too_large(limit: ResponseLimit, limit_bytes: usize) -> Failure {
    Failure::ResponseTooLarge { limit, limit_bytes: limit_bytes as u64 }
}

#[tokio::test]
async fn a_json_body_that_never_ends_fails_at_max_response_bytes() {
    let opening =
        br#"{"id":"c1","model":"m","choices":[{"index":0,"message":{"content":""#.to_vec();
    let server = Endless::start(JSON_HEAD, opening, vec![b'a'; 8192]).await;
    let provider = limited_openai(&server.base_url);
    let events = collect(provider.send(&ChatRequest::default()).await.unwrap()).await;
    assert_eq!(events, vec![Err(too_large(ResponseLimit::Response, LIMITS.max_response_bytes))]);
    drop(provider);
    let written = server.finish().await;
    assert!(written < SERVER_WRITES_AT_MOST, "the body was read to the end: {written} bytes");
}

#[tokio::test]
async fn an_endless_stream_fails_at_max_response_bytes_after_its_events() {
    let delta = br#"data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"la "}}]}

"#
    .to_vec();
    let server = Endless::start(SSE_HEAD, delta.clone(), delta.repeat(50)).await;
    let provider = limited_openai(&server.base_url);
    let events = collect(provider.send(&ChatRequest::default()).await.unwrap()).await;
    let (last, before) = events.split_last().unwrap();
    assert_eq!(last, &Err(too_large(ResponseLimit::Response, LIMITS.max_response_bytes)));
    assert!(before.iter().any(|e| matches!(e, Ok(StreamEvent::TextDelta { .. }))));
    let text_bytes: usize = before
        .iter()
        .map(|e| match e {
            Ok(StreamEvent::TextDelta { text }) => text.len(),
            _ => 0,
        })
        .sum();
    assert!(text_bytes < LIMITS.max_response_bytes, "{text_bytes}");
    drop(provider);
    assert!(server.finish().await < SERVER_WRITES_AT_MOST);
}

#[tokio::test]
async fn one_endless_event_fails_at_max_event_bytes() {
    // A `data:` line that never ends.
    let server = Endless::start(SSE_HEAD, b"data: {\"x\":\"".to_vec(), vec![b'x'; 4096]).await;
    let provider = limited_openai(&server.base_url);
    let events = collect(provider.send(&ChatRequest::default()).await.unwrap()).await;
    assert_eq!(events, vec![Err(too_large(ResponseLimit::Event, LIMITS.max_event_bytes))]);
    drop(provider);
    assert!(server.finish().await < SERVER_WRITES_AT_MOST);

    // Short `data:` lines that never reach the blank line ending their event.
    let server =
        Endless::start(SSE_HEAD, b"data: x\n".to_vec(), b"data: xxxxxxxx\n".repeat(100)).await;
    let provider = limited_openai(&server.base_url);
    let events = collect(provider.send(&ChatRequest::default()).await.unwrap()).await;
    assert_eq!(events, vec![Err(too_large(ResponseLimit::Event, LIMITS.max_event_bytes))]);
    drop(provider);
    assert!(server.finish().await < SERVER_WRITES_AT_MOST);
}

#[tokio::test]
async fn a_declared_length_past_the_limit_fails_before_reading() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        read_request(&mut stream).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000000\r\n\r\n{";
        stream.write_all(head.as_bytes()).await.unwrap();
        // Hold the connection open: only the headers can end this attempt.
        let mut rest = [0u8; 16];
        let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut rest).await;
    });
    let provider = limited_openai(&format!("http://{addr}/v1"));
    match provider.send(&ChatRequest::default()).await {
        Err(failure) => {
            assert_eq!(failure, too_large(ResponseLimit::Response, LIMITS.max_response_bytes))
        }
        Ok(_) => panic!("a body declared past the limit must fail at the headers"),
    }
    drop(provider);
    server.await.unwrap();
}

#[tokio::test]
async fn an_endless_error_body_is_read_only_up_to_a_small_bound() {
    let head = "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/html\r\ntransfer-encoding: chunked\r\n\r\n";
    let server = Endless::start(head, b"<html>".to_vec(), vec![b'e'; 8192]).await;
    // Default limits: the error body has its own bound whatever they are.
    let provider = rein_providers::AnthropicProvider::new(
        anthropic_config(&server.base_url.replace("/v1", "")),
        client(),
    )
    .unwrap();
    let failure = match provider.send(&ChatRequest::default()).await {
        Err(failure) => failure,
        Ok(_) => panic!("a 500 is a failure"),
    };
    let Failure::Http { http, .. } = &failure else { panic!("expected Http, got {failure:?}") };
    assert_eq!(http.status, 500);
    assert!(http.message.len() < 4096, "the message is truncated: {}", http.message.len());
    drop(provider);
    assert!(server.finish().await < SERVER_WRITES_AT_MOST);
}

#[tokio::test]
async fn answers_within_the_limits_are_read_whole() {
    let body = br#"{"id":"c1","model":"m","choices":[{"index":0,"message":{"content":"It shipped."},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
    let server = crate::server::serve(crate::server::Reply::Pieces(vec![crate::server::response(
        200,
        &[("content-type", "application/json")],
        body,
    )]))
    .await;
    let mut config = openai_config(&server.base_url);
    config.limits = ResponseLimits { max_response_bytes: body.len(), max_event_bytes: 1 };
    let provider = OpenAiProvider::new(config, client()).unwrap();
    let events = collect(provider.send(&ChatRequest::default()).await.unwrap()).await;
    assert_eq!(crate::assemble(&events).text, "It shipped.");
}

#[test]
fn limits_that_cannot_hold_an_answer_are_refused_by_key() {
    for (max_response_bytes, max_event_bytes) in [(0, 0), (1024, 0), (1024, 2048)] {
        let mut config = openai_config("http://127.0.0.1:9/v1");
        config.limits = ResponseLimits { max_response_bytes, max_event_bytes };
        let error = OpenAiProvider::new(config, client()).unwrap_err();
        assert!(matches!(error, ConfigError::InvalidLimits { .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.contains("max_response_bytes") && text.contains("max_event_bytes"), "{text}");
    }
}
