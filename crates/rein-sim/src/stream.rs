//! The stream driver: sends a rendered stream's frames down the body channel, pacing content
//! tokens (`slow_first_token`, `token_delay`) and breaking the stream where a transport fault
//! says. Positions count content tokens; a fault whose position lies past the last token fires
//! just before the stop reason, so `cut:after=1000` still cuts before the answer is complete.

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::body::Chunk;
use crate::fault::Transport;
use crate::wire::{Frame, FrameRole};

/// How to send one stream.
#[derive(Debug)]
pub(crate) struct Driver {
    pub frames: Vec<Frame>,
    pub transport: Option<Transport>,
    pub slow_first_token: Option<Duration>,
    pub token_delay: Option<Duration>,
    /// The frame `malformed` injects.
    pub malformed: Bytes,
    /// The frame `stream_error` sends.
    pub error: Bytes,
}

impl Driver {
    /// Sends the stream; returns early when the client goes away.
    pub(crate) async fn run(self, tx: mpsc::Sender<Chunk>) {
        let mut tokens_sent: u32 = 0;
        let mut content_started = false;
        let mut fired = false;
        for frame in self.frames {
            let at_fault_position = match self.transport {
                Some(
                    Transport::Cut { after }
                    | Transport::Stall { after }
                    | Transport::Malformed { after }
                    | Transport::StreamError { after },
                ) if !fired => match frame.role {
                    FrameRole::Token => tokens_sent == after,
                    FrameRole::Tail | FrameRole::Terminator => true,
                    FrameRole::Meta | FrameRole::ContentStart => false,
                },
                _ => false,
            };
            if at_fault_position {
                fired = true;
                match self.transport {
                    Some(Transport::Cut { .. }) => {
                        let _ = tx.send(Chunk::Abort).await;
                        return;
                    }
                    Some(Transport::Stall { .. }) => {
                        tx.closed().await;
                        return;
                    }
                    Some(Transport::StreamError { .. }) => {
                        let _ = tx.send(Chunk::Data(self.error.clone())).await;
                        return;
                    }
                    Some(Transport::Malformed { .. }) => {
                        if tx.send(Chunk::Data(self.malformed.clone())).await.is_err() {
                            return;
                        }
                    }
                    Some(Transport::NoDone) | None => {}
                }
            }
            if frame.role == FrameRole::Terminator && self.transport == Some(Transport::NoDone) {
                continue;
            }
            if matches!(frame.role, FrameRole::ContentStart | FrameRole::Token) {
                let wait = if content_started { self.token_delay } else { self.slow_first_token };
                content_started = true;
                if let Some(wait) = wait.filter(|w| !w.is_zero()) {
                    tokio::time::sleep(wait).await;
                }
            }
            if frame.role == FrameRole::Token {
                tokens_sent = tokens_sent.saturating_add(1);
            }
            if tx.send(Chunk::Data(frame.bytes)).await.is_err() {
                return;
            }
        }
    }
}
