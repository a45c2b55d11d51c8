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

/// Decodes a body arriving in the given chunks with the given event limit.
type Replay = fn(&[&[u8]], usize) -> Vec<Result<StreamEvent, Failure>>;

/// A fuzz finding replayed whole and in five-byte chunks (as the fuzz target cut it) with a
/// 300-byte event limit: the events must be the same, and end refusing the long line.
fn same_events_however_cut(replay: Replay, body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    let whole = replay(&[body], 300);
    let cut: Vec<&[u8]> = body.chunks(5).collect();
    assert_eq!(whole, replay(&cut, 300));
    let too_large = Failure::ResponseTooLarge {
        limit: rein_core::failure::ResponseLimit::Event,
        limit_bytes: 300,
    };
    assert_eq!(whole.last(), Some(&Err(too_large)), "{whole:?}");
    whole
}

/// Found by the `openai_sse` fuzz target: a 370-byte line that is not UTF-8 was refused as not
/// UTF-8 when it came in one chunk and as too large when cut; the length is checked first.
#[test]
fn fuzz_openai_sse_a_long_line_not_utf8_is_too_large_however_cut() {
    let body = include_bytes!("../fixtures/fuzz/openai_sse-a-long-line-not-utf8.sse");
    let events = same_events_however_cut(rein_providers::replay_openai_stream_chunks, body);
    assert_eq!(events.len(), 1);
}

/// Found by the `anthropic_sse` fuzz target: a 350-byte line (a field no decoder reads) passed
/// when it came whole in one chunk and was refused when cut; now it is refused either way.
#[test]
fn fuzz_anthropic_sse_a_long_line_in_one_chunk_is_refused_as_when_cut() {
    let body = include_bytes!("../fixtures/fuzz/anthropic_sse-a-long-line-in-one-chunk.sse");
    same_events_however_cut(rein_providers::replay_anthropic_stream_chunks, body);
}
