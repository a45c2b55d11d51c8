//! rein's embedded store: one SQLite file (WAL, `synchronous = FULL`) holding what must outlive
//! the process. Every table's rows are versioned by the schema version in `rein_schema`, and
//! migrations only move forward, so records written by an older rein stay readable.
//!
//! Today it holds route settings versions ([`versions`]); the outbox and hand-offs join it.

pub mod versions;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

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
];

/// The embedded store. Calls are short and synchronous; async callers use `spawn_blocking` or
/// accept the microseconds.
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Open (creating if needed) the store at `path`, and bring its schema up to date.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path)
            .map_err(|source| StoreError::Open { path: path.display().to_string(), source })?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
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

    fn init(conn: Connection) -> Result<Self, StoreError> {
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&conn)?;
        Ok(Self { conn: Mutex::new(conn) })
    }

    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        match self.conn.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The schema version of the open store.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self.conn().query_row("SELECT MAX(version) FROM rein_schema", [], |row| row.get(0))?)
    }
}

fn migrate(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS rein_schema (version INTEGER PRIMARY KEY, applied_unix_ms INTEGER NOT NULL)",
    )?;
    let current: i64 =
        conn.query_row("SELECT COALESCE(MAX(version), 0) FROM rein_schema", [], |row| row.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if current > known {
        return Err(StoreError::TooNew { found: current, known });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = index as i64 + 1;
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO rein_schema (version, applied_unix_ms) VALUES (?1, ?2)",
            (version, rein_core::clock::unix_ms() as i64),
        )?;
        tx.commit()?;
        tracing::info!(version, "store schema migrated");
    }
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
}
