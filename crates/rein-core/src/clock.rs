//! Clocks and the deadline. Every duration rein waits on is bounded here, and all time is read
//! from tokio's clock so tests can run on paused, virtual time.
//!
//! The three per-attempt clocks (first token, stream idle, attempt cap) limit one attempt; the
//! [`Deadline`] limits the whole call across every attempt, wait and tier. The connect clock
//! belongs to the HTTP client that owns the connection pool (`[upstream] connect_ms` in the
//! gateway's config); when it fires the adapter reports [`crate::Clock::Connect`].

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// The clocks of one route. Defaults are the spec's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockPolicy {
    /// From sending the request until the first token of the answer.
    #[serde(rename = "first_token_ms", with = "crate::clock::millis")]
    pub first_token: Duration,
    /// Longest gap between two events once tokens are flowing.
    #[serde(rename = "stream_idle_ms", with = "crate::clock::millis")]
    pub stream_idle: Duration,
    /// Cap on one attempt, headers to last token.
    #[serde(rename = "attempt_ms", with = "crate::clock::millis")]
    pub attempt: Duration,
    /// The whole call: every attempt, wait and tier.
    #[serde(rename = "deadline_ms", with = "crate::clock::millis")]
    pub deadline: Duration,
    /// No retry and no later tier starts with less than this left before the route's deadline
    /// (defaults to `attempt`: an attempt that cannot run its full course is not started, the
    /// call steps down instead). A shorter caller deadline scales it by the same ratio; a call's
    /// first attempt always starts, cut to the time left.
    #[serde(rename = "min_attempt_ms", with = "crate::clock::millis")]
    pub min_attempt: Duration,
}

impl Default for ClockPolicy {
    fn default() -> Self {
        Self {
            first_token: Duration::from_secs(4),
            stream_idle: Duration::from_secs(2),
            attempt: Duration::from_secs(8),
            deadline: Duration::from_secs(20),
            min_attempt: Duration::from_secs(8),
        }
    }
}

/// The point in time by which a call must be over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    started: Instant,
    at: Instant,
}

impl Deadline {
    /// A deadline `total` from now.
    pub fn after(total: Duration) -> Self {
        let started = Instant::now();
        Self { started, at: started + total }
    }

    /// Time left, zero once passed.
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Time since the call started.
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.started)
    }

    /// Whether `needed` still fits before the deadline.
    pub fn fits(&self, needed: Duration) -> bool {
        self.remaining() >= needed
    }

    pub fn total(&self) -> Duration {
        self.at.saturating_duration_since(self.started)
    }
}

/// Serde for durations as whole milliseconds, so settings print with the units of their
/// config keys (`deadline_ms = 20000`).
pub mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.as_millis().min(u128::from(u64::MAX)) as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// Wall-clock milliseconds since the Unix epoch, for records people read (audit entries, logs).
/// Never used to decide anything: decisions run on tokio's clock.
#[allow(clippy::disallowed_types)]
pub fn unix_ms() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn deadline_counts_down_on_virtual_time() {
        let deadline = Deadline::after(Duration::from_secs(20));
        tokio::time::sleep(Duration::from_secs(12)).await;
        assert_eq!(deadline.remaining(), Duration::from_secs(8));
        assert!(deadline.fits(Duration::from_secs(8)));
        assert!(!deadline.fits(Duration::from_secs(9)));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(deadline.remaining(), Duration::ZERO);
        assert_eq!(deadline.elapsed(), Duration::from_secs(42));
    }
}
