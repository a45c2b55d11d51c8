//! Streaming release modes: how a streamed answer reaches the caller.
//!
//! *Checked*: the engine streams from the provider but holds the answer until it is complete, so
//! a stream that is cut, stalls or errors mid-way is retried or fallen back invisibly. The
//! released text goes out as a few deltas of about [`PIECE_BYTES`] each, at once, so streaming
//! clients and UIs see what a provider's stream looks like.
//! *Passthrough*: events are forwarded as they arrive; retry and fallback stay possible until
//! the first token is forwarded, and a failure after that ends the stream with an in-band
//! [`Released::Failed`], never with a truncated answer dressed as complete.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use futures_core::Stream;

use crate::attempt::Forwarder;
use crate::chain::{CallError, Completion, Engine, RouteHandle};
use crate::context::CallContext;
use crate::model::{ChatRequest, StreamEvent};
use crate::route::ReleaseMode;

/// One item of a released stream. The last item is always `Completed` or `Failed`.
#[derive(Debug)]
pub enum Released {
    Event(StreamEvent),
    /// The answer is whole: every event has been sent. Carries the answer and its report.
    Completed(Box<Completion>),
    /// The call ended without a (further) answer.
    Failed(Box<CallError>),
}

/// The caller's side of a released stream. Reading it runs the call: the call advances in the
/// reader's own task each time the stream is polled (no task of its own, so no wake-up of
/// another thread for each event), and stops when the stream is dropped.
pub struct ReleaseStream {
    /// The call, until it has sent its last item.
    call: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    relay: Relay,
}

/// How many released items may wait unread; the call waits when they do.
const RELAY_ROOM: usize = 64;

/// The items a call has released and its reader has not yet taken. The call and the reader
/// run in one task, so the lock is never contended and no waker is needed: a call waiting for
/// room is polled again when the reader has taken every item ([`ReleaseStream::poll_next`]
/// polls the call only then). The call lives in its reader's stream, so it never sends to a
/// reader that has gone.
#[derive(Debug, Clone)]
pub(crate) struct Relay(Arc<Mutex<VecDeque<Released>>>);

impl Relay {
    fn new() -> Self {
        // Grown as items come: the reader takes them as they are released, so a stream's
        // relay holds the few events of one provider chunk (room for 16 from the start took
        // 896 bytes of each open stream, ~670 of them never used).
        Self(Arc::new(Mutex::new(VecDeque::new())))
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Released>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `item` to the reader once there is room.
    pub(crate) async fn send(&self, item: Released) {
        self.room().await;
        self.put(item);
    }

    /// Hands `item` to the reader now, room or not: for a sender that waits for room after
    /// ([`Relay::room`]), so the items waiting stay bounded.
    pub(crate) fn put(&self, item: Released) {
        self.lock().push_back(item);
    }

    /// Ready once fewer than [`RELAY_ROOM`] items wait.
    pub(crate) fn room(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|_| {
            if self.lock().len() >= RELAY_ROOM {
                // No waker: only the reader polls the call, and it does so once it has taken
                // every item.
                return Poll::Pending;
            }
            Poll::Ready(())
        })
    }
}

impl std::fmt::Debug for ReleaseStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseStream").field("running", &self.call.is_some()).finish()
    }
}

impl Stream for ReleaseStream {
    type Item = Released;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Released>> {
        let this = &mut *self;
        if let Some(item) = this.relay.lock().pop_front() {
            return Poll::Ready(Some(item));
        }
        // Nothing waiting: the call runs until it releases something or waits. Its wakers are
        // this task's, so the provider's bytes arriving wake the reader.
        if let Some(call) = this.call.as_mut()
            && call.as_mut().poll(cx).is_ready()
        {
            this.call = None;
        }
        match this.relay.lock().pop_front() {
            Some(item) => Poll::Ready(Some(item)),
            None if this.call.is_none() => Poll::Ready(None),
            // Nothing released and the call not waiting for room: what it waits for wakes
            // this task.
            None => Poll::Pending,
        }
    }
}

/// About how long one released delta is: each piece ends at the first space after this many
/// bytes (or at twice as many, on a character boundary, in text without spaces).
pub const PIECE_BYTES: usize = 24;

/// `text` cut into pieces of about [`PIECE_BYTES`], each ending after a space where one is near;
/// joined, they are `text` exactly.
pub fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len();
        if rest.len() > 2 * PIECE_BYTES {
            let hard = floor_char_boundary(rest, 2 * PIECE_BYTES);
            let mut start = PIECE_BYTES.min(hard);
            while !rest.is_char_boundary(start) {
                start += 1;
            }
            // The piece keeps its space: the next one starts with a word.
            end = match rest[start..hard].char_indices().find(|(_, c)| c.is_whitespace()) {
                Some((at, space)) => start + at + space.len_utf8(),
                None => hard,
            };
        }
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

/// The largest character boundary of `text` at or below `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A streamed call in the route's release mode, run as its stream is read; it stops when the
/// stream is dropped. [`Engine::stream`] is the way in.
pub(crate) fn start(
    engine: Engine,
    handle: RouteHandle,
    mut ctx: CallContext,
    request: ChatRequest,
) -> ReleaseStream {
    let relay = Relay::new();
    let tx = relay.clone();
    let call = Box::pin(async move {
        let passthrough = handle.release_mode() == ReleaseMode::Passthrough;
        let mut forwarder = Forwarder::new(tx.clone(), handle.continuation());
        let forward = passthrough.then_some(&mut forwarder);
        let result = engine.run(&mut ctx, &handle, &request, forward).await;
        // Moved on whole, so the outcome takes no room of its own beside the call's state; and
        // boxed: in line, its state (the outcome, the pieces being sent) would size the call's
        // for as long as the stream is open, though it runs only at the end.
        Box::pin(deliver(&tx, result, forwarder.forwarded())).await;
    });
    ReleaseStream { call: Some(call), relay }
}

/// Send a finished call's outcome down its stream: the held answer in pieces (unless it went
/// out as it came), then the completion; or the failure.
async fn deliver(tx: &Relay, result: Result<Completion, CallError>, forwarded: bool) {
    let completion = match result {
        Ok(completion) => completion,
        Err(error) => {
            tx.send(Released::Failed(Box::new(error))).await;
            return;
        }
    };
    if !forwarded {
        for event in completion.response.to_events() {
            let events = match event {
                StreamEvent::Done => continue,
                StreamEvent::TextDelta { text } => pieces(&text)
                    .map(|piece| StreamEvent::TextDelta { text: piece.into() })
                    .collect(),
                other => vec![other],
            };
            for event in events {
                tx.send(Released::Event(event)).await;
            }
        }
    }
    tx.send(Released::Completed(Box::new(completion))).await;
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_held_answer_goes_out_in_a_few_word_sized_pieces() {
        let text = "The order 4417 left the warehouse this morning and should arrive by Friday.";
        let cut: Vec<&str> = pieces(text).collect();
        assert!(cut.len() >= 2 && cut.len() <= 4, "{cut:?}");
        assert_eq!(cut.concat(), text);
        for piece in &cut[..cut.len() - 1] {
            assert!(piece.ends_with(' '), "a piece ends after a space: {piece:?}");
        }
        assert_eq!(pieces("short").collect::<Vec<_>>(), ["short"]);
        assert_eq!(pieces("").count(), 0);
    }

    /// A provider that never answers: the call waits on it, holding its whole state.
    #[derive(Debug)]
    struct Silent;

    impl crate::provider::Provider for Silent {
        fn name(&self) -> &str {
            "silent"
        }

        fn format(&self) -> crate::failure::WireFormat {
            crate::failure::WireFormat::OpenAi
        }

        fn send(
            &self,
            _: &ChatRequest,
        ) -> futures_util::future::BoxFuture<
            'static,
            Result<crate::provider::EventStream, crate::failure::Failure>,
        > {
            Box::pin(std::future::pending())
        }
    }

    /// A streamed call's state lives as long as its stream is open: one box each, the most of
    /// what rein itself holds for an open stream. It was 3,568 bytes (mimalloc's 3,584-byte
    /// class) while the chain's futures kept an attempt's result and record, the wait for room
    /// to send an event, the contract check and a continuation's request in line; 2,472 while
    /// each attempt kept the request as the tier sends it (a second copy of the conversation),
    /// the call's end (its outcome, its delivery, the route's reply when no tier answered) was
    /// laid out in line and the state kept who served it; 1,968 in a release build now, 1,984
    /// in a test build (futures are laid out before optimization), inside the 2,048-byte class.
    #[tokio::test]
    async fn a_streamed_calls_state_stays_small() {
        let provider: Arc<dyn crate::provider::Provider> = Arc::new(Silent);
        let tiers = vec![crate::route::Tier::new("primary", provider, "m".to_string())];
        let mut route = crate::route::Route::new("r", tiers);
        route.release = ReleaseMode::Passthrough;
        let engine = Engine::builder().route(route).build();
        let stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
        let call = stream.call.as_ref().expect("a call not yet polled is running");
        let size = std::mem::size_of_val(&**call);
        assert!(size <= 2048, "a streamed call's state is {size} bytes");
    }

    proptest! {
        #[test]
        fn pieces_join_to_the_text_and_never_split_a_character(text in "\\PC{0,300}") {
            let cut: Vec<&str> = pieces(&text).collect();
            prop_assert_eq!(cut.concat(), text.clone());
            for piece in &cut {
                prop_assert!(!piece.is_empty());
                prop_assert!(piece.len() <= 2 * PIECE_BYTES + 4, "{:?}", piece);
            }
        }
    }
}
