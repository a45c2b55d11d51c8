//! The retry policy: how many attempts a tier gets, how long to wait between them, and whether
//! the wait fits the call at all.
//!
//! Full-jitter exponential backoff (`wait = uniform(0, min(cap, base · 2^n))`, raised to a small
//! floor so two attempts never land back to back), with the random source injected so tests are
//! deterministic. When the provider pushes back with `retry-after`, its wait replaces ours.
//! `next` decides the move before a retry: wait, when the wait and a minimum attempt after it
//! fit the deadline, or leave the tier at once. The deadline is planned across the chain: when a
//! later tier could still answer, a retry is taken only if the same failure again would leave
//! that tier a full attempt; otherwise the call moves down now, while the fallback can still run.
//! (The provider's retry budget is asked after that, by the chain.) Which timeouts are retried
//! on the same tier at all is the route's [`TimeoutMoves`].

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::classify::{Classified, FailureKind};
use crate::clock::Deadline;
use crate::failure::Clock;
use crate::report::{SkipReason, millis};

/// Retry settings of a route. Defaults are the spec's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts per tier, the first one included.
    pub attempts: u32,
    /// The first backoff's upper bound.
    #[serde(rename = "backoff_base_ms", with = "crate::clock::millis")]
    pub base: Duration,
    /// The largest backoff upper bound.
    #[serde(rename = "backoff_cap_ms", with = "crate::clock::millis")]
    pub cap: Duration,
    /// No wait is shorter than this, so attempts are never back to back.
    #[serde(rename = "backoff_floor_ms", with = "crate::clock::millis")]
    pub floor: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 2,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(8),
            floor: Duration::from_millis(100),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0 for the first retry).
    pub fn backoff(&self, retry: u32, jitter: &dyn Jitter) -> Duration {
        let ceiling = self.base.saturating_mul(1u32 << retry.min(20)).min(self.cap);
        let ceiling = ceiling.max(self.floor);
        let span = ceiling - self.floor;
        self.floor + span.mul_f64(jitter.unit().clamp(0.0, 1.0))
    }
}

/// Where a timeout (one of the attempt's clocks firing) or a stream cut short sends the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutMove {
    /// Retry on the same tier, when the attempts and the deadline's plan allow.
    #[default]
    Retry,
    /// Move to the next tier at once.
    NextTier,
}

/// A route's move for each kind of timeout (`[routes.<name>.on_timeout]`). The default retries
/// every one, within the tier's attempts and the deadline's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutMoves {
    /// No first token within `first_token_ms` (a silent or queued provider).
    pub first_token: TimeoutMove,
    /// The stream went quiet for `stream_idle_ms` (a stall).
    pub stream_idle: TimeoutMove,
    /// The attempt ran to `attempt_ms` (a slow stream).
    pub attempt: TimeoutMove,
    /// The stream broke off before its end (an error event, a closed connection).
    pub stream_cut: TimeoutMove,
}

impl TimeoutMoves {
    /// The move for a failure of `kind` and its name, when `kind` is one of these timeouts.
    pub fn of(&self, kind: FailureKind) -> Option<(TimeoutMove, &'static str)> {
        match kind {
            FailureKind::ClockFired(Clock::FirstToken) => Some((self.first_token, "first_token")),
            FailureKind::ClockFired(Clock::StreamIdle) => Some((self.stream_idle, "stream_idle")),
            FailureKind::ClockFired(Clock::Attempt) => Some((self.attempt, "attempt")),
            FailureKind::StreamInterrupted => Some((self.stream_cut, "stream_cut")),
            _ => None,
        }
    }
}

/// The time a retry has to fit in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Room<'a> {
    pub deadline: &'a Deadline,
    /// The least any later attempt needs after its wait.
    pub min_attempt: Duration,
    /// What a later tier needs left to run a full attempt; zero when no later tier can run.
    pub reserve: Duration,
}

/// The move before a retry on the same tier.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RetryMove {
    /// Sleep `wait`, then try again. `pushback`: the provider's `retry-after` set the wait,
    /// not the backoff.
    Wait { wait: Duration, pushback: bool },
    /// Leave the tier now, for this reason: the wait does not fit the deadline.
    Skip(SkipReason),
}

/// The move before attempt number `attempt` of a tier (counted from 1, so 2 is the first retry),
/// whose previous attempt failed as `previous` after `took`.
///
/// The wait is the provider's `retry-after` when it sent one, else the `policy`'s backoff (the
/// jitter is drawn only then). It is taken only when the wait and `min_attempt` after it (the
/// least a later attempt needs) fit what the deadline leaves; otherwise the tier is left at once,
/// with [`SkipReason::RetryAfterBeyondDeadline`] for a pushback and [`SkipReason::NoTimeLeft`]
/// for a backoff. With a `reserve` (a later tier can still run), the wait, the same failure
/// again (`took`) and the reserve must all fit: otherwise [`SkipReason::SavedForNextTier`].
pub(crate) fn next(
    previous: &Classified,
    took: Duration,
    attempt: u32,
    policy: &RetryPolicy,
    jitter: &dyn Jitter,
    room: &Room<'_>,
) -> RetryMove {
    let Room { deadline, min_attempt, reserve } = *room;
    let pushback = previous.retry_after;
    let wait = pushback.unwrap_or_else(|| policy.backoff(attempt.saturating_sub(2), jitter));
    let remaining = deadline.remaining();
    // A hostile `retry-after` can be any size: the sum saturates rather than overflows.
    if !deadline.fits(wait.saturating_add(min_attempt)) {
        let remaining_ms = millis(remaining);
        return RetryMove::Skip(match pushback {
            Some(retry_after) => SkipReason::RetryAfterBeyondDeadline {
                retry_after_ms: millis(retry_after),
                remaining_ms,
            },
            None => SkipReason::NoTimeLeft { remaining_ms },
        });
    }
    let retry = wait.saturating_add(took);
    if !reserve.is_zero() && !deadline.fits(retry.saturating_add(reserve)) {
        return RetryMove::Skip(SkipReason::SavedForNextTier {
            remaining_ms: millis(remaining),
            retry_ms: millis(retry),
            reserve_ms: millis(reserve),
        });
    }
    RetryMove::Wait { wait, pushback: pushback.is_some() }
}

/// A source of uniform random numbers in `[0, 1)`, injected so tests can fix the jitter.
pub trait Jitter: Send + Sync + fmt::Debug {
    fn unit(&self) -> f64;
}

/// The production jitter: a seeded, thread-safe RNG.
#[derive(Debug)]
pub struct SeededJitter(Mutex<StdRng>);

impl SeededJitter {
    pub fn new(seed: u64) -> Self {
        Self(Mutex::new(StdRng::seed_from_u64(seed)))
    }
}

impl Jitter for SeededJitter {
    fn unit(&self) -> f64 {
        match self.0.lock() {
            Ok(mut rng) => rng.random::<f64>(),
            // A poisoned lock only means another thread panicked mid-draw; the RNG is still fine.
            Err(poisoned) => poisoned.into_inner().random::<f64>(),
        }
    }
}

/// A jitter that always returns the same fraction (tests, and `0.5` for "expected" timelines).
#[derive(Debug, Clone, Copy)]
pub struct FixedJitter(pub f64);

impl Jitter for FixedJitter {
    fn unit(&self) -> f64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureKind;
    use proptest::prelude::*;

    #[test]
    fn backoff_grows_then_caps() {
        let policy = RetryPolicy::default();
        let top = FixedJitter(1.0);
        assert_eq!(policy.backoff(0, &top), Duration::from_millis(500));
        assert_eq!(policy.backoff(1, &top), Duration::from_secs(1));
        assert_eq!(policy.backoff(4, &top), Duration::from_secs(8));
        assert_eq!(policy.backoff(30, &top), Duration::from_secs(8));
        assert_eq!(policy.backoff(3, &FixedJitter(0.0)), Duration::from_millis(100));
    }

    /// A jitter that counts its draws.
    #[derive(Debug, Default)]
    struct Counting(Mutex<u32>);

    impl Jitter for Counting {
        fn unit(&self) -> f64 {
            *self.0.lock().unwrap() += 1;
            1.0
        }
    }

    impl Counting {
        fn draws(&self) -> u32 {
            *self.0.lock().unwrap()
        }
    }

    fn failed(retry_after: Option<Duration>) -> Classified {
        let (disposition, fault, reason) = crate::classify::decide(FailureKind::RateLimited);
        Classified { kind: FailureKind::RateLimited, disposition, fault, retry_after, reason }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The move with no later tier to plan for, after a failure that took no time.
    fn next(
        previous: &Classified,
        attempt: u32,
        policy: &RetryPolicy,
        jitter: &dyn Jitter,
        deadline: &Deadline,
        min_attempt: Duration,
    ) -> RetryMove {
        let room = Room { deadline, min_attempt, reserve: Duration::ZERO };
        super::next(previous, Duration::ZERO, attempt, policy, jitter, &room)
    }

    fn clock_fired(clock: Clock) -> Classified {
        let kind = FailureKind::ClockFired(clock);
        let (disposition, fault, reason) = crate::classify::decide(kind);
        Classified { kind, disposition, fault, retry_after: None, reason }
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_that_would_leave_the_next_tier_no_full_attempt_moves_down_now() {
        // 100 s deadline; the first attempt stalled for 30 s; the fallback needs 30 s.
        let deadline = Deadline::after(ms(100_000));
        tokio::time::sleep(ms(30_000)).await;
        let policy = RetryPolicy::default();
        let stalled = clock_fired(Clock::StreamIdle);
        let room = Room { deadline: &deadline, min_attempt: ms(30_000), reserve: ms(30_000) };
        let jitter = FixedJitter(0.0);
        // 70 s left: a 30.1 s retry leaves 39.9 s, a full attempt for the fallback.
        let step = super::next(&stalled, ms(30_000), 2, &policy, &jitter, &room);
        assert_eq!(step, RetryMove::Wait { wait: ms(100), pushback: false });
        tokio::time::sleep(ms(30_100)).await;
        // 39.9 s left: another 30.1 s retry would leave the fallback 9.8 s.
        let step = super::next(&stalled, ms(30_000), 3, &policy, &jitter, &room);
        assert_eq!(
            step,
            RetryMove::Skip(SkipReason::SavedForNextTier {
                remaining_ms: 39_900,
                retry_ms: 30_100,
                reserve_ms: 30_000
            })
        );
        // With no later tier to save time for, the same retry is taken.
        let alone = Room { reserve: Duration::ZERO, ..room };
        let step = super::next(&stalled, ms(30_000), 3, &policy, &jitter, &alone);
        assert_eq!(step, RetryMove::Wait { wait: ms(100), pushback: false });
    }

    #[test]
    fn every_timeout_kind_has_a_move_and_nothing_else_does() {
        let moves = TimeoutMoves { stream_idle: TimeoutMove::NextTier, ..TimeoutMoves::default() };
        assert_eq!(
            moves.of(FailureKind::ClockFired(Clock::StreamIdle)),
            Some((TimeoutMove::NextTier, "stream_idle"))
        );
        assert_eq!(
            moves.of(FailureKind::ClockFired(Clock::FirstToken)),
            Some((TimeoutMove::Retry, "first_token"))
        );
        assert_eq!(moves.of(FailureKind::StreamInterrupted).map(|m| m.1), Some("stream_cut"));
        assert_eq!(moves.of(FailureKind::ClockFired(Clock::Attempt)).map(|m| m.1), Some("attempt"));
        assert_eq!(moves.of(FailureKind::Overloaded), None);
        assert_eq!(moves.of(FailureKind::ClockFired(Clock::Connect)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pushback_that_fits_is_the_wait_and_draws_no_jitter() {
        let deadline = Deadline::after(ms(10_000));
        let jitter = Counting::default();
        let policy = RetryPolicy::default();
        let step = next(&failed(Some(ms(3_000))), 2, &policy, &jitter, &deadline, ms(2_000));
        assert_eq!(step, RetryMove::Wait { wait: ms(3_000), pushback: true });
        assert_eq!(jitter.draws(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pushback_that_fits_exactly_is_taken() {
        let deadline = Deadline::after(ms(10_000));
        let policy = RetryPolicy::default();
        let step =
            next(&failed(Some(ms(8_000))), 2, &policy, &FixedJitter(0.5), &deadline, ms(2_000));
        assert_eq!(step, RetryMove::Wait { wait: ms(8_000), pushback: true });
    }

    #[tokio::test(start_paused = true)]
    async fn a_pushback_that_does_not_fit_leaves_the_tier() {
        let deadline = Deadline::after(ms(10_000));
        tokio::time::sleep(ms(1_500)).await;
        let jitter = Counting::default();
        let policy = RetryPolicy::default();
        // 7 s + 2 s does not fit the 8.5 s left, though 7 s alone would.
        let step = next(&failed(Some(ms(7_000))), 2, &policy, &jitter, &deadline, ms(2_000));
        assert_eq!(
            step,
            RetryMove::Skip(SkipReason::RetryAfterBeyondDeadline {
                retry_after_ms: 7_000,
                remaining_ms: 8_500
            })
        );
        assert_eq!(jitter.draws(), 0, "a pushback never draws the backoff's jitter");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pushback_of_any_size_leaves_the_tier_without_overflow() {
        let deadline = Deadline::after(ms(10_000));
        let policy = RetryPolicy::default();
        let huge = Duration::MAX;
        let step = next(&failed(Some(huge)), 2, &policy, &FixedJitter(0.5), &deadline, ms(2_000));
        assert!(matches!(step, RetryMove::Skip(SkipReason::RetryAfterBeyondDeadline { .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn a_backoff_that_fits_is_the_wait_for_that_retry() {
        let deadline = Deadline::after(ms(20_000));
        let policy = RetryPolicy::default();
        let top = FixedJitter(1.0);
        // Attempt 2 is the first retry (backoff 0), attempt 3 the second (backoff 1).
        let step = next(&failed(None), 2, &policy, &top, &deadline, ms(8_000));
        assert_eq!(step, RetryMove::Wait { wait: ms(500), pushback: false });
        let step = next(&failed(None), 3, &policy, &top, &deadline, ms(8_000));
        assert_eq!(step, RetryMove::Wait { wait: ms(1_000), pushback: false });
        // With no deadline at all any wait fits.
        let step = next(&failed(None), 9, &policy, &top, &Deadline::unbounded(), ms(8_000));
        assert_eq!(step, RetryMove::Wait { wait: ms(8_000), pushback: false });
    }

    #[tokio::test(start_paused = true)]
    async fn a_backoff_that_fits_exactly_is_taken() {
        let deadline = Deadline::after(ms(8_500));
        let jitter = Counting::default();
        let step = next(&failed(None), 2, &RetryPolicy::default(), &jitter, &deadline, ms(8_000));
        assert_eq!(step, RetryMove::Wait { wait: ms(500), pushback: false });
        assert_eq!(jitter.draws(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backoff_that_does_not_fit_leaves_the_tier() {
        let deadline = Deadline::after(ms(8_499));
        let jitter = Counting::default();
        let step = next(&failed(None), 2, &RetryPolicy::default(), &jitter, &deadline, ms(8_000));
        assert_eq!(step, RetryMove::Skip(SkipReason::NoTimeLeft { remaining_ms: 8_499 }));
        assert_eq!(jitter.draws(), 1, "the backoff was drawn before it was found too long");
        // A deadline already passed leaves no room for even the shortest wait.
        let passed = Deadline::after(Duration::ZERO);
        let step =
            next(&failed(None), 2, &RetryPolicy::default(), &jitter, &passed, Duration::ZERO);
        assert_eq!(step, RetryMove::Skip(SkipReason::NoTimeLeft { remaining_ms: 0 }));
    }

    proptest! {
        #[test]
        fn backoff_stays_between_floor_and_ceiling(
            retry in 0u32..64,
            unit in 0.0f64..1.0,
            base_ms in 1u64..5_000,
            cap_ms in 1u64..60_000,
            floor_ms in 0u64..1_000,
        ) {
            let policy = RetryPolicy {
                attempts: 3,
                base: Duration::from_millis(base_ms),
                cap: Duration::from_millis(cap_ms),
                floor: Duration::from_millis(floor_ms),
            };
            let wait = policy.backoff(retry, &FixedJitter(unit));
            let ceiling = Duration::from_millis(base_ms)
                .saturating_mul(1u32 << retry.min(20))
                .min(Duration::from_millis(cap_ms))
                .max(Duration::from_millis(floor_ms));
            prop_assert!(wait >= Duration::from_millis(floor_ms));
            prop_assert!(wait <= ceiling);
        }

        #[test]
        fn seeded_jitter_is_in_unit_range(seed in any::<u64>()) {
            let jitter = SeededJitter::new(seed);
            for _ in 0..32 {
                let u = jitter.unit();
                prop_assert!((0.0..1.0).contains(&u));
            }
        }
    }
}
