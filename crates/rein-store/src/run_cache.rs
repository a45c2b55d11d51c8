//! Runs' rows as the SQLite store last wrote them, kept beside its one connection so that a run's
//! next call finds its row without reading it (a read was about a sixth of a run's bookkeeping).
//! The file stays the truth: an entry is only ever what this connection committed, it is
//! forgotten when the transaction that wrote it is rolled back, and the whole cache is dropped
//! when SQLite's `data_version` says another connection (the CLI, another process on the same
//! file) committed since the cache was last checked. Every statement that writes `runs` on this
//! connection either writes its entry too or forgets it.

use std::collections::HashMap;

use rusqlite::Connection;

use crate::StoreError;
use crate::runs::RunRow;

/// The most rows kept; past it the cache starts again empty (a row not found is read).
const MAX_ROWS: usize = 1024;

/// The cache of runs' rows (in the [`crate::Store`], behind its own lock, taken only with the
/// connection's).
#[derive(Debug, Default)]
pub(crate) struct RunCache {
    rows: HashMap<String, Entry>,
    /// The transaction in progress, counted from the store's opening; rows written in it carry
    /// its number until it commits.
    serial: u64,
    /// The transaction in which `data_version` was last read, and what it said.
    checked: Option<u64>,
    data_version: i64,
    /// Rows found here and rows read, since the store opened (for the tests).
    hits: u64,
    misses: u64,
}

#[derive(Debug)]
struct Entry {
    row: RunRow,
    /// The transaction that wrote it.
    serial: u64,
}

impl RunCache {
    /// Check, once a transaction, that no other connection has committed since the last check;
    /// when one has, every row kept may be stale and all are dropped. Run inside the
    /// transaction (after `BEGIN IMMEDIATE` no other connection can commit until it ends).
    fn check(&mut self, conn: &Connection) -> Result<(), StoreError> {
        if self.checked == Some(self.serial) {
            return Ok(());
        }
        let version: i64 =
            conn.prepare_cached("PRAGMA data_version")?.query_row([], |row| row.get(0))?;
        if self.checked.is_none() || version != self.data_version {
            self.rows.clear();
        }
        self.data_version = version;
        self.checked = Some(self.serial);
        Ok(())
    }

    /// Run `run_id`'s row as this connection last committed or wrote it, taken out of the cache
    /// (the caller writes it back with [`RunCache::put`]); `None` when it is not known here
    /// (read it from the file).
    pub(crate) fn take(
        &mut self,
        conn: &Connection,
        run_id: &str,
    ) -> Result<Option<RunRow>, StoreError> {
        self.check(conn)?;
        let found = self.rows.remove(run_id).map(|entry| entry.row);
        if found.is_some() {
            self.hits += 1
        } else {
            self.misses += 1
        }
        Ok(found)
    }

    /// `row` is run `run_id`'s row as just written in the current transaction.
    pub(crate) fn put(&mut self, run_id: &str, row: RunRow) {
        if self.rows.len() >= MAX_ROWS && !self.rows.contains_key(run_id) {
            self.rows.clear();
        }
        self.rows.insert(run_id.to_owned(), Entry { row, serial: self.serial });
    }

    /// Change run `run_id`'s kept row as a statement just changed it in the current
    /// transaction (nothing when it is not kept). No check of `data_version` here: a kept row
    /// another connection has since changed is changed all the same, and the next
    /// [`RunCache::take`] still finds their commit unseen and drops it.
    pub(crate) fn update(&mut self, run_id: &str, change: impl FnOnce(&mut RunRow)) {
        if let Some(entry) = self.rows.get_mut(run_id) {
            change(&mut entry.row);
            entry.serial = self.serial;
        }
    }

    /// Forget run `run_id`'s row (a statement changed it in a way not kept here).
    pub(crate) fn forget(&mut self, run_id: &str) {
        self.rows.remove(run_id);
    }

    /// Forget every row (a statement changed rows it does not name).
    pub(crate) fn forget_all(&mut self) {
        self.rows.clear();
    }

    /// The current transaction's writes were rolled back (to a savepoint, or whole): forget
    /// every row it wrote.
    pub(crate) fn rolled_back(&mut self) {
        let serial = self.serial;
        self.rows.retain(|_, entry| entry.serial != serial);
    }

    /// The current transaction ended, committed or not; the next one checks `data_version`
    /// again.
    pub(crate) fn ended(&mut self, committed: bool) {
        if !committed {
            self.rolled_back();
        }
        self.serial += 1;
    }

    /// Rows found here and rows read from the file, since the store opened.
    #[cfg(test)]
    pub(crate) fn hits_and_misses(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::RunNote;

    fn row(model_calls: i64) -> RunRow {
        RunRow {
            conversation_id: None,
            first_unix_ms: 1,
            touched_unix_ms: 2,
            model_calls,
            tool_calls: 0,
            last_error: None,
            same_error: 0,
            stopped: None,
            note: RunNote::default(),
        }
    }

    #[test]
    fn a_row_written_is_found_until_its_transaction_is_rolled_back() {
        let conn = Connection::open_in_memory().unwrap();
        let mut cache = RunCache::default();
        assert_eq!(cache.take(&conn, "r").unwrap(), None);
        cache.put("r", row(1));
        cache.ended(true);
        assert_eq!(cache.take(&conn, "r").unwrap(), Some(row(1)));
        cache.put("r", row(2));
        cache.put("s", row(7));
        cache.rolled_back();
        assert_eq!(cache.take(&conn, "r").unwrap(), None, "written by the rolled back one");
        assert_eq!(cache.take(&conn, "s").unwrap(), None);
        cache.ended(false);

        cache.put("r", row(3));
        cache.ended(true);
        cache.update("r", |row| row.model_calls = 4);
        cache.ended(false);
        assert_eq!(cache.take(&conn, "r").unwrap(), None, "changed by a transaction not committed");
        assert_eq!(cache.hits_and_misses(), (1, 4));
    }

    #[test]
    fn a_commit_of_another_connection_drops_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        let ours = Connection::open(&path).unwrap();
        let theirs = Connection::open(&path).unwrap();
        theirs.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let mut cache = RunCache::default();
        cache.take(&ours, "r").unwrap();
        cache.put("r", row(1));
        cache.ended(true);
        ours.execute_batch("INSERT INTO t VALUES (1)").unwrap();
        assert_eq!(cache.take(&ours, "r").unwrap(), Some(row(1)), "our own commit keeps it");
        cache.put("r", row(2));
        cache.ended(true);
        theirs.execute_batch("INSERT INTO t VALUES (2)").unwrap();
        assert_eq!(cache.take(&ours, "r").unwrap(), None, "theirs drops it");
    }

    #[test]
    fn past_its_size_the_cache_starts_again() {
        let conn = Connection::open_in_memory().unwrap();
        let mut cache = RunCache::default();
        cache.take(&conn, "first").unwrap();
        for n in 0..MAX_ROWS {
            cache.put(&format!("r{n}"), row(1));
        }
        cache.put("r0", row(2));
        assert_eq!(cache.rows.len(), MAX_ROWS, "a kept row rewritten takes no room");
        cache.put("one more", row(1));
        assert_eq!(cache.rows.len(), 1);
    }
}
