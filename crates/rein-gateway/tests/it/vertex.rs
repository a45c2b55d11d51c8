//! Claude on Anthropic's API answering 529s, the same model on Google Vertex AI (the simulator's
//! `rawPredict` / `streamRawPredict`, authorized with a token the real auth code fetched from
//! the simulator's token endpoint with its test service-account key) taking the call, through
//! the gateway, streaming and not; and a Gemini-on-Vertex tier answering.

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::gateway::start_with;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
client_keys_env = ["CLIENT_KEY"]
admin_key_env = "ADMIN_KEY"

[store]
sqlite_path = ":memory:"

[providers.anthropic]
kind = "sim"
format = "anthropic"

[providers.vertex-claude]
kind = "sim"
format = "vertex"
publisher = "anthropic"

[providers.vertex-claude-whole]
kind = "sim"
format = "vertex"
publisher = "anthropic"
stream = false

[providers.vertex-gemini]
kind = "sim"
format = "vertex"
publisher = "google"
region = "global"

[routes.claude]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.claude.tiers]]
name = "anthropic"
provider = "anthropic"
model = "sim:529"

[[routes.claude.tiers]]
name = "vertex"
provider = "vertex-claude"
model = "claude-sonnet-4@20250514"

[routes.claude-whole]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.claude-whole.tiers]]
name = "anthropic"
provider = "anthropic"
model = "sim:529"

[[routes.claude-whole.tiers]]
name = "vertex"
provider = "vertex-claude-whole"
model = "claude-sonnet-4@20250514"

[routes.gemini]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
backoff_cap_ms = 100

[[routes.gemini.tiers]]
name = "vertex"
provider = "vertex-gemini"
model = "gemini-2.5-flash"
"#;

const KEY: &str = "client-secret-1";

fn chat(route: &str, stream: bool) -> Value {
    json!({
        "model": route,
        "stream": stream,
        "messages": [{"role": "user", "content": "where is my order?"}]
    })
}

#[tokio::test]
async fn anthropic_529s_fall_back_to_claude_on_vertex() {
    let gw = start_with(CONFIG, None).await;
    for route in ["claude", "claude-whole"] {
        let response = gw.post("/v1/chat/completions", Some(KEY), chat(route, false)).await;
        assert_eq!(response.status(), 200, "{route}");
        assert_eq!(response.headers()["x-rein-outcome"], "fallback", "{route}");
        assert_eq!(response.headers()["x-rein-tier"], "vertex", "{route}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["model"], "claude-sonnet-4@20250514", "{route}");
        let text = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(text.ends_with(rein_sim::SENTINEL), "{route}: the whole answer: {text}");
        assert_eq!(body["choices"][0]["finish_reason"], "stop", "{route}");
        assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{route}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_streamed_call_falls_back_to_claude_on_vertex() {
    let gw = start_with(CONFIG, None).await;
    for route in ["claude", "claude-whole"] {
        let response = gw.post("/v1/chat/completions", Some(KEY), chat(route, true)).await;
        assert_eq!(response.status(), 200, "{route}");
        let mut body = response.bytes_stream();
        let mut text = String::new();
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        let mut answer = String::new();
        for data in text.lines().filter_map(|line| line.strip_prefix("data: ")) {
            if data == "[DONE]" {
                continue;
            }
            let event: Value = serde_json::from_str(data).unwrap();
            if let Some(delta) = event["choices"][0]["delta"]["content"].as_str() {
                answer.push_str(delta);
            }
        }
        assert!(text.trim_end().ends_with("data: [DONE]"), "{route}: {text}");
        assert!(answer.ends_with(rein_sim::SENTINEL), "{route}: the whole answer: {answer}");
        assert!(text.contains("claude-sonnet-4@20250514"), "{route}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_gemini_on_vertex_tier_answers() {
    let gw = start_with(CONFIG, None).await;
    for stream in [false, true] {
        let response = gw.post("/v1/chat/completions", Some(KEY), chat("gemini", stream)).await;
        assert_eq!(response.status(), 200, "stream {stream}");
        assert_eq!(response.headers()["x-rein-outcome"], "answered", "stream {stream}");
        let text = response.text().await.unwrap();
        assert!(text.contains(rein_sim::SENTINEL), "stream {stream}: {text}");
    }
    gw.stop().await.unwrap();
}
