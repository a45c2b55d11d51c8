//! What only one backend has: SQLite's file shared by two processes and its migrations, the
//! Postgres row locks behind `SKIP LOCKED`, replicas migrating at once, password scrubbing, and
//! the throwaway server's clean-up.

use std::time::Duration;

use rein_store::{RouteSettings, StoreError, TierSettings};

use super::*;

// ---- SQLite only ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_schema_and_route_versions_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.sqlite");
    let sqlite = Arc::new(Store::open(&path).unwrap());
    let schema = sqlite.schema_version().unwrap();
    let known = Store::open_in_memory().unwrap().schema_version().unwrap();
    assert_eq!(schema, known, "every migration applied");
    assert!(schema >= 9, "migration 9 marks tool calls among the recorded calls");
    let tier = TierSettings {
        model: "model-a".to_owned(),
        system_prompt: Some("Be brief.".to_owned()),
        max_tokens: Some(300),
        temperature: None,
        top_p: None,
    };
    let settings = RouteSettings { tiers: [("primary".to_owned(), tier)].into() };
    let recorded = sqlite.record_settings("support", &settings, "ana", "first").unwrap();
    let tools = SqliteToolStore::new(Arc::clone(&sqlite));
    assert_eq!(begin(&tools, "k", T0).await, KeyBegin::Fresh);
    tools.key_finish("k", &json!("sent"), T0).await.unwrap();
    drop((tools, sqlite));

    let sqlite = Arc::new(Store::open(&path).unwrap());
    assert_eq!(sqlite.schema_version().unwrap(), schema);
    let active = sqlite.active_version("support").unwrap().unwrap();
    assert_eq!((active.version, active.settings), (recorded.version, settings));
    let tools = SqliteToolStore::new(sqlite);
    assert_eq!(
        stored(&tools, "k").await,
        KeyBegin::Stored { state: KeyState::Done, result: json!("sent") }
    );
}

/// Regression: two processes opening a new file at once both applied the migrations, and the
/// second failed on a table that already existed.
#[test]
fn sqlite_stores_opening_a_new_file_at_once_migrate_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.sqlite");
    let openers: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || Store::open(&path).and_then(|store| store.schema_version()))
        })
        .collect();
    let versions: Vec<i64> =
        openers.into_iter().map(|opener| opener.join().unwrap().unwrap()).collect();
    let known = Store::open_in_memory().unwrap().schema_version().unwrap();
    assert!(versions.iter().all(|version| *version == known), "{versions:?}");
}

/// Another process's write transaction on the same file makes a claim wait (busy timeout), not
/// fail, and the claim then sees that process's committed state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_claim_waits_for_another_process_writing_the_file() {
    let backend = Backend::sqlite().await;
    let Place::Sqlite { path, .. } = &backend.place else { unreachable!() };
    let queued_item = begin_and_enqueue(&*backend.store, "k", T0).await;
    let other = rusqlite::Connection::open(path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    other.execute("UPDATE tool_outbox SET next_attempt_unix_ms = ?1", [T0 + 5]).unwrap();
    let store = Arc::clone(&backend.store);
    let claiming = tokio::spawn(async move { claim(&*store, "w", T0 + 5, 10).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!claiming.is_finished(), "the claim waits for the other writer");
    other.execute_batch("COMMIT").unwrap();
    let claimed = claiming.await.unwrap();
    assert_eq!(ids(&claimed), vec![queued_item.id]);
    assert_eq!(claimed[0].next_attempt_unix_ms, T0 + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_tool_store_opens_a_sqlite_file_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tools.sqlite");
    let spec = path.to_str().unwrap();
    let store = open_tool_store(spec, None).await.unwrap();
    assert!(format!("{store:?}").starts_with("SqliteToolStore"));
    assert_eq!(begin(&*store, "k", T0).await, KeyBegin::Fresh);
    store.key_finish("k", &json!("sent"), T0).await.unwrap();
    drop(store);
    let store = open_tool_store(spec, None).await.unwrap();
    assert_eq!(
        stored(&*store, "k").await,
        KeyBegin::Stored { state: KeyState::Done, result: json!("sent") }
    );
    let memory = open_tool_store(":memory:", None).await.unwrap();
    assert_eq!(begin(&*memory, "k", T0).await, KeyBegin::Fresh);
}

// ---- Postgres only ----

async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The negative check for `SKIP LOCKED`: while another replica's claim holds an item's row lock
/// (its transaction still open), a claim passes that item by instead of waiting for it or
/// taking it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claim_skips_items_another_replica_is_claiming() {
    let backend = Backend::postgres().await;
    let Place::Postgres { url } = &backend.place else { unreachable!() };
    let store = &*backend.store;
    let a = begin_and_enqueue(store, "a", T0).await;
    let b = begin_and_enqueue(store, "b", T0).await;
    let c = begin_and_enqueue(store, "c", T0).await;

    let mut other = raw_client(url).await;
    let claiming = other.transaction().await.unwrap();
    claiming
        .execute("SELECT id FROM tool_outbox WHERE id = $1 FOR UPDATE", &[&a.id])
        .await
        .unwrap();
    let claimed = tokio::time::timeout(Duration::from_secs(5), claim(store, "w", T0, 10))
        .await
        .expect("a locked item is skipped, not waited for");
    assert_eq!(ids(&claimed), vec![b.id, c.id]);
    claiming.rollback().await.unwrap();
    assert_eq!(ids(&claim(store, "w", T0, 10).await), vec![a.id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_starting_at_once_migrate_once() {
    let url = fresh_database().await;
    let connects: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { PostgresToolStore::connect(&url).await })
        })
        .collect();
    let mut versions = Vec::new();
    for connect in connects {
        let store = connect.await.unwrap().unwrap();
        versions.push(store.schema_version().await.unwrap());
    }
    let known = versions[0];
    assert!(known >= 8 && versions.iter().all(|v| *v == known), "{versions:?}");
    let client = raw_client(&url).await;
    let rows = client.query("SELECT version FROM rein_schema", &[]).await.unwrap();
    assert_eq!(rows.len() as i64, known, "each migration applied once");

    // A database migrated by a newer rein is refused, not written to.
    client.execute("INSERT INTO rein_schema VALUES (999, 0)", &[]).await.unwrap();
    match PostgresToolStore::connect(&url).await {
        Err(StoreError::TooNew { found: 999, known: refused }) if refused == known => {}
        other => panic!("expected TooNew, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_errors_and_debug_never_show_the_password() {
    let closed_port =
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    for url in [
        format!("postgres://rein:hunter2-pw@127.0.0.1:{closed_port}/rein"),
        format!("postgresql://rein:hunter2%40pw@127.0.0.1:{closed_port}/rein"),
        "postgres://rein:hunter2-pw@127.0.0.1:not-a-port/rein".to_owned(),
        "postgres://rein:hunter2-pw@127.0.0.1/rein?sslmode=bogus".to_owned(),
    ] {
        let error = PostgresToolStore::connect(&url).await.unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, StoreError::Postgres(_)), "{error:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!format!("{error:?}").contains("hunter2"), "{error:?}");
    }
    // The test server trusts loopback connections, so the password is not checked.
    let url = fresh_database().await.replacen("://rein@", "://rein:hunter2-pw@", 1);
    let store = PostgresToolStore::connect(&url).await.unwrap();
    let debug = format!("{store:?}");
    assert!(debug.contains("127.0.0.1") && !debug.contains("hunter2"), "{debug}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temp_postgres_stops_its_server_and_removes_its_directory_on_drop() {
    let server = TempPostgres::start().unwrap();
    let store = PostgresToolStore::connect(&server.create_database().await.unwrap()).await.unwrap();
    assert_eq!(store.outbox_stats().await.unwrap(), OutboxStats::default());
    let dir = server.dir().to_owned();
    assert!(dir.join("data").is_dir());
    drop(server);
    assert!(!dir.exists(), "{} is left behind", dir.display());
    assert!(store.outbox_stats().await.is_err(), "the server still answers");
}
