//! The types of one call: what comes out ([`Completion`] or [`CallError`], each with the full
//! report), the [`Observer`] that watches calls, and the state a call accumulates while the
//! chain runs. What goes in besides the request is the caller's [`CallContext`].

use std::fmt;
use std::time::Duration;

use crate::classify::FailureKind;
use crate::clock::{ClockPolicy, Deadline};
use crate::context::CallContext;
use crate::degraded::{DegradedReply, Delivery};
use crate::failure::Failure;
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
    /// No tier answered, and the route's degraded reply goes out as an error: the route says so
    /// (`deliver = "error"`), or the caller asked for JSON and the reply has no JSON shape.
    /// `text` is the decided reply.
    #[error("{text}")]
    Degraded { text: String, report: Box<CallReport> },
    /// No tier answered and the route has no degraded reply. `misconfigured`: every attempt was
    /// refused for rein's own setup (a key, a permission, a model name), not for an outage.
    #[error("{reason}")]
    Unserved { reason: String, misconfigured: bool, report: Box<CallReport> },
}

impl CallError {
    pub fn report(&self) -> Option<&CallReport> {
        match self {
            CallError::UnknownRoute(_) => None,
            CallError::ContentPolicy { report, .. }
            | CallError::ContentFilter { report, .. }
            | CallError::ContextLength { report, .. }
            | CallError::Interrupted { report, .. }
            | CallError::Degraded { report, .. }
            | CallError::Unserved { report, .. } => Some(report),
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
    /// The call's run is stopped: its decided reply.
    Stopped,
    /// The model refused: the route's safe reply, counted as a refusal.
    Declined,
    /// Decided before any model was asked (`CallContext::decided`).
    Decided,
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
    /// The one re-ask after failed checks has been used.
    pub(super) reasked: bool,
    /// The one re-ask with a higher token ceiling has been used.
    pub(super) ceiling_raised: bool,
    /// The last answer that failed its checks for good.
    pub(super) rejected_draft: Option<String>,
    /// The caller's labels the route slices by.
    pub(super) labels: std::collections::BTreeMap<String, String>,
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
            reasked: false,
            ceiling_raised: false,
            rejected_draft: None,
            labels: if ctx.labels.is_empty() || route.labels.is_empty() {
                std::collections::BTreeMap::new()
            } else {
                ctx.labels
                    .iter()
                    .filter(|(key, _)| route.labels.contains(key))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect()
            },
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
            served_by: None,
            steps: self.steps.clone(),
            alerts: self.alerts.clone(),
            elapsed_ms: millis(self.deadline.elapsed()),
            rejected_draft: self.rejected_draft.clone(),
            labels: self.labels.clone(),
        }
    }

    /// A tier's answer, `served_by` it, is the call's. (Who served is not kept in the state
    /// before: it is known only here, and every call's state would carry its room.)
    pub(super) fn finish(
        &mut self,
        route: &Route,
        response: ChatResponse,
        served_by: ServedBy,
    ) -> Completion {
        let mut report = self.report(route);
        report.served_by = Some(served_by);
        Completion { response, report }
    }

    /// No tier answered: the route's degraded reply, as the answer or as the error it delivers.
    /// `structured`: the caller asked for JSON.
    pub(super) fn degraded(
        &mut self,
        route: &Route,
        ctx: &CallContext,
        structured: bool,
    ) -> Result<Completion, CallError> {
        self.safe_reply(route, ctx, Outcome::Degraded, structured)
    }

    /// No tier answered and the route's degraded mode acted (a tool through its ladder, a
    /// fixed template): its reply, counted as degraded.
    pub(super) fn acted(
        &mut self,
        route: &Route,
        ctx: &CallContext,
        structured: bool,
        acted: crate::degraded::Acted,
    ) -> Result<Completion, CallError> {
        self.steps.push(Step::DegradedActed { rule: acted.rule.clone(), handoff: acted.handoff });
        let reply = DegradedReply { json: None, ..DegradedReply::text(acted.text) };
        let reply = DegradedReply {
            deliver: route.degraded.as_ref().map_or(Delivery::Reply, |d| d.deliver),
            ..reply
        };
        self.reply(route, ctx, Outcome::Degraded, structured, Some(&reply))
    }

    /// The run is stopped: the route's decided reply (its stopped reply, else its degraded one),
    /// counted as stopped.
    pub(super) fn stopped(
        &mut self,
        route: &Route,
        ctx: &CallContext,
        structured: bool,
    ) -> Result<Completion, CallError> {
        let reply = route.stopped_reply.as_ref().or(route.degraded.as_ref());
        self.reply(route, ctx, Outcome::Stopped, structured, reply)
    }

    /// The call was decided before any model was asked: the decision's reply and outcome.
    pub(super) fn decided(
        &mut self,
        route: &Route,
        ctx: &CallContext,
        structured: bool,
    ) -> Result<Completion, CallError> {
        let Some(decided) = &ctx.decided else { return self.degraded(route, ctx, structured) };
        self.reply(route, ctx, decided.outcome, structured, Some(&decided.reply))
    }

    /// The model refused: the route's safe reply, like [`CallState::degraded`].
    pub(super) fn declined(
        &mut self,
        route: &Route,
        ctx: &CallContext,
        structured: bool,
    ) -> Result<Completion, CallError> {
        self.safe_reply(route, ctx, Outcome::Declined, structured)
    }

    fn safe_reply(
        &mut self,
        route: &Route,
        ctx: &CallContext,
        outcome: Outcome,
        structured: bool,
    ) -> Result<Completion, CallError> {
        self.reply(route, ctx, outcome, structured, route.degraded.as_ref())
    }

    fn reply(
        &mut self,
        route: &Route,
        ctx: &CallContext,
        outcome: Outcome,
        structured: bool,
        reply: Option<&DegradedReply>,
    ) -> Result<Completion, CallError> {
        self.outcome = outcome;
        let Some(reply) = reply else {
            return Err(self.unserved(route, outcome));
        };
        self.steps.push(Step::Degraded { at_ms: millis(self.deadline.elapsed()) });
        let rendered = reply.render(&ctx.vars);
        let text = match (&reply.json, structured) {
            (Some(json), true) => json.to_string(),
            (None, true) => {
                return Err(CallError::Degraded {
                    text: rendered,
                    report: Box::new(self.report(route)),
                });
            }
            (_, false) => rendered,
        };
        if reply.deliver == Delivery::Error {
            return Err(CallError::Degraded { text, report: Box::new(self.report(route)) });
        }
        let response = ChatResponse {
            id: format!("degraded-{}", route.name),
            model: "rein-degraded".to_string(),
            text,
            stop_reason: Some(StopReason::EndTurn),
            usage: Usage::default(),
            ..ChatResponse::default()
        };
        // No tier served it.
        Ok(Completion { response, report: self.report(route) })
    }

    /// The error of a call no tier answered on a route without a degraded reply: what each
    /// tier did, and whether that was rein's own setup being refused.
    fn unserved(&mut self, route: &Route, outcome: Outcome) -> CallError {
        let mut tiers: Vec<(String, String, usize, Option<String>)> = Vec::new();
        let mut refused_setup = true;
        let mut attempts = 0;
        for step in &self.steps {
            let Step::Attempt(attempt) = step else { continue };
            attempts += 1;
            let kind = attempt.classified.as_ref().map(|c| c.kind);
            refused_setup &= matches!(
                kind,
                Some(FailureKind::Unauthorized | FailureKind::Forbidden | FailureKind::NotFound)
            );
            let status = match &attempt.failure {
                Some(Failure::Http { http, .. }) => format!("{} ", http.status),
                _ => String::new(),
            };
            let last = kind.map(|kind| format!("{status}{}", kind.as_str()));
            match tiers.iter_mut().find(|t| t.0 == attempt.tier_name) {
                Some(tier) => {
                    tier.2 += 1;
                    tier.3 = last;
                }
                None => tiers.push((attempt.tier_name.clone(), attempt.provider.clone(), 1, last)),
            }
        }
        let misconfigured = attempts > 0 && refused_setup;
        let tried: Vec<String> = tiers
            .iter()
            .map(|(tier, provider, n, last)| {
                let last = last.as_deref().unwrap_or("no answer");
                let plural = if *n == 1 { "" } else { "s" };
                format!("`{tier}` on `{provider}`: {n} attempt{plural}, last {last}")
            })
            .collect();
        let switched_off = self.steps.iter().find_map(|step| match step {
            Step::KillSwitch { reason } => Some(reason.clone()),
            _ => None,
        });
        let reason = if misconfigured {
            format!(
                "rein is misconfigured for route `{}`: every provider refused rein's own setup ({}). Check the providers' API keys, permissions and model names.",
                route.name,
                tried.join("; ")
            )
        } else if let Some(status) = self.steps.iter().find_map(|step| match step {
            Step::RunStopped { status } => Some(status.clone()),
            _ => None,
        }) {
            format!(
                "the run was stopped ({status}) and route `{}` has no decided reply",
                route.name
            )
        } else if let Some(why) = switched_off {
            format!("route `{}` is switched off ({why}) and has no degraded reply", route.name)
        } else if outcome == Outcome::Declined {
            format!("the model declined and route `{}` has no safe reply", route.name)
        } else if tried.is_empty() {
            format!(
                "no tier of route `{}` could be tried (cooling down, or no time left) and the route has no degraded reply",
                route.name
            )
        } else {
            format!(
                "no tier of route `{}` could answer ({}) and the route has no degraded reply",
                route.name,
                tried.join("; ")
            )
        };
        CallError::Unserved { reason, misconfigured, report: Box::new(self.report(route)) }
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
