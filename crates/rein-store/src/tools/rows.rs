//! Reading the tool, run and hand-off tables' rows into their structs, written once for both backends. Both
//! select the same columns in the same order (the `*_COLUMNS` lists here, which the readers
//! below index by position) and give their row type the typed reads of [`Columns`]; each
//! backend keeps its own errors for a value that cannot be read ([`Columns::unreadable`]). JSON
//! is stored as text in both.

use std::fmt;

use serde_json::Value;

use crate::calls::TraceSummary;
use crate::handoffs::{Handoff, HandoffDelivery, ReviewDecision, ReviewStats};
use crate::runs::{RunNote, RunRow, RunToolCall};
use crate::tools::rules::{ItemStanding, KeyRecord};
use crate::tools::{CachedResult, Hold, HoldState, KeyState, OutboxItem, OutboxState, OutboxStats};

/// An outbox item's columns, as [`outbox_item`] reads them.
pub(crate) const OUTBOX_COLUMNS: &str = "id, idempotency_key, tool, args, state, attempts, \
     last_error, created_unix_ms, next_attempt_unix_ms, lease_owner, lease_until_unix_ms, \
     finished_unix_ms, result, conversation_id, outcome_unknown, review";

/// A hold's columns, as [`hold`] reads them.
pub(crate) const HOLD_COLUMNS: &str = "id, idempotency_key, tool, args, reason, conversation_id, \
     state, created_unix_ms, decided_by, decision_note, decided_unix_ms, outbox_id";

/// A key record's columns: [`key_record`] reads the first four, [`key_result`] the last.
pub(crate) const KEY_COLUMNS: &str = "tool, args_hash, state, lease_until_unix_ms, result";

/// Where an outbox item stands, as [`item_standing`] reads it (a backend may select more
/// columns after these).
pub(crate) const STANDING_COLUMNS: &str = "state, review, idempotency_key, lease_until_unix_ms";

/// A cache entry's columns, as [`cached`] reads them.
pub(crate) const CACHE_COLUMNS: &str = "result, captured_unix_ms";

/// A run's columns, as [`run_row`] reads them.
pub(crate) const RUN_COLUMNS: &str = "conversation_id, first_unix_ms, touched_unix_ms, \
     model_calls, tool_calls, last_error, same_error, stopped, route, message, draft, coverage";

/// A run's tool call log entry's columns, as [`run_tool_call`] reads them.
pub(crate) const TOOL_LOG_COLUMNS: &str = "tool, args, status, result, at_unix_ms";

/// A hand-off's columns, as [`handoff`] reads them.
pub(crate) const HANDOFF_COLUMNS: &str = "id, conversation_id, run_id, route, trigger, \
     stop_status, packet, canary, delivery, ticket, delivery_detail, created_unix_ms, \
     delivered_unix_ms, decision, decided_by, edited_draft, note, decided_unix_ms";

/// A backend's result row, read by column position.
pub(crate) trait Columns {
    /// The backend's error for a failed read.
    type Error;

    fn int(&self, index: usize) -> Result<i64, Self::Error>;
    fn int_opt(&self, index: usize) -> Result<Option<i64>, Self::Error>;
    fn text(&self, index: usize) -> Result<String, Self::Error>;
    fn text_opt(&self, index: usize) -> Result<Option<String>, Self::Error>;
    fn flag(&self, index: usize) -> Result<bool, Self::Error>;

    /// The error for column `index`, which holds a value that is not what it should be.
    fn unreadable(index: usize, problem: Unreadable) -> Self::Error;
}

/// Why a stored value could not be read as what its column holds.
#[derive(Debug)]
pub(crate) enum Unreadable {
    /// A JSON column's text is not JSON.
    Json(serde_json::Error),
    /// A JSON column that must be set is NULL.
    NullJson,
    /// A state column names no state.
    State(String),
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(error) => write!(f, "{error}"),
            Self::NullJson => f.write_str("NULL where JSON must be"),
            Self::State(name) => write!(f, "unknown state `{name}`"),
        }
    }
}

/// A nullable JSON text column.
pub(crate) fn json_opt<R: Columns>(row: &R, index: usize) -> Result<Option<Value>, R::Error> {
    row.text_opt(index)?
        .map(|text| {
            serde_json::from_str(&text).map_err(|e| R::unreadable(index, Unreadable::Json(e)))
        })
        .transpose()
}

/// A JSON text column that must be set.
pub(crate) fn json<R: Columns>(row: &R, index: usize) -> Result<Value, R::Error> {
    json_opt(row, index)?.ok_or_else(|| R::unreadable(index, Unreadable::NullJson))
}

/// A state column's text as its enum; anything else is a corrupt row.
fn state<R: Columns, T>(
    row: &R,
    index: usize,
    parse: fn(&str) -> Option<T>,
) -> Result<T, R::Error> {
    let name = row.text(index)?;
    parse(&name).ok_or_else(|| R::unreadable(index, Unreadable::State(name)))
}

/// A nullable state column's text as its enum (NULL: none); anything else is a corrupt row.
fn state_opt<R: Columns, T>(
    row: &R,
    index: usize,
    parse: fn(&str) -> Option<T>,
) -> Result<Option<T>, R::Error> {
    row.text_opt(index)?
        .map(|name| parse(&name).ok_or_else(|| R::unreadable(index, Unreadable::State(name))))
        .transpose()
}

/// An outbox row's state, from its state column and its `review` flag.
fn outbox_state<R: Columns>(row: &R, index: usize, review: usize) -> Result<OutboxState, R::Error> {
    let name = row.text(index)?;
    let review = row.flag(review)?;
    OutboxState::from_row(&name, review)
        .ok_or_else(|| R::unreadable(index, Unreadable::State(name)))
}

/// A run's row from its [`RUN_COLUMNS`].
pub(crate) fn run_row<R: Columns>(row: &R) -> Result<RunRow, R::Error> {
    Ok(RunRow {
        conversation_id: row.text_opt(0)?,
        first_unix_ms: row.int(1)?,
        touched_unix_ms: row.int(2)?,
        model_calls: row.int(3)?,
        tool_calls: row.int(4)?,
        last_error: row.text_opt(5)?,
        same_error: row.int(6)?,
        stopped: row.text_opt(7)?,
        note: RunNote {
            route: row.text_opt(8)?,
            message: row.text_opt(9)?,
            draft: row.text_opt(10)?,
            coverage: json_opt(row, 11)?,
        },
    })
}

/// A run's tool call from its [`TOOL_LOG_COLUMNS`].
pub(crate) fn run_tool_call<R: Columns>(row: &R) -> Result<RunToolCall, R::Error> {
    Ok(RunToolCall {
        tool: row.text(0)?,
        args: json(row, 1)?,
        status: row.text(2)?,
        result: json(row, 3)?,
        at_unix_ms: row.int(4)?,
    })
}

/// A hand-off from its [`HANDOFF_COLUMNS`].
pub(crate) fn handoff<R: Columns>(row: &R) -> Result<Handoff, R::Error> {
    Ok(Handoff {
        id: row.int(0)?,
        conversation_id: row.text(1)?,
        run_id: row.text_opt(2)?,
        route: row.text_opt(3)?,
        trigger: row.text(4)?,
        stop_status: row.text_opt(5)?,
        packet: json(row, 6)?,
        canary: row.flag(7)?,
        delivery: state(row, 8, HandoffDelivery::parse)?,
        ticket: json_opt(row, 9)?,
        delivery_detail: row.text_opt(10)?,
        created_unix_ms: row.int(11)?,
        delivered_unix_ms: row.int_opt(12)?,
        decision: state_opt(row, 13, ReviewDecision::parse)?,
        decided_by: row.text_opt(14)?,
        edited_draft: row.text_opt(15)?,
        note: row.text_opt(16)?,
        decided_unix_ms: row.int_opt(17)?,
    })
}

/// One trigger's review counts, from a row of: the trigger, hand-offs, decided, changed,
/// canaries, canaries decided, canaries caught.
pub(crate) fn review_stats<R: Columns>(row: &R) -> Result<ReviewStats, R::Error> {
    Ok(ReviewStats {
        trigger: row.text(0)?,
        handoffs: row.int(1)?,
        decided: row.int(2)?,
        changed: row.int(3)?,
        canaries: row.int(4)?,
        canaries_decided: row.int(5)?,
        canaries_caught: row.int(6)?,
    })
}

/// An outbox item from its [`OUTBOX_COLUMNS`].
pub(crate) fn outbox_item<R: Columns>(row: &R) -> Result<OutboxItem, R::Error> {
    Ok(OutboxItem {
        id: row.int(0)?,
        idempotency_key: row.text(1)?,
        tool: row.text(2)?,
        args: json(row, 3)?,
        state: outbox_state(row, 4, 15)?,
        attempts: row.int(5)?,
        last_error: row.text_opt(6)?,
        created_unix_ms: row.int(7)?,
        next_attempt_unix_ms: row.int(8)?,
        lease_owner: row.text_opt(9)?,
        lease_until_unix_ms: row.int_opt(10)?,
        finished_unix_ms: row.int_opt(11)?,
        result: json_opt(row, 12)?,
        conversation_id: row.text_opt(13)?,
        outcome_unknown: row.flag(14)?,
    })
}

/// A hold from its [`HOLD_COLUMNS`].
pub(crate) fn hold<R: Columns>(row: &R) -> Result<Hold, R::Error> {
    Ok(Hold {
        id: row.int(0)?,
        idempotency_key: row.text(1)?,
        tool: row.text(2)?,
        args: json(row, 3)?,
        reason: row.text(4)?,
        conversation_id: row.text_opt(5)?,
        state: state(row, 6, HoldState::parse)?,
        created_unix_ms: row.int(7)?,
        decided_by: row.text_opt(8)?,
        decision_note: row.text_opt(9)?,
        decided_unix_ms: row.int_opt(10)?,
        outbox_id: row.int_opt(11)?,
    })
}

/// A key record from its [`KEY_COLUMNS`], its stored result aside.
pub(crate) fn key_record<R: Columns>(row: &R) -> Result<KeyRecord, R::Error> {
    Ok(KeyRecord {
        tool: row.text(0)?,
        args_hash: row.text(1)?,
        state: state(row, 2, KeyState::parse)?,
        lease_until_unix_ms: row.int_opt(3)?,
    })
}

/// A key record's stored result, from its [`KEY_COLUMNS`].
pub(crate) fn key_result<R: Columns>(row: &R) -> Result<Option<Value>, R::Error> {
    json_opt(row, 4)
}

/// Where an outbox item stands, from its [`STANDING_COLUMNS`].
pub(crate) fn item_standing<R: Columns>(row: &R) -> Result<ItemStanding, R::Error> {
    Ok(ItemStanding {
        state: outbox_state(row, 0, 1)?,
        idempotency_key: row.text(2)?,
        lease_until_unix_ms: row.int_opt(3)?,
    })
}

/// A cache entry from its [`CACHE_COLUMNS`].
pub(crate) fn cached<R: Columns>(row: &R) -> Result<CachedResult, R::Error> {
    Ok(CachedResult { result: json(row, 0)?, captured_unix_ms: row.int(1)? })
}

/// The outbox's counts, from a row of: pending (review aside), failed, review, and the oldest
/// pending item's creation time.
pub(crate) fn outbox_stats<R: Columns>(row: &R) -> Result<OutboxStats, R::Error> {
    Ok(OutboxStats {
        pending: row.int(0)?,
        failed: row.int(1)?,
        review: row.int(2)?,
        oldest_pending_created_unix_ms: row.int_opt(3)?,
    })
}

/// A kept trace's summary from its [`crate::calls::SUMMARY_COLUMNS`].
pub(crate) fn trace_summary<R: Columns>(row: &R) -> Result<TraceSummary, R::Error> {
    Ok(TraceSummary {
        at_unix_ms: row.int(0)?,
        request_id: row.text(1)?,
        trace_id: row.text(2)?,
        route: row.text(3)?,
        outcome: row.text(4)?,
        tier: row.text_opt(5)?,
        attempts: row.int(6)?,
        elapsed_ms: row.int(7)?,
        notable: row.flag(8)?,
        kind: row.text(9)?,
    })
}

/// A JSON text column as `T`.
/// A model call's record as the SLIs read it (`at_unix_ms, record, verdict`, the verdict from a
/// left join): with the online judge's score and sampling probability when it judged the call.
pub(crate) fn call_record<R: Columns>(
    row: &R,
) -> Result<(i64, rein_core::sli::CallRecord), R::Error> {
    let mut record: rein_core::sli::CallRecord = typed(row, 1)?;
    if row.text_opt(2)?.is_some() {
        let verdict: crate::calls::Verdict = typed(row, 2)?;
        record.quality = Some(verdict.score);
        record.quality_probability = Some(verdict.probability);
    }
    Ok((row.int(0)?, record))
}

/// The columns [`call_record`] reads, from `calls c` left-joined to `verdicts v`.
pub(crate) const CALL_RECORD_COLUMNS: &str = "c.at_unix_ms, c.record, v.verdict";

pub(crate) fn typed<R: Columns, T: serde::de::DeserializeOwned>(
    row: &R,
    index: usize,
) -> Result<T, R::Error> {
    let text = row.text(index)?;
    serde_json::from_str(&text).map_err(|e| R::unreadable(index, Unreadable::Json(e)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A row of plain values; an error is the column's index and what was wrong.
    #[derive(Debug, Clone)]
    enum Cell {
        Null,
        Int(i64),
        Text(&'static str),
    }

    struct Plain(Vec<Cell>);

    impl Columns for Plain {
        type Error = String;

        fn int(&self, index: usize) -> Result<i64, String> {
            self.int_opt(index)?.ok_or_else(|| format!("{index}: NULL int"))
        }

        fn int_opt(&self, index: usize) -> Result<Option<i64>, String> {
            match self.0.get(index) {
                Some(Cell::Null) => Ok(None),
                Some(Cell::Int(value)) => Ok(Some(*value)),
                other => Err(format!("{index}: not an int: {other:?}")),
            }
        }

        fn text(&self, index: usize) -> Result<String, String> {
            self.text_opt(index)?.ok_or_else(|| format!("{index}: NULL text"))
        }

        fn text_opt(&self, index: usize) -> Result<Option<String>, String> {
            match self.0.get(index) {
                Some(Cell::Null) => Ok(None),
                Some(Cell::Text(text)) => Ok(Some((*text).to_owned())),
                other => Err(format!("{index}: not text: {other:?}")),
            }
        }

        fn flag(&self, index: usize) -> Result<bool, String> {
            Ok(self.int(index)? != 0)
        }

        fn unreadable(index: usize, problem: Unreadable) -> String {
            format!("{index}: {problem}")
        }
    }

    fn outbox_row() -> Vec<Cell> {
        use Cell::{Int, Null, Text};
        vec![
            Int(7),
            Text("k"),
            Text("refund"),
            Text(r#"{"amount":12.5}"#),
            Text("pending"),
            Int(2),
            Text("timeout"),
            Int(10),
            Int(20),
            Text("w"),
            Int(30),
            Null,
            Null,
            Text("c-1"),
            Int(1),
            Int(0),
        ]
    }

    fn hold_row() -> Vec<Cell> {
        use Cell::{Int, Null, Text};
        vec![
            Int(3),
            Text("k"),
            Text("refund"),
            Text("[1,null]"),
            Text("over the limit"),
            Null,
            Text("approved"),
            Int(10),
            Text("ana"),
            Text(""),
            Int(11),
            Int(7),
        ]
    }

    fn handoff_row() -> Vec<Cell> {
        use Cell::{Int, Null, Text};
        vec![
            Int(4),
            Text("c-1"),
            Text("r-1"),
            Null,
            Text("same_question_twice"),
            Null,
            Text(r#"{"draft":"hi"}"#),
            Int(1),
            Text("delivered"),
            Text(r#"{"ticket":"T-9"}"#),
            Null,
            Int(10),
            Int(11),
            Text("edited"),
            Text("ana"),
            Text("hello"),
            Text(""),
            Int(12),
        ]
    }

    #[test]
    fn the_column_lists_match_what_the_readers_index() {
        assert_eq!(OUTBOX_COLUMNS.split(", ").count(), outbox_row().len());
        assert_eq!(HOLD_COLUMNS.split(", ").count(), hold_row().len());
        assert_eq!(HANDOFF_COLUMNS.split(", ").count(), handoff_row().len());
        assert_eq!(RUN_COLUMNS.split(", ").count(), 12);
        assert_eq!(RUN_COLUMNS.split(", ").nth(11), Some("coverage"));
        assert_eq!(TOOL_LOG_COLUMNS.split(", ").count(), 5);
        assert_eq!(OUTBOX_COLUMNS.split(", ").nth(15), Some("review"));
        assert_eq!(KEY_COLUMNS.split(", ").nth(4), Some("result"));
    }

    #[test]
    fn an_outbox_row_becomes_its_item() {
        let item = outbox_item(&Plain(outbox_row())).unwrap();
        assert_eq!(item.id, 7);
        assert_eq!(item.args, json!({ "amount": 12.5 }));
        assert_eq!(item.state, OutboxState::Pending);
        assert_eq!(item.lease_owner.as_deref(), Some("w"));
        assert_eq!((item.lease_until_unix_ms, item.finished_unix_ms), (Some(30), None));
        assert_eq!(item.result, None);
        assert_eq!(item.conversation_id.as_deref(), Some("c-1"));
        assert!(item.outcome_unknown);

        let mut review = outbox_row();
        review[15] = Cell::Int(1);
        assert_eq!(outbox_item(&Plain(review)).unwrap().state, OutboxState::Review);
    }

    #[test]
    fn a_hold_row_becomes_its_hold() {
        let hold = hold(&Plain(hold_row())).unwrap();
        assert_eq!(hold.args, json!([1, null]));
        assert_eq!(hold.state, HoldState::Approved);
        assert_eq!((hold.decided_by.as_deref(), hold.outbox_id), (Some("ana"), Some(7)));
        assert_eq!(hold.conversation_id, None);
    }

    #[test]
    fn a_handoff_row_becomes_its_handoff() {
        let handoff = handoff(&Plain(handoff_row())).unwrap();
        assert_eq!((handoff.id, handoff.conversation_id.as_str()), (4, "c-1"));
        assert_eq!(handoff.packet, json!({ "draft": "hi" }));
        assert!(handoff.canary);
        assert_eq!(handoff.delivery, HandoffDelivery::Delivered);
        assert_eq!(handoff.ticket, Some(json!({ "ticket": "T-9" })));
        assert_eq!(handoff.decision, Some(ReviewDecision::Edited));
        assert_eq!(handoff.edited_draft.as_deref(), Some("hello"));

        let mut undecided = handoff_row();
        undecided[13] = Cell::Null;
        assert_eq!(super::handoff(&Plain(undecided)).unwrap().decision, None);
        let mut bad_decision = handoff_row();
        bad_decision[13] = Cell::Text("approve");
        assert_eq!(
            super::handoff(&Plain(bad_decision)).unwrap_err(),
            "13: unknown state `approve`"
        );
        let mut bad_delivery = handoff_row();
        bad_delivery[8] = Cell::Text("sent");
        assert_eq!(super::handoff(&Plain(bad_delivery)).unwrap_err(), "8: unknown state `sent`");
    }

    #[test]
    fn unreadable_rows_name_the_column_and_the_problem() {
        let mut bad_state = outbox_row();
        bad_state[4] = Cell::Text("sent");
        assert_eq!(outbox_item(&Plain(bad_state)).unwrap_err(), "4: unknown state `sent`");

        // `review` is a flag on pending rows only: no state column says "review".
        let mut review_name = outbox_row();
        review_name[4] = Cell::Text("review");
        assert!(outbox_item(&Plain(review_name)).is_err());

        let mut bad_json = outbox_row();
        bad_json[3] = Cell::Text("{not json");
        assert!(outbox_item(&Plain(bad_json)).unwrap_err().starts_with("3: "));

        let mut null_args = hold_row();
        null_args[3] = Cell::Null;
        assert_eq!(hold(&Plain(null_args)).unwrap_err(), "3: NULL where JSON must be");

        let mut bad_hold_state = hold_row();
        bad_hold_state[6] = Cell::Text("pending ");
        assert_eq!(hold(&Plain(bad_hold_state)).unwrap_err(), "6: unknown state `pending `");
    }

    #[test]
    fn a_key_row_is_read_without_its_result_until_asked() {
        use Cell::{Int, Null, Text};
        let row = Plain(vec![Text("refund"), Text("h"), Text("in_flight"), Int(5), Null]);
        let record = key_record(&row).unwrap();
        assert_eq!(record.state, KeyState::InFlight);
        assert_eq!(record.lease_until_unix_ms, Some(5));
        assert_eq!(key_result(&row).unwrap(), None);

        // A corrupt result does not stop the record being read; asking for it fails.
        let row = Plain(vec![Text("refund"), Text("h"), Text("done"), Null, Text("nope")]);
        assert_eq!(key_record(&row).unwrap().state, KeyState::Done);
        assert!(key_result(&row).is_err());

        let row = Plain(vec![Text("refund"), Text("h"), Text("finished"), Null, Null]);
        assert_eq!(key_record(&row).unwrap_err(), "2: unknown state `finished`");
    }

    #[test]
    fn standing_cache_and_stats_rows() {
        use Cell::{Int, Null, Text};
        let standing =
            item_standing(&Plain(vec![Text("pending"), Int(1), Text("k"), Null])).unwrap();
        assert_eq!(standing.state, OutboxState::Review);
        assert_eq!((standing.idempotency_key.as_str(), standing.lease_until_unix_ms), ("k", None));

        let cached = cached(&Plain(vec![Text("\"hi\""), Int(9)])).unwrap();
        assert_eq!((cached.result, cached.captured_unix_ms), (json!("hi"), 9));
        assert!(super::cached(&Plain(vec![Null, Int(9)])).is_err());

        let stats = outbox_stats(&Plain(vec![Int(2), Int(1), Int(0), Null])).unwrap();
        assert_eq!(
            stats,
            OutboxStats { pending: 2, failed: 1, review: 0, oldest_pending_created_unix_ms: None }
        );
    }
}
