//! What the dispatcher tells metrics: which rung served each call, gate holds, replays and full
//! bulkheads. The gateway implements [`ToolObserver`] with Prometheus counters
//! (`fallback_served{tool, rung}` is how much of the product runs degraded right now); the
//! default methods do nothing, so a library user implements only what it counts.

use std::fmt;

use crate::envelope::ToolStatus;

/// How one replay of a queued write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplayResult {
    /// The primary executed it; the key's result is final.
    Done,
    /// A transient failure; it is due again after a backoff.
    Retry,
    /// The primary refused it for good; kept for an operator.
    Failed,
    /// Its outcome is unknown and the tool has no machine duplicate guard: held for a person.
    Review,
}

impl ReplayResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayResult::Done => "done",
            ReplayResult::Retry => "retry",
            ReplayResult::Failed => "failed",
            ReplayResult::Review => "review",
        }
    }
}

/// Callbacks for metrics. Called inline on the call's path: keep them cheap.
pub trait ToolObserver: Send + Sync + fmt::Debug {
    /// A dispatcher was built (at start and at every reload) with these tools, each with the
    /// source of its first rung: anything else that serves it is a fallback.
    fn configured(&self, primaries: &[(String, String)]) {
        let _ = primaries;
    }

    /// A call ended `ok`, `queued` or `refused`; `source` is the rung that served or refused
    /// it, or [`LADDER_EXHAUSTED`] when the ladder ran out.
    fn served(&self, tool: &str, source: &str, status: ToolStatus) {
        let _ = (tool, source, status);
    }

    /// A gate held a write for approval.
    fn gate_held(&self, tool: &str) {
        let _ = tool;
    }

    /// One replay of a queued write.
    fn replayed(&self, tool: &str, result: ReplayResult) {
        let _ = (tool, result);
    }

    /// A call found `bulkhead` full and returned `busy`.
    fn busy(&self, tool: &str, bulkhead: &str) {
        let _ = (tool, bulkhead);
    }
}

/// The `source` reported when no rung could answer.
pub const LADDER_EXHAUSTED: &str = "ladder_exhausted";

/// An observer that counts nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopObserver;

impl ToolObserver for NoopObserver {}
