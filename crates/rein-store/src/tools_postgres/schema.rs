//! The Postgres tool store's schema: its own forward-only migrations, recorded in `rein_schema`
//! of the database, applied by whichever replica connects first while the others wait on an
//! advisory lock.

use deadpool_postgres::Pool;

use super::failure::Failure;
use crate::StoreError;

/// The migrations, in order; the schema version is the number applied.
const MIGRATIONS: &[&str] = &[
    // 1: idempotency keys, the write outbox, the read cache, gate holds.
    "CREATE TABLE tool_keys (
        key TEXT PRIMARY KEY,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('in_flight', 'queued', 'held', 'done')),
        result TEXT,
        lease_until_unix_ms BIGINT,
        created_unix_ms BIGINT NOT NULL,
        updated_unix_ms BIGINT NOT NULL
    );
    CREATE TABLE tool_outbox (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        idempotency_key TEXT NOT NULL UNIQUE,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        queued_result TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'done', 'failed', 'dropped')),
        attempts BIGINT NOT NULL DEFAULT 0,
        last_error TEXT,
        created_unix_ms BIGINT NOT NULL,
        next_attempt_unix_ms BIGINT NOT NULL,
        lease_owner TEXT,
        lease_until_unix_ms BIGINT,
        finished_unix_ms BIGINT,
        result TEXT
    );
    CREATE INDEX tool_outbox_pending ON tool_outbox (id) WHERE state = 'pending';
    CREATE TABLE tool_cache (
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        result TEXT NOT NULL,
        captured_unix_ms BIGINT NOT NULL,
        PRIMARY KEY (tool, args_hash)
    );
    CREATE TABLE tool_holds (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        idempotency_key TEXT NOT NULL UNIQUE,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        reason TEXT NOT NULL,
        conversation_id TEXT,
        state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected')),
        created_unix_ms BIGINT NOT NULL,
        decided_by TEXT,
        decision_note TEXT,
        decided_unix_ms BIGINT,
        outbox_id BIGINT REFERENCES tool_outbox (id)
    );
    CREATE INDEX tool_holds_state ON tool_holds (state);",
    // 2: the kill switch's flips (route NULL: the global switch), shared by the replicas.
    "CREATE TABLE kill_flips (
        id BIGSERIAL PRIMARY KEY,
        route TEXT,
        engaged BOOLEAN NOT NULL,
        reason TEXT NOT NULL,
        at_unix_ms BIGINT NOT NULL
    );",
    // 3: an outbox item's conversation (for a tool's lookup), whether an earlier send's outcome
    // is unknown, and whether it is held for a person's review (a pending row with `review`
    // set, as in SQLite).
    "ALTER TABLE tool_outbox
        ADD COLUMN conversation_id TEXT,
        ADD COLUMN outcome_unknown BOOLEAN NOT NULL DEFAULT FALSE,
        ADD COLUMN review BOOLEAN NOT NULL DEFAULT FALSE;",
    // 4: what rein counted of each run, and how often each (tool, arguments) came in it.
    "CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        conversation_id TEXT,
        first_unix_ms BIGINT NOT NULL,
        touched_unix_ms BIGINT NOT NULL,
        model_calls BIGINT NOT NULL,
        tool_calls BIGINT NOT NULL,
        last_error TEXT,
        same_error BIGINT NOT NULL,
        stopped TEXT
    );
    CREATE INDEX runs_touched ON runs (touched_unix_ms);
    CREATE TABLE run_calls (
        run_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        calls BIGINT NOT NULL,
        PRIMARY KEY (run_id, tool, args_hash)
    );",
    // 5: the evidence a run's tool calls returned, for the checks of its model calls.
    "CREATE TABLE run_evidence (
        id BIGSERIAL PRIMARY KEY,
        run_id TEXT NOT NULL,
        item TEXT NOT NULL,
        added_unix_ms BIGINT NOT NULL
    );
    CREATE INDEX run_evidence_run ON run_evidence (run_id, id);",
    // 6: what a run did, for a hand-off's packet (notes on its row, its newest tool calls); the
    // conversations handed off to a person, with their review; each conversation's spend and
    // the questions its runs asked.
    "ALTER TABLE runs
        ADD COLUMN route TEXT,
        ADD COLUMN message TEXT,
        ADD COLUMN draft TEXT,
        ADD COLUMN coverage TEXT;
    CREATE TABLE run_tool_log (
        id BIGSERIAL PRIMARY KEY,
        run_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        status TEXT NOT NULL,
        result TEXT NOT NULL,
        at_unix_ms BIGINT NOT NULL
    );
    CREATE INDEX run_tool_log_run ON run_tool_log (run_id, id);
    CREATE TABLE handoffs (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        conversation_id TEXT NOT NULL UNIQUE,
        run_id TEXT,
        route TEXT,
        trigger TEXT NOT NULL,
        stop_status TEXT,
        packet TEXT NOT NULL,
        canary BOOLEAN NOT NULL,
        delivery TEXT NOT NULL CHECK (delivery IN ('pending', 'delivered', 'queued', 'failed')),
        ticket TEXT,
        delivery_detail TEXT,
        created_unix_ms BIGINT NOT NULL,
        delivered_unix_ms BIGINT,
        decision TEXT CHECK (decision IN ('approved', 'edited', 'rejected')),
        decided_by TEXT,
        edited_draft TEXT,
        note TEXT,
        decided_unix_ms BIGINT
    );
    CREATE INDEX handoffs_created ON handoffs (created_unix_ms);
    CREATE TABLE conversation_spend (
        conversation_id TEXT PRIMARY KEY,
        micro_usd BIGINT NOT NULL,
        touched_unix_ms BIGINT NOT NULL
    );
    CREATE INDEX conversation_spend_touched ON conversation_spend (touched_unix_ms);
    CREATE TABLE conversation_questions (
        conversation_id TEXT NOT NULL,
        question_hash TEXT NOT NULL,
        run_id TEXT NOT NULL,
        touched_unix_ms BIGINT NOT NULL,
        PRIMARY KEY (conversation_id, question_hash, run_id)
    );
    CREATE INDEX conversation_questions_touched ON conversation_questions (touched_unix_ms);",
    // 7: finished calls: what the SLIs are computed from, and each call's trace while it is
    // kept (`calls`).
    "CREATE TABLE calls (
        id BIGSERIAL PRIMARY KEY,
        at_unix_ms BIGINT NOT NULL,
        request_id TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        route TEXT NOT NULL,
        outcome TEXT NOT NULL,
        tier TEXT,
        attempts BIGINT NOT NULL,
        elapsed_ms BIGINT NOT NULL,
        notable BOOLEAN NOT NULL,
        record TEXT NOT NULL,
        trace TEXT
    );
    CREATE INDEX calls_at ON calls (at_unix_ms);
    CREATE INDEX calls_trace ON calls (trace_id);
    CREATE INDEX calls_request ON calls (request_id);",
    // 8: tool calls are recorded too (`kind`); the SLIs read only the model calls.
    "ALTER TABLE calls ADD COLUMN kind TEXT NOT NULL DEFAULT 'model';",
    // 9: the online judge's verdicts on sampled answers, one per call (`verdicts`), joined to
    // the calls' records by request id when the SLIs are read.
    "CREATE TABLE verdicts (
        id BIGSERIAL PRIMARY KEY,
        request_id TEXT NOT NULL UNIQUE,
        at_unix_ms BIGINT NOT NULL,
        route TEXT NOT NULL,
        pass BOOLEAN NOT NULL,
        score DOUBLE PRECISION NOT NULL,
        probability DOUBLE PRECISION NOT NULL,
        verdict TEXT NOT NULL
    );
    CREATE INDEX verdicts_at ON verdicts (at_unix_ms);",
    // 10: the route-to lever's flips (tier NULL: released), shared by the replicas.
    "CREATE TABLE route_to_flips (
        id BIGSERIAL PRIMARY KEY,
        route TEXT NOT NULL,
        tier TEXT,
        author TEXT NOT NULL,
        reason TEXT NOT NULL,
        at_unix_ms BIGINT NOT NULL
    );",
    // 11: recognising a caller's re-issue of a write (`key_recent`): its keys by tool and
    // arguments.
    "CREATE INDEX tool_keys_by_call ON tool_keys (tool, args_hash, created_unix_ms);",
    // 12: a call is looked up by its trace or request id only while its trace is kept, so those
    // two indexes hold only the calls with a trace: a routine call's record (most of them)
    // costs the table and `calls_at`, not four B-trees.
    "DROP INDEX calls_trace;
    DROP INDEX calls_request;
    CREATE INDEX calls_trace_kept ON calls (trace_id) WHERE trace IS NOT NULL;
    CREATE INDEX calls_request_kept ON calls (request_id) WHERE trace IS NOT NULL;",
];

/// The advisory lock key that serializes migrations ("reinschm" in ASCII).
const MIGRATION_LOCK: i64 = 0x7265_696e_7363_686d;

/// Apply the missing migrations in one transaction that first takes the migration advisory
/// lock: a second replica waits, then finds the schema current.
pub(super) async fn migrate(pool: &Pool) -> Result<(), Failure> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS rein_schema (
            version BIGINT PRIMARY KEY,
            applied_unix_ms BIGINT NOT NULL
        )",
    )
    .await?;
    let current: i64 = tx
        .query_one("SELECT COALESCE(MAX(version), 0)::BIGINT FROM rein_schema", &[])
        .await?
        .try_get(0)?;
    let known = MIGRATIONS.len() as i64;
    if current > known {
        return Err(Failure::Store(StoreError::TooNew { found: current, known }));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = index as i64 + 1;
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO rein_schema (version, applied_unix_ms) VALUES ($1, $2)",
            &[&version, &(rein_core::clock::unix_ms() as i64)],
        )
        .await?;
        tracing::info!(version, "postgres tool store schema migrated");
    }
    tx.commit().await?;
    Ok(())
}
