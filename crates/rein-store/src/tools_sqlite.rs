//! [`ToolStore`] on the embedded SQLite [`Store`] (tables from migration 2): the default for one
//! gateway. The calls wait in one queue that one thread of tokio's blocking pool drains, because
//! a commit under `synchronous = FULL` waits for an fsync. Every change is one `BEGIN IMMEDIATE`
//! transaction, which takes the file's write lock up front: two processes on the same file queue
//! behind each other (up to the busy timeout) instead of both reading an item as free and both
//! claiming it. Bookkeeping queued back to back shares one such transaction; a call that fails
//! is rolled back alone (`Queue`).
//!
//! This file holds what is SQLite's own: the SQL, how values are bound, and the transactions.
//! Reading a row and deciding what a call does with it come from `tools::rows` and
//! `tools::rules`, which the Postgres backend shares.

use std::cell::RefCell;
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::types::{ToSqlOutput, Type};
use rusqlite::{
    Connection, OptionalExtension, Row, ToSql, Transaction, TransactionBehavior, params,
};
use serde_json::Value;

use rein_core::{KillFlip, RouteToFlip};

use crate::calls::{
    CallRow, CallsPruned, CallsRetention, RecordedCall, RecordedTool, SUMMARY_COLUMNS, TraceFilter,
    TraceSummary, Verdict, VerdictFilter,
};
use crate::handoffs::{
    Handoff, HandoffDelivery, HandoffFilter, NewHandoff, ReviewDecision, ReviewStats,
};
use crate::run_cache::RunCache;
use crate::runs::{
    self, ModelCall, ModelCallDone, ModelCallStep, OwnedEvent, RunCounts, RunEvent, RunInfo,
    RunNote, RunToolCall,
};
use crate::tools::rows::{
    self, CACHE_COLUMNS, CALL_RECORD_COLUMNS, Columns, HANDOFF_COLUMNS, HOLD_COLUMNS, KEY_COLUMNS,
    OUTBOX_COLUMNS, RUN_COLUMNS, STANDING_COLUMNS, TOOL_LOG_COLUMNS, Unreadable,
};
use crate::tools::rules::{self, DecisionEffect, ItemStanding, KeyChange, KeyStep, Replay};
use crate::tools::{
    CachedResult, Decision, Hold, HoldState, KeyBegin, NewHold, NewOutboxItem, OutboxItem,
    OutboxState, OutboxStats, Pruned, ToolStore,
};
use crate::{Store, StoreError};
use rein_core::sli::CallRecord;
use rein_core::trace::Trace;

/// The tool store in the embedded SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteToolStore {
    store: Arc<Store>,
    /// The calls waiting for the store's one connection, run in order by one blocking thread.
    queue: Arc<Queue>,
}

/// One call's work on the store, with where its result goes.
enum Job {
    /// Work that takes the store itself (its own transaction, or none).
    Alone(Box<dyn FnOnce(&Store) + Send>),
    /// Bookkeeping ([`SqliteToolStore::write_relaxed`]): it shares one transaction with the
    /// bookkeeping queued right behind it.
    Booked(Box<dyn Bookkeeping>),
}

/// The most bookkeeping calls one transaction takes, so that the file's write lock is never held
/// long for others (the CLI on the same file).
const MAX_SHARED: usize = 64;

/// A bookkeeping call: its work, run in a transaction it shares, and its caller, told once that
/// transaction committed or failed. The work can run more than once: when a call of the shared
/// transaction fails, the transaction is rolled back and its calls run again, each in a
/// savepoint of its own ([`run_shared`]); the last run's outcome is the one told.
trait Bookkeeping: Send {
    /// Run the work in `tx`; `false` when it failed (its writes are to be rolled back).
    fn work(&mut self, tx: &Tx<'_>) -> bool;
    /// Tell the caller: the work's own failure, else its value when the transaction committed
    /// (`Ok`) or the transaction's failure.
    fn settle(self: Box<Self>, committed: Result<(), &StoreError>);
    /// Whether a caller waits for the commit ([`Queue::next`] lingers only for calls nobody
    /// waits for).
    fn waited(&self) -> bool;
}

/// [`Bookkeeping`] of a closure, and whom it tells how it went.
struct Booked<T, F> {
    work: F,
    outcome: Option<Result<T, StoreError>>,
    tell: Tell<T>,
}

/// Whom a bookkeeping call tells how it went.
enum Tell<T> {
    /// The caller, waiting on this channel.
    Caller(tokio::sync::oneshot::Sender<Result<T, StoreError>>),
    /// Nobody waits ([`SqliteToolStore::queue_relaxed`]): a failure is logged as this, not
    /// recorded.
    Log(&'static str),
}

impl<T, F> Bookkeeping for Booked<T, F>
where
    T: Send,
    F: FnMut(&Tx<'_>) -> Result<T, StoreError> + Send,
{
    fn work(&mut self, tx: &Tx<'_>) -> bool {
        let outcome = work_caught(&mut self.work, tx);
        let worked = outcome.is_ok();
        self.outcome = Some(outcome);
        worked
    }

    fn waited(&self) -> bool {
        matches!(self.tell, Tell::Caller(_))
    }

    fn settle(self: Box<Self>, committed: Result<(), &StoreError>) {
        let outcome = settled(self.outcome, committed);
        match self.tell {
            // The caller may have gone (its request was cancelled): the work is done all the same.
            Tell::Caller(done) => {
                let _ = done.send(outcome);
            }
            Tell::Log(what) => {
                if let Err(error) = outcome {
                    tracing::error!("{what} not recorded: {error}");
                }
            }
        }
    }
}

/// `work` in `tx`; a panic is this call's failure, not the queue's (its writes are rolled back
/// alone).
fn work_caught<T>(
    work: &mut impl FnMut(&Tx<'_>) -> Result<T, StoreError>,
    tx: &Tx<'_>,
) -> Result<T, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(tx)))
        .unwrap_or_else(|panic| Err(StoreError::Task(panic_text(&*panic))))
}

/// What a bookkeeping call comes to: its own failure, else its value when the transaction it
/// shared committed, else that transaction's failure.
fn settled<T>(
    outcome: Option<Result<T, StoreError>>,
    committed: Result<(), &StoreError>,
) -> Result<T, StoreError> {
    match (outcome, committed) {
        (Some(Err(failed)), _) => Err(failed),
        (Some(Ok(value)), Ok(())) => Ok(value),
        (_, Err(error)) => {
            Err(StoreError::Task(format!("the transaction it shared did not commit: {error}")))
        }
        (None, Ok(())) => Err(StoreError::Task("the call did not run".to_string())),
    }
}

/// What the drain runs next.
enum Next {
    Alone(Box<dyn FnOnce(&Store) + Send>),
    Shared(Vec<Box<dyn Bookkeeping>>),
}

/// The store's calls in the order they came, and whether a blocking thread is draining them.
/// A call waits here rather than on the connection's lock: one thread runs the calls back to
/// back while there are any (and leaves when there are none), where one blocking thread per call
/// in flight woke only to fight over the lock. Bookkeeping queued back to back commits together
/// (a group commit): one that fails is rolled back alone ([`run_shared`]), and no caller hears of
/// its work before the transaction holding it committed.
struct Queue {
    state: std::sync::Mutex<QueueState>,
    /// Rung when a call is queued while the drain lingers.
    arrived: std::sync::Condvar,
    /// How long bookkeeping nobody waits for waits for more to share its commit ([`LINGER`]).
    linger: std::time::Duration,
}

/// How long bookkeeping nobody waits for (a run's spend and draft, queued after its answer) waits
/// for more bookkeeping to share its commit, when none is queued behind it. Under load the next
/// call comes within it, and the two commit as one (a commit is about a sixth of a run's
/// bookkeeping); a call someone waits for ends the wait at once, and a call that is not
/// bookkeeping too (it runs after the commit, in order).
const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

impl Default for Queue {
    fn default() -> Self {
        Self::lingering(LINGER)
    }
}

#[derive(Default)]
struct QueueState {
    jobs: std::collections::VecDeque<Job>,
    draining: bool,
    /// The drain waits for more calls ([`Queue::next`]).
    lingering: bool,
    /// Transactions of bookkeeping committed, and the calls they held.
    shared_commits: u64,
    shared_calls: u64,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").finish_non_exhaustive()
    }
}

impl Queue {
    fn lingering(linger: std::time::Duration) -> Self {
        Self { state: Default::default(), arrived: Default::default(), linger }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queue `job`; start a thread to drain the queue unless one is at it.
    fn push(self: &Arc<Self>, store: &Arc<Store>, job: Job) {
        let mut state = self.state();
        state.jobs.push_back(job);
        if state.draining {
            if state.lingering {
                self.arrived.notify_one();
            }
            return;
        }
        state.draining = true;
        drop(state);
        let drainer = Drainer { queue: Arc::clone(self), store: Arc::clone(store), done: false };
        tokio::task::spawn_blocking(move || drainer.run());
    }

    /// The next work: the call at the front, with the bookkeeping queued right behind it when it
    /// is bookkeeping; none when the queue is empty (and the drain ends). Bookkeeping nobody
    /// waits for, with nothing queued behind it, first waits up to [`Queue::linger`] for more to
    /// share its commit.
    fn next(&self) -> Option<Next> {
        let mut state = self.state();
        match state.jobs.pop_front() {
            None => {
                state.draining = false;
                None
            }
            Some(Job::Alone(job)) => Some(Next::Alone(job)),
            Some(Job::Booked(first)) => {
                let mut group = vec![first];
                let mut lingered = false;
                loop {
                    while group.len() < MAX_SHARED
                        && matches!(state.jobs.front(), Some(Job::Booked(_)))
                    {
                        if let Some(Job::Booked(job)) = state.jobs.pop_front() {
                            group.push(job);
                        }
                    }
                    let full = group.len() >= MAX_SHARED;
                    let waited = group.iter().any(|job| job.waited());
                    if lingered || full || waited || !state.jobs.is_empty() {
                        break;
                    }
                    // Once: what came meanwhile (or nothing, at the timeout or a spurious wake)
                    // goes with the group. The condition variable waits in real time, on the
                    // drain's own thread.
                    state.lingering = true;
                    state = match self.arrived.wait_timeout(state, self.linger) {
                        Ok((state, _)) => state,
                        Err(poisoned) => poisoned.into_inner().0,
                    };
                    state.lingering = false;
                    lingered = true;
                }
                Some(Next::Shared(group))
            }
        }
    }

    /// Run the queued jobs in order until there are none.
    fn drain(&self, store: &Store) {
        while let Some(next) = self.next() {
            match next {
                Next::Alone(job) => job(store),
                Next::Shared(group) => {
                    let calls = group.len() as u64;
                    let (committed, unrun) = commit_shared(store, group);
                    let mut state = self.state();
                    if committed {
                        state.shared_commits += 1;
                        state.shared_calls += calls;
                    }
                    // Calls its lost transaction never reached go first in the next one.
                    for job in unrun.into_iter().rev() {
                        state.jobs.push_front(Job::Booked(job));
                    }
                }
            }
        }
    }
}

/// Run `group` in one transaction that does not wait for the disk (`synchronous = NORMAL`),
/// a call that fails rolled back alone ([`run_shared`]), then tell each caller. Returns whether it
/// committed, and the calls not run because SQLite rolled the transaction back under an
/// earlier one's failure (an I/O error, a full disk), which go to the next transaction.
fn commit_shared(
    store: &Store,
    group: Vec<Box<dyn Bookkeeping>>,
) -> (bool, Vec<Box<dyn Bookkeeping>>) {
    let mut ran = Vec::with_capacity(group.len());
    let mut jobs = group.into_iter();
    // The connection stays at `NORMAL` after the commit: the next bookkeeping commit (most of
    // what follows under load) needs no change, and anything else takes the connection through
    // `Store::conn`, which puts it back to `FULL` first.
    let committed = match store.conn_relaxed() {
        Ok(mut conn) => {
            let mut runs = store.run_cache();
            let committed = run_shared(&mut conn, &mut runs, &mut jobs, &mut ran);
            runs.ended(committed.is_ok());
            committed
        }
        Err(error) => Err(error),
    };
    let unrun: Vec<_> = jobs.collect();
    let (committed, unrun) = match (committed, ran.is_empty()) {
        (Ok(()), _) => (Ok(()), unrun),
        // Nothing ran: the transaction never began; every call fails with it.
        (Err(error), true) => {
            ran.extend(unrun);
            (Err(error), Vec::new())
        }
        (Err(error), false) => (Err(error), unrun),
    };
    let done = committed.is_ok();
    for job in ran {
        job.settle(committed.as_ref().map(|_| ()));
    }
    (done, unrun)
}

/// The shared transaction of [`commit_shared`]: the calls it took are in `ran`. The calls run
/// one after another without savepoints: a savepoint has SQLite copy every page a call changes
/// into its journal first (about a third of a run's bookkeeping), and a call rarely fails. When
/// one does, the transaction is rolled back and every call it held runs again in a savepoint of
/// its own ([`run_saved`]), so the failed one is rolled back alone.
fn run_shared(
    conn: &mut Connection,
    runs: &mut RunCache,
    jobs: &mut impl Iterator<Item = Box<dyn Bookkeeping>>,
    ran: &mut Vec<Box<dyn Bookkeeping>>,
) -> Result<(), StoreError> {
    let begun = Begun::immediate(conn)?;
    let tx = Tx { conn: &begun, runs: RefCell::new(&mut *runs) };
    for job in jobs.by_ref() {
        ran.push(job);
        let Some(job) = ran.last_mut() else { break };
        if !job.work(&tx) {
            drop(begun);
            runs.ended(false);
            return run_saved(conn, runs, jobs, ran);
        }
    }
    begun.commit()
}

/// [`run_shared`] after a call failed: the calls in `ran` again, then the rest of `jobs`, each
/// in a savepoint of its own.
fn run_saved(
    conn: &mut Connection,
    runs: &mut RunCache,
    jobs: &mut impl Iterator<Item = Box<dyn Bookkeeping>>,
    ran: &mut Vec<Box<dyn Bookkeeping>>,
) -> Result<(), StoreError> {
    let begun = Begun::immediate(conn)?;
    let tx = Tx { conn: &begun, runs: RefCell::new(&mut *runs) };
    let mut next = 0;
    loop {
        if next == ran.len() {
            let Some(job) = jobs.next() else { break };
            ran.push(job);
        }
        let job = &mut ran[next];
        next += 1;
        tx.prepare_cached("SAVEPOINT call")?.execute([])?;
        if !job.work(&tx) {
            if tx.is_autocommit() {
                return Err(StoreError::Task(
                    "SQLite rolled the transaction back after a call's failure".to_string(),
                ));
            }
            tx.prepare_cached("ROLLBACK TO call")?.execute([])?;
            tx.runs().rolled_back();
        }
        tx.prepare_cached("RELEASE call")?.execute([])?;
    }
    begun.commit()
}

/// What a bookkeeping call works in: the shared transaction's connection, and the runs' rows
/// the store keeps beside it ([`RunCache`]), to be kept true to every write of `runs` the call
/// makes.
pub(crate) struct Tx<'c> {
    conn: &'c Connection,
    runs: RefCell<&'c mut RunCache>,
}

impl<'c> Tx<'c> {
    /// The runs' rows kept beside the connection.
    fn runs(&self) -> std::cell::RefMut<'_, &'c mut RunCache> {
        self.runs.borrow_mut()
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

/// A write transaction (`BEGIN IMMEDIATE`) of the shared bookkeeping, begun and committed with
/// statements from the connection's cache: rusqlite's own transaction prepares its `BEGIN` and
/// `COMMIT` afresh each time, two statement compilations a commit. Rolled back when dropped
/// uncommitted (unless SQLite already has).
struct Begun<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Begun<'c> {
    fn immediate(conn: &'c Connection) -> Result<Self, StoreError> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Self { conn, open: true })
    }

    fn commit(mut self) -> Result<(), StoreError> {
        self.open = false;
        if let Err(error) = self.conn.prepare_cached("COMMIT").and_then(|mut s| s.execute([])) {
            // A failed commit leaves the transaction open (a busy or full disk): roll it back,
            // as rusqlite's transaction does when dropped, so the next begin finds none.
            self.open = true;
            return Err(error.into());
        }
        Ok(())
    }
}

impl std::ops::Deref for Begun<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Begun<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_autocommit() {
            let _ = self.conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([]));
        }
    }
}

/// The queue's drain on a blocking thread. Dropped without having run (its runtime was shutting
/// down), it lets the queue go: the calls waiting in it fail rather than wait forever, and the
/// next call starts a drain of its own.
struct Drainer {
    queue: Arc<Queue>,
    store: Arc<Store>,
    done: bool,
}

impl Drainer {
    fn run(mut self) {
        self.queue.drain(&self.store);
        self.done = true;
    }
}

impl Drop for Drainer {
    fn drop(&mut self) {
        if !self.done {
            let mut state = self.queue.state();
            state.draining = false;
            state.jobs.clear();
        }
    }
}

impl SqliteToolStore {
    /// The tool store in `store`'s file (its tables come with the store's migrations).
    pub fn new(store: Arc<Store>) -> Self {
        Self { store, queue: Arc::default() }
    }

    /// Run `work` on the connection, off the async runtime.
    async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.blocking(move |store| work(&mut store.conn())).await
    }

    /// Run `work` on the store, off the async runtime (for the store's own calls, which take the
    /// connection themselves).
    async fn blocking<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    {
        let (done, result) = tokio::sync::oneshot::channel();
        let job = Job::Alone(Box::new(move |store| {
            // A panic is this call's failure, not the queue's: the thread drains on.
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(store)))
                .unwrap_or_else(|panic| Err(StoreError::Task(panic_text(&*panic))));
            // The caller may have gone (its request was cancelled): the work is done all the same.
            let _ = done.send(outcome);
        }));
        self.queue.push(&self.store, job);
        result.await.map_err(|_| StoreError::Task("the store's call was dropped".to_string()))?
    }

    /// Run `work` in one write transaction, committed when it returns `Ok` and on disk when
    /// this returns (`synchronous = FULL`): what must never be lost (the outbox, idempotency
    /// keys, hand-offs and their decisions, levers).
    async fn write<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        self.run(move |conn| transact(conn, work)).await
    }

    /// [`Self::write`] for bookkeeping that guards or measures (a run's counts, notes, evidence
    /// and tool log, a conversation's spend and questions, call records, the tool cache): its
    /// commit does not wait for the disk (`synchronous = NORMAL` for its transaction). It
    /// survives rein's own crash, and only a crash of the machine in the moments after it can
    /// lose it; the next `FULL` commit syncs it with its own. A run's model call made two such
    /// commits, and waiting for the disk on each cost milliseconds a call. Bookkeeping queued
    /// back to back shares one transaction ([`Queue`]); `work` runs again when another call of
    /// that transaction fails ([`run_shared`]), so it must do the same each time it runs.
    async fn write_relaxed<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (done, result) = tokio::sync::oneshot::channel();
        let job = Job::Booked(Box::new(Booked { work, outcome: None, tell: Tell::Caller(done) }));
        self.queue.push(&self.store, job);
        result.await.map_err(|_| StoreError::Task("the store's call was dropped".to_string()))?
    }

    /// [`Self::write_relaxed`] that returns once queued: every later call of this store runs
    /// after it (one queue, drained in order on one connection), so none of them misses what it
    /// writes, and nobody waits for its commit. A failure is logged as `what` not recorded.
    fn queue_relaxed<F>(&self, what: &'static str, work: F)
    where
        F: FnMut(&Tx<'_>) -> Result<(), StoreError> + Send + 'static,
    {
        let job = Job::Booked(Box::new(Booked { work, outcome: None, tell: Tell::Log(what) }));
        self.queue.push(&self.store, job);
    }
}

/// A run's evidence added since `?2`, oldest first.
const EVIDENCE_SINCE: &str =
    "SELECT item FROM run_evidence WHERE run_id = ?1 AND added_unix_ms >= ?2 ORDER BY id";

/// What a panic said, for the error that reports it.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let said = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message");
    format!("a store call panicked: {said}")
}

/// `work` in one write transaction taken up front (`BEGIN IMMEDIATE`), committed when it
/// returns `Ok`.
fn transact<T>(
    conn: &mut Connection,
    work: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let value = work(&tx)?;
    tx.commit()?;
    Ok(value)
}

/// Count `event` in run `run_id` (of `conversation_id`) at `at` (now, the idle time) inside
/// `tx`: the run's row after it, not yet written ([`write_run`]), and what of the stored row
/// writing it changes. A run that starts afresh has its per-call counts and tool log deleted
/// here.
fn count_run(
    tx: &Tx<'_>,
    run_id: &str,
    conversation_id: Option<&str>,
    event: RunEvent<'_>,
    (now_unix_ms, idle_ms): (i64, i64),
) -> Result<(runs::RunRow, runs::Change), StoreError> {
    static SELECT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let kept = tx.runs().take(tx, run_id)?;
    let stored = match kept {
        Some(row) => Some(row),
        None => {
            let select =
                SELECT.get_or_init(|| format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?1"));
            tx.prepare_cached(select)?.query_row([run_id], |row| rows::run_row(row)).optional()?
        }
    };
    let was_stored = stored.is_some();
    let (row, fresh) = runs::step(stored, conversation_id, event, now_unix_ms, idle_ms);
    if fresh {
        tx.prepare_cached("DELETE FROM run_calls WHERE run_id = ?1")?.execute([run_id])?;
        tx.prepare_cached("DELETE FROM run_tool_log WHERE run_id = ?1")?.execute([run_id])?;
    }
    Ok((row, runs::Change::of(was_stored, fresh)))
}

/// Write run `run_id`'s row, and keep it beside the connection for the run's next call. A row
/// whose notes are as stored (`Change::Counts`, a busy run's every call but its first) has its
/// counts updated in place, the notes' texts neither bound nor compared again; any other, the
/// whole row.
fn write_run(
    tx: &Tx<'_>,
    run_id: &str,
    row: runs::RunRow,
    change: runs::Change,
) -> Result<(), StoreError> {
    let updated = change == runs::Change::Counts && update_run_counts(tx, run_id, &row)?;
    if !updated {
        write_run_row(tx, run_id, &row)?;
    }
    tx.runs().put(run_id, row);
    Ok(())
}

/// Update run `run_id`'s counts, times and stop to `row`'s: whether its row was there.
fn update_run_counts(
    tx: &Connection,
    run_id: &str,
    row: &runs::RunRow,
) -> Result<bool, StoreError> {
    let updated = tx
        .prepare_cached(
            "UPDATE runs SET conversation_id = ?2, first_unix_ms = ?3, touched_unix_ms = ?4,
                 model_calls = ?5, tool_calls = ?6, last_error = ?7, same_error = ?8,
                 stopped = ?9
             WHERE run_id = ?1",
        )?
        .execute(counts_params(&run_id, row).as_slice())?;
    Ok(updated == 1)
}

/// Run `run_id`'s id and its row's counts, times and stop: a statement's `?1` to `?9`.
fn counts_params<'a>(run_id: &'a &'a str, row: &'a runs::RunRow) -> [&'a dyn ToSql; 9] {
    [
        run_id as &dyn ToSql,
        &row.conversation_id,
        &row.first_unix_ms,
        &row.touched_unix_ms,
        &row.model_calls,
        &row.tool_calls,
        &row.last_error,
        &row.same_error,
        &row.stopped,
    ]
}

fn write_run_row(tx: &Connection, run_id: &str, row: &runs::RunRow) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO runs (run_id, conversation_id, first_unix_ms, touched_unix_ms,
             model_calls, tool_calls, last_error, same_error, stopped, route, message,
             draft, coverage)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         ON CONFLICT (run_id) DO UPDATE SET conversation_id = excluded.conversation_id,
             first_unix_ms = excluded.first_unix_ms,
             touched_unix_ms = excluded.touched_unix_ms,
             model_calls = excluded.model_calls, tool_calls = excluded.tool_calls,
             last_error = excluded.last_error, same_error = excluded.same_error,
             stopped = excluded.stopped, route = excluded.route,
             message = excluded.message, draft = excluded.draft,
             coverage = excluded.coverage",
    )?
    .execute(rusqlite::params_from_iter(counts_params(&run_id, row).into_iter().chain([
        &row.note.route as &dyn ToSql,
        &row.note.message,
        &row.note.draft,
        &row.note.coverage.as_ref().map(JsonText),
    ])))?;
    Ok(())
}

/// Write `note` on run `run_id`'s row in one statement ([`ToolStore::run_note`]).
fn note_run(
    tx: &Tx<'_>,
    run_id: &str,
    conversation_id: Option<&str>,
    note: &RunNote,
    now_unix_ms: i64,
) -> Result<(), StoreError> {
    tx.runs().forget(run_id);
    tx.prepare_cached(
        "INSERT INTO runs (run_id, conversation_id, first_unix_ms, touched_unix_ms,
             model_calls, tool_calls, same_error, route, message, draft, coverage)
         VALUES (?1, ?2, ?3, ?3, 0, 0, 0, ?4, ?5, ?6, ?7)
         ON CONFLICT (run_id) DO UPDATE SET
             conversation_id = COALESCE(runs.conversation_id, excluded.conversation_id),
             touched_unix_ms = MAX(runs.touched_unix_ms, excluded.touched_unix_ms),
             route = COALESCE(excluded.route, runs.route),
             message = COALESCE(excluded.message, runs.message),
             draft = COALESCE(excluded.draft, runs.draft),
             coverage = COALESCE(excluded.coverage, runs.coverage)",
    )?
    .execute(params![
        run_id,
        conversation_id,
        now_unix_ms,
        note.route,
        note.message,
        note.draft,
        note.coverage.as_ref().map(JsonText)
    ])?;
    Ok(())
}

/// Write `draft` on run `run_id`'s row. The row is there (its call's count wrote it), so this
/// is an update of two columns, not [`note_run`]'s insert that finds the row and updates it
/// instead (a quarter of a run's bookkeeping); a row pruned since is written afresh by it.
fn note_draft(
    tx: &Tx<'_>,
    run_id: &str,
    conversation_id: Option<&str>,
    draft: &str,
    now_unix_ms: i64,
) -> Result<(), StoreError> {
    let updated = tx
        .prepare_cached(
            "UPDATE runs SET draft = ?2, touched_unix_ms = MAX(touched_unix_ms, ?3)
             WHERE run_id = ?1",
        )?
        .execute(params![run_id, draft, now_unix_ms])?;
    tx.runs().update(run_id, |row| {
        row.note.draft = Some(draft.to_owned());
        row.touched_unix_ms = row.touched_unix_ms.max(now_unix_ms);
    });
    if updated == 0 {
        let note = RunNote { draft: Some(draft.to_owned()), ..RunNote::default() };
        note_run(tx, run_id, conversation_id, &note, now_unix_ms)?;
    }
    Ok(())
}

/// Add `micro_usd` to `conversation_id`'s spend in one statement: the total after it.
fn add_spend(
    tx: &Connection,
    conversation_id: &str,
    micro_usd: i64,
    now_unix_ms: i64,
) -> Result<i64, StoreError> {
    Ok(tx
        .prepare_cached(
            "INSERT INTO conversation_spend (conversation_id, micro_usd, touched_unix_ms)
             VALUES (?1, ?2, ?3)
             ON CONFLICT (conversation_id) DO UPDATE SET
                 micro_usd = conversation_spend.micro_usd + excluded.micro_usd,
                 touched_unix_ms = MAX(conversation_spend.touched_unix_ms,
                                       excluded.touched_unix_ms)
             RETURNING micro_usd",
        )?
        .query_row(params![conversation_id, micro_usd, now_unix_ms], |row| row.get(0))?)
}

/// `conversation_id`'s spend so far (0 for one never seen).
fn spend_of(conn: &Connection, conversation_id: &str) -> Result<i64, StoreError> {
    let spent: Option<i64> = conn
        .prepare_cached("SELECT micro_usd FROM conversation_spend WHERE conversation_id = ?1")?
        .query_row([conversation_id], |row| row.get(0))
        .optional()?;
    Ok(spent.unwrap_or(0))
}

/// A JSON value bound as its text: every value, `null` included, round-trips exactly (binding
/// numbers as SQLite numbers would print floats back with 15 digits).
struct JsonText<'a>(&'a Value);

impl ToSql for JsonText<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.0.to_string()))
    }
}

impl Columns for Row<'_> {
    type Error = rusqlite::Error;

    fn int(&self, index: usize) -> rusqlite::Result<i64> {
        self.get(index)
    }

    fn int_opt(&self, index: usize) -> rusqlite::Result<Option<i64>> {
        self.get(index)
    }

    fn text(&self, index: usize) -> rusqlite::Result<String> {
        self.get(index)
    }

    fn text_opt(&self, index: usize) -> rusqlite::Result<Option<String>> {
        self.get(index)
    }

    fn flag(&self, index: usize) -> rusqlite::Result<bool> {
        self.get(index)
    }

    fn unreadable(index: usize, problem: Unreadable) -> rusqlite::Error {
        match problem {
            Unreadable::Json(error) => {
                rusqlite::Error::FromSqlConversionFailure(index, Type::Text, error.into())
            }
            Unreadable::NullJson => {
                rusqlite::Error::InvalidColumnType(index, "a JSON column".to_owned(), Type::Null)
            }
            Unreadable::State(_) => rusqlite::Error::FromSqlConversionFailure(
                index,
                Type::Text,
                problem.to_string().into(),
            ),
        }
    }
}

fn get_item(conn: &Connection, id: i64) -> Result<Option<OutboxItem>, StoreError> {
    let sql = format!("SELECT {OUTBOX_COLUMNS} FROM tool_outbox WHERE id = ?1");
    Ok(conn.query_row(&sql, [id], |row| rows::outbox_item(row)).optional()?)
}

fn find_handoff(conn: &Connection, conversation_id: &str) -> Result<Option<Handoff>, StoreError> {
    let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE conversation_id = ?1");
    Ok(conn.query_row(&sql, [conversation_id], |row| rows::handoff(row)).optional()?)
}

fn get_hold(conn: &Connection, id: i64) -> Result<Option<Hold>, StoreError> {
    let sql = format!("SELECT {HOLD_COLUMNS} FROM tool_holds WHERE id = ?1");
    Ok(conn.query_row(&sql, [id], |row| rows::hold(row)).optional()?)
}

/// Rewrite the key's record (if it has one) as `change` says, with `result`, lease released.
fn set_key(
    tx: &Connection,
    key: &str,
    change: KeyChange,
    result: &Value,
    now_unix_ms: i64,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE tool_keys SET state = ?2, result = ?3, lease_until_unix_ms = NULL,
             updated_unix_ms = ?4
         WHERE key = ?1",
        params![key, change.key_state().as_str(), JsonText(result), now_unix_ms],
    )?;
    Ok(())
}

/// Settle one pending item: `sql` updates it and returns its key (no row: it was no longer
/// pending), and that key is rewritten as `change` says. Whether the item was changed.
fn settle(
    tx: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    change: KeyChange,
    result: &Value,
    now_unix_ms: i64,
) -> Result<bool, StoreError> {
    let key: Option<String> = tx.query_row(sql, params, |row| row.get(0)).optional()?;
    let Some(key) = key else { return Ok(false) };
    set_key(tx, &key, change, result, now_unix_ms)?;
    Ok(true)
}

/// Add a pending item for `key` and mark the key `Queued`, or return the key's existing item.
fn enqueue(
    tx: &Connection,
    new: &NewOutboxItem,
    queued_result: &Value,
    now_unix_ms: i64,
) -> Result<OutboxItem, StoreError> {
    let key = new.idempotency_key.as_str();
    let sql = format!(
        "INSERT INTO tool_outbox (idempotency_key, tool, args, queued_result, state, attempts,
             created_unix_ms, next_attempt_unix_ms, conversation_id, outcome_unknown, review)
         VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?5, ?5, ?6, ?7, ?8)
         ON CONFLICT (idempotency_key) DO NOTHING
         RETURNING {OUTBOX_COLUMNS}"
    );
    let inserted = tx
        .query_row(
            &sql,
            params![
                key,
                new.tool,
                JsonText(&new.args),
                JsonText(queued_result),
                now_unix_ms,
                new.conversation_id,
                rules::enqueued_outcome_unknown(new),
                new.review
            ],
            |row| rows::outbox_item(row),
        )
        .optional()?;
    if let Some(item) = inserted {
        set_key(tx, key, KeyChange::Enqueued, queued_result, now_unix_ms)?;
        return Ok(item);
    }
    let sql = format!("SELECT {OUTBOX_COLUMNS} FROM tool_outbox WHERE idempotency_key = ?1");
    Ok(tx.query_row(&sql, [key], |row| rows::outbox_item(row))?)
}

/// Where an item stands, for the operator moves that depend on it.
fn item_standing(tx: &Connection, id: i64) -> Result<Option<ItemStanding>, StoreError> {
    let sql = format!("SELECT {STANDING_COLUMNS} FROM tool_outbox WHERE id = ?1");
    Ok(tx.query_row(&sql, [id], |row| rows::item_standing(row)).optional()?)
}

/// The most calls' rows one `INSERT` carries: 32 rows of 12 values, far below SQLite's limit on
/// a statement's parameters (32,766).
const ROWS_A_STATEMENT: usize = 32;

/// The `INSERT` of `rows` calls' rows (`rows` a power of two up to [`ROWS_A_STATEMENT`]), built
/// once for each size.
fn insert_calls_sql(rows: usize) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| {
        (0..=ROWS_A_STATEMENT.ilog2())
            .map(|power| {
                let rows = 1usize << power;
                let mut sql = String::from(
                    "INSERT INTO calls (at_unix_ms, request_id, trace_id, route, outcome, tier, \
                     attempts, elapsed_ms, notable, record, trace, kind) VALUES ",
                );
                for row in 0..rows {
                    sql.push_str(if row == 0 { "(" } else { ", (" });
                    for column in 0..12 {
                        if column > 0 {
                            sql.push_str(", ");
                        }
                        sql.push('?');
                        sql.push_str(&(row * 12 + column + 1).to_string());
                    }
                    sql.push(')');
                }
                sql
            })
            .collect()
    });
    &all[rows.ilog2() as usize]
}

/// A call's kept traces by trace id or request id, each id through its own partial index (an
/// `OR` of the two would not use them).
pub(crate) const TRACE_BY_ID: &str = "SELECT trace FROM calls WHERE id IN (
        SELECT id FROM calls WHERE trace_id = ?1 AND trace IS NOT NULL
        UNION ALL
        SELECT id FROM calls WHERE request_id = ?1 AND trace IS NOT NULL)
    ORDER BY id";

#[async_trait]
impl ToolStore for SqliteToolStore {
    async fn key_begin(
        &self,
        key: &str,
        tool: &str,
        args_hash: &str,
        now_unix_ms: i64,
        lease_ms: i64,
    ) -> Result<KeyBegin, StoreError> {
        let (key, tool, args_hash) = (key.to_owned(), tool.to_owned(), args_hash.to_owned());
        self.write(move |tx| {
            let lease_until = rules::lease_end(now_unix_ms, lease_ms);
            let sql = format!("SELECT {KEY_COLUMNS} FROM tool_keys WHERE key = ?1");
            let found = tx
                .query_row(&sql, [&key], |row| Ok((rows::key_record(row)?, rows::key_result(row)?)))
                .optional()?;
            let Some((record, result)) = found else {
                tx.execute(
                    "INSERT INTO tool_keys (key, tool, args_hash, state, lease_until_unix_ms,
                         created_unix_ms, updated_unix_ms)
                     VALUES (?1, ?2, ?3, 'in_flight', ?4, ?5, ?5)",
                    params![key, tool, args_hash, lease_until, now_unix_ms],
                )?;
                return Ok(KeyBegin::Fresh);
            };
            match rules::key_begin_step(record, &tool, &args_hash, now_unix_ms) {
                KeyStep::Answer(answer) => Ok(answer),
                KeyStep::TakeOver => {
                    tx.execute(
                        "UPDATE tool_keys SET lease_until_unix_ms = ?2, updated_unix_ms = ?3
                         WHERE key = ?1",
                        params![key, lease_until, now_unix_ms],
                    )?;
                    Ok(KeyBegin::TakenOver)
                }
                KeyStep::Stored(state) => rules::stored_answer(&key, state, result),
            }
        })
        .await
    }

    async fn key_finish(
        &self,
        key: &str,
        result: &Value,
        now_unix_ms: i64,
    ) -> Result<(), StoreError> {
        let (key, result) = (key.to_owned(), result.clone());
        self.write(move |tx| set_key(tx, &key, KeyChange::Finished, &result, now_unix_ms)).await
    }

    async fn key_abandon(&self, key: &str) -> Result<(), StoreError> {
        let key = key.to_owned();
        self.write(move |tx| {
            tx.execute("DELETE FROM tool_keys WHERE key = ?1 AND state = 'in_flight'", [&key])?;
            Ok(())
        })
        .await
    }

    async fn key_recent(
        &self,
        tool: &str,
        args_hash: &str,
        prefix: &str,
        since_unix_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        let (tool, args_hash, pattern) =
            (tool.to_owned(), args_hash.to_owned(), format!("{prefix}%"));
        self.run(move |conn| {
            Ok(conn
                .query_row(
                    "SELECT key FROM tool_keys WHERE tool = ?1 AND args_hash = ?2 AND key LIKE ?3 AND created_unix_ms >= ?4 ORDER BY created_unix_ms DESC, key LIMIT 1",
                    params![tool, args_hash, pattern, since_unix_ms],
                    |row| row.get(0),
                )
                .optional()?)
        })
        .await
    }

    async fn outbox_enqueue(
        &self,
        item: &NewOutboxItem,
        queued_result: &Value,
        now_unix_ms: i64,
    ) -> Result<OutboxItem, StoreError> {
        let (item, queued_result) = (item.clone(), queued_result.clone());
        self.write(move |tx| enqueue(tx, &item, &queued_result, now_unix_ms)).await
    }

    async fn outbox_claim(
        &self,
        owner: &str,
        now_unix_ms: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        if !rules::claims_any(limit) {
            return Ok(Vec::new());
        }
        let owner = owner.to_owned();
        self.write(move |tx| {
            let sql = format!(
                "UPDATE tool_outbox
                 SET lease_owner = ?1, lease_until_unix_ms = ?3, attempts = attempts + 1,
                     outcome_unknown = CASE WHEN lease_owner IS NULL THEN outcome_unknown
                                            ELSE 1 END
                 WHERE id IN (
                     SELECT id FROM tool_outbox
                     WHERE state = 'pending' AND review = 0 AND next_attempt_unix_ms <= ?2
                       AND (lease_until_unix_ms IS NULL OR lease_until_unix_ms <= ?2)
                     ORDER BY id
                     LIMIT ?4
                 )
                 RETURNING {OUTBOX_COLUMNS}"
            );
            let lease_until = rules::lease_end(now_unix_ms, lease_ms);
            let mut statement = tx.prepare(&sql)?;
            let mut items = statement
                .query_map(params![owner, now_unix_ms, lease_until, limit], |row| {
                    rows::outbox_item(row)
                })?
                .collect::<Result<Vec<_>, _>>()?;
            items.sort_by_key(|item| item.id);
            Ok(items)
        })
        .await
    }

    async fn outbox_complete(
        &self,
        id: i64,
        result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        let result = result.clone();
        self.write(move |tx| {
            let sql = "UPDATE tool_outbox SET state = 'done', result = ?2, finished_unix_ms = ?3,
                           lease_until_unix_ms = NULL
                       WHERE id = ?1 AND state = 'pending'
                       RETURNING idempotency_key";
            let params = params![id, JsonText(&result), now_unix_ms];
            settle(tx, sql, params, KeyChange::Completed, &result, now_unix_ms)
        })
        .await
    }

    async fn outbox_retry_later(
        &self,
        id: i64,
        error: &str,
        next_attempt_unix_ms: i64,
        outcome_unknown: bool,
    ) -> Result<bool, StoreError> {
        let error = error.to_owned();
        self.write(move |tx| {
            let changed = tx.execute(
                "UPDATE tool_outbox SET last_error = ?2, next_attempt_unix_ms = ?3,
                     lease_owner = NULL, lease_until_unix_ms = NULL,
                     outcome_unknown = MAX(outcome_unknown, ?4)
                 WHERE id = ?1 AND state = 'pending'",
                params![id, error, next_attempt_unix_ms, outcome_unknown],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn outbox_review(
        &self,
        id: i64,
        error: &str,
        review_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        let (error, review_result) = (error.to_owned(), review_result.clone());
        self.write(move |tx| {
            let sql = "UPDATE tool_outbox SET review = 1, outcome_unknown = 1, last_error = ?2,
                           lease_owner = NULL, lease_until_unix_ms = NULL
                       WHERE id = ?1 AND state = 'pending'
                       RETURNING idempotency_key";
            let params = params![id, error];
            settle(tx, sql, params, KeyChange::Reviewed, &review_result, now_unix_ms)
        })
        .await
    }

    async fn outbox_fail(
        &self,
        id: i64,
        error: &str,
        failed_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        let (error, failed_result) = (error.to_owned(), failed_result.clone());
        self.write(move |tx| {
            let sql = "UPDATE tool_outbox SET state = 'failed', last_error = ?2,
                           finished_unix_ms = ?3, lease_until_unix_ms = NULL
                       WHERE id = ?1 AND state = 'pending'
                       RETURNING idempotency_key";
            let params = params![id, error, now_unix_ms];
            settle(tx, sql, params, KeyChange::Failed, &failed_result, now_unix_ms)
        })
        .await
    }

    async fn outbox_list(
        &self,
        state: Option<OutboxState>,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        self.run(move |conn| {
            let sql = format!(
                "SELECT {OUTBOX_COLUMNS} FROM tool_outbox
                 WHERE ?1 IS NULL OR (state = ?1 AND (state <> 'pending' OR review = ?3))
                 ORDER BY id DESC LIMIT ?2"
            );
            let (state, review) = rules::list_filter(state);
            let mut statement = conn.prepare(&sql)?;
            let items = statement
                .query_map(params![state, rules::list_limit(limit), review], |row| {
                    rows::outbox_item(row)
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(items)
        })
        .await
    }

    async fn outbox_get(&self, id: i64) -> Result<Option<OutboxItem>, StoreError> {
        self.run(move |conn| get_item(conn, id)).await
    }

    async fn outbox_replay_now(&self, id: i64, now_unix_ms: i64) -> Result<bool, StoreError> {
        self.write(move |tx| {
            let Some(item) = item_standing(tx, id)? else { return Ok(false) };
            let Some(replay) = rules::replay(item.state) else { return Ok(false) };
            match replay {
                Replay::DueNow => {
                    tx.execute(
                        "UPDATE tool_outbox SET next_attempt_unix_ms = ?2 WHERE id = ?1",
                        params![id, now_unix_ms],
                    )?;
                }
                Replay::Release => {
                    tx.execute(
                        "UPDATE tool_outbox SET review = 0, outcome_unknown = 0,
                             next_attempt_unix_ms = ?2
                         WHERE id = ?1",
                        params![id, now_unix_ms],
                    )?;
                }
                Replay::Requeue => {
                    let queued_result: Value = tx.query_row(
                        "UPDATE tool_outbox SET state = 'pending', next_attempt_unix_ms = ?2,
                             finished_unix_ms = NULL, lease_owner = NULL,
                             lease_until_unix_ms = NULL
                         WHERE id = ?1
                         RETURNING queued_result",
                        params![id, now_unix_ms],
                        |row| rows::json(row, 0),
                    )?;
                    let key = &item.idempotency_key;
                    set_key(tx, key, KeyChange::Requeued, &queued_result, now_unix_ms)?;
                }
            }
            Ok(true)
        })
        .await
    }

    async fn outbox_drop(
        &self,
        id: i64,
        dropped_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        let dropped_result = dropped_result.clone();
        self.write(move |tx| {
            let Some(item) = item_standing(tx, id)? else { return Ok(false) };
            if !rules::may_drop(&item, now_unix_ms) {
                return Ok(false);
            }
            tx.execute(
                "UPDATE tool_outbox SET state = 'dropped', finished_unix_ms = ?2,
                     lease_until_unix_ms = NULL
                 WHERE id = ?1",
                params![id, now_unix_ms],
            )?;
            let key = &item.idempotency_key;
            set_key(tx, key, KeyChange::Dropped, &dropped_result, now_unix_ms)?;
            Ok(true)
        })
        .await
    }

    async fn outbox_stats(&self) -> Result<OutboxStats, StoreError> {
        self.run(|conn| {
            Ok(conn.query_row(
                "SELECT
                     COUNT(*) FILTER (WHERE state = 'pending' AND review = 0),
                     COUNT(*) FILTER (WHERE state = 'failed'),
                     COUNT(*) FILTER (WHERE state = 'pending' AND review = 1),
                     MIN(created_unix_ms) FILTER (WHERE state = 'pending' AND review = 0)
                 FROM tool_outbox",
                [],
                |row| rows::outbox_stats(row),
            )?)
        })
        .await
    }

    async fn cache_put(
        &self,
        tool: &str,
        args_hash: &str,
        result: &Value,
        captured_unix_ms: i64,
    ) -> Result<(), StoreError> {
        let (tool, args_hash, result) = (tool.to_owned(), args_hash.to_owned(), result.clone());
        self.write_relaxed(move |tx| {
            tx.execute(
                "INSERT INTO tool_cache (tool, args_hash, result, captured_unix_ms)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (tool, args_hash) DO UPDATE
                 SET result = excluded.result, captured_unix_ms = excluded.captured_unix_ms",
                params![tool, args_hash, JsonText(&result), captured_unix_ms],
            )?;
            Ok(())
        })
        .await
    }

    async fn cache_get(
        &self,
        tool: &str,
        args_hash: &str,
    ) -> Result<Option<CachedResult>, StoreError> {
        let (tool, args_hash) = (tool.to_owned(), args_hash.to_owned());
        self.run(move |conn| {
            let sql = format!(
                "SELECT {CACHE_COLUMNS} FROM tool_cache WHERE tool = ?1 AND args_hash = ?2"
            );
            Ok(conn.query_row(&sql, [&tool, &args_hash], |row| rows::cached(row)).optional()?)
        })
        .await
    }

    async fn prune(&self, keys_before: i64, cache_before: i64) -> Result<Pruned, StoreError> {
        self.write(move |tx| {
            let holds = tx.execute(
                "DELETE FROM tool_holds WHERE state <> 'pending' AND (idempotency_key IN (SELECT key FROM tool_keys WHERE state = 'done' AND updated_unix_ms < ?1) OR (decided_unix_ms < ?1 AND idempotency_key NOT IN (SELECT key FROM tool_keys)))",
                params![keys_before],
            )? as u64;
            let outbox = tx.execute(
                "DELETE FROM tool_outbox WHERE state IN ('done', 'dropped') AND id NOT IN (SELECT outbox_id FROM tool_holds WHERE outbox_id IS NOT NULL) AND (idempotency_key IN (SELECT key FROM tool_keys WHERE state = 'done' AND updated_unix_ms < ?1) OR (finished_unix_ms < ?1 AND idempotency_key NOT IN (SELECT key FROM tool_keys)))",
                params![keys_before],
            )? as u64;
            let keys = tx.execute(
                "DELETE FROM tool_keys WHERE state = 'done' AND updated_unix_ms < ?1 AND key NOT IN (SELECT idempotency_key FROM tool_outbox) AND key NOT IN (SELECT idempotency_key FROM tool_holds)",
                params![keys_before],
            )? as u64;
            let cache = tx.execute(
                "DELETE FROM tool_cache WHERE captured_unix_ms < ?1",
                params![cache_before],
            )? as u64;
            Ok(Pruned { keys, outbox, holds, cache })
        })
        .await
    }

    async fn kill_record(&self, flip: &KillFlip) -> Result<i64, StoreError> {
        let flip = flip.clone();
        self.blocking(move |store| store.record_kill_flip(&flip)).await
    }

    async fn kill_flips_after(&self, after: i64) -> Result<Vec<(i64, KillFlip)>, StoreError> {
        self.blocking(move |store| store.kill_flips_after(after)).await
    }

    async fn route_to_record(&self, flip: &RouteToFlip) -> Result<i64, StoreError> {
        let flip = flip.clone();
        self.blocking(move |store| store.record_route_to(&flip)).await
    }

    async fn route_to_flips_after(
        &self,
        after: i64,
    ) -> Result<Vec<(i64, RouteToFlip)>, StoreError> {
        self.blocking(move |store| store.route_to_flips_after(after)).await
    }

    async fn run_record(
        &self,
        run_id: &str,
        conversation_id: Option<&str>,
        event: RunEvent<'_>,
        now_unix_ms: i64,
        idle_ms: i64,
    ) -> Result<RunCounts, StoreError> {
        let (run_id, conversation) = (run_id.to_owned(), conversation_id.map(str::to_owned));
        let event = OwnedEvent::of(event);
        self.write_relaxed(move |tx| {
            let at = (now_unix_ms, idle_ms);
            let (row, change) = count_run(tx, &run_id, conversation.as_deref(), event.event(), at)?;
            let same_call = match &event {
                OwnedEvent::ToolCall { tool, args_hash } => tx
                    .prepare_cached(
                        "INSERT INTO run_calls (run_id, tool, args_hash, calls) VALUES (?1, ?2, ?3, 1)
                         ON CONFLICT (run_id, tool, args_hash) DO UPDATE SET calls = calls + 1
                         RETURNING calls",
                    )?
                    .query_row(params![run_id, tool, args_hash], |r| r.get(0))?,
                _ => 0,
            };
            let counts = runs::counts(&run_id, &row, same_call);
            write_run(tx, &run_id, row, change)?;
            Ok(counts)
        })
        .await
    }

    async fn run_stop(
        &self,
        run_id: &str,
        status: &str,
        now_unix_ms: i64,
    ) -> Result<String, StoreError> {
        let (run_id, status) = (run_id.to_owned(), status.to_owned());
        self.write_relaxed(move |tx| {
            tx.runs().forget(&run_id);
            tx.execute(
                "INSERT INTO runs (run_id, first_unix_ms, touched_unix_ms, model_calls, tool_calls,
                     same_error, stopped)
                 VALUES (?1, ?2, ?2, 0, 0, 0, ?3)
                 ON CONFLICT (run_id) DO UPDATE SET stopped = COALESCE(runs.stopped, excluded.stopped)",
                params![run_id, now_unix_ms, status],
            )?;
            Ok(tx.query_row("SELECT stopped FROM runs WHERE run_id = ?1", [&run_id], |r| r.get(0))?)
        })
        .await
    }

    async fn runs_prune(&self, before_unix_ms: i64) -> Result<u64, StoreError> {
        let store = Arc::clone(&self.store);
        self.write(move |tx| {
            store.run_cache().forget_all();
            tx.execute(
                "DELETE FROM run_calls WHERE run_id IN
                     (SELECT run_id FROM runs WHERE touched_unix_ms < ?1)",
                [before_unix_ms],
            )?;
            tx.execute(
                "DELETE FROM run_tool_log WHERE run_id IN
                     (SELECT run_id FROM runs WHERE touched_unix_ms < ?1)
                     OR (run_id NOT IN (SELECT run_id FROM runs) AND run_id NOT IN
                         (SELECT run_id FROM run_tool_log WHERE at_unix_ms >= ?1))",
                [before_unix_ms],
            )?;
            let gone =
                tx.execute("DELETE FROM runs WHERE touched_unix_ms < ?1", [before_unix_ms])?;
            tx.execute("DELETE FROM run_evidence WHERE added_unix_ms < ?1", [before_unix_ms])?;
            Ok(gone as u64)
        })
        .await
    }

    async fn run_evidence_add(
        &self,
        run_id: &str,
        items: &[Value],
        now_unix_ms: i64,
    ) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        let (run_id, items) = (run_id.to_owned(), items.to_vec());
        self.write_relaxed(move |tx| {
            for item in &items {
                tx.execute(
                    "INSERT INTO run_evidence (run_id, item, added_unix_ms) VALUES (?1, ?2, ?3)",
                    params![run_id, JsonText(item), now_unix_ms],
                )?;
            }
            tx.execute(
                "DELETE FROM run_evidence WHERE run_id = ?1 AND id NOT IN
                     (SELECT id FROM run_evidence WHERE run_id = ?1 ORDER BY id DESC LIMIT ?2)",
                params![run_id, runs::MAX_EVIDENCE],
            )?;
            Ok(())
        })
        .await
    }

    async fn run_evidence(
        &self,
        run_id: &str,
        since_unix_ms: i64,
    ) -> Result<Vec<Value>, StoreError> {
        let run_id = run_id.to_owned();
        self.run(move |conn| {
            let mut statement = conn.prepare_cached(EVIDENCE_SINCE)?;
            let items = statement
                .query_map(params![run_id, since_unix_ms], |row| rows::json(row, 0))?
                .collect::<Result<Vec<Value>, _>>()?;
            Ok(items)
        })
        .await
    }

    async fn run_tool_log_add(&self, run_id: &str, call: &RunToolCall) -> Result<(), StoreError> {
        let (run_id, call) = (run_id.to_owned(), call.clone());
        self.write_relaxed(move |tx| {
            tx.execute(
                "INSERT INTO run_tool_log (run_id, tool, args, status, result, at_unix_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    run_id,
                    call.tool,
                    JsonText(&call.args),
                    call.status,
                    JsonText(&call.result),
                    call.at_unix_ms
                ],
            )?;
            tx.execute(
                "DELETE FROM run_tool_log WHERE run_id = ?1 AND id NOT IN
                     (SELECT id FROM run_tool_log WHERE run_id = ?1 ORDER BY id DESC LIMIT ?2)",
                params![run_id, runs::MAX_TOOL_LOG],
            )?;
            Ok(())
        })
        .await
    }

    async fn run_tool_log(&self, run_id: &str) -> Result<Vec<RunToolCall>, StoreError> {
        let run_id = run_id.to_owned();
        self.run(move |conn| {
            let sql = format!(
                "SELECT {TOOL_LOG_COLUMNS} FROM run_tool_log WHERE run_id = ?1 ORDER BY id"
            );
            let mut statement = conn.prepare_cached(&sql)?;
            let calls = statement
                .query_map([&run_id], |row| rows::run_tool_call(row))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(calls)
        })
        .await
    }

    async fn run_note(
        &self,
        run_id: &str,
        conversation_id: Option<&str>,
        note: &RunNote,
        now_unix_ms: i64,
    ) -> Result<(), StoreError> {
        let (run_id, conversation) = (run_id.to_owned(), conversation_id.map(str::to_owned));
        let note = note.clone();
        self.write_relaxed(move |tx| {
            note_run(tx, &run_id, conversation.as_deref(), &note, now_unix_ms)
        })
        .await
    }

    async fn run_model_call(&self, call: &ModelCall<'_>) -> Result<ModelCallStep, StoreError> {
        let run_id = call.run_id.to_owned();
        let conversation = call.conversation_id.map(str::to_owned);
        let (spender, note) = (call.spender.to_owned(), call.note.clone());
        let (limits, at) = (call.limits, (call.now_unix_ms, call.idle_ms));
        self.write_relaxed(move |tx| {
            let evidence = tx
                .prepare_cached(EVIDENCE_SINCE)?
                .query_map(params![run_id, at.0.saturating_sub(at.1)], |row| rows::json(row, 0))?
                .collect::<Result<Vec<Value>, _>>()?;
            let event = RunEvent::ModelCall;
            let (mut row, change) = count_run(tx, &run_id, conversation.as_deref(), event, at)?;
            let change = change.noting(&note, &row);
            let spent = match limits.max_spend_micro_usd {
                Some(_) => spend_of(tx, &spender)?,
                None => 0,
            };
            let stopped = runs::judge_model_call(&mut row, &limits, spent, &note, at.0);
            write_run(tx, &run_id, row, change)?;
            Ok(ModelCallStep { evidence, stopped })
        })
        .await
    }

    async fn run_model_call_done(&self, done: &ModelCallDone<'_>) -> Result<(), StoreError> {
        if done.micro_usd.is_none() && done.draft.is_none() {
            return Ok(());
        }
        let run_id = done.run_id.to_owned();
        let conversation = done.conversation_id.map(str::to_owned);
        let spender = done.spender.to_owned();
        let draft = done.draft.map(str::to_owned);
        let (micro_usd, now) = (done.micro_usd, done.now_unix_ms);
        // Queued, not waited for: the run's next call is queued behind it, so it counts this
        // spend and its packet has this draft, and the answer goes out without a second wait
        // for the store's thread.
        self.queue_relaxed("a run's spend and draft", move |tx| {
            if let Some(micro_usd) = micro_usd {
                add_spend(tx, &spender, micro_usd, now)?;
            }
            if let Some(draft) = &draft {
                note_draft(tx, &run_id, conversation.as_deref(), draft, now)?;
            }
            Ok(())
        });
        Ok(())
    }

    async fn settle(&self) -> Result<(), StoreError> {
        // A call queued behind everything queued so far: the queue runs in order, so when it
        // has run, so has all of that.
        self.blocking(|_| Ok(())).await
    }

    async fn run_get(&self, run_id: &str) -> Result<Option<RunInfo>, StoreError> {
        let run_id = run_id.to_owned();
        self.run(move |conn| {
            let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?1");
            let row = conn.query_row(&sql, [&run_id], |row| rows::run_row(row)).optional()?;
            Ok(row.map(|row| runs::info(&run_id, row)))
        })
        .await
    }

    async fn spend_add(
        &self,
        conversation_id: &str,
        micro_usd: i64,
        now_unix_ms: i64,
    ) -> Result<i64, StoreError> {
        let conversation = conversation_id.to_owned();
        self.write_relaxed(move |tx| add_spend(tx, &conversation, micro_usd, now_unix_ms)).await
    }

    async fn spend_of(&self, conversation_id: &str) -> Result<i64, StoreError> {
        let conversation = conversation_id.to_owned();
        self.run(move |conn| spend_of(conn, &conversation)).await
    }

    async fn question_seen(
        &self,
        conversation_id: &str,
        run_id: &str,
        question_hash: &str,
        now_unix_ms: i64,
    ) -> Result<i64, StoreError> {
        let (conversation, run_id) = (conversation_id.to_owned(), run_id.to_owned());
        let question = question_hash.to_owned();
        self.write_relaxed(move |tx| {
            tx.execute(
                "INSERT INTO conversation_questions (conversation_id, question_hash, run_id,
                     touched_unix_ms)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (conversation_id, question_hash, run_id) DO UPDATE SET
                     touched_unix_ms = MAX(conversation_questions.touched_unix_ms,
                                           excluded.touched_unix_ms)",
                params![conversation, question, run_id, now_unix_ms],
            )?;
            Ok(tx.query_row(
                "SELECT COUNT(*) FROM conversation_questions
                 WHERE conversation_id = ?1 AND question_hash = ?2 AND run_id <> ?3",
                params![conversation, question, run_id],
                |row| row.get(0),
            )?)
        })
        .await
    }

    async fn conversations_prune(&self, before_unix_ms: i64) -> Result<u64, StoreError> {
        self.write(move |tx| {
            let spend = tx.execute(
                "DELETE FROM conversation_spend WHERE touched_unix_ms < ?1",
                [before_unix_ms],
            )?;
            let questions = tx.execute(
                "DELETE FROM conversation_questions WHERE touched_unix_ms < ?1",
                [before_unix_ms],
            )?;
            Ok((spend + questions) as u64)
        })
        .await
    }

    async fn calls_record(
        &self,
        calls: Vec<RecordedCall>,
        tools: Vec<RecordedTool>,
    ) -> Result<(), StoreError> {
        let rows = CallRow::all(calls, tools);
        if rows.is_empty() {
            return Ok(());
        }
        self.write_relaxed(move |tx| {
            // Up to `ROWS_A_STATEMENT` rows a statement, the rest in statements of halving size:
            // one run of the statement (and one update of the id sequence) a chunk, not a row.
            let mut rest = &rows[..];
            while !rest.is_empty() {
                let take = if rest.len() >= ROWS_A_STATEMENT {
                    ROWS_A_STATEMENT
                } else {
                    1 << rest.len().ilog2()
                };
                let (chunk, tail) = rest.split_at(take);
                let mut insert = tx.prepare_cached(insert_calls_sql(take))?;
                let values = chunk.iter().flat_map(|row| -> [&dyn rusqlite::ToSql; 12] {
                    [
                        &row.at_unix_ms,
                        &row.request_id,
                        &row.trace_id,
                        &row.route,
                        &row.outcome,
                        &row.tier,
                        &row.attempts,
                        &row.elapsed_ms,
                        &row.notable,
                        &row.record,
                        &row.trace,
                        &row.kind,
                    ]
                });
                insert.execute(rusqlite::params_from_iter(values))?;
                rest = tail;
            }
            Ok(())
        })
        .await
    }

    async fn calls_since(
        &self,
        since_unix_ms: i64,
        route: Option<&str>,
        limit: i64,
    ) -> Result<Vec<(i64, CallRecord)>, StoreError> {
        let route = route.map(str::to_owned);
        self.run(move |conn| {
            let sql = format!(
                "SELECT {CALL_RECORD_COLUMNS} FROM calls c
                 LEFT JOIN verdicts v ON v.request_id = c.request_id
                 WHERE c.at_unix_ms >= ?1 AND c.kind = 'model' AND (?2 IS NULL OR c.route = ?2)
                 ORDER BY c.id LIMIT ?3"
            );
            let mut statement = conn.prepare_cached(&sql)?;
            let found = statement
                .query_map(params![since_unix_ms, route, rules::list_limit(limit)], |row| {
                    rows::call_record(row)
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(found)
        })
        .await
    }

    async fn traces_list(
        &self,
        filter: &TraceFilter,
        limit: i64,
    ) -> Result<Vec<TraceSummary>, StoreError> {
        let filter = filter.clone();
        self.run(move |conn| {
            let sql = format!(
                "SELECT {SUMMARY_COLUMNS} FROM calls
                 WHERE trace IS NOT NULL AND (?1 IS NULL OR route = ?1)
                   AND (?2 IS NULL OR outcome = ?2) AND (?3 = 0 OR notable = 1)
                 ORDER BY id DESC LIMIT ?4"
            );
            let mut statement = conn.prepare(&sql)?;
            let found = statement
                .query_map(
                    params![filter.route, filter.outcome, filter.notable, rules::list_limit(limit)],
                    |row| rows::trace_summary(row),
                )?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(found)
        })
        .await
    }

    async fn trace_get(&self, id: &str) -> Result<Vec<Trace>, StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            let mut statement = conn.prepare_cached(TRACE_BY_ID)?;
            let found = statement
                .query_map([id], |row| rows::typed::<_, Trace>(row, 0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(found)
        })
        .await
    }

    async fn verdict_record(&self, verdict: &Verdict) -> Result<bool, StoreError> {
        let text =
            serde_json::to_string(verdict).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let verdict = verdict.clone();
        self.write(move |tx| {
            let inserted = tx.execute(
                "INSERT INTO verdicts (request_id, at_unix_ms, route, pass, score, probability,
                     verdict)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (request_id) DO NOTHING",
                params![
                    verdict.request_id,
                    verdict.at_unix_ms,
                    verdict.route,
                    verdict.pass,
                    verdict.score,
                    verdict.probability,
                    text
                ],
            )?;
            Ok(inserted == 1)
        })
        .await
    }

    async fn verdicts_list(
        &self,
        filter: &VerdictFilter,
        limit: i64,
    ) -> Result<Vec<Verdict>, StoreError> {
        let filter = filter.clone();
        self.run(move |conn| {
            let mut statement = conn.prepare_cached(
                "SELECT verdict FROM verdicts
                 WHERE at_unix_ms >= ?1 AND (?2 IS NULL OR route = ?2) AND (?3 = 0 OR pass = 0)
                 ORDER BY id DESC LIMIT ?4",
            )?;
            let found = statement
                .query_map(
                    params![
                        filter.since_unix_ms,
                        filter.route,
                        filter.failed,
                        rules::list_limit(limit)
                    ],
                    |row| rows::typed::<_, Verdict>(row, 0),
                )?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(found)
        })
        .await
    }

    async fn calls_prune(&self, retention: &CallsRetention) -> Result<CallsPruned, StoreError> {
        let retention = *retention;
        self.write(move |tx| {
            let records = tx.execute(
                "DELETE FROM calls WHERE at_unix_ms < ?1",
                [retention.records_before_unix_ms],
            )?;
            tx.execute(
                "DELETE FROM verdicts WHERE at_unix_ms < ?1",
                [retention.records_before_unix_ms],
            )?;
            let old = tx.execute(
                "UPDATE calls SET trace = NULL WHERE trace IS NOT NULL AND at_unix_ms < ?1",
                [retention.traces_before_unix_ms],
            )?;
            let beyond = tx.execute(
                "UPDATE calls SET trace = NULL WHERE trace IS NOT NULL AND notable = 0
                   AND id NOT IN (SELECT id FROM calls WHERE trace IS NOT NULL
                                  ORDER BY id DESC LIMIT ?1)",
                [retention.keep_last.max(0)],
            )?;
            Ok(CallsPruned { records: records as u64, traces: (old + beyond) as u64 })
        })
        .await
    }

    async fn handoff_open(
        &self,
        new: &NewHandoff,
        now_unix_ms: i64,
    ) -> Result<(Handoff, bool), StoreError> {
        let new = new.clone();
        self.write(move |tx| {
            let sql = format!(
                "INSERT INTO handoffs (conversation_id, run_id, route, trigger, stop_status,
                     packet, canary, delivery, created_unix_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8)
                 ON CONFLICT (conversation_id) DO NOTHING
                 RETURNING {HANDOFF_COLUMNS}"
            );
            let inserted = tx
                .query_row(
                    &sql,
                    params![
                        new.conversation_id,
                        new.run_id,
                        new.route,
                        new.trigger,
                        new.stop_status,
                        JsonText(&new.packet),
                        new.canary,
                        now_unix_ms
                    ],
                    |row| rows::handoff(row),
                )
                .optional()?;
            if let Some(created) = inserted {
                return Ok((created, true));
            }
            let found = find_handoff(tx, &new.conversation_id)?;
            let found = found.ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "conversation `{}` lost its hand-off",
                    new.conversation_id
                ))
            })?;
            Ok((found, false))
        })
        .await
    }

    async fn handoff_delivery(
        &self,
        id: i64,
        delivery: HandoffDelivery,
        ticket: Option<&Value>,
        detail: Option<&str>,
        now_unix_ms: i64,
    ) -> Result<(), StoreError> {
        let (ticket, detail) = (ticket.cloned(), detail.map(str::to_owned));
        let delivered = (delivery == HandoffDelivery::Delivered).then_some(now_unix_ms);
        self.write(move |tx| {
            tx.execute(
                "UPDATE handoffs SET delivery = ?2, ticket = ?3, delivery_detail = ?4,
                     delivered_unix_ms = COALESCE(?5, delivered_unix_ms)
                 WHERE id = ?1",
                params![id, delivery.as_str(), ticket.as_ref().map(JsonText), detail, delivered],
            )?;
            Ok(())
        })
        .await
    }

    async fn handoff_list(
        &self,
        filter: &HandoffFilter,
        limit: i64,
    ) -> Result<Vec<Handoff>, StoreError> {
        let filter = filter.clone();
        self.run(move |conn| {
            let sql = format!(
                "SELECT {HANDOFF_COLUMNS} FROM handoffs
                 WHERE (?1 IS NULL OR trigger = ?1)
                   AND (?2 IS NULL OR (decision IS NOT NULL) = ?2)
                 ORDER BY id DESC LIMIT ?3"
            );
            let mut statement = conn.prepare(&sql)?;
            let handoffs = statement
                .query_map(
                    params![filter.trigger, filter.decided, rules::list_limit(limit)],
                    |row| rows::handoff(row),
                )?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(handoffs)
        })
        .await
    }

    async fn handoff_get(&self, id: i64) -> Result<Option<Handoff>, StoreError> {
        self.run(move |conn| {
            let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE id = ?1");
            Ok(conn.query_row(&sql, [id], |row| rows::handoff(row)).optional()?)
        })
        .await
    }

    async fn handoff_find(&self, conversation_id: &str) -> Result<Option<Handoff>, StoreError> {
        let conversation = conversation_id.to_owned();
        self.run(move |conn| find_handoff(conn, &conversation)).await
    }

    async fn handoff_decide(
        &self,
        id: i64,
        decision: ReviewDecision,
        by: &str,
        edited_draft: Option<&str>,
        note: &str,
        now_unix_ms: i64,
    ) -> Result<Option<Handoff>, StoreError> {
        let (by, edited_draft, note) =
            (by.to_owned(), edited_draft.map(str::to_owned), note.to_owned());
        self.write(move |tx| {
            let sql = format!(
                "UPDATE handoffs SET decision = ?2, decided_by = ?3, edited_draft = ?4,
                     note = ?5, decided_unix_ms = ?6
                 WHERE id = ?1 AND decision IS NULL
                 RETURNING {HANDOFF_COLUMNS}"
            );
            let params = params![id, decision.as_str(), by, edited_draft, note, now_unix_ms];
            Ok(tx.query_row(&sql, params, |row| rows::handoff(row)).optional()?)
        })
        .await
    }

    async fn handoff_review_stats(
        &self,
        since_unix_ms: i64,
    ) -> Result<Vec<ReviewStats>, StoreError> {
        self.run(move |conn| {
            let mut statement = conn.prepare_cached(
                "SELECT trigger,
                     COUNT(*) FILTER (WHERE NOT canary),
                     COUNT(*) FILTER (WHERE NOT canary AND decision IS NOT NULL),
                     COUNT(*) FILTER (WHERE NOT canary AND decision IN ('edited', 'rejected')),
                     COUNT(*) FILTER (WHERE canary),
                     COUNT(*) FILTER (WHERE canary AND decision IS NOT NULL),
                     COUNT(*) FILTER (WHERE canary AND decision IN ('edited', 'rejected'))
                 FROM handoffs WHERE created_unix_ms >= ?1
                 GROUP BY trigger",
            )?;
            let mut stats = statement
                .query_map([since_unix_ms], |row| rows::review_stats(row))?
                .collect::<Result<Vec<_>, _>>()?;
            stats.sort_by(|a, b| a.trigger.cmp(&b.trigger));
            Ok(stats)
        })
        .await
    }

    async fn hold_create(
        &self,
        new: &NewHold,
        held_result: &Value,
        now_unix_ms: i64,
    ) -> Result<Hold, StoreError> {
        let (new, held_result) = (new.clone(), held_result.clone());
        self.write(move |tx| {
            let sql = format!(
                "INSERT INTO tool_holds (idempotency_key, tool, args, reason, conversation_id,
                     state, created_unix_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6)
                 ON CONFLICT (idempotency_key) DO NOTHING
                 RETURNING {HOLD_COLUMNS}"
            );
            let inserted = tx
                .query_row(
                    &sql,
                    params![
                        new.idempotency_key,
                        new.tool,
                        JsonText(&new.args),
                        new.reason,
                        new.conversation_id,
                        now_unix_ms
                    ],
                    |row| rows::hold(row),
                )
                .optional()?;
            let key = &new.idempotency_key;
            if let Some(created) = inserted {
                let held_result = rules::held_result(&held_result, created.id);
                set_key(tx, key, KeyChange::Held, &held_result, now_unix_ms)?;
                return Ok(created);
            }
            let sql = format!("SELECT {HOLD_COLUMNS} FROM tool_holds WHERE idempotency_key = ?1");
            Ok(tx.query_row(&sql, [key], |row| rows::hold(row))?)
        })
        .await
    }

    async fn hold_list(
        &self,
        state: Option<HoldState>,
        limit: i64,
    ) -> Result<Vec<Hold>, StoreError> {
        self.run(move |conn| {
            let sql = format!(
                "SELECT {HOLD_COLUMNS} FROM tool_holds
                 WHERE ?1 IS NULL OR state = ?1
                 ORDER BY id DESC LIMIT ?2"
            );
            let mut statement = conn.prepare(&sql)?;
            let state = state.map(HoldState::as_str);
            let holds = statement
                .query_map(params![state, rules::list_limit(limit)], |row| rows::hold(row))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(holds)
        })
        .await
    }

    async fn hold_get(&self, id: i64) -> Result<Option<Hold>, StoreError> {
        self.run(move |conn| get_hold(conn, id)).await
    }

    async fn hold_decide(
        &self,
        id: i64,
        decision: &Decision,
        by: &str,
        note: &str,
        now_unix_ms: i64,
    ) -> Result<Option<Hold>, StoreError> {
        let (decision, by, note) = (decision.clone(), by.to_owned(), note.to_owned());
        self.write(move |tx| {
            let Some(pending) = get_hold(tx, id)? else { return Ok(None) };
            if !rules::undecided(&pending) {
                return Ok(None);
            }
            let outbox_id = match rules::decision_effect(&pending, &decision) {
                DecisionEffect::Enqueue { item, queued_result } => {
                    Some(enqueue(tx, &item, queued_result, now_unix_ms)?.id)
                }
                DecisionEffect::Reject { rejected_result } => {
                    let key = &pending.idempotency_key;
                    set_key(tx, key, KeyChange::Rejected, rejected_result, now_unix_ms)?;
                    None
                }
            };
            let state = rules::decided_state(&decision);
            tx.execute(
                "UPDATE tool_holds SET state = ?2, decided_by = ?3, decision_note = ?4,
                     decided_unix_ms = ?5, outbox_id = ?6
                 WHERE id = ?1",
                params![id, state.as_str(), by, note, now_unix_ms, outbox_id],
            )?;
            get_hold(tx, id)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn synchronous(tx: &Connection) -> Result<i64, StoreError> {
        Ok(tx.query_row("PRAGMA synchronous", [], |row| row.get(0))?)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_wait_their_turn_in_order_and_a_panicking_one_fails_alone() {
        let store = Store::open_in_memory().unwrap();
        let tools = SqliteToolStore::new(Arc::new(store));
        tools
            .run(|conn| Ok(conn.execute_batch("CREATE TABLE seen (n INTEGER NOT NULL)")?))
            .await
            .unwrap();
        let panicked = tools.run(|_conn| -> Result<(), StoreError> { panic!("boom") }).await;
        match panicked {
            Err(StoreError::Task(text)) => assert!(text.contains("boom"), "{text}"),
            other => panic!("expected the panic as the call's error, got {other:?}"),
        }
        // Calls queued at once from many tasks all run, and those one task makes in order run
        // in that order.
        let mut tasks = Vec::new();
        for task in 0..8_i64 {
            let tools = tools.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0..25_i64 {
                    let value = task * 100 + n;
                    tools
                        .run(move |conn| {
                            Ok(conn.execute("INSERT INTO seen (n) VALUES (?1)", [value])?)
                        })
                        .await
                        .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let seen: Vec<i64> = tools
            .run(|conn| {
                let mut statement = conn.prepare("SELECT n FROM seen ORDER BY rowid")?;
                let rows = statement.query_map([], |row| row.get(0))?;
                Ok(rows.collect::<Result<Vec<i64>, _>>()?)
            })
            .await
            .unwrap();
        assert_eq!(seen.len(), 200);
        for task in 0..8_i64 {
            let own: Vec<i64> = seen.iter().copied().filter(|n| n / 100 == task).collect();
            assert_eq!(own, (0..25).map(|n| task * 100 + n).collect::<Vec<_>>());
        }
    }

    /// A store with a table `seen`, and its queue held by a call that waits for `go` to end,
    /// so that the calls made meanwhile queue up behind it.
    async fn held_store() -> (SqliteToolStore, std::sync::mpsc::Sender<()>) {
        let store = Store::open_in_memory().unwrap();
        let tools = SqliteToolStore::new(Arc::new(store));
        tools
            .run(|conn| Ok(conn.execute_batch("CREATE TABLE seen (n INTEGER NOT NULL)")?))
            .await
            .unwrap();
        let go = hold(&tools).await;
        (tools, go)
    }

    /// Hold `tools`' thread in a call until the returned sender sends.
    async fn hold(tools: &SqliteToolStore) -> std::sync::mpsc::Sender<()> {
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (running, started) = tokio::sync::oneshot::channel::<()>();
        let held = tools.clone();
        tokio::spawn(async move {
            held.run(move |_conn| {
                let _ = running.send(());
                Ok(wait.recv().ok())
            })
            .await
        });
        // The drain is inside the holding call (not merely about to be): what is queued from
        // here on stays queued until `go`.
        started.await.unwrap();
        go
    }

    /// Queue a bookkeeping call that inserts `n` into `seen`, then does `then` in the same
    /// transaction; wait until it is queued.
    async fn queue_insert(
        tools: &SqliteToolStore,
        n: i64,
        then: fn(&Connection) -> Result<(), StoreError>,
    ) -> tokio::task::JoinHandle<Result<(), StoreError>> {
        let queued = tools.queue.state().jobs.len();
        let own = tools.clone();
        let call = tokio::spawn(async move {
            own.write_relaxed(move |tx| {
                tx.execute("INSERT INTO seen (n) VALUES (?1)", [n])?;
                then(tx)
            })
            .await
        });
        while tools.queue.state().jobs.len() == queued {
            tokio::task::yield_now().await;
        }
        call
    }

    async fn seen(tools: &SqliteToolStore) -> Vec<i64> {
        tools
            .run(|conn| {
                let mut statement = conn.prepare("SELECT n FROM seen ORDER BY rowid")?;
                let rows = statement.query_map([], |row| row.get(0))?;
                Ok(rows.collect::<Result<Vec<i64>, _>>()?)
            })
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bookkeeping_queued_together_commits_once_and_a_failing_call_is_rolled_back_alone() {
        let (tools, go) = held_store().await;
        let fine: fn(&Connection) -> Result<(), StoreError> = |_tx| Ok(());
        let first = queue_insert(&tools, 1, fine).await;
        let refused = queue_insert(&tools, 2, |_tx| Err(StoreError::Task("refused".into()))).await;
        let panicked = queue_insert(&tools, 3, |_tx| panic!("boom")).await;
        let last = queue_insert(&tools, 4, fine).await;
        go.send(()).unwrap();
        first.await.unwrap().unwrap();
        let refused = refused.await.unwrap();
        assert!(
            matches!(&refused, Err(StoreError::Task(text)) if text == "refused"),
            "{refused:?}"
        );
        let panicked = panicked.await.unwrap();
        assert!(
            matches!(&panicked, Err(StoreError::Task(text)) if text.contains("boom")),
            "{panicked:?}"
        );
        last.await.unwrap().unwrap();
        assert_eq!(seen(&tools).await, vec![1, 4], "the failed calls' writes are rolled back");
        let state = tools.queue.state();
        assert_eq!((state.shared_commits, state.shared_calls), (1, 4), "one commit for the four");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shared_calls_run_once_and_all_run_again_only_when_one_of_them_fails() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let counted: fn(&Connection) -> Result<(), StoreError> = |_tx| {
            RUNS.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        let (tools, go) = held_store().await;
        let calls = [
            queue_insert(&tools, 1, counted).await,
            queue_insert(&tools, 2, counted).await,
            queue_insert(&tools, 3, counted).await,
        ];
        go.send(()).unwrap();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        assert_eq!(RUNS.load(Ordering::SeqCst), 3, "no call failed: each ran once");

        let go = hold(&tools).await;
        let first = queue_insert(&tools, 4, counted).await;
        let refused = queue_insert(&tools, 5, |tx| {
            // Written, then refused: what it wrote goes with it.
            RUNS.fetch_add(1, Ordering::SeqCst);
            tx.execute("INSERT INTO seen (n) VALUES (50)", [])?;
            Err(StoreError::Task("refused".into()))
        })
        .await;
        let last = queue_insert(&tools, 6, counted).await;
        go.send(()).unwrap();
        first.await.unwrap().unwrap();
        assert!(refused.await.unwrap().is_err());
        last.await.unwrap().unwrap();
        // 4 and the refused call ran, failed, and ran again in savepoints with 6 after them.
        assert_eq!(RUNS.load(Ordering::SeqCst), 3 + 2 + 2 + 1);
        assert_eq!(seen(&tools).await, vec![1, 2, 3, 4, 6]);
        let state = tools.queue.state();
        assert_eq!((state.shared_commits, state.shared_calls), (2, 6));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_behind_a_lost_transaction_go_in_the_next_and_those_before_it_fail() {
        let (tools, go) = held_store().await;
        let fine: fn(&Connection) -> Result<(), StoreError> = |_tx| Ok(());
        let before = queue_insert(&tools, 1, fine).await;
        // What an I/O error or a full disk does: SQLite rolls the whole transaction back.
        let lost = queue_insert(&tools, 2, |tx| {
            tx.execute_batch("ROLLBACK")?;
            Err(StoreError::Task("lost".into()))
        })
        .await;
        let after = queue_insert(&tools, 3, fine).await;
        go.send(()).unwrap();
        let before = before.await.unwrap();
        assert!(
            matches!(&before, Err(StoreError::Task(text)) if text.contains("did not commit")),
            "a call whose writes were rolled back hears so: {before:?}"
        );
        assert!(matches!(lost.await.unwrap(), Err(StoreError::Task(text)) if text == "lost"));
        after.await.unwrap().unwrap();
        assert_eq!(seen(&tools).await, vec![3]);
        let state = tools.queue.state();
        assert_eq!((state.shared_commits, state.shared_calls), (1, 1));
    }

    #[tokio::test]
    async fn an_answered_model_call_returns_once_queued_and_every_later_call_sees_it() {
        let (tools, go) = held_store().await;
        let done = ModelCallDone {
            run_id: "r1",
            conversation_id: None,
            spender: "r1",
            micro_usd: Some(250),
            draft: Some("your order ships today"),
            now_unix_ms: 1_000,
        };
        // The store's thread is busy: a call that waited for its commit is still pending after
        // its first poll.
        let returned = tokio::select! {
            biased;
            returned = tools.run_model_call_done(&done) => Some(returned),
            () = std::future::ready(()) => None,
        };
        assert!(matches!(returned, Some(Ok(()))), "{returned:?}");
        let later = tools.clone();
        let read = tokio::spawn(async move {
            let run = later.run_get("r1").await.unwrap().unwrap();
            (run.draft, later.spend_of("r1").await.unwrap())
        });
        go.send(()).unwrap();
        let (draft, spent) = read.await.unwrap();
        assert_eq!(draft.as_deref(), Some("your order ships today"));
        assert_eq!(spent, 250);
    }

    #[tokio::test]
    async fn settling_returns_once_what_was_queued_unwaited_is_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        let tools = SqliteToolStore::new(Arc::new(Store::open(&path).unwrap()));
        let go = hold(&tools).await;
        let done = ModelCallDone {
            run_id: "r1",
            conversation_id: None,
            spender: "r1",
            micro_usd: Some(250),
            draft: None,
            now_unix_ms: 1_000,
        };
        tools.run_model_call_done(&done).await.unwrap();
        let settling = tokio::spawn({
            let tools = tools.clone();
            async move { tools.settle().await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!settling.is_finished(), "the spend is still queued behind the held call");
        go.send(()).unwrap();
        settling.await.unwrap().unwrap();
        // Committed, not only queued: another connection to the file reads it.
        let other = SqliteToolStore::new(Arc::new(Store::open(&path).unwrap()));
        assert_eq!(other.spend_of("r1").await.unwrap(), 250);
    }

    #[tokio::test]
    async fn a_cached_statement_is_not_prepared_again_when_the_values_bound_to_it_change() {
        let tools = SqliteToolStore::new(Arc::new(Store::open_in_memory().unwrap()));
        for (run, since) in [("r1", 0), ("r2", 5_000), ("r3", 10_000)] {
            assert!(tools.run_evidence(run, since).await.unwrap().is_empty());
        }
        // Without the planner's stability guarantee SQLite prepares this one again for every
        // new run id (its plan could depend on the value), parsing it at every model call.
        let prepared_again = tools
            .run(|conn| {
                let statement = conn.prepare_cached(EVIDENCE_SINCE)?;
                Ok(statement.get_status(rusqlite::StatementStatus::RePrepare))
            })
            .await
            .unwrap();
        assert_eq!(prepared_again, 0);
    }

    #[test]
    fn a_drain_its_runtime_never_ran_lets_the_waiting_calls_fail() {
        let store = Arc::new(Store::open_in_memory().unwrap());
        let queue = Arc::new(Queue::default());
        let (done, mut result) = tokio::sync::oneshot::channel::<()>();
        queue.state().jobs.push_back(Job::Alone(Box::new(move |_store| {
            let _ = done.send(());
        })));
        queue.state().draining = true;
        drop(Drainer { queue: Arc::clone(&queue), store, done: false });
        assert!(!queue.state().draining, "the next call starts a drain of its own");
        assert!(
            matches!(result.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Closed)),
            "the waiting call fails rather than waits"
        );
    }

    #[tokio::test]
    async fn bookkeeping_commits_without_waiting_for_the_disk_and_leaves_every_other_write_full() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("rein.sqlite")).unwrap();
        let tools = SqliteToolStore::new(Arc::new(store));
        assert_eq!(tools.write(|tx| synchronous(tx)).await.unwrap(), 2, "FULL");
        assert_eq!(
            tools.write_relaxed(|tx| synchronous(tx)).await.unwrap(),
            1,
            "NORMAL for this one"
        );
        assert_eq!(tools.write(|tx| synchronous(tx)).await.unwrap(), 2, "and FULL again after it");
        let failed = tools
            .write_relaxed(|_tx: &Tx<'_>| -> Result<(), StoreError> {
                Err(StoreError::Task("refused".into()))
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(
            tools.write(|tx| synchronous(tx)).await.unwrap(),
            2,
            "FULL again after a failed one"
        );
        // The level stays relaxed from one bookkeeping commit to the next, and whatever takes
        // the connection otherwise (a read, the store's own calls) finds it `FULL`.
        assert_eq!(tools.write_relaxed(|tx| synchronous(tx)).await.unwrap(), 1);
        assert_eq!(tools.write_relaxed(|tx| synchronous(tx)).await.unwrap(), 1);
        let level = |conn: &mut Connection| -> Result<i64, StoreError> {
            Ok(conn.query_row("PRAGMA synchronous", [], |row| row.get(0))?)
        };
        assert_eq!(tools.run(level).await.unwrap(), 2, "FULL for a read after them");
        tools.write_relaxed(|_tx: &Tx<'_>| Ok(())).await.unwrap();
        let direct: rusqlite::Result<i64> =
            tools.store.conn().query_row("PRAGMA synchronous", [], |row| row.get(0));
        assert_eq!(direct.unwrap(), 2, "FULL for the store's own calls");
    }

    /// A model call of run `run` at `now` (ms), the route's default limits.
    async fn model_call(tools: &SqliteToolStore, run: &str, now: i64) -> ModelCallStep {
        let note = RunNote::default();
        let call = ModelCall {
            run_id: run,
            conversation_id: None,
            limits: rein_core::run::RunLimits { max_model_calls: 100, ..Default::default() },
            spender: run,
            note: &note,
            now_unix_ms: now,
            idle_ms: 600_000,
        };
        tools.run_model_call(&call).await.unwrap()
    }

    /// Run `r1`'s answered call at `now_unix_ms`, its draft "it ships today".
    fn drafted(now_unix_ms: i64) -> ModelCallDone<'static> {
        ModelCallDone {
            run_id: "r1",
            conversation_id: None,
            spender: "r1",
            micro_usd: None,
            draft: Some("it ships today"),
            now_unix_ms,
        }
    }

    async fn model_calls(tools: &SqliteToolStore, run: &str) -> i64 {
        tools.run_get(run).await.unwrap().unwrap().model_calls
    }

    #[tokio::test]
    async fn a_runs_next_call_finds_its_row_kept_beside_the_connection() {
        let tools = SqliteToolStore::new(Arc::new(Store::open_in_memory().unwrap()));
        for now in [1_000, 2_000, 3_000] {
            assert_eq!(model_call(&tools, "r1", now).await.stopped, None);
        }
        assert_eq!(model_calls(&tools, "r1").await, 3);
        assert_eq!(tools.store.run_cache().hits_and_misses(), (2, 1), "read once, then kept");
    }

    #[tokio::test]
    async fn a_run_written_by_another_connection_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        let ours = SqliteToolStore::new(Arc::new(Store::open(&path).unwrap()));
        let theirs = SqliteToolStore::new(Arc::new(Store::open(&path).unwrap()));
        model_call(&ours, "r1", 1_000).await;
        model_call(&theirs, "r1", 2_000).await;
        model_call(&theirs, "r1", 3_000).await;
        model_call(&ours, "r1", 4_000).await;
        assert_eq!(model_calls(&ours, "r1").await, 4, "their two calls counted");
        // Our draft written on the row they have counted a call on since: our kept row takes
        // the draft, and our next call still reads the row again.
        model_call(&theirs, "r1", 4_200).await;
        ours.run_model_call_done(&drafted(4_400)).await.unwrap();
        model_call(&ours, "r1", 4_600).await;
        let run = ours.run_get("r1").await.unwrap().unwrap();
        assert_eq!((run.model_calls, run.draft.as_deref()), (6, Some("it ships today")));
        theirs.run_stop("r1", "halted", 5_000).await.unwrap();
        let step = model_call(&ours, "r1", 6_000).await;
        assert_eq!(step.stopped, Some(("halted".to_string(), false)), "their stop seen");
    }

    #[tokio::test]
    async fn every_write_of_a_runs_row_keeps_the_kept_row_true() {
        let tools = SqliteToolStore::new(Arc::new(Store::open_in_memory().unwrap()));
        model_call(&tools, "r1", 1_000).await;
        tools.run_model_call_done(&drafted(1_500)).await.unwrap();
        model_call(&tools, "r1", 2_000).await;
        let note = RunNote { message: Some("where is it?".into()), ..RunNote::default() };
        tools.run_note("r1", Some("c1"), &note, 2_500).await.unwrap();
        model_call(&tools, "r1", 3_000).await;
        let run = tools.run_get("r1").await.unwrap().unwrap();
        assert_eq!(run.draft.as_deref(), Some("it ships today"), "the draft not written over");
        assert_eq!(run.message.as_deref(), Some("where is it?"), "the note not written over");
        assert_eq!(run.conversation_id.as_deref(), Some("c1"));
        assert_eq!(run.model_calls, 3);
        tools.run_stop("r1", "halted", 3_500).await.unwrap();
        let step = model_call(&tools, "r1", 4_000).await;
        assert_eq!(step.stopped, Some(("halted".to_string(), false)), "the stop seen");
        assert_eq!(tools.runs_prune(10_000).await.unwrap(), 1);
        assert_eq!(model_call(&tools, "r1", 10_500).await.stopped, None, "afresh after the prune");
        assert_eq!(model_calls(&tools, "r1").await, 1);
    }

    #[tokio::test]
    async fn a_counts_update_that_finds_no_row_writes_the_whole_row() {
        let tools = SqliteToolStore::new(Arc::new(Store::open_in_memory().unwrap()));
        model_call(&tools, "r1", 1_000).await;
        let change = tools
            .write_relaxed(|tx| {
                let (row, change) =
                    count_run(tx, "r1", None, RunEvent::ModelCall, (2_000, 600_000))?;
                // Gone behind the kept row's back (no statement of the store does this).
                tx.execute("DELETE FROM runs WHERE run_id = 'r1'", [])?;
                write_run(tx, "r1", row, change)?;
                Ok(change)
            })
            .await
            .unwrap();
        assert_eq!(change, runs::Change::Counts, "a kept row's call updates its counts");
        assert_eq!(model_calls(&tools, "r1").await, 2, "written whole when no row was updated");
    }

    /// Queue `call` on `tools`' thread (held) and wait until it is queued.
    async fn queued<T: Send + 'static>(
        tools: &SqliteToolStore,
        call: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        let queued = tools.queue.state().jobs.len();
        let call = tokio::spawn(call);
        while tools.queue.state().jobs.len() == queued {
            tokio::task::yield_now().await;
        }
        call
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_runs_row_written_by_a_call_rolled_back_is_not_kept() {
        let (tools, go) = held_store().await;
        // Counted in the first pass of the transaction, which a failing call behind it rolls
        // back: counted again in the second, from the file.
        let own = tools.clone();
        let counted = queued(&tools, async move { model_call(&own, "r1", 1_000).await }).await;
        let refused = queue_insert(&tools, 1, |_tx| Err(StoreError::Task("refused".into()))).await;
        go.send(()).unwrap();
        counted.await.unwrap();
        assert!(refused.await.unwrap().is_err());
        assert_eq!(model_calls(&tools, "r1").await, 1);

        // A call that counts the run and then fails, rolled back to its savepoint: the run's
        // next call in the same transaction reads the row from the file.
        let go = hold(&tools).await;
        let own = tools.clone();
        let failing = queued(&tools, async move {
            own.write_relaxed(|tx| {
                let (row, change) =
                    count_run(tx, "r1", None, RunEvent::ModelCall, (2_000, 600_000))?;
                write_run(tx, "r1", row, change)?;
                Err::<(), _>(StoreError::Task("refused after counting".into()))
            })
            .await
        })
        .await;
        let own = tools.clone();
        let counted = queued(&tools, async move { model_call(&own, "r1", 3_000).await }).await;
        go.send(()).unwrap();
        assert!(failing.await.unwrap().is_err());
        counted.await.unwrap();
        assert_eq!(model_calls(&tools, "r1").await, 2);
    }

    fn lingering_tools(store: Store, linger: std::time::Duration) -> SqliteToolStore {
        SqliteToolStore { store: Arc::new(store), queue: Arc::new(Queue::lingering(linger)) }
    }

    fn a_draft(now_unix_ms: i64) -> ModelCallDone<'static> {
        ModelCallDone {
            run_id: "r1",
            conversation_id: None,
            spender: "r1",
            micro_usd: Some(250),
            draft: Some("it ships today"),
            now_unix_ms,
        }
    }

    /// Wait until `tools`' drain lingers.
    async fn lingers(tools: &SqliteToolStore) {
        let lingering = async {
            while !tools.queue.state().lingering {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(PROMPTLY, lingering).await.expect("the drain lingers");
    }

    /// Long enough that nothing in these tests ends a linger but what they queue.
    const A_MINUTE: std::time::Duration = std::time::Duration::from_secs(60);
    /// What ending a linger may take at most here (not a measure of speed: without the ring
    /// the call would wait out the minute).
    const PROMPTLY: std::time::Duration = std::time::Duration::from_secs(20);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bookkeeping_nobody_waits_for_lingers_and_shares_the_next_calls_commit() {
        let tools = lingering_tools(Store::open_in_memory().unwrap(), A_MINUTE);
        tools.run_model_call_done(&a_draft(1_000)).await.unwrap();
        lingers(&tools).await;
        let waited = tools.write_relaxed(|tx| spend_of(tx, "r1"));
        let spent = tokio::time::timeout(PROMPTLY, waited).await.expect("the linger ended");
        assert_eq!(spent.unwrap(), 250, "in the same transaction, after the spend");
        // Behind the drain's count of the commit (it counts after telling the callers).
        tools.settle().await.unwrap();
        let state = tools.queue.state();
        assert_eq!((state.shared_commits, state.shared_calls), (1, 2), "one commit for the two");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_is_not_bookkeeping_ends_the_linger_and_runs_after_its_commit() {
        let tools = lingering_tools(Store::open_in_memory().unwrap(), A_MINUTE);
        tools.run_model_call_done(&a_draft(1_000)).await.unwrap();
        lingers(&tools).await;
        let read = tokio::time::timeout(PROMPTLY, tools.run_get("r1")).await.expect("ended");
        assert_eq!(read.unwrap().unwrap().draft.as_deref(), Some("it ships today"));
        let state = tools.queue.state();
        assert_eq!((state.shared_commits, state.shared_calls), (1, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bookkeeping_nobody_waits_for_commits_when_nothing_comes_to_share_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        let linger = std::time::Duration::from_millis(20);
        let tools = lingering_tools(Store::open(&path).unwrap(), linger);
        tools.run_model_call_done(&a_draft(1_000)).await.unwrap();
        // Another connection to the file sees it once committed; nothing else is queued here.
        let other = SqliteToolStore::new(Arc::new(Store::open(&path).unwrap()));
        let seen = async {
            while other.spend_of("r1").await.unwrap() != 250 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(PROMPTLY, seen).await.expect("committed after the linger");
        tools.settle().await.unwrap();
        assert_eq!(tools.queue.state().shared_commits, 1);
    }
}
