//! [`ToolStore`] on Postgres, for several gateway replicas sharing one queue: a pool of
//! `tokio-postgres` connections (no TLS yet), its own forward-only migrations in `rein_schema`
//! applied under a transaction-scoped advisory lock (so replicas starting together migrate once),
//! and outbox claims that lock their rows with `FOR UPDATE SKIP LOCKED`, so two replicas never
//! claim the same item. JSON is stored as text, which takes every JSON value (`jsonb` refuses
//! `\u0000`) and gives it back unchanged.
//!
//! Errors become [`StoreError::Postgres`] with the text scrubbed of the URL's password.

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
use rein_core::KillFlip;

use crate::StoreError;
use crate::tools::{
    CachedResult, Decision, Hold, HoldState, KeyBegin, KeyState, NewHold, NewOutboxItem,
    OutboxItem, OutboxState, OutboxStats, Pruned, ToolStore,
};

/// Connections per store (per gateway replica).
const POOL_SIZE: usize = 16;

/// How long connecting may take, and how long a call may wait for a free pooled connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const POOL_WAIT_TIMEOUT: Duration = Duration::from_secs(30);

const OUTBOX_COLUMNS: &str = "id, idempotency_key, tool, args, state, attempts, last_error, \
     created_unix_ms, next_attempt_unix_ms, lease_owner, lease_until_unix_ms, finished_unix_ms, \
     result, conversation_id, outcome_unknown, review";

const HOLD_COLUMNS: &str = "id, idempotency_key, tool, args, reason, conversation_id, state, \
     created_unix_ms, decided_by, decision_note, decided_unix_ms, outbox_id";

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

/// A JSON text column.
fn json(row: &Row, index: usize) -> Result<Value, Failure> {
    json_opt(row, index)?.ok_or_else(|| corrupt(format!("JSON column {index} is NULL")))
}

/// A nullable JSON text column.
fn json_opt(row: &Row, index: usize) -> Result<Option<Value>, Failure> {
    let text: Option<&str> = row.try_get(index)?;
    text.map(|text| {
        serde_json::from_str(text).map_err(|e| corrupt(format!("JSON column {index}: {e}")))
    })
    .transpose()
}

/// A state column's text as its enum.
fn state<T>(row: &Row, index: usize, parse: fn(&str) -> Option<T>) -> Result<T, Failure> {
    let name: &str = row.try_get(index)?;
    parse(name).ok_or_else(|| corrupt(format!("unknown state `{name}`")))
}

/// An outbox row's state, from its state column and its `review` flag.
fn outbox_state(row: &Row, index: usize, review: usize) -> Result<OutboxState, Failure> {
    let name: &str = row.try_get(index)?;
    let review: bool = row.try_get(review)?;
    OutboxState::from_row(name, review).ok_or_else(|| corrupt(format!("unknown state `{name}`")))
}

fn outbox_item(row: &Row) -> Result<OutboxItem, Failure> {
    Ok(OutboxItem {
        id: row.try_get(0)?,
        idempotency_key: row.try_get(1)?,
        tool: row.try_get(2)?,
        args: json(row, 3)?,
        state: outbox_state(row, 4, 15)?,
        attempts: row.try_get(5)?,
        last_error: row.try_get(6)?,
        created_unix_ms: row.try_get(7)?,
        next_attempt_unix_ms: row.try_get(8)?,
        lease_owner: row.try_get(9)?,
        lease_until_unix_ms: row.try_get(10)?,
        finished_unix_ms: row.try_get(11)?,
        result: json_opt(row, 12)?,
        conversation_id: row.try_get(13)?,
        outcome_unknown: row.try_get(14)?,
    })
}

fn hold(row: &Row) -> Result<Hold, Failure> {
    Ok(Hold {
        id: row.try_get(0)?,
        idempotency_key: row.try_get(1)?,
        tool: row.try_get(2)?,
        args: json(row, 3)?,
        reason: row.try_get(4)?,
        conversation_id: row.try_get(5)?,
        state: state(row, 6, HoldState::parse)?,
        created_unix_ms: row.try_get(7)?,
        decided_by: row.try_get(8)?,
        decision_note: row.try_get(9)?,
        decided_unix_ms: row.try_get(10)?,
        outbox_id: row.try_get(11)?,
    })
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

/// Set the key's record (if it has one) to `state` with `result`, lease released.
async fn set_key(
    tx: &Transaction<'_>,
    key: &str,
    state: KeyState,
    result: &Value,
    now_unix_ms: i64,
) -> Result<(), Failure> {
    execute(
        tx,
        "UPDATE tool_keys SET state = $2, result = $3, lease_until_unix_ms = NULL,
             updated_unix_ms = $4
         WHERE key = $1",
        &[&key, &state.as_str(), &result.to_string(), &now_unix_ms],
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
    let unknown = new.outcome_unknown || new.review;
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
        set_key(tx, key, KeyState::Queued, queued_result, now_unix_ms).await?;
        return outbox_item(&row);
    }
    let sql = format!("SELECT {OUTBOX_COLUMNS} FROM tool_outbox WHERE idempotency_key = $1");
    let row = query_opt(tx, &sql, &[&key]).await?;
    outbox_item(&row.ok_or_else(|| corrupt(format!("key `{key}` lost its outbox item")))?)
}

/// An item's state, key and queued result, locked for the rest of the transaction.
async fn lock_item(
    tx: &Transaction<'_>,
    id: i64,
) -> Result<Option<(OutboxState, String, Value)>, Failure> {
    let row = query_opt(
        tx,
        "SELECT state, idempotency_key, queued_result, review FROM tool_outbox
         WHERE id = $1 FOR UPDATE",
        &[&id],
    )
    .await?;
    row.map(|row| Ok((outbox_state(&row, 0, 3)?, row.try_get(1)?, json(&row, 2)?))).transpose()
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
        work: impl Future<Output = Result<T, Failure>> + Send,
    ) -> Result<T, StoreError> {
        work.await.map_err(|failure| match failure {
            Failure::Store(error) => error,
            Failure::Postgres(text) => StoreError::Postgres(self.redaction.scrub(&text)),
        })
    }
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
        self.guard(async {
            let lease_until = now_unix_ms.saturating_add(lease_ms);
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
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
                let Some(row) = query_opt(
                    &tx,
                    "SELECT tool, args_hash, state, result, lease_until_unix_ms
                     FROM tool_keys WHERE key = $1 FOR UPDATE",
                    &[&key],
                )
                .await?
                else {
                    continue;
                };
                let found_tool: String = row.try_get(0)?;
                let found_hash: &str = row.try_get(1)?;
                let found_state = state(&row, 2, KeyState::parse)?;
                let found_lease: Option<i64> = row.try_get(4)?;
                if found_tool != tool || found_hash != args_hash {
                    return Ok(KeyBegin::Mismatch { tool: found_tool });
                }
                if found_state == KeyState::InFlight {
                    if let Some(until) = found_lease.filter(|until| now_unix_ms < *until) {
                        return Ok(KeyBegin::InFlight { lease_until_unix_ms: until });
                    }
                    execute(
                        &tx,
                        "UPDATE tool_keys SET lease_until_unix_ms = $2, updated_unix_ms = $3
                         WHERE key = $1",
                        &[&key, &lease_until, &now_unix_ms],
                    )
                    .await?;
                    tx.commit().await?;
                    return Ok(KeyBegin::TakenOver);
                }
                let result = json_opt(&row, 3)?.ok_or_else(|| {
                    corrupt(format!("key `{key}` is {found_state:?} without a result"))
                })?;
                return Ok(KeyBegin::Stored { state: found_state, result });
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
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            set_key(&tx, key, KeyState::Done, result, now_unix_ms).await?;
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

    async fn outbox_enqueue(
        &self,
        item: &NewOutboxItem,
        queued_result: &Value,
        now_unix_ms: i64,
    ) -> Result<OutboxItem, StoreError> {
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
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
        if limit <= 0 {
            return Ok(Vec::new());
        }
        self.guard(async {
            let lease_until = now_unix_ms.saturating_add(lease_ms);
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
            let rows = query(&client, &sql, &[&owner, &now_unix_ms, &lease_until, &limit]).await?;
            let mut items = rows.iter().map(outbox_item).collect::<Result<Vec<_>, _>>()?;
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
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let row = query_opt(
                &tx,
                "UPDATE tool_outbox SET state = 'done', result = $2, finished_unix_ms = $3,
                     lease_until_unix_ms = NULL
                 WHERE id = $1 AND state = 'pending'
                 RETURNING idempotency_key",
                &[&id, &result.to_string(), &now_unix_ms],
            )
            .await?;
            let Some(row) = row else { return Ok(false) };
            let key: &str = row.try_get(0)?;
            set_key(&tx, key, KeyState::Done, result, now_unix_ms).await?;
            tx.commit().await?;
            Ok(true)
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
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let row = query_opt(
                &tx,
                "UPDATE tool_outbox SET review = TRUE, outcome_unknown = TRUE, last_error = $2,
                     lease_owner = NULL, lease_until_unix_ms = NULL
                 WHERE id = $1 AND state = 'pending'
                 RETURNING idempotency_key",
                &[&id, &error],
            )
            .await?;
            let Some(row) = row else { return Ok(false) };
            let key: &str = row.try_get(0)?;
            set_key(&tx, key, KeyState::Queued, review_result, now_unix_ms).await?;
            tx.commit().await?;
            Ok(true)
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
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let row = query_opt(
                &tx,
                "UPDATE tool_outbox SET state = 'failed', last_error = $2, finished_unix_ms = $3,
                     lease_until_unix_ms = NULL
                 WHERE id = $1 AND state = 'pending'
                 RETURNING idempotency_key",
                &[&id, &error, &now_unix_ms],
            )
            .await?;
            let Some(row) = row else { return Ok(false) };
            let key: &str = row.try_get(0)?;
            set_key(&tx, key, KeyState::Done, failed_result, now_unix_ms).await?;
            tx.commit().await?;
            Ok(true)
        })
        .await
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
            let review = state == Some(OutboxState::Review);
            let state = state.map(OutboxState::column);
            let rows = query(&client, &sql, &[&state, &limit.max(0), &review]).await?;
            rows.iter().map(outbox_item).collect()
        })
        .await
    }

    async fn outbox_get(&self, id: i64) -> Result<Option<OutboxItem>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!("SELECT {OUTBOX_COLUMNS} FROM tool_outbox WHERE id = $1");
            query_opt(&client, &sql, &[&id]).await?.as_ref().map(outbox_item).transpose()
        })
        .await
    }

    async fn outbox_replay_now(&self, id: i64, now_unix_ms: i64) -> Result<bool, StoreError> {
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let Some((found, key, queued_result)) = lock_item(&tx, id).await? else {
                return Ok(false);
            };
            match found {
                OutboxState::Pending => {
                    execute(
                        &tx,
                        "UPDATE tool_outbox SET next_attempt_unix_ms = $2 WHERE id = $1",
                        &[&id, &now_unix_ms],
                    )
                    .await?;
                }
                OutboxState::Review => {
                    execute(
                        &tx,
                        "UPDATE tool_outbox SET review = FALSE, outcome_unknown = FALSE,
                             next_attempt_unix_ms = $2
                         WHERE id = $1",
                        &[&id, &now_unix_ms],
                    )
                    .await?;
                }
                OutboxState::Failed => {
                    execute(
                        &tx,
                        "UPDATE tool_outbox SET state = 'pending', next_attempt_unix_ms = $2,
                             finished_unix_ms = NULL, lease_owner = NULL,
                             lease_until_unix_ms = NULL
                         WHERE id = $1",
                        &[&id, &now_unix_ms],
                    )
                    .await?;
                    set_key(&tx, &key, KeyState::Queued, &queued_result, now_unix_ms).await?;
                }
                OutboxState::Done | OutboxState::Dropped => return Ok(false),
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
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let Some((found, key, _)) = lock_item(&tx, id).await? else { return Ok(false) };
            match found {
                OutboxState::Pending | OutboxState::Review | OutboxState::Failed => {}
                OutboxState::Done | OutboxState::Dropped => return Ok(false),
            }
            // An item a worker is sending under a live lease may be executing right now:
            // dropping it would record "not executed" for a write that may have run.
            let dropped = execute(
                &tx,
                "UPDATE tool_outbox SET state = 'dropped', finished_unix_ms = $2,
                     lease_until_unix_ms = NULL
                 WHERE id = $1 AND COALESCE(lease_until_unix_ms, 0) <= $2",
                &[&id, &now_unix_ms],
            )
            .await?;
            if dropped == 0 {
                return Ok(false);
            }
            set_key(&tx, &key, KeyState::Done, dropped_result, now_unix_ms).await?;
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
            Ok(OutboxStats {
                pending: row.try_get(0)?,
                failed: row.try_get(1)?,
                review: row.try_get(2)?,
                oldest_pending_created_unix_ms: row.try_get(3)?,
            })
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
            let row = query_opt(
                &client,
                "SELECT result, captured_unix_ms FROM tool_cache
                 WHERE tool = $1 AND args_hash = $2",
                &[&tool, &args_hash],
            )
            .await?;
            row.map(|row| {
                Ok(CachedResult { result: json(&row, 0)?, captured_unix_ms: row.try_get(1)? })
            })
            .transpose()
        })
        .await
    }

    async fn prune(&self, keys_before: i64, cache_before: i64) -> Result<Pruned, StoreError> {
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
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
            let rows = query(
                &client,
                "SELECT id, route, engaged, reason, at_unix_ms FROM kill_flips WHERE id > $1
                 ORDER BY id",
                &[&after],
            )
            .await?;
            rows.iter()
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

    async fn hold_create(
        &self,
        new: &NewHold,
        held_result: &Value,
        now_unix_ms: i64,
    ) -> Result<Hold, StoreError> {
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
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
            if let Some(row) = query_opt(&tx, &sql, params).await? {
                let created = hold(&row)?;
                set_key(&tx, &new.idempotency_key, KeyState::Held, held_result, now_unix_ms)
                    .await?;
                tx.commit().await?;
                return Ok(created);
            }
            let sql = format!("SELECT {HOLD_COLUMNS} FROM tool_holds WHERE idempotency_key = $1");
            let row = query_opt(&tx, &sql, &[&new.idempotency_key]).await?;
            let key = &new.idempotency_key;
            hold(&row.ok_or_else(|| corrupt(format!("key `{key}` lost its hold")))?)
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
            let rows = query(&client, &sql, &[&state, &limit.max(0)]).await?;
            rows.iter().map(hold).collect()
        })
        .await
    }

    async fn hold_get(&self, id: i64) -> Result<Option<Hold>, StoreError> {
        self.guard(async {
            let client = self.pool.get().await?;
            let sql = format!("SELECT {HOLD_COLUMNS} FROM tool_holds WHERE id = $1");
            query_opt(&client, &sql, &[&id]).await?.as_ref().map(hold).transpose()
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
        self.guard(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let decided = match decision {
                Decision::Approve { .. } => HoldState::Approved,
                Decision::Reject { .. } => HoldState::Rejected,
            };
            // The row lock this takes makes a concurrent decision wait, then find it decided.
            let sql = format!(
                "UPDATE tool_holds SET state = $2, decided_by = $3, decision_note = $4,
                     decided_unix_ms = $5
                 WHERE id = $1 AND state = 'pending'
                 RETURNING {HOLD_COLUMNS}"
            );
            let params: Params<'_> = &[&id, &decided.as_str(), &by, &note, &now_unix_ms];
            let Some(row) = query_opt(&tx, &sql, params).await? else { return Ok(None) };
            let mut decided_hold = hold(&row)?;
            match decision {
                Decision::Approve { queued_result } => {
                    let mut new = NewOutboxItem::new(
                        &decided_hold.idempotency_key,
                        &decided_hold.tool,
                        &decided_hold.args,
                    );
                    new.conversation_id = decided_hold.conversation_id.clone();
                    let item = enqueue(&tx, &new, queued_result, now_unix_ms).await?;
                    execute(
                        &tx,
                        "UPDATE tool_holds SET outbox_id = $2 WHERE id = $1",
                        &[&id, &item.id],
                    )
                    .await?;
                    decided_hold.outbox_id = Some(item.id);
                }
                Decision::Reject { rejected_result } => {
                    let key = &decided_hold.idempotency_key;
                    set_key(&tx, key, KeyState::Done, rejected_result, now_unix_ms).await?;
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
}
