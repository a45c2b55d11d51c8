//! What an open stream's call holds on the heap, counted by dhat's allocator. A test binary of
//! its own: the counting allocator is the whole binary's, and one profiler runs at a time.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use rein_core::*;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Answers with one text delta, then holds its stream open. Keeps nothing of the request, as an
/// adapter serializes what it needs before its send returns.
#[derive(Debug)]
struct Trickle;

impl Provider for Trickle {
    fn name(&self) -> &str {
        "trickle"
    }

    fn format(&self) -> WireFormat {
        WireFormat::OpenAi
    }

    fn send(&self, _: &ChatRequest) -> BoxFuture<'static, Result<EventStream, Failure>> {
        let first = futures_util::stream::iter([Ok(StreamEvent::TextDelta { text: "Hi".into() })]);
        Box::pin(async move { Ok(first.chain(futures_util::stream::pending()).boxed()) })
    }
}

/// A streamed call holds the caller's conversation once while the answer streams: the request
/// as the tier sends it is made for the provider's send and let go (each attempt kept it to its
/// end, a second copy of every message for as long as the stream was open).
#[tokio::test]
async fn an_open_stream_holds_its_conversation_once() {
    const MESSAGE: usize = 1 << 20;
    let _profiler = dhat::Profiler::builder().testing().build();
    let provider: Arc<dyn Provider> = Arc::new(Trickle);
    let mut route = Route::new("r", vec![Tier::new("primary", provider, "m".to_string())]);
    route.release = ReleaseMode::Passthrough;
    let engine = Engine::builder().route(route).build();

    let before = dhat::HeapStats::get().curr_bytes;
    let request = ChatRequest {
        messages: vec![Message::user("x".repeat(MESSAGE))],
        ..ChatRequest::default()
    };
    let mut stream = engine.stream(CallContext::new(), "r", request).unwrap();
    // The first token has reached the caller: the attempt is streaming.
    loop {
        match stream.next().await {
            Some(Released::Event(StreamEvent::TextDelta { .. })) => break,
            Some(Released::Event(_)) => {}
            other => panic!("the stream ended before its first token: {other:?}"),
        }
    }
    let held = dhat::HeapStats::get().curr_bytes - before;
    assert!(held >= MESSAGE, "the call's own request is {held} bytes");
    assert!(
        held < MESSAGE + MESSAGE / 4,
        "an open stream holds {held} bytes for a conversation of {MESSAGE}"
    );
    drop(stream);
}
