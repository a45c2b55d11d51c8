//! Turns a response body into the attempt's [`EventStream`]. Streaming bodies go bytes →
//! [`SseParser`] → a format [`Decoder`] → events; a JSON body (non-streaming mode, or a
//! compatible server that ignored `stream: true`) is read whole and replayed through
//! [`ChatResponse::to_events`], so both paths yield the same events.
//!
//! Every body is read against the provider's [`ResponseLimits`]: past `max_response_bytes` in
//! all, or `max_event_bytes` in one event, the attempt ends with
//! [`Failure::ResponseTooLarge`] and the rest of the body is never read (dropping it closes the
//! connection). When the request prefilled the answer (Anthropic's `{` for `json_object`), the
//! prefill is put back in front of the answer's text, so the answer reads as the model wrote it.
//!
//! The stream stops at the first `Done` or `Err`. When the bytes simply end it ends too,
//! without inventing a `Done`: the engine decides whether the answer was complete. A final
//! record cut in half by the connection is dropped rather than reported as malformed, since
//! the cut, not the chunk, is what went wrong.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};

use rein_core::failure::ResponseLimit;
use rein_core::{ChatResponse, EventStream, Failure, StreamEvent, WireFormat};

use crate::config::ResponseLimits;
use crate::secret::Redactor;
use crate::sse::{SseError, SseEvent, SseParser};

/// A body as the adapters see it: chunks, or the failure that ended it.
pub(crate) type Body = BoxStream<'static, Result<Bytes, Failure>>;

/// Interprets one SSE record of a provider's stream.
pub(crate) trait Decoder: Send + Unpin + 'static {
    /// Appends the record's events to `events`. On a failure, what was appended is dropped.
    fn decode(
        &mut self,
        record: &SseEvent<'_>,
        events: &mut Vec<StreamEvent>,
    ) -> Result<(), Failure>;
}

/// How an adapter wants one response read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reading {
    pub limits: ResponseLimits,
    /// Text the request put at the start of the answer (an assistant prefill): the provider
    /// answers with what follows it, so it goes back in front of the answer's text.
    pub prefill: Option<&'static str>,
    /// The provider's secrets, scrubbed from every failure read.
    pub redactor: Redactor,
}

impl Reading {
    /// The failure for a body longer than `max_response_bytes`.
    pub(crate) fn too_large(&self) -> Failure {
        Failure::ResponseTooLarge {
            limit: ResponseLimit::Response,
            limit_bytes: self.limits.max_response_bytes as u64,
        }
    }
}

/// Turns response headers into the attempt's outcome: an error status becomes
/// [`Failure::Http`]; a success becomes the event stream, SSE or JSON by `content-type`
/// (falling back to what was asked for), so a compatible server that ignores `stream: true`
/// still works. A success whose `content-length` already exceeds `max_response_bytes` fails
/// at once, unread. Every failure, then or later in the stream, has the provider's secrets
/// scrubbed from it.
pub(crate) async fn response_events<D: Decoder>(
    provider: &str,
    response: crate::client::Upstream,
    format: WireFormat,
    streaming: bool,
    decoder: D,
    parse: JsonParser,
    reading: Reading,
) -> Result<EventStream, Failure> {
    let crate::client::Upstream { status, headers, body } = response;
    if !status.is_success() {
        let body = crate::client::read_error_body(body).await;
        let http = crate::parse_http_error(format, status.as_u16(), &headers, &body);
        tracing::debug!(provider, status = http.status, error_type = ?http.error_type, code = ?http.code, "provider error response");
        return Err(reading.redactor.failure(Failure::Http { format, http }));
    }
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > reading.limits.max_response_bytes as u64) {
        tracing::debug!(provider, length = ?declared, "provider response larger than max_response_bytes");
        return Err(reading.too_large());
    }
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let sse = if content_type.starts_with("text/event-stream") {
        true
    } else if content_type.starts_with("application/json") {
        false
    } else {
        streaming
    };
    if sse {
        // Scrubs its own failures: an open stream keeps one box, not a second around it.
        return Ok(sse_events(body, decoder, reading));
    }
    let redactor = reading.redactor.clone();
    let events = json_events(body, parse, reading);
    // Only a failure is scrubbed: the closure runs for nothing else.
    Ok(events.map(move |item| item.map_err(|failure| redactor.failure(failure))).boxed())
}

/// The synchronous core shared by live streams and recorded replays.
struct Pump<D> {
    parser: SseParser,
    decoder: D,
    /// Events decoded, those from `taken` on not yet taken: the decoders append a record's
    /// events here, so a stream keeps one vector of them (its room stays while the stream is
    /// open) and an event is not moved from one to another. Emptied once all are taken.
    pending: Vec<StreamEvent>,
    taken: usize,
    /// The failure that ended the stream, if one did, handed on after the events. Apart, so a
    /// slot is an event's size, not a failure's; boxed, since a stream keeps the pump to its
    /// end and most never fail.
    failure: Option<Box<Failure>>,
    done: bool,
    reading: Reading,
    /// Bytes pushed so far.
    received: usize,
}

impl<D: Decoder> Pump<D> {
    fn new(decoder: D, reading: Reading) -> Self {
        Self {
            parser: SseParser::new(reading.limits.max_event_bytes),
            decoder,
            pending: Vec::new(),
            taken: 0,
            failure: None,
            done: false,
            reading,
            received: 0,
        }
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        self.received = self.received.saturating_add(bytes.len());
        if self.received > self.reading.limits.max_response_bytes {
            let failure = self.reading.too_large();
            self.fail(failure);
            return;
        }
        let Self { parser, decoder, pending, failure, done, reading, .. } = self;
        let mut out = Out { pending, failure, done };
        let parsed =
            parser.push_with(bytes, |record| dispatch(decoder, &mut out, reading, &record));
        if let Err(error) = parsed
            && !self.done
        {
            let failure = match error {
                SseError::InvalidUtf8 => {
                    Failure::Malformed { detail: "stream line is not UTF-8".to_owned() }
                }
                SseError::EventTooLarge => Failure::ResponseTooLarge {
                    limit: ResponseLimit::Event,
                    limit_bytes: self.reading.limits.max_event_bytes as u64,
                },
            };
            self.fail(failure);
        }
    }

    fn finish(&mut self) {
        let Self { parser, decoder, pending, failure, done, reading, .. } = self;
        let mut out = Out { pending, failure, done };
        let parsed = parser.finish_with(|record| dispatch(decoder, &mut out, reading, &record));
        if parsed.is_err() {
            // The last, unterminated line was cut inside a multi-byte character.
            tracing::debug!("dropped a truncated final stream line");
        }
        self.done = true;
    }

    fn fail(&mut self, failure: Failure) {
        self.failure.get_or_insert_with(|| Box::new(failure));
        self.done = true;
    }

    /// The next item to hand on: the events in order, then the failure.
    fn next_item(&mut self) -> Option<Result<StreamEvent, Failure>> {
        let Some(slot) = self.pending.get_mut(self.taken) else {
            return self.failure.take().map(|failure| Err(*failure));
        };
        // `Done` holds nothing: it takes the taken event's place until the vector is emptied.
        let event = std::mem::replace(slot, StreamEvent::Done);
        self.taken += 1;
        if self.taken == self.pending.len() {
            self.pending.clear();
            self.taken = 0;
        }
        Some(Ok(event))
    }

    /// Every item left, in order.
    fn into_items(mut self) -> Vec<Result<StreamEvent, Failure>> {
        std::iter::from_fn(|| self.next_item()).collect()
    }
}

/// Where a record's events go: the pump's queue, its failure and whether it is done.
struct Out<'a> {
    pending: &'a mut Vec<StreamEvent>,
    failure: &'a mut Option<Box<Failure>>,
    done: &'a mut bool,
}

/// Decodes one record into `out`; nothing once the stream is done.
fn dispatch<D: Decoder>(
    decoder: &mut D,
    out: &mut Out<'_>,
    reading: &mut Reading,
    record: &SseEvent<'_>,
) {
    if *out.done {
        return;
    }
    let at = out.pending.len();
    let decoded = decoder.decode(record, out.pending);
    if decoded.is_err() {
        // A failed record's events are not the stream's.
        out.pending.truncate(at);
    }
    match decoded {
        Ok(()) => {
            // Nothing after `[DONE]` is the stream's.
            let mut end = None;
            for (i, event) in out.pending[at..].iter_mut().enumerate() {
                if let StreamEvent::TextDelta { text } = event
                    && let Some(prefill) = reading.prefill.take()
                {
                    text.insert_str(0, prefill);
                }
                if *event == StreamEvent::Done {
                    end = Some(at + i + 1);
                    break;
                }
            }
            if let Some(end) = end {
                out.pending.truncate(end);
                *out.done = true;
            }
        }
        Err(Failure::Malformed { .. }) if !record.terminated => {
            tracing::debug!("dropped a truncated final stream record");
            *out.done = true;
        }
        Err(failure) => {
            out.failure.get_or_insert_with(|| Box::new(failure));
            *out.done = true;
        }
    }
}

/// The events of a live SSE body, each failure scrubbed of the provider's secrets.
pub(crate) fn sse_events<D: Decoder>(body: Body, decoder: D, reading: Reading) -> EventStream {
    SseEvents { body, pump: Pump::new(decoder, reading) }.boxed()
}

/// A live SSE body and its pump, polled in place: each event is handed on without moving the
/// pump's state in and out of a future, as a stream built by `unfold` would.
struct SseEvents<D> {
    body: Body,
    pump: Pump<D>,
}

impl<D: Decoder> Stream for SseEvents<D> {
    type Item = Result<StreamEvent, Failure>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.pump.next_item() {
                let redactor = &this.pump.reading.redactor;
                return Poll::Ready(Some(item.map_err(|failure| redactor.failure(failure))));
            }
            if this.pump.done {
                return Poll::Ready(None);
            }
            match ready!(this.body.poll_next_unpin(cx)) {
                Some(Ok(bytes)) => this.pump.push_bytes(&bytes),
                Some(Err(failure)) => this.pump.fail(failure),
                None => this.pump.finish(),
            }
        }
    }
}

/// The events of a recorded SSE body, decoded the way a live one would be.
pub(crate) fn replay_sse<D: Decoder>(
    bytes: &[u8],
    decoder: D,
) -> Vec<Result<StreamEvent, Failure>> {
    let mut pump = Pump::new(decoder, Reading::default());
    pump.push_bytes(bytes);
    if !pump.done {
        pump.finish();
    }
    pump.into_items()
}

/// The events of a recorded SSE body that arrives in `chunks`, with `max_event_bytes` per event,
/// decoded the way a live body cut into those chunks would be. For the fuzz targets.
pub(crate) fn replay_sse_chunks<D: Decoder>(
    chunks: &[&[u8]],
    max_event_bytes: usize,
    decoder: D,
) -> Vec<Result<StreamEvent, Failure>> {
    let limits = ResponseLimits { max_event_bytes, ..ResponseLimits::default() };
    let mut pump = Pump::new(decoder, Reading { limits, ..Reading::default() });
    for chunk in chunks {
        if pump.done {
            break;
        }
        pump.push_bytes(chunk);
    }
    if !pump.done {
        pump.finish();
    }
    pump.into_items()
}

/// Parses a whole (non-streaming) JSON answer.
pub(crate) type JsonParser = fn(&[u8]) -> Result<ChatResponse, Failure>;

/// The events of a JSON body: read it whole (up to `max_response_bytes`), parse it, replay it
/// as a stream would carry it.
pub(crate) fn json_events(body: Body, parse: JsonParser, reading: Reading) -> EventStream {
    stream::once(async move {
        // Most bodies arrive in one chunk, which is parsed where it lies.
        let mut first: Option<Bytes> = None;
        let mut bytes = Vec::new();
        let mut received = 0usize;
        let mut body = body;
        while let Some(chunk) = body.next().await {
            if let Ok(chunk) = &chunk {
                received = received.saturating_add(chunk.len());
                if received > reading.limits.max_response_bytes {
                    // Dropping the body here stops the download.
                    return vec![Err(reading.too_large())];
                }
            }
            match chunk {
                Ok(chunk) => match first.take() {
                    None if bytes.is_empty() => first = Some(chunk),
                    held => {
                        if let Some(held) = held {
                            bytes.extend_from_slice(&held);
                        }
                        bytes.extend_from_slice(&chunk);
                    }
                },
                Err(failure) => return vec![Err(failure)],
            }
        }
        match first {
            Some(whole) => read_json(&whole, parse, reading.prefill),
            None => read_json(&bytes, parse, reading.prefill),
        }
    })
    .flat_map(stream::iter)
    .boxed()
}

pub(crate) fn replay_json(bytes: &[u8], parse: JsonParser) -> Vec<Result<StreamEvent, Failure>> {
    read_json(bytes, parse, None)
}

fn read_json(
    bytes: &[u8],
    parse: JsonParser,
    prefill: Option<&str>,
) -> Vec<Result<StreamEvent, Failure>> {
    match parse(bytes) {
        Ok(mut response) => {
            if let Some(prefill) = prefill
                && !response.text.is_empty()
            {
                response.text.insert_str(0, prefill);
            }
            response.into_events().into_iter().map(Ok).collect()
        }
        Err(failure) => vec![Err(failure)],
    }
}

/// A `Malformed` failure naming what could not be read; the chunk itself is not quoted, since
/// it may carry the user's conversation.
pub(crate) fn malformed(what: &str, error: &serde_json::Error) -> Failure {
    Failure::Malformed { detail: format!("{what}: {error}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anthropic::AnthropicDecoder;
    use crate::openai::OpenAiDecoder;

    /// A live stream's reader is kept, boxed, for as long as the stream is open: it stays
    /// inside mimalloc's 448-byte class (it was 592 bytes, with the rare failure kept in line
    /// and a second vector of events).
    #[test]
    fn an_open_streams_reader_stays_small() {
        let size = std::mem::size_of::<SseEvents<OpenAiDecoder>>();
        assert!(size <= 448, "an OpenAI stream's reader is {size} bytes");
    }

    /// A JSON body parses the same whether it arrives whole or in pieces of any size.
    #[tokio::test]
    async fn a_json_body_in_pieces_is_the_body_whole() {
        let body: &[u8] = br#"{"id":"c1","model":"m","choices":[{"index":0,"message":{"content":"It shipped."},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        let parse = crate::openai::parse_openai_response;
        let whole = replay_json(body, parse);
        assert!(whole.contains(&Ok(StreamEvent::TextDelta { text: "It shipped.".into() })));
        for size in [1, 7, 64, body.len()] {
            let pieces: Vec<Result<Bytes, Failure>> =
                body.chunks(size).map(|piece| Ok(Bytes::copy_from_slice(piece))).collect();
            let events: Vec<_> =
                json_events(stream::iter(pieces).boxed(), parse, Reading::default())
                    .collect()
                    .await;
            assert_eq!(events, whole, "pieces of {size}");
        }
    }

    fn pumped<D: Decoder>(
        bytes: &[u8],
        size: usize,
        decoder: D,
    ) -> Vec<Result<StreamEvent, Failure>> {
        let mut pump = Pump::new(decoder, Reading::default());
        for piece in bytes.chunks(size) {
            if pump.done {
                break;
            }
            pump.push_bytes(piece);
        }
        if !pump.done {
            pump.finish();
        }
        pump.into_items()
    }

    macro_rules! fixture {
        ($path:literal) => {
            include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/", $path))
                .as_slice()
        };
    }

    #[test]
    fn chunk_boundaries_do_not_change_the_events() {
        let openai = [
            fixture!("openai/streams/parallel_tool_calls.sse"),
            fixture!("openai/streams/padded_compatible.sse"),
            fixture!("openai/streams/mid_stream_error.sse"),
        ];
        let anthropic = [
            fixture!("anthropic/streams/basic.sse"),
            fixture!("anthropic/streams/thinking.sse"),
            fixture!("anthropic/streams/padded_unknown_events.sse"),
        ];
        for size in [1, 2, 3, 7, 64, 1000] {
            for bytes in openai {
                let whole = replay_sse(bytes, OpenAiDecoder::default());
                assert_eq!(pumped(bytes, size, OpenAiDecoder::default()), whole, "size {size}");
            }
            for bytes in anthropic {
                let whole = replay_sse(bytes, AnthropicDecoder::default());
                assert_eq!(pumped(bytes, size, AnthropicDecoder::default()), whole, "size {size}");
            }
        }
    }
}
