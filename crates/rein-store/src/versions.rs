//! Versioned route settings: every change of a route's prompts or model settings becomes a new
//! numbered version with its author and time; one version per route is active. Reverting makes
//! an earlier version active again (audited, and marked as a revert: [`crate::levers`]), so the
//! version that serves can always be named.

use std::collections::BTreeMap;

use rusqlite::OptionalExtension;
use serde::{Deserialize, Serialize};

use crate::{Store, StoreError};

/// What one tier sends: its model (possibly a pinned snapshot) and its prompt and parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSettings {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
}

/// A route's prompts and model settings, by tier name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSettings {
    pub tiers: BTreeMap<String, TierSettings>,
}

/// One stored version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersionInfo {
    pub route: String,
    pub version: i64,
    pub settings: RouteSettings,
    pub author: String,
    pub note: String,
    pub created_unix_ms: i64,
    /// Whether this version is the one serving.
    pub active: bool,
}

/// One field that differs between two versions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// `tiers.<tier>.<field>`.
    pub path: String,
    pub from: Option<serde_json::Value>,
    pub to: Option<serde_json::Value>,
}

fn now_ms() -> i64 {
    rein_core::clock::unix_ms() as i64
}

/// Record `settings` as `route`'s new active version, unless they are the active one's.
pub(crate) fn record_settings(
    store: &Store,
    route: &str,
    settings: &RouteSettings,
    author: &str,
    note: &str,
) -> Result<VersionInfo, StoreError> {
    if let Some(active) = active_version(store, route)?
        && active.settings == *settings
    {
        return Ok(active);
    }
    let json = serde_json::to_string(settings).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let mut conn = store.conn();
    let tx = conn.transaction()?;
    let version: i64 = tx.query_row(
        "SELECT COALESCE(MAX(version), 0) + 1 FROM route_versions WHERE route = ?1",
        [route],
        |row| row.get(0),
    )?;
    let created = now_ms();
    tx.execute(
        "INSERT INTO route_versions (route, version, settings, author, note, created_unix_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        (route, version, &json, author, note, created),
    )?;
    tx.execute(
        "INSERT INTO route_active (route, version, author, reason, changed_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(route) DO UPDATE SET version = excluded.version, author = excluded.author,
           reason = excluded.reason, changed_unix_ms = excluded.changed_unix_ms, lever = NULL",
        (route, version, author, note, created),
    )?;
    tx.commit()?;
    tracing::info!(route, version, author, "route settings: new version");
    Ok(VersionInfo {
        route: route.to_string(),
        version,
        settings: settings.clone(),
        author: author.to_string(),
        note: note.to_string(),
        created_unix_ms: created,
        active: true,
    })
}

/// Every version of `route`, oldest first.
pub(crate) fn versions(store: &Store, route: &str) -> Result<Vec<VersionInfo>, StoreError> {
    let active = active_number(store, route)?;
    let conn = store.conn();
    let mut statement = conn.prepare(
        "SELECT version, settings, author, note, created_unix_ms FROM route_versions
         WHERE route = ?1 ORDER BY version",
    )?;
    let rows = statement.query_map([route], |row| {
        Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (version, settings, author, note, created_unix_ms) = row?;
        out.push(VersionInfo {
            route: route.to_string(),
            version,
            settings: parse(&settings)?,
            author,
            note,
            created_unix_ms,
            active: active == Some(version),
        });
    }
    Ok(out)
}

/// One version of `route`.
pub(crate) fn find_version(
    store: &Store,
    route: &str,
    version: i64,
) -> Result<VersionInfo, StoreError> {
    versions(store, route)?
        .into_iter()
        .find(|v| v.version == version)
        .ok_or_else(|| StoreError::NoSuchVersion { route: route.to_string(), version })
}

/// The version of `route` serving now, if any.
pub(crate) fn active_version(
    store: &Store,
    route: &str,
) -> Result<Option<VersionInfo>, StoreError> {
    match active_number(store, route)? {
        Some(version) => find_version(store, route, version).map(Some),
        None => Ok(None),
    }
}

/// Make `version` the one serving.
pub(crate) fn activate(
    store: &Store,
    route: &str,
    version: i64,
    author: &str,
    reason: &str,
) -> Result<VersionInfo, StoreError> {
    let info = find_version(store, route, version)?;
    store.conn().execute(
        "UPDATE route_active SET version = ?2, author = ?3, reason = ?4, changed_unix_ms = ?5,
           lever = ?6 WHERE route = ?1",
        (route, version, author, reason, now_ms(), crate::levers::LEVER_REVERT),
    )?;
    tracing::warn!(route, version, author, reason, "route settings: version activated");
    Ok(VersionInfo { active: true, ..info })
}

/// The fields that differ from version `from` to version `to`.
pub(crate) fn diff(
    store: &Store,
    route: &str,
    from: i64,
    to: i64,
) -> Result<Vec<Change>, StoreError> {
    let a = flatten(&find_version(store, route, from)?.settings);
    let b = flatten(&find_version(store, route, to)?.settings);
    let mut paths: Vec<&String> = a.keys().chain(b.keys()).collect();
    paths.sort();
    paths.dedup();
    Ok(paths
        .into_iter()
        .filter(|path| a.get(*path) != b.get(*path))
        .map(|path| Change {
            path: path.clone(),
            from: a.get(path).cloned(),
            to: b.get(path).cloned(),
        })
        .collect())
}

/// The newest version of `route` written by `author`.
pub(crate) fn latest_by(
    store: &Store,
    route: &str,
    author: &str,
) -> Result<Option<VersionInfo>, StoreError> {
    Ok(versions(store, route)?.into_iter().rev().find(|v| v.author == author))
}

/// The number of the version serving now.
fn active_number(store: &Store, route: &str) -> Result<Option<i64>, StoreError> {
    Ok(store
        .conn()
        .query_row("SELECT version FROM route_active WHERE route = ?1", [route], |row| row.get(0))
        .optional()?)
}

fn parse(settings: &str) -> Result<RouteSettings, StoreError> {
    serde_json::from_str(settings).map_err(|e| StoreError::Corrupt(format!("route settings: {e}")))
}

/// `tiers.<tier>.<field>` → value, for diffs.
fn flatten(settings: &RouteSettings) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    for (tier, values) in &settings.tiers {
        if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(values) {
            for (field, value) in fields {
                out.insert(format!("tiers.{tier}.{field}"), value);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(prompt: &str) -> RouteSettings {
        let mut tiers = BTreeMap::new();
        tiers.insert(
            "primary".to_string(),
            TierSettings {
                model: "gpt-4o-2024-08-06".into(),
                system_prompt: Some(prompt.into()),
                max_tokens: None,
                temperature: Some(0.2),
                top_p: None,
            },
        );
        RouteSettings { tiers }
    }

    #[test]
    fn versions_record_diff_and_revert() {
        let store = Store::open_in_memory().unwrap();
        let v1 = store
            .record_settings("support", &settings("Answer fully."), "config", "initial")
            .unwrap();
        assert_eq!(v1.version, 1);
        let same = store
            .record_settings("support", &settings("Answer fully."), "config", "reload")
            .unwrap();
        assert_eq!(same.version, 1, "unchanged settings make no new version");
        let v2 = store
            .record_settings("support", &settings("Be brief."), "alice", "shorter answers")
            .unwrap();
        assert_eq!(v2.version, 2);
        assert_eq!(store.active_version("support").unwrap().unwrap().version, 2);
        let diff = store.diff("support", 1, 2).unwrap();
        assert_eq!(diff.len(), 1);
        assert_eq!(diff[0].path, "tiers.primary.system_prompt");
        assert_eq!(diff[0].to, Some(serde_json::json!("Be brief.")));

        let reverted = store.activate("support", 1, "bob", "wrong cutoffs").unwrap();
        assert_eq!(reverted.settings, settings("Answer fully."));
        let all = store.versions("support").unwrap();
        assert_eq!(
            all.iter().map(|v| (v.version, v.active)).collect::<Vec<_>>(),
            vec![(1, true), (2, false)]
        );
        assert!(matches!(
            store.activate("support", 9, "x", "y"),
            Err(StoreError::NoSuchVersion { .. })
        ));
        // After a revert, recording v1's settings again is a no-op; v2's makes a new version 3.
        assert_eq!(
            store
                .record_settings("support", &settings("Be brief."), "config", "reload")
                .unwrap()
                .version,
            3
        );
    }

    #[test]
    fn versions_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        Store::open(&path).unwrap().record_settings("r", &settings("p"), "a", "n").unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(store.active_version("r").unwrap().unwrap().settings, settings("p"));
    }
}
