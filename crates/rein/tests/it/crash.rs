//! Exactly once under crashes: `rein serve` is killed with SIGKILL at seeded moments while
//! refunds are being sent, queued and replayed, and restarted on the same SQLite file. A
//! Stripe-like refund backend (it executes each `Idempotency-Key` once and remembers the
//! answer) keeps its own log across the restarts. The client behaves like an agent: a write
//! whose answer it never got is sent again with the same key. At the end, with the backend up,
//! every write must have executed exactly once under the client's key, and none may be lost.
//!
//! `REIN_CRASH_ROUNDS` (default 200) and `REIN_CRASH_SEED` make longer or different runs:
//! `REIN_CRASH_ROUNDS=2000 cargo test -p rein --test it crash -- --nocapture`.
//!
//! Two replicas on one Postgres: both drain one queue, and every queued write executes once.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_rein");
const ADMIN_ENV: &str = "REIN_CRASH_ADMIN";
const ADMIN_KEY: &str = "crash-admin-key";

/// How the refund backend answers right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Executes (once per key) and answers at once.
    Up,
    /// 503 before executing anything.
    Down,
    /// Executes, then answers only after 300 ms (past the rung's timeout): an unknown outcome.
    Slow,
}

#[derive(Debug, Default)]
struct Ledger {
    mode: Option<Mode>,
    /// Every request received: (idempotency key, amount).
    deliveries: Vec<(String, i64)>,
    /// Executions by key: (amount, times executed).
    executions: BTreeMap<String, (i64, u32)>,
    /// Requests that carried no key (must never happen).
    keyless: u32,
    /// Deliveries received while up, by key.
    up_deliveries: BTreeMap<String, u32>,
}

type Backend = Arc<Mutex<Ledger>>;

fn ledger(backend: &Backend) -> std::sync::MutexGuard<'_, Ledger> {
    backend.lock().unwrap()
}

async fn refund(
    State(backend): State<Backend>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let amount = body["amount"].as_i64().unwrap_or(-1);
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string);
    let mode = {
        let mut ledger = ledger(&backend);
        let mode = ledger.mode.unwrap_or(Mode::Up);
        let Some(key) = key.clone() else {
            ledger.keyless += 1;
            return (StatusCode::BAD_REQUEST, "no Idempotency-Key").into_response();
        };
        ledger.deliveries.push((key.clone(), amount));
        if mode == Mode::Down {
            return (StatusCode::SERVICE_UNAVAILABLE, "refund processor down").into_response();
        }
        *ledger.up_deliveries.entry(key.clone()).or_default() += 1;
        let entry = ledger.executions.entry(key).or_insert((amount, 0));
        if entry.1 == 0 {
            entry.1 = 1;
        }
        mode
    };
    if mode == Mode::Slow {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let key = key.unwrap_or_default();
    Json(json!({"id": format!("re_{key}"), "amount": amount, "status": "succeeded"}))
        .into_response()
}

async fn start_backend() -> (Backend, u16) {
    let backend: Backend = Arc::default();
    let app = axum::Router::new()
        .route("/refunds", axum::routing::post(refund))
        .with_state(backend.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (backend, port)
}

/// A gateway config with a `refund` write tool (primary + durable queue) on `port`.
fn config(dir: &std::path::Path, port: u16, postgres_env: Option<&str>) -> std::path::PathBuf {
    let store = match postgres_env {
        Some(env) => format!(
            "sqlite_path = \"{}\"\npostgres_url_env = \"{env}\"",
            dir.join("versions.sqlite").display()
        ),
        None => format!("sqlite_path = \"{}\"", dir.join("rein.sqlite").display()),
    };
    let text = format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_key_env = "{ADMIN_ENV}"
workers = 1
drain_timeout_ms = 100

[store]
{store}

[providers.sim]
kind = "sim"

[routes.chat]
[[routes.chat.tiers]]
name = "primary"
provider = "sim"
model = "sim-primary"

[outbox]
lease_ms = 400
backoff_base_ms = 20
backoff_cap_ms = 200
poll_ms = 20
batch = 4

[tools.refund]
kind = "write"
idempotency = "key"

[[tools.refund.rungs]]
kind = "http"
source = "refunds"
fidelity = "exact"
method = "POST"
url = "http://127.0.0.1:{port}/refunds"
body = "args"
timeout_ms = 150
breaker = {{ failures = 5, cooldown_ms = 200 }}

[[tools.refund.rungs]]
kind = "queue"
source = "outbox"
fidelity = "deferred"
timeout_ms = 2000
"#
    );
    let path = dir.join(if postgres_env.is_some() { "replica.toml" } else { "rein.toml" });
    std::fs::write(&path, text).unwrap();
    path
}

struct Gateway {
    child: Child,
    url: String,
}

impl Gateway {
    fn start(config: &std::path::Path, env: &[(&str, &str)]) -> Gateway {
        let mut command = Command::new(BIN);
        command
            .args(["serve", "--config", config.to_str().unwrap()])
            .env(ADMIN_ENV, ADMIN_KEY)
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line
            .trim()
            .strip_prefix("rein listening on ")
            .unwrap_or_else(|| panic!("rein serve did not start: {line:?}"))
            .to_string();
        Gateway { child, url }
    }

    /// SIGKILL: no drain, no flush, no destructor.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the client learned about one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// No definitive answer yet: send again with the same key.
    Unresolved,
    /// `ok`: executed.
    Executed,
    /// `queued`: durably accepted, not executed yet.
    Queued,
}

async fn send(client: &reqwest::Client, url: &str, key: &str, amount: i64) -> Known {
    let response = client
        .post(format!("{url}/v1/tools/refund"))
        .header("idempotency-key", key)
        .json(&json!({"amount": amount, "order": key}))
        .send()
        .await;
    let Ok(response) = response else { return Known::Unresolved };
    let status = response.status().as_u16();
    let Ok(body) = response.json::<Value>().await else { return Known::Unresolved };
    match (status, body["status"].as_str()) {
        (200, Some("ok")) => Known::Executed,
        (202, Some("queued")) => Known::Queued,
        // 409: a crashed gateway's request still holds the key's lease; `refused`: the outcome
        // is unknown. Either way the client tries again later with the same key.
        (409, _) | (200, Some("refused")) => Known::Unresolved,
        (status, _) => panic!("unexpected answer for {key}: {status} {body}"),
    }
}

/// A small seeded generator (xorshift64*), so a failing seed can be rerun.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

async fn outbox_pending(client: &reqwest::Client, url: &str) -> (i64, i64) {
    let body: Value = client
        .get(format!("{url}/admin/outbox?state=pending&limit=1"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (body["stats"]["pending"].as_i64().unwrap(), body["stats"]["failed"].as_i64().unwrap())
}

/// Every key in `writes` executed exactly once with its own amount, and nothing else executed.
fn assert_exactly_once(backend: &Backend, writes: &BTreeMap<String, i64>) {
    let ledger = ledger(backend);
    assert_eq!(ledger.keyless, 0, "a write reached the backend without its idempotency key");
    let executed: BTreeSet<&String> = ledger.executions.keys().collect();
    let wanted: BTreeSet<&String> = writes.keys().collect();
    let lost: Vec<_> = wanted.difference(&executed).collect();
    let foreign: Vec<_> = executed.difference(&wanted).collect();
    assert!(lost.is_empty(), "writes lost (never executed): {lost:?}");
    assert!(foreign.is_empty(), "executions under keys the client never sent: {foreign:?}");
    for (key, (amount, times)) in &ledger.executions {
        assert_eq!(*times, 1, "{key} executed {times} times");
        assert_eq!(Some(amount), writes.get(key), "{key} executed with another amount");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_seeded_points_never_loses_or_repeats_a_write() {
    let rounds: u64 =
        std::env::var("REIN_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let seed: u64 =
        std::env::var("REIN_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_2026);
    let mut rng = Rng(seed | 1);
    let (backend, port) = start_backend().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), port, None);
    rein_providers::install_crypto_provider();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();

    let mut writes: BTreeMap<String, i64> = BTreeMap::new();
    let mut known: BTreeMap<String, Known> = BTreeMap::new();
    let mut next_write = 0u64;
    let mut kills_with_pending = 0u64;
    for round in 0..rounds {
        let mode = match rng.below(10) {
            0..=4 => Mode::Up,
            5..=7 => Mode::Down,
            _ => Mode::Slow,
        };
        ledger(&backend).mode = Some(mode);
        let gateway = Gateway::start(&config, &[]);
        // New writes, plus every write still without a definitive answer (same key).
        let mut batch: Vec<(String, i64)> = Vec::new();
        for _ in 0..=rng.below(3) {
            next_write += 1;
            let key = format!("refund-{next_write:05}");
            let amount = 1 + (next_write as i64 % 40);
            writes.insert(key.clone(), amount);
            known.insert(key.clone(), Known::Unresolved);
            batch.push((key, amount));
        }
        // At most 8 of them per round (oldest first), so the load stays the same however long
        // the run; the recovery at the end resends the rest.
        let retries: Vec<String> = known
            .iter()
            .filter(|(key, state)| {
                **state == Known::Unresolved && !batch.iter().any(|(k, _)| k == *key)
            })
            .map(|(key, _)| key.clone())
            .take(8)
            .collect();
        for key in retries {
            let amount = writes[&key];
            batch.push((key, amount));
        }
        let tasks: Vec<_> = batch
            .into_iter()
            .map(|(key, amount)| {
                let client = client.clone();
                let url = gateway.url.clone();
                tokio::spawn(async move {
                    let result = send(&client, &url, &key, amount).await;
                    (key, result)
                })
            })
            .collect();
        // The crash point: somewhere in the first 60 ms (while requests are in flight, being
        // queued, or the replay worker is sending what earlier rounds queued).
        let delay = Duration::from_micros(rng.below(60_000));
        tokio::time::sleep(delay).await;
        {
            // Queued (as far as the client knows) and not executed yet: in the outbox now.
            let ledger = ledger(&backend);
            if known
                .iter()
                .any(|(key, k)| *k == Known::Queued && !ledger.executions.contains_key(key))
            {
                kills_with_pending += 1;
            }
        }
        gateway.kill();
        for task in tasks {
            let (key, result) = task.await.unwrap();
            if result != Known::Unresolved {
                known.insert(key, result);
            }
        }
        if round % 50 == 49 {
            let (executed, deliveries) = {
                let ledger = ledger(&backend);
                (ledger.executions.len(), ledger.deliveries.len())
            };
            eprintln!(
                "round {}: {} writes, {executed} executed by the backend, {deliveries} deliveries",
                round + 1,
                writes.len(),
            );
        }
    }

    // Recovery: the backend is up; a last gateway replays the queue and the client resends
    // every write it never got an answer for (a key's lease from a killed request may make it
    // wait up to the lease).
    ledger(&backend).mode = Some(Mode::Up);
    let gateway = Gateway::start(&config, &[]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let unresolved: Vec<String> = known
            .iter()
            .filter(|(_, k)| **k == Known::Unresolved)
            .map(|(key, _)| key.clone())
            .collect();
        for key in unresolved {
            let result = send(&client, &gateway.url, &key, writes[&key]).await;
            if result != Known::Unresolved {
                known.insert(key, result);
            }
        }
        let (pending, failed) = outbox_pending(&client, &gateway.url).await;
        assert_eq!(failed, 0, "the backend refused nothing, so nothing may fail");
        let settled = known.values().all(|k| *k != Known::Unresolved);
        if settled && pending == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not settled after 60 s: {pending} pending, {} unresolved",
            known.values().filter(|k| **k == Known::Unresolved).count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (deliveries, executions) = {
        let ledger = ledger(&backend);
        (ledger.deliveries.len(), ledger.executions.len())
    };
    eprintln!(
        "{rounds} crash points (seed {seed:#x}): {} writes, {executions} executed, {deliveries} deliveries, {kills_with_pending} kills with queued writes not yet executed",
        writes.len()
    );
    assert!(
        rounds < 20 || kills_with_pending > rounds / 10,
        "the schedule must crash while writes are queued"
    );
    assert_exactly_once(&backend, &writes);
    drop(gateway);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_postgres_drain_one_queue_once() {
    let postgres = rein_store::testing::TempPostgres::shared().unwrap();
    let url = postgres.create_database().await.unwrap();
    let (backend, port) = start_backend().await;
    ledger(&backend).mode = Some(Mode::Down);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let env = [("REIN_CRASH_PG", url.as_str())];
    let replicas: Vec<Gateway> = dirs
        .iter()
        .map(|dir| Gateway::start(&config(dir.path(), port, Some("REIN_CRASH_PG")), &env))
        .collect();
    rein_providers::install_crypto_provider();
    let client = reqwest::Client::new();

    // The processor is down: 40 writes, alternating replicas, all queued in the one outbox.
    let mut writes = BTreeMap::new();
    for n in 0..40 {
        let key = format!("pg-refund-{n:03}");
        let amount = 10 + n;
        let known = send(&client, &replicas[n as usize % 2].url, &key, amount).await;
        assert_eq!(known, Known::Queued, "{key}");
        writes.insert(key, amount);
    }
    // Either replica sees the whole queue.
    assert_eq!(outbox_pending(&client, &replicas[1].url).await.0, 40);

    // Back up: both replicas' workers claim from the same queue (SKIP LOCKED, leases).
    ledger(&backend).mode = Some(Mode::Up);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while outbox_pending(&client, &replicas[0].url).await.0 > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the queue did not drain");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_exactly_once(&backend, &writes);
    // With live leases no item is handed to both replicas: once the processor is up, each
    // write is delivered exactly once (a double claim would deliver it twice).
    let twice: Vec<_> = ledger(&backend)
        .up_deliveries
        .iter()
        .filter(|(_, n)| **n != 1)
        .map(|(key, n)| format!("{key}: {n}"))
        .collect();
    assert!(twice.is_empty(), "writes delivered more than once after the outage: {twice:?}");

    let mut done = Vec::new();
    for replica in &replicas {
        let text = client.get(format!("{}/metrics", replica.url)).send().await.unwrap();
        let text = text.text().await.unwrap();
        let count: f64 = text
            .lines()
            .filter(|l| l.starts_with("rein_outbox_replays_total") && l.contains("result=\"done\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        done.push(count);
    }
    eprintln!("replays done per replica: {done:?}");
    assert_eq!(done.iter().sum::<f64>(), 40.0);
}

fn outbox_cli(url: &str, args: &[&str]) -> (bool, String) {
    let output = Command::new(BIN)
        .args(["outbox", "--url", url, "--admin-key-env", ADMIN_ENV])
        .args(args)
        .env(ADMIN_ENV, ADMIN_KEY)
        .output()
        .unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rein_outbox_lists_shows_drops_and_replays_queued_writes() {
    let (backend, port) = start_backend().await;
    ledger(&backend).mode = Some(Mode::Down);
    let dir = tempfile::tempdir().unwrap();
    // Retries wait up to 10 minutes here, so only `rein outbox replay` sends an item again.
    let path = config(dir.path(), port, None);
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace(
        "backoff_base_ms = 20\nbackoff_cap_ms = 200",
        "backoff_base_ms = 600000\nbackoff_cap_ms = 600000",
    );
    assert!(text.contains("backoff_base_ms = 600000"));
    std::fs::write(&path, text).unwrap();
    let gateway = Gateway::start(&path, &[]);
    rein_providers::install_crypto_provider();
    let client = reqwest::Client::new();
    for key in ["cli-refund-1", "cli-refund-2"] {
        assert_eq!(send(&client, &gateway.url, key, 12).await, Known::Queued);
    }
    // Let the worker try (and fail) each once, so attempts and the last error show.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, json) = outbox_cli(&gateway.url, &["list", "--json"]);
        let listed: Value = serde_json::from_str(&json).unwrap();
        let tried =
            listed["items"].as_array().unwrap().iter().all(|item| {
                item["last_error"].is_string() && item["lease_until_unix_ms"].is_null()
            });
        if tried {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the worker never tried: {listed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let (ok, table) = outbox_cli(&gateway.url, &["list", "--state", "pending"]);
    assert!(ok, "{table}");
    for needle in ["IDEMPOTENCY KEY", "cli-refund-1", "cli-refund-2", "refund", "pending", "503"] {
        assert!(table.contains(needle), "`{needle}` missing from:\n{table}");
    }
    assert!(table.contains("2 shown; 2 pending, 0 held for review, 0 failed"), "{table}");

    let (ok, json) = outbox_cli(&gateway.url, &["list", "--json"]);
    assert!(ok);
    let listed: Value = serde_json::from_str(&json).unwrap();
    let items = listed["items"].as_array().unwrap();
    let id_of = |key: &str| {
        items.iter().find(|i| i["idempotency_key"] == key).unwrap()["id"].as_i64().unwrap()
    };
    let (first, second) = (id_of("cli-refund-1"), id_of("cli-refund-2"));
    assert!(items.iter().all(|i| i["attempts"].as_i64().unwrap() >= 1), "{json}");

    let (ok, shown) = outbox_cli(&gateway.url, &["show", &first.to_string()]);
    assert!(ok);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["args"]["amount"], 12);
    assert_eq!(shown["state"], "pending");

    // Dropping needs a reason; a dropped write is never sent and its key says so.
    let (ok, _) = outbox_cli(&gateway.url, &["drop", &first.to_string(), "--reason", " "]);
    assert!(!ok, "a drop without a reason is refused");
    let mut dropped = false;
    for _ in 0..50 {
        // A drop while the worker holds the item is refused (it may be executing): try again.
        let (ok, _) = outbox_cli(
            &gateway.url,
            &["drop", &first.to_string(), "--reason", "customer cancelled"],
        );
        if ok {
            dropped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(dropped, "the drop never went through");
    let (_, table) = outbox_cli(&gateway.url, &["list", "--state", "dropped"]);
    assert!(table.contains("cli-refund-1") && !table.contains("cli-refund-2"), "{table}");
    let repeat: Value = client
        .post(format!("{}/v1/tools/refund", gateway.url))
        .header("idempotency-key", "cli-refund-1")
        .json(&json!({"amount": 12, "order": "cli-refund-1"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(repeat["status"], "refused", "{repeat}");
    assert!(repeat["detail"].as_str().unwrap().contains("NOT executed"), "{repeat}");

    // `replay` makes an item due now: the worker sends it at once (still down: one more attempt).
    let deliveries =
        |key: &str| ledger(&backend).deliveries.iter().filter(|(k, _)| k == key).count();
    let before = deliveries("cli-refund-2");
    let (ok, out) = outbox_cli(&gateway.url, &["replay", &second.to_string()]);
    assert!(ok, "{out}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while deliveries("cli-refund-2") == before {
        assert!(tokio::time::Instant::now() < deadline, "the replay was not sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Wait until that send is over (its lease released), else this replay would race it.
    loop {
        let (_, shown) = outbox_cli(&gateway.url, &["show", &second.to_string()]);
        let shown: Value = serde_json::from_str(&shown).unwrap();
        if shown["lease_until_unix_ms"].is_null() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the send never finished: {shown}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The processor is back: replay it again instead of waiting out its backoff.
    ledger(&backend).mode = Some(Mode::Up);
    let (ok, out) = outbox_cli(&gateway.url, &["replay", &second.to_string()]);
    assert!(ok, "{out}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while outbox_pending(&client, &gateway.url).await.0 > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the replay did not happen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ledger = ledger(&backend);
    assert!(ledger.executions.contains_key("cli-refund-2"));
    assert!(!ledger.executions.contains_key("cli-refund-1"), "a dropped write executed");
    drop(ledger);
    let (ok, out) = outbox_cli(&gateway.url, &["replay", &second.to_string()]);
    assert!(!ok && out.contains("409"), "replaying a done item is refused: {out}");
}

fn approvals_cli(url: &str, args: &[&str]) -> (bool, String) {
    let output = Command::new(BIN)
        .args(["approvals", "--url", url, "--admin-key-env", ADMIN_ENV])
        .args(args)
        .env(ADMIN_ENV, ADMIN_KEY)
        .output()
        .unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rein_approvals_lists_held_refunds_and_an_approval_executes_once() {
    let (backend, port) = start_backend().await;
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), port, None);
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "[tools.refund]\nkind = \"write\"\n",
        "[tools.refund]\nkind = \"write\"\ngate = [{ field = \"amount\", op = \">\", value = 50, reason = \"refunds over $50 wait for a person\" }]\n",
    );
    assert!(text.contains("gate = "));
    std::fs::write(&path, text).unwrap();
    let gateway = Gateway::start(&path, &[]);
    rein_providers::install_crypto_provider();
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/v1/tools/refund", gateway.url))
        .header("idempotency-key", "gated-1")
        .header("x-rein-conversation-id", "conv-42")
        .json(&json!({"amount": 80, "order": "gated-1", "approved": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let held: Value = response.json().await.unwrap();
    assert_eq!(held["status"], "pending_approval", "{held}");

    let (ok, table) = approvals_cli(&gateway.url, &["list"]);
    assert!(ok, "{table}");
    for needle in ["gated-1", "refund", "pending", "conv-42", "refunds over $50 wait for a person"]
    {
        assert!(table.contains(needle), "`{needle}` missing from:\n{table}");
    }
    let (_, json) = approvals_cli(&gateway.url, &["list", "--json"]);
    let id = serde_json::from_str::<Value>(&json).unwrap()["holds"][0]["id"].as_i64().unwrap();
    assert!(ledger(&backend).deliveries.is_empty(), "nothing is sent before approval");

    let (ok, out) = approvals_cli(&gateway.url, &["approve", &id.to_string(), "--by", "alice"]);
    assert!(ok, "{out}");
    let (ok, out) = approvals_cli(&gateway.url, &["approve", &id.to_string(), "--by", "bob"]);
    assert!(!ok && out.contains("409"), "only the first decision counts: {out}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !ledger(&backend).executions.contains_key("gated-1") {
        assert!(tokio::time::Instant::now() < deadline, "the approved refund was not sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(ledger(&backend).executions["gated-1"], (80, 1));
    assert_eq!(ledger(&backend).deliveries.len(), 1, "sent once");
    let (_, table) = approvals_cli(&gateway.url, &["list", "--state", "approved"]);
    assert!(table.contains("gated-1") && table.contains("approved"), "{table}");
}
