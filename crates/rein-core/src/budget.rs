//! The retry budget: one per provider, shared by every request to it.
//!
//! Retries may be at most `ratio` of the requests seen in the last `window`, plus a floor of
//! `min_retries_per_s` so a quiet provider can still be retried. Under sustained overload this
//! keeps upstream attempts at about `(1 + ratio) ×` requests instead of multiplying them by the
//! attempt count, so rein never turns an overload into a retry storm (Finagle's RetryBudget
//! shape, on tokio's clock).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Settings of a provider's retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetryBudgetPolicy {
    /// Retries allowed per request in the window (0.2 = one retry per five requests).
    pub ratio: f64,
    /// Retries allowed per second regardless of traffic.
    pub min_retries_per_s: f64,
    /// How far back requests and retries are counted.
    #[serde(rename = "window_ms", with = "crate::clock::millis")]
    pub window: Duration,
}

impl Default for RetryBudgetPolicy {
    fn default() -> Self {
        Self { ratio: 0.2, min_retries_per_s: 1.0, window: Duration::from_secs(10) }
    }
}

impl RetryBudgetPolicy {
    /// The most retries the floor alone allows within one window.
    pub fn floor_per_window(&self) -> f64 {
        self.min_retries_per_s * self.window.as_secs_f64()
    }
}

/// Per-second buckets of requests and retries over the window.
#[derive(Debug)]
pub struct RetryBudget {
    policy: RetryBudgetPolicy,
    origin: Instant,
    buckets: Mutex<VecDeque<Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    second: u64,
    requests: u64,
    retries: u64,
}

impl RetryBudget {
    pub fn new(policy: RetryBudgetPolicy) -> Self {
        Self { policy, origin: Instant::now(), buckets: Mutex::new(VecDeque::new()) }
    }

    pub fn policy(&self) -> RetryBudgetPolicy {
        self.policy
    }

    /// Count a first attempt (a request that is not a retry).
    pub fn record_request(&self) {
        self.with_current(|bucket| bucket.requests += 1, |_, _| true);
    }

    /// Ask to spend one retry. Returns false, spending nothing, when the budget is exhausted.
    pub fn try_retry(&self) -> bool {
        let policy = self.policy;
        self.with_current(
            |bucket| bucket.retries += 1,
            |requests, retries| {
                let allowed = policy.ratio * requests as f64 + policy.floor_per_window();
                (retries as f64) + 1.0 <= allowed
            },
        )
    }

    /// Requests and retries currently inside the window.
    pub fn counts(&self) -> (u64, u64) {
        let mut out = (0, 0);
        self.with_current(
            |_| {},
            |requests, retries| {
                out = (requests, retries);
                false
            },
        );
        out
    }

    /// Drop expired buckets, test `admit` on the window's totals, and apply `update` to the
    /// current second's bucket when admitted.
    fn with_current(
        &self,
        update: impl FnOnce(&mut Bucket),
        admit: impl FnOnce(u64, u64) -> bool,
    ) -> bool {
        let now = Instant::now().saturating_duration_since(self.origin).as_secs();
        let window = self.policy.window.as_secs().max(1);
        let mut buckets = match self.buckets.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        while buckets.front().is_some_and(|b| b.second + window <= now) {
            buckets.pop_front();
        }
        let (requests, retries) =
            buckets.iter().fold((0, 0), |(q, r), b| (q + b.requests, r + b.retries));
        if !admit(requests, retries) {
            return false;
        }
        if buckets.back().is_none_or(|b| b.second != now) {
            buckets.push_back(Bucket { second: now, requests: 0, retries: 0 });
        }
        if let Some(bucket) = buckets.back_mut() {
            update(bucket);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn floor_allows_retries_without_traffic_then_runs_out() {
        let budget = RetryBudget::new(RetryBudgetPolicy {
            ratio: 0.2,
            min_retries_per_s: 1.0,
            window: Duration::from_secs(10),
        });
        let granted = (0..50).filter(|_| budget.try_retry()).count();
        assert_eq!(granted, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn ratio_scales_with_requests_and_expires() {
        let budget = RetryBudget::new(RetryBudgetPolicy {
            ratio: 0.2,
            min_retries_per_s: 0.0,
            window: Duration::from_secs(10),
        });
        for _ in 0..100 {
            budget.record_request();
        }
        let granted = (0..100).filter(|_| budget.try_retry()).count();
        assert_eq!(granted, 20);
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(budget.counts(), (0, 0));
        assert!(!budget.try_retry());
    }
}
