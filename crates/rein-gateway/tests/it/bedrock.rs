//! The spec's "same model through another route": Claude on Anthropic's API answering 529s, the
//! same model on Amazon Bedrock (the simulator speaking Converse / ConverseStream, signed with
//! SigV4) taking the call, through the gateway, streaming and not, and with the Bedrock tier
//! asking for whole Converse answers too; then the same through InvokeModel /
//! InvokeModelWithResponseStream (`api = "invoke"`), checked in the simulator's log.

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

[providers.bedrock]
kind = "sim"
format = "bedrock"

[providers.bedrock-whole]
kind = "sim"
format = "bedrock"
stream = false

[providers.bedrock-invoke]
kind = "sim"
format = "bedrock"
api = "invoke"

[providers.bedrock-invoke-whole]
kind = "sim"
format = "bedrock"
api = "invoke"
stream = false

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
name = "bedrock"
provider = "bedrock"
model = "anthropic.claude-3-5-haiku-20241022-v1:0"

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
name = "bedrock"
provider = "bedrock-whole"
model = "anthropic.claude-3-5-haiku-20241022-v1:0"

[routes.claude-invoke]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.claude-invoke.tiers]]
name = "anthropic"
provider = "anthropic"
model = "sim:529"

[[routes.claude-invoke.tiers]]
name = "bedrock"
provider = "bedrock-invoke"
model = "anthropic.claude-3-5-haiku-20241022-v1:0"

[routes.claude-invoke-whole]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.claude-invoke-whole.tiers]]
name = "anthropic"
provider = "anthropic"
model = "sim:529"

[[routes.claude-invoke-whole.tiers]]
name = "bedrock"
provider = "bedrock-invoke-whole"
model = "anthropic.claude-3-5-haiku-20241022-v1:0"
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
async fn anthropic_529s_fall_back_to_the_same_model_on_bedrock() {
    let gw = start_with(CONFIG, None).await;
    for route in ["claude", "claude-whole", "claude-invoke", "claude-invoke-whole"] {
        let response = gw.post("/v1/chat/completions", Some(KEY), chat(route, false)).await;
        assert_eq!(response.status(), 200, "{route}");
        assert_eq!(response.headers()["x-rein-outcome"], "fallback", "{route}");
        assert_eq!(response.headers()["x-rein-tier"], "bedrock", "{route}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["model"], "anthropic.claude-3-5-haiku-20241022-v1:0", "{route}");
        let text = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(text.ends_with(rein_sim::SENTINEL), "{route}: the whole answer: {text}");
        assert_eq!(body["choices"][0]["finish_reason"], "stop", "{route}");
        assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{route}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_streamed_call_falls_back_to_bedrock_before_any_token_reaches_the_caller() {
    let gw = start_with(CONFIG, None).await;
    for route in ["claude", "claude-whole", "claude-invoke", "claude-invoke-whole"] {
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
        assert!(text.contains("anthropic.claude-3-5-haiku-20241022-v1:0"), "{route}");
    }
    gw.stop().await.unwrap();
}

/// The same fallback to a real `kind = "bedrock"` provider with `api = "invoke"` (signed with
/// the environment's AWS credentials), pointed at a standalone simulator whose log shows the
/// paths: Anthropic's 529s on `/v1/messages`, then InvokeModel (streaming or not) on Bedrock.
#[tokio::test]
async fn the_invoke_fallback_signs_and_takes_the_invoke_paths() {
    let sim = rein_sim::start(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        rein_sim::SimConfig::default(),
    )
    .await
    .unwrap();
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:0"
client_keys_env = ["CLIENT_KEY"]

[store]
sqlite_path = ":memory:"

[providers.anthropic]
kind = "anthropic"
base_url = "{base}"
api_key_env = "ANTHROPIC_API_KEY"

[providers.bedrock]
kind = "bedrock"
api = "invoke"
region = "us-east-1"
base_url = "{base}"

[providers.bedrock-whole]
kind = "bedrock"
api = "invoke"
region = "us-east-1"
base_url = "{base}"
stream = false

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
name = "bedrock"
provider = "bedrock"
model = "anthropic.claude-3-5-haiku-20241022-v1:0"

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
name = "bedrock"
provider = "bedrock-whole"
model = "anthropic.claude-3-5-haiku-20241022-v1:0"
"#,
        base = sim.base_url()
    );
    let vars: std::collections::HashMap<&str, &str> = [
        ("CLIENT_KEY", KEY),
        ("ANTHROPIC_API_KEY", "sk-ant-test"),
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
    ]
    .into();
    let env: rein_runtime::EnvSource =
        std::sync::Arc::new(move |name: &str| vars.get(name).map(|v| v.to_string()));
    let gw = crate::gateway::start_with_env(&config, None, env).await;
    let cases =
        [("claude", "invoke-with-response-stream", true), ("claude-whole", "invoke", false)];
    for ((route, action, upstream_streams), stream) in
        cases.into_iter().flat_map(|case| [(case, false), (case, true)])
    {
        sim.reset();
        let response = gw.post("/v1/chat/completions", Some(KEY), chat(route, stream)).await;
        assert_eq!(response.status(), 200, "{route} stream {stream}");
        assert_eq!(response.headers()["x-rein-tier"], "bedrock", "{route} stream {stream}");
        let text = response.text().await.unwrap();
        assert!(text.contains(rein_sim::SENTINEL), "{route} stream {stream}: {text}");
        let log = sim.log();
        let paths: Vec<(&str, Option<u16>)> =
            log.iter().map(|e| (e.path.as_str(), e.status)).collect();
        let invoke = format!("/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/{action}");
        assert!(paths.len() >= 2, "{paths:?}");
        assert!(
            paths[..paths.len() - 1].iter().all(|p| *p == ("/v1/messages", Some(529))),
            "{paths:?}"
        );
        assert_eq!(paths.last(), Some(&(invoke.as_str(), Some(200))), "{paths:?}");
        let last = log.last().unwrap();
        assert!(last.auth_present, "the invoke call is signed");
        assert_eq!(last.stream, upstream_streams, "{route}");
    }
    gw.stop().await.unwrap();
    sim.shutdown().await;
}
