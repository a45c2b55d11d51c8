//! A run's counts, kept in the store so replicas sharing it enforce one limit: what rein itself
//! saw of one run (one customer message: `x-rein-run-id`, within `x-rein-conversation-id`), never
//! what a caller says. Per run: the model calls, the tool calls and how often each (tool,
//! arguments) pair came, how many times in a row the same tool error came back, when the run's
//! first call came, and the stop status once the run is stopped (the first stop wins).
//!
//! A run idle longer than its idle time starts afresh on its next call. The counting rules live
//! here, as plain functions of the stored row, and both backends apply them in one transaction.
//!
//! For a hand-off's packet a run also keeps what it did: a log of its newest tool calls
//! ([`RunToolCall`]) and notes on its row ([`RunNote`]: its route, the customer's message, the
//! draft reply, what the evidence covered), read back whole as [`RunInfo`]. A fresh start forgets
//! both, like the per-call counts.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The evidence items a run keeps (the newest).
pub const MAX_EVIDENCE: i64 = 1_000;

/// The tool calls a run's log keeps (the newest).
pub const MAX_TOOL_LOG: i64 = 50;

/// One thing a run did, to be counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEvent<'a> {
    /// A model call.
    ModelCall,
    /// A tool call with these arguments (`args_hash`: a digest of their canonical JSON).
    ToolCall { tool: &'a str, args_hash: &'a str },
    /// A tool call's result: `error` is the error it carried, if it failed.
    ToolResult { tool: &'a str, error: Option<&'a str> },
}

/// A [`RunEvent`] with its texts owned, to cross into a backend's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnedEvent {
    ModelCall,
    ToolCall { tool: String, args_hash: String },
    ToolResult { tool: String, error: Option<String> },
}

impl OwnedEvent {
    pub(crate) fn of(event: RunEvent<'_>) -> Self {
        match event {
            RunEvent::ModelCall => Self::ModelCall,
            RunEvent::ToolCall { tool, args_hash } => {
                Self::ToolCall { tool: tool.into(), args_hash: args_hash.into() }
            }
            RunEvent::ToolResult { tool, error } => {
                Self::ToolResult { tool: tool.into(), error: error.map(str::to_string) }
            }
        }
    }

    pub(crate) fn event(&self) -> RunEvent<'_> {
        match self {
            Self::ModelCall => RunEvent::ModelCall,
            Self::ToolCall { tool, args_hash } => RunEvent::ToolCall { tool, args_hash },
            Self::ToolResult { tool, error } => {
                RunEvent::ToolResult { tool, error: error.as_deref() }
            }
        }
    }
}

/// A run's counts after an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCounts {
    pub run_id: String,
    pub conversation_id: Option<String>,
    pub model_calls: i64,
    pub tool_calls: i64,
    /// For a tool call: calls of that tool with those arguments in this run, this one included.
    pub same_call: i64,
    /// The same tool error this many times in a row (0 after a success).
    pub same_error: i64,
    /// When the run's first call came (since its last fresh start).
    pub first_unix_ms: i64,
    pub last_unix_ms: i64,
    /// The status the run was stopped with, if it was (`stopped_repeated_call`, ...).
    pub stopped: Option<String>,
}

impl RunCounts {
    /// The tally the run's stop conditions judge ([`rein_core::run`]), at `now_unix_ms`.
    pub fn tally(&self, now_unix_ms: i64) -> rein_core::run::RunTally {
        let whole = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
        let elapsed = u64::try_from(now_unix_ms.saturating_sub(self.first_unix_ms)).unwrap_or(0);
        rein_core::run::RunTally {
            model_calls: whole(self.model_calls),
            same_call: whole(self.same_call),
            same_error: whole(self.same_error),
            elapsed: std::time::Duration::from_millis(elapsed),
            spend_micro_usd: 0,
        }
    }
}

/// One tool call of a run, as its log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunToolCall {
    pub tool: String,
    pub args: Value,
    /// The call's outcome status (`ok`, `queued`, `error`, ...).
    pub status: String,
    pub result: Value,
    pub at_unix_ms: i64,
}

/// Notes on a run's row: each field that is `Some` overwrites the stored one, the others are left
/// as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunNote {
    pub route: Option<String>,
    /// The customer's message the run answers.
    pub message: Option<String>,
    /// The reply the run drafted.
    pub draft: Option<String>,
    /// What the run's evidence covered of the message, as the checks judged it.
    pub coverage: Option<Value>,
}

impl RunNote {
    /// Whether writing this note on `kept` would change it.
    pub(crate) fn changes(&self, kept: &RunNote) -> bool {
        fn differs<T: PartialEq>(kept: &Option<T>, note: &Option<T>) -> bool {
            note.is_some() && note != kept
        }
        differs(&kept.route, &self.route)
            || differs(&kept.message, &self.message)
            || differs(&kept.draft, &self.draft)
            || differs(&kept.coverage, &self.coverage)
    }

    /// Write this note on `kept`: each `Some` field overwrites the kept one.
    fn write_on(&self, kept: &mut RunNote) {
        fn overwrite<T: Clone>(kept: &mut Option<T>, note: &Option<T>) {
            if note.is_some() {
                kept.clone_from(note);
            }
        }
        overwrite(&mut kept.route, &self.route);
        overwrite(&mut kept.message, &self.message);
        overwrite(&mut kept.draft, &self.draft);
        overwrite(&mut kept.coverage, &self.coverage);
    }
}

/// A run's row: its counts and its notes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    pub conversation_id: Option<String>,
    pub model_calls: i64,
    pub tool_calls: i64,
    /// When the run's first call came (since its last fresh start).
    pub first_unix_ms: i64,
    pub touched_unix_ms: i64,
    pub stopped: Option<String>,
    pub route: Option<String>,
    pub message: Option<String>,
    pub draft: Option<String>,
    pub coverage: Option<Value>,
}

/// A run's row as both backends store it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunRow {
    pub conversation_id: Option<String>,
    pub first_unix_ms: i64,
    pub touched_unix_ms: i64,
    pub model_calls: i64,
    pub tool_calls: i64,
    /// `tool` and error of the last tool result, if it was an error.
    pub last_error: Option<String>,
    pub same_error: i64,
    pub stopped: Option<String>,
    /// The notes on the run (none after a fresh start).
    pub note: RunNote,
}

/// What a write of a run's row changes of the row as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// No row is stored: the whole row is new.
    New,
    /// Its counts (and times, and stop); its notes are as stored.
    Counts,
    /// Any of it, notes included (a fresh start forgets them, a model call notes them).
    Whole,
}

impl Change {
    /// What a write of a row counted by [`step`] changes: `stored`, whether a row was, and
    /// `fresh`, whether the run started afresh.
    pub(crate) fn of(stored: bool, fresh: bool) -> Self {
        match (stored, fresh) {
            (false, _) => Self::New,
            (true, true) => Self::Whole,
            (true, false) => Self::Counts,
        }
    }

    /// The change once `note` is to be written on `row` too.
    pub(crate) fn noting(self, note: &RunNote, row: &RunRow) -> Self {
        match self {
            Self::Counts if note.changes(&row.note) => Self::Whole,
            change => change,
        }
    }
}

/// The row after `event`, from the row as stored, and whether the run starts afresh (none
/// stored, or idle for `idle_ms` or more: its per-call counts are to be forgotten too).
pub(crate) fn step(
    stored: Option<RunRow>,
    conversation_id: Option<&str>,
    event: RunEvent<'_>,
    now_unix_ms: i64,
    idle_ms: i64,
) -> (RunRow, bool) {
    let fresh = stored
        .as_ref()
        .is_none_or(|row| now_unix_ms.saturating_sub(row.touched_unix_ms) >= idle_ms);
    let mut row = match stored {
        Some(row) if !fresh => row,
        _ => RunRow {
            conversation_id: conversation_id.map(str::to_string),
            first_unix_ms: now_unix_ms,
            touched_unix_ms: now_unix_ms,
            model_calls: 0,
            tool_calls: 0,
            last_error: None,
            same_error: 0,
            stopped: None,
            note: RunNote::default(),
        },
    };
    if row.conversation_id.is_none() {
        row.conversation_id = conversation_id.map(str::to_string);
    }
    row.touched_unix_ms = row.touched_unix_ms.max(now_unix_ms);
    match event {
        RunEvent::ModelCall => row.model_calls += 1,
        RunEvent::ToolCall { .. } => row.tool_calls += 1,
        RunEvent::ToolResult { tool, error: Some(error) } => {
            let seen = format!("{tool}\u{1f}{error}");
            row.same_error =
                if row.last_error.as_deref() == Some(&seen) { row.same_error + 1 } else { 1 };
            row.last_error = Some(seen);
        }
        RunEvent::ToolResult { error: None, .. } => {
            row.last_error = None;
            row.same_error = 0;
        }
    }
    (row, fresh)
}

/// A model call in a run, as [`crate::tools::ToolStore::run_model_call`] takes it: counted,
/// judged against the run's limits (the conversation's spend included) and, when it goes, noted
/// on the run's row, all in one transaction, with the run's evidence read in it.
#[derive(Debug, Clone, Copy)]
pub struct ModelCall<'a> {
    pub run_id: &'a str,
    pub conversation_id: Option<&'a str>,
    /// The route's limits.
    pub limits: rein_core::run::RunLimits,
    /// Whose spend a spend cap reads: the conversation's, else the run's.
    pub spender: &'a str,
    /// What to note on the run's row when the call goes (its route and the customer's
    /// message).
    pub note: &'a RunNote,
    pub now_unix_ms: i64,
    /// A run idle this long starts afresh, and evidence older than this is not read.
    pub idle_ms: i64,
}

/// What the store decided of a model call in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCallStep {
    /// The run's evidence added within its idle time, oldest first.
    pub evidence: Vec<Value>,
    /// `None`: the call goes (and was noted). Else the status the run is stopped with, and
    /// whether this call stopped it (count it once).
    pub stopped: Option<(String, bool)>,
}

/// An answered model call of a run, as [`crate::tools::ToolStore::run_model_call_done`] takes
/// it: what it cost, added to its spender's spend, and its draft, noted on the run's row, in one
/// transaction.
#[derive(Debug, Clone, Copy)]
pub struct ModelCallDone<'a> {
    pub run_id: &'a str,
    pub conversation_id: Option<&'a str>,
    /// Whose spend the cost adds to: the conversation's, else the run's.
    pub spender: &'a str,
    /// What the answer cost, in micro-dollars (none: its model has no price).
    pub micro_usd: Option<i64>,
    /// The answer's text (none: nothing to note).
    pub draft: Option<&'a str>,
    pub now_unix_ms: i64,
}

/// Judge a model call counted in `row` (by [`step`]) against `limits`, with `spent` the
/// spender's spend so far: the run stopped before it stays stopped; a limit this call passes
/// stops the run now; a call that goes has `note` written on the row (its `Some` fields).
pub(crate) fn judge_model_call(
    row: &mut RunRow,
    limits: &rein_core::run::RunLimits,
    spent: i64,
    note: &RunNote,
    now_unix_ms: i64,
) -> Option<(String, bool)> {
    if let Some(status) = &row.stopped {
        return Some((status.clone(), false));
    }
    let counted = RunCounts {
        run_id: String::new(),
        conversation_id: None,
        model_calls: row.model_calls,
        tool_calls: row.tool_calls,
        same_call: 0,
        same_error: row.same_error,
        first_unix_ms: row.first_unix_ms,
        last_unix_ms: row.touched_unix_ms,
        stopped: None,
    };
    let mut tally = counted.tally(now_unix_ms);
    tally.spend_micro_usd = u64::try_from(spent).unwrap_or(0);
    if let Some(stop) = rein_core::run::before_model_call(tally, limits) {
        let status = stop.status().to_string();
        row.stopped = Some(status.clone());
        return Some((status, true));
    }
    note.write_on(&mut row.note);
    None
}

/// The counts a caller sees: `row` for `run_id`, with `same_call` for a tool call.
pub(crate) fn counts(run_id: &str, row: &RunRow, same_call: i64) -> RunCounts {
    RunCounts {
        run_id: run_id.to_string(),
        conversation_id: row.conversation_id.clone(),
        model_calls: row.model_calls,
        tool_calls: row.tool_calls,
        same_call,
        same_error: row.same_error,
        first_unix_ms: row.first_unix_ms,
        last_unix_ms: row.touched_unix_ms,
        stopped: row.stopped.clone(),
    }
}

/// What a caller reads of run `run_id` from its stored `row`.
pub(crate) fn info(run_id: &str, row: RunRow) -> RunInfo {
    RunInfo {
        run_id: run_id.to_string(),
        conversation_id: row.conversation_id,
        model_calls: row.model_calls,
        tool_calls: row.tool_calls,
        first_unix_ms: row.first_unix_ms,
        touched_unix_ms: row.touched_unix_ms,
        stopped: row.stopped,
        route: row.note.route,
        message: row.note.message,
        draft: row.note.draft,
        coverage: row.note.coverage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: i64 = 60_000;

    fn after(row: Option<RunRow>, event: RunEvent<'_>, now: i64) -> RunRow {
        step(row, Some("c-1"), event, now, IDLE).0
    }

    #[test]
    fn the_same_error_counts_in_a_row_and_a_success_clears_it() {
        let failed = RunEvent::ToolResult { tool: "look_up_order", error: Some("no order 44718") };
        let row = after(None, failed, 0);
        assert_eq!(row.same_error, 1);
        let row = after(Some(row), failed, 1);
        assert_eq!(row.same_error, 2);
        let other = RunEvent::ToolResult { tool: "look_up_order", error: Some("timeout") };
        let row = after(Some(row), other, 2);
        assert_eq!(row.same_error, 1, "another error starts a new streak");
        let ok = RunEvent::ToolResult { tool: "look_up_order", error: None };
        let row = after(Some(row), ok, 3);
        assert_eq!((row.same_error, row.last_error), (0, None));
    }

    #[test]
    fn the_counts_make_the_tally_the_stop_conditions_judge() {
        let (row, _) = step(None, None, RunEvent::ModelCall, 1_000, IDLE);
        let counts = counts("r", &row, 3);
        let tally = counts.tally(21_000);
        assert_eq!((tally.model_calls, tally.same_call), (1, 3));
        assert_eq!(tally.elapsed, std::time::Duration::from_secs(20));
        let limits = rein_core::run::RunLimits::default();
        assert_eq!(
            rein_core::run::before_tool_call(tally, &limits),
            Some(rein_core::run::RunStop::Deadline)
        );
        // A clock that went back never makes a negative age.
        assert_eq!(counts.tally(0).elapsed, std::time::Duration::ZERO);
    }

    #[test]
    fn a_write_changes_the_notes_only_of_a_new_or_fresh_row_or_a_note_that_differs() {
        use Change::{Counts, New, Whole};
        assert_eq!((Change::of(false, true), Change::of(false, false)), (New, New));
        assert_eq!((Change::of(true, true), Change::of(true, false)), (Whole, Counts));
        let mut row = after(None, RunEvent::ModelCall, 0);
        row.note = RunNote { route: Some("support".into()), ..RunNote::default() };
        let same = RunNote { route: Some("support".into()), ..RunNote::default() };
        assert_eq!(Counts.noting(&same, &row), Counts);
        assert_eq!(Counts.noting(&RunNote::default(), &row), Counts, "None fields change nothing");
        let other = RunNote { message: Some("where is it?".into()), ..same.clone() };
        assert_eq!(Counts.noting(&other, &row), Whole);
        let route = RunNote { route: Some("billing".into()), ..RunNote::default() };
        assert_eq!(Counts.noting(&route, &row), Whole);
        assert_eq!((New.noting(&same, &row), Whole.noting(&same, &row)), (New, Whole));
    }

    #[test]
    fn an_idle_run_starts_afresh() {
        let row = after(None, RunEvent::ModelCall, 0);
        let row = after(Some(row), RunEvent::ModelCall, 1_000);
        assert_eq!(row.model_calls, 2);
        let (row, fresh) = step(Some(row), Some("c-1"), RunEvent::ModelCall, 1_000 + IDLE, IDLE);
        assert!(fresh);
        assert_eq!((row.model_calls, row.first_unix_ms), (1, 1_000 + IDLE));
    }

    #[test]
    fn a_fresh_start_forgets_the_notes_and_a_busy_run_keeps_them() {
        let mut row = after(None, RunEvent::ModelCall, 0);
        row.note = RunNote { route: Some("support".into()), ..RunNote::default() };
        let kept = after(Some(row.clone()), RunEvent::ModelCall, 1_000);
        assert_eq!(kept.note.route.as_deref(), Some("support"));
        let fresh = after(Some(row), RunEvent::ModelCall, IDLE);
        assert_eq!(fresh.note, RunNote::default());
        let info = info("r", kept);
        assert_eq!((info.run_id.as_str(), info.model_calls), ("r", 2));
        assert_eq!(info.route.as_deref(), Some("support"));
    }
}
