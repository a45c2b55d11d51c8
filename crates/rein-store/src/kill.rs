//! The kill switch's flips, kept so that a restart comes back with every switch as the
//! operators left it, and with the audit trail (who flipped what, when, why) intact. A flip is
//! recorded before it takes effect; the gateway replays the record at start.

use rusqlite::params;

use rein_core::{KillFlip, KillScope};

use crate::{Store, StoreError};

impl Store {
    /// Record one flip, durably (`synchronous = FULL`), after every earlier one.
    pub fn record_kill_flip(&self, flip: &KillFlip) -> Result<(), StoreError> {
        let route = match &flip.scope {
            KillScope::Global => None,
            KillScope::Route(route) => Some(route.as_str()),
        };
        let at = i64::try_from(flip.at_unix_ms).unwrap_or(i64::MAX);
        self.conn().execute(
            "INSERT INTO kill_flips (route, engaged, reason, at_unix_ms) VALUES (?1, ?2, ?3, ?4)",
            params![route, flip.engaged, flip.reason, at],
        )?;
        Ok(())
    }

    /// Every recorded flip, oldest first.
    pub fn kill_flips(&self) -> Result<Vec<KillFlip>, StoreError> {
        let conn = self.conn();
        let mut statement =
            conn.prepare("SELECT route, engaged, reason, at_unix_ms FROM kill_flips ORDER BY id")?;
        let rows = statement.query_map([], |row| {
            let route: Option<String> = row.get(0)?;
            let at: i64 = row.get(3)?;
            Ok(KillFlip {
                scope: route.map_or(KillScope::Global, KillScope::Route),
                engaged: row.get(1)?,
                reason: row.get(2)?,
                at_unix_ms: u64::try_from(at).unwrap_or(0),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
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
