//! The seam between the engine and a provider's HTTP API.
//!
//! An adapter (in `rein-providers`, or a scripted fake in tests) turns a [`ChatRequest`] into
//! one HTTP call and the reply into [`StreamEvent`]s. Adapters never retry, never sleep and never
//! time out on their own account: the engine owns every retry and every clock, so one request
//! can never be retried twice over.

use std::fmt;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

use crate::failure::{Failure, WireFormat};
use crate::model::{ChatRequest, StreamEvent};

/// The events of one attempt. The stream ends after `Done`, or early when the connection
/// closes; an `Err` item ends the attempt.
pub type EventStream = BoxStream<'static, Result<StreamEvent, Failure>>;

/// A model provider reachable by one wire format.
pub trait Provider: Send + Sync + fmt::Debug {
    /// The name this provider has in the config, used in logs, metrics and the retry budget.
    fn name(&self) -> &str;

    /// The wire format it speaks (decides how its error bodies are read).
    fn format(&self) -> WireFormat;

    /// Send one request. Resolves when the response headers have arrived: to the stream of
    /// events for a success status, to a [`Failure`] otherwise.
    ///
    /// The request is borrowed: an adapter serializes what it needs before returning, so the
    /// engine lets go of the request it prepared for the tier as soon as this returns, and an
    /// open stream holds the caller's conversation once.
    fn send(&self, request: &ChatRequest) -> BoxFuture<'static, Result<EventStream, Failure>>;
}
