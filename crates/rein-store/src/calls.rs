//! Recorded calls: one row per finished model call, holding what the SLIs are computed from (a
//! [`CallRecord`]) and, while it is kept, the call's [`Trace`], and one per tool call
//! ([`RecordedTool`]: its status, the rung that served it, its trace). The SLIs read only the
//! model calls. The trace store keeps the
//! last `keep_last` traces and every trace of a call that was not answered on the first try
//! (`notable`) for the trace retention window; records are kept for the (longer) SLI window.
//! Both backends store the record and the trace as JSON text.

use rein_core::sli::CallRecord;
use rein_core::trace::Trace;
use serde::Serialize;

/// A finished call, as the recorder writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    pub at_unix_ms: i64,
    pub request_id: String,
    pub trace_id: String,
    pub record: CallRecord,
    /// Not answered on the first try (a retry, a fallback, a repair, no answer): its trace is
    /// kept for the whole retention window.
    pub notable: bool,
    /// The call's trace, when the trace store keeps traces.
    pub trace: Option<Trace>,
    /// An eval's call pinned to one tier: kept as a trace, never counted in the SLIs.
    pub eval: bool,
}

impl RecordedCall {
    /// Whether a call with this record is notable: anything but an answer from the first
    /// attempt that passed as it was.
    pub fn is_notable(record: &CallRecord) -> bool {
        !(record.outcome == rein_core::Outcome::Answered
            && record.attempts <= 1
            && !record.repaired
            && record.escalation.is_none())
    }
}

/// A finished tool call, as the recorder writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedTool {
    pub at_unix_ms: i64,
    pub request_id: String,
    pub trace_id: String,
    pub tool: String,
    /// The envelope's status (`ok`, `refused`, `queued`, ...; `stopped` for a stopped run).
    pub status: String,
    /// The source of the rung that served or refused it.
    pub rung: Option<String>,
    /// The rungs that were tried.
    pub rungs: i64,
    pub elapsed_ms: i64,
    /// Not served `ok` by its first rung.
    pub notable: bool,
    pub trace: Option<Trace>,
}

/// What a recorded call was.
pub const MODEL_KIND: &str = "model";
/// What a recorded tool call was.
pub const TOOL_KIND: &str = "tool";
/// What a recorded call of an eval pinned to one tier was.
pub const EVAL_KIND: &str = "eval";

/// One kept trace, as a list shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceSummary {
    pub at_unix_ms: i64,
    pub request_id: String,
    pub trace_id: String,
    /// `model` or `tool`.
    pub kind: String,
    /// The route (model calls) or the tool.
    pub route: String,
    pub outcome: String,
    pub tier: Option<String>,
    pub attempts: i64,
    pub elapsed_ms: i64,
    pub notable: bool,
}

/// Which kept traces a list shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceFilter {
    pub route: Option<String>,
    pub outcome: Option<String>,
    /// Only calls not answered on the first try.
    pub notable: bool,
}

/// What a prune of the recorded calls keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallsRetention {
    /// Records older than this are deleted.
    pub records_before_unix_ms: i64,
    /// Traces older than this are dropped (their records stay).
    pub traces_before_unix_ms: i64,
    /// Of the traces inside the window, the newest this many are kept; beyond them only the
    /// notable ones.
    pub keep_last: i64,
}

/// What a prune removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallsPruned {
    pub records: u64,
    pub traces: u64,
}

/// The columns a [`TraceSummary`] is read from, in order.
pub(crate) const SUMMARY_COLUMNS: &str =
    "at_unix_ms, request_id, trace_id, route, outcome, tier, attempts, elapsed_ms, notable, kind";

/// A [`RecordedCall`] as both backends write its row: made from the call, which it takes its
/// strings from.
pub(crate) struct CallRow {
    pub kind: &'static str,
    pub at_unix_ms: i64,
    pub request_id: String,
    pub trace_id: String,
    pub route: String,
    pub outcome: std::borrow::Cow<'static, str>,
    pub tier: Option<String>,
    pub attempts: i64,
    pub elapsed_ms: i64,
    pub notable: bool,
    pub record: String,
    pub trace: Option<String>,
}

impl CallRow {
    pub(crate) fn of(call: RecordedCall) -> Self {
        let RecordedCall { at_unix_ms, request_id, trace_id, record, notable, trace, eval } = call;
        let json = record.to_json();
        Self {
            kind: if eval { EVAL_KIND } else { MODEL_KIND },
            at_unix_ms,
            request_id,
            trace_id,
            outcome: record.outcome.as_str().into(),
            attempts: i64::from(record.attempts),
            elapsed_ms: i64::try_from(record.elapsed_ms).unwrap_or(i64::MAX),
            route: record.route,
            tier: record.tier,
            notable,
            record: json,
            // Plain data: serializing it cannot fail.
            trace: trace.as_ref().map(|trace| serde_json::to_string(trace).unwrap_or_default()),
        }
    }

    pub(crate) fn of_tool(call: RecordedTool) -> Self {
        Self {
            kind: TOOL_KIND,
            at_unix_ms: call.at_unix_ms,
            request_id: call.request_id,
            trace_id: call.trace_id,
            route: call.tool,
            outcome: call.status.into(),
            tier: call.rung,
            attempts: call.rungs,
            elapsed_ms: call.elapsed_ms,
            notable: call.notable,
            record: "{}".to_string(),
            trace: call
                .trace
                .as_ref()
                .map(|trace| serde_json::to_string(trace).unwrap_or_default()),
        }
    }

    /// The rows of one batch: the model calls, then the tool calls.
    pub(crate) fn all(calls: Vec<RecordedCall>, tools: Vec<RecordedTool>) -> Vec<CallRow> {
        let mut rows = Vec::with_capacity(calls.len() + tools.len());
        rows.extend(calls.into_iter().map(CallRow::of));
        rows.extend(tools.into_iter().map(CallRow::of_tool));
        rows
    }
}

/// The online judge's verdict on one sampled answer (`verdicts`, one per call). Its score joins
/// the call's record when the SLIs are read, weighted by the probability it was sampled with.
/// Kept as long as the call's record; the question, evidence and answer only when the judge's
/// `keep_content` says so (a person labels them to check the judge).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Verdict {
    /// The judged call's.
    pub request_id: String,
    pub trace_id: String,
    /// When the judged call was made.
    pub at_unix_ms: i64,
    pub judged_unix_ms: i64,
    pub route: String,
    pub tier: Option<String>,
    /// The model that gave the judged answer.
    pub model: Option<String>,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    pub pass: bool,
    /// 1 for a pass, 0 for a fail.
    pub score: f64,
    /// The probability the answer was sampled with.
    pub probability: f64,
    /// Drawn inside the route's own share (not only a slice's).
    pub base: bool,
    pub rubric: String,
    /// The model that judged it.
    pub judge_model: Option<String>,
    /// The judge's reply, cut short.
    pub reply: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<(String, String)>,
}

/// Which verdicts a list shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerdictFilter {
    /// Of calls made at or after this.
    pub since_unix_ms: i64,
    pub route: Option<String>,
    /// Only failed answers.
    pub failed: bool,
}
