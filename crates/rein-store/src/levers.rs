//! The levers an operator pulls on a route when its quality drops, as the store keeps them:
//! the route-to lever's flips (numbered, recorded before they apply, replayed at start and
//! synced by every replica like the kill switch's; `ToolStore::route_to_flips_after`, which
//! Postgres implements too), and how a route's active settings version came to serve (a plain
//! new version, a revert, or a pinned model snapshot: `route_active.lever`), with who did it,
//! when and why.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use rein_core::RouteToFlip;

use crate::versions::{self, RouteSettings, VersionInfo};
use crate::{Store, StoreError};

/// How the active version came to serve.
pub const LEVER_REVERT: &str = "revert";
/// A version made by pinning one tier's model snapshot.
pub const LEVER_PIN_MODEL: &str = "pin_model";

/// The version serving a route and how it came to: the lever (`revert`, `pin_model`, or none
/// for an ordinary new version), who pulled it, why and when.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActiveSettings {
    pub version: i64,
    pub lever: Option<String>,
    pub author: String,
    pub reason: String,
    pub since_unix_ms: i64,
}

/// Record one route-to flip after every earlier one; its sequence number.
pub(crate) fn record_route_to(store: &Store, flip: &RouteToFlip) -> Result<i64, StoreError> {
    let conn = store.conn();
    conn.execute(
        "INSERT INTO route_to_flips (route, tier, author, reason, at_unix_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![flip.route, flip.tier, flip.author, flip.reason, at_column(flip)],
    )?;
    Ok(conn.last_insert_rowid())
}

/// The route-to flips after sequence number `after`, oldest first, with their numbers.
pub(crate) fn route_to_after(
    store: &Store,
    after: i64,
) -> Result<Vec<(i64, RouteToFlip)>, StoreError> {
    let conn = store.conn();
    let mut statement = conn.prepare(
        "SELECT id, route, tier, author, reason, at_unix_ms FROM route_to_flips WHERE id > ?1
         ORDER BY id",
    )?;
    let rows = statement.query_map([after], |row| {
        Ok((
            row.get(0)?,
            route_to_flip(row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?),
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A route-to flip as stored.
pub(crate) fn route_to_flip(
    route: String,
    tier: Option<String>,
    author: String,
    reason: String,
    at: i64,
) -> RouteToFlip {
    RouteToFlip { route, tier, author, reason, at_unix_ms: u64::try_from(at).unwrap_or(0) }
}

/// A flip's time as signed ms.
pub(crate) fn at_column(flip: &RouteToFlip) -> i64 {
    i64::try_from(flip.at_unix_ms).unwrap_or(i64::MAX)
}

/// A new version of `route` equal to the active one with `tier`'s model replaced by `model`,
/// made active and marked as a model pin.
pub(crate) fn pin_model(
    store: &Store,
    route: &str,
    tier: &str,
    model: &str,
    author: &str,
    reason: &str,
) -> Result<VersionInfo, StoreError> {
    let active = versions::active_version(store, route)?
        .ok_or_else(|| StoreError::NoSuchVersion { route: route.to_string(), version: 0 })?;
    let mut settings: RouteSettings = active.settings.clone();
    let Some(tier_settings) = settings.tiers.get_mut(tier) else {
        return Err(StoreError::NoSuchTier { route: route.to_string(), tier: tier.to_string() });
    };
    tier_settings.model = model.to_string();
    let info = versions::record_settings(store, route, &settings, author, reason)?;
    if info.version != active.version {
        mark(store, route, LEVER_PIN_MODEL)?;
    }
    Ok(info)
}

/// Mark how `route`'s active version came to serve.
pub(crate) fn mark(store: &Store, route: &str, lever: &str) -> Result<(), StoreError> {
    store.conn().execute("UPDATE route_active SET lever = ?2 WHERE route = ?1", (route, lever))?;
    Ok(())
}

/// The version serving `route` and how it came to, if the route has one.
pub(crate) fn active_settings(
    store: &Store,
    route: &str,
) -> Result<Option<ActiveSettings>, StoreError> {
    Ok(store
        .conn()
        .query_row(
            "SELECT version, lever, author, reason, changed_unix_ms FROM route_active
             WHERE route = ?1",
            [route],
            |row| {
                Ok(ActiveSettings {
                    version: row.get(0)?,
                    lever: row.get(1)?,
                    author: row.get(2)?,
                    reason: row.get(3)?,
                    since_unix_ms: row.get(4)?,
                })
            },
        )
        .optional()?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::TierSettings;

    fn settings(model: &str) -> RouteSettings {
        let tier = |model: &str| TierSettings {
            model: model.into(),
            system_prompt: Some("Answer fully.".into()),
            max_tokens: None,
            temperature: None,
            top_p: None,
        };
        let tiers = BTreeMap::from([
            ("primary".to_string(), tier(model)),
            ("fallback".to_string(), tier("small")),
        ]);
        RouteSettings { tiers }
    }

    #[test]
    fn a_model_pin_is_a_new_revertable_version_and_says_how_it_came_to_serve() {
        let store = Store::open_in_memory().unwrap();
        store.record_settings("support", &settings("gpt-4o"), "config", "initial").unwrap();
        let plain = store.active_settings("support").unwrap().unwrap();
        assert_eq!((plain.version, plain.lever), (1, None));

        let pinned = store
            .pin_model("support", "primary", "gpt-4o-2024-08-06", "ana", "provider drift")
            .unwrap();
        assert_eq!(pinned.version, 2);
        assert_eq!(pinned.settings, settings("gpt-4o-2024-08-06"), "only the model changed");
        let active = store.active_settings("support").unwrap().unwrap();
        assert_eq!(active.version, 2);
        assert_eq!(active.lever.as_deref(), Some(LEVER_PIN_MODEL));
        assert_eq!((active.author.as_str(), active.reason.as_str()), ("ana", "provider drift"));

        store.activate("support", 1, "bo", "pin did not help").unwrap();
        let reverted = store.active_settings("support").unwrap().unwrap();
        assert_eq!((reverted.version, reverted.lever.as_deref()), (1, Some(LEVER_REVERT)));
        assert_eq!(reverted.author, "bo");

        assert!(matches!(
            store.pin_model("support", "nope", "m", "ana", "why"),
            Err(StoreError::NoSuchTier { .. })
        ));
        assert!(matches!(
            store.pin_model("billing", "primary", "m", "ana", "why"),
            Err(StoreError::NoSuchVersion { .. })
        ));
    }

    #[test]
    fn route_to_flips_survive_a_reopen_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        let flips = vec![
            RouteToFlip {
                route: "support".into(),
                tier: Some("fallback".into()),
                author: "ana".into(),
                reason: "quality dropped".into(),
                at_unix_ms: 1_700_000_000_000,
            },
            RouteToFlip {
                route: "support".into(),
                tier: None,
                author: "bo".into(),
                reason: "reverted the prompt".into(),
                at_unix_ms: 1_700_000_060_000,
            },
        ];
        {
            let store = Store::open(&path).unwrap();
            for flip in &flips {
                store.record_route_to(flip).unwrap();
            }
        }
        let store = Store::open(&path).unwrap();
        let found = store.route_to_flips_after(0).unwrap();
        assert_eq!(found.iter().map(|(_, flip)| flip.clone()).collect::<Vec<_>>(), flips);
        assert_eq!(store.route_to_flips_after(found[0].0).unwrap().len(), 1);
    }
}
