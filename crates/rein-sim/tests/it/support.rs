//! Helpers: start a simulator on 127.0.0.1:0, send raw requests with reqwest, read streams
//! (including ones the simulator cuts) and split SSE text into frames.

// Helpers of tests: failing loudly is their job.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use futures_util::StreamExt;
use rein_sim::{SimConfig, SimHandle};
use serde_json::{Value, json};

pub(crate) struct Sim {
    pub handle: SimHandle,
    pub client: reqwest::Client,
}

pub(crate) async fn sim() -> Sim {
    sim_with(SimConfig::default()).await
}

pub(crate) async fn sim_with(config: SimConfig) -> Sim {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let handle = rein_sim::start(listener, config).await.unwrap();
    // No pool idle timer: under paused time a pending timer would make the clock jump.
    // reqwest has rustls without a crypto provider of its own in a workspace build.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder().pool_idle_timeout(None).build().unwrap();
    Sim { handle, client }
}

pub(crate) fn openai_body(text: &str) -> Value {
    json!({"model": "gpt-sim", "messages": [{"role": "user", "content": text}]})
}

pub(crate) fn anthropic_body(text: &str) -> Value {
    json!({
        "model": "claude-sim",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": text}]
    })
}

impl Sim {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.handle.base_url())
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        body: &Value,
        fault: Option<&str>,
    ) -> reqwest::Response {
        let mut request = self.client.post(self.url(path)).json(body);
        if let Some(fault) = fault {
            request = request.header("x-sim-fault", fault);
        }
        request.send().await.unwrap()
    }

    pub(crate) async fn openai(&self, body: &Value, fault: Option<&str>) -> reqwest::Response {
        self.post("/v1/chat/completions", body, fault).await
    }

    pub(crate) async fn anthropic(&self, body: &Value, fault: Option<&str>) -> reqwest::Response {
        let mut request = self
            .client
            .post(self.url("/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .json(body);
        if let Some(fault) = fault {
            request = request.header("x-sim-fault", fault);
        }
        request.send().await.unwrap()
    }
}

/// The body read to its end: the bytes received and whether it ended cleanly.
pub(crate) async fn read_all(response: reqwest::Response) -> (String, bool) {
    let mut stream = response.bytes_stream();
    let mut bytes = Vec::new();
    let mut clean = true;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(_) => {
                clean = false;
                break;
            }
        }
    }
    (String::from_utf8(bytes).unwrap(), clean)
}

/// Reads until nothing arrives for `quiet`: the bytes so far and whether the body ended.
pub(crate) async fn read_until_quiet(
    response: reqwest::Response,
    quiet: Duration,
) -> (String, bool) {
    let mut stream = response.bytes_stream();
    let mut bytes = Vec::new();
    loop {
        match tokio::time::timeout(quiet, stream.next()).await {
            Ok(Some(Ok(chunk))) => bytes.extend_from_slice(&chunk),
            Ok(Some(Err(_))) | Ok(None) => return (String::from_utf8(bytes).unwrap(), true),
            Err(_) => return (String::from_utf8(bytes).unwrap(), false),
        }
    }
}

/// One SSE frame: its `event:` name, if any, and its `data:` text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SseFrame {
    pub event: Option<String>,
    pub data: String,
}

impl SseFrame {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

/// Splits SSE text into frames, asserting the framing: every frame ends with a blank line
/// (a trailing partial frame is returned too) and has exactly one `data:` line.
pub(crate) fn sse_frames(text: &str) -> Vec<SseFrame> {
    text.split_inclusive("\n\n")
        .map(|block| {
            let mut event = None;
            let mut data = None;
            for line in block.trim_end_matches('\n').split('\n') {
                if let Some(name) = line.strip_prefix("event: ") {
                    assert!(event.is_none(), "two event lines in {block:?}");
                    event = Some(name.to_owned());
                } else if let Some(text) = line.strip_prefix("data: ") {
                    assert!(data.is_none(), "two data lines in {block:?}");
                    data = Some(text.to_owned());
                } else {
                    panic!("unexpected SSE line {line:?} in {block:?}");
                }
            }
            SseFrame { event, data: data.unwrap_or_default() }
        })
        .collect()
}

/// The text an OpenAI stream's content deltas add up to, skipping frames that don't parse.
pub(crate) fn openai_stream_text(frames: &[SseFrame]) -> String {
    frames
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(&f.data).ok())
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect()
}

/// The text an Anthropic stream's text deltas add up to, skipping frames that don't parse.
pub(crate) fn anthropic_stream_text(frames: &[SseFrame]) -> String {
    frames
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(&f.data).ok())
        .filter(|v| v["delta"]["type"] == "text_delta")
        .filter_map(|v| v["delta"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// The value of a response header.
pub(crate) fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response.headers().get(name).map(|v| v.to_str().unwrap().to_owned())
}

/// The healthy answer's tokens for `body`: text split after each space.
pub(crate) fn token_count(text: &str) -> usize {
    text.split_inclusive(' ').count()
}
