//! A run: the calls an agent makes for one customer message (its model calls and its tool calls,
//! sharing one `x-rein-run-id` within an `x-rein-conversation-id`), and the stop conditions that
//! bound it. The spec's defaults: at most 8 model calls per message, the same tool with the same
//! arguments at most twice, a stop on the same tool error twice in a row, and the message's
//! 20 s deadline, and a spend cap per conversation (each answer's usage priced by a
//! [`ModelPrice`]). The counts are rein's own (the store keeps them, so replicas share them); these
//! functions only decide, from a run's tally, whether the next step may go ahead.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The limits of one run. Defaults are the spec's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunLimits {
    /// Model calls per customer message.
    pub max_model_calls: u32,
    /// Calls of one tool with the same arguments.
    pub max_same_call: u32,
    /// The same tool error this many times in a row stops the run.
    pub max_same_error: u32,
    /// From the run's first call to its last step.
    #[serde(rename = "deadline_ms", with = "crate::clock::millis")]
    pub deadline: Duration,
    /// What one conversation may spend, in millionths of a dollar (none: no cap).
    #[serde(default)]
    pub max_spend_micro_usd: Option<u64>,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            max_model_calls: 8,
            max_same_call: 2,
            max_same_error: 2,
            deadline: Duration::from_secs(20),
            max_spend_micro_usd: None,
        }
    }
}

/// What rein has counted of a run, the step being decided included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunTally {
    pub model_calls: u32,
    /// For a tool call: calls of that tool with those arguments, this one included.
    pub same_call: u32,
    /// The same tool error this many times in a row.
    pub same_error: u32,
    /// Since the run's first call.
    pub elapsed: Duration,
    /// What the run's conversation has spent so far, in millionths of a dollar.
    pub spend_micro_usd: u64,
}

/// Why a run was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStop {
    MaxModelCalls,
    RepeatedCall,
    RepeatedError,
    Deadline,
    Spend,
}

impl RunStop {
    /// The machine-readable status (headers, the body's `rein` object, the store).
    pub fn status(self) -> &'static str {
        match self {
            RunStop::MaxModelCalls => "stopped_max_model_calls",
            RunStop::RepeatedCall => "stopped_repeated_call",
            RunStop::RepeatedError => "stopped_repeated_error",
            RunStop::Deadline => "stopped_deadline",
            RunStop::Spend => "stopped_spend",
        }
    }

    /// The stop a status names.
    pub fn from_status(status: &str) -> Option<RunStop> {
        [
            RunStop::MaxModelCalls,
            RunStop::RepeatedCall,
            RunStop::RepeatedError,
            RunStop::Deadline,
            RunStop::Spend,
        ]
        .into_iter()
        .find(|stop| stop.status() == status)
    }
}

/// Whether a model call may go ahead: `tally` counts it already.
pub fn before_model_call(tally: RunTally, limits: &RunLimits) -> Option<RunStop> {
    if tally.elapsed >= limits.deadline {
        return Some(RunStop::Deadline);
    }
    if limits.max_spend_micro_usd.is_some_and(|cap| tally.spend_micro_usd >= cap) {
        return Some(RunStop::Spend);
    }
    (tally.model_calls > limits.max_model_calls).then_some(RunStop::MaxModelCalls)
}

/// Whether a tool call may go ahead: `tally` counts it already (`same_call` included).
pub fn before_tool_call(tally: RunTally, limits: &RunLimits) -> Option<RunStop> {
    if tally.elapsed >= limits.deadline {
        return Some(RunStop::Deadline);
    }
    (tally.same_call > limits.max_same_call).then_some(RunStop::RepeatedCall)
}

/// Whether the run stops after a tool's result: `tally.same_error` counts this result and
/// `tally.same_call` the call it answers. The same error again stops the run; when it answered
/// the same call again (the spec's swapped-digit loop), the stop is the repeated call.
pub fn after_tool_result(tally: RunTally, limits: &RunLimits) -> Option<RunStop> {
    if tally.same_error < limits.max_same_error.max(1) {
        return None;
    }
    Some(if tally.same_call >= limits.max_same_call.max(1) {
        RunStop::RepeatedCall
    } else {
        RunStop::RepeatedError
    })
}

/// What a model's tokens cost, in dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl ModelPrice {
    /// What an answer's usage cost, in millionths of a dollar (rounded up: a priced call never
    /// costs nothing).
    pub fn cost_micro_usd(&self, usage: &crate::model::Usage) -> u64 {
        let cost = f64::from(usage.input_tokens) * self.input_per_mtok
            + f64::from(usage.output_tokens) * self.output_per_mtok;
        // Dollars per million tokens times tokens is millionths of a dollar.
        if cost.is_finite() && cost > 0.0 { cost.ceil() as u64 } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(model_calls: u32, same_call: u32, same_error: u32, elapsed_ms: u64) -> RunTally {
        RunTally {
            model_calls,
            same_call,
            same_error,
            elapsed: Duration::from_millis(elapsed_ms),
            spend_micro_usd: 0,
        }
    }

    #[test]
    fn a_conversation_at_its_spend_cap_is_stopped_and_usage_is_priced() {
        let limits = RunLimits { max_spend_micro_usd: Some(50_000), ..RunLimits::default() };
        let under = RunTally { spend_micro_usd: 49_999, ..tally(1, 0, 0, 0) };
        assert_eq!(before_model_call(under, &limits), None);
        let at = RunTally { spend_micro_usd: 50_000, ..tally(1, 0, 0, 0) };
        assert_eq!(before_model_call(at, &limits), Some(RunStop::Spend));
        assert_eq!(before_model_call(at, &RunLimits::default()), None, "no cap by default");
        let price = ModelPrice { input_per_mtok: 2.5, output_per_mtok: 10.0 };
        let usage = crate::model::Usage { input_tokens: 1000, output_tokens: 200 };
        assert_eq!(price.cost_micro_usd(&usage), 4_500);
    }

    #[test]
    fn the_specs_limits_stop_the_ninth_model_call_and_the_third_same_call() {
        let limits = RunLimits::default();
        assert_eq!(before_model_call(tally(8, 0, 0, 0), &limits), None);
        assert_eq!(before_model_call(tally(9, 0, 0, 0), &limits), Some(RunStop::MaxModelCalls));
        assert_eq!(before_tool_call(tally(3, 2, 0, 0), &limits), None);
        assert_eq!(before_tool_call(tally(3, 3, 0, 0), &limits), Some(RunStop::RepeatedCall));
    }

    #[test]
    fn the_same_error_twice_in_a_row_stops_the_run() {
        let limits = RunLimits::default();
        assert_eq!(after_tool_result(tally(2, 1, 1, 0), &limits), None);
        // The same error from calls with other arguments.
        assert_eq!(after_tool_result(tally(2, 1, 2, 0), &limits), Some(RunStop::RepeatedError));
        // The same call failing the same way twice: the swapped-digit loop.
        assert_eq!(after_tool_result(tally(2, 2, 2, 0), &limits), Some(RunStop::RepeatedCall));
    }

    #[test]
    fn the_messages_deadline_stops_any_next_step() {
        let limits = RunLimits::default();
        assert_eq!(before_model_call(tally(1, 0, 0, 19_999), &limits), None);
        assert_eq!(before_model_call(tally(1, 0, 0, 20_000), &limits), Some(RunStop::Deadline));
        assert_eq!(before_tool_call(tally(1, 1, 0, 20_000), &limits), Some(RunStop::Deadline));
    }

    #[test]
    fn every_stop_has_a_status_that_names_it_back() {
        for stop in [
            RunStop::MaxModelCalls,
            RunStop::RepeatedCall,
            RunStop::RepeatedError,
            RunStop::Deadline,
            RunStop::Spend,
        ] {
            assert!(stop.status().starts_with("stopped_"));
            assert_eq!(RunStop::from_status(stop.status()), Some(stop));
        }
        assert_eq!(RunStop::from_status("stopped_bored"), None);
    }
}
