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

/// The point in time by which a call must be over, and when the call began.
///
/// One is made per call, at the edge (the gateway's request, or a Rust agent's
/// [`crate::CallContext`]); everything below narrows it ([`Deadline::within`]) and cuts its own
/// clocks to it ([`Deadline::cut`]), so no wait, attempt, rule, judge or tool rung outlives the
/// caller. A deadline may be unbounded (a tool call with no caller deadline): then only each
/// step's own clock applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    started: Instant,
    at: Option<Instant>,
}

impl Deadline {
    /// A deadline `total` from now.
    pub fn after(total: Duration) -> Self {
        let started = Instant::now();
        Self { started, at: Some(started + total) }
    }

    /// No deadline, started now: only the clocks of each step apply.
    pub fn unbounded() -> Self {
        Self { started: Instant::now(), at: None }
    }

    /// The same call's deadline, brought in to `total` from now when that is sooner (a route's
    /// own deadline inside a caller's, a judge's route inside the call it checks). The start
    /// stays the call's.
    #[must_use]
    pub fn within(self, total: Duration) -> Self {
        let limit = Instant::now() + total;
        let at = Some(self.at.map_or(limit, |at| at.min(limit)));
        Self { at, ..self }
    }

    /// Time left, zero once passed; [`Duration::MAX`] when unbounded.
    pub fn remaining(&self) -> Duration {
        match self.at {
            Some(at) => at.saturating_duration_since(Instant::now()),
            None => Duration::MAX,
        }
    }

    /// Whether the deadline has an end.
    pub fn is_bounded(&self) -> bool {
        self.at.is_some()
    }

    /// Time since the call started.
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.started)
    }

    /// [`Deadline::elapsed`] in whole milliseconds: where in the call something happened, for
    /// its trace and its envelope.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether `needed` still fits before the deadline.
    pub fn fits(&self, needed: Duration) -> bool {
        self.remaining() >= needed
    }

    /// A step's own clock, cut to what is left: `clock` or the time remaining, whichever is
    /// shorter.
    pub fn cut(&self, clock: Duration) -> Duration {
        clock.min(self.remaining())
    }

    /// A step's own clock, cut to what is left after `reserve` (kept for a later step that must
    /// still run, like a write's queue rung).
    pub fn cut_leaving(&self, clock: Duration, reserve: Duration) -> Duration {
        clock.min(self.remaining().saturating_sub(reserve))
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

/// Wall-clock microseconds since the Unix epoch, for the time of a log line; the same rule.
#[allow(clippy::disallowed_types)]
pub fn unix_micros() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
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

    #[tokio::test(start_paused = true)]
    async fn a_narrowed_deadline_keeps_the_start_and_never_moves_out() {
        let ms = Duration::from_millis;
        let call = Deadline::after(ms(2_000));
        tokio::time::sleep(ms(500)).await;
        // A route of 20 s inside a call with 1.5 s left: still 1.5 s.
        let route = call.within(ms(20_000));
        assert_eq!(route.remaining(), ms(1_500));
        assert_eq!(route.elapsed(), ms(500));
        // A route of 1 s inside it: 1 s.
        assert_eq!(call.within(ms(1_000)).remaining(), ms(1_000));
        // An unbounded deadline takes the bound it is given.
        let open = Deadline::unbounded();
        assert!(!open.is_bounded());
        assert_eq!(open.remaining(), Duration::MAX);
        assert_eq!(open.within(ms(300)).remaining(), ms(300));
    }

    #[tokio::test(start_paused = true)]
    async fn clocks_are_cut_to_what_is_left_and_keep_the_reserve() {
        let ms = Duration::from_millis;
        let deadline = Deadline::after(ms(1000));
        assert_eq!(deadline.cut(ms(400)), ms(400));
        tokio::time::sleep(ms(800)).await;
        assert_eq!(deadline.cut(ms(400)), ms(200));
        assert_eq!(deadline.cut_leaving(ms(400), ms(100)), ms(100));
        assert_eq!(deadline.cut_leaving(ms(400), ms(300)), Duration::ZERO);
        assert_eq!(deadline.elapsed(), ms(800));
        tokio::time::sleep(ms(500)).await;
        assert_eq!(deadline.cut(ms(400)), Duration::ZERO);

        let open = Deadline::unbounded();
        assert_eq!(open.cut_leaving(ms(400), ms(100)), ms(400));
    }
}
