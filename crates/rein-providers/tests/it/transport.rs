//! Transport failures: nothing listening, a reset before the response headers, a connect that
//! never completes, and streams that break off after the headers.

use std::time::Duration;

use rein_core::{ChatRequest, Clock, Failure, Provider, StreamEvent};
use rein_providers::{HttpClient, HttpClientConfig, OpenAiProvider};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::server::{Reply, chunk, serve, sse_head};
use crate::{anthropic, collect, fixture, openai, openai_config};

fn expect_failure(result: Result<rein_core::EventStream, Failure>) -> Failure {
    match result {
        Err(failure) => failure,
        Ok(_) => panic!("expected a failure before headers, got a stream"),
    }
}

#[tokio::test]
async fn connection_refused_is_a_connection_failure() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let failure =
        expect_failure(openai(&format!("http://{addr}/v1")).send(&ChatRequest::default()).await);
    match failure {
        Failure::Connection { detail } => {
            assert!(!detail.is_empty());
            assert!(!detail.contains("http://"), "no URL in the detail: {detail}");
        }
        other => panic!("expected Connection, got {other:?}"),
    }
}

#[tokio::test]
async fn reset_before_headers_is_a_connection_failure() {
    let server = serve(Reply::Reset).await;
    let failure = expect_failure(anthropic(&server.base_url).send(&ChatRequest::default()).await);
    assert!(matches!(failure, Failure::Connection { .. }), "{failure:?}");
    // The request was fully sent before the reset.
    assert_eq!(server.captured().await.request_line, "POST /v1/messages HTTP/1.1");
}

#[tokio::test]
async fn stream_cut_mid_chunk_yields_stream_cut_without_done() {
    let body = fixture("openai/streams/text_with_logprobs.sse");
    let half = body.len() / 2;
    // Chunked encoding never terminated, then a clean close: the body is incomplete.
    let server = serve(Reply::Pieces(vec![sse_head(), chunk(&body[..half])])).await;
    let events =
        collect(openai(&server.base_url).send(&ChatRequest::default()).await.unwrap()).await;
    assert!(matches!(events.first(), Some(Ok(StreamEvent::Start { .. }))), "{events:?}");
    assert_eq!(events.last(), Some(&Err(Failure::StreamCut)));
    assert!(!events.contains(&Ok(StreamEvent::Done)));
}

#[tokio::test]
async fn reset_mid_stream_yields_stream_cut() {
    let body = fixture("anthropic/streams/basic.sse");
    let server = serve(Reply::PiecesThenReset(vec![sse_head(), chunk(&body[..400])])).await;
    let events =
        collect(anthropic(&server.base_url).send(&ChatRequest::default()).await.unwrap()).await;
    assert!(matches!(events.first(), Some(Ok(StreamEvent::Start { .. }))), "{events:?}");
    assert_eq!(events.last(), Some(&Err(Failure::StreamCut)));
}

#[tokio::test]
async fn close_delimited_body_ending_early_just_ends() {
    // No length, no chunking: the body ends when the connection closes, which HTTP calls a
    // complete body. The stream ends without Done and without an error; the engine decides.
    let body = fixture("anthropic/streams/tool_use.sse");
    let cut = body.len() - 200;
    let head =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n".to_vec();
    let server = serve(Reply::Pieces(vec![head, body[..cut].to_vec()])).await;
    let events =
        collect(anthropic(&server.base_url).send(&ChatRequest::default()).await.unwrap()).await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    assert!(!events.contains(&Ok(StreamEvent::Done)));
    assert!(events.len() > 5);
}

#[tokio::test]
async fn connect_timeout_fires_the_connect_clock() {
    // A listener whose accept queue is full drops new SYNs, so the connect hangs.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(stream)) =
            tokio::time::timeout(Duration::from_millis(20), TcpStream::connect(addr)).await
        {
            fillers.push(stream);
        }
    }
    let config = HttpClientConfig { connect_timeout_ms: 50, ..HttpClientConfig::default() };
    let client = HttpClient::new(&config).unwrap();
    let provider =
        OpenAiProvider::new(openai_config(&format!("http://{addr}/v1")), client).unwrap();
    let failure = expect_failure(provider.send(&ChatRequest::default()).await);
    assert_eq!(
        failure,
        Failure::ClockFired { clock: Clock::Connect, after: Duration::from_millis(50) }
    );
    drop(listener);
}
