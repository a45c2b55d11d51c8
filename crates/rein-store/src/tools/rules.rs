//! The tool store's state rules, written once for both backends: lease arithmetic, what
//! `key_begin` answers for a key in each state, which moves an outbox item's state allows, what
//! each move and each hold decision leaves the key in, and the bounds both backends put on a
//! caller's limits. These are plain functions of stored values and the time passed in; a backend
//! reads the rows (inside its transaction), asks these, and writes what they decide.

use serde_json::Value;

use crate::StoreError;
use crate::tools::{Decision, Hold, HoldState, KeyBegin, KeyState, NewOutboxItem, OutboxState};

// ---- holds ----

/// The result a held key stores: the caller's, with the new hold's id (`hold_id`), so a repeat
/// of the held call can say which hold it waits on.
pub(crate) fn held_result(result: &Value, hold_id: i64) -> Value {
    let mut result = result.clone();
    if let Value::Object(map) = &mut result {
        map.insert("hold_id".into(), Value::from(hold_id));
    }
    result
}

// ---- leases ----

/// When a lease taken at `now` for `lease_ms` ends (at the end of time rather than wrapping).
pub(crate) fn lease_end(now_unix_ms: i64, lease_ms: i64) -> i64 {
    now_unix_ms.saturating_add(lease_ms)
}

/// Whether a lease ending at `until` still holds at `now`: live while `now < until`, expired
/// from `until` on. (The outbox claim's SQL states the same rule for the rows it scans.)
pub(crate) fn lease_live(until_unix_ms: i64, now_unix_ms: i64) -> bool {
    now_unix_ms < until_unix_ms
}

/// Whether a row's lease column (NULL: no lease) holds at `now`.
fn leased(until_unix_ms: Option<i64>, now_unix_ms: i64) -> bool {
    until_unix_ms.is_some_and(|until| lease_live(until, now_unix_ms))
}

// ---- idempotency keys ----

/// A key's stored record as `key_begin` judges it (its stored result is read only when it is
/// answered, [`stored_answer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyRecord {
    pub(crate) tool: String,
    pub(crate) args_hash: String,
    pub(crate) state: KeyState,
    pub(crate) lease_until_unix_ms: Option<i64>,
}

/// What `key_begin` does with a key that has a record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KeyStep {
    /// Answer this and change nothing.
    Answer(KeyBegin),
    /// The key was in flight under a lease that has expired: lease it to the caller (until
    /// [`lease_end`] of now) and answer [`KeyBegin::TakenOver`].
    TakeOver,
    /// Answer the key's stored result, which is in this state ([`stored_answer`]).
    Stored(KeyState),
}

/// What `key_begin` does for `tool` and `args_hash` with the key's record `found`, at `now`. The
/// call is compared first: a key recorded for another call is a mismatch whatever its state.
pub(crate) fn key_begin_step(
    found: KeyRecord,
    tool: &str,
    args_hash: &str,
    now_unix_ms: i64,
) -> KeyStep {
    if found.tool != tool || found.args_hash != args_hash {
        return KeyStep::Answer(KeyBegin::Mismatch { tool: found.tool });
    }
    if found.state != KeyState::InFlight {
        return KeyStep::Stored(found.state);
    }
    match found.lease_until_unix_ms.filter(|until| lease_live(*until, now_unix_ms)) {
        Some(until) => KeyStep::Answer(KeyBegin::InFlight { lease_until_unix_ms: until }),
        None => KeyStep::TakeOver,
    }
}

/// The answer for `key`, whose record is in `state` with the stored `result`: every state but
/// in flight has one, so a record without it is corrupt.
pub(crate) fn stored_answer(
    key: &str,
    state: KeyState,
    result: Option<Value>,
) -> Result<KeyBegin, StoreError> {
    let result = result
        .ok_or_else(|| StoreError::Corrupt(format!("key `{key}` is {state:?} without a result")))?;
    Ok(KeyBegin::Stored { state, result })
}

/// A change that rewrites a key's stored result (lease released), named by what caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyChange {
    /// The caller finished the call (`key_finish`).
    Finished,
    /// The write was put in the outbox (directly or by an approval).
    Enqueued,
    /// A failed item was made pending again: the key has its `queued` envelope back.
    Requeued,
    /// The write waits for a person's approval.
    Held,
    /// The primary acknowledged the write.
    Completed,
    /// The send's outcome is unknown: the item waits for a person's review.
    Reviewed,
    /// The primary refused the write for good.
    Failed,
    /// An operator dropped the item.
    Dropped,
    /// A person rejected the held write.
    Rejected,
}

impl KeyChange {
    /// The state the key is left in: still queued while the item may yet be sent, held while it
    /// waits for approval, done once its result is final.
    pub(crate) fn key_state(self) -> KeyState {
        match self {
            Self::Enqueued | Self::Requeued | Self::Reviewed => KeyState::Queued,
            Self::Held => KeyState::Held,
            Self::Finished | Self::Completed | Self::Failed | Self::Dropped | Self::Rejected => {
                KeyState::Done
            }
        }
    }
}

// ---- the outbox ----

/// Whether a new item is stored with `outcome_unknown` set: when the caller says so, and always
/// when it goes to review (that is why it waits for a person).
pub(crate) fn enqueued_outcome_unknown(new: &NewOutboxItem) -> bool {
    new.outcome_unknown || new.review
}

/// Where an outbox item stands, for the operator moves that depend on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ItemStanding {
    pub(crate) state: OutboxState,
    pub(crate) idempotency_key: String,
    pub(crate) lease_until_unix_ms: Option<i64>,
}

/// What `outbox_replay_now` does to an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replay {
    /// A pending item is made due now; a live lease on it is kept (no second sender).
    DueNow,
    /// A review item is released: pending, due now, its unknown outcome cleared.
    Release,
    /// A failed item is pending again, due now, its lease and finish time cleared
    /// ([`KeyChange::Requeued`]).
    Requeue,
}

/// What replaying an item in `state` does; `None`: nothing, it is done or dropped.
pub(crate) fn replay(state: OutboxState) -> Option<Replay> {
    match state {
        OutboxState::Pending => Some(Replay::DueNow),
        OutboxState::Review => Some(Replay::Release),
        OutboxState::Failed => Some(Replay::Requeue),
        OutboxState::Done | OutboxState::Dropped => None,
    }
}

/// Whether an operator may drop the item ([`KeyChange::Dropped`]): it is pending, in review or
/// failed, and no worker holds it under a live lease (it may be executing right now, and
/// dropping it would record "not executed" for a write that may have run).
pub(crate) fn may_drop(item: &ItemStanding, now_unix_ms: i64) -> bool {
    match item.state {
        OutboxState::Pending | OutboxState::Review | OutboxState::Failed => {
            !leased(item.lease_until_unix_ms, now_unix_ms)
        }
        OutboxState::Done | OutboxState::Dropped => false,
    }
}

/// The state column value and the review flag that `outbox_list` filters on (a review item is
/// a pending row with the flag set); no state: every item.
pub(crate) fn list_filter(state: Option<OutboxState>) -> (Option<&'static str>, bool) {
    (state.map(OutboxState::column), state == Some(OutboxState::Review))
}

// ---- limits ----

/// A list's row limit: a negative one lists nothing.
pub(crate) fn list_limit(limit: i64) -> i64 {
    limit.max(0)
}

/// Whether a claim for `limit` items can take any (else it claims nothing, touching no row).
pub(crate) fn claims_any(limit: i64) -> bool {
    limit > 0
}

// ---- gate holds ----

/// Whether `hold` can still be decided: only the first decision takes effect.
pub(crate) fn undecided(hold: &Hold) -> bool {
    hold.state == HoldState::Pending
}

/// The state a decision leaves its hold in.
pub(crate) fn decided_state(decision: &Decision) -> HoldState {
    match decision {
        Decision::Approve { .. } => HoldState::Approved,
        Decision::Reject { .. } => HoldState::Rejected,
    }
}

/// What a decision on a hold does besides deciding it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DecisionEffect<'a> {
    /// Enqueue the held write, once, with its original key ([`KeyChange::Enqueued`]); the hold
    /// records the item's id.
    Enqueue { item: NewOutboxItem, queued_result: &'a Value },
    /// Send nothing; the key's result becomes final ([`KeyChange::Rejected`]).
    Reject { rejected_result: &'a Value },
}

/// What `decision` on `hold` does besides deciding it.
pub(crate) fn decision_effect<'a>(hold: &Hold, decision: &'a Decision) -> DecisionEffect<'a> {
    match decision {
        Decision::Approve { queued_result } => {
            let mut item = NewOutboxItem::new(&hold.idempotency_key, &hold.tool, &hold.args);
            item.conversation_id = hold.conversation_id.clone();
            DecisionEffect::Enqueue { item, queued_result }
        }
        Decision::Reject { rejected_result } => DecisionEffect::Reject { rejected_result },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NOW: i64 = 1_000;

    fn record(state: KeyState, lease: Option<i64>) -> KeyRecord {
        KeyRecord {
            tool: "refund".to_owned(),
            args_hash: "h".to_owned(),
            state,
            lease_until_unix_ms: lease,
        }
    }

    fn standing(state: OutboxState, lease: Option<i64>) -> ItemStanding {
        ItemStanding { state, idempotency_key: "k".to_owned(), lease_until_unix_ms: lease }
    }

    fn held(state: HoldState) -> Hold {
        Hold {
            id: 1,
            idempotency_key: "k".to_owned(),
            tool: "refund".to_owned(),
            args: json!({ "order": 1 }),
            reason: "over the limit".to_owned(),
            conversation_id: Some("c".to_owned()),
            state,
            created_unix_ms: 0,
            decided_by: None,
            decision_note: None,
            decided_unix_ms: None,
            outbox_id: None,
        }
    }

    #[test]
    fn a_lease_is_live_before_its_end_and_expired_at_it() {
        assert_eq!(lease_end(NOW, 30), NOW + 30);
        assert_eq!(lease_end(i64::MAX - 1, 30), i64::MAX, "saturates, never wraps");
        assert!(lease_live(NOW + 1, NOW));
        assert!(!lease_live(NOW, NOW), "expired at its end");
        assert!(!lease_live(NOW - 1, NOW));
        assert!(!leased(None, NOW), "no lease is never live");
        assert!(!leased(None, -5), "not even before the epoch");
    }

    #[test]
    fn key_begin_compares_the_call_before_the_state() {
        for state in [KeyState::InFlight, KeyState::Queued, KeyState::Held, KeyState::Done] {
            let found = record(state, Some(NOW + 10));
            let mut other_tool = found.clone();
            other_tool.tool = "charge".to_owned();
            assert_eq!(
                key_begin_step(other_tool, "refund", "h", NOW),
                KeyStep::Answer(KeyBegin::Mismatch { tool: "charge".to_owned() })
            );
            assert_eq!(
                key_begin_step(found, "refund", "other-args", NOW),
                KeyStep::Answer(KeyBegin::Mismatch { tool: "refund".to_owned() })
            );
        }
    }

    #[test]
    fn key_begin_waits_on_a_live_lease_and_takes_over_an_expired_one() {
        let live = record(KeyState::InFlight, Some(NOW + 1));
        assert_eq!(
            key_begin_step(live, "refund", "h", NOW),
            KeyStep::Answer(KeyBegin::InFlight { lease_until_unix_ms: NOW + 1 })
        );
        for lease in [Some(NOW), Some(NOW - 1), None] {
            let expired = record(KeyState::InFlight, lease);
            assert_eq!(key_begin_step(expired, "refund", "h", NOW), KeyStep::TakeOver, "{lease:?}");
        }
    }

    #[test]
    fn key_begin_answers_a_stored_result_whatever_its_lease() {
        for state in [KeyState::Queued, KeyState::Held, KeyState::Done] {
            let found = record(state, Some(NOW + 10));
            assert_eq!(key_begin_step(found, "refund", "h", NOW), KeyStep::Stored(state));
        }
        assert_eq!(
            stored_answer("k", KeyState::Done, Some(json!("sent"))).unwrap(),
            KeyBegin::Stored { state: KeyState::Done, result: json!("sent") }
        );
        let missing = stored_answer("k", KeyState::Queued, None).unwrap_err();
        assert!(
            matches!(&missing, StoreError::Corrupt(text) if text == "key `k` is Queued without a result"),
            "{missing:?}"
        );
    }

    #[test]
    fn key_changes_leave_the_key_queued_held_or_done() {
        use KeyChange::*;
        for change in [Enqueued, Requeued, Reviewed] {
            assert_eq!(change.key_state(), KeyState::Queued, "{change:?}");
        }
        assert_eq!(Held.key_state(), KeyState::Held);
        for change in [Finished, Completed, Failed, Dropped, Rejected] {
            assert_eq!(change.key_state(), KeyState::Done, "{change:?}");
        }
    }

    #[test]
    fn a_review_item_is_enqueued_with_its_outcome_unknown() {
        let mut new = NewOutboxItem::new("k", "refund", &json!({}));
        assert!(!enqueued_outcome_unknown(&new));
        new.review = true;
        assert!(enqueued_outcome_unknown(&new));
        new.review = false;
        new.outcome_unknown = true;
        assert!(enqueued_outcome_unknown(&new));
    }

    #[test]
    fn replay_moves_pending_review_and_failed_items_only() {
        assert_eq!(replay(OutboxState::Pending), Some(Replay::DueNow));
        assert_eq!(replay(OutboxState::Review), Some(Replay::Release));
        assert_eq!(replay(OutboxState::Failed), Some(Replay::Requeue));
        assert_eq!(replay(OutboxState::Done), None);
        assert_eq!(replay(OutboxState::Dropped), None);
    }

    #[test]
    fn drop_refuses_finished_items_and_live_leases() {
        for state in [OutboxState::Pending, OutboxState::Review, OutboxState::Failed] {
            assert!(may_drop(&standing(state, None), NOW), "{state:?}");
            assert!(may_drop(&standing(state, Some(NOW)), NOW), "{state:?}: lease expired");
            assert!(!may_drop(&standing(state, Some(NOW + 1)), NOW), "{state:?}: lease live");
        }
        for state in [OutboxState::Done, OutboxState::Dropped] {
            assert!(!may_drop(&standing(state, None), NOW), "{state:?}");
        }
    }

    #[test]
    fn list_filters_and_limits() {
        assert_eq!(list_filter(None), (None, false));
        assert_eq!(list_filter(Some(OutboxState::Pending)), (Some("pending"), false));
        assert_eq!(list_filter(Some(OutboxState::Review)), (Some("pending"), true));
        assert_eq!(list_filter(Some(OutboxState::Failed)), (Some("failed"), false));
        assert_eq!((list_limit(-3), list_limit(0), list_limit(5)), (0, 0, 5));
        assert!(claims_any(1));
        assert!(!claims_any(0));
        assert!(!claims_any(-1));
    }

    #[test]
    fn only_a_pending_hold_is_decided_and_approval_enqueues_it_as_held() {
        assert!(undecided(&held(HoldState::Pending)));
        assert!(!undecided(&held(HoldState::Approved)));
        assert!(!undecided(&held(HoldState::Rejected)));

        let queued = json!({ "status": "queued" });
        let approve = Decision::Approve { queued_result: queued.clone() };
        assert_eq!(decided_state(&approve), HoldState::Approved);
        let DecisionEffect::Enqueue { item, queued_result } =
            decision_effect(&held(HoldState::Pending), &approve)
        else {
            panic!("approval enqueues");
        };
        assert_eq!(queued_result, &queued);
        assert_eq!((item.idempotency_key.as_str(), item.tool.as_str()), ("k", "refund"));
        assert_eq!(item.args, json!({ "order": 1 }));
        assert_eq!(item.conversation_id.as_deref(), Some("c"));
        assert!(!item.outcome_unknown && !item.review, "nothing was sent before approval");

        let rejected = json!({ "status": "rejected" });
        let reject = Decision::Reject { rejected_result: rejected.clone() };
        assert_eq!(decided_state(&reject), HoldState::Rejected);
        assert_eq!(
            decision_effect(&held(HoldState::Pending), &reject),
            DecisionEffect::Reject { rejected_result: &rejected }
        );
    }
}
