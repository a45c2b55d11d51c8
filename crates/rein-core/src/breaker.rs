//! What keeps calls off a tier or a route: a tier's cooldown, a circuit breaker counted in
//! consecutive failed calls, and the operators' kill switch for a route or every route.
//!
//! `Closed` (traffic flows) → after `allowed_fails` failed calls in a row → `Open` (skipped) for
//! `cooldown` → `HalfOpen`: exactly one probe call goes through; its success closes the breaker,
//! its failure opens it again. A probe that is abandoned (the caller went away, or the call had no
//! time left for it) hands its slot back, so the tier can never be stuck half-open.
//!
//! Besides the breaker itself this holds the rule that settles a call's [`Permit`] when a tier
//! gives up without answering ([`Permit::settle`]): the tier's health counts only when it was
//! actually tried and its last failure says something about the tier rather than the request.
//!
//! The kill switch sends a route, or every route, straight to its degraded reply; it is flipped
//! at runtime and every flip is recorded with its time and reason.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::classify::Fault;
use crate::clock::unix_ms;

/// Cooldown settings of a tier. Defaults are the spec's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CooldownPolicy {
    /// Failed calls in a row that open the breaker.
    pub allowed_fails: u32,
    /// How long an open breaker skips the tier before letting one probe through.
    #[serde(rename = "cooldown_ms", with = "crate::clock::millis")]
    pub cooldown: Duration,
}

impl Default for CooldownPolicy {
    fn default() -> Self {
        Self { allowed_fails: 3, cooldown: Duration::from_secs(30) }
    }
}

/// The breaker's state, as reported to operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Traffic flows.
    Closed,
    /// Rejecting: the tier is skipped.
    Open,
    /// Probing: one request is allowed through.
    HalfOpen,
}

#[derive(Debug, Clone, Copy)]
enum Inner {
    Closed { consecutive_fails: u32 },
    Open { until: Instant },
    HalfOpen { probe_out: bool },
}

/// One tier's breaker. Cheap to clone; clones share state.
#[derive(Debug, Clone)]
pub struct Cooldown {
    policy: CooldownPolicy,
    inner: Arc<Mutex<Inner>>,
}

/// The breaker's answer to "may this call use the tier?".
#[derive(Debug)]
pub enum Admission {
    /// Yes. Report the result with [`Permit::succeeded`] / [`Permit::failed`].
    Allowed(Permit),
    /// No: cooling down until the given time (or a probe is already out).
    Skip { retry_at: Option<Instant> },
}

/// The right to call a tier once. Dropping it unresolved hands a probe slot back.
#[derive(Debug)]
pub struct Permit {
    breaker: Cooldown,
    probe: bool,
    resolved: bool,
}

impl Permit {
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// The tier answered (or failed for a reason that says nothing about its health).
    ///
    /// Only the probe closes a breaker that opened: a call let in while it was still closed
    /// that answers after it opened says nothing about the tier now (under load, dozens are in
    /// flight when it opens, and each would close it again at once).
    pub fn succeeded(mut self) {
        self.resolved = true;
        let probe = self.probe;
        self.breaker.update(|inner| match *inner {
            Inner::Closed { .. } => *inner = Inner::Closed { consecutive_fails: 0 },
            Inner::HalfOpen { .. } if probe => *inner = Inner::Closed { consecutive_fails: 0 },
            Inner::HalfOpen { .. } | Inner::Open { .. } => {}
        });
    }

    /// The tier failed this call. Half-open, only the probe's failure opens it again: another
    /// call's was let in before it opened, like a late success.
    pub fn failed(mut self) {
        self.resolved = true;
        let policy = self.breaker.policy;
        let probe = self.probe;
        let open = Inner::Open { until: Instant::now() + policy.cooldown };
        self.breaker.update(|inner| match *inner {
            Inner::HalfOpen { .. } if probe => *inner = open,
            Inner::HalfOpen { .. } => {}
            Inner::Closed { consecutive_fails } => {
                let fails = consecutive_fails + 1;
                *inner = if fails >= policy.allowed_fails {
                    open
                } else {
                    Inner::Closed { consecutive_fails: fails }
                };
            }
            Inner::Open { .. } => {}
        });
    }

    /// The call did not use the tier after all.
    pub fn unused(self) {}

    /// Settle the permit of a tier that gave up without answering the call: `tried` says
    /// whether any attempt started on it, `last_fault` is the fault of its last failure, if it
    /// has one (an answer that failed its checks is not a failure).
    ///
    /// The tier's health counts only when it was actually tried and the last failure says
    /// something about the tier rather than the request: then it [failed](Permit::failed). A
    /// tier that was tried otherwise [succeeded](Permit::succeeded); one that never was is
    /// [unused](Permit::unused) (a probe's slot is handed back).
    pub fn settle(self, tried: bool, last_fault: Option<Fault>) {
        match settlement(tried, last_fault) {
            Settlement::Failed => self.failed(),
            Settlement::Succeeded => self.succeeded(),
            Settlement::Unused => self.unused(),
        }
    }
}

/// How [`Permit::settle`] resolves a permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settlement {
    Failed,
    Succeeded,
    Unused,
}

fn settlement(tried: bool, last_fault: Option<Fault>) -> Settlement {
    match (last_fault, tried) {
        (Some(Fault::Provider | Fault::Account), true) => Settlement::Failed,
        // rein's own host could not open the connection: the provider was never reached, so
        // its last failure neither counts against the tier nor closes a probe.
        (Some(Fault::Gateway), _) => Settlement::Unused,
        // Answered (even if the answer failed its checks), or failed for a reason that says
        // nothing about the tier's health.
        (_, true) => Settlement::Succeeded,
        _ => Settlement::Unused,
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.resolved && self.probe {
            self.breaker.update(|inner| {
                if let Inner::HalfOpen { .. } = inner {
                    *inner = Inner::HalfOpen { probe_out: false };
                }
            });
        }
    }
}

impl Cooldown {
    pub fn new(policy: CooldownPolicy) -> Self {
        Self { policy, inner: Arc::new(Mutex::new(Inner::Closed { consecutive_fails: 0 })) }
    }

    pub fn policy(&self) -> CooldownPolicy {
        self.policy
    }

    pub fn admit(&self) -> Admission {
        let now = Instant::now();
        let mut admission = Admission::Skip { retry_at: None };
        let this = self.clone();
        self.update(|inner| match *inner {
            Inner::Closed { .. } => {
                admission =
                    Admission::Allowed(Permit { breaker: this, probe: false, resolved: false })
            }
            Inner::Open { until } if now < until => {
                admission = Admission::Skip { retry_at: Some(until) }
            }
            Inner::Open { .. } | Inner::HalfOpen { probe_out: false } => {
                *inner = Inner::HalfOpen { probe_out: true };
                admission =
                    Admission::Allowed(Permit { breaker: this, probe: true, resolved: false })
            }
            Inner::HalfOpen { probe_out: true } => {}
        });
        admission
    }

    pub fn state(&self) -> BreakerState {
        let now = Instant::now();
        let mut state = BreakerState::Closed;
        self.update(|inner| {
            state = match *inner {
                Inner::Closed { .. } => BreakerState::Closed,
                Inner::Open { until } if now < until => BreakerState::Open,
                Inner::Open { .. } | Inner::HalfOpen { .. } => BreakerState::HalfOpen,
            }
        });
        state
    }

    fn update(&self, f: impl FnOnce(&mut Inner)) {
        match self.inner.lock() {
            Ok(mut guard) => f(&mut guard),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }
}

/// Where the kill switch applies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "scope", content = "route")]
pub enum KillScope {
    Global,
    Route(String),
}

/// One recorded flip of the switch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillFlip {
    pub scope: KillScope,
    pub engaged: bool,
    pub reason: String,
    /// Wall-clock time of the flip, as milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

impl KillFlip {
    /// A flip made now.
    pub fn now(scope: KillScope, engaged: bool, reason: impl Into<String>) -> Self {
        Self { scope, engaged, reason: reason.into(), at_unix_ms: unix_ms() }
    }
}

#[derive(Debug, Default)]
struct KillState {
    engaged: HashMap<KillScope, String>,
    audit: Vec<KillFlip>,
}

/// The kill switch. Cheap to clone; clones share state.
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    state: Arc<RwLock<KillState>>,
}

impl KillSwitch {
    /// Engage or release the switch for a scope; takes effect on the next call.
    pub fn set(&self, scope: KillScope, engaged: bool, reason: impl Into<String>) -> KillFlip {
        let flip = KillFlip::now(scope, engaged, reason);
        self.apply(flip.clone());
        flip
    }

    /// Apply a flip made elsewhere (recorded first by the caller, which keeps the audit durable).
    pub fn apply(&self, flip: KillFlip) {
        tracing::warn!(scope = ?flip.scope, engaged = flip.engaged, reason = %flip.reason, "kill switch flipped");
        self.replay(flip);
    }

    /// Bring back recorded flips, oldest first: the switch ends as the last flip per scope left
    /// it, and the audit holds them all with their original times.
    pub fn restore(&self, flips: impl IntoIterator<Item = KillFlip>) {
        for flip in flips {
            self.replay(flip);
        }
    }

    fn replay(&self, flip: KillFlip) {
        let mut state = match self.state.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if flip.engaged {
            state.engaged.insert(flip.scope.clone(), flip.reason.clone());
        } else {
            state.engaged.remove(&flip.scope);
        }
        state.audit.push(flip);
    }

    /// The reason the route is switched off, if it is (global first).
    pub fn engaged_for(&self, route: &str) -> Option<String> {
        let state = match self.state.read() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        state
            .engaged
            .get(&KillScope::Global)
            .or_else(|| state.engaged.get(&KillScope::Route(route.to_string())))
            .cloned()
    }

    /// Every flip so far, oldest first.
    pub fn audit(&self) -> Vec<KillFlip> {
        match self.state.read() {
            Ok(guard) => guard.audit.clone(),
            Err(poisoned) => poisoned.into_inner().audit.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(breaker: &Cooldown) -> Permit {
        match breaker.admit() {
            Admission::Allowed(permit) => permit,
            Admission::Skip { .. } => panic!("expected the tier to be admitted"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_fails_and_lets_exactly_one_probe() {
        let breaker = Cooldown::new(CooldownPolicy::default());
        for _ in 0..3 {
            allowed(&breaker).failed();
        }
        assert_eq!(breaker.state(), BreakerState::Open);
        assert!(matches!(breaker.admit(), Admission::Skip { .. }));
        tokio::time::sleep(Duration::from_secs(30)).await;
        let probe = allowed(&breaker);
        assert!(probe.is_probe());
        assert!(matches!(breaker.admit(), Admission::Skip { .. }), "only one probe at a time");
        probe.succeeded();
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probe_reopens_and_abandoned_probe_frees_the_slot() {
        let breaker =
            Cooldown::new(CooldownPolicy { allowed_fails: 1, cooldown: Duration::from_secs(5) });
        allowed(&breaker).failed();
        tokio::time::sleep(Duration::from_secs(5)).await;
        allowed(&breaker).failed();
        assert_eq!(breaker.state(), BreakerState::Open);
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(allowed(&breaker));
        assert!(allowed(&breaker).is_probe(), "the abandoned probe's slot was handed back");
    }

    #[test]
    fn settlement_counts_only_a_tried_tier_and_not_the_requests_fault() {
        use Settlement::*;
        let table = [
            (true, Some(Fault::Provider), Failed),
            (true, Some(Fault::Account), Failed),
            (true, Some(Fault::Request), Succeeded),
            (true, Some(Fault::Gateway), Unused),
            (true, None, Succeeded),
            (false, Some(Fault::Provider), Unused),
            (false, Some(Fault::Account), Unused),
            (false, Some(Fault::Request), Unused),
            (false, Some(Fault::Gateway), Unused),
            (false, None, Unused),
        ];
        for (tried, fault, expected) in table {
            assert_eq!(settlement(tried, fault), expected, "tried {tried}, fault {fault:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn settle_moves_the_breaker_by_the_rule() {
        let policy = CooldownPolicy { allowed_fails: 1, cooldown: Duration::from_secs(5) };
        let breaker = Cooldown::new(policy);
        // Failures of the request or of rein's own host, or no attempt at all, leave a closed
        // breaker closed.
        allowed(&breaker).settle(true, Some(Fault::Request));
        allowed(&breaker).settle(true, Some(Fault::Gateway));
        allowed(&breaker).settle(false, Some(Fault::Provider));
        allowed(&breaker).settle(false, None);
        assert_eq!(breaker.state(), BreakerState::Closed);
        allowed(&breaker).settle(true, Some(Fault::Provider));
        assert_eq!(breaker.state(), BreakerState::Open);

        tokio::time::sleep(Duration::from_secs(5)).await;
        // An untried probe hands its slot back; a tried one that answered closes the breaker.
        let probe = allowed(&breaker);
        assert!(probe.is_probe());
        probe.settle(false, Some(Fault::Provider));
        let probe = allowed(&breaker);
        assert!(probe.is_probe(), "the untried probe's slot was handed back");
        probe.settle(true, None);
        assert_eq!(breaker.state(), BreakerState::Closed);

        // A tier failing on its account (not the request's) opens it; so does a failed probe.
        allowed(&breaker).settle(true, Some(Fault::Account));
        assert_eq!(breaker.state(), BreakerState::Open);
        tokio::time::sleep(Duration::from_secs(5)).await;
        allowed(&breaker).settle(true, Some(Fault::Provider));
        assert_eq!(breaker.state(), BreakerState::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_let_in_before_it_opened_neither_close_nor_reopen_it() {
        let breaker =
            Cooldown::new(CooldownPolicy { allowed_fails: 2, cooldown: Duration::from_secs(5) });
        // Four calls in flight while it is closed; two fail and open it.
        let late = [allowed(&breaker), allowed(&breaker), allowed(&breaker), allowed(&breaker)];
        let [first, second, third, fourth] = late;
        first.failed();
        second.failed();
        assert_eq!(breaker.state(), BreakerState::Open);
        third.succeeded();
        assert_eq!(breaker.state(), BreakerState::Open, "a late success does not close it");

        tokio::time::sleep(Duration::from_secs(5)).await;
        let probe = allowed(&breaker);
        assert!(probe.is_probe());
        fourth.failed();
        assert_eq!(breaker.state(), BreakerState::HalfOpen, "a late failure does not reopen it");
        assert!(matches!(breaker.admit(), Admission::Skip { .. }), "the probe is still out");
        probe.succeeded();
        assert_eq!(breaker.state(), BreakerState::Closed, "the probe's answer closes it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_count() {
        let breaker = Cooldown::new(CooldownPolicy::default());
        allowed(&breaker).failed();
        allowed(&breaker).failed();
        allowed(&breaker).succeeded();
        allowed(&breaker).failed();
        allowed(&breaker).failed();
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn kill_switch_scopes_and_audit() {
        let switch = KillSwitch::default();
        assert_eq!(switch.engaged_for("support"), None);
        switch.set(KillScope::Route("support".into()), true, "bad prompt edit");
        assert_eq!(switch.engaged_for("support").as_deref(), Some("bad prompt edit"));
        assert_eq!(switch.engaged_for("other"), None);
        switch.set(KillScope::Global, true, "provider incident");
        assert!(switch.engaged_for("other").is_some());
        switch.set(KillScope::Global, false, "resolved");
        switch.set(KillScope::Route("support".into()), false, "reverted");
        assert_eq!(switch.engaged_for("support"), None);
        assert_eq!(switch.audit().len(), 4);

        // Restoring the record into a fresh switch gives the same state and audit.
        let restored = KillSwitch::default();
        restored.restore(switch.audit().into_iter().take(2));
        assert_eq!(restored.engaged_for("other").as_deref(), Some("provider incident"));
        assert_eq!(restored.audit(), switch.audit()[..2]);
    }
}
