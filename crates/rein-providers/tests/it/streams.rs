//! SSE streams end to end through a real HTTP response: the events equal the recorded
//! replay whatever the chunking, and the stream stops at `Done` or the first failure.

use rein_core::{ChatRequest, Failure, Provider, StreamEvent, WireFormat};
use rein_providers::{replay_anthropic_stream, replay_openai_stream};

use crate::server::{Reply, serve, sse_response};
use crate::{anthropic, collect, fixture, openai};

#[tokio::test]
async fn openai_stream_end_to_end_matches_the_replay() {
    let body = fixture("openai/streams/parallel_tool_calls.sse");
    // Ten pieces: chunk boundaries fall inside lines and inside JSON.
    let server = serve(Reply::Pieces(sse_response(&body, 10))).await;
    let events =
        collect(openai(&server.base_url).send(&ChatRequest::default()).await.unwrap()).await;
    assert_eq!(events, replay_openai_stream(&body));
    assert_eq!(events.last(), Some(&Ok(StreamEvent::Done)));
}

#[tokio::test]
async fn anthropic_stream_end_to_end_matches_the_replay() {
    let body = fixture("anthropic/streams/thinking.sse");
    let server = serve(Reply::Pieces(sse_response(&body, 7))).await;
    let events =
        collect(anthropic(&server.base_url).send(&ChatRequest::default()).await.unwrap()).await;
    assert_eq!(events, replay_anthropic_stream(&body));
    assert_eq!(events.last(), Some(&Ok(StreamEvent::Done)));
}

#[tokio::test]
async fn mid_stream_error_events_end_to_end() {
    let body = fixture("anthropic/streams/mid_stream_error.sse");
    let server = serve(Reply::Pieces(sse_response(&body, 3))).await;
    let events =
        collect(anthropic(&server.base_url).send(&ChatRequest::default()).await.unwrap()).await;
    assert!(matches!(
        events.last(),
        Some(Err(Failure::StreamError { format: WireFormat::Anthropic, .. }))
    ));

    let body = fixture("openai/streams/mid_stream_error.sse");
    let server = serve(Reply::Pieces(sse_response(&body, 3))).await;
    let events =
        collect(openai(&server.base_url).send(&ChatRequest::default()).await.unwrap()).await;
    assert!(matches!(
        events.last(),
        Some(Err(Failure::StreamError { format: WireFormat::OpenAi, .. }))
    ));
}

#[tokio::test]
async fn nothing_is_read_after_done() {
    // Junk after the terminator must not surface as a failure.
    let mut body = fixture("openai/streams/length.sse");
    body.extend_from_slice(b"data: {garbage\n\n");
    let server = serve(Reply::Pieces(sse_response(&body, 2))).await;
    let events =
        collect(openai(&server.base_url).send(&ChatRequest::default()).await.unwrap()).await;
    assert_eq!(events.last(), Some(&Ok(StreamEvent::Done)));
    assert!(events.iter().all(Result::is_ok));
}
