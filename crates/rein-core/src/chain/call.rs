//! The types of one call: what the caller passes in ([`CallOptions`]), what comes out
//! ([`Completion`] or [`CallError`], each with the full report), the [`Observer`] that watches
//! calls, and the state a call accumulates while the chain runs.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::clock::Deadline;
use crate::model::{ChatResponse, StopReason, Usage};
use crate::report::{
    Alert, AttemptRecord, CallReport, Outcome, ServedBy, SkipReason, Step, millis,
};
use crate::route::Route;
use crate::validate::Evidence;

/// Per-call options from the caller.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The caller's deadline; the call uses the shorter of this and the route's.
    pub deadline: Option<Duration>,
    /// Values for the degraded reply's template.
    pub vars: BTreeMap<String, String>,
    /// What rein saw in this run (tool results, documents the caller passed), for the
    /// business rules of the validation ladder.
    pub evidence: Evidence,
}

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

/// What is known about a call while it runs.
pub(super) struct CallState {
    pub(super) deadline: Deadline,
    /// The least time an attempt needs before it may start: the route's `min_attempt`, or the
    /// whole deadline when the caller's is shorter (so a short deadline still gets one attempt).
    pub(super) min_attempt: Duration,
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
    pub(super) fn new(route: &Route, options: &CallOptions) -> Self {
        let total =
            options.deadline.map_or(route.clocks.deadline, |d| d.min(route.clocks.deadline));
        Self {
            deadline: Deadline::after(total),
            min_attempt: route.clocks.min_attempt.min(total),
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

    pub(super) fn degraded(&mut self, route: &Route, options: &CallOptions) -> Completion {
        self.safe_reply(route, options, Outcome::Degraded)
    }

    pub(super) fn declined(&mut self, route: &Route, options: &CallOptions) -> Completion {
        self.safe_reply(route, options, Outcome::Declined)
    }

    fn safe_reply(&mut self, route: &Route, options: &CallOptions, outcome: Outcome) -> Completion {
        self.outcome = outcome;
        self.served_by = None;
        self.steps.push(Step::Degraded { at_ms: millis(self.deadline.elapsed()) });
        let response = ChatResponse {
            id: format!("degraded-{}", route.name),
            model: "rein-degraded".to_string(),
            text: route.degraded.render(&options.vars),
            stop_reason: Some(StopReason::EndTurn),
            usage: Usage::default(),
            ..ChatResponse::default()
        };
        self.finish(route, response)
    }
}
