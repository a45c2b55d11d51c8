//! rein's embedded store: one SQLite file (WAL, `synchronous = FULL`) holding what must outlive
//! the process. Every table's rows are versioned by the schema version in `rein_schema`, and
//! migrations only move forward, so records written by an older rein stay readable.
//!
//! It holds route settings versions ([`versions`]), the kill switch's flips ([`kill`]), the
//! route-to lever's flips and how the active version came to serve ([`levers`]), and the
//! durable state behind tool calls ([`tools`]: idempotency keys, the write outbox, the read
//! cache, gate holds), what rein counted of each agent run ([`runs`]) and the conversations it
//! handed off to a person ([`handoffs`]), which can also live in Postgres ([`tools_postgres`])
//! when several gateway replicas share one queue and one count.

pub mod calls;
pub mod handoffs;
pub mod kill;
pub mod levers;
mod open;
mod run_cache;
pub mod runs;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tools;
pub mod tools_postgres;
pub mod tools_sqlite;
pub mod versions;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use rein_core::{KillFlip, RouteToFlip};
use rusqlite::{Connection, TransactionBehavior};

pub use levers::ActiveSettings;
pub use open::open_tool_store;
pub use tools::ToolStore;
pub use tools_postgres::PostgresToolStore;
pub use tools_sqlite::SqliteToolStore;
pub use versions::{Change, RouteSettings, TierSettings, VersionInfo};

/// A store operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store at {path}: {source}")]
    Open { path: String, source: rusqlite::Error },
    #[error("store query failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored record is unreadable: {0}")]
    Corrupt(String),
    #[error("the store was written by a newer rein (schema {found}, this build knows {known})")]
    TooNew { found: i64, known: i64 },
    #[error("route `{route}` has no version {version}")]
    NoSuchVersion { route: String, version: i64 },
    #[error("route `{route}` has no tier `{tier}` in its settings")]
    NoSuchTier { route: String, tier: String },
    /// A Postgres call failed; the text never contains the password of the connection URL.
    #[error("postgres: {0}")]
    Postgres(String),
    /// The blocking task running a SQLite call panicked or was cancelled.
    #[error("the store's blocking task did not finish: {0}")]
    Task(String),
}

/// The migrations, in order; the schema version is the number applied.
const MIGRATIONS: &[&str] = &[
    // 1: route settings versions and which one is active.
    "CREATE TABLE route_versions (
        route TEXT NOT NULL,
        version INTEGER NOT NULL,
        settings TEXT NOT NULL,
        author TEXT NOT NULL,
        note TEXT NOT NULL,
        created_unix_ms INTEGER NOT NULL,
        PRIMARY KEY (route, version)
    );
    CREATE TABLE route_active (
        route TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        author TEXT NOT NULL,
        reason TEXT NOT NULL,
        changed_unix_ms INTEGER NOT NULL
    );",
    // 2: tool calls: idempotency keys, the write outbox, the read cache, gate holds
    // (`tools_sqlite`). JSON is stored as text.
    "CREATE TABLE tool_keys (
        key TEXT PRIMARY KEY,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('in_flight', 'queued', 'held', 'done')),
        result TEXT,
        lease_until_unix_ms INTEGER,
        created_unix_ms INTEGER NOT NULL,
        updated_unix_ms INTEGER NOT NULL
    );
    CREATE TABLE tool_outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        idempotency_key TEXT NOT NULL UNIQUE,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        queued_result TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'done', 'failed', 'dropped')),
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        created_unix_ms INTEGER NOT NULL,
        next_attempt_unix_ms INTEGER NOT NULL,
        lease_owner TEXT,
        lease_until_unix_ms INTEGER,
        finished_unix_ms INTEGER,
        result TEXT
    );
    CREATE INDEX tool_outbox_pending ON tool_outbox (state, next_attempt_unix_ms);
    CREATE TABLE tool_cache (
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        result TEXT NOT NULL,
        captured_unix_ms INTEGER NOT NULL,
        PRIMARY KEY (tool, args_hash)
    );
    CREATE TABLE tool_holds (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        idempotency_key TEXT NOT NULL UNIQUE,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        reason TEXT NOT NULL,
        conversation_id TEXT,
        state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected')),
        created_unix_ms INTEGER NOT NULL,
        decided_by TEXT,
        decision_note TEXT,
        decided_unix_ms INTEGER,
        outbox_id INTEGER REFERENCES tool_outbox (id)
    );
    CREATE INDEX tool_holds_state ON tool_holds (state);",
    // 3: the kill switch's flips (route NULL: the global switch).
    "CREATE TABLE kill_flips (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        route TEXT,
        engaged INTEGER NOT NULL,
        reason TEXT NOT NULL,
        at_unix_ms INTEGER NOT NULL
    );",
    // 4: an outbox item's conversation (for a tool's lookup), whether an earlier send's outcome
    // is unknown, and whether it is held for a person's review (a pending row with `review`
    // set, so the state column's CHECK needs no table rebuild).
    "ALTER TABLE tool_outbox ADD COLUMN conversation_id TEXT;
    ALTER TABLE tool_outbox ADD COLUMN outcome_unknown INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tool_outbox ADD COLUMN review INTEGER NOT NULL DEFAULT 0;",
    // 5: what rein counted of each run, and how often each (tool, arguments) came in it.
    "CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        conversation_id TEXT,
        first_unix_ms INTEGER NOT NULL,
        touched_unix_ms INTEGER NOT NULL,
        model_calls INTEGER NOT NULL,
        tool_calls INTEGER NOT NULL,
        last_error TEXT,
        same_error INTEGER NOT NULL,
        stopped TEXT
    );
    CREATE INDEX runs_touched ON runs (touched_unix_ms);
    CREATE TABLE run_calls (
        run_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        calls INTEGER NOT NULL,
        PRIMARY KEY (run_id, tool, args_hash)
    );",
    // 6: the evidence a run's tool calls returned, for the checks of its model calls.
    "CREATE TABLE run_evidence (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        item TEXT NOT NULL,
        added_unix_ms INTEGER NOT NULL
    );
    CREATE INDEX run_evidence_run ON run_evidence (run_id, id);",
    // 7: what a run did, for a hand-off's packet (notes on its row, its newest tool calls); the
    // conversations handed off to a person, with their review; each conversation's spend and
    // the questions its runs asked.
    "ALTER TABLE runs ADD COLUMN route TEXT;
    ALTER TABLE runs ADD COLUMN message TEXT;
    ALTER TABLE runs ADD COLUMN draft TEXT;
    ALTER TABLE runs ADD COLUMN coverage TEXT;
    CREATE TABLE run_tool_log (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        status TEXT NOT NULL,
        result TEXT NOT NULL,
        at_unix_ms INTEGER NOT NULL
    );
    CREATE INDEX run_tool_log_run ON run_tool_log (run_id, id);
    CREATE TABLE handoffs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL UNIQUE,
        run_id TEXT,
        route TEXT,
        trigger TEXT NOT NULL,
        stop_status TEXT,
        packet TEXT NOT NULL,
        canary INTEGER NOT NULL,
        delivery TEXT NOT NULL CHECK (delivery IN ('pending', 'delivered', 'queued', 'failed')),
        ticket TEXT,
        delivery_detail TEXT,
        created_unix_ms INTEGER NOT NULL,
        delivered_unix_ms INTEGER,
        decision TEXT CHECK (decision IN ('approved', 'edited', 'rejected')),
        decided_by TEXT,
        edited_draft TEXT,
        note TEXT,
        decided_unix_ms INTEGER
    );
    CREATE INDEX handoffs_created ON handoffs (created_unix_ms);
    CREATE TABLE conversation_spend (
        conversation_id TEXT PRIMARY KEY,
        micro_usd INTEGER NOT NULL,
        touched_unix_ms INTEGER NOT NULL
    );
    CREATE INDEX conversation_spend_touched ON conversation_spend (touched_unix_ms);
    CREATE TABLE conversation_questions (
        conversation_id TEXT NOT NULL,
        question_hash TEXT NOT NULL,
        run_id TEXT NOT NULL,
        touched_unix_ms INTEGER NOT NULL,
        PRIMARY KEY (conversation_id, question_hash, run_id)
    );
    CREATE INDEX conversation_questions_touched ON conversation_questions (touched_unix_ms);",
    // 8: finished calls: what the SLIs are computed from, and each call's trace while it is
    // kept (`calls`).
    "CREATE TABLE calls (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at_unix_ms INTEGER NOT NULL,
        request_id TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        route TEXT NOT NULL,
        outcome TEXT NOT NULL,
        tier TEXT,
        attempts INTEGER NOT NULL,
        elapsed_ms INTEGER NOT NULL,
        notable INTEGER NOT NULL,
        record TEXT NOT NULL,
        trace TEXT
    );
    CREATE INDEX calls_at ON calls (at_unix_ms);
    CREATE INDEX calls_trace ON calls (trace_id);
    CREATE INDEX calls_request ON calls (request_id);",
    // 9: tool calls are recorded too (`kind`): their traces are kept beside the model calls',
    // and the SLIs read only the model calls.
    "ALTER TABLE calls ADD COLUMN kind TEXT NOT NULL DEFAULT 'model';",
    // 10: the online judge's verdicts on sampled answers, one per call (`verdicts`), joined to
    // the calls' records by request id when the SLIs are read.
    "CREATE TABLE verdicts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        request_id TEXT NOT NULL UNIQUE,
        at_unix_ms INTEGER NOT NULL,
        route TEXT NOT NULL,
        pass INTEGER NOT NULL,
        score REAL NOT NULL,
        probability REAL NOT NULL,
        verdict TEXT NOT NULL
    );
    CREATE INDEX verdicts_at ON verdicts (at_unix_ms);",
    // 11: the levers (`levers`): the route-to lever's flips (tier NULL: released), and how a
    // route's active version came to serve (NULL: a new version; `revert`, `pin_model`).
    "CREATE TABLE route_to_flips (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        route TEXT NOT NULL,
        tier TEXT,
        author TEXT NOT NULL,
        reason TEXT NOT NULL,
        at_unix_ms INTEGER NOT NULL
    );
    ALTER TABLE route_active ADD COLUMN lever TEXT;",
    // 12: recognising a caller's re-issue of a write (`key_recent`): its keys by tool and
    // arguments.
    "CREATE INDEX tool_keys_by_call ON tool_keys (tool, args_hash, created_unix_ms);",
    // 13: a call is looked up by its trace or request id only while its trace is kept, so those
    // two indexes hold only the calls with a trace: a routine call's record (most of them)
    // costs the table and `calls_at`, not four B-trees.
    "DROP INDEX calls_trace;
    DROP INDEX calls_request;
    CREATE INDEX calls_trace_kept ON calls (trace_id) WHERE trace IS NOT NULL;
    CREATE INDEX calls_request_kept ON calls (request_id) WHERE trace IS NOT NULL;",
];

/// How long a writer waits for another connection's write transaction (another process on the
/// same file) before failing with "database is locked".
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The embedded store. Calls are short and synchronous; async callers use `spawn_blocking` or
/// accept the microseconds.
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
    /// The connection is at `synchronous = NORMAL`, left there by the last bookkeeping commit
    /// ([`Store::conn_relaxed`]); [`Store::conn`] puts it back to `FULL` before anything else
    /// uses it. Changing the level prepares a statement each time (SQLite runs a pragma's
    /// statement once), so it changes only when the next use needs the other level, not twice
    /// around every bookkeeping commit. Only read and written with the connection's lock held.
    relaxed: AtomicBool,
    /// Runs' rows as this connection last wrote them (the tool store's bookkeeping reads them
    /// here rather than from the file); locked only while the connection's lock is held.
    runs: Mutex<run_cache::RunCache>,
}

impl Store {
    /// Open (creating if needed) the store at `path`, and bring its schema up to date.
    /// Several processes (or several `Store`s) may open the same file: writers wait for each
    /// other up to the busy timeout, and the first to open a new file migrates it.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path)
            .map_err(|source| StoreError::Open { path: path.display().to_string(), source })?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        use_wal(&conn)?;
        Self::init(conn)
    }

    /// Open `path`, or an in-memory store when it is `:memory:`.
    pub fn open_path(path: &str) -> Result<Self, StoreError> {
        if path == ":memory:" { Self::open_in_memory() } else { Self::open(Path::new(path)) }
    }

    /// A store that lives in memory (tests, and `rein check`).
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(mut conn: Connection) -> Result<Self, StoreError> {
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // A transaction's statement journals (each multi-row insert of the calls' records, the
        // savepoints of a shared commit run again after a call failed) stay in memory: past 64 KiB SQLite's default
        // spills them to a temporary file, written page by page and thrown away at the commit,
        // which was half the store's writes to the disk under load. Nothing durable is kept
        // there; the WAL holds what a commit writes.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // Room for every statement the store prepares once and keeps (the calls' inserts of
        // each chunk size among them), so none is prepared again for being pushed out.
        conn.set_prepared_statement_cache_capacity(64);
        // The query planner's stability guarantee: a statement's plan never depends on the
        // values bound to it (rein runs no ANALYZE, so there are no statistics to use them
        // with), so a cached statement is not prepared again when they change. Without it a
        // run's evidence read was parsed anew at every model call.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        migrate(&mut conn)?;
        Ok(Self { conn: Mutex::new(conn), relaxed: AtomicBool::new(false), runs: Mutex::default() })
    }

    /// The connection, at `synchronous = FULL`: a commit made on it is on disk when it returns.
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        let conn = self.locked();
        if self.relaxed.load(Ordering::Relaxed) {
            // Outside a transaction (none outlives its guard) the pragma does not fail; if it
            // ever did, the flag stays set and the next use tries again.
            match conn
                .prepare_cached("PRAGMA synchronous = FULL")
                .and_then(|mut set| set.execute([]))
            {
                Ok(_) => self.relaxed.store(false, Ordering::Relaxed),
                Err(error) => {
                    tracing::warn!(%error, "the store could not restore synchronous = FULL")
                }
            }
        }
        conn
    }

    /// The connection at `synchronous = NORMAL`, for bookkeeping whose commits do not wait for
    /// the disk; it stays there until [`Store::conn`] is next called.
    pub(crate) fn conn_relaxed(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        let conn = self.locked();
        if !self.relaxed.load(Ordering::Relaxed) {
            conn.prepare_cached("PRAGMA synchronous = NORMAL")?.execute([])?;
            self.relaxed.store(true, Ordering::Relaxed);
        }
        Ok(conn)
    }

    /// The runs' rows kept beside the connection; take it with the connection's lock held.
    pub(crate) fn run_cache(&self) -> MutexGuard<'_, run_cache::RunCache> {
        self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn locked(&self) -> MutexGuard<'_, Connection> {
        match self.conn.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The schema version of the open store.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self.conn().query_row("SELECT MAX(version) FROM rein_schema", [], |row| row.get(0))?)
    }

    /// Record `settings` for `route`. When they equal the active version's, nothing is written
    /// and the active version is returned; otherwise a new version is written and made active.
    pub fn record_settings(
        &self,
        route: &str,
        settings: &RouteSettings,
        author: &str,
        note: &str,
    ) -> Result<VersionInfo, StoreError> {
        versions::record_settings(self, route, settings, author, note)
    }

    /// Every version of a route, oldest first.
    pub fn versions(&self, route: &str) -> Result<Vec<VersionInfo>, StoreError> {
        versions::versions(self, route)
    }

    /// One version of a route.
    pub fn version(&self, route: &str, version: i64) -> Result<VersionInfo, StoreError> {
        versions::find_version(self, route, version)
    }

    /// The version serving now, if the route has any.
    pub fn active_version(&self, route: &str) -> Result<Option<VersionInfo>, StoreError> {
        versions::active_version(self, route)
    }

    /// Make an earlier (or later) version the one serving: a revert.
    pub fn activate(
        &self,
        route: &str,
        version: i64,
        author: &str,
        reason: &str,
    ) -> Result<VersionInfo, StoreError> {
        versions::activate(self, route, version, author, reason)
    }

    /// What changed from version `from` to version `to`.
    pub fn diff(&self, route: &str, from: i64, to: i64) -> Result<Vec<Change>, StoreError> {
        versions::diff(self, route, from, to)
    }

    /// The newest version written by `author` (the config file writes as `config`): a reload
    /// compares against it, so an operator's revert is not undone by an unchanged config.
    pub fn latest_by(&self, route: &str, author: &str) -> Result<Option<VersionInfo>, StoreError> {
        versions::latest_by(self, route, author)
    }

    /// A new version equal to the active one with `tier`'s model replaced by `model` (a pinned
    /// snapshot), made active and marked as a model pin; revertable like any version.
    pub fn pin_model(
        &self,
        route: &str,
        tier: &str,
        model: &str,
        author: &str,
        reason: &str,
    ) -> Result<VersionInfo, StoreError> {
        levers::pin_model(self, route, tier, model, author, reason)
    }

    /// The version serving `route` and how it came to (a revert, a model pin), by whom, when
    /// and why.
    pub fn active_settings(&self, route: &str) -> Result<Option<ActiveSettings>, StoreError> {
        levers::active_settings(self, route)
    }

    /// Record one route-to flip, durably, after every earlier one; returns its sequence number.
    pub fn record_route_to(&self, flip: &RouteToFlip) -> Result<i64, StoreError> {
        levers::record_route_to(self, flip)
    }

    /// The route-to flips recorded after sequence number `after`, oldest first, with their
    /// numbers.
    pub fn route_to_flips_after(&self, after: i64) -> Result<Vec<(i64, RouteToFlip)>, StoreError> {
        levers::route_to_after(self, after)
    }

    /// Record one kill switch flip, durably (`synchronous = FULL`), after every earlier one;
    /// returns its sequence number.
    pub fn record_kill_flip(&self, flip: &KillFlip) -> Result<i64, StoreError> {
        kill::record_kill_flip(self, flip)
    }

    /// Every recorded kill switch flip, oldest first.
    pub fn kill_flips(&self) -> Result<Vec<KillFlip>, StoreError> {
        kill::kill_flips(self)
    }

    /// The kill switch flips recorded after sequence number `after`, oldest first, with their
    /// numbers.
    pub fn kill_flips_after(&self, after: i64) -> Result<Vec<(i64, KillFlip)>, StoreError> {
        kill::kill_flips_after(self, after)
    }
}

/// Switch to WAL. On a new file another opener may be switching it at the same moment, and then
/// the pragma fails with "database is locked" at once instead of waiting: wait out the other's
/// lock with an empty write transaction (which honours the busy timeout) and try again.
fn use_wal(conn: &Connection) -> Result<(), rusqlite::Error> {
    let mut attempts = 0;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(error) if is_busy(&error) && attempts < 100 => {
                attempts += 1;
                conn.execute_batch("BEGIN IMMEDIATE; COMMIT")?;
            }
            done => return done,
        }
    }
}

fn is_busy(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
}

/// Apply the missing migrations in one write transaction taken up front (`BEGIN IMMEDIATE`), so
/// two processes opening the same new file do not both apply them: the second waits, then
/// finds the schema current.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS rein_schema (version INTEGER PRIMARY KEY, applied_unix_ms INTEGER NOT NULL)",
    )?;
    let current: i64 =
        tx.query_row("SELECT COALESCE(MAX(version), 0) FROM rein_schema", [], |row| row.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if current > known {
        return Err(StoreError::TooNew { found: current, known });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = index as i64 + 1;
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO rein_schema (version, applied_unix_ms) VALUES (?1, ?2)",
            (version, rein_core::clock::unix_ms() as i64),
        )?;
        tracing::info!(version, "store schema migrated");
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_once_and_a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len() as i64);
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len() as i64);
        store.conn().execute("INSERT INTO rein_schema VALUES (999, 0)", []).unwrap();
        drop(store);
        assert!(matches!(Store::open(&path), Err(StoreError::TooNew { found: 999, .. })));
    }

    #[test]
    fn a_routine_calls_record_stays_out_of_the_trace_lookup_indexes() {
        let store = Store::open_in_memory().unwrap();
        let conn = store.conn();
        let insert = "INSERT INTO calls (at_unix_ms, request_id, trace_id, route, outcome,
                          attempts, elapsed_ms, notable, record, trace)
                      VALUES (?1, ?2, ?3, 'r', 'answered', 1, 5, 0, '{}', ?4)";
        for n in 0..40 {
            let trace = (n % 10 == 0).then(|| format!("{{\"n\":{n}}}"));
            conn.execute(insert, rusqlite::params![n, format!("req_{n}"), format!("t{n}"), trace])
                .unwrap();
        }
        // rein never runs ANALYZE: the plan is the one a store without statistics gets.
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", tools_sqlite::TRACE_BY_ID))
            .unwrap()
            .query_map(["t10"], |row| row.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("USING INDEX calls_trace_kept"), "{plan}");
        assert!(plan.contains("USING INDEX calls_request_kept"), "{plan}");
        assert!(!plan.contains("SCAN"), "a lookup reads no whole table or index: {plan}");
        let found = |id: &str| -> Vec<String> {
            conn.prepare(tools_sqlite::TRACE_BY_ID)
                .unwrap()
                .query_map([id], |row| row.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        assert_eq!(found("t10"), ["{\"n\":10}"]);
        assert_eq!(found("req_20"), ["{\"n\":20}"]);
        assert!(found("t11").is_empty(), "a call whose trace is not kept has none to find");
        conn.execute_batch("ANALYZE").unwrap();
        let entries = |index: &str| -> i64 {
            let stat: String = conn
                .query_row("SELECT stat FROM sqlite_stat1 WHERE idx = ?1", [index], |row| {
                    row.get(0)
                })
                .unwrap();
            stat.split(' ').next().unwrap().parse().unwrap()
        };
        assert_eq!(entries("calls_at"), 40);
        assert_eq!(entries("calls_trace_kept"), 4, "only the calls whose trace is kept");
        assert_eq!(entries("calls_request_kept"), 4, "only the calls whose trace is kept");
    }

    #[test]
    fn statement_journals_stay_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("rein.sqlite")).unwrap();
        let temp_store: i64 =
            store.conn().query_row("PRAGMA temp_store", [], |row| row.get(0)).unwrap();
        assert_eq!(temp_store, 2, "MEMORY");
    }

    /// The bundled SQLite is built without memory statistics (`.cargo/config.toml`): each of its
    /// allocations would otherwise take a process-wide mutex.
    #[test]
    fn the_bundled_sqlite_keeps_no_memory_statistics() {
        let store = Store::open_in_memory().unwrap();
        let conn = store.conn();
        let mut options = conn.prepare("PRAGMA compile_options").unwrap();
        let options: Vec<String> =
            options.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect();
        assert!(options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"), "{options:?}");
    }

    #[test]
    fn outbox_items_written_before_the_unknown_outcome_columns_stay_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE rein_schema (version INTEGER PRIMARY KEY, applied_unix_ms INTEGER NOT NULL);
                 INSERT INTO rein_schema VALUES (1, 0), (2, 0), (3, 0);",
            )
            .unwrap();
            for sql in &MIGRATIONS[..3] {
                conn.execute_batch(sql).unwrap();
            }
            conn.execute(
                "INSERT INTO tool_outbox (idempotency_key, tool, args, queued_result, state,
                     created_unix_ms, next_attempt_unix_ms)
                 VALUES ('k', 'refund', '{}', '{}', 'pending', 5, 5)",
                [],
            )
            .unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len() as i64);
        let (unknown, review, conversation): (bool, bool, Option<String>) = store
            .conn()
            .query_row(
                "SELECT outcome_unknown, review, conversation_id FROM tool_outbox WHERE idempotency_key = 'k'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .unwrap();
        assert_eq!((unknown, review, conversation), (false, false, None));
    }

    #[test]
    fn runs_counted_before_the_run_notes_stay_readable_without_notes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE rein_schema (version INTEGER PRIMARY KEY, applied_unix_ms INTEGER NOT NULL);
                 INSERT INTO rein_schema VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0);",
            )
            .unwrap();
            for sql in &MIGRATIONS[..6] {
                conn.execute_batch(sql).unwrap();
            }
            conn.execute(
                "INSERT INTO runs (run_id, conversation_id, first_unix_ms, touched_unix_ms,
                     model_calls, tool_calls, same_error, stopped)
                 VALUES ('r', 'c', 5, 6, 2, 1, 0, 'stopped_deadline')",
                [],
            )
            .unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len() as i64);
        let sql = format!("SELECT {} FROM runs WHERE run_id = 'r'", tools::rows::RUN_COLUMNS);
        let row = store.conn().query_row(&sql, [], |row| tools::rows::run_row(row)).unwrap();
        assert_eq!((row.model_calls, row.stopped.as_deref()), (2, Some("stopped_deadline")));
        assert_eq!(row.note, runs::RunNote::default());
    }

    #[test]
    fn a_store_written_before_the_tool_tables_is_migrated_and_keeps_its_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE rein_schema (version INTEGER PRIMARY KEY, applied_unix_ms INTEGER NOT NULL);
                 INSERT INTO rein_schema VALUES (1, 0);",
            )
            .unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute(
                "INSERT INTO route_versions VALUES ('support', 1, '{\"tiers\":{}}', 'ana', '', 5)",
                [],
            )
            .unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len() as i64);
        assert_eq!(store.versions("support").unwrap().len(), 1);
        let tool_tables: i64 = store
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table'
                 AND name IN ('tool_keys', 'tool_outbox', 'tool_cache', 'tool_holds')",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(tool_tables, 4);
    }
}
