//! Wall-clock time for what the store records: cache capture times, key leases, outbox due times
//! and leases. It is injected so tests can age a cache or expire a lease without waiting, while
//! decisions within one call (rung budgets, deadlines, breakers) run on tokio's clock.

use std::fmt;

/// Unix milliseconds now.
pub trait WallClock: Send + Sync + fmt::Debug {
    fn now_unix_ms(&self) -> i64;
}

/// The system's clock, through `rein_core::clock::unix_ms`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_unix_ms(&self) -> i64 {
        i64::try_from(rein_core::clock::unix_ms()).unwrap_or(i64::MAX)
    }
}
