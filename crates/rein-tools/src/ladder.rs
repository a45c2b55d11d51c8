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
use crate::dispatcher::Dispatcher;
use crate::gate::Gate;
use crate::http::{ArgProblem, HttpOutcome, UrlTemplate};
use crate::mcp::McpServer;
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
    /// What MCP clients are told it does, and its arguments' schema (the config's).
    pub description: Option<String>,
    pub input_schema: Option<Value>,
}

impl Tool {
    /// The first rung that calls out (http or mcp): where the replay worker sends queued
    /// writes.
    pub(crate) fn primary_remote(&self) -> Option<&Rung> {
        self.rungs.iter().find(|rung| rung.action.is_remote())
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
    Mcp(McpRung),
    Cache { max_age_ms: i64 },
    Static { result: Value },
    Queue,
}

impl RungAction {
    /// Whether the rung calls out (to an http backend or an MCP server).
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self, RungAction::Http(_) | RungAction::Mcp(_))
    }

    /// The rung's call for `args`: `None` for rungs that do not call out, `Err` when the
    /// arguments cannot fill an http rung's URL (the caller's mistake).
    pub(crate) fn target(&self, args: &Value) -> Option<Result<Target<'_>, ArgProblem>> {
        match self {
            RungAction::Http(http) => {
                Some(http.url.fill(args).map(|url| Target::Http { http, url }))
            }
            RungAction::Mcp(mcp) => Some(Ok(Target::Mcp(mcp))),
            _ => None,
        }
    }
}

/// One call of a rung that calls out: an http request at its URL, or an MCP server's tool.
#[derive(Debug)]
pub(crate) enum Target<'a> {
    Http { http: &'a HttpRung, url: String },
    Mcp(&'a McpRung),
}

impl Target<'_> {
    /// The concurrency partition the call enters.
    pub(crate) fn bulkhead(&self) -> &Bulkhead {
        match self {
            Target::Http { http, .. } => &http.bulkhead,
            Target::Mcp(mcp) => &mcp.bulkhead,
        }
    }

    /// Send the call within `budget`, with a write's idempotency `key`.
    pub(crate) async fn send(
        &self,
        dispatcher: &Dispatcher,
        args: &Value,
        key: Option<&str>,
        budget: Duration,
    ) -> HttpOutcome {
        match self {
            Target::Http { http, url } => {
                let redactor = &dispatcher.plan.redactor;
                crate::http::send(&dispatcher.http, http, url, args, key, budget, redactor).await
            }
            Target::Mcp(mcp) => {
                let outcome = mcp.server.call(&mcp.tool, args, key, budget).await;
                dispatcher.plan.redactor.outcome(outcome)
            }
        }
    }
}

/// An mcp rung: a tool of an upstream MCP server.
#[derive(Debug)]
pub(crate) struct McpRung {
    pub server: Arc<McpServer>,
    /// The tool's name on that server.
    pub tool: String,
    pub bulkhead: Arc<Bulkhead>,
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

pub(crate) type Tools = BTreeMap<String, Arc<Tool>>;
