//! One tier's turn in a call: its attempts, one after another, until it answers, the call ends
//! on it, or it gives up and the chain steps down.
//!
//! Before a retry, the move from [`retry::next`] (the server's pushback or the backoff, when the
//! wait fits the deadline and, while a later tier can run, leaves it a full attempt) and then
//! the provider's retry budget; before any other attempt, the deadline's floor
//! ([`attempt_fits`]). Each attempt runs on the clocks cut to what the deadline
//! leaves, a retry's to what it leaves beyond the later tier's reserve. An answer goes through the ladder ([`check`]), which may ask the tier
//! again; a failure is classified and its disposition decides: retry, step down (to a larger
//! context window, or with an alert), or stop the call. The breaker is not touched here: the
//! chain settles it from the [`TierEnd`].

use std::time::Duration;

use crate::attempt::{AttemptClocks, Forwarder, run_attempt};
use crate::breaker::BreakerState;
use crate::budget::RetryBudget;
use crate::classify::{Classified, Disposition, FailureKind, classify};
use crate::clock::ClockPolicy;
use crate::context::CallContext;
use crate::failure::Failure;
use crate::model::{ChatRequest, ChatResponse};
use crate::report::{Alert, AttemptRecord, Outcome, ServedBy, SkipReason, Step, millis};
use crate::retry::{self, Jitter, RetryMove, Room, TimeoutMove};
use crate::route::{Route, Tier};

use super::call::{CallError, CallState, Completion, Ended, Observer};
use super::check::{Checked, Sent, check};

/// How a tier's turn ended. (Returned once per tier: boxing the answer would cost an allocation
/// per call and buy nothing.)
#[allow(clippy::large_enum_variant)]
pub(super) enum TierEnd {
    /// It answered: the call is served.
    Answered(Completion),
    /// The call ends on this tier without an answer: a refusal, the content filter, the content
    /// policy, or a passthrough stream that broke after its first token. `tier_failed`: the
    /// ending counts against the tier.
    Ended { end: Ended, tier_failed: bool },
    /// A passthrough stream broke after text reached the caller, and the route continues it:
    /// a later tier that takes a prefill carries on from that text. `last` is the failure.
    Broke { last: Classified },
    /// It gave up; a later tier may answer.
    SteppedDown {
        /// The last failure's classification (a re-ask clears it); none when no attempt has
        /// failed since.
        last: Option<Classified>,
        /// An attempt started on the tier.
        tried: bool,
        /// The provider's words when the prompt was too long for the tier's context window.
        context_length: Option<String>,
    },
}

/// One tier's turn in a call, with what its attempts need.
pub(super) struct TierRun<'a> {
    pub(super) ctx: &'a CallContext,
    pub(super) route: &'a Route,
    /// The tier's index in the route.
    pub(super) index: usize,
    pub(super) tier: &'a Tier,
    /// The tier's place in this call's order (0: it went first).
    pub(super) position: usize,
    /// The breaker let the call through as its half-open probe.
    pub(super) probe: bool,
    /// The tiers after this one in the call's order: while one of them can run, retries here
    /// never eat into its full attempt.
    pub(super) later: &'a [usize],
    /// Set by a context-length failure: later tiers need a larger window than this.
    pub(super) context_floor: Option<u32>,
    /// The retry budget of the tier's provider.
    pub(super) budget: &'a RetryBudget,
    pub(super) jitter: &'a dyn Jitter,
    pub(super) observer: Option<&'a dyn Observer>,
}

/// The tier's move after one attempt. (Unboxed, like [`TierEnd`].)
#[allow(clippy::large_enum_variant)]
enum Next {
    /// Try again after this failure, if the next attempt may start.
    Retry(Classified),
    /// Ask the tier again with this request: one attempt more, with no wait.
    Reask(Box<ChatRequest>),
    /// The answer failed its checks for good: leave the tier.
    Rejected,
    /// Leave the tier after this failure.
    StepDown { last: Classified, context_length: Option<String> },
    /// The tier's turn is over.
    Done(TierEnd),
}

impl TierRun<'_> {
    /// Run the tier's attempts on the call's `request`, as the tier prepares it.
    pub(super) async fn attempts(
        &self,
        call: &mut CallState,
        request: &ChatRequest,
        mut forward: Option<&mut Forwarder>,
    ) -> TierEnd {
        let (route, tier) = (self.route, self.tier);
        // A half-open probe is one attempt: a recovering tier gets a single request, not a burst.
        let mut attempts =
            if self.probe { 1 } else { tier.attempts.unwrap_or(route.retry.attempts).max(1) };
        let mut last: Option<Classified> = None;
        // How long the last failed attempt took: what the same failure would cost again.
        let mut took = Duration::ZERO;
        let mut tried = false;
        let mut context_length = None;
        // The request as this tier sends it is made for each attempt and let go once sent: the
        // answer's check reads it through the call's (`Sent`), so a stream does not keep a
        // second copy of the conversation while it is open. A re-ask's request is kept.
        let mut reasked: Option<Box<ChatRequest>> = None;
        let mut number = 0;

        while number < attempts {
            number += 1;
            // The decisions are plain functions and the waits are awaited here, so a call's
            // future nests no deeper than the tier loop's (every level is copied when built).
            match self.before_attempt(call, last.as_ref(), took, number) {
                Ok(None) => {}
                Ok(Some(wait)) => tokio::time::sleep(wait).await,
                Err(reason) => {
                    call.skip(self.index, &tier.name, reason);
                    break;
                }
            }
            let reserve = if number > 1 { self.reserve(call) } else { Duration::ZERO };
            let clocks = attempt_clocks(call, &route.clocks, reserve);
            let started = call.deadline.elapsed();
            tried = true;
            call.attempted = true;
            // The attempt's result is taken apart in the statement that awaits it, and its
            // record is built by a plain function: neither is kept beside the check's await
            // (a passthrough stream holds this state, nested, as long as it is open).
            let next = 'next: {
                let sending = match &reasked {
                    Some(reasked) => tier.provider.send(reasked),
                    None => tier.provider.send(&tier.prepare(request)),
                };
                let response = match run_attempt(sending, clocks, forward.as_deref_mut()).await {
                    Ok(response) => response,
                    Err(failure) => {
                        took = call.deadline.elapsed().saturating_sub(started);
                        let record = self.record(call, number, started);
                        let last = number == attempts;
                        break 'next self.failed(call, record, failure, last, forward.as_deref());
                    }
                };
                {
                    // In a block of its own, so the record takes no room beside the check's wait.
                    let record = self.record(call, number, started);
                    self.observe(&record);
                    call.steps.push(Step::Attempt(record));
                }
                let forwarded = forward.as_deref().is_some_and(|f| f.forwarded());
                let sent = match &reasked {
                    Some(reasked) => Sent::Reasked(reasked),
                    None => Sent::Prepared { request, tier },
                };
                let checked =
                    check(self.ctx, route, self.index, &response, sent, forwarded, call).await;
                self.answered(call, response, checked)
            };
            match next {
                Next::Retry(classified) => last = Some(classified),
                Next::Reask(next) => {
                    reasked = Some(next);
                    attempts += 1;
                    last = None;
                }
                Next::Rejected => break,
                Next::StepDown { last: classified, context_length: words } => {
                    last = Some(classified);
                    context_length = words;
                    break;
                }
                Next::Done(end) => return end,
            }
        }
        TierEnd::SteppedDown { last, tried, context_length }
    }

    /// The record of attempt number `number`, started at `started` into the call and ended now.
    fn record(&self, call: &CallState, number: u32, started: Duration) -> AttemptRecord {
        AttemptRecord {
            tier: self.index,
            tier_name: self.tier.name.clone(),
            provider: self.tier.provider.name().to_string(),
            model: self.tier.model.clone(),
            number,
            started_ms: millis(started),
            elapsed_ms: millis(call.deadline.elapsed().saturating_sub(started)),
            failure: None,
            classified: None,
            probe: self.probe,
        }
    }

    /// Whether attempt number `number` may start: after a failure `last`, after the wait this
    /// returns (recorded as a step); `Err` says why the tier is left instead.
    fn before_attempt(
        &self,
        call: &mut CallState,
        last: Option<&Classified>,
        took: Duration,
        number: u32,
    ) -> Result<Option<Duration>, SkipReason> {
        let Some(previous) = last else {
            if !attempt_fits(call) {
                return Err(SkipReason::NoTimeLeft {
                    remaining_ms: millis(call.deadline.remaining()),
                });
            }
            self.budget.record_request();
            return Ok(None);
        };
        let reserve = self.reserve(call);
        let room = Room { deadline: &call.deadline, min_attempt: call.min_attempt, reserve };
        let move_ = retry::next(previous, took, number, &self.route.retry, self.jitter, &room);
        let (wait, pushback) = match move_ {
            RetryMove::Wait { wait, pushback } => (wait, pushback),
            RetryMove::Skip(reason) => return Err(reason),
        };
        if !self.budget.try_retry() {
            if let Some(observer) = self.observer {
                observer.on_retry_budget_exhausted(self.tier.provider.name());
            }
            return Err(SkipReason::RetryBudgetExhausted);
        }
        call.steps.push(Step::Wait {
            tier: self.index,
            at_ms: millis(call.deadline.elapsed()),
            wait_ms: millis(wait),
            pushback,
        });
        Ok(Some(wait))
    }

    /// An attempt answered and the ladder decided (`checked`) whether it serves the call.
    fn answered(&self, call: &mut CallState, mut response: ChatResponse, checked: Checked) -> Next {
        let (route, tier, index) = (self.route, self.tier, self.index);
        match checked {
            Checked::Accept { text, tool_calls } => {
                if let Some(text) = text {
                    response.text = text;
                }
                if let Some(tool_calls) = tool_calls {
                    response.tool_calls = tool_calls;
                }
            }
            Checked::Reask(next) => return Next::Reask(next),
            Checked::Rejected => {
                call.rejected_draft = Some(response.text.clone());
                call.skip(index, &tier.name, SkipReason::ChecksFailed);
                return Next::Rejected;
            }
            Checked::Declined => {
                return Next::Done(TierEnd::Ended { end: Ended::Declined, tier_failed: false });
            }
            Checked::Filtered(reason) => {
                call.outcome = Outcome::Stopped;
                let report = Box::new(call.report(route));
                let end = Ended::Error(CallError::ContentFilter { reason, report });
                return Next::Done(TierEnd::Ended { end, tier_failed: false });
            }
        }
        let failover = self.position == 0 && index != 0;
        call.outcome = if index == 0 || failover { Outcome::Answered } else { Outcome::Fallback };
        let served_by = ServedBy {
            tier: index,
            tier_name: tier.name.clone(),
            provider: tier.provider.name().to_string(),
            model: if response.model.is_empty() {
                tier.model.clone()
            } else {
                response.model.clone()
            },
            failover,
        };
        Next::Done(TierEnd::Answered(call.finish(route, response, served_by)))
    }

    /// An attempt failed (`record`): its classification decides the tier's move. `last_attempt`:
    /// it was the tier's last.
    fn failed(
        &self,
        call: &mut CallState,
        mut record: AttemptRecord,
        failure: Failure,
        last_attempt: bool,
        forward: Option<&Forwarder>,
    ) -> Next {
        let (route, tier, index) = (self.route, self.tier, self.index);
        let classified = classify(&failure);
        tracing::debug!(
            route = %route.name, tier = %tier.name, attempt = record.number,
            kind = classified.kind.as_str(), reason = classified.reason,
            "attempt failed"
        );
        record.failure = Some(failure.clone());
        record.classified = Some(classified.clone());
        self.observe(&record);
        call.steps.push(Step::Attempt(record));
        if let Some(forward) = forward
            && route.continuation
            && forward.continuable().is_some()
        {
            // A continuing tier that refuses the prefill is skipped for this call only.
            let reason = if forward.continuing() && classified.kind == FailureKind::InvalidRequest {
                SkipReason::PrefillRejected
            } else {
                SkipReason::StreamBroke
            };
            call.skip(index, &tier.name, reason);
            return Next::Done(TierEnd::Broke { last: classified });
        }
        if forward.is_some_and(|f| f.forwarded()) {
            call.outcome = Outcome::Interrupted;
            let report = Box::new(call.report(route));
            let end = Ended::Error(CallError::Interrupted { reason: failure.to_string(), report });
            // The tier broke the stream. A caller that hangs up never gets here: the call runs
            // inside the caller's stream and is dropped with it, so a client (or one hostile
            // client) cannot open a healthy upstream's breaker by disconnecting.
            return Next::Done(TierEnd::Ended { end, tier_failed: true });
        }
        let (reason, context_length) = match classified.disposition {
            Disposition::RetryTier => {
                if let Some((TimeoutMove::NextTier, clock)) = route.on_timeout.of(classified.kind) {
                    call.skip(index, &tier.name, SkipReason::SentOn { clock });
                    return Next::StepDown { last: classified, context_length: None };
                }
                if last_attempt {
                    call.skip(index, &tier.name, SkipReason::AttemptsExhausted);
                }
                return Next::Retry(classified);
            }
            Disposition::NextTier => (SkipReason::NotRetryable, None),
            Disposition::NextLargerContextTier => {
                (SkipReason::PermanentFailure, Some(http_message(&failure)))
            }
            Disposition::SkipTierAndAlert => {
                self.alert(call, &classified, &failure);
                (SkipReason::PermanentFailure, None)
            }
            Disposition::Stop => {
                call.outcome = Outcome::Stopped;
                let reason = http_message(&failure);
                let report = Box::new(call.report(route));
                let end = Ended::Error(CallError::ContentPolicy { reason, report });
                return Next::Done(TierEnd::Ended { end, tier_failed: false });
            }
        };
        call.skip(index, &tier.name, reason);
        Next::StepDown { last: classified, context_length }
    }

    /// A permanent failure of the tier that a person should know about.
    fn alert(&self, call: &mut CallState, classified: &Classified, failure: &Failure) {
        let alert = Alert {
            route: self.route.name.clone(),
            tier_name: self.tier.name.clone(),
            provider: self.tier.provider.name().to_string(),
            kind: classified.kind.as_str(),
            message: failure.to_string(),
        };
        tracing::warn!(
            route = %alert.route, tier = %alert.tier_name, provider = %alert.provider,
            kind = alert.kind, "tier skipped: {}", alert.message
        );
        if let Some(observer) = self.observer {
            observer.on_alert(&alert);
        }
        call.alerts.push(alert);
    }

    /// What a later tier needs left for a full attempt: the call's `min_attempt` while one of
    /// them can still run (its breaker is not open, its window fits), zero otherwise. Asked
    /// only when a retry is weighed, so a call that answers at once never looks.
    fn reserve(&self, call: &CallState) -> Duration {
        let can_run = |tier: &Tier| {
            let fits =
                self.context_floor.is_none_or(|floor| tier.context_window.unwrap_or(0) > floor);
            fits && tier.cooldown.state() != BreakerState::Open
        };
        if self.later.iter().any(|&i| can_run(&self.route.tiers[i])) {
            call.min_attempt
        } else {
            Duration::ZERO
        }
    }

    fn observe(&self, record: &AttemptRecord) {
        if let Some(observer) = self.observer {
            observer.on_attempt(&self.route.name, record);
        }
    }
}

/// Whether an attempt with no wait before it may start now: the call's first attempt while any
/// time is left, a later one only with [`CallState::min_attempt`] left.
fn attempt_fits(call: &CallState) -> bool {
    if call.attempted {
        call.deadline.fits(call.min_attempt)
    } else {
        !call.deadline.remaining().is_zero()
    }
}

/// The clocks of an attempt starting now: the route's, cut to what the deadline leaves beyond
/// `reserve` (a later tier's full attempt, for a retry), so a short deadline shrinks the attempt
/// instead of skipping it (the first-token clock too, so a silent provider is reported as
/// silent, not as a slow attempt).
fn attempt_clocks(call: &CallState, clocks: &ClockPolicy, reserve: Duration) -> AttemptClocks {
    let cap = call.deadline.cut_leaving(clocks.attempt, reserve);
    AttemptClocks { first_token: clocks.first_token.min(cap), stream_idle: clocks.stream_idle, cap }
}

/// The provider's own words for a failure, for the caller.
fn http_message(failure: &Failure) -> String {
    match failure {
        Failure::Http { http, .. } => http.message.clone(),
        Failure::StreamError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}
