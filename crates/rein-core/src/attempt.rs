//! One attempt against one tier, bounded by the per-attempt clocks.
//!
//! The first-token clock runs from sending the request until the first piece of the answer
//! (queueing and prompt reading included, so an overloaded provider shows here first); the idle
//! clock runs between events after that; the attempt cap bounds the whole. An answer whose stop
//! reason has arrived is complete even if the terminator never comes: it is finalised when the
//! stream ends or goes idle. A stream that ends without a stop reason is cut off and fails.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use tokio::time::{Instant, timeout_at};

use crate::failure::{Clock, Failure};
use crate::model::{ChatResponse, ResponseBuilder, StreamEvent};
use crate::provider::EventStream;
use crate::release::{Relay, Released};

/// The clocks of one attempt, already cut to what the deadline leaves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptClocks {
    pub first_token: Duration,
    pub stream_idle: Duration,
    pub cap: Duration,
}

/// Forwards a passthrough stream's events to the caller as they arrive. Events before the first
/// piece of content are held, so an attempt that fails before its first token leaves no trace.
#[derive(Debug)]
pub(crate) struct Forwarder {
    tx: Relay,
    held: Vec<StreamEvent>,
    forwarded: bool,
    /// The text that reached the caller: what a continuation carries on from (kept only when
    /// the route continues broken streams).
    sent: String,
    keep_text: bool,
    /// Only text reached the caller (no tool call, thinking or refusal), so a later tier can
    /// continue it.
    only_text: bool,
    /// A later tier continues the answer: its opening event is not sent again.
    continuing: bool,
}

impl Forwarder {
    /// `keep_text`: remember the text sent, for a continuation.
    pub(crate) fn new(tx: Relay, keep_text: bool) -> Self {
        Self {
            tx,
            held: Vec::new(),
            forwarded: false,
            sent: String::new(),
            keep_text,
            only_text: true,
            continuing: false,
        }
    }

    /// The text the caller has, when a later tier could continue from it: something reached
    /// the caller, and all of it text.
    pub(crate) fn continuable(&self) -> Option<&str> {
        (self.forwarded && self.only_text && !self.sent.is_empty()).then_some(self.sent.as_str())
    }

    /// From now on the events come from a tier that continues the answer.
    pub(crate) fn continue_answer(&mut self) {
        self.continuing = true;
    }

    /// A later tier is continuing the answer.
    pub(crate) fn continuing(&self) -> bool {
        self.continuing
    }

    /// Everything the caller was sent as text, the continued part included.
    pub(crate) fn sent_text(&self) -> &str {
        &self.sent
    }

    fn send(&mut self, event: StreamEvent) {
        match &event {
            StreamEvent::TextDelta { text } if self.keep_text => self.sent.push_str(text),
            StreamEvent::ThinkingDelta { .. }
            | StreamEvent::RefusalDelta { .. }
            | StreamEvent::ToolCallStart { .. }
            | StreamEvent::ToolCallDelta { .. } => self.only_text = false,
            _ => {}
        }
        self.tx.put(Released::Event(event));
    }

    /// Whether any event has reached the caller (after which a failure cannot be hidden).
    pub(crate) fn forwarded(&self) -> bool {
        self.forwarded
    }

    /// A new attempt starts: drop whatever the failed one held back.
    fn reset(&mut self) {
        self.held.clear();
    }

    /// Takes the attempt's next event: held, dropped or sent on. Sending never waits here (the
    /// attempt waits for room after the event, [`Forwarder::room`]), so an attempt's state
    /// holds no send in progress, a few hundred bytes of each open stream.
    fn push(&mut self, event: StreamEvent) {
        if matches!(event, StreamEvent::Done) {
            return;
        }
        // The caller's stream has begun already: a continuing tier's start is not news.
        if self.continuing && matches!(event, StreamEvent::Start { .. }) {
            return;
        }
        if !self.forwarded && !event.is_content() {
            self.held.push(event);
            return;
        }
        self.forwarded = true;
        for held in std::mem::take(&mut self.held) {
            self.send(held);
        }
        self.send(event);
    }

    /// Ready once the caller's reader has room for more events.
    fn room(&self) -> impl Future<Output = ()> + '_ {
        self.tx.room()
    }
}

fn fired(clock: Clock, started: Instant) -> Failure {
    Failure::ClockFired { clock, after: Instant::now().saturating_duration_since(started) }
}

/// Run one attempt. `sending` is the provider's [`send`](crate::provider::Provider::send) of
/// the request, which has taken what it needs of it: the attempt keeps nothing of the request
/// while the answer streams. A plain function returning the attempt's future, which keeps the
/// clocks' limits and nothing else of them (an `async fn` would keep its argument and the
/// local it is moved into).
pub(crate) fn run_attempt<'f>(
    sending: BoxFuture<'static, Result<EventStream, Failure>>,
    clocks: AttemptClocks,
    mut forward: Option<&'f mut Forwarder>,
) -> impl Future<Output = Result<ChatResponse, Failure>> + Send + 'f {
    if let Some(forward) = forward.as_deref_mut() {
        forward.reset();
    }
    // The attempt starts as it is awaited, which its caller does at once.
    let started = Instant::now();
    let cap_at = started + clocks.cap;
    let first_token_at = started + clocks.first_token;
    let stream_idle = clocks.stream_idle;
    async move {
        let (headers_at, headers_clock) = earliest(first_token_at, Clock::FirstToken, cap_at);
        let mut stream = match timeout_at(headers_at, sending).await {
            Err(_) => return Err(fired(headers_clock, started)),
            Ok(result) => result?,
        };

        let mut builder = ResponseBuilder::default();
        loop {
            let (limit, clock) = if builder.has_content() {
                earliest(Instant::now() + stream_idle, Clock::StreamIdle, cap_at)
            } else {
                earliest(first_token_at, Clock::FirstToken, cap_at)
            };
            // Taken apart in the statement that awaits it, so the read's result is not kept
            // beside the wait for room below.
            let event = match timeout_at(limit, stream.next()).await {
                // The stop reason came but the stream neither ended nor sent its terminator.
                Err(_) if builder.has_stop() => return Ok(builder.finish()),
                Err(_) => return Err(fired(clock, started)),
                Ok(None) if builder.has_stop() => return Ok(builder.finish()),
                Ok(None) => return Err(Failure::StreamCut),
                Ok(Some(Err(failure))) => return Err(failure),
                Ok(Some(Ok(event))) => event,
            };
            builder.push(&event);
            let done = matches!(event, StreamEvent::Done);
            // The event itself goes on to the caller: the builder keeps its own copy.
            if let Some(forward) = forward.as_deref_mut() {
                forward.push(event);
                forward.room().await;
            }
            if done {
                return if builder.has_stop() {
                    Ok(builder.finish())
                } else {
                    Err(Failure::StreamCut)
                };
            }
        }
    }
}

/// The earlier of a clock's limit and the attempt cap, with the clock that owns it.
fn earliest(limit: Instant, clock: Clock, cap_at: Instant) -> (Instant, Clock) {
    if cap_at < limit { (cap_at, Clock::Attempt) } else { (limit, clock) }
}
