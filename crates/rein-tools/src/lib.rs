//! rein's tool dispatcher: every tool call walks its tool's **ladder** of rungs, best fidelity
//! first (`exact` primary, `fresh` replica, `stale` cache, `partial` canned answer, `deferred`
//! queue), each rung with its own budget and breaker, behind a bulkhead per dependency, ending
//! in a structured refusal. The model only ever sees the envelope of the rung that answered,
//! with the provenance it must honour. Writes never substitute: they carry an idempotency key
//! minted before the first attempt, wait at gates written in code, and defer to a durable outbox
//! that the replay worker drains exactly once per key.
//!
//! The same [`Dispatcher`] serves the gateway's `POST /v1/tools/{tool}` and Rust agents as a
//! library; durable state lives behind `rein_store::tools::ToolStore`.

mod clock;
pub mod config;
mod dispatcher;
pub mod envelope;
mod error;
mod evidence;
mod gate;
mod guard;
mod http;
pub mod keys;
mod ladder;
pub mod mcp;
mod observer;
mod operator;
mod read;
mod redact;
mod replay;
mod trace;
mod wording;
mod write;

pub use clock::{SystemClock, WallClock};
pub use config::{ConfigError, ConfigProblem, Idempotency, ToolsConfig, ToolsPlan};
pub use dispatcher::{Dispatcher, RungBreaker, ToolOutcome};
pub use envelope::{PROVENANCE_FIELDS, ToolStatus};
pub use error::ToolError;
pub use http::IDEMPOTENCY_KEY_HEADER;
#[doc(hidden)]
pub use http::fill_url_template;
pub use observer::{LADDER_EXHAUSTED, NoopObserver, ReplayResult, ToolObserver};
pub use replay::ReplayReport;
