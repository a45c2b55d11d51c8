//! A held stream never goes silent: while rein holds a streamed answer (checked mode) and
//! retries, the response head and SSE comments go out every `stream_keepalive_ms`, so a client
//! with a read timeout keeps waiting; what follows, a failure included, comes in the stream.

use std::time::Duration;

use tokio::time::Instant;

use futures_util::StreamExt;
use serde_json::json;

use crate::gateway::{Running, start_with};
use crate::ladder::HEAD;

/// A checked route whose primary is silent (1.5 s first-token clock, two attempts) and whose
/// fallback answers; `keepalive` is `stream_keepalive_ms`.
fn config(keepalive_ms: u64, primary: &str) -> String {
    format!(
        r#"{HEAD}
[routes.held]
release = "checked"
deadline_ms = 20000
first_token_ms = 1500
attempt_ms = 4000
min_attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 50
stream_keepalive_ms = {keepalive_ms}

[[routes.held.tiers]]
name = "primary"
provider = "sim-openai"
model = "{primary}"

[[routes.held.tiers]]
name = "fallback"
provider = "sim-openai"
model = "sim-fallback"
"#
    )
}

/// What a streaming caller saw: each body chunk with when it arrived, and the status.
struct Seen {
    status: u16,
    chunks: Vec<(Duration, String)>,
}

impl Seen {
    fn body(&self) -> String {
        self.chunks.iter().map(|(_, chunk)| chunk.as_str()).collect()
    }
}

async fn stream_from(gw: &Running, api: &str) -> Seen {
    let started = Instant::now();
    let (path, body) = match api {
        "anthropic" => (
            "/v1/messages",
            json!({"model": "held", "stream": true, "max_tokens": 100,
                   "messages": [{"role": "user", "content": "where is my order?"}]}),
        ),
        _ => (
            "/v1/chat/completions",
            json!({"model": "held", "stream": true,
                   "messages": [{"role": "user", "content": "where is my order?"}]}),
        ),
    };
    let response = gw
        .client
        .post(gw.url(path))
        .bearer_auth("client-secret-1")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let mut chunks = Vec::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        chunks.push((started.elapsed(), String::from_utf8_lossy(&chunk.unwrap()).to_string()));
    }
    Seen { status, chunks }
}

#[tokio::test]
async fn a_checked_stream_sends_its_head_and_comments_while_rein_retries() {
    for api in ["openai", "anthropic"] {
        let gw = start_with(&config(200, "sim:hang"), None).await;
        let seen = stream_from(&gw, api).await;
        assert_eq!(seen.status, 200, "{api}");
        let (first_at, first) = &seen.chunks[0];
        assert!(
            first.starts_with(": keep-alive"),
            "{api}: the first bytes are a comment: {first:?}"
        );
        // The primary's first attempt alone takes 1.5 s to fail; the caller heard from rein
        // long before.
        assert!(*first_at < Duration::from_millis(1500), "{api}: first byte after {first_at:?}");
        let comments = seen.body().matches(": keep-alive\n\n").count();
        assert!(comments >= 5, "{api}: a comment every 200 ms of the ~3 s held: {comments}");
        let body = seen.body();
        let answer_at = seen
            .chunks
            .iter()
            .find(|(_, chunk)| chunk.contains("data: {"))
            .map(|(at, _)| *at)
            .unwrap();
        assert!(answer_at >= Duration::from_millis(3000), "{api}: answer at {answer_at:?}");
        match api {
            "openai" => assert!(body.trim_end().ends_with("data: [DONE]"), "{body}"),
            _ => assert!(body.contains("event: message_stop"), "{body}"),
        }
        gw.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_failure_after_the_head_went_out_arrives_in_the_stream() {
    // The first attempt is silent (the head and comments go out), the second meets the content
    // policy: the call stops, and the caller reads that in the stream, not as a status.
    let gw = start_with(&config(200, "sim:hang,content_policy"), None).await;
    let seen = stream_from(&gw, "openai").await;
    assert_eq!(seen.status, 200);
    let body = seen.body();
    assert!(body.starts_with(": keep-alive"), "{body}");
    assert!(body.contains("\"error\""), "the failure is in the stream: {body}");
    assert!(!body.contains("data: [DONE]"), "never ends as if complete: {body}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn with_keepalive_off_the_caller_hears_nothing_until_the_answer() {
    let gw = start_with(&config(0, "sim:hang"), None).await;
    let seen = stream_from(&gw, "openai").await;
    assert_eq!(seen.status, 200);
    let body = seen.body();
    assert!(!body.contains(": keep-alive"), "{body}");
    let (first_at, _) = &seen.chunks[0];
    assert!(*first_at >= Duration::from_millis(3000), "first byte after {first_at:?}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_checked_answer_is_released_in_several_deltas() {
    let gw = start_with(&config(10_000, "sim-primary"), None).await;
    let seen = stream_from(&gw, "openai").await;
    let body = seen.body();
    let deltas = body.matches("\"content\":\"").count();
    // The role chunk carries an empty content; the answer itself comes in several pieces.
    assert!(deltas >= 3, "{deltas} content deltas: {body}");
    gw.stop().await.unwrap();
}
