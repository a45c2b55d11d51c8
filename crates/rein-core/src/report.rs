//! The record of one call: every attempt, wait, skip and decision in order, the outcome, and
//! the alerts raised. This is what response headers, metrics and trace steps are built from, and
//! what a chain that runs out returns instead of only its last error.

use std::time::Duration;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::classify::Classified;
use crate::failure::Failure;
use crate::validate::{CodeRepair, Problem};

/// How a call ended, as the caller is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The first tier answered (or the failover share's tier, by plan).
    Answered,
    /// A later tier answered after the ones above it failed or were skipped.
    Fallback,
    /// No model answered; the route's degraded reply was sent.
    Degraded,
    /// The call was ended on purpose (content policy, context too long for every tier).
    Stopped,
    /// A passthrough stream failed after tokens were already forwarded.
    Interrupted,
    /// The model refused; the route's safe reply was sent.
    Declined,
    /// The conversation went to a person before a model was asked (a hand-off rule, the
    /// coverage check); the route's hand-off reply was sent.
    HandedOff,
    /// The question was unclear; the customer was asked what they meant.
    Clarified,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Fallback => "fallback",
            Outcome::Degraded => "degraded",
            Outcome::Stopped => "stopped",
            Outcome::Interrupted => "interrupted",
            Outcome::Declined => "declined",
            Outcome::HandedOff => "handed_off",
            Outcome::Clarified => "clarified",
        }
    }
}

/// Why a tier was not (or no longer) tried.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "why")]
pub enum SkipReason {
    /// Its breaker is open.
    CoolingDown,
    /// Less than a full attempt was left before the deadline.
    NoTimeLeft { remaining_ms: u64 },
    /// The retry budget of its provider is spent.
    RetryBudgetExhausted,
    /// The server asked for a wait that does not fit the deadline.
    RetryAfterBeyondDeadline { retry_after_ms: u64, remaining_ms: u64 },
    /// The prompt is too long and this tier's context window is no larger.
    ContextTooSmall,
    /// A permanent failure on this tier: never retried.
    PermanentFailure,
    /// The tier's attempts are used up.
    AttemptsExhausted,
    /// The provider said not to retry.
    NotRetryable,
    /// The tier answered, but the answer failed its checks (after the one repair).
    ChecksFailed,
    /// A retry here, failing as the last attempt did (`retry_ms`, its wait included), would
    /// leave the next tier less than a full attempt (`reserve_ms`): the call moves down now.
    SavedForNextTier { remaining_ms: u64, retry_ms: u64, reserve_ms: u64 },
    /// The route sends this timeout to the next tier rather than retrying it (`on_timeout`).
    SentOn { clock: &'static str },
    /// A passthrough stream broke after text reached the caller; a later tier continues it.
    StreamBroke,
    /// The tier takes no assistant prefill, so it cannot continue a broken stream.
    NoPrefill,
    /// The tier refused the assistant prefill a continuation needs.
    PrefillRejected,
}

/// Who served the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedBy {
    pub tier: usize,
    pub tier_name: String,
    pub provider: String,
    /// The model as the provider reported it in the answer.
    pub model: String,
    /// True when the failover share sent this call to the tier by plan.
    pub failover: bool,
}

/// One upstream attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRecord {
    pub tier: usize,
    pub tier_name: String,
    pub provider: String,
    pub model: String,
    /// 1 for the first attempt on this tier in this call.
    pub number: u32,
    /// When it started, since the call started.
    pub started_ms: u64,
    pub elapsed_ms: u64,
    /// `None` when the attempt answered.
    pub failure: Option<Failure>,
    pub classified: Option<Classified>,
    /// Whether this attempt was a probe through a half-open breaker.
    pub probe: bool,
}

/// One step of the call, in order. (Attempts dominate the size; boxing them buys nothing here.)
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "step")]
pub enum Step {
    Attempt(AttemptRecord),
    /// A wait before a retry, and whether the provider's `retry-after` set it.
    Wait {
        tier: usize,
        at_ms: u64,
        wait_ms: u64,
        pushback: bool,
    },
    /// A tier was skipped, or given up on.
    TierSkipped {
        tier: usize,
        tier_name: String,
        at_ms: u64,
        reason: SkipReason,
    },
    /// The kill switch sent the call to the degraded reply.
    KillSwitch {
        reason: String,
    },
    /// The call's run is stopped (a stop condition held): its decided reply, no provider asked.
    RunStopped {
        status: String,
    },
    /// Decided before any model was asked (a hand-off rule, the coverage check).
    Decided {
        status: String,
    },
    /// The degraded reply (or, after a refusal, the safe reply) was sent.
    Degraded {
        at_ms: u64,
    },
    /// The route's degraded mode acted (rule `rule`), without a model; `handoff`: it also sent
    /// the conversation to a person.
    DegradedActed {
        rule: String,
        handoff: bool,
    },
    /// An answer went through the validation ladder.
    Checked {
        tier: usize,
        at_ms: u64,
        /// `pass`, `cut_off`, `refused`, `filtered` or `fail`.
        verdict: &'static str,
        repairs: Vec<CodeRepair>,
        problems: Vec<Problem>,
        failed_open: Vec<Problem>,
        /// Passthrough streams are checked after the fact: the verdict is recorded, not acted on.
        recorded_only: bool,
    },
    /// The tier is asked again: once with a higher token ceiling after a cut-off answer, once
    /// with the exact problems after failed checks. Counted apart from transport retries.
    Reask {
        tier: usize,
        at_ms: u64,
        reason: ReaskReason,
    },
}

/// Why an answer was asked for again.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "why")]
pub enum ReaskReason {
    /// Cut off at the token ceiling: asked again with this one.
    CutOff { max_tokens: u32 },
    /// Failed its checks: asked again naming the problems.
    ChecksFailed { problems: Vec<Problem> },
}

/// Something a person should know about (a tier rejecting every request, quota gone).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    pub route: String,
    pub tier_name: String,
    pub provider: String,
    pub kind: &'static str,
    pub message: String,
}

/// Everything that happened in one call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallReport {
    pub route: String,
    /// The route settings version that served the call, when versions are kept.
    pub settings_version: Option<i64>,
    pub outcome: Outcome,
    pub served_by: Option<ServedBy>,
    pub steps: Vec<Step>,
    pub alerts: Vec<Alert>,
    pub elapsed_ms: u64,
    /// The last answer thrown away for failing its checks after its one repair: the draft a
    /// hand-off shows the reviewer. Never sent to the caller.
    #[serde(skip)]
    pub rejected_draft: Option<String>,
    /// The caller's labels whose keys the route slices by.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl CallReport {
    pub fn attempts(&self) -> impl Iterator<Item = &AttemptRecord> {
        self.steps.iter().filter_map(|step| match step {
            Step::Attempt(attempt) => Some(attempt),
            _ => None,
        })
    }

    pub fn attempt_count(&self) -> usize {
        self.attempts().count()
    }

    /// The status of the call's run, when it was stopped (`stopped_repeated_call`, ...).
    pub fn run_status(&self) -> Option<&str> {
        self.steps.iter().find_map(|step| match step {
            Step::RunStopped { status } => Some(status.as_str()),
            _ => None,
        })
    }

    /// Re-asks made (cut-off or failed checks), counted apart from transport retries.
    pub fn reask_count(&self) -> usize {
        self.steps.iter().filter(|step| matches!(step, Step::Reask { .. })).count()
    }

    /// Code repairs applied to the answer that was used.
    pub fn repairs(&self) -> Vec<&CodeRepair> {
        self.steps
            .iter()
            .filter_map(|step| match step {
                Step::Checked { repairs, verdict: "pass", .. } => Some(repairs.iter()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Attempts made on one tier.
    pub fn attempts_on(&self, tier: usize) -> usize {
        self.attempts().filter(|a| a.tier == tier).count()
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    duration.as_millis().min(u128::from(u64::MAX)) as u64
}
