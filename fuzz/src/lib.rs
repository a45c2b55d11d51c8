//! Helpers shared by rein's fuzz targets: how a target's input bytes choose the chunks an SSE
//! body arrives in, and the event limit it is read against. The targets are in
//! `fuzz_targets/`; README.md says how to run them.

/// An SSE target's input, taken apart: the body and how to feed it.
#[derive(Debug)]
pub struct SseInput<'a> {
    /// The most bytes one event (or line) may hold.
    pub max_event_bytes: usize,
    /// The body, cut into the chunks it arrives in (joined, they are the body).
    pub chunks: Vec<&'a [u8]>,
    /// The body whole.
    pub body: &'a [u8],
}

/// The event limits an input may choose: the default most of the time, and small ones so the
/// fuzzer reaches the "event too large" paths with short inputs.
const EVENT_LIMITS: [usize; 4] = [4 * 1024 * 1024, 4 * 1024 * 1024, 48, 300];

/// Reads an SSE target's input: byte 0 picks the event limit (`EVENT_LIMITS`), byte 1 says how
/// many chunk lengths follow (0 to 7; none means one byte at a time), then the lengths (a
/// length may be 0: an empty chunk), then the body. The lengths are used in turn, over again,
/// until the body is all cut; the last chunk holds what is left.
pub fn sse_input(data: &[u8]) -> Option<SseInput<'_>> {
    let (&limit, rest) = data.split_first()?;
    let (&count, rest) = rest.split_first()?;
    let count = usize::from(count % 8);
    if rest.len() < count {
        return None;
    }
    let (lengths, body) = rest.split_at(count);
    let max_event_bytes = EVENT_LIMITS[usize::from(limit) % EVENT_LIMITS.len()];
    let mut chunks = Vec::new();
    let mut rest = body;
    let mut turn = 0usize;
    let mut empty_in_a_row = 0;
    while !rest.is_empty() {
        let length = match lengths.get(turn % lengths.len().max(1)) {
            Some(&length) => usize::from(length),
            None => 1,
        };
        turn += 1;
        // Lengths of only zeros would never end: after a round of them, take a byte.
        let length = if length == 0 && empty_in_a_row >= lengths.len() { 1 } else { length };
        empty_in_a_row = if length == 0 { empty_in_a_row + 1 } else { 0 };
        let (chunk, after) = rest.split_at(length.min(rest.len()));
        chunks.push(chunk);
        rest = after;
    }
    Some(SseInput { max_event_bytes, chunks, body })
}

/// Checks what the stream driver promises of any event list: nothing follows the first `Done`
/// or the first error.
pub fn assert_stops_at_done_or_error<E: std::fmt::Debug>(
    events: &[Result<rein_core::StreamEvent, E>],
) {
    if let Some(end) =
        events.iter().position(|event| matches!(event, Ok(rein_core::StreamEvent::Done) | Err(_)))
    {
        assert_eq!(end + 1, events.len(), "events after Done or an error: {events:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_join_to_the_body() {
        let data = [2u8, 3, 0, 2, 5, b'a', b'b', b'c', b'd', b'e', b'f', b'g', b'h', b'i', b'j'];
        let input = sse_input(&data).unwrap();
        assert_eq!(input.max_event_bytes, 48);
        assert_eq!(input.body, b"abcdefghij");
        assert_eq!(input.chunks, vec![&b""[..], b"ab", b"cdefg", b"", b"hi", b"j"]);
        let only_zeros = [0u8, 2, 0, 0, b'x', b'y'];
        let input = sse_input(&only_zeros).unwrap();
        assert_eq!(input.chunks.concat(), b"xy");
        let bytewise = sse_input(&[0, 0, b'x', b'y']).unwrap();
        assert_eq!(bytewise.chunks, vec![&b"x"[..], b"y"]);
    }
}
