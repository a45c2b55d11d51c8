//! The HTTP version rein speaks to an upstream (`http_version`), against the real `rein serve`:
//! with `http2` every request open at once to an HTTP/2 server shares one connection per
//! event-loop thread (cleartext, prior knowledge), where HTTP/1.1 (the default) opens one for
//! each; the simulator (`kind = "sim"`) serves either. `rein check` names a version it does not
//! know.

use std::convert::Infallible;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use crate::upstream_caps::Gateway;

const BIN: &str = env!("CARGO_BIN_EXE_rein");

/// Requests sent at once through the gateway.
const TOGETHER: usize = 16;

/// An upstream answering every chat call once `TOGETHER` are open at once (so the gateway must
/// hold them concurrently), with the HTTP version it was asked in as the answer's text. Counts
/// the connections it accepts.
async fn upstream() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(TOGETHER));
    let counted = connections.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<_>| {
                    let barrier = barrier.clone();
                    async move {
                        barrier.wait().await;
                        let answer = json!({
                            "id": "c1", "object": "chat.completion", "model": "m",
                            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                "role": "assistant",
                                "content": format!("{:?}", request.version())}}],
                            "usage": {"prompt_tokens": 5, "completion_tokens": 1},
                        });
                        let mut response =
                            Response::new(Full::new(Bytes::from(answer.to_string())));
                        response
                            .headers_mut()
                            .insert("content-type", "application/json".parse().unwrap());
                        Ok::<_, Infallible>(response)
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = builder.serve_connection(TokioIo::new(socket), service).await;
            });
        }
    });
    (format!("http://{addr}"), connections)
}

fn config(http2: &str, http1: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
workers = 2

[store]
sqlite_path = ":memory:"

[providers.h2]
kind = "openai_compatible"
base_url = "{http2}/v1"
http_version = "http2"
stream = false

[providers.h1]
kind = "openai_compatible"
base_url = "{http1}/v1"
stream = false

[providers.sim-h2]
kind = "sim"
http_version = "http2"

[routes.h2]
[[routes.h2.tiers]]
name = "primary"
provider = "h2"
model = "m"
attempts = 1

[routes.h1]
[[routes.h1.tiers]]
name = "primary"
provider = "h1"
model = "m"
attempts = 1

[routes.sim]
[[routes.sim.tiers]]
name = "primary"
provider = "sim-h2"
model = "m"
attempts = 1
"#
    )
}

async fn chat_all(client: &reqwest::Client, url: &str, route: &str) -> Vec<Value> {
    let sends = (0..TOGETHER).map(|i| {
        client
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({"model": route,
                          "messages": [{"role": "user", "content": format!("question {i}")}]}))
            .send()
    });
    let mut answers = Vec::new();
    for response in futures_util::future::join_all(sends).await {
        let response = response.unwrap();
        assert_eq!(response.status(), 200, "{route}");
        answers.push(response.json().await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_upstreams_carry_concurrent_calls_on_one_connection_a_thread() {
    let (http2, h2_connections) = upstream().await;
    let (http1, h1_connections) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(dir.path(), &config(&http2, &http1), &[], "warn");
    let client = reqwest::Client::new();

    for answer in chat_all(&client, &gateway.url, "h2").await {
        assert_eq!(answer["choices"][0]["message"]["content"], "HTTP/2.0", "{answer}");
    }
    // One connection per gateway worker thread that sent, at most: two.
    let opened = h2_connections.load(Ordering::SeqCst);
    assert!((1..=2).contains(&opened), "{opened} HTTP/2 connections for {TOGETHER} calls");

    for answer in chat_all(&client, &gateway.url, "h1").await {
        assert_eq!(answer["choices"][0]["message"]["content"], "HTTP/1.1", "{answer}");
    }
    let opened = h1_connections.load(Ordering::SeqCst);
    assert_eq!(opened, TOGETHER, "HTTP/1.1: a connection for each call open at once");

    // The in-process simulator speaks HTTP/2 too.
    let answer = &chat_all(&client, &gateway.url, "sim").await[0];
    let text = answer["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!text.is_empty(), "{answer}");
}

#[test]
fn check_names_an_http_version_it_does_not_know() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let config = config("http://127.0.0.1:9", "http://127.0.0.1:9").replace(
        r#"http_version = "http2"
stream"#,
        r#"http_version = "http3"
stream"#,
    );
    std::fs::write(&path, config).unwrap();
    let output = Command::new(BIN).args(["check", path.to_str().unwrap()]).output().unwrap();
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("http_version"), "the key is not named:\n{stderr}");
    assert!(stderr.contains("http3") && stderr.contains("http2"), "{stderr}");
}
