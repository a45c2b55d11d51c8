//! The types of one call: what comes out ([`Completion`] or [`CallError`], each with the full
//! report), the [`Observer`] that watches calls, and the state a call accumulates while the
//! chain runs. What goes in besides the request is the caller's [`CallContext`].

use std::fmt;
use std::time::Duration;

use crate::clock::{ClockPolicy, Deadline};
use crate::context::CallContext;
use crate::model::{ChatResponse, StopReason, Usage};
use crate::report::{
    Alert, AttemptRecord, CallReport, Outcome, ServedBy, SkipReason, Step, millis,
};
use crate::route::Route;

/// A finished call: the answer (a model's or the degraded reply) and what happened.
#[derive(Debug, Clone)]
pub struct Completion {
    pub response: ChatResponse,
    pub report: CallReport,
}

impl Completion {
    pub fn outcome(&self) -> Outcome {
        self.report.outcome
    }
}

/// A call that ended without an answer to give. Every variant carries the full report.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("no route named `{0}`")]
    UnknownRoute(String),
    /// The provider's content policy rejected the request; `reason` is the provider's words.
    #[error("rejected by the provider's content policy: {reason}")]
    ContentPolicy { reason: String, report: Box<CallReport> },
    /// The prompt is longer than every tier's context window.
    #[error("the prompt is too long for every tier of this route: {reason}")]
    ContextLength { reason: String, report: Box<CallReport> },
    /// The provider withheld the output under its content filter; `reason` says why.
    #[error("the provider's content filter withheld the answer: {reason}")]
    ContentFilter { reason: String, report: Box<CallReport> },
    /// A passthrough stream failed after tokens had reached the caller.
    #[error("the stream failed after it started: {reason}")]
    Interrupted { reason: String, report: Box<CallReport> },
}

impl CallError {
    pub fn report(&self) -> Option<&CallReport> {
        match self {
            CallError::UnknownRoute(_) => None,
            CallError::ContentPolicy { report, .. }
            | CallError::ContentFilter { report, .. }
            | CallError::ContextLength { report, .. }
            | CallError::Interrupted { report, .. } => Some(report),
        }
    }
}

/// Watches calls as they happen (metrics, traces). Every method has a no-op default.
pub trait Observer: Send + Sync + fmt::Debug {
    fn on_attempt(&self, _route: &str, _attempt: &AttemptRecord) {}
    fn on_alert(&self, _alert: &Alert) {}
    fn on_call(&self, _report: &CallReport) {}
    fn on_retry_budget_exhausted(&self, _provider: &str) {}
}

pub(super) enum Ended {
    Degraded,
    /// The model refused: the route's safe reply, counted as a refusal.
    Declined,
    Error(CallError),
}

/// The least time an attempt needs left before it may start, in a call whose whole deadline
/// is `total` (the shorter of the caller's and the route's).
///
/// On the route's own deadline this is the route's `min_attempt`: an attempt that cannot run
/// its course is not started, the call steps down instead. A caller's shorter deadline keeps the
/// route's plan in proportion: each attempt needs the same share of the call's deadline that
/// `min_attempt` is of the route's. So a 5 s call on a route of 20 s with 8 s attempts needs
/// 2 s left for a retry or a later tier, and a 20 s call needs 8 s as before. The floor never
/// exceeds `total`, and shrinks steadily with it, so a longer deadline never plans fewer
/// attempts. The call's first attempt is not held to it (`tier::attempt_fits`).
pub(crate) fn attempt_floor(clocks: &ClockPolicy, total: Duration) -> Duration {
    let route = clocks.deadline;
    if total >= route || route.is_zero() {
        return clocks.min_attempt.min(total);
    }
    let scaled = clocks.min_attempt.as_nanos() * total.as_nanos() / route.as_nanos();
    Duration::from_nanos(u64::try_from(scaled).unwrap_or(u64::MAX)).min(total)
}

/// What is known about a call while it runs.
pub(super) struct CallState {
    pub(super) deadline: Deadline,
    /// The least time a retry or a later tier needs left before it may start (see
    /// [`attempt_floor`]).
    pub(super) min_attempt: Duration,
    /// An attempt has started in this call. Until one has, the first may start with any time
    /// left: a call is never refused all its attempts by its own deadline.
    pub(super) attempted: bool,
    pub(super) steps: Vec<Step>,
    pub(super) alerts: Vec<Alert>,
    pub(super) outcome: Outcome,
    pub(super) served_by: Option<ServedBy>,
    /// The one re-ask after failed checks has been used.
    pub(super) reasked: bool,
    /// The one re-ask with a higher token ceiling has been used.
    pub(super) ceiling_raised: bool,
}

impl CallState {
    /// The state of a call on `route`, whose context has been narrowed to the route's deadline.
    pub(super) fn new(route: &Route, ctx: &CallContext) -> Self {
        let deadline = *ctx.deadline();
        let total = deadline.remaining();
        Self {
            deadline,
            min_attempt: attempt_floor(&route.clocks, total),
            attempted: false,
            steps: Vec::new(),
            alerts: Vec::new(),
            outcome: Outcome::Degraded,
            served_by: None,
            reasked: false,
            ceiling_raised: false,
        }
    }

    pub(super) fn skip(&mut self, tier: usize, tier_name: &str, reason: SkipReason) {
        self.steps.push(Step::TierSkipped {
            tier,
            tier_name: tier_name.to_string(),
            at_ms: millis(self.deadline.elapsed()),
            reason,
        });
    }

    pub(super) fn report(&self, route: &Route) -> CallReport {
        CallReport {
            route: route.name.clone(),
            settings_version: route.settings_version,
            outcome: self.outcome,
            served_by: self.served_by.clone(),
            steps: self.steps.clone(),
            alerts: self.alerts.clone(),
            elapsed_ms: millis(self.deadline.elapsed()),
        }
    }

    pub(super) fn finish(&mut self, route: &Route, response: ChatResponse) -> Completion {
        Completion { response, report: self.report(route) }
    }

    pub(super) fn degraded(&mut self, route: &Route, ctx: &CallContext) -> Completion {
        self.safe_reply(route, ctx, Outcome::Degraded)
    }

    pub(super) fn declined(&mut self, route: &Route, ctx: &CallContext) -> Completion {
        self.safe_reply(route, ctx, Outcome::Declined)
    }

    fn safe_reply(&mut self, route: &Route, ctx: &CallContext, outcome: Outcome) -> Completion {
        self.outcome = outcome;
        self.served_by = None;
        self.steps.push(Step::Degraded { at_ms: millis(self.deadline.elapsed()) });
        let response = ChatResponse {
            id: format!("degraded-{}", route.name),
            model: "rein-degraded".to_string(),
            text: route.degraded.render(&ctx.vars),
            stop_reason: Some(StopReason::EndTurn),
            usage: Usage::default(),
            ..ChatResponse::default()
        };
        self.finish(route, response)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use proptest::prelude::*;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_floor_keeps_the_routes_share_of_a_shorter_deadline() {
        let clocks = ClockPolicy::default();
        assert_eq!(attempt_floor(&clocks, ms(20_000)), ms(8_000));
        assert_eq!(attempt_floor(&clocks, ms(10_000)), ms(4_000));
        assert_eq!(attempt_floor(&clocks, ms(5_000)), ms(2_000));
        assert_eq!(attempt_floor(&clocks, ms(0)), ms(0));
        // A library route whose minimum attempt exceeds its deadline: never more than the call.
        let odd = ClockPolicy { deadline: ms(1_000), min_attempt: ms(3_000), ..clocks };
        assert_eq!(attempt_floor(&odd, ms(1_000)), ms(1_000));
        assert_eq!(attempt_floor(&odd, ms(500)), ms(500));
        let zero = ClockPolicy { deadline: Duration::ZERO, ..clocks };
        assert_eq!(attempt_floor(&zero, Duration::ZERO), Duration::ZERO);
    }

    proptest! {
        #[test]
        fn the_floor_fits_the_call_and_grows_with_its_deadline(
            route_ms in 1u64..120_000,
            min_ms in 0u64..120_000,
            a in 0u64..120_000,
            b in 0u64..120_000,
        ) {
            let clocks = ClockPolicy {
                deadline: ms(route_ms),
                min_attempt: ms(min_ms),
                ..ClockPolicy::default()
            };
            let (short, long) = (ms(a.min(b).min(route_ms)), ms(a.max(b).min(route_ms)));
            let floor = attempt_floor(&clocks, short);
            prop_assert!(floor <= short);
            prop_assert!(floor <= clocks.min_attempt);
            prop_assert!(floor <= attempt_floor(&clocks, long));
        }
    }
}
