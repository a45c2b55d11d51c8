//! The retry policy: how many attempts a tier gets and how long to wait between them.
//!
//! Full-jitter exponential backoff (`wait = uniform(0, min(cap, base · 2^n))`, raised to a small
//! floor so two attempts never land back to back), with the random source injected so tests are
//! deterministic. When the provider pushes back with `retry-after`, its wait replaces ours; the
//! engine checks either against the deadline before sleeping.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

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
