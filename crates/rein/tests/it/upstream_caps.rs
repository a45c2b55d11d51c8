//! Upstreams that send too much, against the real `rein serve`: a 200 JSON body that never
//! ends and an endless event stream in checked mode, each 200 MB if nobody stops them. With
//! the default per-provider limits (`max_response_bytes` 32 MiB) rein stops reading at the
//! limit, the attempt fails as `response_too_large` (in the log and `/metrics`), the next tier
//! answers, and the gateway's peak resident memory (`VmHWM`) stays far below what buffering the
//! body would take. The test's own upstream stops by itself after 200 MB.
//!
//! Also the helpers the other upstream tests share: a `rein serve` child with its log in a
//! file, and its peak memory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::StreamExt;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_rein");

/// What each endless body would send if never stopped.
const ENDLESS_BYTES: usize = 200 * 1024 * 1024;
/// The peak resident memory the gateway must stay under while both endless bodies are
/// served, one after the other. Buffering one of them whole takes over 400 MB (the body, then
/// its parse). Stopping at the default 32 MiB limit costs each call about three times the
/// limit at most (the buffer or the answer's text, grown by doubling), on top of the gateway's
/// own ~30 MB; the allocator keeps freed pages resident until the system needs them, so the
/// two calls' peaks add up (measured: ~170 MiB).
const PEAK_RSS_CAP_BYTES: u64 = 256 * 1024 * 1024;

/// `rein serve` as a child process; killed when dropped.
pub(crate) struct Gateway {
    child: Child,
    pub url: String,
    log: PathBuf,
}

impl Gateway {
    /// Starts `rein serve` on `config`, with `env` set and the log (at `rust_log`) in
    /// `dir/rein.log`.
    pub(crate) fn start(dir: &Path, config: &str, env: &[(&str, &str)], rust_log: &str) -> Gateway {
        // The test's own HTTP clients need a TLS provider too, whichever test runs first (or
        // alone, as nextest runs each).
        rein_providers::install_crypto_provider();
        let path = dir.join("rein.toml");
        std::fs::write(&path, config).unwrap();
        let log = dir.join("rein.log");
        let mut command = Command::new(BIN);
        command
            .args(["serve", "--config", path.to_str().unwrap()])
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let Some(url) = line.trim().strip_prefix("rein listening on ").map(str::to_string) else {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("rein serve did not start: {line:?}\n{log}");
        };
        Gateway { child, url, log }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once `count` of its lines pass `wanted` (rein writes its lines from a thread of
    /// its own, so a line can come just after the answer), or as it is after 5 s.
    pub(crate) async fn log_once(&self, count: usize, wanted: impl Fn(&str) -> bool) -> String {
        for _ in 0..200 {
            let log = self.log();
            if log.lines().filter(|line| wanted(line)).count() >= count {
                return log;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        self.log()
    }

    /// A line of `/proc/PID/status` in bytes (`VmHWM`: the peak resident set so far).
    pub(crate) fn status_bytes(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status
            .lines()
            .find(|line| line.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} in {status}"));
        let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kb * 1024
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves `app` on 127.0.0.1:0 for the rest of the test; returns its root URL.
pub(crate) async fn serve_upstream(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A body of `opening` then `piece` over and over, up to [`ENDLESS_BYTES`], counting what the
/// server produced (hyper polls for more only as the client reads).
fn endless(opening: &'static [u8], piece: Bytes, produced: Arc<AtomicUsize>) -> Body {
    let pieces = ENDLESS_BYTES / piece.len();
    let first = futures_util::stream::once(async move { Bytes::from_static(opening) });
    let rest = futures_util::stream::iter(0..pieces).map(move |_| {
        produced.fetch_add(piece.len(), Ordering::Relaxed);
        piece.clone()
    });
    Body::from_stream(first.chain(rest).map(Ok::<_, std::convert::Infallible>))
}

#[derive(Clone, Default)]
struct Produced {
    json: Arc<AtomicUsize>,
    sse: Arc<AtomicUsize>,
}

fn upstream(produced: Produced) -> axum::Router {
    let json_counter = produced.json.clone();
    let sse_counter = produced.sse.clone();
    axum::Router::new()
        .route(
            "/endless-json/v1/chat/completions",
            post(move || {
                let counter = json_counter.clone();
                async move {
                    let opening = br#"{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":""#;
                    let body = endless(opening, Bytes::from(vec![b'a'; 64 * 1024]), counter);
                    ([(CONTENT_TYPE, "application/json")], body).into_response()
                }
            }),
        )
        .route(
            "/endless-sse/v1/chat/completions",
            post(move || {
                let counter = sse_counter.clone();
                async move {
                    let text = "la ".repeat(2730);
                    let event = format!(
                        "data: {}\n\n",
                        json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                               "choices": [{"index": 0, "delta": {"content": text}}]})
                    );
                    let opening: &'static [u8] = b": an answer that never stops\n\n";
                    let body = endless(opening, Bytes::from(event), counter);
                    ([(CONTENT_TYPE, "text/event-stream")], body).into_response()
                }
            }),
        )
        .route("/good/v1/chat/completions", post(good_answer))
}

async fn good_answer() -> Response {
    axum::Json(json!({
        "id": "c2", "object": "chat.completion", "model": "good-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Your order shipped."},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
    }))
    .into_response()
}

fn config(upstream: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
workers = 1
drain_timeout_ms = 100

[store]
sqlite_path = ":memory:"

[providers.endless-json]
kind = "openai_compatible"
base_url = "{upstream}/endless-json/v1"
stream = false

[providers.endless-sse]
kind = "openai_compatible"
base_url = "{upstream}/endless-sse/v1"

[providers.good]
kind = "openai_compatible"
base_url = "{upstream}/good/v1"

[routes.json]
release = "checked"
deadline_ms = 60000
attempt_ms = 50000
first_token_ms = 50000
stream_idle_ms = 50000

[[routes.json.tiers]]
name = "primary"
provider = "endless-json"
model = "m"
attempts = 1

[[routes.json.tiers]]
name = "fallback"
provider = "good"
model = "good-model"

[routes.sse]
release = "checked"
deadline_ms = 60000
attempt_ms = 50000
first_token_ms = 50000
stream_idle_ms = 50000

[[routes.sse.tiers]]
name = "primary"
provider = "endless-sse"
model = "m"
attempts = 1

[[routes.sse.tiers]]
name = "fallback"
provider = "good"
model = "good-model"
"#
    )
}

fn chat(route: &str, stream: bool) -> Value {
    json!({"model": route, "stream": stream,
           "messages": [{"role": "user", "content": "where is my order?"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_upstream_bodies_stop_at_the_limit_and_memory_stays_bounded() {
    let produced = Produced::default();
    let upstream = serve_upstream(upstream(produced.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(dir.path(), &config(&upstream), &[], "warn,rein_core=debug");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    let started_rss = gateway.status_bytes("VmHWM:");

    // A 200 JSON body that never ends: the answer comes from the fallback tier.
    let response = client
        .post(format!("{}/v1/chat/completions", gateway.url))
        .json(&chat("json", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-outcome"], "fallback");
    assert_eq!(response.headers()["x-rein-tier"], "fallback");
    assert_eq!(response.headers()["x-rein-attempts"], "2");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "Your order shipped.");
    let after_json_rss = gateway.status_bytes("VmHWM:");

    // An endless stream, held in checked mode; the caller streams too.
    let response = client
        .post(format!("{}/v1/chat/completions", gateway.url))
        .json(&chat("sse", true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-outcome"], "fallback");
    assert_eq!(response.headers()["x-rein-tier"], "fallback");
    let text = response.text().await.unwrap();
    assert!(text.contains("Your order shipped."), "{text}");
    assert!(!text.contains("la la"), "nothing of the endless answer reaches the caller");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let peak_rss = gateway.status_bytes("VmHWM:");

    let json_read = produced.json.load(Ordering::Relaxed);
    let sse_read = produced.sse.load(Ordering::Relaxed);
    eprintln!(
        "VmHWM: {} MiB at start, {} MiB after the JSON body, {} MiB after the stream; upstream produced {} MiB (JSON) and {} MiB (SSE) of {} MiB each",
        started_rss >> 20,
        after_json_rss >> 20,
        peak_rss >> 20,
        json_read >> 20,
        sse_read >> 20,
        ENDLESS_BYTES >> 20,
    );
    assert!(
        peak_rss < PEAK_RSS_CAP_BYTES,
        "peak RSS {} MiB is over the {} MiB cap",
        peak_rss >> 20,
        PEAK_RSS_CAP_BYTES >> 20
    );
    // rein stopped reading near the limit: the upstream never got far.
    for (what, read) in [("JSON", json_read), ("SSE", sse_read)] {
        assert!(read < ENDLESS_BYTES / 2, "{what}: {} MiB were produced", read >> 20);
    }

    // The reason, by kind, in the log and the metrics.
    let too_large = |l: &str| l.contains("attempt failed") && l.contains("response_too_large");
    let log = gateway.log_once(2, too_large).await;
    assert_eq!(log.lines().filter(|l| too_large(l)).count(), 2, "{log}");
    let metrics = client.get(format!("{}/metrics", gateway.url)).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    let too_large: Vec<&str> =
        metrics.lines().filter(|l| l.contains("result=\"response_too_large\"")).collect();
    assert_eq!(too_large.len(), 2, "{metrics}");
    assert!(too_large.iter().all(|l| l.trim_end().ends_with(" 1")), "{too_large:?}");
}

/// A limit set in `rein.toml` applies to that provider alone: a small `max_response_bytes` on
/// one provider fails an answer the other provider, with the default, delivers.
#[tokio::test]
async fn a_providers_own_limit_applies_to_it_alone() {
    let upstream =
        serve_upstream(axum::Router::new().route("/good/v1/chat/completions", post(good_answer)))
            .await;
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"
workers = 1

[store]
sqlite_path = ":memory:"

[providers.tight]
kind = "openai_compatible"
base_url = "{upstream}/good/v1"
max_response_bytes = 64
max_event_bytes = 64

[providers.roomy]
kind = "openai_compatible"
base_url = "{upstream}/good/v1"

[routes.chat]
degraded = {{ template = "A person will reply within 2 hours." }}

[[routes.chat.tiers]]
name = "primary"
provider = "tight"
model = "m"
attempts = 1

[routes.roomy]

[[routes.roomy.tiers]]
name = "primary"
provider = "roomy"
model = "m"
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(dir.path(), &config, &[], "warn,rein_core=debug");
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/v1/chat/completions", gateway.url))
        .json(&chat("chat", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-rein-outcome"], "degraded");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "A person will reply within 2 hours.");
    let log = gateway.log_once(1, |l| l.contains("response_too_large")).await;
    assert!(log.contains("response_too_large"), "{log}");

    let response = client
        .post(format!("{}/v1/chat/completions", gateway.url))
        .json(&chat("roomy", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-rein-outcome"], "answered");
}

/// Limits that cannot hold an answer are refused by `rein check`, by key.
#[test]
fn check_refuses_limits_that_cannot_hold_an_answer_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"[providers.zero]
kind = "openai_compatible"
base_url = "http://127.0.0.1:9/v1"
max_response_bytes = 0

[providers.inverted]
kind = "openai_compatible"
base_url = "http://127.0.0.1:9/v1"
max_response_bytes = 1024
max_event_bytes = 4096

[providers.openai-prefill]
kind = "openai_compatible"
base_url = "http://127.0.0.1:9/v1"
json_prefill = true

[routes.chat]
[[routes.chat.tiers]]
name = "primary"
provider = "zero"
model = "m"
"#,
    )
    .unwrap();
    let output = Command::new(BIN).args(["check", path.to_str().unwrap()]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for key in [
        "providers.zero.max_response_bytes",
        "providers.inverted.max_event_bytes",
        "providers.openai-prefill.json_prefill",
    ] {
        assert!(stderr.contains(key), "`{key}` not named in:\n{stderr}");
    }
}
