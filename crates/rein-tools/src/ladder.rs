//! A tool's ladder as the dispatcher walks it: the validated, compiled form of `[tools.*]`, with
//! each rung's own budget and breaker, and each http rung's request template and bulkhead.
//! Built once by `config::compile`; breakers and bulkheads live here so their state lasts as
//! long as the dispatcher.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rein_core::breaker::Cooldown;
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::{Fidelity, Idempotency, KeyFrom, ToolKind};
use crate::gate::Gate;
use crate::http::UrlTemplate;
use crate::wording::Wording;

/// A compiled tool.
#[derive(Debug)]
pub(crate) struct Tool {
    pub name: String,
    pub kind: ToolKind,
    pub rungs: Vec<Rung>,
    pub gates: Vec<Gate>,
    pub key_from: Option<KeyFrom>,
    /// How a resend after an unknown outcome is kept from duplicating the write.
    pub idempotency: Idempotency,
    /// The request an `idempotency = "lookup"` tool runs before such a resend.
    pub lookup: Option<Lookup>,
    pub wording: Wording,
    /// How long a write's key stays `InFlight` before another request may take it over: the
    /// whole ladder's budgets plus a margin, so a live request is never taken over.
    pub key_lease: Duration,
    /// Where evidence items are in this tool's results, if they are evidence.
    pub evidence: Option<crate::config::EvidenceConfig>,
}

impl Tool {
    /// The first http rung: where the replay worker sends queued writes.
    pub(crate) fn primary_http(&self) -> Option<(&Rung, &HttpRung)> {
        self.rungs.iter().find_map(|rung| match &rung.action {
            RungAction::Http(http) => Some((rung, http)),
            _ => None,
        })
    }

    /// The queue rung's source, if the tool has one.
    pub(crate) fn queue_source(&self) -> Option<&str> {
        self.rungs
            .iter()
            .find(|rung| matches!(rung.action, RungAction::Queue))
            .map(|rung| rung.source.as_str())
    }
}

/// A compiled lookup request.
#[derive(Debug)]
pub(crate) struct Lookup {
    pub http: HttpRung,
    pub timeout: Duration,
    /// JSON Pointer to the earlier result in the answer ("" for the whole answer).
    pub found_at: String,
}

/// A compiled rung.
#[derive(Debug)]
pub(crate) struct Rung {
    pub index: usize,
    pub source: String,
    pub fidelity: Fidelity,
    pub timeout: Duration,
    /// `None` for rungs that cannot fail (static) or must always be tried (queue).
    pub breaker: Option<Cooldown>,
    pub action: RungAction,
}

#[derive(Debug)]
pub(crate) enum RungAction {
    Http(HttpRung),
    Cache { max_age_ms: i64 },
    Static { result: Value },
    Queue,
}

/// An http rung's request.
#[derive(Debug)]
pub(crate) struct HttpRung {
    pub method: Method,
    pub url: UrlTemplate,
    /// Fixed and environment headers; the latter are marked sensitive so `Debug` hides them.
    pub headers: HeaderMap,
    pub body_args: bool,
    pub bulkhead: Arc<Bulkhead>,
    /// The largest response body read.
    pub max_response_bytes: u64,
}

/// A concurrency partition: at most `max_concurrent` calls in flight to one dependency, so a dead
/// one holds its own slots and nobody else's.
#[derive(Debug)]
pub(crate) struct Bulkhead {
    pub name: String,
    pub retry_after_ms: u64,
    slots: Arc<Semaphore>,
}

impl Bulkhead {
    pub(crate) fn new(name: &str, max_concurrent: u32, retry_after_ms: u64) -> Self {
        let slots = Arc::new(Semaphore::new(max_concurrent as usize));
        Self { name: name.to_string(), retry_after_ms, slots }
    }

    /// A slot, or `None` at once when the partition is full (never waits).
    pub(crate) fn try_enter(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }
}

/// The replay worker's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutboxSettings {
    pub lease: Duration,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub batch: u32,
    pub keys_retain: Duration,
    pub cache_retain: Duration,
}

pub(crate) type Tools = BTreeMap<String, Tool>;
