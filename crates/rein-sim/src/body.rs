//! The response body type: either a whole buffer or a channel fed by a task that paces the
//! frames, and that can *abort* the body. Aborting makes hyper drop the connection mid-body,
//! which is how a stream is cut without its terminator. Before it errors, the body returns
//! `Pending` once so hyper flushes what was already sent: a `cut:after=5` must deliver all five
//! tokens before the connection goes.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// What the feeding task sends down the channel.
#[derive(Debug)]
pub(crate) enum Chunk {
    Data(Bytes),
    /// Close the connection without finishing the body.
    Abort,
}

/// The error that aborts a body (and with it the connection).
#[derive(Debug, thiserror::Error)]
#[error("the simulator cut the connection")]
pub(crate) struct Aborted;

#[derive(Debug)]
pub(crate) enum SimBody {
    Full(Option<Bytes>),
    Channel { rx: mpsc::Receiver<Chunk>, aborting: bool },
}

impl SimBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> SimBody {
        SimBody::Full(Some(bytes.into()))
    }

    pub(crate) fn empty() -> SimBody {
        SimBody::Full(None)
    }

    /// A body fed through a channel, and the sender that feeds it.
    pub(crate) fn channel() -> (mpsc::Sender<Chunk>, SimBody) {
        let (tx, rx) = mpsc::channel(16);
        (tx, SimBody::Channel { rx, aborting: false })
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = Aborted;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Aborted>>> {
        match self.get_mut() {
            SimBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            SimBody::Channel { rx, aborting } => {
                if *aborting {
                    return Poll::Ready(Some(Err(Aborted)));
                }
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(Chunk::Data(bytes))) => {
                        Poll::Ready(Some(Ok(Frame::data(bytes))))
                    }
                    Poll::Ready(Some(Chunk::Abort)) => {
                        // Let hyper flush what it holds before the error closes the connection.
                        *aborting = true;
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                    Poll::Ready(None) => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, SimBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            SimBody::Full(None) => SizeHint::with_exact(0),
            SimBody::Channel { .. } => SizeHint::default(),
        }
    }
}
