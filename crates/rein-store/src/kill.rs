//! The kill switch's flips in the SQLite store, kept so that a restart comes back with every
//! switch as the operators left it, and with the audit trail (what was flipped, when, why)
//! intact. A flip is recorded before it takes effect and numbered; the gateway replays the
//! record at start and applies newer numbers as it syncs (`ToolStore::kill_flips_after`, which
//! Postgres implements too, for replicas).

use rusqlite::params;

use rein_core::{KillFlip, KillScope};

use crate::{Store, StoreError};

/// Record one flip after every earlier one; its sequence number.
pub(crate) fn record_kill_flip(store: &Store, flip: &KillFlip) -> Result<i64, StoreError> {
    let (route, at) = columns(flip);
    let conn = store.conn();
    conn.execute(
        "INSERT INTO kill_flips (route, engaged, reason, at_unix_ms) VALUES (?1, ?2, ?3, ?4)",
        params![route, flip.engaged, flip.reason, at],
    )?;
    Ok(conn.last_insert_rowid())
}

/// Every recorded flip, oldest first.
pub(crate) fn kill_flips(store: &Store) -> Result<Vec<KillFlip>, StoreError> {
    Ok(kill_flips_after(store, 0)?.into_iter().map(|(_, flip)| flip).collect())
}

/// The flips after sequence number `after`, oldest first, with their numbers.
pub(crate) fn kill_flips_after(
    store: &Store,
    after: i64,
) -> Result<Vec<(i64, KillFlip)>, StoreError> {
    let conn = store.conn();
    let mut statement = conn.prepare(
        "SELECT id, route, engaged, reason, at_unix_ms FROM kill_flips WHERE id > ?1
         ORDER BY id",
    )?;
    let rows = statement.query_map([after], |row| {
        Ok((row.get(0)?, flip(row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A flip as stored: the route (none for the global switch), and the time as signed ms.
pub(crate) fn flip(route: Option<String>, engaged: bool, reason: String, at: i64) -> KillFlip {
    KillFlip {
        scope: route.map_or(KillScope::Global, KillScope::Route),
        engaged,
        reason,
        at_unix_ms: u64::try_from(at).unwrap_or(0),
    }
}

/// A flip's route column (none for the global switch) and its time as signed ms.
pub(crate) fn columns(flip: &KillFlip) -> (Option<&str>, i64) {
    let route = match &flip.scope {
        KillScope::Global => None,
        KillScope::Route(route) => Some(route.as_str()),
    };
    (route, i64::try_from(flip.at_unix_ms).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flips_survive_a_reopen_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        let flips = vec![
            KillFlip {
                scope: KillScope::Route("support".into()),
                engaged: true,
                reason: "bad prompt edit".into(),
                at_unix_ms: 1_700_000_000_000,
            },
            KillFlip {
                scope: KillScope::Global,
                engaged: true,
                reason: "provider incident".into(),
                at_unix_ms: 1_700_000_060_000,
            },
            KillFlip {
                scope: KillScope::Global,
                engaged: false,
                reason: "resolved".into(),
                at_unix_ms: 1_700_000_120_000,
            },
        ];
        {
            let store = Store::open(&path).unwrap();
            assert!(store.kill_flips().unwrap().is_empty());
            for flip in &flips {
                store.record_kill_flip(flip).unwrap();
            }
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.kill_flips().unwrap(), flips);
    }
}
