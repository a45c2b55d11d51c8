//! Streaming release modes: how a streamed answer reaches the caller.
//!
//! *Checked*: the engine streams from the provider but holds the answer until it is complete, so
//! a stream that is cut, stalls or errors mid-way is retried or fallen back invisibly.
//! *Passthrough*: events are forwarded as they arrive; retry and fallback stay possible until
//! the first token is forwarded, and a failure after that ends the stream with an in-band
//! [`Released::Failed`], never with a truncated answer dressed as complete.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::mpsc;

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

/// The caller's side of a released stream.
#[derive(Debug)]
pub struct ReleaseStream {
    rx: mpsc::Receiver<Released>,
}

impl Stream for ReleaseStream {
    type Item = Released;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Released>> {
        self.rx.poll_recv(cx)
    }
}

/// Run a streamed call on its own task, in the route's release mode; the task stops when the
/// returned stream is dropped. [`Engine::stream`] is the way in.
pub(crate) fn spawn(
    engine: Engine,
    handle: RouteHandle,
    ctx: CallContext,
    request: ChatRequest,
) -> ReleaseStream {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let closed = tx.clone();
        let passthrough = handle.release_mode() == ReleaseMode::Passthrough;
        let run = async {
            let mut forwarder = Forwarder::new(tx.clone());
            let forward = passthrough.then_some(&mut forwarder);
            let result = engine.run(ctx, &handle, request, forward).await;
            match result {
                Ok(completion) => {
                    if !forwarder.forwarded() {
                        for event in completion.response.to_events() {
                            if matches!(event, StreamEvent::Done) {
                                continue;
                            }
                            if tx.send(Released::Event(event)).await.is_err() {
                                return;
                            }
                        }
                    }
                    let _ = tx.send(Released::Completed(Box::new(completion))).await;
                }
                Err(error) => {
                    let _ = tx.send(Released::Failed(Box::new(error))).await;
                }
            }
        };
        tokio::select! {
            _ = closed.closed() => {}
            _ = run => {}
        }
    });
    ReleaseStream { rx }
}
