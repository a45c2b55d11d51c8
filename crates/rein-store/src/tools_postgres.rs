//! [`ToolStore`] on Postgres, for several gateway replicas sharing one queue: a pool of
//! `tokio-postgres` connections (no TLS yet), its own forward-only migrations in `rein_schema`
//! applied under a transaction-scoped advisory lock (so replicas starting together migrate once),
//! and outbox claims that lock their rows with `FOR UPDATE SKIP LOCKED`, so two replicas never
//! claim the same item. JSON is stored as text, which takes every JSON value (`jsonb` refuses
//! `\u0000`) and gives it back unchanged.
//!
//! Errors become [`StoreError::Postgres`] with the text scrubbed of the URL's password.
//!
//! This file holds what is Postgres's own: the SQL (row locks included), how values are bound,
//! and the transactions. Reading a row and deciding what a call does with it come from
//! `tools::rows` and `tools::rules`, which the SQLite backend shares.

mod failure;
mod schema;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Transaction,
};
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use self::failure::{Failure, Redaction, corrupt, describe};
use rein_core::{KillFlip, RouteToFlip};

use crate::StoreError;
use crate::calls::{
    CallRow, CallsPruned, CallsRetention, RecordedCall, RecordedTool, SUMMARY_COLUMNS, TraceFilter,
    TraceSummary, Verdict, VerdictFilter,
};
use crate::handoffs::{
    Handoff, HandoffDelivery, HandoffFilter, NewHandoff, ReviewDecision, ReviewStats,
};
use crate::runs::{
    self, ModelCall, ModelCallDone, ModelCallStep, RunCounts, RunEvent, RunInfo, RunNote,
    RunToolCall,
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
use rein_core::sli::CallRecord;
use rein_core::trace::Trace;

/// Connections per store (per gateway replica).
const POOL_SIZE: usize = 16;

/// How long connecting may take, and how long a call may wait for a free pooled connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const POOL_WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The tool store in a Postgres database.
pub struct PostgresToolStore {
    pool: Pool,
    redaction: Redaction,
    /// Hosts, ports and database, for `Debug` (never the password).
    target: String,
}

impl fmt::Debug for PostgresToolStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresToolStore").field("target", &self.target).finish_non_exhaustive()
    }
}

impl Columns for Row {
    type Error = Failure;

    fn int(&self, index: usize) -> Result<i64, Failure> {
        Ok(self.try_get(index)?)
    }

    fn int_opt(&self, index: usize) -> Result<Option<i64>, Failure> {
        Ok(self.try_get(index)?)
    }

    fn text(&self, index: usize) -> Result<String, Failure> {
        Ok(self.try_get(index)?)
    }

    fn text_opt(&self, index: usize) -> Result<Option<String>, Failure> {
        Ok(self.try_get(index)?)
    }

    fn flag(&self, index: usize) -> Result<bool, Failure> {
        Ok(self.try_get(index)?)
    }

    fn unreadable(index: usize, problem: Unreadable) -> Failure {
        match problem {
            Unreadable::Json(error) => corrupt(format!("JSON column {index}: {error}")),
            Unreadable::NullJson => corrupt(format!("JSON column {index} is NULL")),
            Unreadable::State(_) => corrupt(problem.to_string()),
        }
    }
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Run `sql` (prepared once per connection) and return its rows.
async fn query(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<Row>, Failure> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query(&statement, params).await?)
}

async fn query_opt(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<Row>, Failure> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query_opt(&statement, params).await?)
}

async fn execute(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<u64, Failure> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.execute(&statement, params).await?)
}

/// Rewrite the key's record (if it has one) as `change` says, with `result`, lease released.
async fn set_key(
    tx: &Transaction<'_>,
    key: &str,
    change: KeyChange,
    result: &Value,
    now_unix_ms: i64,
) -> Result<(), Failure> {
    execute(
        tx,
        "UPDATE tool_keys SET state = $2, result = $3, lease_until_unix_ms = NULL,
             updated_unix_ms = $4
         WHERE key = $1",
        &[&key, &change.key_state().as_str(), &result.to_string(), &now_unix_ms],
    )
    .await?;
    Ok(())
}

/// Add a pending item for `key` and mark the key `Queued`, or return the key's existing item.
async fn enqueue(
    tx: &Transaction<'_>,
    new: &NewOutboxItem,
    queued_result: &Value,
    now_unix_ms: i64,
) -> Result<OutboxItem, Failure> {
    let key = new.idempotency_key.as_str();
    let sql = format!(
        "INSERT INTO tool_outbox (idempotency_key, tool, args, queued_result, state, attempts,
             created_unix_ms, next_attempt_unix_ms, conversation_id, outcome_unknown, review)
         VALUES ($1, $2, $3, $4, 'pending', 0, $5, $5, $6, $7, $8)
         ON CONFLICT (idempotency_key) DO NOTHING
         RETURNING {OUTBOX_COLUMNS}"
    );
    let unknown = rules::enqueued_outcome_unknown(new);
    let params: Params<'_> = &[
        &key,
        &new.tool,
        &new.args.to_string(),
        &queued_result.to_string(),
        &now_unix_ms,
        &new.conversation_id,
        &unknown,
        &new.review,
    ];
    if let Some(row) = query_opt(tx, &sql, params).await? {
        set_key(tx, key, KeyChange::Enqueued, queued_result, now_unix_ms).await?;
        return rows::outbox_item(&row);
    }
    let sql = format!("SELECT {OUTBOX_COLUMNS} FROM tool_outbox WHERE idempotency_key = $1");
    let row = query_opt(tx, &sql, &[&key]).await?;
    rows::outbox_item(&row.ok_or_else(|| corrupt(format!("key `{key}` lost its outbox item")))?)
}

/// Where an item stands, and its queued result, locked for the rest of the transaction.
async fn lock_item(
    tx: &Transaction<'_>,
    id: i64,
) -> Result<Option<(ItemStanding, Value)>, Failure> {
    let sql = format!(
        "SELECT {STANDING_COLUMNS}, queued_result FROM tool_outbox WHERE id = $1 FOR UPDATE"
    );
    let row = query_opt(tx, &sql, &[&id]).await?;
    row.map(|row| Ok((rows::item_standing(&row)?, rows::json(&row, 4)?))).transpose()
}

impl PostgresToolStore {
    /// Connect to the database at `url` (`postgres://user:password@host:port/database`) and
    /// create or update the schema. Replicas may call this at the same moment.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let mut redaction = Redaction::from_url(url);
        let config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
            StoreError::Postgres(redaction.scrub(&format!("bad connection URL: {}", describe(&e))))
        })?;
        redaction.add(config.get_password().map(|p| String::from_utf8_lossy(p).into_owned()));
        let target = target(&config);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .wait_timeout(Some(POOL_WAIT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Postgres(redaction.scrub(&describe(&e))))?;
        let store = Self { pool, redaction, target };
        store.guard(schema::migrate(&store.pool)).await?;
        Ok(store)
    }

    /// The schema version of the database.
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let row = query_opt(&client, "SELECT MAX(version) FROM rein_schema", &[]).await?;
            let version: Option<i64> = match row {
                Some(row) => row.try_get(0)?,
                None => None,
            };
            Ok(version.unwrap_or(0))
        })
        .await
    }

    /// Await `work`, turning its failure into a [`StoreError`] without the password.
    async fn guard<T>(
        &self,
        work: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, StoreError> {
        work.await.map_err(|failure| match failure {
            Failure::Store(error) => error,
            Failure::Postgres(text) => StoreError::Postgres(self.redaction.scrub(&text)),
        })
    }

    /// Run `work` on a transaction of its own, which it commits (dropped uncommitted, it rolls
    /// back), with its failure turned into a [`StoreError`] as [`Self::guard`] does.
    async fn transaction<T>(
        &self,
        work: impl AsyncFnOnce(Transaction<'_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            work(tx).await
        })
        .await
    }

    /// [`Self::transaction`] for bookkeeping that guards or measures (a run's counts, notes,
    /// evidence and tool log, a conversation's spend and questions, call records): its commit
    /// does not wait for the WAL to reach the disk (`SET LOCAL synchronous_commit = off`, for
    /// this transaction only). It survives rein's crash and the server's, and only a crash of
    /// the server's machine in the moments after it can lose it; what must never be lost (the
    /// outbox, keys, hand-offs, levers) stays on [`Self::transaction`].
    async fn transaction_relaxed<T>(
        &self,
        work: impl AsyncFnOnce(Transaction<'_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        self.transaction(async |tx| {
            tx.batch_execute("SET LOCAL synchronous_commit = off").await?;
            work(tx).await
        })
        .await
    }

    /// Settle one pending item: `sql` updates it and returns its key (no row: it was no longer
    /// pending), and that key is rewritten as `change` says, in the same transaction. Whether the
    /// item was changed.
    async fn settle(
        &self,
        sql: &str,
        params: Params<'_>,
        change: KeyChange,
        result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        self.transaction(async |tx| {
            let Some(row) = query_opt(&tx, sql, params).await? else { return Ok(false) };
            let key: &str = row.try_get(0)?;
            set_key(&tx, key, change, result, now_unix_ms).await?;
            tx.commit().await?;
            Ok(true)
        })
        .await
    }
}

/// Count `event` in run `run_id` (of `conversation_id`) at `at` (now, the idle time) inside
/// `tx`: the run's row after it, not yet written ([`write_run`]). The row exists from here on
/// (made if need be) and is locked for the rest of the transaction, so two replicas counting
/// one run take turns. A run that starts afresh has its per-call counts and tool log deleted.
async fn count_run(
    tx: &Transaction<'_>,
    run_id: &str,
    conversation_id: Option<&str>,
    event: RunEvent<'_>,
    (now_unix_ms, idle_ms): (i64, i64),
) -> Result<runs::RunRow, Failure> {
    static SELECT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let inserted = execute(
        tx,
        "INSERT INTO runs (run_id, conversation_id, first_unix_ms, touched_unix_ms,
             model_calls, tool_calls, same_error)
         VALUES ($1, $2, $3, $3, 0, 0, 0) ON CONFLICT (run_id) DO NOTHING",
        &[&run_id, &conversation_id, &now_unix_ms],
    )
    .await?;
    let select = SELECT
        .get_or_init(|| format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = $1 FOR UPDATE"));
    let stored = match query_opt(tx, select, &[&run_id]).await? {
        Some(row) if inserted == 0 => Some(rows::run_row(&row)?),
        _ => None,
    };
    let (row, fresh) = runs::step(stored, conversation_id, event, now_unix_ms, idle_ms);
    if fresh {
        execute(tx, "DELETE FROM run_calls WHERE run_id = $1", &[&run_id]).await?;
        execute(tx, "DELETE FROM run_tool_log WHERE run_id = $1", &[&run_id]).await?;
    }
    Ok(row)
}

/// Write run `run_id`'s whole row (made by [`count_run`] in the same transaction).
async fn write_run(tx: &Transaction<'_>, run_id: &str, row: &runs::RunRow) -> Result<(), Failure> {
    let coverage = row.note.coverage.as_ref().map(Value::to_string);
    execute(
        tx,
        "UPDATE runs SET conversation_id = $2, first_unix_ms = $3, touched_unix_ms = $4,
             model_calls = $5, tool_calls = $6, last_error = $7, same_error = $8,
             stopped = $9, route = $10, message = $11, draft = $12, coverage = $13
         WHERE run_id = $1",
        &[
            &run_id,
            &row.conversation_id,
            &row.first_unix_ms,
            &row.touched_unix_ms,
            &row.model_calls,
            &row.tool_calls,
            &row.last_error,
            &row.same_error,
            &row.stopped,
            &row.note.route,
            &row.note.message,
            &row.note.draft,
            &coverage,
        ],
    )
    .await?;
    Ok(())
}

/// Write `note` on run `run_id`'s row in one statement ([`ToolStore::run_note`]).
async fn note_run(
    client: &impl GenericClient,
    run_id: &str,
    conversation_id: Option<&str>,
    note: &RunNote,
    now_unix_ms: i64,
) -> Result<(), Failure> {
    let coverage = note.coverage.as_ref().map(Value::to_string);
    execute(
        client,
        "INSERT INTO runs (run_id, conversation_id, first_unix_ms, touched_unix_ms,
             model_calls, tool_calls, same_error, route, message, draft, coverage)
         VALUES ($1, $2, $3, $3, 0, 0, 0, $4, $5, $6, $7)
         ON CONFLICT (run_id) DO UPDATE SET
             conversation_id = COALESCE(runs.conversation_id, EXCLUDED.conversation_id),
             touched_unix_ms = GREATEST(runs.touched_unix_ms, EXCLUDED.touched_unix_ms),
             route = COALESCE(EXCLUDED.route, runs.route),
             message = COALESCE(EXCLUDED.message, runs.message),
             draft = COALESCE(EXCLUDED.draft, runs.draft),
             coverage = COALESCE(EXCLUDED.coverage, runs.coverage)",
        &[
            &run_id,
            &conversation_id,
            &now_unix_ms,
            &note.route,
            &note.message,
            &note.draft,
            &coverage,
        ],
    )
    .await?;
    Ok(())
}

/// Add `micro_usd` to `conversation_id`'s spend in one statement: the total after it.
async fn add_spend(
    client: &impl GenericClient,
    conversation_id: &str,
    micro_usd: i64,
    now_unix_ms: i64,
) -> Result<i64, Failure> {
    let row = query_opt(
        client,
        "INSERT INTO conversation_spend (conversation_id, micro_usd, touched_unix_ms)
         VALUES ($1, $2, $3)
         ON CONFLICT (conversation_id) DO UPDATE SET
             micro_usd = conversation_spend.micro_usd + EXCLUDED.micro_usd,
             touched_unix_ms = GREATEST(conversation_spend.touched_unix_ms,
                                        EXCLUDED.touched_unix_ms)
         RETURNING micro_usd",
        &[&conversation_id, &micro_usd, &now_unix_ms],
    )
    .await?;
    match row {
        Some(row) => Ok(row.try_get(0)?),
        None => Err(corrupt(format!("conversation `{conversation_id}` spent nothing"))),
    }
}

/// `conversation_id`'s spend so far (0 for one never seen).
async fn spend_of(client: &impl GenericClient, conversation_id: &str) -> Result<i64, Failure> {
    let row = query_opt(
        client,
        "SELECT micro_usd FROM conversation_spend WHERE conversation_id = $1",
        &[&conversation_id],
    )
    .await?;
    Ok(row.map(|row| row.try_get(0)).transpose()?.unwrap_or(0))
}

/// `host:port/database` of a connection config, for `Debug`.
fn target(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(index, host)| {
            let name = match host {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            };
            let port = config.get_ports().get(index).or(config.get_ports().first());
            port.map_or(name.clone(), |port| format!("{name}:{port}"))
        })
        .collect();
    format!("{}/{}", hosts.join(","), config.get_dbname().unwrap_or(""))
}

#[async_trait]
impl ToolStore for PostgresToolStore {
    async fn key_begin(
        &self,
        key: &str,
        tool: &str,
        args_hash: &str,
        now_unix_ms: i64,
        lease_ms: i64,
    ) -> Result<KeyBegin, StoreError> {
        self.transaction(async |tx| {
            let lease_until = rules::lease_end(now_unix_ms, lease_ms);
            let select = format!("SELECT {KEY_COLUMNS} FROM tool_keys WHERE key = $1 FOR UPDATE");
            // A key abandoned between the insert and the read is simply tried again.
            for _ in 0..3 {
                let inserted = execute(
                    &tx,
                    "INSERT INTO tool_keys (key, tool, args_hash, state, lease_until_unix_ms,
                         created_unix_ms, updated_unix_ms)
                     VALUES ($1, $2, $3, 'in_flight', $4, $5, $5)
                     ON CONFLICT (key) DO NOTHING",
                    &[&key, &tool, &args_hash, &lease_until, &now_unix_ms],
                )
                .await?;
                if inserted == 1 {
                    tx.commit().await?;
                    return Ok(KeyBegin::Fresh);
                }
                let Some(row) = query_opt(&tx, &select, &[&key]).await? else { continue };
                let record = rows::key_record(&row)?;
                return match rules::key_begin_step(record, tool, args_hash, now_unix_ms) {
                    KeyStep::Answer(answer) => Ok(answer),
                    KeyStep::TakeOver => {
                        execute(
                            &tx,
                            "UPDATE tool_keys SET lease_until_unix_ms = $2, updated_unix_ms = $3
                             WHERE key = $1",
                            &[&key, &lease_until, &now_unix_ms],
                        )
                        .await?;
                        tx.commit().await?;
                        Ok(KeyBegin::TakenOver)
                    }
                    KeyStep::Stored(state) => {
                        Ok(rules::stored_answer(key, state, rows::key_result(&row)?)?)
                    }
                };
            }
            Err(Failure::Postgres(format!("key `{key}` kept vanishing while it was begun")))
        })
        .await
    }

    async fn key_finish(
        &self,
        key: &str,
        result: &Value,
        now_unix_ms: i64,
    ) -> Result<(), StoreError> {
        self.transaction(async |tx| {
            set_key(&tx, key, KeyChange::Finished, result, now_unix_ms).await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    async fn key_abandon(&self, key: &str) -> Result<(), StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            execute(
                &client,
                "DELETE FROM tool_keys WHERE key = $1 AND state = 'in_flight'",
                &[&key],
            )
            .await?;
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
        let pattern = format!("{prefix}%");
        self.guard(async {
            let client = self.pool.get().await?;
            let row = query_opt(
                &client,
                "SELECT key FROM tool_keys WHERE tool = $1 AND args_hash = $2 AND key LIKE $3 AND created_unix_ms >= $4 ORDER BY created_unix_ms DESC, key LIMIT 1",
                &[&tool, &args_hash, &pattern, &since_unix_ms],
            )
            .await?;
            Ok(row.map(|row| row.get::<_, String>(0)))
        })
        .await
    }

    async fn outbox_enqueue(
        &self,
        item: &NewOutboxItem,
        queued_result: &Value,
        now_unix_ms: i64,
    ) -> Result<OutboxItem, StoreError> {
        self.transaction(async |tx| {
            let item = enqueue(&tx, item, queued_result, now_unix_ms).await?;
            tx.commit().await?;
            Ok(item)
        })
        .await
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
        self.guard(async {
            let lease_until = rules::lease_end(now_unix_ms, lease_ms);
            let client = self.pool.get().await?;
            // The subquery locks the rows it picks and skips rows another claim has locked; a
            // row that claim committed is re-checked against the lease filter before it is
            // locked here, so it drops out.
            let sql = format!(
                "UPDATE tool_outbox
                 SET lease_owner = $1, lease_until_unix_ms = $3, attempts = attempts + 1,
                     outcome_unknown = outcome_unknown OR lease_owner IS NOT NULL
                 WHERE id IN (
                     SELECT id FROM tool_outbox
                     WHERE state = 'pending' AND NOT review AND next_attempt_unix_ms <= $2
                       AND (lease_until_unix_ms IS NULL OR lease_until_unix_ms <= $2)
                     ORDER BY id
                     LIMIT $4
                     FOR UPDATE SKIP LOCKED
                 )
                 RETURNING {OUTBOX_COLUMNS}"
            );
            let params: Params<'_> = &[&owner, &now_unix_ms, &lease_until, &limit];
            let claimed = query(&client, &sql, params).await?;
            let mut items = claimed.iter().map(rows::outbox_item).collect::<Result<Vec<_>, _>>()?;
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
        let sql = "UPDATE tool_outbox SET state = 'done', result = $2, finished_unix_ms = $3,
                       lease_until_unix_ms = NULL
                   WHERE id = $1 AND state = 'pending'
                   RETURNING idempotency_key";
        let params: Params<'_> = &[&id, &result.to_string(), &now_unix_ms];
        self.settle(sql, params, KeyChange::Completed, result, now_unix_ms).await
    }

    async fn outbox_retry_later(
        &self,
        id: i64,
        error: &str,
        next_attempt_unix_ms: i64,
        outcome_unknown: bool,
    ) -> Result<bool, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let changed = execute(
                &client,
                "UPDATE tool_outbox SET last_error = $2, next_attempt_unix_ms = $3,
                     lease_owner = NULL, lease_until_unix_ms = NULL,
                     outcome_unknown = outcome_unknown OR $4
                 WHERE id = $1 AND state = 'pending'",
                &[&id, &error, &next_attempt_unix_ms, &outcome_unknown],
            )
            .await?;
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
        let sql = "UPDATE tool_outbox SET review = TRUE, outcome_unknown = TRUE, last_error = $2,
                       lease_owner = NULL, lease_until_unix_ms = NULL
                   WHERE id = $1 AND state = 'pending'
                   RETURNING idempotency_key";
        self.settle(sql, &[&id, &error], KeyChange::Reviewed, review_result, now_unix_ms).await
    }

    async fn outbox_fail(
        &self,
        id: i64,
        error: &str,
        failed_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        let sql = "UPDATE tool_outbox SET state = 'failed', last_error = $2, finished_unix_ms = $3,
                       lease_until_unix_ms = NULL
                   WHERE id = $1 AND state = 'pending'
                   RETURNING idempotency_key";
        let params: Params<'_> = &[&id, &error, &now_unix_ms];
        self.settle(sql, params, KeyChange::Failed, failed_result, now_unix_ms).await
    }

    async fn outbox_list(
        &self,
        state: Option<OutboxState>,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!(
                "SELECT {OUTBOX_COLUMNS} FROM tool_outbox
                 WHERE $1::TEXT IS NULL OR (state = $1 AND (state <> 'pending' OR review = $3))
                 ORDER BY id DESC LIMIT $2"
            );
            let (state, review) = rules::list_filter(state);
            let params: Params<'_> = &[&state, &rules::list_limit(limit), &review];
            query(&client, &sql, params).await?.iter().map(rows::outbox_item).collect()
        })
        .await
    }

    async fn outbox_get(&self, id: i64) -> Result<Option<OutboxItem>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!("SELECT {OUTBOX_COLUMNS} FROM tool_outbox WHERE id = $1");
            query_opt(&client, &sql, &[&id]).await?.as_ref().map(rows::outbox_item).transpose()
        })
        .await
    }

    async fn outbox_replay_now(&self, id: i64, now_unix_ms: i64) -> Result<bool, StoreError> {
        self.transaction(async |tx| {
            let Some((item, queued_result)) = lock_item(&tx, id).await? else { return Ok(false) };
            let Some(replay) = rules::replay(item.state) else { return Ok(false) };
            let sql = match replay {
                Replay::DueNow => "UPDATE tool_outbox SET next_attempt_unix_ms = $2 WHERE id = $1",
                Replay::Release => {
                    "UPDATE tool_outbox SET review = FALSE, outcome_unknown = FALSE,
                         next_attempt_unix_ms = $2
                     WHERE id = $1"
                }
                Replay::Requeue => {
                    "UPDATE tool_outbox SET state = 'pending', next_attempt_unix_ms = $2,
                         finished_unix_ms = NULL, lease_owner = NULL, lease_until_unix_ms = NULL
                     WHERE id = $1"
                }
            };
            execute(&tx, sql, &[&id, &now_unix_ms]).await?;
            if replay == Replay::Requeue {
                let key = &item.idempotency_key;
                set_key(&tx, key, KeyChange::Requeued, &queued_result, now_unix_ms).await?;
            }
            tx.commit().await?;
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
        self.transaction(async |tx| {
            let Some((item, _)) = lock_item(&tx, id).await? else { return Ok(false) };
            if !rules::may_drop(&item, now_unix_ms) {
                return Ok(false);
            }
            execute(
                &tx,
                "UPDATE tool_outbox SET state = 'dropped', finished_unix_ms = $2,
                     lease_until_unix_ms = NULL
                 WHERE id = $1",
                &[&id, &now_unix_ms],
            )
            .await?;
            let key = &item.idempotency_key;
            set_key(&tx, key, KeyChange::Dropped, dropped_result, now_unix_ms).await?;
            tx.commit().await?;
            Ok(true)
        })
        .await
    }

    async fn outbox_stats(&self) -> Result<OutboxStats, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let row = query_opt(
                &client,
                "SELECT
                     COUNT(*) FILTER (WHERE state = 'pending' AND NOT review),
                     COUNT(*) FILTER (WHERE state = 'failed'),
                     COUNT(*) FILTER (WHERE state = 'pending' AND review),
                     MIN(created_unix_ms) FILTER (WHERE state = 'pending' AND NOT review)
                 FROM tool_outbox",
                &[],
            )
            .await?
            .ok_or_else(|| corrupt("outbox stats returned no row".to_owned()))?;
            rows::outbox_stats(&row)
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
        self.guard(async {
            let client = self.pool.get().await?;
            execute(
                &client,
                "INSERT INTO tool_cache (tool, args_hash, result, captured_unix_ms)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tool, args_hash) DO UPDATE
                 SET result = EXCLUDED.result, captured_unix_ms = EXCLUDED.captured_unix_ms",
                &[&tool, &args_hash, &result.to_string(), &captured_unix_ms],
            )
            .await?;
            Ok(())
        })
        .await
    }

    async fn cache_get(
        &self,
        tool: &str,
        args_hash: &str,
    ) -> Result<Option<CachedResult>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!(
                "SELECT {CACHE_COLUMNS} FROM tool_cache WHERE tool = $1 AND args_hash = $2"
            );
            let row = query_opt(&client, &sql, &[&tool, &args_hash]).await?;
            row.as_ref().map(rows::cached).transpose()
        })
        .await
    }

    async fn prune(&self, keys_before: i64, cache_before: i64) -> Result<Pruned, StoreError> {
        self.transaction(async |tx| {
            let holds = execute(
                &tx,
                "DELETE FROM tool_holds WHERE state <> 'pending' AND (idempotency_key IN (SELECT key FROM tool_keys WHERE state = 'done' AND updated_unix_ms < $1) OR (decided_unix_ms < $1 AND idempotency_key NOT IN (SELECT key FROM tool_keys)))",
                &[&keys_before],
            )
            .await?;
            let outbox = execute(
                &tx,
                "DELETE FROM tool_outbox WHERE state IN ('done', 'dropped') AND id NOT IN (SELECT outbox_id FROM tool_holds WHERE outbox_id IS NOT NULL) AND (idempotency_key IN (SELECT key FROM tool_keys WHERE state = 'done' AND updated_unix_ms < $1) OR (finished_unix_ms < $1 AND idempotency_key NOT IN (SELECT key FROM tool_keys)))",
                &[&keys_before],
            )
            .await?;
            let keys = execute(
                &tx,
                "DELETE FROM tool_keys WHERE state = 'done' AND updated_unix_ms < $1 AND key NOT IN (SELECT idempotency_key FROM tool_outbox) AND key NOT IN (SELECT idempotency_key FROM tool_holds)",
                &[&keys_before],
            )
            .await?;
            let cache = execute(
                &tx,
                "DELETE FROM tool_cache WHERE captured_unix_ms < $1",
                &[&cache_before],
            )
            .await?;
            tx.commit().await?;
            Ok(Pruned { keys, outbox, holds, cache })
        })
        .await
    }

    async fn run_record(
        &self,
        run_id: &str,
        conversation_id: Option<&str>,
        event: RunEvent<'_>,
        now_unix_ms: i64,
        idle_ms: i64,
    ) -> Result<RunCounts, StoreError> {
        self.transaction_relaxed(async |tx| {
            let at = (now_unix_ms, idle_ms);
            let row = count_run(&tx, run_id, conversation_id, event, at).await?;
            write_run(&tx, run_id, &row).await?;
            let same_call: i64 = match event {
                RunEvent::ToolCall { tool, args_hash } => query_opt(
                    &tx,
                    "INSERT INTO run_calls (run_id, tool, args_hash, calls) VALUES ($1, $2, $3, 1)
                     ON CONFLICT (run_id, tool, args_hash)
                     DO UPDATE SET calls = run_calls.calls + 1
                     RETURNING calls",
                    &[&run_id, &tool, &args_hash],
                )
                .await?
                .map(|row| row.try_get(0))
                .transpose()?
                .unwrap_or(0),
                _ => 0,
            };
            tx.commit().await?;
            Ok(runs::counts(run_id, &row, same_call))
        })
        .await
    }

    async fn run_stop(
        &self,
        run_id: &str,
        status: &str,
        now_unix_ms: i64,
    ) -> Result<String, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let row = query_opt(
                &client,
                "INSERT INTO runs (run_id, first_unix_ms, touched_unix_ms, model_calls,
                     tool_calls, same_error, stopped)
                 VALUES ($1, $2, $2, 0, 0, 0, $3)
                 ON CONFLICT (run_id) DO UPDATE SET stopped = COALESCE(runs.stopped, EXCLUDED.stopped)
                 RETURNING stopped",
                &[&run_id, &now_unix_ms, &status],
            )
            .await?;
            match row {
                Some(row) => Ok(row.try_get(0)?),
                None => Err(corrupt(format!("run `{run_id}` was not stopped"))),
            }
        })
        .await
    }

    async fn runs_prune(&self, before_unix_ms: i64) -> Result<u64, StoreError> {
        self.transaction(async |tx| {
            execute(
                &tx,
                "DELETE FROM run_calls WHERE run_id IN
                     (SELECT run_id FROM runs WHERE touched_unix_ms < $1)",
                &[&before_unix_ms],
            )
            .await?;
            execute(
                &tx,
                "DELETE FROM run_tool_log WHERE run_id IN
                     (SELECT run_id FROM runs WHERE touched_unix_ms < $1)
                     OR (run_id NOT IN (SELECT run_id FROM runs) AND run_id NOT IN
                         (SELECT run_id FROM run_tool_log WHERE at_unix_ms >= $1))",
                &[&before_unix_ms],
            )
            .await?;
            let gone =
                execute(&tx, "DELETE FROM runs WHERE touched_unix_ms < $1", &[&before_unix_ms])
                    .await?;
            execute(&tx, "DELETE FROM run_evidence WHERE added_unix_ms < $1", &[&before_unix_ms])
                .await?;
            tx.commit().await?;
            Ok(gone)
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
        self.transaction_relaxed(async |tx| {
            for item in items {
                execute(
                    &tx,
                    "INSERT INTO run_evidence (run_id, item, added_unix_ms) VALUES ($1, $2, $3)",
                    &[&run_id, &item.to_string(), &now_unix_ms],
                )
                .await?;
            }
            execute(
                &tx,
                "DELETE FROM run_evidence WHERE run_id = $1 AND id NOT IN
                     (SELECT id FROM run_evidence WHERE run_id = $1 ORDER BY id DESC LIMIT $2)",
                &[&run_id, &runs::MAX_EVIDENCE],
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    async fn run_evidence(
        &self,
        run_id: &str,
        since_unix_ms: i64,
    ) -> Result<Vec<Value>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let found = query(
                &client,
                "SELECT item FROM run_evidence WHERE run_id = $1 AND added_unix_ms >= $2
                 ORDER BY id",
                &[&run_id, &since_unix_ms],
            )
            .await?;
            found.iter().map(|row| rows::json(row, 0)).collect()
        })
        .await
    }

    async fn run_tool_log_add(&self, run_id: &str, call: &RunToolCall) -> Result<(), StoreError> {
        self.transaction_relaxed(async |tx| {
            execute(
                &tx,
                "INSERT INTO run_tool_log (run_id, tool, args, status, result, at_unix_ms)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &run_id,
                    &call.tool,
                    &call.args.to_string(),
                    &call.status,
                    &call.result.to_string(),
                    &call.at_unix_ms,
                ],
            )
            .await?;
            execute(
                &tx,
                "DELETE FROM run_tool_log WHERE run_id = $1 AND id NOT IN
                     (SELECT id FROM run_tool_log WHERE run_id = $1 ORDER BY id DESC LIMIT $2)",
                &[&run_id, &runs::MAX_TOOL_LOG],
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    async fn run_tool_log(&self, run_id: &str) -> Result<Vec<RunToolCall>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!(
                "SELECT {TOOL_LOG_COLUMNS} FROM run_tool_log WHERE run_id = $1 ORDER BY id"
            );
            let found = query(&client, &sql, &[&run_id]).await?;
            found.iter().map(rows::run_tool_call).collect()
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
        self.guard(async {
            let client = self.pool.get().await?;
            note_run(&client, run_id, conversation_id, note, now_unix_ms).await
        })
        .await
    }

    async fn run_model_call(&self, call: &ModelCall<'_>) -> Result<ModelCallStep, StoreError> {
        let (run_id, at) = (call.run_id, (call.now_unix_ms, call.idle_ms));
        self.transaction_relaxed(async |tx| {
            let found = query(
                &tx,
                "SELECT item FROM run_evidence WHERE run_id = $1 AND added_unix_ms >= $2
                 ORDER BY id",
                &[&run_id, &at.0.saturating_sub(at.1)],
            )
            .await?;
            let evidence = found.iter().map(|row| rows::json(row, 0)).collect::<Result<_, _>>()?;
            let event = RunEvent::ModelCall;
            let mut row = count_run(&tx, run_id, call.conversation_id, event, at).await?;
            let spent = match call.limits.max_spend_micro_usd {
                Some(_) => spend_of(&tx, call.spender).await?,
                None => 0,
            };
            let stopped = runs::judge_model_call(&mut row, &call.limits, spent, call.note, at.0);
            write_run(&tx, run_id, &row).await?;
            tx.commit().await?;
            Ok(ModelCallStep { evidence, stopped })
        })
        .await
    }

    async fn run_model_call_done(&self, done: &ModelCallDone<'_>) -> Result<(), StoreError> {
        if done.micro_usd.is_none() && done.draft.is_none() {
            return Ok(());
        }
        let note = RunNote { draft: done.draft.map(str::to_owned), ..RunNote::default() };
        self.transaction_relaxed(async |tx| {
            if let Some(micro_usd) = done.micro_usd {
                add_spend(&tx, done.spender, micro_usd, done.now_unix_ms).await?;
            }
            if note.draft.is_some() {
                note_run(&tx, done.run_id, done.conversation_id, &note, done.now_unix_ms).await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    async fn run_get(&self, run_id: &str) -> Result<Option<RunInfo>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = $1");
            let row = query_opt(&client, &sql, &[&run_id]).await?;
            Ok(row.as_ref().map(rows::run_row).transpose()?.map(|row| runs::info(run_id, row)))
        })
        .await
    }

    async fn spend_add(
        &self,
        conversation_id: &str,
        micro_usd: i64,
        now_unix_ms: i64,
    ) -> Result<i64, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            add_spend(&client, conversation_id, micro_usd, now_unix_ms).await
        })
        .await
    }

    async fn spend_of(&self, conversation_id: &str) -> Result<i64, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            spend_of(&client, conversation_id).await
        })
        .await
    }

    async fn question_seen(
        &self,
        conversation_id: &str,
        run_id: &str,
        question_hash: &str,
        now_unix_ms: i64,
    ) -> Result<i64, StoreError> {
        self.transaction_relaxed(async |tx| {
            execute(
                &tx,
                "INSERT INTO conversation_questions (conversation_id, question_hash, run_id,
                     touched_unix_ms)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (conversation_id, question_hash, run_id) DO UPDATE SET
                     touched_unix_ms = GREATEST(conversation_questions.touched_unix_ms,
                                                EXCLUDED.touched_unix_ms)",
                &[&conversation_id, &question_hash, &run_id, &now_unix_ms],
            )
            .await?;
            let row = query_opt(
                &tx,
                "SELECT COUNT(*) FROM conversation_questions
                 WHERE conversation_id = $1 AND question_hash = $2 AND run_id <> $3",
                &[&conversation_id, &question_hash, &run_id],
            )
            .await?;
            let others: i64 = match row {
                Some(row) => row.try_get(0)?,
                None => 0,
            };
            tx.commit().await?;
            Ok(others)
        })
        .await
    }

    async fn conversations_prune(&self, before_unix_ms: i64) -> Result<u64, StoreError> {
        self.transaction(async |tx| {
            let spend = execute(
                &tx,
                "DELETE FROM conversation_spend WHERE touched_unix_ms < $1",
                &[&before_unix_ms],
            )
            .await?;
            let questions = execute(
                &tx,
                "DELETE FROM conversation_questions WHERE touched_unix_ms < $1",
                &[&before_unix_ms],
            )
            .await?;
            tx.commit().await?;
            Ok(spend + questions)
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
        self.transaction_relaxed(async |tx| {
            for row in &rows {
                execute(
                    &tx,
                    "INSERT INTO calls (at_unix_ms, request_id, trace_id, route, outcome, tier,
                         attempts, elapsed_ms, notable, record, trace, kind)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                    &[
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
                    ],
                )
                .await?;
            }
            tx.commit().await?;
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
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!(
                "SELECT {CALL_RECORD_COLUMNS} FROM calls c
                 LEFT JOIN verdicts v ON v.request_id = c.request_id
                 WHERE c.at_unix_ms >= $1 AND c.kind = 'model'
                   AND ($2::TEXT IS NULL OR c.route = $2)
                 ORDER BY c.id LIMIT $3"
            );
            let found =
                query(&client, &sql, &[&since_unix_ms, &route, &rules::list_limit(limit)]).await?;
            found.iter().map(rows::call_record).collect()
        })
        .await
    }

    async fn traces_list(
        &self,
        filter: &TraceFilter,
        limit: i64,
    ) -> Result<Vec<TraceSummary>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!(
                "SELECT {SUMMARY_COLUMNS} FROM calls
                 WHERE trace IS NOT NULL AND ($1::TEXT IS NULL OR route = $1)
                   AND ($2::TEXT IS NULL OR outcome = $2) AND (NOT $3 OR notable)
                 ORDER BY id DESC LIMIT $4"
            );
            let params: Params<'_> =
                &[&filter.route, &filter.outcome, &filter.notable, &rules::list_limit(limit)];
            let found = query(&client, &sql, params).await?;
            found.iter().map(rows::trace_summary).collect()
        })
        .await
    }

    async fn trace_get(&self, id: &str) -> Result<Vec<Trace>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let found = query(
                &client,
                // Each id by its own partial index (an OR of the two would not use them).
                "SELECT trace FROM calls WHERE trace IS NOT NULL AND id IN (
                     SELECT id FROM calls WHERE trace_id = $1 AND trace IS NOT NULL
                     UNION ALL
                     SELECT id FROM calls WHERE request_id = $1 AND trace IS NOT NULL)
                 ORDER BY id",
                &[&id],
            )
            .await?;
            found.iter().map(|row| rows::typed::<_, Trace>(row, 0)).collect()
        })
        .await
    }

    async fn verdict_record(&self, verdict: &Verdict) -> Result<bool, StoreError> {
        let text =
            serde_json::to_string(verdict).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.guard(async {
            let client = self.pool.get().await?;
            let inserted = execute(
                &client,
                "INSERT INTO verdicts (request_id, at_unix_ms, route, pass, score, probability,
                     verdict)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (request_id) DO NOTHING",
                &[
                    &verdict.request_id,
                    &verdict.at_unix_ms,
                    &verdict.route,
                    &verdict.pass,
                    &verdict.score,
                    &verdict.probability,
                    &text,
                ],
            )
            .await?;
            Ok(inserted == 1)
        })
        .await
    }

    async fn verdicts_list(
        &self,
        filter: &VerdictFilter,
        limit: i64,
    ) -> Result<Vec<Verdict>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let found = query(
                &client,
                "SELECT verdict FROM verdicts
                 WHERE at_unix_ms >= $1 AND ($2::TEXT IS NULL OR route = $2)
                   AND (NOT $3 OR NOT pass)
                 ORDER BY id DESC LIMIT $4",
                &[&filter.since_unix_ms, &filter.route, &filter.failed, &rules::list_limit(limit)],
            )
            .await?;
            found.iter().map(|row| rows::typed::<_, Verdict>(row, 0)).collect()
        })
        .await
    }

    async fn calls_prune(&self, retention: &CallsRetention) -> Result<CallsPruned, StoreError> {
        let keep = retention.keep_last.max(0);
        self.transaction(async |tx| {
            let records = execute(
                &tx,
                "DELETE FROM calls WHERE at_unix_ms < $1",
                &[&retention.records_before_unix_ms],
            )
            .await?;
            execute(
                &tx,
                "DELETE FROM verdicts WHERE at_unix_ms < $1",
                &[&retention.records_before_unix_ms],
            )
            .await?;
            let old = execute(
                &tx,
                "UPDATE calls SET trace = NULL WHERE trace IS NOT NULL AND at_unix_ms < $1",
                &[&retention.traces_before_unix_ms],
            )
            .await?;
            let beyond = execute(
                &tx,
                "UPDATE calls SET trace = NULL WHERE trace IS NOT NULL AND NOT notable
                   AND id NOT IN (SELECT id FROM calls WHERE trace IS NOT NULL
                                  ORDER BY id DESC LIMIT $1)",
                &[&keep],
            )
            .await?;
            tx.commit().await?;
            Ok(CallsPruned { records, traces: old + beyond })
        })
        .await
    }

    async fn handoff_open(
        &self,
        new: &NewHandoff,
        now_unix_ms: i64,
    ) -> Result<(Handoff, bool), StoreError> {
        self.transaction(async |tx| {
            // A concurrent open of the same conversation makes this insert wait for it, then do
            // nothing; the select after it (a statement of its own) sees that hand-off.
            let sql = format!(
                "INSERT INTO handoffs (conversation_id, run_id, route, trigger, stop_status,
                     packet, canary, delivery, created_unix_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8)
                 ON CONFLICT (conversation_id) DO NOTHING
                 RETURNING {HANDOFF_COLUMNS}"
            );
            let params: Params<'_> = &[
                &new.conversation_id,
                &new.run_id,
                &new.route,
                &new.trigger,
                &new.stop_status,
                &new.packet.to_string(),
                &new.canary,
                &now_unix_ms,
            ];
            if let Some(row) = query_opt(&tx, &sql, params).await? {
                let created = rows::handoff(&row)?;
                tx.commit().await?;
                return Ok((created, true));
            }
            let conversation = &new.conversation_id;
            let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE conversation_id = $1");
            let row = query_opt(&tx, &sql, &[conversation]).await?;
            let row = row.ok_or_else(|| {
                corrupt(format!("conversation `{conversation}` lost its hand-off"))
            })?;
            Ok((rows::handoff(&row)?, false))
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
        let ticket = ticket.map(Value::to_string);
        let delivered = (delivery == HandoffDelivery::Delivered).then_some(now_unix_ms);
        self.guard(async {
            let client = self.pool.get().await?;
            execute(
                &client,
                "UPDATE handoffs SET delivery = $2, ticket = $3, delivery_detail = $4,
                     delivered_unix_ms = COALESCE($5, delivered_unix_ms)
                 WHERE id = $1",
                &[&id, &delivery.as_str(), &ticket, &detail, &delivered],
            )
            .await?;
            Ok(())
        })
        .await
    }

    async fn handoff_list(
        &self,
        filter: &HandoffFilter,
        limit: i64,
    ) -> Result<Vec<Handoff>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!(
                "SELECT {HANDOFF_COLUMNS} FROM handoffs
                 WHERE ($1::TEXT IS NULL OR trigger = $1)
                   AND ($2::BOOLEAN IS NULL OR (decision IS NOT NULL) = $2)
                 ORDER BY id DESC LIMIT $3"
            );
            let params: Params<'_> = &[&filter.trigger, &filter.decided, &rules::list_limit(limit)];
            let found = query(&client, &sql, params).await?;
            found.iter().map(rows::handoff).collect()
        })
        .await
    }

    async fn handoff_get(&self, id: i64) -> Result<Option<Handoff>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE id = $1");
            query_opt(&client, &sql, &[&id]).await?.as_ref().map(rows::handoff).transpose()
        })
        .await
    }

    async fn handoff_find(&self, conversation_id: &str) -> Result<Option<Handoff>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!("SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE conversation_id = $1");
            let row = query_opt(&client, &sql, &[&conversation_id]).await?;
            row.as_ref().map(rows::handoff).transpose()
        })
        .await
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
        self.guard(async {
            let client = self.pool.get().await?;
            // Deciding only an undecided row is the first-decision rule; the row lock the update
            // takes makes a concurrent decision wait, then find it decided.
            let sql = format!(
                "UPDATE handoffs SET decision = $2, decided_by = $3, edited_draft = $4,
                     note = $5, decided_unix_ms = $6
                 WHERE id = $1 AND decision IS NULL
                 RETURNING {HANDOFF_COLUMNS}"
            );
            let params: Params<'_> =
                &[&id, &decision.as_str(), &by, &edited_draft, &note, &now_unix_ms];
            query_opt(&client, &sql, params).await?.as_ref().map(rows::handoff).transpose()
        })
        .await
    }

    async fn handoff_review_stats(
        &self,
        since_unix_ms: i64,
    ) -> Result<Vec<ReviewStats>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let found = query(
                &client,
                "SELECT trigger,
                     COUNT(*) FILTER (WHERE NOT canary),
                     COUNT(*) FILTER (WHERE NOT canary AND decision IS NOT NULL),
                     COUNT(*) FILTER (WHERE NOT canary AND decision IN ('edited', 'rejected')),
                     COUNT(*) FILTER (WHERE canary),
                     COUNT(*) FILTER (WHERE canary AND decision IS NOT NULL),
                     COUNT(*) FILTER (WHERE canary AND decision IN ('edited', 'rejected'))
                 FROM handoffs WHERE created_unix_ms >= $1
                 GROUP BY trigger",
                &[&since_unix_ms],
            )
            .await?;
            let mut stats = found.iter().map(rows::review_stats).collect::<Result<Vec<_>, _>>()?;
            stats.sort_by(|a, b| a.trigger.cmp(&b.trigger));
            Ok(stats)
        })
        .await
    }

    async fn kill_record(&self, flip: &KillFlip) -> Result<i64, StoreError> {
        let (route, at) = crate::kill::columns(flip);
        self.guard(async {
            let client = self.pool.get().await?;
            let row = query_opt(
                &client,
                "INSERT INTO kill_flips (route, engaged, reason, at_unix_ms)
                 VALUES ($1, $2, $3, $4) RETURNING id",
                &[&route, &flip.engaged, &flip.reason, &at],
            )
            .await?;
            Ok(row.map(|row| row.try_get(0)).transpose()?.unwrap_or_default())
        })
        .await
    }

    async fn kill_flips_after(&self, after: i64) -> Result<Vec<(i64, KillFlip)>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let flips = query(
                &client,
                "SELECT id, route, engaged, reason, at_unix_ms FROM kill_flips WHERE id > $1
                 ORDER BY id",
                &[&after],
            )
            .await?;
            flips
                .iter()
                .map(|row| {
                    let flip = crate::kill::flip(
                        row.try_get(1)?,
                        row.try_get(2)?,
                        row.try_get(3)?,
                        row.try_get(4)?,
                    );
                    Ok((row.try_get(0)?, flip))
                })
                .collect()
        })
        .await
    }

    async fn route_to_record(&self, flip: &RouteToFlip) -> Result<i64, StoreError> {
        let at = crate::levers::at_column(flip);
        self.guard(async {
            let client = self.pool.get().await?;
            let row = query_opt(
                &client,
                "INSERT INTO route_to_flips (route, tier, author, reason, at_unix_ms)
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
                &[&flip.route, &flip.tier, &flip.author, &flip.reason, &at],
            )
            .await?;
            Ok(row.map(|row| row.try_get(0)).transpose()?.unwrap_or_default())
        })
        .await
    }

    async fn route_to_flips_after(
        &self,
        after: i64,
    ) -> Result<Vec<(i64, RouteToFlip)>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let flips = query(
                &client,
                "SELECT id, route, tier, author, reason, at_unix_ms FROM route_to_flips
                 WHERE id > $1 ORDER BY id",
                &[&after],
            )
            .await?;
            flips
                .iter()
                .map(|row| {
                    let flip = crate::levers::route_to_flip(
                        row.try_get(1)?,
                        row.try_get(2)?,
                        row.try_get(3)?,
                        row.try_get(4)?,
                        row.try_get(5)?,
                    );
                    Ok((row.try_get(0)?, flip))
                })
                .collect()
        })
        .await
    }

    async fn hold_create(
        &self,
        new: &NewHold,
        held_result: &Value,
        now_unix_ms: i64,
    ) -> Result<Hold, StoreError> {
        self.transaction(async |tx| {
            let sql = format!(
                "INSERT INTO tool_holds (idempotency_key, tool, args, reason, conversation_id,
                     state, created_unix_ms)
                 VALUES ($1, $2, $3, $4, $5, 'pending', $6)
                 ON CONFLICT (idempotency_key) DO NOTHING
                 RETURNING {HOLD_COLUMNS}"
            );
            let params: Params<'_> = &[
                &new.idempotency_key,
                &new.tool,
                &new.args.to_string(),
                &new.reason,
                &new.conversation_id,
                &now_unix_ms,
            ];
            let key = &new.idempotency_key;
            if let Some(row) = query_opt(&tx, &sql, params).await? {
                let created = rows::hold(&row)?;
                let held_result = rules::held_result(held_result, created.id);
                set_key(&tx, key, KeyChange::Held, &held_result, now_unix_ms).await?;
                tx.commit().await?;
                return Ok(created);
            }
            let sql = format!("SELECT {HOLD_COLUMNS} FROM tool_holds WHERE idempotency_key = $1");
            let row = query_opt(&tx, &sql, &[key]).await?;
            rows::hold(&row.ok_or_else(|| corrupt(format!("key `{key}` lost its hold")))?)
        })
        .await
    }

    async fn hold_list(
        &self,
        state: Option<HoldState>,
        limit: i64,
    ) -> Result<Vec<Hold>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!(
                "SELECT {HOLD_COLUMNS} FROM tool_holds
                 WHERE $1::TEXT IS NULL OR state = $1
                 ORDER BY id DESC LIMIT $2"
            );
            let state = state.map(HoldState::as_str);
            let found = query(&client, &sql, &[&state, &rules::list_limit(limit)]).await?;
            found.iter().map(rows::hold).collect()
        })
        .await
    }

    async fn hold_get(&self, id: i64) -> Result<Option<Hold>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!("SELECT {HOLD_COLUMNS} FROM tool_holds WHERE id = $1");
            query_opt(&client, &sql, &[&id]).await?.as_ref().map(rows::hold).transpose()
        })
        .await
    }

    async fn hold_decide(
        &self,
        id: i64,
        decision: &Decision,
        by: &str,
        note: &str,
        now_unix_ms: i64,
    ) -> Result<Option<Hold>, StoreError> {
        self.transaction(async |tx| {
            let decided = rules::decided_state(decision);
            // Deciding only a pending row is the first-decision rule (`rules::undecided`) in
            // SQL; the row lock this takes makes a concurrent decision wait, then find it
            // decided.
            let sql = format!(
                "UPDATE tool_holds SET state = $2, decided_by = $3, decision_note = $4,
                     decided_unix_ms = $5
                 WHERE id = $1 AND state = 'pending'
                 RETURNING {HOLD_COLUMNS}"
            );
            let params: Params<'_> = &[&id, &decided.as_str(), &by, &note, &now_unix_ms];
            let Some(row) = query_opt(&tx, &sql, params).await? else { return Ok(None) };
            let mut decided_hold = rows::hold(&row)?;
            match rules::decision_effect(&decided_hold, decision) {
                DecisionEffect::Enqueue { item, queued_result } => {
                    let item = enqueue(&tx, &item, queued_result, now_unix_ms).await?;
                    execute(
                        &tx,
                        "UPDATE tool_holds SET outbox_id = $2 WHERE id = $1",
                        &[&id, &item.id],
                    )
                    .await?;
                    decided_hold.outbox_id = Some(item.id);
                }
                DecisionEffect::Reject { rejected_result } => {
                    let key = &decided_hold.idempotency_key;
                    set_key(&tx, key, KeyChange::Rejected, rejected_result, now_unix_ms).await?;
                }
            }
            tx.commit().await?;
            Ok(Some(decided_hold))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_server_and_database_only() {
        let config: tokio_postgres::Config =
            "postgres://rein:secret@db.internal:6432/tools".parse().unwrap();
        assert_eq!(target(&config), "db.internal:6432/tools");
    }

    /// The transaction's `synchronous_commit`, committed (a setting made in a transaction
    /// rolled back would be undone whatever it was).
    async fn synchronous_commit(tx: Transaction<'_>) -> Result<String, Failure> {
        let row = query_opt(&tx, "SHOW synchronous_commit", &[]).await?;
        let setting = row.map(|row| row.try_get(0)).transpose()?.unwrap_or_default();
        tx.commit().await?;
        Ok(setting)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bookkeeping_commits_without_waiting_for_the_wal_and_leaves_every_other_write_on() {
        let server = crate::testing::TempPostgres::shared().unwrap_or_else(|e| panic!("{e}"));
        let url = server.create_database().await.unwrap();
        // The test server does not wait for its disk by default; these sessions do, as a
        // production server's would.
        let waiting = format!("{url}?options=-c%20synchronous_commit%3Don");
        let store = PostgresToolStore::connect(&waiting).await.unwrap();
        assert_eq!(store.transaction(synchronous_commit).await.unwrap(), "on");
        assert_eq!(store.transaction_relaxed(synchronous_commit).await.unwrap(), "off");
        // `SET LOCAL` ends with its transaction: the pooled connection is back to waiting.
        for _ in 0..3 {
            assert_eq!(store.transaction(synchronous_commit).await.unwrap(), "on");
        }
        let failed = store
            .transaction_relaxed(async |_tx| -> Result<(), Failure> {
                Err(Failure::Store(StoreError::Task("refused".into())))
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(store.transaction(synchronous_commit).await.unwrap(), "on");
        // A relaxed write is still a write: its rows are there for another connection.
        store.spend_add("conv-1", 5, 0).await.unwrap();
        let done = ModelCallDone {
            run_id: "r1",
            conversation_id: Some("conv-1"),
            spender: "conv-1",
            micro_usd: Some(7),
            draft: None,
            now_unix_ms: 1,
        };
        store.run_model_call_done(&done).await.unwrap();
        let replica = PostgresToolStore::connect(&url).await.unwrap();
        assert_eq!(replica.spend_of("conv-1").await.unwrap(), 12);
    }
}
