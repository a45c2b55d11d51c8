//! Durable state behind tool calls, as one trait with two backends: SQLite (the embedded default,
//! one gateway) and Postgres (several gateway replicas sharing one queue). It holds idempotency
//! records (Stripe semantics: a key remembers its arguments and its result), the write outbox
//! (claimed under a lease, so a crashed worker's item is picked up again), the read cache behind
//! `cache` rungs, and gate holds waiting for a person's approval; and what rein keeps of agent
//! runs ([`crate::runs`]), of conversations (their spend, their questions) and of the
//! conversations handed off to a person ([`crate::handoffs`]).
//!
//! Every state change that must be atomic with another (enqueue + the key's stored result,
//! approve + enqueue, complete + the key's final result) is one transaction in the backend.
//!
//! A lease (a key's or an outbox item's) is live while `now < lease_until`; at `lease_until` it
//! has expired.
//!
//! What the backends share lives in two submodules: `rows` reads their rows into the structs
//! here, `rules` holds the state rules (leases, the key lifecycle, outbox moves, hold
//! decisions) that both apply.

pub(crate) mod rows;
pub(crate) mod rules;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use rein_core::sli::CallRecord;
use rein_core::trace::Trace;
use rein_core::{KillFlip, RouteToFlip};

use crate::StoreError;
use crate::calls::{
    CallsPruned, CallsRetention, RecordedCall, RecordedTool, TraceFilter, TraceSummary, Verdict,
    VerdictFilter,
};
use crate::handoffs::{
    Handoff, HandoffDelivery, HandoffFilter, NewHandoff, ReviewDecision, ReviewStats,
};
use crate::runs::{
    ModelCall, ModelCallDone, ModelCallStep, RunCounts, RunEvent, RunInfo, RunNote, RunToolCall,
};

// Kept at this path for callers that open a store through the trait's module; the function lives
// in `crate::open`, which knows both backends.
pub use crate::open::open_tool_store;

/// Where a key's record stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    /// A request is handling this key now (under a lease).
    InFlight,
    /// The write sits in the outbox; the stored result is the `queued` envelope.
    Queued,
    /// The write waits for approval; the stored result is the `pending_approval` envelope.
    Held,
    /// Finished; the stored result is final.
    Done,
}

impl KeyState {
    /// The name stored in the backends' `state` columns (the serde name).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "in_flight",
            Self::Queued => "queued",
            Self::Held => "held",
            Self::Done => "done",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        [Self::InFlight, Self::Queued, Self::Held, Self::Done]
            .into_iter()
            .find(|state| state.as_str() == name)
    }
}

/// What [`ToolStore::key_begin`] found for a key.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyBegin {
    /// No record: one was created `InFlight`, leased to the caller until `now + lease`.
    Fresh,
    /// A record was `InFlight` under a lease that had expired (its holder crashed or gave up):
    /// the caller now holds it. The earlier attempt's outcome is unknown, so the caller must send
    /// again with the same key, never a new one.
    TakenOver,
    /// Another request holds the key under a live lease (Stripe: 409), until the given time:
    /// by then it has finished or its lease can be taken over.
    InFlight { lease_until_unix_ms: i64 },
    /// The key has a stored result for the same tool and arguments: return it, run nothing.
    Stored { state: KeyState, result: Value },
    /// The key was used with a different tool or different arguments (Stripe: 422).
    Mismatch { tool: String },
}

/// Where an outbox item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxState {
    /// Waiting to be sent (or being sent under a lease).
    Pending,
    /// An earlier send's outcome is unknown and the tool has no duplicate guard a machine can
    /// run (`idempotency = "none"`): held for a person, never claimed, until an operator marks
    /// it executed, releases it for replay or drops it. Stored as a pending row with its
    /// `review` flag set, so the states' column needs no rebuild.
    Review,
    /// Sent and acknowledged by the primary.
    Done,
    /// The primary refused it for good (a 4xx that retrying cannot fix); kept for an operator.
    Failed,
    /// Dropped by an operator; never sent again.
    Dropped,
}

impl OutboxState {
    /// The name stored in the backends' `state` columns (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Review => "review",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Dropped => "dropped",
        }
    }

    /// The state column's value for this state (a review item is a pending row).
    pub(crate) fn column(self) -> &'static str {
        match self {
            Self::Review => Self::Pending.as_str(),
            other => other.as_str(),
        }
    }

    /// The state of a row from its state column and its `review` flag.
    pub(crate) fn from_row(name: &str, review: bool) -> Option<Self> {
        let state = [Self::Pending, Self::Done, Self::Failed, Self::Dropped]
            .into_iter()
            .find(|state| state.as_str() == name)?;
        Some(if state == Self::Pending && review { Self::Review } else { state })
    }
}

/// One queued write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxItem {
    pub id: i64,
    pub idempotency_key: String,
    pub tool: String,
    pub args: Value,
    pub state: OutboxState,
    /// Send attempts so far (a claim counts as one).
    pub attempts: i64,
    pub last_error: Option<String>,
    pub created_unix_ms: i64,
    pub next_attempt_unix_ms: i64,
    pub lease_owner: Option<String>,
    pub lease_until_unix_ms: Option<i64>,
    pub finished_unix_ms: Option<i64>,
    /// The primary's result once done.
    pub result: Option<Value>,
    /// The conversation the write was made in, for a tool's lookup (`{conversation_id}`).
    pub conversation_id: Option<String>,
    /// An earlier send may have executed: the next one must pass the tool's duplicate guard
    /// (the backend honours the key, a lookup finds nothing, or a person released it).
    pub outcome_unknown: bool,
}

/// A write to put in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct NewOutboxItem {
    pub idempotency_key: String,
    pub tool: String,
    pub args: Value,
    pub conversation_id: Option<String>,
    /// A send before the enqueue may have executed (see [`OutboxItem::outcome_unknown`]).
    pub outcome_unknown: bool,
    /// Enqueue in [`OutboxState::Review`]: held for a person, never claimed.
    pub review: bool,
}

impl NewOutboxItem {
    /// A write nothing has been sent for yet that could have executed.
    pub fn new(key: &str, tool: &str, args: &Value) -> Self {
        Self {
            idempotency_key: key.to_owned(),
            tool: tool.to_owned(),
            args: args.clone(),
            conversation_id: None,
            outcome_unknown: false,
            review: false,
        }
    }
}

/// Queue depth and the age of its oldest pending item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OutboxStats {
    /// Pending items (review items aside).
    pub pending: i64,
    pub failed: i64,
    /// Items held for a person's review.
    pub review: i64,
    pub oldest_pending_created_unix_ms: Option<i64>,
}

/// Where a gate hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldState {
    Pending,
    Approved,
    Rejected,
}

impl HoldState {
    /// The name stored in the backends' `state` columns (the serde name).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        [Self::Pending, Self::Approved, Self::Rejected]
            .into_iter()
            .find(|state| state.as_str() == name)
    }
}

/// A write held by a gate until a person decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    pub id: i64,
    pub idempotency_key: String,
    pub tool: String,
    pub args: Value,
    /// Which gate rule held it, in words.
    pub reason: String,
    pub conversation_id: Option<String>,
    pub state: HoldState,
    pub created_unix_ms: i64,
    pub decided_by: Option<String>,
    pub decision_note: Option<String>,
    pub decided_unix_ms: Option<i64>,
    /// The outbox item an approval created.
    pub outbox_id: Option<i64>,
}

/// A hold to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewHold {
    pub idempotency_key: String,
    pub tool: String,
    pub args: Value,
    pub reason: String,
    pub conversation_id: Option<String>,
}

/// A person's decision on a hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Approve: the held write is enqueued in the outbox (in the same transaction) to be sent
    /// once with its original key; the key's stored result becomes `queued_result`.
    Approve { queued_result: Value },
    /// Reject: nothing is sent; the key's stored result becomes `rejected_result` (final).
    Reject { rejected_result: Value },
}

/// What [`ToolStore::prune`] deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Pruned {
    pub keys: u64,
    pub outbox: u64,
    pub holds: u64,
    pub cache: u64,
}

/// A cached read result and when it was captured.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedResult {
    pub result: Value,
    pub captured_unix_ms: i64,
}

/// The durable state of tool calls. All times are unix milliseconds passed in by the caller, so
/// tests decide the clock. Implementations: [`crate::SqliteToolStore`] and
/// [`crate::PostgresToolStore`].
#[async_trait]
pub trait ToolStore: Send + Sync + std::fmt::Debug {
    // ---- idempotency keys ----

    /// Look up `key`; create it `InFlight` (leased until `now + lease_ms`) when absent or when an
    /// `InFlight` lease has expired. `args_hash` is a digest of the canonical arguments. The tool
    /// and arguments are compared first: a key recorded for another call is `Mismatch` whatever
    /// its state.
    async fn key_begin(
        &self,
        key: &str,
        tool: &str,
        args_hash: &str,
        now_unix_ms: i64,
        lease_ms: i64,
    ) -> Result<KeyBegin, StoreError>;

    /// Store the key's final result (state `Done`). A key without a record is left alone.
    async fn key_finish(
        &self,
        key: &str,
        result: &Value,
        now_unix_ms: i64,
    ) -> Result<(), StoreError>;

    /// Forget an `InFlight` key whose request sent nothing that could have executed (busy,
    /// refused before sending), so a retry with the same key starts fresh. A key in any other
    /// state is left alone.
    async fn key_abandon(&self, key: &str) -> Result<(), StoreError>;

    /// The newest key starting with `prefix` recorded for `tool` with these arguments since
    /// `since_unix_ms`, in any state: how a caller's re-issue of a call (its stream broke, it
    /// sent the call again without a key) finds the first call's key. `prefix` is rein's own
    /// (letters, digits and `-`), so it needs no escaping in a pattern.
    async fn key_recent(
        &self,
        tool: &str,
        args_hash: &str,
        prefix: &str,
        since_unix_ms: i64,
    ) -> Result<Option<String>, StoreError>;

    // ---- outbox ----

    /// In one transaction: add a pending item (due now; in review when `item.review`) and set
    /// the key's record to `Queued` with `queued_result`. If the key already has an item, return
    /// that item instead (and change nothing). The key's record is the one `key_begin` made;
    /// without one, only the item is written.
    async fn outbox_enqueue(
        &self,
        item: &NewOutboxItem,
        queued_result: &Value,
        now_unix_ms: i64,
    ) -> Result<OutboxItem, StoreError>;

    /// Claim up to `limit` pending items that are due (`next_attempt <= now`) and not under a
    /// live lease, oldest first (never one in review): lease each to `owner` until
    /// `now + lease_ms` and count an attempt. An item whose earlier lease was never released (its
    /// worker died mid-send) comes back with `outcome_unknown` set. Postgres uses
    /// `FOR UPDATE SKIP LOCKED`, so replicas never claim the same item under live leases.
    async fn outbox_claim(
        &self,
        owner: &str,
        now_unix_ms: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, StoreError>;

    /// In one transaction: mark a pending (or review) item `Done` with the primary's `result`
    /// and store that result as the key's final result. Returns false if the item was no longer
    /// pending.
    ///
    /// The lease owner is not checked (as in `outbox_retry_later` and `outbox_fail`): a worker
    /// whose lease expired may still report, and the item's state decides who was first.
    async fn outbox_complete(
        &self,
        id: i64,
        result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError>;

    /// A send failed transiently: release the lease, record `error`, and make the item due again
    /// at `next_attempt_unix_ms`; `outcome_unknown` (the send may have executed) is kept once
    /// set. Returns false if the item was no longer pending.
    async fn outbox_retry_later(
        &self,
        id: i64,
        error: &str,
        next_attempt_unix_ms: i64,
        outcome_unknown: bool,
    ) -> Result<bool, StoreError>;

    /// A send's outcome is unknown and the tool has no machine duplicate guard: move a pending
    /// item to review (lease released, `error` recorded, `outcome_unknown` set); the key's
    /// stored result becomes `review_result`. Returns false if the item was no longer pending.
    async fn outbox_review(
        &self,
        id: i64,
        error: &str,
        review_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError>;

    /// The primary refused the item for good: mark it `Failed` with `error`; the key's stored
    /// result becomes `failed_result` (final). Returns false if the item was no longer pending.
    async fn outbox_fail(
        &self,
        id: i64,
        error: &str,
        failed_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Items, newest first, optionally only those in `state`.
    async fn outbox_list(
        &self,
        state: Option<OutboxState>,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, StoreError>;

    /// One item by id.
    async fn outbox_get(&self, id: i64) -> Result<Option<OutboxItem>, StoreError>;

    /// Make a pending or failed item due now (a failed one becomes pending again, keeping its
    /// key, whose stored result goes back to the `queued` envelope the item was enqueued with).
    /// A review item is released: pending, due now, `outcome_unknown` cleared (the operator
    /// checked that it did not execute). A live lease on a pending item is kept: the item is not
    /// handed to a second sender. Returns false if there is no such item or it is done or
    /// dropped.
    async fn outbox_replay_now(&self, id: i64, now_unix_ms: i64) -> Result<bool, StoreError>;

    /// Drop a pending, review or failed item: it is never sent; the key's stored result becomes
    /// `dropped_result`. Returns false if there is no such item, it is done or dropped, or a
    /// worker holds it under a live lease (it may be executing right now).
    async fn outbox_drop(
        &self,
        id: i64,
        dropped_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Queue depth, failed count and the oldest pending item's creation time.
    async fn outbox_stats(&self) -> Result<OutboxStats, StoreError>;

    // ---- read cache ----

    /// Remember the last good result of `tool` for these arguments.
    async fn cache_put(
        &self,
        tool: &str,
        args_hash: &str,
        result: &Value,
        captured_unix_ms: i64,
    ) -> Result<(), StoreError>;

    /// The last good result of `tool` for these arguments, if any.
    async fn cache_get(
        &self,
        tool: &str,
        args_hash: &str,
    ) -> Result<Option<CachedResult>, StoreError>;

    // ---- retention ----

    /// Forget what is past its retention, in one transaction: `Done` key records last changed
    /// before `keys_before`, with their finished (done or dropped) outbox items and decided
    /// holds, and finished items and decided holds older than that whose key has no record;
    /// cache entries captured before `cache_before`. Never touches a key that is in flight,
    /// queued or held, a pending or failed item, or a pending hold: nothing that may still
    /// execute or that an operator must see is lost.
    async fn prune(&self, keys_before: i64, cache_before: i64) -> Result<Pruned, StoreError>;

    // ---- the kill switch ----

    /// Record a kill-switch flip and return its sequence number: every replica applies the
    /// flips in this order.
    async fn kill_record(&self, flip: &KillFlip) -> Result<i64, StoreError>;

    /// The flips recorded after sequence number `after` (0: all of them), oldest first.
    async fn kill_flips_after(&self, after: i64) -> Result<Vec<(i64, KillFlip)>, StoreError>;

    // ---- the route-to lever ----

    /// Record a route-to flip and return its sequence number: every replica applies the flips
    /// in this order.
    async fn route_to_record(&self, flip: &RouteToFlip) -> Result<i64, StoreError>;

    /// The route-to flips recorded after sequence number `after` (0: all of them), oldest first.
    async fn route_to_flips_after(&self, after: i64)
    -> Result<Vec<(i64, RouteToFlip)>, StoreError>;

    // ---- runs ----

    /// Count `event` in run `run_id` (of `conversation_id`, when known) at `now_unix_ms`, in one
    /// transaction, and return the run's counts after it. A run idle for `idle_ms` or more starts
    /// afresh, its per-call counts forgotten. Replicas sharing the store count one run.
    async fn run_record(
        &self,
        run_id: &str,
        conversation_id: Option<&str>,
        event: RunEvent<'_>,
        now_unix_ms: i64,
        idle_ms: i64,
    ) -> Result<RunCounts, StoreError>;

    /// Stop run `run_id` with `status`, unless it is stopped already: the status in effect.
    async fn run_stop(
        &self,
        run_id: &str,
        status: &str,
        now_unix_ms: i64,
    ) -> Result<String, StoreError>;

    /// Forget the runs last touched before `before_unix_ms`, with their tool call logs (and the
    /// logs of runs without a row whose calls all came before it), and the evidence added before
    /// it; how many runs were forgotten.
    async fn runs_prune(&self, before_unix_ms: i64) -> Result<u64, StoreError>;

    /// Keep `items` (evidence, as JSON) as seen in run `run_id`; a run keeps its newest
    /// [`crate::runs::MAX_EVIDENCE`] items.
    async fn run_evidence_add(
        &self,
        run_id: &str,
        items: &[Value],
        now_unix_ms: i64,
    ) -> Result<(), StoreError>;

    /// The evidence kept for run `run_id`, oldest first, added at or after `since_unix_ms`.
    async fn run_evidence(
        &self,
        run_id: &str,
        since_unix_ms: i64,
    ) -> Result<Vec<Value>, StoreError>;

    /// Log one tool call of run `run_id`; a run keeps its newest [`crate::runs::MAX_TOOL_LOG`]
    /// calls. A run that starts afresh ([`Self::run_record`]) forgets its log.
    async fn run_tool_log_add(&self, run_id: &str, call: &RunToolCall) -> Result<(), StoreError>;

    /// The tool calls logged for run `run_id`, oldest first.
    async fn run_tool_log(&self, run_id: &str) -> Result<Vec<RunToolCall>, StoreError>;

    /// Write `note` on run `run_id`'s row, in one statement: each `Some` field overwrites the
    /// stored one, the others are kept. A run without a row gets one (no calls counted, first
    /// and last touched now, of `conversation_id`); a run with one is touched now. A run that
    /// starts afresh ([`Self::run_record`]) forgets its notes.
    async fn run_note(
        &self,
        run_id: &str,
        conversation_id: Option<&str>,
        note: &RunNote,
        now_unix_ms: i64,
    ) -> Result<(), StoreError>;

    /// A model call in run `call.run_id`, in one transaction: the run's evidence is read,
    /// the call counted as [`Self::run_record`] counts it, judged against `call.limits` (a run
    /// stopped before stays stopped; a limit this call passes stops the run, the first stop
    /// standing as in [`Self::run_stop`]) and, when it goes, `call.note` is written on the run's
    /// row as [`Self::run_note`] writes it. One round trip where those were four.
    async fn run_model_call(&self, call: &ModelCall<'_>) -> Result<ModelCallStep, StoreError>;

    /// An answered model call of run `done.run_id`, in one transaction: its cost added to its
    /// spender's spend as [`Self::spend_add`] adds it, and its draft noted as
    /// [`Self::run_note`] notes it. Nothing to add or note: nothing is written. Returns once
    /// every later call of this store sees it: committed (Postgres), or queued ahead of them
    /// (SQLite, whose calls run in order on its one connection; a failure after that is logged
    /// by the store; another connection sees it after [`Self::settle`]).
    async fn run_model_call_done(&self, done: &ModelCallDone<'_>) -> Result<(), StoreError>;

    /// Returns once every write queued and not waited for before this call (a run's spend and
    /// draft on SQLite) has run: a graceful stop calls it last, so that nothing an answered
    /// call queued is lost with the process. A store that queues nothing returns at once.
    async fn settle(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Run `run_id`'s row, with its counts and notes, if it has one.
    async fn run_get(&self, run_id: &str) -> Result<Option<RunInfo>, StoreError>;

    // ---- conversations ----

    /// Add `micro_usd` (millionths of a dollar) to the spend of `conversation_id`, in one
    /// statement, so replicas adding at once lose nothing; the conversation's total after it.
    async fn spend_add(
        &self,
        conversation_id: &str,
        micro_usd: i64,
        now_unix_ms: i64,
    ) -> Result<i64, StoreError>;

    /// The spend of `conversation_id` so far, in micro-dollars (0 for one never seen).
    async fn spend_of(&self, conversation_id: &str) -> Result<i64, StoreError>;

    /// Record that run `run_id` of `conversation_id` asked the question `question_hash` (a
    /// digest of its normalized text), in one transaction; asking again in the same run changes
    /// nothing but the time it was last seen. How many other runs of the conversation asked it.
    async fn question_seen(
        &self,
        conversation_id: &str,
        run_id: &str,
        question_hash: &str,
        now_unix_ms: i64,
    ) -> Result<i64, StoreError>;

    /// Forget the conversations' spend and questions last touched before `before_unix_ms`, in
    /// one transaction (hand-offs are kept); how many rows were removed.
    async fn conversations_prune(&self, before_unix_ms: i64) -> Result<u64, StoreError>;

    // ---- recorded calls and traces ----

    /// Record finished model and tool calls, in one transaction (their rows take their strings).
    async fn calls_record(
        &self,
        calls: Vec<RecordedCall>,
        tools: Vec<RecordedTool>,
    ) -> Result<(), StoreError>;

    /// The records of model calls made at or after `since_unix_ms` (of one route, when given),
    /// oldest first, at most `limit`, each with when it was made, and with the online judge's
    /// score and sampling probability when it judged the call.
    async fn calls_since(
        &self,
        since_unix_ms: i64,
        route: Option<&str>,
        limit: i64,
    ) -> Result<Vec<(i64, CallRecord)>, StoreError>;

    /// The kept traces `filter` selects, newest first, at most `limit`.
    async fn traces_list(
        &self,
        filter: &TraceFilter,
        limit: i64,
    ) -> Result<Vec<TraceSummary>, StoreError>;

    /// The kept traces with this trace id or request id (a caller's trace can span calls),
    /// oldest first.
    async fn trace_get(&self, id: &str) -> Result<Vec<Trace>, StoreError>;

    /// Keep the online judge's verdict on a call; `false` when that call has one already (the
    /// first stays).
    async fn verdict_record(&self, verdict: &Verdict) -> Result<bool, StoreError>;

    /// The verdicts `filter` selects, newest first, at most `limit`.
    async fn verdicts_list(
        &self,
        filter: &VerdictFilter,
        limit: i64,
    ) -> Result<Vec<Verdict>, StoreError>;

    /// Drop what `retention` no longer keeps, in one transaction (verdicts go with their
    /// calls' records).
    async fn calls_prune(&self, retention: &CallsRetention) -> Result<CallsPruned, StoreError>;

    // ---- hand-offs ----

    /// Open the hand-off of `new.conversation_id`, in one transaction: a conversation has one,
    /// so when it has one already that is returned with `false` and nothing changes; else one is
    /// created (delivery `Pending`) and returned with `true`. Replicas opening one conversation's
    /// hand-off at once make one.
    async fn handoff_open(
        &self,
        new: &NewHandoff,
        now_unix_ms: i64,
    ) -> Result<(Handoff, bool), StoreError>;

    /// Set where hand-off `id`'s ticket is: its delivery, the ticket system's answer and the
    /// detail are set as given (`None` clears); a `Delivered` one records when. A missing
    /// hand-off is left alone.
    async fn handoff_delivery(
        &self,
        id: i64,
        delivery: HandoffDelivery,
        ticket: Option<&Value>,
        detail: Option<&str>,
        now_unix_ms: i64,
    ) -> Result<(), StoreError>;

    /// Hand-offs, newest first, those `filter` lets through.
    async fn handoff_list(
        &self,
        filter: &HandoffFilter,
        limit: i64,
    ) -> Result<Vec<Handoff>, StoreError>;

    /// One hand-off by id.
    async fn handoff_get(&self, id: i64) -> Result<Option<Handoff>, StoreError>;

    /// The hand-off of a conversation, if it has one.
    async fn handoff_find(&self, conversation_id: &str) -> Result<Option<Handoff>, StoreError>;

    /// Decide hand-off `id`'s draft, atomically: only the first decision takes effect. Returns
    /// the decided hand-off if this call made the decision, `None` if the hand-off does not
    /// exist or was already decided.
    async fn handoff_decide(
        &self,
        id: i64,
        decision: ReviewDecision,
        by: &str,
        edited_draft: Option<&str>,
        note: &str,
        now_unix_ms: i64,
    ) -> Result<Option<Handoff>, StoreError>;

    /// The review counts of each trigger with hand-offs created at or after `since_unix_ms`,
    /// sorted by trigger (byte order, the same on both backends).
    async fn handoff_review_stats(
        &self,
        since_unix_ms: i64,
    ) -> Result<Vec<ReviewStats>, StoreError>;

    // ---- gate holds ----

    /// In one transaction: create a pending hold and set the key's record to `Held` with
    /// `held_result` (an object gets the hold's `hold_id`). If the key already has a hold,
    /// return that hold instead.
    async fn hold_create(
        &self,
        hold: &NewHold,
        held_result: &Value,
        now_unix_ms: i64,
    ) -> Result<Hold, StoreError>;

    /// Holds, newest first, optionally only those in `state`.
    async fn hold_list(
        &self,
        state: Option<HoldState>,
        limit: i64,
    ) -> Result<Vec<Hold>, StoreError>;

    /// One hold by id.
    async fn hold_get(&self, id: i64) -> Result<Option<Hold>, StoreError>;

    /// Decide a pending hold, atomically: only the first decision takes effect. Returns the
    /// decided hold (with `outbox_id` set on approval) if this call made the decision, `None` if
    /// the hold does not exist or was already decided.
    async fn hold_decide(
        &self,
        id: i64,
        decision: &Decision,
        by: &str,
        note: &str,
        now_unix_ms: i64,
    ) -> Result<Option<Hold>, StoreError>;
}
