#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The tool store's contract (`rein_store::tools`), run against both backends: every case in
//! `on_both_backends!` runs once on SQLite (a temporary file) and once on Postgres (a database of
//! its own on this binary's throwaway server, `rein_store::testing::TempPostgres`). Times are
//! passed in, so leases expire by arithmetic, not by waiting. The cases at the end check what
//! only one backend has: SQLite's file shared by two processes, Postgres's row locks, migrations
//! and password scrubbing.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use rein_store::calls::{
    CallsPruned, CallsRetention, RecordedCall, RecordedTool, TraceFilter, Verdict, VerdictFilter,
};
use rein_store::handoffs::{
    Handoff, HandoffDelivery, HandoffFilter, NewHandoff, ReviewDecision, ReviewStats,
};
use rein_store::runs::{
    ModelCall, ModelCallDone, ModelCallStep, RunCounts, RunEvent, RunNote, RunToolCall,
};
use rein_store::testing::TempPostgres;
use rein_store::tools::{
    Decision, Hold, HoldState, KeyBegin, KeyState, NewHold, NewOutboxItem, OutboxItem, OutboxState,
    OutboxStats, Pruned, ToolStore,
};
use rein_store::{PostgresToolStore, SqliteToolStore, Store, open_tool_store};
use serde_json::{Value, json};

/// The cases only one backend has (in a folder, so cargo does not take it for a test binary).
#[path = "tools/single_backend.rs"]
mod single_backend;

const T0: i64 = 1_700_000_000_000;
const LEASE: i64 = 30_000;
const TOOL: &str = "refund";
const HASH: &str = "args-a";

/// Each named case, as a `sqlite` and a `postgres` test in a module of the case's name.
macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$case(super::Backend::sqlite().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$case(super::Backend::postgres().await).await;
            }
        }
    )*};
}

on_both_backends!(
    key_begin_is_fresh_then_in_flight_while_leased,
    key_begin_takes_over_once_the_lease_expires,
    key_begin_returns_the_stored_result,
    key_begin_refuses_another_tool_or_other_arguments,
    key_abandon_forgets_only_in_flight_keys,
    key_recent_finds_a_callers_newest_key_for_the_same_call,
    enqueue_is_idempotent_per_key_and_marks_the_key_queued,
    claim_takes_due_items_oldest_first_up_to_the_limit,
    claim_never_hands_out_an_item_under_a_live_lease,
    complete_stores_the_result_as_the_keys_final_result,
    retry_later_releases_the_lease_and_delays_the_item,
    fail_keeps_the_item_and_finalizes_the_key,
    replay_now_makes_pending_and_failed_items_due,
    drop_never_sends_the_item_and_finalizes_the_key,
    stats_count_the_queue_and_its_oldest_item,
    list_and_get_show_items_newest_first,
    cache_keeps_the_last_result_per_tool_and_arguments,
    hold_create_is_idempotent_per_key_and_marks_the_key_held,
    approve_enqueues_one_item_and_only_the_first_decision_counts,
    reject_sends_nothing_and_finalizes_the_key,
    concurrent_decisions_on_one_hold_make_exactly_one,
    concurrent_claimers_on_two_instances_drain_every_item_once,
    concurrent_begins_of_one_key_give_it_to_one_caller,
    concurrent_enqueues_and_holds_of_one_key_make_one_record,
    records_survive_a_reopen,
    json_values_round_trip_exactly,
    prune_forgets_only_finished_records_past_their_retention,
    kill_flips_are_numbered_in_order_and_read_after_a_number,
    route_to_flips_are_numbered_in_order_and_shared_by_replicas,
    review_items_wait_for_a_person_and_unknown_outcomes_are_remembered,
    runs_count_model_calls_tool_calls_and_the_same_call,
    the_same_tool_error_counts_in_a_row_until_a_success,
    an_idle_run_starts_afresh_and_forgets_its_calls,
    the_first_stop_of_a_run_is_the_one_that_stands,
    two_replicas_count_one_run,
    runs_prune_forgets_only_idle_runs,
    a_runs_evidence_is_shared_by_replicas_and_bounded,
    a_runs_tool_log_keeps_its_newest_calls_in_order,
    run_note_overwrites_only_what_it_sets,
    a_run_that_starts_afresh_forgets_its_notes_and_tool_log,
    runs_prune_forgets_the_tool_logs_of_forgotten_runs,
    spend_adds_up_per_conversation,
    question_seen_counts_other_runs_only,
    conversations_prune_forgets_spend_and_questions,
    a_model_call_is_counted_judged_and_noted_in_one_step,
    a_model_call_is_stopped_by_its_conversations_spend_and_by_an_earlier_stop,
    two_replicas_share_a_runs_last_model_call,
    an_answered_model_call_adds_its_cost_and_notes_its_draft_at_once,
    a_conversation_has_one_handoff,
    concurrent_opens_of_one_conversation_make_one_handoff,
    handoff_delivery_records_where_the_ticket_is,
    handoff_list_filters_and_shows_newest_first,
    the_first_decision_on_a_handoff_is_the_one_that_stands,
    concurrent_decisions_on_one_handoff_make_exactly_one,
    review_stats_count_canaries_apart,
    recorded_calls_come_back_by_window_and_route,
    a_large_batch_of_calls_is_recorded_whole_and_in_order,
    the_trace_store_keeps_the_newest_and_every_notable_trace,
    verdicts_join_their_calls_records_once_each_and_go_with_them,
);

/// Where a backend's data lives, so more instances can be opened on it.
enum Place {
    Sqlite { path: PathBuf, _dir: tempfile::TempDir },
    Postgres { url: String },
}

/// A store under test.
struct Backend {
    store: Arc<dyn ToolStore>,
    place: Place,
}

impl Backend {
    async fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        let sqlite = Arc::new(Store::open(&path).unwrap());
        let store = open_tool_store(path.to_str().unwrap(), Some(sqlite)).await.unwrap();
        Self { store, place: Place::Sqlite { path, _dir: dir } }
    }

    async fn postgres() -> Self {
        let url = fresh_database().await;
        let store = open_tool_store(&url, None).await.unwrap();
        Self { store, place: Place::Postgres { url } }
    }

    /// Another instance on the same data: a second process on the SQLite file, a second
    /// replica on the Postgres database.
    async fn another(&self) -> Arc<dyn ToolStore> {
        self.place.open().await
    }
}

impl Place {
    async fn open(&self) -> Arc<dyn ToolStore> {
        match self {
            Place::Sqlite { path, .. } => {
                Arc::new(SqliteToolStore::new(Arc::new(Store::open(path).unwrap())))
            }
            Place::Postgres { url } => Arc::new(PostgresToolStore::connect(url).await.unwrap()),
        }
    }
}

/// A new database on this test binary's Postgres server. Fails (never skips) without one.
async fn fresh_database() -> String {
    let server = TempPostgres::shared().unwrap_or_else(|e| panic!("{e}"));
    server.create_database().await.unwrap()
}

fn args(key: &str) -> Value {
    json!({ "order": key, "amount_cents": 1250 })
}

fn queued(key: &str) -> Value {
    json!({ "status": "queued", "key": key })
}

async fn begin(store: &dyn ToolStore, key: &str, now: i64) -> KeyBegin {
    store.key_begin(key, TOOL, HASH, now, LEASE).await.unwrap()
}

/// What `key_begin` reports for a key that has a record (late enough that no lease is live).
async fn stored(store: &dyn ToolStore, key: &str) -> KeyBegin {
    begin(store, key, T0 + 1_000 * LEASE).await
}

async fn enqueue(store: &dyn ToolStore, key: &str, now: i64) -> OutboxItem {
    store
        .outbox_enqueue(&NewOutboxItem::new(key, TOOL, &args(key)), &queued(key), now)
        .await
        .unwrap()
}

/// A key begun and its write enqueued at `now`, as the gateway does it.
async fn begin_and_enqueue(store: &dyn ToolStore, key: &str, now: i64) -> OutboxItem {
    assert_eq!(begin(store, key, now).await, KeyBegin::Fresh);
    enqueue(store, key, now).await
}

async fn claim(store: &dyn ToolStore, owner: &str, now: i64, limit: i64) -> Vec<OutboxItem> {
    store.outbox_claim(owner, now, LEASE, limit).await.unwrap()
}

fn ids(items: &[OutboxItem]) -> Vec<i64> {
    items.iter().map(|item| item.id).collect()
}

async fn item(store: &dyn ToolStore, id: i64) -> OutboxItem {
    store.outbox_get(id).await.unwrap().unwrap()
}

fn new_hold(key: &str) -> NewHold {
    NewHold {
        idempotency_key: key.to_owned(),
        tool: TOOL.to_owned(),
        args: args(key),
        reason: "refunds over 10 EUR need a person".to_owned(),
        conversation_id: Some("conv-1".to_owned()),
    }
}

fn held(key: &str) -> Value {
    json!({ "status": "pending_approval", "key": key })
}

async fn create_hold(store: &dyn ToolStore, key: &str, now: i64) -> Hold {
    assert_eq!(begin(store, key, now).await, KeyBegin::Fresh);
    store.hold_create(&new_hold(key), &held(key), now).await.unwrap()
}

fn approve(key: &str) -> Decision {
    Decision::Approve { queued_result: queued(key) }
}

fn reject() -> Decision {
    Decision::Reject { rejected_result: json!({ "status": "rejected" }) }
}

// ---- idempotency keys ----

async fn key_begin_is_fresh_then_in_flight_while_leased(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(begin(store, "k", T0).await, KeyBegin::Fresh);
    let leased = KeyBegin::InFlight { lease_until_unix_ms: T0 + LEASE };
    assert_eq!(begin(store, "k", T0 + 1).await, leased);
    assert_eq!(begin(store, "k", T0 + LEASE - 1).await, leased);
    assert_eq!(begin(store, "other", T0).await, KeyBegin::Fresh);
}

async fn key_begin_takes_over_once_the_lease_expires(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(begin(store, "k", T0).await, KeyBegin::Fresh);
    assert_eq!(begin(store, "k", T0 + LEASE).await, KeyBegin::TakenOver);
    // The taker holds a new lease from its own `now`.
    assert_eq!(
        begin(store, "k", T0 + 2 * LEASE - 1).await,
        KeyBegin::InFlight { lease_until_unix_ms: T0 + 2 * LEASE }
    );
    assert_eq!(begin(store, "k", T0 + 2 * LEASE).await, KeyBegin::TakenOver);
}

async fn key_begin_returns_the_stored_result(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(begin(store, "k", T0).await, KeyBegin::Fresh);
    let result = json!({ "refund_id": "re_1" });
    store.key_finish("k", &result, T0 + 5).await.unwrap();
    let done = KeyBegin::Stored { state: KeyState::Done, result: result.clone() };
    assert_eq!(begin(store, "k", T0 + 6).await, done);
    // A stored result has no lease to expire.
    assert_eq!(stored(store, "k").await, done);
    // Finishing a key nobody began records nothing.
    store.key_finish("never-begun", &result, T0).await.unwrap();
    assert_eq!(begin(store, "never-begun", T0).await, KeyBegin::Fresh);
}

async fn key_begin_refuses_another_tool_or_other_arguments(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(begin(store, "k", T0).await, KeyBegin::Fresh);
    let mismatch = KeyBegin::Mismatch { tool: TOOL.to_owned() };
    assert_eq!(store.key_begin("k", TOOL, "args-b", T0 + 1, LEASE).await.unwrap(), mismatch);
    assert_eq!(store.key_begin("k", "cancel", HASH, T0 + 1, LEASE).await.unwrap(), mismatch);
    // Not even an expired lease is handed to another call.
    let late = T0 + 10 * LEASE;
    assert_eq!(store.key_begin("k", TOOL, "args-b", late, LEASE).await.unwrap(), mismatch);
    // The refusals changed nothing: the owner's lease still stands.
    assert_eq!(
        begin(store, "k", T0 + 2).await,
        KeyBegin::InFlight { lease_until_unix_ms: T0 + LEASE }
    );
    store.key_finish("k", &json!("ok"), T0 + 3).await.unwrap();
    assert_eq!(store.key_begin("k", "cancel", HASH, late, LEASE).await.unwrap(), mismatch);
}

async fn key_recent_finds_a_callers_newest_key_for_the_same_call(backend: Backend) {
    let store = &*backend.store;
    let recent = |prefix: &'static str, hash: &'static str, since: i64| async move {
        store.key_recent(TOOL, hash, prefix, since).await.unwrap()
    };
    assert_eq!(recent("r-aa-", HASH, T0).await, None);
    store.key_begin("r-aa-1", TOOL, HASH, T0, LEASE).await.unwrap();
    store.key_begin("r-aa-2", TOOL, HASH, T0 + 10, LEASE).await.unwrap();
    store.key_begin("r-bb-1", TOOL, HASH, T0 + 20, LEASE).await.unwrap();
    store.key_begin("r-aa-3", TOOL, "args-b", T0 + 30, LEASE).await.unwrap();
    store.key_begin("r-aa-4", "cancel", HASH, T0 + 40, LEASE).await.unwrap();
    // The caller's newest key for this tool and these arguments, in any state.
    store.key_finish("r-aa-2", &json!("done"), T0 + 15).await.unwrap();
    assert_eq!(recent("r-aa-", HASH, T0).await.as_deref(), Some("r-aa-2"));
    assert_eq!(recent("r-bb-", HASH, T0).await.as_deref(), Some("r-bb-1"));
    assert_eq!(recent("r-aa-", "args-b", T0).await.as_deref(), Some("r-aa-3"));
    // Outside the window, or another caller's prefix: none.
    assert_eq!(recent("r-aa-", HASH, T0 + 11).await, None);
    assert_eq!(recent("r-cc-", HASH, T0).await, None);
}

async fn key_abandon_forgets_only_in_flight_keys(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(begin(store, "in-flight", T0).await, KeyBegin::Fresh);
    store.key_abandon("in-flight").await.unwrap();
    assert_eq!(begin(store, "in-flight", T0 + 1).await, KeyBegin::Fresh);

    assert_eq!(begin(store, "done", T0).await, KeyBegin::Fresh);
    store.key_finish("done", &json!("sent"), T0).await.unwrap();
    store.key_abandon("done").await.unwrap();
    assert_eq!(
        stored(store, "done").await,
        KeyBegin::Stored { state: KeyState::Done, result: json!("sent") }
    );

    begin_and_enqueue(store, "queued", T0).await;
    store.key_abandon("queued").await.unwrap();
    assert_eq!(
        stored(store, "queued").await,
        KeyBegin::Stored { state: KeyState::Queued, result: queued("queued") }
    );

    store.key_abandon("unknown").await.unwrap();
}

// ---- outbox ----

async fn enqueue_is_idempotent_per_key_and_marks_the_key_queued(backend: Backend) {
    let store = &*backend.store;
    let first = begin_and_enqueue(store, "k", T0).await;
    assert_eq!(first.idempotency_key, "k");
    assert_eq!(first.tool, TOOL);
    assert_eq!(first.args, args("k"));
    assert_eq!(first.state, OutboxState::Pending);
    assert_eq!(first.attempts, 0);
    assert_eq!(first.last_error, None);
    assert_eq!((first.created_unix_ms, first.next_attempt_unix_ms), (T0, T0));
    assert_eq!((first.lease_owner.clone(), first.lease_until_unix_ms), (None, None));
    assert_eq!((first.finished_unix_ms, first.result.clone()), (None, None));
    assert_eq!(
        stored(store, "k").await,
        KeyBegin::Stored { state: KeyState::Queued, result: queued("k") }
    );

    let again = store
        .outbox_enqueue(
            &NewOutboxItem::new("k", TOOL, &json!({ "other": true })),
            &json!("other"),
            T0 + 5,
        )
        .await
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(
        stored(store, "k").await,
        KeyBegin::Stored { state: KeyState::Queued, result: queued("k") }
    );
    assert_eq!(ids(&store.outbox_list(None, 100).await.unwrap()), vec![first.id]);
}

async fn claim_takes_due_items_oldest_first_up_to_the_limit(backend: Backend) {
    let store = &*backend.store;
    let a = begin_and_enqueue(store, "a", T0).await;
    let b = begin_and_enqueue(store, "b", T0 + 1).await;
    let c = begin_and_enqueue(store, "c", T0 + 2).await;
    let later = begin_and_enqueue(store, "later", T0 + 10).await;

    let first = claim(store, "w1", T0 + 5, 2).await;
    assert_eq!(ids(&first), vec![a.id, b.id]);
    for claimed in &first {
        assert_eq!(claimed.attempts, 1);
        assert_eq!(claimed.lease_owner.as_deref(), Some("w1"));
        assert_eq!(claimed.lease_until_unix_ms, Some(T0 + 5 + LEASE));
        assert_eq!(claimed.state, OutboxState::Pending);
    }
    assert_eq!(item(store, a.id).await, first[0]);
    // `later` is not due yet; a and b are leased.
    assert_eq!(ids(&claim(store, "w2", T0 + 5, 10).await), vec![c.id]);
    assert_eq!(ids(&claim(store, "w2", T0 + 9, 10).await), Vec::<i64>::new());
    assert_eq!(ids(&claim(store, "w2", T0 + 10, 10).await), vec![later.id]);
    assert!(claim(store, "w2", T0 + 10, 0).await.is_empty());
}

/// The negative check: without the lease filter (or, on Postgres, the row locks) the second
/// claim would hand the same items out again.
async fn claim_never_hands_out_an_item_under_a_live_lease(backend: Backend) {
    let store = &*backend.store;
    let replica = backend.another().await;
    let mut enqueued = Vec::new();
    for index in 0..5 {
        enqueued.push(begin_and_enqueue(store, &format!("k{index}"), T0).await.id);
    }
    assert_eq!(ids(&claim(store, "w1", T0, 10).await), enqueued);
    assert!(claim(store, "w2", T0, 10).await.is_empty());
    assert!(claim(&*replica, "w3", T0 + LEASE - 1, 10).await.is_empty());

    // Once the leases expire (the worker crashed), the items are claimed again.
    let again = claim(&*replica, "w3", T0 + LEASE, 10).await;
    assert_eq!(ids(&again), enqueued);
    for claimed in &again {
        assert_eq!(claimed.attempts, 2);
        assert_eq!(claimed.lease_owner.as_deref(), Some("w3"));
        assert_eq!(claimed.lease_until_unix_ms, Some(T0 + 2 * LEASE));
    }
    assert!(claim(store, "w1", T0 + LEASE, 10).await.is_empty());
}

async fn complete_stores_the_result_as_the_keys_final_result(backend: Backend) {
    let store = &*backend.store;
    let queued_item = begin_and_enqueue(store, "k", T0).await;
    claim(store, "w", T0, 1).await;
    let result = json!({ "refund_id": "re_9" });
    assert!(store.outbox_complete(queued_item.id, &result, T0 + 7).await.unwrap());

    let done = item(store, queued_item.id).await;
    assert_eq!(done.state, OutboxState::Done);
    assert_eq!(done.result, Some(result.clone()));
    assert_eq!(done.finished_unix_ms, Some(T0 + 7));
    assert_eq!(done.attempts, 1);
    assert_eq!(stored(store, "k").await, KeyBegin::Stored { state: KeyState::Done, result });

    let other = json!("other");
    assert!(!store.outbox_complete(queued_item.id, &other, T0 + 8).await.unwrap());
    assert!(!store.outbox_retry_later(queued_item.id, "late", T0 + 8, false).await.unwrap());
    assert!(!store.outbox_fail(queued_item.id, "late", &other, T0 + 8).await.unwrap());
    assert!(!store.outbox_complete(987_654, &other, T0 + 8).await.unwrap());
    assert_eq!(item(store, queued_item.id).await, done);
    assert!(claim(store, "w", T0 + 10 * LEASE, 10).await.is_empty());
}

async fn retry_later_releases_the_lease_and_delays_the_item(backend: Backend) {
    let store = &*backend.store;
    let queued_item = begin_and_enqueue(store, "k", T0).await;
    claim(store, "w1", T0, 1).await;
    assert!(
        store
            .outbox_retry_later(queued_item.id, "503 from the primary", T0 + 1_000, false)
            .await
            .unwrap()
    );

    let waiting = item(store, queued_item.id).await;
    assert_eq!(waiting.state, OutboxState::Pending);
    assert_eq!(waiting.last_error.as_deref(), Some("503 from the primary"));
    assert_eq!(waiting.next_attempt_unix_ms, T0 + 1_000);
    assert_eq!((waiting.lease_owner, waiting.lease_until_unix_ms), (None, None));

    assert!(claim(store, "w2", T0 + 999, 10).await.is_empty());
    // Due again well before the old lease would have expired: the lease was released.
    let again = claim(store, "w2", T0 + 1_000, 10).await;
    assert_eq!(ids(&again), vec![queued_item.id]);
    assert_eq!(again[0].attempts, 2);
    assert_eq!(
        stored(store, "k").await,
        KeyBegin::Stored { state: KeyState::Queued, result: queued("k") }
    );
    assert!(!store.outbox_retry_later(987_654, "x", T0, false).await.unwrap());
}

async fn review_items_wait_for_a_person_and_unknown_outcomes_are_remembered(backend: Backend) {
    let store = &*backend.store;
    // Enqueued for review: never claimed, counted apart from the queue, listed as `review`.
    assert_eq!(begin(store, "held", T0).await, KeyBegin::Fresh);
    let mut new = NewOutboxItem::new("held", TOOL, &args("held"));
    new.review = true;
    new.conversation_id = Some("conv-1".to_owned());
    let held = store.outbox_enqueue(&new, &json!("in review"), T0).await.unwrap();
    assert_eq!(held.state, OutboxState::Review);
    assert!(held.outcome_unknown, "a review item's outcome is unknown");
    assert_eq!(held.conversation_id.as_deref(), Some("conv-1"));
    assert!(claim(store, "w", T0 + 10, 10).await.is_empty(), "a review item is never claimed");
    let stats = store.outbox_stats().await.unwrap();
    assert_eq!((stats.pending, stats.review, stats.oldest_pending_created_unix_ms), (0, 1, None));
    assert_eq!(ids(&store.outbox_list(Some(OutboxState::Review), 10).await.unwrap()), [held.id]);
    assert!(store.outbox_list(Some(OutboxState::Pending), 10).await.unwrap().is_empty());
    assert_eq!(
        stored(store, "held").await,
        KeyBegin::Stored { state: KeyState::Queued, result: json!("in review") }
    );

    // Released by an operator (it did not execute): claimable, its outcome known again.
    assert!(store.outbox_replay_now(held.id, T0 + 20).await.unwrap());
    let released = claim(store, "w1", T0 + 20, 10).await;
    assert_eq!(ids(&released), [held.id]);
    assert_eq!(released[0].state, OutboxState::Pending);
    assert!(!released[0].outcome_unknown);
    // Its worker dies mid-send: whoever claims it next knows the send may have executed.
    let after_crash = claim(store, "w2", T0 + 20 + LEASE, 10).await;
    assert_eq!(ids(&after_crash), [held.id]);
    assert!(after_crash[0].outcome_unknown, "{:?}", after_crash[0]);
    // A later attempt that sent nothing keeps it unknown.
    assert!(
        store.outbox_retry_later(held.id, "breaker open", T0 + 30 + LEASE, false).await.unwrap()
    );
    assert!(item(store, held.id).await.outcome_unknown);

    // A plain item: an attempt that may have executed marks it; review moves it aside.
    let plain = begin_and_enqueue(store, "plain", T0).await;
    assert!(!plain.outcome_unknown);
    assert_eq!(plain.conversation_id, None);
    claim(store, "w", T0 + 40 + LEASE, 10).await;
    assert!(store.outbox_retry_later(plain.id, "timed out", T0 + 50 + LEASE, true).await.unwrap());
    assert!(item(store, plain.id).await.outcome_unknown);
    assert!(store.outbox_review(plain.id, "timed out", &json!("review"), T0).await.unwrap());
    let reviewed = item(store, plain.id).await;
    assert_eq!(reviewed.state, OutboxState::Review);
    assert_eq!(reviewed.last_error.as_deref(), Some("timed out"));
    assert_eq!(
        stored(store, "plain").await,
        KeyBegin::Stored { state: KeyState::Queued, result: json!("review") }
    );
    assert!(claim(store, "w", T0 + 10 * LEASE, 10).await.iter().all(|i| i.id != plain.id));

    // An operator marks it executed: done, with the key's final result.
    assert!(store.outbox_complete(plain.id, &json!("executed"), T0 + 60).await.unwrap());
    assert_eq!(item(store, plain.id).await.state, OutboxState::Done);
    assert_eq!(ids(&store.outbox_list(Some(OutboxState::Done), 10).await.unwrap()), [plain.id]);
    assert!(!store.outbox_review(plain.id, "late", &json!("x"), T0).await.unwrap());
    assert_eq!(
        stored(store, "plain").await,
        KeyBegin::Stored { state: KeyState::Done, result: json!("executed") }
    );
}

async fn fail_keeps_the_item_and_finalizes_the_key(backend: Backend) {
    let store = &*backend.store;
    let queued_item = begin_and_enqueue(store, "k", T0).await;
    claim(store, "w", T0, 1).await;
    let failed_result = json!({ "status": "failed", "error": "422 invalid order" });
    assert!(
        store
            .outbox_fail(queued_item.id, "422 invalid order", &failed_result, T0 + 3)
            .await
            .unwrap()
    );

    let failed = item(store, queued_item.id).await;
    assert_eq!(failed.state, OutboxState::Failed);
    assert_eq!(failed.last_error.as_deref(), Some("422 invalid order"));
    assert_eq!(failed.finished_unix_ms, Some(T0 + 3));
    assert_eq!(failed.result, None);
    assert_eq!(
        stored(store, "k").await,
        KeyBegin::Stored { state: KeyState::Done, result: failed_result.clone() }
    );
    assert!(claim(store, "w", T0 + 10 * LEASE, 10).await.is_empty());
    assert_eq!(
        store.outbox_stats().await.unwrap(),
        OutboxStats { pending: 0, failed: 1, review: 0, oldest_pending_created_unix_ms: None }
    );
    assert!(!store.outbox_fail(queued_item.id, "again", &failed_result, T0 + 4).await.unwrap());
    assert!(!store.outbox_complete(queued_item.id, &json!("late"), T0 + 4).await.unwrap());
}

async fn replay_now_makes_pending_and_failed_items_due(backend: Backend) {
    let store = &*backend.store;

    // A pending item waiting for its next attempt is due at once.
    let waiting = begin_and_enqueue(store, "waiting", T0).await;
    claim(store, "w", T0, 1).await;
    store.outbox_retry_later(waiting.id, "timeout", T0 + 1_000_000, false).await.unwrap();
    assert!(store.outbox_replay_now(waiting.id, T0 + 10).await.unwrap());
    assert_eq!(item(store, waiting.id).await.next_attempt_unix_ms, T0 + 10);
    assert_eq!(ids(&claim(store, "w", T0 + 10, 10).await), vec![waiting.id]);

    // A replay does not break the live lease of an item being sent.
    assert!(store.outbox_replay_now(waiting.id, T0 + 11).await.unwrap());
    assert!(claim(store, "w2", T0 + 11, 10).await.is_empty());

    // A failed item becomes pending again, and its key reads as queued again.
    let failed = begin_and_enqueue(store, "failed", T0).await;
    claim(store, "w", T0 + 20, 10).await;
    store.outbox_fail(failed.id, "422", &json!("failed"), T0 + 20).await.unwrap();
    assert!(store.outbox_replay_now(failed.id, T0 + 30).await.unwrap());
    let replayed = item(store, failed.id).await;
    assert_eq!(replayed.state, OutboxState::Pending);
    assert_eq!(replayed.next_attempt_unix_ms, T0 + 30);
    assert_eq!(replayed.finished_unix_ms, None);
    assert_eq!(replayed.idempotency_key, "failed");
    assert_eq!(
        stored(store, "failed").await,
        KeyBegin::Stored { state: KeyState::Queued, result: queued("failed") }
    );
    assert_eq!(ids(&claim(store, "w", T0 + 30, 10).await), vec![failed.id]);
    assert!(store.outbox_complete(failed.id, &json!("sent"), T0 + 31).await.unwrap());

    // Done, dropped and unknown items are not replayed.
    assert!(!store.outbox_replay_now(failed.id, T0 + 40).await.unwrap());
    let dropped = begin_and_enqueue(store, "dropped", T0).await;
    store.outbox_drop(dropped.id, &json!("dropped"), T0 + 1).await.unwrap();
    assert!(!store.outbox_replay_now(dropped.id, T0 + 40).await.unwrap());
    assert!(!store.outbox_replay_now(987_654, T0 + 40).await.unwrap());
    assert_eq!(item(store, dropped.id).await.state, OutboxState::Dropped);
}

async fn drop_never_sends_the_item_and_finalizes_the_key(backend: Backend) {
    let store = &*backend.store;
    let dropped_result = json!({ "status": "dropped" });

    let pending = begin_and_enqueue(store, "pending", T0).await;
    assert!(store.outbox_drop(pending.id, &dropped_result, T0 + 5).await.unwrap());
    let dropped = item(store, pending.id).await;
    assert_eq!(dropped.state, OutboxState::Dropped);
    assert_eq!(dropped.finished_unix_ms, Some(T0 + 5));
    assert_eq!(
        stored(store, "pending").await,
        KeyBegin::Stored { state: KeyState::Done, result: dropped_result.clone() }
    );
    assert!(claim(store, "w", T0 + 10, 10).await.is_empty());
    assert!(!store.outbox_drop(pending.id, &dropped_result, T0 + 6).await.unwrap());
    assert!(!store.outbox_complete(pending.id, &json!("late"), T0 + 6).await.unwrap());

    let failed = begin_and_enqueue(store, "failed", T0).await;
    claim(store, "w", T0 + 10, 10).await;
    store.outbox_fail(failed.id, "422", &json!("failed"), T0 + 10).await.unwrap();
    assert!(store.outbox_drop(failed.id, &dropped_result, T0 + 11).await.unwrap());
    assert_eq!(item(store, failed.id).await.state, OutboxState::Dropped);

    let done = begin_and_enqueue(store, "done", T0).await;
    claim(store, "w", T0 + 20, 10).await;
    store.outbox_complete(done.id, &json!("sent"), T0 + 20).await.unwrap();
    assert!(!store.outbox_drop(done.id, &dropped_result, T0 + 21).await.unwrap());
    assert_eq!(
        stored(store, "done").await,
        KeyBegin::Stored { state: KeyState::Done, result: json!("sent") }
    );
    assert!(!store.outbox_drop(987_654, &dropped_result, T0).await.unwrap());
}

async fn stats_count_the_queue_and_its_oldest_item(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(store.outbox_stats().await.unwrap(), OutboxStats::default());
    let a = begin_and_enqueue(store, "a", T0).await;
    let b = begin_and_enqueue(store, "b", T0 + 100).await;
    begin_and_enqueue(store, "c", T0 + 200).await;
    assert_eq!(
        store.outbox_stats().await.unwrap(),
        OutboxStats { pending: 3, failed: 0, review: 0, oldest_pending_created_unix_ms: Some(T0) }
    );
    // A claimed item is still in the queue.
    claim(store, "w", T0 + 200, 2).await;
    assert_eq!(store.outbox_stats().await.unwrap().pending, 3);
    store.outbox_complete(a.id, &json!("sent"), T0 + 300).await.unwrap();
    store.outbox_fail(b.id, "422", &json!("failed"), T0 + 300).await.unwrap();
    begin_and_enqueue(store, "d", T0 + 300).await;
    assert_eq!(
        store.outbox_stats().await.unwrap(),
        OutboxStats {
            pending: 2,
            failed: 1,
            review: 0,
            oldest_pending_created_unix_ms: Some(T0 + 200)
        }
    );
}

async fn list_and_get_show_items_newest_first(backend: Backend) {
    let store = &*backend.store;
    let a = begin_and_enqueue(store, "a", T0).await;
    let b = begin_and_enqueue(store, "b", T0 + 1).await;
    let c = begin_and_enqueue(store, "c", T0 + 2).await;
    claim(store, "w", T0 + 2, 1).await;
    store.outbox_complete(a.id, &json!("sent"), T0 + 3).await.unwrap();

    assert_eq!(ids(&store.outbox_list(None, 10).await.unwrap()), vec![c.id, b.id, a.id]);
    assert_eq!(ids(&store.outbox_list(None, 2).await.unwrap()), vec![c.id, b.id]);
    let pending = store.outbox_list(Some(OutboxState::Pending), 10).await.unwrap();
    assert_eq!(ids(&pending), vec![c.id, b.id]);
    assert_eq!(pending[1], b);
    let done = store.outbox_list(Some(OutboxState::Done), 10).await.unwrap();
    assert_eq!(ids(&done), vec![a.id]);
    assert_eq!(item(store, a.id).await, done[0]);
    assert!(store.outbox_list(Some(OutboxState::Failed), 10).await.unwrap().is_empty());
    assert!(store.outbox_list(None, 0).await.unwrap().is_empty());
    assert_eq!(store.outbox_get(987_654).await.unwrap(), None);
}

// ---- read cache ----

async fn cache_keeps_the_last_result_per_tool_and_arguments(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(store.cache_get("order_status", "h1").await.unwrap(), None);
    store.cache_put("order_status", "h1", &json!({ "status": "shipped" }), T0).await.unwrap();
    let cached = store.cache_get("order_status", "h1").await.unwrap().unwrap();
    assert_eq!((cached.result, cached.captured_unix_ms), (json!({ "status": "shipped" }), T0));

    store.cache_put("order_status", "h1", &json!({ "status": "delivered" }), T0 + 5).await.unwrap();
    let cached = store.cache_get("order_status", "h1").await.unwrap().unwrap();
    assert_eq!(
        (cached.result, cached.captured_unix_ms),
        (json!({ "status": "delivered" }), T0 + 5)
    );

    assert_eq!(store.cache_get("order_status", "h2").await.unwrap(), None);
    assert_eq!(store.cache_get("invoice", "h1").await.unwrap(), None);
}

// ---- gate holds ----

async fn hold_create_is_idempotent_per_key_and_marks_the_key_held(backend: Backend) {
    let store = &*backend.store;
    let hold = create_hold(store, "k", T0).await;
    assert_eq!(hold.idempotency_key, "k");
    assert_eq!(hold.tool, TOOL);
    assert_eq!(hold.args, args("k"));
    assert_eq!(hold.reason, new_hold("k").reason);
    assert_eq!(hold.conversation_id.as_deref(), Some("conv-1"));
    assert_eq!(hold.state, HoldState::Pending);
    assert_eq!(hold.created_unix_ms, T0);
    assert_eq!((hold.decided_by.clone(), hold.decision_note.clone()), (None, None));
    assert_eq!((hold.decided_unix_ms, hold.outbox_id), (None, None));
    // The key's stored result names its hold, so a repeat of the held call can.
    let mut result = held("k");
    result["hold_id"] = json!(hold.id);
    let held_k = KeyBegin::Stored { state: KeyState::Held, result };
    assert_eq!(stored(store, "k").await, held_k);

    let other =
        NewHold { reason: "another rule".to_owned(), conversation_id: None, ..new_hold("k") };
    assert_eq!(store.hold_create(&other, &json!("other"), T0 + 5).await.unwrap(), hold);
    assert_eq!(stored(store, "k").await, held_k);

    let second = create_hold(store, "k2", T0 + 1).await;
    assert_eq!(store.hold_list(None, 10).await.unwrap(), vec![second.clone(), hold.clone()]);
    assert_eq!(store.hold_list(None, 1).await.unwrap(), vec![second]);
    assert_eq!(store.hold_list(Some(HoldState::Pending), 10).await.unwrap().len(), 2);
    assert!(store.hold_list(Some(HoldState::Approved), 10).await.unwrap().is_empty());
    assert_eq!(store.hold_get(hold.id).await.unwrap(), Some(hold));
    assert_eq!(store.hold_get(987_654).await.unwrap(), None);
    assert!(store.outbox_list(None, 10).await.unwrap().is_empty());
}

async fn approve_enqueues_one_item_and_only_the_first_decision_counts(backend: Backend) {
    let store = &*backend.store;
    let hold = create_hold(store, "k", T0).await;
    let decided = store
        .hold_decide(hold.id, &approve("k"), "ana", "customer verified", T0 + 10)
        .await
        .unwrap();
    let decided = decided.expect("the first decision takes effect");
    assert_eq!(decided.state, HoldState::Approved);
    assert_eq!(decided.decided_by.as_deref(), Some("ana"));
    assert_eq!(decided.decision_note.as_deref(), Some("customer verified"));
    assert_eq!(decided.decided_unix_ms, Some(T0 + 10));
    assert_eq!(store.hold_get(hold.id).await.unwrap().as_ref(), Some(&decided));

    let outbox_id = decided.outbox_id.expect("an approval enqueues the write");
    let enqueued = item(store, outbox_id).await;
    assert_eq!((enqueued.idempotency_key.as_str(), enqueued.tool.as_str()), ("k", TOOL));
    assert_eq!(enqueued.args, args("k"));
    assert_eq!((enqueued.state, enqueued.next_attempt_unix_ms), (OutboxState::Pending, T0 + 10));
    assert_eq!(
        stored(store, "k").await,
        KeyBegin::Stored { state: KeyState::Queued, result: queued("k") }
    );

    assert_eq!(store.hold_decide(hold.id, &approve("k"), "bo", "", T0 + 11).await.unwrap(), None);
    assert_eq!(store.hold_decide(hold.id, &reject(), "bo", "", T0 + 12).await.unwrap(), None);
    assert_eq!(store.hold_decide(987_654, &approve("x"), "bo", "", T0 + 12).await.unwrap(), None);
    assert_eq!(store.hold_get(hold.id).await.unwrap(), Some(decided));
    assert_eq!(ids(&store.outbox_list(None, 10).await.unwrap()), vec![outbox_id]);
    assert_eq!(store.hold_list(Some(HoldState::Approved), 10).await.unwrap().len(), 1);

    // The enqueued write is sent once, with its original key.
    assert_eq!(ids(&claim(store, "w", T0 + 10, 10).await), vec![outbox_id]);
    store.outbox_complete(outbox_id, &json!("refunded"), T0 + 13).await.unwrap();
    assert_eq!(
        stored(store, "k").await,
        KeyBegin::Stored { state: KeyState::Done, result: json!("refunded") }
    );
}

async fn reject_sends_nothing_and_finalizes_the_key(backend: Backend) {
    let store = &*backend.store;
    let hold = create_hold(store, "k", T0).await;
    let decided =
        store.hold_decide(hold.id, &reject(), "ana", "not eligible", T0 + 5).await.unwrap();
    let decided = decided.expect("the first decision takes effect");
    assert_eq!(decided.state, HoldState::Rejected);
    assert_eq!(decided.outbox_id, None);
    assert_eq!(decided.decision_note.as_deref(), Some("not eligible"));
    assert_eq!(
        stored(store, "k").await,
        KeyBegin::Stored { state: KeyState::Done, result: json!({ "status": "rejected" }) }
    );
    assert_eq!(store.hold_decide(hold.id, &approve("k"), "bo", "", T0 + 6).await.unwrap(), None);
    assert!(store.outbox_list(None, 10).await.unwrap().is_empty());
    assert_eq!(store.hold_list(Some(HoldState::Rejected), 10).await.unwrap(), vec![decided]);
}

// ---- concurrency ----

async fn concurrent_decisions_on_one_hold_make_exactly_one(backend: Backend) {
    let replica = backend.another().await;
    let hold = create_hold(&*backend.store, "k", T0).await;
    let mut tasks = Vec::new();
    for index in 0..8 {
        let store = if index % 2 == 0 { Arc::clone(&backend.store) } else { Arc::clone(&replica) };
        let decision = if index % 3 == 0 { reject() } else { approve("k") };
        tasks.push(tokio::spawn(async move {
            store.hold_decide(hold.id, &decision, &format!("person-{index}"), "", T0 + 1).await
        }));
    }
    let mut decisions = Vec::new();
    for task in tasks {
        decisions.extend(task.await.unwrap().unwrap());
    }
    assert_eq!(decisions.len(), 1, "exactly one decision takes effect: {decisions:?}");
    let outbox = backend.store.outbox_list(None, 10).await.unwrap();
    match decisions[0].state {
        HoldState::Approved => assert_eq!(ids(&outbox), vec![decisions[0].outbox_id.unwrap()]),
        HoldState::Rejected => assert!(outbox.is_empty()),
        HoldState::Pending => panic!("a decided hold is pending"),
    }
}

/// Six workers on two instances (two gateway processes or replicas) claim and complete until
/// the queue is empty. All at one `now`, so no lease expires: each item must be handed out
/// exactly once, though every worker tries to claim while others hold leases.
async fn concurrent_claimers_on_two_instances_drain_every_item_once(backend: Backend) {
    const ITEMS: usize = 60;
    let replica = backend.another().await;
    let mut enqueued = BTreeSet::new();
    for index in 0..ITEMS {
        enqueued.insert(begin_and_enqueue(&*backend.store, &format!("k{index}"), T0).await.id);
    }
    let mut workers = Vec::new();
    for worker in 0..6 {
        let store = if worker % 2 == 0 { Arc::clone(&backend.store) } else { Arc::clone(&replica) };
        workers.push(tokio::spawn(async move {
            let owner = format!("worker-{worker}");
            let mut claimed = Vec::new();
            loop {
                let batch = store.outbox_claim(&owner, T0, LEASE, 4).await.unwrap();
                if batch.is_empty() {
                    return claimed;
                }
                // Let the others claim while these leases are live.
                tokio::task::yield_now().await;
                for item in batch {
                    assert_eq!(item.attempts, 1, "item {} was claimed before", item.id);
                    assert!(store.outbox_complete(item.id, &json!("sent"), T0).await.unwrap());
                    claimed.push(item.id);
                }
            }
        }));
    }
    let mut claimed = Vec::new();
    for worker in workers {
        claimed.extend(worker.await.unwrap());
    }
    let distinct: BTreeSet<i64> = claimed.iter().copied().collect();
    assert_eq!(claimed.len(), distinct.len(), "an item was handed out twice");
    assert_eq!(distinct, enqueued, "every item is drained");
    assert_eq!(backend.store.outbox_stats().await.unwrap(), OutboxStats::default());
}

async fn concurrent_begins_of_one_key_give_it_to_one_caller(backend: Backend) {
    let replica = backend.another().await;
    let mut tasks = Vec::new();
    for index in 0..10 {
        let store = if index % 2 == 0 { Arc::clone(&backend.store) } else { Arc::clone(&replica) };
        tasks.push(tokio::spawn(async move { begin(&*store, "k", T0).await }));
    }
    let mut fresh = 0;
    for task in tasks {
        match task.await.unwrap() {
            KeyBegin::Fresh => fresh += 1,
            KeyBegin::InFlight { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(fresh, 1);
}

async fn concurrent_enqueues_and_holds_of_one_key_make_one_record(backend: Backend) {
    let replica = backend.another().await;
    assert_eq!(begin(&*backend.store, "write", T0).await, KeyBegin::Fresh);
    assert_eq!(begin(&*backend.store, "held", T0).await, KeyBegin::Fresh);
    let mut items = Vec::new();
    let mut holds = Vec::new();
    for index in 0..8 {
        let store = if index % 2 == 0 { Arc::clone(&backend.store) } else { Arc::clone(&replica) };
        let other = Arc::clone(&store);
        items.push(tokio::spawn(async move { enqueue(&*store, "write", T0 + index).await.id }));
        holds.push(tokio::spawn(async move {
            other.hold_create(&new_hold("held"), &held("held"), T0 + index).await.unwrap().id
        }));
    }
    let mut item_ids = BTreeSet::new();
    for task in items {
        item_ids.insert(task.await.unwrap());
    }
    let mut hold_ids = BTreeSet::new();
    for task in holds {
        hold_ids.insert(task.await.unwrap());
    }
    assert_eq!((item_ids.len(), hold_ids.len()), (1, 1));
    assert_eq!(backend.store.outbox_list(None, 10).await.unwrap().len(), 1);
    assert_eq!(backend.store.hold_list(None, 10).await.unwrap().len(), 1);
}

// ---- durability and values ----

async fn records_survive_a_reopen(backend: Backend) {
    let Backend { store, place } = backend;
    assert_eq!(begin(&*store, "done", T0).await, KeyBegin::Fresh);
    store.key_finish("done", &json!("sent"), T0).await.unwrap();
    let queued_item = begin_and_enqueue(&*store, "queued", T0).await;
    let hold = create_hold(&*store, "held", T0).await;
    store.cache_put("order_status", "h1", &json!("shipped"), T0).await.unwrap();
    drop(store);

    let reopened = place.open().await;
    let store = &*reopened;
    assert_eq!(
        stored(store, "done").await,
        KeyBegin::Stored { state: KeyState::Done, result: json!("sent") }
    );
    assert_eq!(item(store, queued_item.id).await, queued_item);
    assert_eq!(store.hold_get(hold.id).await.unwrap(), Some(hold));
    assert_eq!(
        store.cache_get("order_status", "h1").await.unwrap().unwrap().result,
        json!("shipped")
    );
    // Ids keep counting after a reopen.
    assert!(begin_and_enqueue(store, "next", T0).await.id > queued_item.id);
}

/// Results go back exactly as given: a NUL character (which Postgres `jsonb` refuses), floats
/// that need 17 digits, integers beyond `i64`, JSON `null`.
async fn json_values_round_trip_exactly(backend: Backend) {
    let store = &*backend.store;
    let odd = json!({
        "nul": "a\u{0}b",
        "text": "ünïcødé ✓ \"quoted\" \\ back",
        "float": 0.1 + 0.2,
        "big": u64::MAX,
        "small": i64::MIN,
        "nested": [null, true, { "empty": {} }, []],
    });
    for (key, value) in [("odd", odd.clone()), ("null", Value::Null), ("number", json!(7))] {
        assert_eq!(begin(store, key, T0).await, KeyBegin::Fresh);
        store.key_finish(key, &value, T0).await.unwrap();
        assert_eq!(
            stored(store, key).await,
            KeyBegin::Stored { state: KeyState::Done, result: value }
        );
    }
    assert_eq!(begin(store, "write", T0).await, KeyBegin::Fresh);
    let enqueued = store
        .outbox_enqueue(&NewOutboxItem::new("write", TOOL, &odd), &Value::Null, T0)
        .await
        .unwrap();
    assert_eq!(enqueued.args, odd);
    assert_eq!(
        stored(store, "write").await,
        KeyBegin::Stored { state: KeyState::Queued, result: Value::Null }
    );
    store.outbox_complete(enqueued.id, &odd, T0).await.unwrap();
    assert_eq!(item(store, enqueued.id).await.result, Some(odd.clone()));
    store.cache_put("t", "h", &odd, T0).await.unwrap();
    assert_eq!(store.cache_get("t", "h").await.unwrap().unwrap().result, odd);
}

// ---- retention ----

async fn prune_forgets_only_finished_records_past_their_retention(backend: Backend) {
    let store = &*backend.store;
    let old = T0;
    let recent = T0 + 10 * LEASE;
    // Old and finished: a direct write, a replayed write, a dropped one, a rejected hold and an
    // approved hold whose write executed.
    assert_eq!(begin(store, "done", old).await, KeyBegin::Fresh);
    store.key_finish("done", &json!({"status": "ok"}), old).await.unwrap();
    let replayed = begin_and_enqueue(store, "replayed", old).await;
    assert!(store.outbox_complete(replayed.id, &json!({"status": "ok"}), old).await.unwrap());
    let dropped = begin_and_enqueue(store, "dropped", old).await;
    assert!(store.outbox_drop(dropped.id, &json!({"status": "refused"}), old).await.unwrap());
    let rejected = create_hold(store, "rejected", old).await;
    store.hold_decide(rejected.id, &reject(), "ops", "no", old).await.unwrap().unwrap();
    let approved = create_hold(store, "approved", old).await;
    let approved = store
        .hold_decide(approved.id, &approve("approved"), "ops", "ok", old)
        .await
        .unwrap()
        .unwrap();
    let approved_item = approved.outbox_id.unwrap();
    assert!(store.outbox_complete(approved_item, &json!({"status": "ok"}), old).await.unwrap());
    // Old but not finished: in flight, queued (pending), failed, held.
    assert_eq!(begin(store, "in-flight", old).await, KeyBegin::Fresh);
    let pending = begin_and_enqueue(store, "pending", old).await;
    let failed = begin_and_enqueue(store, "failed", old).await;
    assert!(store.outbox_fail(failed.id, "400", &json!({"status": "refused"}), old).await.unwrap());
    let held = create_hold(store, "held", old).await;
    // Finished, but recent.
    assert_eq!(begin(store, "recent", recent).await, KeyBegin::Fresh);
    store.key_finish("recent", &json!({"status": "ok"}), recent).await.unwrap();
    store.cache_put(TOOL, "old-args", &json!({"r": 1}), old).await.unwrap();
    store.cache_put(TOOL, "new-args", &json!({"r": 2}), recent).await.unwrap();

    let pruned = store.prune(T0 + LEASE, T0 + LEASE).await.unwrap();
    assert_eq!(pruned, Pruned { keys: 5, outbox: 3, holds: 2, cache: 1 });

    // Forgotten: a repeat of a pruned key starts afresh (as Stripe's expired keys do).
    for key in ["done", "replayed", "dropped", "rejected", "approved"] {
        assert_eq!(begin(store, key, recent).await, KeyBegin::Fresh, "{key}");
    }
    for id in [replayed.id, dropped.id, approved_item] {
        assert!(store.outbox_get(id).await.unwrap().is_none());
    }
    assert!(store.hold_get(rejected.id).await.unwrap().is_none());
    // Kept: everything that may still execute or needs an operator, and what is recent.
    assert!(matches!(
        stored(store, "pending").await,
        KeyBegin::Stored { state: KeyState::Queued, .. }
    ));
    assert_eq!(item(store, pending.id).await.state, OutboxState::Pending);
    assert_eq!(item(store, failed.id).await.state, OutboxState::Failed);
    assert_eq!(store.hold_get(held.id).await.unwrap().unwrap().state, HoldState::Pending);
    assert!(matches!(stored(store, "held").await, KeyBegin::Stored { state: KeyState::Held, .. }));
    assert!(matches!(
        stored(store, "recent").await,
        KeyBegin::Stored { state: KeyState::Done, .. }
    ));
    assert!(
        matches!(
            store.key_begin("in-flight", TOOL, HASH, old + 1, LEASE).await.unwrap(),
            KeyBegin::InFlight { .. }
        ),
        "an in-flight key is never pruned"
    );
    assert!(store.cache_get(TOOL, "old-args").await.unwrap().is_none());
    assert!(store.cache_get(TOOL, "new-args").await.unwrap().is_some());
    // A second pass finds nothing more.
    assert_eq!(store.prune(T0 + LEASE, T0 + LEASE).await.unwrap(), Pruned::default());
}

// ---- the kill switch ----

async fn kill_flips_are_numbered_in_order_and_read_after_a_number(backend: Backend) {
    use rein_core::{KillFlip, KillScope};

    let store = &*backend.store;
    assert!(store.kill_flips_after(0).await.unwrap().is_empty());
    let flip = |scope: KillScope, engaged: bool, reason: &str, at: u64| KillFlip {
        scope,
        engaged,
        reason: reason.to_owned(),
        at_unix_ms: at,
    };
    let flips = [
        flip(KillScope::Route("support".into()), true, "bad prompt edit", 1_700_000_000_000),
        flip(KillScope::Global, true, "provider incident", 1_700_000_060_000),
        flip(KillScope::Global, false, "resolved", 1_700_000_120_000),
    ];
    let mut numbers = Vec::new();
    for flip in &flips {
        numbers.push(store.kill_record(flip).await.unwrap());
    }
    assert!(numbers.windows(2).all(|pair| pair[0] < pair[1]), "{numbers:?}");
    let all = store.kill_flips_after(0).await.unwrap();
    assert_eq!(all.iter().map(|(n, _)| *n).collect::<Vec<_>>(), numbers);
    assert_eq!(all.into_iter().map(|(_, flip)| flip).collect::<Vec<_>>(), flips);
    // What a replica that has seen the first flip still has to apply.
    let rest = store.kill_flips_after(numbers[0]).await.unwrap();
    assert_eq!(rest.into_iter().map(|(_, flip)| flip).collect::<Vec<_>>(), flips[1..]);
    assert!(store.kill_flips_after(numbers[2]).await.unwrap().is_empty());
}

// ---- the route-to lever ----

async fn route_to_flips_are_numbered_in_order_and_shared_by_replicas(backend: Backend) {
    use rein_core::RouteToFlip;

    let store = &*backend.store;
    assert!(store.route_to_flips_after(0).await.unwrap().is_empty());
    let flip = |tier: Option<&str>, author: &str, reason: &str, at: u64| RouteToFlip {
        route: "support".into(),
        tier: tier.map(str::to_owned),
        author: author.to_owned(),
        reason: reason.to_owned(),
        at_unix_ms: at,
    };
    let flips = [
        flip(Some("fallback"), "ana", "quality score dropped", 1_700_000_000_000),
        flip(None, "bo", "prompt reverted", 1_700_000_060_000),
        flip(Some("backup"), "ana", "again", 1_700_000_120_000),
    ];
    let mut numbers = Vec::new();
    for flip in &flips {
        numbers.push(store.route_to_record(flip).await.unwrap());
    }
    assert!(numbers.windows(2).all(|pair| pair[0] < pair[1]), "{numbers:?}");
    // Another replica (or the gateway after a restart) reads the same flips, with who, when, why.
    let replica = backend.another().await;
    let all = replica.route_to_flips_after(0).await.unwrap();
    assert_eq!(all.iter().map(|(n, _)| *n).collect::<Vec<_>>(), numbers);
    assert_eq!(all.into_iter().map(|(_, flip)| flip).collect::<Vec<_>>(), flips);
    let rest = replica.route_to_flips_after(numbers[1]).await.unwrap();
    assert_eq!(rest.into_iter().map(|(_, flip)| flip).collect::<Vec<_>>(), flips[2..]);
}

// ---- runs ----

const IDLE: i64 = 3_600_000;

async fn count(store: &dyn ToolStore, run: &str, event: RunEvent<'_>, at: i64) -> RunCounts {
    store.run_record(run, Some("conv-1"), event, at, IDLE).await.unwrap()
}

fn lookup(args_hash: &str) -> RunEvent<'_> {
    RunEvent::ToolCall { tool: "look_up_order", args_hash }
}

async fn runs_count_model_calls_tool_calls_and_the_same_call(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(count(store, "r1", RunEvent::ModelCall, T0).await.model_calls, 1);
    let counts = count(store, "r1", RunEvent::ModelCall, T0 + 10).await;
    assert_eq!((counts.model_calls, counts.tool_calls), (2, 0));
    assert_eq!(count(store, "r1", lookup("order-44718"), T0 + 20).await.same_call, 1);
    assert_eq!(count(store, "r1", lookup("order-44718"), T0 + 30).await.same_call, 2);
    let other = count(store, "r1", lookup("order-44781"), T0 + 40).await;
    assert_eq!((other.same_call, other.tool_calls), (1, 3));
    assert_eq!(other.first_unix_ms, T0);
    assert_eq!(other.last_unix_ms, T0 + 40);
    assert_eq!(other.conversation_id.as_deref(), Some("conv-1"));
    assert_eq!(other.stopped, None);
    // Another run counts on its own.
    assert_eq!(count(store, "r2", lookup("order-44718"), T0 + 50).await.same_call, 1);
}

async fn the_same_tool_error_counts_in_a_row_until_a_success(backend: Backend) {
    let store = &*backend.store;
    let failed = RunEvent::ToolResult { tool: "look_up_order", error: Some("no order 44718") };
    assert_eq!(count(store, "r1", failed, T0).await.same_error, 1);
    assert_eq!(count(store, "r1", failed, T0 + 1).await.same_error, 2);
    let other = RunEvent::ToolResult { tool: "look_up_order", error: Some("timed out") };
    assert_eq!(count(store, "r1", other, T0 + 2).await.same_error, 1);
    let ok = RunEvent::ToolResult { tool: "look_up_order", error: None };
    assert_eq!(count(store, "r1", ok, T0 + 3).await.same_error, 0);
}

async fn an_idle_run_starts_afresh_and_forgets_its_calls(backend: Backend) {
    let store = &*backend.store;
    count(store, "r1", RunEvent::ModelCall, T0).await;
    assert_eq!(count(store, "r1", lookup("a"), T0 + 1).await.same_call, 1);
    assert_eq!(count(store, "r1", lookup("a"), T0 + 2).await.same_call, 2);
    let later = T0 + 2 + IDLE;
    let fresh = count(store, "r1", lookup("a"), later).await;
    assert_eq!((fresh.same_call, fresh.tool_calls, fresh.model_calls), (1, 1, 0));
    assert_eq!(fresh.first_unix_ms, later);
}

async fn the_first_stop_of_a_run_is_the_one_that_stands(backend: Backend) {
    let store = &*backend.store;
    count(store, "r1", RunEvent::ModelCall, T0).await;
    let status = store.run_stop("r1", "stopped_repeated_call", T0 + 1).await.unwrap();
    assert_eq!(status, "stopped_repeated_call");
    let status = store.run_stop("r1", "stopped_deadline", T0 + 2).await.unwrap();
    assert_eq!(status, "stopped_repeated_call", "the first stop stands");
    let counts = count(store, "r1", RunEvent::ModelCall, T0 + 3).await;
    assert_eq!(counts.stopped.as_deref(), Some("stopped_repeated_call"));
    assert_eq!(counts.model_calls, 2, "a stop keeps the counts");
    // A run never seen can be stopped too.
    assert_eq!(store.run_stop("r9", "stopped_spend", T0).await.unwrap(), "stopped_spend");
}

async fn two_replicas_count_one_run(backend: Backend) {
    let replica = backend.another().await;
    let mut tasks = Vec::new();
    for index in 0..10 {
        let store = if index % 2 == 0 { Arc::clone(&backend.store) } else { Arc::clone(&replica) };
        tasks.push(tokio::spawn(async move {
            count(&*store, "r1", lookup("order-44718"), T0 + index).await.same_call
        }));
    }
    let mut seen = BTreeSet::new();
    for task in tasks {
        seen.insert(task.await.unwrap());
    }
    assert_eq!(seen, (1..=10).collect::<BTreeSet<i64>>(), "each call got its own count");
    let last = count(&*replica, "r1", RunEvent::ModelCall, T0 + 20).await;
    assert_eq!(last.tool_calls, 10);
}

async fn runs_prune_forgets_only_idle_runs(backend: Backend) {
    let store = &*backend.store;
    count(store, "old", lookup("a"), T0).await;
    count(store, "new", lookup("a"), T0 + 100).await;
    assert_eq!(store.runs_prune(T0 + 50).await.unwrap(), 1);
    assert_eq!(count(store, "old", lookup("a"), T0 + 200).await.same_call, 1, "forgotten");
    assert_eq!(count(store, "new", lookup("a"), T0 + 200).await.same_call, 2, "kept");
}

async fn a_runs_evidence_is_shared_by_replicas_and_bounded(backend: Backend) {
    let replica = backend.another().await;
    let item = |id: &str| json!({"id": id, "source": "search", "text": ""});
    backend.store.run_evidence_add("r1", &[item("140"), item("118")], T0).await.unwrap();
    replica.run_evidence_add("r1", &[item("212")], T0 + 10).await.unwrap();
    replica.run_evidence_add("r2", &[item("999")], T0 + 10).await.unwrap();
    let ids = |items: Vec<Value>| {
        items.iter().map(|i| i["id"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    let seen = backend.store.run_evidence("r1", T0).await.unwrap();
    assert_eq!(ids(seen), ["140", "118", "212"], "oldest first, from either replica");
    let recent = replica.run_evidence("r1", T0 + 5).await.unwrap();
    assert_eq!(ids(recent), ["212"], "only what was added since");
    // A run keeps its newest items.
    let max = usize::try_from(rein_store::runs::MAX_EVIDENCE).unwrap();
    let many: Vec<Value> = (0..max + 3).map(|n| item(&format!("n{n}"))).collect();
    backend.store.run_evidence_add("r3", &many, T0).await.unwrap();
    let kept = backend.store.run_evidence("r3", T0).await.unwrap();
    assert_eq!(kept.len(), max);
    assert_eq!(kept[0]["id"], "n3");
    // Pruned with the runs' idle time.
    backend.store.runs_prune(T0 + 5).await.unwrap();
    assert_eq!(ids(backend.store.run_evidence("r1", 0).await.unwrap()), ["212"]);
}

fn tool_call(n: i64) -> RunToolCall {
    RunToolCall {
        tool: "look_up_order".to_owned(),
        args: json!({ "order": n }),
        status: if n % 2 == 0 { "ok" } else { "error" }.to_owned(),
        result: json!({ "n": n, "total": 12.5 }),
        at_unix_ms: T0 + n,
    }
}

async fn a_runs_tool_log_keeps_its_newest_calls_in_order(backend: Backend) {
    let replica = backend.another().await;
    let store = &*backend.store;
    assert!(store.run_tool_log("r1").await.unwrap().is_empty());
    let max = rein_store::runs::MAX_TOOL_LOG;
    for n in 0..max + 5 {
        let writer = if n % 2 == 0 { store } else { &*replica };
        writer.run_tool_log_add("r1", &tool_call(n)).await.unwrap();
    }
    store.run_tool_log_add("r2", &tool_call(7)).await.unwrap();
    let log = replica.run_tool_log("r1").await.unwrap();
    assert_eq!(log.len(), usize::try_from(max).unwrap(), "the newest are kept");
    assert_eq!(log, (5..max + 5).map(tool_call).collect::<Vec<_>>(), "oldest first, exactly");
    assert_eq!(store.run_tool_log("r2").await.unwrap(), vec![tool_call(7)]);
}

async fn run_note_overwrites_only_what_it_sets(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(store.run_get("r1").await.unwrap(), None);
    // A note on a run never counted makes its row.
    let first = RunNote {
        route: Some("support".to_owned()),
        message: Some("Where is order 44718?".to_owned()),
        draft: None,
        coverage: Some(json!({ "covered": 0.5, "missing": ["eta"] })),
    };
    store.run_note("r1", Some("conv-1"), &first, T0).await.unwrap();
    let info = store.run_get("r1").await.unwrap().unwrap();
    assert_eq!((info.run_id.as_str(), info.conversation_id.as_deref()), ("r1", Some("conv-1")));
    assert_eq!((info.model_calls, info.tool_calls), (0, 0));
    assert_eq!((info.first_unix_ms, info.touched_unix_ms), (T0, T0));
    assert_eq!(info.route.as_deref(), Some("support"));
    assert_eq!(info.message.as_deref(), Some("Where is order 44718?"));
    assert_eq!(info.draft, None);
    assert_eq!(info.coverage, Some(json!({ "covered": 0.5, "missing": ["eta"] })));

    // Counting keeps the notes; a later note overwrites only its Some fields and touches the run.
    count(store, "r1", RunEvent::ModelCall, T0 + 10).await;
    let draft = RunNote { draft: Some("It ships Monday.".to_owned()), ..RunNote::default() };
    store.run_note("r1", None, &draft, T0 + 20).await.unwrap();
    let info = store.run_get("r1").await.unwrap().unwrap();
    assert_eq!(info.model_calls, 1);
    assert_eq!((info.first_unix_ms, info.touched_unix_ms), (T0, T0 + 20));
    assert_eq!(info.conversation_id.as_deref(), Some("conv-1"));
    assert_eq!(info.route.as_deref(), Some("support"));
    assert_eq!(info.message.as_deref(), Some("Where is order 44718?"));
    assert_eq!(info.draft.as_deref(), Some("It ships Monday."));
    assert_eq!(info.coverage, Some(json!({ "covered": 0.5, "missing": ["eta"] })));
    let counted = count(store, "r1", RunEvent::ModelCall, T0 + 30).await;
    assert_eq!(counted.model_calls, 2);
    assert_eq!(
        store.run_get("r1").await.unwrap().unwrap().draft.as_deref(),
        Some("It ships Monday.")
    );

    // A stop is read back too.
    store.run_stop("r1", "stopped_deadline", T0 + 40).await.unwrap();
    let info = backend.another().await.run_get("r1").await.unwrap().unwrap();
    assert_eq!(info.stopped.as_deref(), Some("stopped_deadline"));
    assert_eq!(info.route.as_deref(), Some("support"));
}

async fn a_run_that_starts_afresh_forgets_its_notes_and_tool_log(backend: Backend) {
    let store = &*backend.store;
    count(store, "r1", RunEvent::ModelCall, T0).await;
    let note = RunNote {
        route: Some("support".to_owned()),
        message: Some("hi".to_owned()),
        draft: Some("hello".to_owned()),
        coverage: Some(json!([])),
    };
    store.run_note("r1", Some("conv-1"), &note, T0 + 1).await.unwrap();
    store.run_tool_log_add("r1", &tool_call(1)).await.unwrap();
    let later = T0 + 1 + IDLE;
    let fresh = count(store, "r1", RunEvent::ModelCall, later).await;
    assert_eq!((fresh.model_calls, fresh.first_unix_ms), (1, later));
    let info = store.run_get("r1").await.unwrap().unwrap();
    assert_eq!((info.route, info.message, info.draft, info.coverage), (None, None, None, None));
    assert!(store.run_tool_log("r1").await.unwrap().is_empty());
}

async fn runs_prune_forgets_the_tool_logs_of_forgotten_runs(backend: Backend) {
    let store = &*backend.store;
    count(store, "old", RunEvent::ModelCall, T0).await;
    store.run_tool_log_add("old", &tool_call(1)).await.unwrap();
    count(store, "new", RunEvent::ModelCall, T0 + 100).await;
    // An old call of a run still in use stays with its run.
    store.run_tool_log_add("new", &tool_call(2)).await.unwrap();
    // A log without a run's row goes once all its calls are past the time.
    store.run_tool_log_add("rowless", &tool_call(3)).await.unwrap();
    store.run_tool_log_add("rowless-recent", &tool_call(60)).await.unwrap();
    assert_eq!(store.runs_prune(T0 + 50).await.unwrap(), 1);
    assert!(store.run_tool_log("old").await.unwrap().is_empty());
    assert!(store.run_tool_log("rowless").await.unwrap().is_empty());
    assert_eq!(store.run_tool_log("new").await.unwrap(), vec![tool_call(2)]);
    assert_eq!(store.run_tool_log("rowless-recent").await.unwrap(), vec![tool_call(60)]);
    assert_eq!(store.run_get("old").await.unwrap(), None);
}

// ---- conversations ----

async fn spend_adds_up_per_conversation(backend: Backend) {
    let replica = backend.another().await;
    let store = &*backend.store;
    assert_eq!(store.spend_of("conv-1").await.unwrap(), 0);
    assert_eq!(store.spend_add("conv-1", 1_250, T0).await.unwrap(), 1_250);
    assert_eq!(replica.spend_add("conv-1", 300, T0 + 1).await.unwrap(), 1_550);
    assert_eq!(store.spend_add("conv-2", 7, T0 + 2).await.unwrap(), 7);
    assert_eq!(replica.spend_of("conv-1").await.unwrap(), 1_550);
    assert_eq!(store.spend_of("conv-2").await.unwrap(), 7);
    // Replicas adding at once lose nothing.
    let mut tasks = Vec::new();
    for index in 0..10 {
        let store = if index % 2 == 0 { Arc::clone(&backend.store) } else { Arc::clone(&replica) };
        tasks.push(tokio::spawn(async move { store.spend_add("conv-3", 100, T0).await.unwrap() }));
    }
    let mut totals = BTreeSet::new();
    for task in tasks {
        totals.insert(task.await.unwrap());
    }
    assert_eq!(totals, (1..=10).map(|n| n * 100).collect::<BTreeSet<i64>>());
    assert_eq!(store.spend_of("conv-3").await.unwrap(), 1_000);
}

async fn question_seen_counts_other_runs_only(backend: Backend) {
    let replica = backend.another().await;
    let store = &*backend.store;
    assert_eq!(store.question_seen("conv-1", "r1", "q-eta", T0).await.unwrap(), 0);
    assert_eq!(store.question_seen("conv-1", "r1", "q-eta", T0 + 1).await.unwrap(), 0, "same run");
    assert_eq!(replica.question_seen("conv-1", "r2", "q-eta", T0 + 2).await.unwrap(), 1);
    assert_eq!(store.question_seen("conv-1", "r2", "q-eta", T0 + 3).await.unwrap(), 1, "again");
    assert_eq!(store.question_seen("conv-1", "r3", "q-eta", T0 + 4).await.unwrap(), 2);
    assert_eq!(store.question_seen("conv-1", "r1", "q-eta", T0 + 5).await.unwrap(), 2);
    // Another question, or the same one in another conversation, counts on its own.
    assert_eq!(store.question_seen("conv-1", "r3", "q-refund", T0 + 6).await.unwrap(), 0);
    assert_eq!(store.question_seen("conv-2", "r9", "q-eta", T0 + 7).await.unwrap(), 0);
}

async fn conversations_prune_forgets_spend_and_questions(backend: Backend) {
    let store = &*backend.store;
    store.spend_add("old", 10, T0).await.unwrap();
    store.spend_add("new", 10, T0).await.unwrap();
    store.spend_add("new", 5, T0 + 100).await.unwrap();
    store.question_seen("old", "r1", "q", T0).await.unwrap();
    store.question_seen("new", "r1", "q", T0).await.unwrap();
    store.question_seen("new", "r1", "q", T0 + 100).await.unwrap();
    store.question_seen("new", "r2", "q", T0 + 10).await.unwrap();
    let kept = open(store, "old", "spend_limit", false, T0).await;
    assert_eq!(store.conversations_prune(T0 + 50).await.unwrap(), 3, "old spend, two questions");
    assert_eq!(store.spend_of("old").await.unwrap(), 0);
    assert_eq!(store.spend_of("new").await.unwrap(), 15, "touched since: kept whole");
    assert_eq!(store.question_seen("old", "r2", "q", T0 + 200).await.unwrap(), 0);
    assert_eq!(store.question_seen("new", "r3", "q", T0 + 200).await.unwrap(), 1, "r1 kept");
    assert_eq!(store.handoff_find("old").await.unwrap(), Some(kept), "hand-offs are kept");
}

// ---- hand-offs ----

fn new_handoff(conversation: &str, trigger: &str, canary: bool) -> NewHandoff {
    NewHandoff {
        conversation_id: conversation.to_owned(),
        run_id: Some(format!("run-of-{conversation}")),
        route: Some("support".to_owned()),
        trigger: trigger.to_owned(),
        stop_status: None,
        packet: json!({ "draft": "It ships Monday.", "score": 0.25, "tools": [] }),
        canary,
    }
}

async fn open(
    store: &dyn ToolStore,
    conversation: &str,
    trigger: &str,
    canary: bool,
    now: i64,
) -> Handoff {
    store.handoff_open(&new_handoff(conversation, trigger, canary), now).await.unwrap().0
}

async fn a_conversation_has_one_handoff(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(store.handoff_find("conv-1").await.unwrap(), None);
    let mut new = new_handoff("conv-1", "same_question_twice", false);
    new.stop_status = Some("stopped_repeated_call".to_owned());
    let (first, created) = store.handoff_open(&new, T0).await.unwrap();
    assert!(created);
    assert_eq!(first.conversation_id, "conv-1");
    assert_eq!(first.run_id.as_deref(), Some("run-of-conv-1"));
    assert_eq!(first.route.as_deref(), Some("support"));
    assert_eq!(first.trigger, "same_question_twice");
    assert_eq!(first.stop_status.as_deref(), Some("stopped_repeated_call"));
    assert_eq!(first.packet, new.packet);
    assert!(!first.canary);
    assert_eq!(first.delivery, HandoffDelivery::Pending);
    assert_eq!((first.ticket.clone(), first.delivery_detail.clone()), (None, None));
    assert_eq!((first.created_unix_ms, first.delivered_unix_ms), (T0, None));
    assert_eq!(
        (first.decision, first.decided_by.clone(), first.decided_unix_ms),
        (None, None, None)
    );

    let other = NewHandoff { trigger: "spend_limit".to_owned(), ..new.clone() };
    let (again, created) = store.handoff_open(&other, T0 + 5).await.unwrap();
    assert!(!created);
    assert_eq!(again, first, "the first stands, unchanged");
    assert_eq!(store.handoff_get(first.id).await.unwrap(), Some(first.clone()));
    assert_eq!(store.handoff_find("conv-1").await.unwrap(), Some(first.clone()));
    assert_eq!(store.handoff_get(first.id + 100).await.unwrap(), None);

    let (second, created) =
        store.handoff_open(&new_handoff("conv-2", "spend_limit", true), T0 + 6).await.unwrap();
    assert!(created && second.canary);
    assert_ne!(second.id, first.id);
    assert_eq!(store.handoff_list(&HandoffFilter::default(), 10).await.unwrap().len(), 2);
}

async fn concurrent_opens_of_one_conversation_make_one_handoff(backend: Backend) {
    let replica = backend.another().await;
    let mut tasks = Vec::new();
    for index in 0..8 {
        let store = if index % 2 == 0 { Arc::clone(&backend.store) } else { Arc::clone(&replica) };
        tasks.push(tokio::spawn(async move {
            let new = new_handoff("conv-1", &format!("trigger-{index}"), false);
            store.handoff_open(&new, T0 + index).await.unwrap()
        }));
    }
    let mut created = 0;
    let mut ids = BTreeSet::new();
    for task in tasks {
        let (handoff, made) = task.await.unwrap();
        created += i32::from(made);
        ids.insert(handoff.id);
    }
    assert_eq!(created, 1, "exactly one open creates it");
    assert_eq!(ids.len(), 1, "every open returns that one");
    assert_eq!(backend.store.handoff_list(&HandoffFilter::default(), 10).await.unwrap().len(), 1);
}

async fn handoff_delivery_records_where_the_ticket_is(backend: Backend) {
    let store = &*backend.store;
    let handoff = open(store, "conv-1", "low_coverage", false, T0).await;
    store
        .handoff_delivery(handoff.id, HandoffDelivery::Queued, None, Some("helpdesk: 503"), T0 + 1)
        .await
        .unwrap();
    let queued = store.handoff_get(handoff.id).await.unwrap().unwrap();
    assert_eq!(queued.delivery, HandoffDelivery::Queued);
    assert_eq!(queued.delivery_detail.as_deref(), Some("helpdesk: 503"));
    assert_eq!((queued.ticket, queued.delivered_unix_ms), (None, None));

    let ticket = json!({ "id": "T-4471", "url": "https://help.example/T-4471" });
    store
        .handoff_delivery(handoff.id, HandoffDelivery::Delivered, Some(&ticket), None, T0 + 2)
        .await
        .unwrap();
    let delivered = backend.another().await.handoff_get(handoff.id).await.unwrap().unwrap();
    assert_eq!(delivered.delivery, HandoffDelivery::Delivered);
    assert_eq!(delivered.ticket, Some(ticket));
    assert_eq!(delivered.delivery_detail, None);
    assert_eq!(delivered.delivered_unix_ms, Some(T0 + 2));
    assert_eq!(delivered.packet, handoff.packet, "the packet is untouched");

    // Failing later keeps when it was delivered; a missing hand-off is left alone.
    store
        .handoff_delivery(handoff.id, HandoffDelivery::Failed, None, Some("closed"), T0 + 3)
        .await
        .unwrap();
    let failed = store.handoff_get(handoff.id).await.unwrap().unwrap();
    assert_eq!(
        (failed.delivery, failed.delivered_unix_ms),
        (HandoffDelivery::Failed, Some(T0 + 2))
    );
    store.handoff_delivery(handoff.id + 9, HandoffDelivery::Failed, None, None, T0).await.unwrap();
}

async fn handoff_list_filters_and_shows_newest_first(backend: Backend) {
    let store = &*backend.store;
    let a = open(store, "conv-a", "low_coverage", false, T0).await;
    let b = open(store, "conv-b", "spend_limit", false, T0 + 1).await;
    let c = open(store, "conv-c", "low_coverage", true, T0 + 2).await;
    store.handoff_decide(a.id, ReviewDecision::Approved, "ana", None, "", T0 + 3).await.unwrap();
    let ids = |list: Vec<Handoff>| list.iter().map(|h| h.id).collect::<Vec<_>>();
    let all = HandoffFilter::default();
    assert_eq!(ids(store.handoff_list(&all, 10).await.unwrap()), vec![c.id, b.id, a.id]);
    assert_eq!(ids(store.handoff_list(&all, 2).await.unwrap()), vec![c.id, b.id]);
    assert!(store.handoff_list(&all, 0).await.unwrap().is_empty());
    let coverage = HandoffFilter { trigger: Some("low_coverage".to_owned()), decided: None };
    assert_eq!(ids(store.handoff_list(&coverage, 10).await.unwrap()), vec![c.id, a.id]);
    let undecided = HandoffFilter { trigger: None, decided: Some(false) };
    assert_eq!(ids(store.handoff_list(&undecided, 10).await.unwrap()), vec![c.id, b.id]);
    let decided = HandoffFilter { trigger: None, decided: Some(true) };
    assert_eq!(ids(store.handoff_list(&decided, 10).await.unwrap()), vec![a.id]);
    let both = HandoffFilter { trigger: Some("low_coverage".to_owned()), decided: Some(false) };
    assert_eq!(ids(store.handoff_list(&both, 10).await.unwrap()), vec![c.id]);
    let none = HandoffFilter { trigger: Some("nothing".to_owned()), decided: None };
    assert!(store.handoff_list(&none, 10).await.unwrap().is_empty());
}

async fn the_first_decision_on_a_handoff_is_the_one_that_stands(backend: Backend) {
    let store = &*backend.store;
    let handoff = open(store, "conv-1", "low_coverage", false, T0).await;
    let decided = store
        .handoff_decide(
            handoff.id,
            ReviewDecision::Edited,
            "ana",
            Some("It ships Tuesday."),
            "wrong day",
            T0 + 5,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decided.decision, Some(ReviewDecision::Edited));
    assert_eq!(decided.decided_by.as_deref(), Some("ana"));
    assert_eq!(decided.edited_draft.as_deref(), Some("It ships Tuesday."));
    assert_eq!(decided.note.as_deref(), Some("wrong day"));
    assert_eq!(decided.decided_unix_ms, Some(T0 + 5));
    assert_eq!(decided.packet, handoff.packet);
    let again =
        store.handoff_decide(handoff.id, ReviewDecision::Approved, "bo", None, "", T0 + 6).await;
    assert_eq!(again.unwrap(), None, "already decided");
    assert_eq!(store.handoff_get(handoff.id).await.unwrap(), Some(decided));
    let missing =
        store.handoff_decide(handoff.id + 9, ReviewDecision::Rejected, "bo", None, "", T0).await;
    assert_eq!(missing.unwrap(), None);
}

async fn concurrent_decisions_on_one_handoff_make_exactly_one(backend: Backend) {
    let replica = backend.another().await;
    let handoff = open(&*backend.store, "conv-1", "low_coverage", false, T0).await;
    let mut tasks = Vec::new();
    for index in 0..8 {
        let store = if index % 2 == 0 { Arc::clone(&backend.store) } else { Arc::clone(&replica) };
        tasks.push(tokio::spawn(async move {
            let by = format!("person-{index}");
            store.handoff_decide(handoff.id, ReviewDecision::Approved, &by, None, "", T0 + 1).await
        }));
    }
    let mut decisions = Vec::new();
    for task in tasks {
        decisions.extend(task.await.unwrap().unwrap());
    }
    assert_eq!(decisions.len(), 1, "exactly one decision takes effect: {decisions:?}");
    let stored = backend.store.handoff_get(handoff.id).await.unwrap().unwrap();
    assert_eq!(stored.decided_by, decisions[0].decided_by);
}

async fn review_stats_count_canaries_apart(backend: Backend) {
    let store = &*backend.store;
    // Before the window: not counted.
    let old = open(store, "conv-old", "low_coverage", false, T0 - 1).await;
    store.handoff_decide(old.id, ReviewDecision::Rejected, "ana", None, "", T0).await.unwrap();
    let mut real = Vec::new();
    for n in 0..4 {
        real.push(open(store, &format!("conv-{n}"), "low_coverage", false, T0 + n).await);
    }
    let canary_a = open(store, "canary-a", "low_coverage", true, T0 + 10).await;
    let canary_b = open(store, "canary-b", "low_coverage", true, T0 + 11).await;
    let other = open(store, "conv-9", "budget", false, T0 + 12).await;
    let decide = |id: i64, decision: ReviewDecision| async move {
        let draft = (decision == ReviewDecision::Edited).then_some("better");
        store.handoff_decide(id, decision, "ana", draft, "", T0 + 20).await.unwrap().unwrap()
    };
    decide(real[0].id, ReviewDecision::Approved).await;
    decide(real[1].id, ReviewDecision::Edited).await;
    decide(real[2].id, ReviewDecision::Rejected).await;
    decide(canary_a.id, ReviewDecision::Rejected).await;
    decide(canary_b.id, ReviewDecision::Approved).await;
    decide(other.id, ReviewDecision::Approved).await;
    let stats = backend.another().await.handoff_review_stats(T0).await.unwrap();
    assert_eq!(
        stats,
        vec![
            ReviewStats {
                trigger: "budget".to_owned(),
                handoffs: 1,
                decided: 1,
                changed: 0,
                canaries: 0,
                canaries_decided: 0,
                canaries_caught: 0,
            },
            ReviewStats {
                trigger: "low_coverage".to_owned(),
                handoffs: 4,
                decided: 3,
                changed: 2,
                canaries: 2,
                canaries_decided: 2,
                canaries_caught: 1,
            },
        ]
    );
    assert!(store.handoff_review_stats(T0 + 100).await.unwrap().is_empty());
}

// ---- recorded calls and traces ----

fn recorded(n: i64, route: &str, outcome: rein_core::Outcome, attempts: u32) -> RecordedCall {
    use std::collections::BTreeMap;
    let record = rein_core::sli::CallRecord {
        route: route.to_owned(),
        tier: Some("primary".to_owned()),
        labels: BTreeMap::from([("question_type".to_owned(), "delivery".to_owned())]),
        outcome,
        failover: false,
        attempts,
        repaired: false,
        elapsed_ms: 100 + n as u64,
        first_token_ms: None,
        deadline_ms: 20_000,
        escalation: None,
        covered: None,
        quality: None,
        quality_probability: None,
    };
    let trace = rein_core::trace::Trace {
        trace_id: format!("{n:032x}"),
        request_id: format!("req_{n}"),
        target: route.to_owned(),
        operation: "chat".to_owned(),
        started_unix_ms: (T0 + n) as u64,
        outcome: outcome.as_str().to_owned(),
        spans: vec![],
    };
    RecordedCall {
        at_unix_ms: T0 + n,
        request_id: format!("req_{n}"),
        trace_id: format!("{n:032x}"),
        notable: RecordedCall::is_notable(&record),
        record,
        trace: Some(trace),
        eval: false,
    }
}

/// Batches of every size around the SQLite store's chunking (32 rows a statement, the rest in
/// halving statements): each call is written once, in order, with its own values and trace.
async fn a_large_batch_of_calls_is_recorded_whole_and_in_order(backend: Backend) {
    use rein_core::Outcome;
    let store = &*backend.store;
    let mut written = Vec::new();
    let mut n = 0;
    for size in [1, 31, 32, 33, 70, 100] {
        let batch: Vec<RecordedCall> = (0..size)
            .map(|_| {
                n += 1;
                let outcome = if n % 3 == 0 { Outcome::Fallback } else { Outcome::Answered };
                let mut call = recorded(n, "support", outcome, (n % 4) as u32 + 1);
                if n % 5 != 0 {
                    call.trace = None;
                }
                call
            })
            .collect();
        store.calls_record(batch.clone(), vec![]).await.unwrap();
        written.extend(batch);
    }
    let read = store.calls_since(T0, None, 1_000).await.unwrap();
    let expected: Vec<_> =
        written.iter().map(|call| (call.at_unix_ms, call.record.clone())).collect();
    assert_eq!(read.len(), 267);
    assert_eq!(read, expected, "every call once, oldest first, each with its own record");
    for call in &written {
        let found = store.trace_get(&call.request_id).await.unwrap();
        assert_eq!(
            found,
            call.trace.clone().into_iter().collect::<Vec<_>>(),
            "{}",
            call.request_id
        );
    }
}

async fn recorded_calls_come_back_by_window_and_route(backend: Backend) {
    use rein_core::Outcome;
    let store = &*backend.store;
    store.calls_record(vec![], vec![]).await.unwrap();
    let calls = vec![
        recorded(1, "support", Outcome::Answered, 1),
        recorded(2, "support", Outcome::Fallback, 3),
        recorded(3, "billing", Outcome::Answered, 1),
    ];
    store.calls_record(calls.clone(), vec![]).await.unwrap();
    let all = store.calls_since(T0, None, 100).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[1], (T0 + 2, calls[1].record.clone()), "records round-trip, oldest first");
    let support = store.calls_since(T0 + 2, Some("support"), 100).await.unwrap();
    assert_eq!(support, vec![(T0 + 2, calls[1].record.clone())]);
    assert_eq!(store.calls_since(T0, None, 2).await.unwrap().len(), 2, "the limit holds");

    let trace = store.trace_get(&calls[1].trace_id).await.unwrap();
    assert_eq!(trace, vec![calls[1].trace.clone().unwrap()]);
    assert_eq!(store.trace_get("req_2").await.unwrap(), trace, "found by request id too");
    assert!(store.trace_get("nope").await.unwrap().is_empty());

    let listed = store.traces_list(&TraceFilter::default(), 10).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|t| t.request_id.as_str()).collect();
    assert_eq!(ids, ["req_3", "req_2", "req_1"], "newest first");
    assert_eq!(
        (listed[1].outcome.as_str(), listed[1].attempts, listed[1].notable),
        ("fallback", 3, true)
    );
    let notable = TraceFilter { notable: true, ..TraceFilter::default() };
    let listed = store.traces_list(&notable, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    let billing = TraceFilter { route: Some("billing".to_owned()), ..TraceFilter::default() };
    assert_eq!(store.traces_list(&billing, 10).await.unwrap()[0].request_id, "req_3");

    // A tool call's trace is kept beside them, and is never an SLI record.
    let mut tool_trace = calls[0].trace.clone().unwrap();
    tool_trace.trace_id = format!("{:032x}", 77);
    tool_trace.request_id = "req_tool".to_owned();
    tool_trace.operation = "execute_tool".to_owned();
    let tool = RecordedTool {
        at_unix_ms: T0 + 4,
        request_id: "req_tool".to_owned(),
        trace_id: tool_trace.trace_id.clone(),
        tool: "lookup_order".to_owned(),
        status: "ok".to_owned(),
        rung: Some("cache".to_owned()),
        rungs: 2,
        elapsed_ms: 12,
        notable: true,
        trace: Some(tool_trace.clone()),
    };
    store.calls_record(vec![], vec![tool.clone()]).await.unwrap();
    assert_eq!(store.calls_since(T0, None, 100).await.unwrap().len(), 3, "SLIs read model calls");
    let listed = store.traces_list(&TraceFilter::default(), 10).await.unwrap();
    assert_eq!(
        (listed[0].kind.as_str(), listed[0].route.as_str(), listed[0].tier.as_deref()),
        ("tool", "lookup_order", Some("cache"))
    );
    assert_eq!((listed[0].attempts, listed[0].elapsed_ms), (2, 12));
    assert_eq!(listed[1].kind, "model");
    assert_eq!(store.trace_get("req_tool").await.unwrap(), vec![tool_trace]);
}

async fn the_trace_store_keeps_the_newest_and_every_notable_trace(backend: Backend) {
    use rein_core::Outcome;
    let store = &*backend.store;
    // 1: notable, 2..=5 ordinary, 6: notable.
    let mut calls = vec![recorded(1, "support", Outcome::Degraded, 2)];
    calls.extend((2..=5).map(|n| recorded(n, "support", Outcome::Answered, 1)));
    calls.push(recorded(6, "support", Outcome::Fallback, 2));
    store.calls_record(calls.clone(), vec![]).await.unwrap();

    let keep_two =
        CallsRetention { records_before_unix_ms: T0, traces_before_unix_ms: T0, keep_last: 2 };
    let pruned = store.calls_prune(&keep_two).await.unwrap();
    assert_eq!(pruned, CallsPruned { records: 0, traces: 3 });
    let kept: Vec<String> = store
        .traces_list(&TraceFilter::default(), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.request_id)
        .collect();
    assert_eq!(kept, ["req_6", "req_5", "req_1"], "the newest two and every notable one");
    assert_eq!(store.calls_since(T0, None, 100).await.unwrap().len(), 6, "records stay");

    // Past the trace window even notable traces go; past the record window, records too.
    let later = CallsRetention {
        records_before_unix_ms: T0 + 3,
        traces_before_unix_ms: T0 + 6,
        keep_last: 100,
    };
    let pruned = store.calls_prune(&later).await.unwrap();
    assert_eq!(pruned.records, 2);
    let kept = store.traces_list(&TraceFilter::default(), 10).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].request_id, "req_6");
    assert_eq!(store.calls_since(T0, None, 100).await.unwrap().len(), 4);
}

fn verdict(n: i64, route: &str, pass: bool, probability: f64) -> Verdict {
    Verdict {
        request_id: format!("req_{n}"),
        trace_id: format!("{n:032x}"),
        at_unix_ms: T0 + n,
        judged_unix_ms: T0 + n + 500,
        route: route.to_owned(),
        tier: Some("primary".to_owned()),
        model: Some("gpt-x".to_owned()),
        labels: std::collections::BTreeMap::from([("topic".to_owned(), "cutoff".to_owned())]),
        pass,
        score: if pass { 1.0 } else { 0.0 },
        probability,
        base: probability < 1.0,
        rubric: "cites it".to_owned(),
        judge_model: Some("judge-1".to_owned()),
        reply: if pass { "PASS" } else { "FAIL: wrong cutoff" }.to_owned(),
        question: Some("Can I change my order?".to_owned()),
        answer: Some("Any time.".to_owned()),
        evidence: vec![("140".to_owned(), "Changes close 48 hours before.".to_owned())],
    }
}

async fn verdicts_join_their_calls_records_once_each_and_go_with_them(backend: Backend) {
    use rein_core::Outcome;
    let store = &*backend.store;
    let calls = vec![
        recorded(1, "support", Outcome::Answered, 1),
        recorded(2, "support", Outcome::Answered, 1),
        recorded(3, "billing", Outcome::Answered, 1),
    ];
    store.calls_record(calls.clone(), vec![]).await.unwrap();
    // The verdict may land before or after its call's record: the join is made on reading.
    assert!(store.verdict_record(&verdict(1, "support", true, 0.05)).await.unwrap());
    assert!(store.verdict_record(&verdict(2, "support", false, 1.0)).await.unwrap());
    assert!(
        !store.verdict_record(&verdict(2, "support", true, 1.0)).await.unwrap(),
        "one verdict per call: the first stays"
    );
    let read = store.calls_since(T0, None, 100).await.unwrap();
    assert_eq!(read.len(), 3, "a verdict never duplicates its call's record");
    assert_eq!((read[0].1.quality, read[0].1.quality_probability), (Some(1.0), Some(0.05)));
    assert_eq!((read[1].1.quality, read[1].1.quality_probability), (Some(0.0), Some(1.0)));
    assert_eq!((read[2].1.quality, read[2].1.quality_probability), (None, None));

    let all = store.verdicts_list(&VerdictFilter::default(), 10).await.unwrap();
    assert_eq!(all, vec![verdict(2, "support", false, 1.0), verdict(1, "support", true, 0.05)]);
    let failed = VerdictFilter { failed: true, ..VerdictFilter::default() };
    assert_eq!(store.verdicts_list(&failed, 10).await.unwrap().len(), 1);
    let later =
        VerdictFilter { since_unix_ms: T0 + 2, route: Some("support".into()), failed: false };
    assert_eq!(store.verdicts_list(&later, 10).await.unwrap().len(), 1);
    let other = VerdictFilter { route: Some("billing".into()), ..VerdictFilter::default() };
    assert!(store.verdicts_list(&other, 10).await.unwrap().is_empty());
    assert_eq!(store.verdicts_list(&VerdictFilter::default(), 1).await.unwrap().len(), 1);

    // A verdict goes with its call's record.
    let retention = CallsRetention {
        records_before_unix_ms: T0 + 2,
        traces_before_unix_ms: T0,
        keep_last: 100,
    };
    store.calls_prune(&retention).await.unwrap();
    let left = store.verdicts_list(&VerdictFilter::default(), 10).await.unwrap();
    assert_eq!(left, vec![verdict(2, "support", false, 1.0)]);
}

/// A model call of run `run` (conversation `conv-1`) at `at`, with `limits` and the note of
/// its route and `message`.
async fn model_call(
    store: &dyn ToolStore,
    run: &str,
    limits: rein_core::run::RunLimits,
    message: &str,
    at: i64,
) -> ModelCallStep {
    let note = RunNote {
        route: Some("support".to_owned()),
        message: Some(message.to_owned()),
        ..RunNote::default()
    };
    let call = ModelCall {
        run_id: run,
        conversation_id: Some("conv-1"),
        limits,
        spender: "conv-1",
        note: &note,
        now_unix_ms: at,
        idle_ms: IDLE,
    };
    store.run_model_call(&call).await.unwrap()
}

fn at_most(model_calls: u32) -> rein_core::run::RunLimits {
    rein_core::run::RunLimits { max_model_calls: model_calls, ..Default::default() }
}

async fn a_model_call_is_counted_judged_and_noted_in_one_step(backend: Backend) {
    let store = &*backend.store;
    // The run's evidence within its idle time comes back with the step, oldest first.
    store.run_evidence_add("r1", &[json!({ "id": "old" })], T0 - IDLE - 1).await.unwrap();
    store
        .run_evidence_add("r1", &[json!({ "id": "140" }), json!({ "id": "118" })], T0)
        .await
        .unwrap();
    store.run_evidence_add("r2", &[json!({ "id": "212" })], T0).await.unwrap();
    let first = model_call(store, "r1", at_most(2), "Where is order 44718?", T0 + 1).await;
    assert_eq!(first.evidence, vec![json!({ "id": "140" }), json!({ "id": "118" })]);
    assert_eq!(first.stopped, None);
    let info = store.run_get("r1").await.unwrap().unwrap();
    assert_eq!((info.model_calls, info.conversation_id.as_deref()), (1, Some("conv-1")));
    assert_eq!(info.route.as_deref(), Some("support"));
    assert_eq!(info.message.as_deref(), Some("Where is order 44718?"));

    // The second call goes and overwrites the message; the third passes the limit and stops
    // the run now, without noting its message; the fourth finds the run stopped.
    let second = model_call(store, "r1", at_most(2), "And order 44781?", T0 + 2).await;
    assert_eq!(second.stopped, None);
    let third = model_call(store, "r1", at_most(2), "Hello?", T0 + 3).await;
    assert_eq!(third.stopped, Some(("stopped_max_model_calls".to_owned(), true)));
    let fourth = model_call(store, "r1", at_most(8), "Anyone?", T0 + 4).await;
    assert_eq!(fourth.stopped, Some(("stopped_max_model_calls".to_owned(), false)));
    let info = backend.another().await.run_get("r1").await.unwrap().unwrap();
    assert_eq!(info.model_calls, 4, "a stopped run's calls are still counted");
    assert_eq!(info.stopped.as_deref(), Some("stopped_max_model_calls"));
    assert_eq!(info.message.as_deref(), Some("And order 44781?"), "a stopped call notes nothing");
    assert_eq!(info.touched_unix_ms, T0 + 4);

    // Idle for its idle time, the run starts afresh: counts, stop and notes forgotten.
    let later = T0 + 4 + IDLE;
    let fresh = model_call(store, "r1", at_most(2), "New question", later).await;
    assert_eq!(fresh.stopped, None);
    assert!(fresh.evidence.is_empty(), "evidence older than the idle time is not read");
    let info = store.run_get("r1").await.unwrap().unwrap();
    assert_eq!((info.model_calls, info.first_unix_ms, info.stopped), (1, later, None));
    assert_eq!(info.message.as_deref(), Some("New question"));
}

async fn a_model_call_is_stopped_by_its_conversations_spend_and_by_an_earlier_stop(
    backend: Backend,
) {
    let store = &*backend.store;
    let capped =
        rein_core::run::RunLimits { max_spend_micro_usd: Some(1_000), ..Default::default() };
    store.spend_add("conv-1", 999, T0).await.unwrap();
    assert_eq!(model_call(store, "r1", capped, "Q", T0 + 1).await.stopped, None);
    store.spend_add("conv-1", 1, T0 + 2).await.unwrap();
    let stopped = model_call(store, "r1", capped, "Q", T0 + 3).await;
    assert_eq!(stopped.stopped, Some(("stopped_spend".to_owned(), true)));
    // Without a cap, the spend is not a limit.
    assert_eq!(model_call(store, "r2", at_most(8), "Q", T0 + 4).await.stopped, None);

    // A stop made by a tool call stands for the model calls after it.
    model_call(store, "r3", at_most(8), "Q", T0).await;
    store.run_stop("r3", "stopped_repeated_call", T0 + 1).await.unwrap();
    let after = model_call(store, "r3", at_most(8), "Q", T0 + 2).await;
    assert_eq!(after.stopped, Some(("stopped_repeated_call".to_owned(), false)));
    // And the deadline counts from the run's first call.
    let deadline = rein_core::run::RunLimits {
        deadline: std::time::Duration::from_millis(100),
        ..Default::default()
    };
    model_call(store, "r4", deadline, "Q", T0).await;
    assert_eq!(model_call(store, "r4", deadline, "Q", T0 + 99).await.stopped, None);
    let late = model_call(store, "r4", deadline, "Q", T0 + 100).await;
    assert_eq!(late.stopped, Some(("stopped_deadline".to_owned(), true)));
}

async fn two_replicas_share_a_runs_last_model_call(backend: Backend) {
    // Ten calls at once through two replicas, three allowed: exactly three go, exactly one
    // stops the run, and every call is counted.
    let replica = backend.another().await;
    let mut tasks = Vec::new();
    for index in 0..10 {
        let store = if index % 2 == 0 { Arc::clone(&backend.store) } else { Arc::clone(&replica) };
        tasks.push(tokio::spawn(async move {
            model_call(&*store, "r1", at_most(3), "Q", T0 + index).await.stopped
        }));
    }
    let (mut went, mut stopped_now) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            None => went += 1,
            Some((_, true)) => stopped_now += 1,
            Some((_, false)) => {}
        }
    }
    assert_eq!((went, stopped_now), (3, 1));
    assert_eq!(backend.store.run_get("r1").await.unwrap().unwrap().model_calls, 10);
}

async fn an_answered_model_call_adds_its_cost_and_notes_its_draft_at_once(backend: Backend) {
    let store = &*backend.store;
    let done = |micro_usd, draft| ModelCallDone {
        run_id: "r1",
        conversation_id: Some("conv-1"),
        spender: "conv-1",
        micro_usd,
        draft,
        now_unix_ms: T0 + 10,
    };
    model_call(store, "r1", at_most(8), "Where is order 44718?", T0).await;
    store.run_model_call_done(&done(Some(1_250), Some("It ships Monday."))).await.unwrap();
    assert_eq!(store.spend_of("conv-1").await.unwrap(), 1_250);
    let info = store.run_get("r1").await.unwrap().unwrap();
    assert_eq!(info.draft.as_deref(), Some("It ships Monday."));
    assert_eq!(info.message.as_deref(), Some("Where is order 44718?"), "the rest is kept");
    assert_eq!((info.model_calls, info.touched_unix_ms), (1, T0 + 10));

    // A cost without a draft keeps the draft; a draft without a cost adds nothing.
    store.run_model_call_done(&done(Some(50), None)).await.unwrap();
    store.run_model_call_done(&done(None, Some("Monday, by noon."))).await.unwrap();
    // Another connection (another replica) sees it once committed: on SQLite, where it was
    // queued, once the store has settled.
    store.settle().await.unwrap();
    assert_eq!(backend.another().await.spend_of("conv-1").await.unwrap(), 1_300);
    let info = store.run_get("r1").await.unwrap().unwrap();
    assert_eq!(info.draft.as_deref(), Some("Monday, by noon."));
    // A draft for a run whose row has gone (pruned while its call was out) writes it afresh.
    let pruned = ModelCallDone { run_id: "r7", ..done(None, Some("Back soon.")) };
    store.run_model_call_done(&pruned).await.unwrap();
    store.settle().await.unwrap();
    let info = store.run_get("r7").await.unwrap().unwrap();
    assert_eq!((info.draft.as_deref(), info.model_calls), (Some("Back soon."), 0));
    assert_eq!(info.conversation_id.as_deref(), Some("conv-1"));

    // Nothing to add or note writes nothing: a run never seen gets no row.
    let nothing = ModelCallDone { run_id: "r9", ..done(None, None) };
    store.run_model_call_done(&nothing).await.unwrap();
    assert_eq!(store.run_get("r9").await.unwrap(), None);
    // A run without a conversation spends on its own account.
    let alone =
        ModelCallDone { run_id: "r8", conversation_id: None, spender: "r8", ..done(Some(7), None) };
    store.run_model_call_done(&alone).await.unwrap();
    assert_eq!(store.spend_of("r8").await.unwrap(), 7);
}
