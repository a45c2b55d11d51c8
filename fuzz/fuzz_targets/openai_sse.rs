//! The Chat Completions SSE decoder (the shared SSE line parser, the OpenAI chunk decoder and
//! the stream driver), fed arbitrary bytes in chunks the input chooses: it must never panic,
//! the events must not depend on how the body was cut, and nothing may follow `Done` or an
//! error. The same bytes also go through the non-streaming answer's parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein_fuzz::{assert_stops_at_done_or_error, sse_input};
use rein_providers::replay_openai_stream_chunks;

fuzz_target!(|data: &[u8]| {
    let Some(input) = sse_input(data) else {
        return;
    };
    let whole = replay_openai_stream_chunks(&[input.body], input.max_event_bytes);
    let cut = replay_openai_stream_chunks(&input.chunks, input.max_event_bytes);
    assert_eq!(whole, cut, "the events depend on the chunks {:?}", input.chunks);
    assert_stops_at_done_or_error(&whole);
    // The same bytes as a non-streaming answer: its direct reader is checked against serde.
    let _ = rein_providers::replay_openai_response(input.body);
});
