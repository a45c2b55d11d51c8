//! End-to-end HTTP tests of `rein serve`'s surface: a real gateway on 127.0.0.1:0 in front of
//! in-process simulators, spoken to with a plain HTTP client. Auth, bad input, the kill switch,
//! reload (valid and invalid), metrics text and the graceful drain of an open stream.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use rein_gateway::server::Gateway;
use rein_runtime::EnvSource;
use rein_runtime::config::Config;
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub(crate) const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
client_keys_env = ["CLIENT_KEY"]
admin_key_env = "ADMIN_KEY"
max_body_bytes = 4096
drain_timeout_ms = 5000

[store]
sqlite_path = ":memory:"

[providers.sim-openai]
kind = "sim"
format = "openai"

[providers.sim-anthropic]
kind = "sim"
format = "anthropic"

[routes.chat]
deadline_ms = 5000
first_token_ms = 1000
stream_idle_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100
degraded = { template = "We are on it; a person will reply shortly." }

[[routes.chat.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim-primary"

[[routes.chat.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim-fallback"

[routes.flaky]
deadline_ms = 5000
first_token_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.flaky.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"

[[routes.flaky.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim-fallback"

[routes.slow]
release = "passthrough"
deadline_ms = 10000
attempt_ms = 8000

[[routes.slow.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:ok+token_delay:ms=100"
"#;

pub(crate) struct Running {
    pub addr: SocketAddr,
    pub gateway: Arc<Gateway>,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

pub(crate) fn env() -> EnvSource {
    let vars: HashMap<&str, &str> =
        [("CLIENT_KEY", "client-secret-1"), ("ADMIN_KEY", "admin-secret-1")].into();
    Arc::new(move |name: &str| vars.get(name).map(|v| v.to_string()))
}

pub(crate) async fn start_with(text: &str, path: Option<PathBuf>) -> Running {
    start_with_env(text, path, env()).await
}

pub(crate) async fn start_with_env(text: &str, path: Option<PathBuf>, env: EnvSource) -> Running {
    let config = Config::from_toml(text, &*env).unwrap();
    let gateway = Gateway::from_config(config, path, None, env).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(gateway.clone().serve(listener, async move {
        let _ = stopped.await;
    }));
    Running { addr, gateway, client: reqwest::Client::new(), stop: Some(stop), task }
}

pub(crate) async fn start() -> Running {
    start_with(CONFIG, None).await
}

impl Running {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        key: Option<&str>,
        body: Value,
    ) -> reqwest::Response {
        let mut request = self.client.post(self.url(path)).json(&body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().await.unwrap()
    }

    pub(crate) async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Response {
        let mut request = self.client.request(method, self.url(path)).bearer_auth("admin-secret-1");
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.unwrap()
    }

    pub(crate) async fn stop(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap()
    }
}

pub(crate) fn chat(route: &str) -> Value {
    json!({"model": route, "messages": [{"role": "user", "content": "where is my order?"}]})
}

const KEY: Option<&str> = Some("client-secret-1");

#[tokio::test]
async fn answers_and_says_what_happened() {
    let gw = start().await;
    let response = gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-outcome"], "answered");
    assert_eq!(response.headers()["x-rein-tier"], "primary");
    assert_eq!(response.headers()["x-rein-attempts"], "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["model"], "sim-primary");
    assert!(
        body["choices"][0]["message"]["content"].as_str().unwrap().ends_with(rein_sim::SENTINEL)
    );

    let response = gw.post("/v1/chat/completions", KEY, chat("flaky")).await;
    assert_eq!(response.headers()["x-rein-outcome"], "fallback");
    assert_eq!(response.headers()["x-rein-model"], "sim-fallback");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["model"], "sim-fallback", "the body names the model that actually answered");
    assert_eq!(body["rein"]["outcome"], "fallback");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn auth_is_required_and_refused_in_the_callers_format() {
    let gw = start().await;
    let openai = gw.post("/v1/chat/completions", Some("wrong"), chat("chat")).await;
    assert_eq!(openai.status(), 401);
    let body: Value = openai.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("API key"));

    let missing = gw
        .post("/v1/messages", None, json!({"model": "chat", "max_tokens": 10, "messages": []}))
        .await;
    assert_eq!(missing.status(), 401);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "authentication_error");

    // Anthropic SDKs send `x-api-key`.
    let ok = gw
        .client
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "client-secret-1")
        .json(&json!({"model": "chat", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    // The client key is not an admin key.
    let admin =
        gw.client.get(gw.url("/admin/tiers")).bearer_auth("client-secret-1").send().await.unwrap();
    assert_eq!(admin.status(), 401);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_input_gets_the_right_4xx_naming_the_problem() {
    let gw = start().await;
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str)> = vec![
        (
            "malformed JSON",
            gw.client.post(gw.url("/v1/chat/completions")).bearer_auth("client-secret-1").header("content-type", "application/json").body("{\"model\": "),
            400,
            "JSON",
        ),
        ("unknown route", gw.client.post(gw.url("/v1/chat/completions")).bearer_auth("client-secret-1").json(&chat("nope")), 404, "nope"),
        (
            "missing messages",
            gw.client.post(gw.url("/v1/chat/completions")).bearer_auth("client-secret-1").json(&json!({"model": "chat"})),
            400,
            "messages",
        ),
        (
            "wrong-typed field",
            gw.client
                .post(gw.url("/v1/chat/completions"))
                .bearer_auth("client-secret-1")
                .json(&json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"})),
            400,
            "temperature",
        ),
        (
            "wrong content type",
            gw.client.post(gw.url("/v1/chat/completions")).bearer_auth("client-secret-1").header("content-type", "text/plain").body("hi"),
            415,
            "application/json",
        ),
        (
            "oversized body",
            gw.client
                .post(gw.url("/v1/chat/completions"))
                .bearer_auth("client-secret-1")
                .json(&json!({"model": "chat", "messages": [{"role": "user", "content": "x".repeat(10_000)}]})),
            413,
            "max_body_bytes",
        ),
        (
            "anthropic without max_tokens",
            gw.client.post(gw.url("/v1/messages")).bearer_auth("client-secret-1").json(&json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]})),
            400,
            "max_tokens",
        ),
        (
            "bad deadline header",
            gw.client.post(gw.url("/v1/chat/completions")).bearer_auth("client-secret-1").header("x-rein-deadline-ms", "soon").json(&chat("chat")),
            400,
            "x-rein-deadline-ms",
        ),
    ];
    for (name, request, status, needle) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{name}");
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{name}: `{needle}` not in {body}");
    }
    // The process is unaffected.
    assert_eq!(gw.post("/v1/chat/completions", KEY, chat("chat")).await.status(), 200);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn kill_switch_flips_at_runtime_and_is_audited() {
    let gw = start().await;
    let flip = gw
        .admin(
            reqwest::Method::POST,
            "/admin/kill",
            Some(json!({"route": "chat", "engaged": true, "reason": "bad prompt edit"})),
        )
        .await;
    assert_eq!(flip.status(), 200);
    let response = gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    assert_eq!(response.headers()["x-rein-outcome"], "degraded");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "We are on it; a person will reply shortly."
    );
    // Other routes are untouched.
    let other = gw.post("/v1/chat/completions", KEY, chat("flaky")).await;
    assert_eq!(other.headers()["x-rein-outcome"], "fallback");

    gw.admin(
        reqwest::Method::POST,
        "/admin/kill",
        Some(json!({"route": "chat", "engaged": false, "reason": "reverted"})),
    )
    .await;
    let response = gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    assert_eq!(response.headers()["x-rein-outcome"], "answered");
    let state: Value =
        gw.admin(reqwest::Method::GET, "/admin/kill", None).await.json().await.unwrap();
    let audit = state["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[0]["reason"], "bad prompt edit");
    assert!(audit[0]["at_unix_ms"].as_u64().unwrap() > 0);

    let refused = gw
        .admin(reqwest::Method::POST, "/admin/kill", Some(json!({"engaged": true, "reason": ""})))
        .await;
    assert_eq!(refused.status(), 400, "a flip must say why");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_kill_switch_and_its_audit_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = dir.path().join("rein.sqlite");
    let config = CONFIG.replace(
        "sqlite_path = \":memory:\"",
        &format!("sqlite_path = {:?}", sqlite.to_str().unwrap()),
    );
    assert_ne!(config, CONFIG, "the test config must use the file");

    let gw = start_with(&config, None).await;
    for (engaged, reason) in [(true, "bad prompt edit"), (false, "reverted"), (true, "again")] {
        let flip = json!({"route": "chat", "engaged": engaged, "reason": reason});
        let response = gw.admin(reqwest::Method::POST, "/admin/kill", Some(flip)).await;
        assert_eq!(response.status(), 200);
    }
    let before: Value =
        gw.admin(reqwest::Method::GET, "/admin/kill", None).await.json().await.unwrap();
    gw.stop().await.unwrap();

    // A new process on the same store: the route is still switched off, with the same record.
    let gw = start_with(&config, None).await;
    let response = gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    assert_eq!(response.headers()["x-rein-outcome"], "degraded");
    let after: Value =
        gw.admin(reqwest::Method::GET, "/admin/kill", None).await.json().await.unwrap();
    assert_eq!(after["audit"], before["audit"]);
    assert_eq!(after["audit"].as_array().unwrap().len(), 3);
    let chat_route = after["routes"].as_array().unwrap().iter().find(|r| r["route"] == "chat");
    assert_eq!(chat_route.unwrap()["engaged_reason"], "again");
    gw.stop().await.unwrap();
}

async fn outcome_on(gw: &Running) -> String {
    let response = gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    response.headers()["x-rein-outcome"].to_str().unwrap().to_string()
}

async fn audit(gw: &Running) -> Value {
    let response = gw.admin(reqwest::Method::GET, "/admin/kill", None).await;
    response.json::<Value>().await.unwrap()["audit"].clone()
}

#[tokio::test]
async fn a_kill_switch_flip_on_one_replica_reaches_the_others() {
    let postgres = rein_store::testing::TempPostgres::shared().unwrap();
    let url = postgres.create_database().await.unwrap();
    let text = CONFIG
        .replace("drain_timeout_ms = 5000", "drain_timeout_ms = 5000\nkill_sync_ms = 20")
        .replace(
            "sqlite_path = \":memory:\"",
            "sqlite_path = \":memory:\"\npostgres_url_env = \"PG_URL\"",
        );
    let base = env();
    let with_pg: EnvSource = Arc::new(move |name: &str| match name {
        "PG_URL" => Some(url.clone()),
        other => base(other),
    });
    let a = start_with_env(&text, None, with_pg.clone()).await;
    let b = start_with_env(&text, None, with_pg).await;

    // Flipped on A, the route goes dark on B at B's next sync.
    let flip = json!({"route": "chat", "engaged": true, "reason": "incident 42"});
    assert_eq!(a.admin(reqwest::Method::POST, "/admin/kill", Some(flip)).await.status(), 200);
    assert_eq!(outcome_on(&a).await, "degraded", "the replica that flipped applies it at once");
    let mut waited = 0;
    while outcome_on(&b).await != "degraded" {
        assert!(waited < 250, "replica B never applied the flip");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
    }
    // And back, from B this time; both keep the same audit, in the same order.
    let release = json!({"route": "chat", "engaged": false, "reason": "resolved"});
    assert_eq!(b.admin(reqwest::Method::POST, "/admin/kill", Some(release)).await.status(), 200);
    let mut waited = 0;
    while outcome_on(&a).await != "answered" {
        assert!(waited < 250, "replica A never applied the release");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
    }
    let (on_a, on_b) = (audit(&a).await, audit(&b).await);
    assert_eq!(on_a, on_b);
    let reasons: Vec<&str> =
        on_a.as_array().unwrap().iter().map(|f| f["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["incident 42", "resolved"]);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test]
async fn reload_applies_a_valid_config_and_refuses_an_invalid_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.toml");
    std::fs::write(&path, CONFIG).unwrap();
    let gw = start_with(CONFIG, Some(path.clone())).await;

    // Valid: a new route appears, without a restart.
    let extra = "\n[routes.added]\n[[routes.added.tiers]]\nname = \"only\"\nprovider = \"sim-openai\"\nmodel = \"sim-added\"\n";
    std::fs::write(&path, format!("{CONFIG}{extra}")).unwrap();
    let response = gw.admin(reqwest::Method::POST, "/admin/reload", None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap()["version"], 2);
    assert_eq!(gw.post("/v1/chat/completions", KEY, chat("added")).await.status(), 200);

    // Invalid: refused with the problem named by key; the old config stays.
    std::fs::write(&path, CONFIG.replace("deadline_ms = 5000", "deadline_ms = 50")).unwrap();
    let response = gw.admin(reqwest::Method::POST, "/admin/reload", None).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["problems"][0]["key"].as_str().unwrap().ends_with("deadline_ms"),
        "{body}"
    );
    assert_eq!(
        gw.post("/v1/chat/completions", KEY, chat("added")).await.status(),
        200,
        "old config still serves"
    );
    assert_eq!(gw.gateway.current().version, 2);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn metrics_text_counts_outcomes_attempts_and_breakers() {
    let gw = start().await;
    gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    gw.post("/v1/chat/completions", KEY, chat("flaky")).await;
    gw.post("/v1/chat/completions", Some("wrong"), chat("chat")).await;
    let text = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    // Histograms carry timings; the snapshot keeps the lines that are deterministic, sorted
    // (series within a family come out in hash order).
    assert!(text.contains("# TYPE rein_request_duration_seconds histogram"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics text ends with # EOF");
    let mut stable: Vec<&str> = text
        .lines()
        .filter(|line| !line.contains("request_duration") && !line.starts_with("# EOF"))
        .collect();
    stable.sort_unstable();
    insta::assert_snapshot!(stable.join("\n"));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn passthrough_forwards_a_slow_stream_as_it_comes() {
    // Ready events are batched into one frame, but a slow stream (a token every 100 ms) must
    // still leave event by event, not be held for the next one.
    let gw = start().await;
    let response = gw
        .post("/v1/chat/completions", KEY, json!({"model": "slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut pieces = Vec::new();
    while let Some(chunk) = body.next().await {
        pieces.push(String::from_utf8_lossy(&chunk.unwrap()).to_string());
    }
    let with_content = pieces.iter().filter(|p| p.contains("\"content\":\"")).count();
    assert!(with_content >= 5, "tokens arrived in {with_content} pieces: {pieces:?}");
    assert!(pieces.concat().trim_end().ends_with("data: [DONE]"));
    gw.stop().await.unwrap();
}

/// hyper parses a request's URI and header values as slices of the connection's read buffer,
/// and reads into a new buffer while the answer is made. A call in flight keeps nothing of the
/// request's head, so that first buffer is freed (8 KiB a call in flight: a stream's memory is
/// measured in bench/streams.sh). Here the head is made of slices of one buffer the way hyper
/// makes it, and the buffer must be the test's alone while the call waits on a slow answer.
#[tokio::test]
async fn a_call_in_flight_keeps_nothing_of_the_requests_head() {
    use bytes::Bytes;
    use http::{HeaderValue, Uri};
    let gw = start().await;
    let head = Bytes::from(b"/v1/chat/completionsBearer client-secret-1application/json".to_vec());
    let mut request = http::Request::new(axum::body::Body::from(
        json!({"model": "slow", "messages": [{"role": "user", "content": "hi"}]}).to_string(),
    ));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = Uri::from_maybe_shared(head.slice(0..20)).unwrap();
    let headers = request.headers_mut();
    headers.insert("authorization", HeaderValue::from_maybe_shared(head.slice(20..42)).unwrap());
    headers.insert("content-type", HeaderValue::from_maybe_shared(head.slice(42..)).unwrap());
    assert!(!head.is_unique(), "the request's head shares the buffer");

    let mut router = rein_gateway::server::router(gw.gateway.clone());
    let call = tokio::spawn(tower_service::Service::call(&mut router, request));
    // The route's answer takes about two seconds (a token every 100 ms).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!call.is_finished(), "the call is still in flight");
    assert!(head.is_unique(), "a call in flight holds a slice of the request's head");
    let response = call.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_drains_an_open_stream_to_its_end() {
    let gw = start().await;
    let response = gw
        .post("/v1/chat/completions", KEY, json!({"model": "slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-release"], "passthrough");
    let mut body = response.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("chat.completion.chunk"));

    // Ask for shutdown while the stream is open: readiness drops, the stream runs to its end.
    let Running { addr, gateway, client, stop, task } = gw;
    stop.unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(gateway.current().version, 1);
    let mut text = String::from_utf8_lossy(&first).to_string();
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(text.contains(rein_sim::SENTINEL), "the whole answer arrived");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    task.await.unwrap().unwrap();
    assert!(
        client.get(format!("http://{addr}/healthz")).send().await.is_err(),
        "no longer accepting"
    );
    // The call ended while the connections drained; the shutdown wrote its record before it
    // returned.
    let recorded = gateway.runtime.tool_store().calls_since(0, Some("slow"), 100).await.unwrap();
    assert_eq!(recorded.len(), 1, "the drained call's record was written");
    assert_eq!(recorded[0].1.outcome, rein_core::Outcome::Answered);
    assert_eq!(
        gateway.runtime.recorder.stats().records_dropped.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test]
async fn a_prompt_change_makes_a_new_version_that_serves_and_a_revert_brings_the_old_one_back() {
    let gw = start().await;
    let answer = |response: reqwest::Response| async move {
        let version = response.headers()["x-rein-settings-version"].to_str().unwrap().to_string();
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["rein"]["settings_version"].to_string(), version);
        (version, body["choices"][0]["message"]["content"].as_str().unwrap().to_string())
    };
    let (v1, text1) = answer(gw.post("/v1/chat/completions", KEY, chat("chat")).await).await;
    assert_eq!(v1, "1", "the config's settings are version 1");

    let change = json!({
        "author": "alice",
        "note": "shorter answers",
        "settings": {"tiers": {
            "primary": {"model": "sim-primary", "system_prompt": "Be brief."},
            "fallback": {"model": "sim-fallback"}
        }}
    });
    let created =
        gw.admin(reqwest::Method::POST, "/admin/routes/chat/versions", Some(change)).await;
    assert_eq!(created.status(), 200);
    assert_eq!(created.json::<Value>().await.unwrap()["version"], 2);
    let (v2, text2) = answer(gw.post("/v1/chat/completions", KEY, chat("chat")).await).await;
    assert_eq!(v2, "2");
    assert_ne!(
        text1, text2,
        "the new system prompt reached the provider (the sim's answer hashes it)"
    );

    let diff: Value = gw
        .admin(reqwest::Method::GET, "/admin/routes/chat/diff?from=1&to=2", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(diff["changes"][0]["path"], "tiers.primary.system_prompt");
    assert_eq!(diff["changes"][0]["to"], "Be brief.");

    let reverted = gw
        .admin(
            reqwest::Method::POST,
            "/admin/routes/chat/revert",
            Some(json!({"version": 1, "author": "bob", "reason": "wrong cutoffs"})),
        )
        .await;
    assert_eq!(reverted.status(), 200);
    let (v, text) = answer(gw.post("/v1/chat/completions", KEY, chat("chat")).await).await;
    assert_eq!((v.as_str(), text), ("1", text1), "version 1 serves again, with its prompt");

    let listed: Value = gw
        .admin(reqwest::Method::GET, "/admin/routes/chat/versions", None)
        .await
        .json()
        .await
        .unwrap();
    let versions = listed["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[1]["author"], "alice");
    assert_eq!(versions[0]["active"], true);

    // Bad input is named.
    let bad = gw
        .admin(
            reqwest::Method::POST,
            "/admin/routes/chat/versions",
            Some(json!({"author": "x", "settings": {"tiers": {"nope": {"model": "m"}}}})),
        )
        .await;
    assert_eq!(bad.status(), 400);
    assert!(
        bad.json::<Value>().await.unwrap()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("settings.tiers.nope")
    );
    // A reload with an unchanged config does not undo the revert.
    gw.gateway.apply(Config::from_toml(CONFIG, &*env()).unwrap()).await.unwrap();
    let (v, _) = answer(gw.post("/v1/chat/completions", KEY, chat("chat")).await).await;
    assert_eq!(v, "1");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn models_and_unknown_paths_answer_in_the_callers_format() {
    let gw = start().await;
    let one = gw
        .client
        .get(gw.url("/v1/models/chat"))
        .bearer_auth("client-secret-1")
        .send()
        .await
        .unwrap();
    assert_eq!(one.status(), 200);
    assert_eq!(one.json::<Value>().await.unwrap()["id"], "chat");
    let missing = gw
        .client
        .get(gw.url("/v1/models/nope"))
        .bearer_auth("client-secret-1")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(
        missing.json::<Value>().await.unwrap()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nope")
    );
    // An Anthropic SDK path rein does not serve: a 404 in Anthropic's shape with a request id.
    let unknown = gw
        .client
        .post(gw.url("/v1/messages/count_tokens"))
        .header("anthropic-version", "2023-06-01")
        .header("x-api-key", "client-secret-1")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert!(unknown.headers().contains_key("request-id"));
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "not_found_error");
    // A wrong key on the models list, asked by the Anthropic SDK, is refused in its format.
    let refused = gw
        .client
        .get(gw.url("/v1/models"))
        .header("anthropic-version", "2023-06-01")
        .header("x-api-key", "wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.json::<Value>().await.unwrap()["error"]["type"], "authentication_error");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_judge_route_can_fail_an_answer_or_only_advise() {
    let say = |text: &str| format!("sim:{}", rein_sim::say_spec(text));
    let config = format!(
        r#"
[store]
sqlite_path = ":memory:"
[providers.sim]
kind = "sim"
[routes.judge-yes]
[[routes.judge-yes.tiers]]
name = "judge"
provider = "sim"
model = "{yes}"
[routes.judge-no]
[[routes.judge-no.tiers]]
name = "judge"
provider = "sim"
model = "{no}"
[routes.approved]
output = {{ judge = {{ route = "judge-yes", fail = true }} }}
[[routes.approved.tiers]]
name = "primary"
provider = "sim"
model = "sim-primary"
[routes.strict]
output = {{ judge = {{ route = "judge-no", fail = true }} }}
[[routes.strict.tiers]]
name = "primary"
provider = "sim"
model = "sim-primary"
[routes.advised]
output = {{ judge = {{ route = "judge-no" }} }}
[[routes.advised.tiers]]
name = "primary"
provider = "sim"
model = "sim-primary"
"#,
        yes = say("supported"),
        no = say("not_supported"),
    );
    let gw = start_with(&config, None).await;
    let outcome = |route: &'static str| {
        let gw = &gw;
        async move {
            let response = gw.post("/v1/chat/completions", None, chat(route)).await;
            response.headers()["x-rein-outcome"].to_str().unwrap().to_string()
        }
    };
    assert_eq!(outcome("approved").await, "answered");
    assert_eq!(
        outcome("strict").await,
        "degraded",
        "a judge set to fail keeps an unsupported answer out"
    );
    assert_eq!(
        outcome("advised").await,
        "answered",
        "an advisory judge's verdict is recorded, not enforced"
    );
    gw.stop().await.unwrap();
}

/// Every admin route refuses a request without the admin key (401), with a client key (401),
/// and with no admin key configured (403), before it reads anything else of the request; and
/// takes the admin key.
#[tokio::test]
async fn every_admin_route_needs_the_admin_key() {
    let routes: [(&str, &str); 19] = [
        ("GET", "/admin/kill"),
        ("POST", "/admin/kill"),
        ("GET", "/admin/tiers"),
        ("POST", "/admin/reload"),
        ("GET", "/admin/config"),
        ("GET", "/admin/routes/chat/versions"),
        ("POST", "/admin/routes/chat/versions"),
        ("GET", "/admin/routes/chat/diff?from=1&to=1"),
        ("POST", "/admin/routes/chat/revert"),
        ("GET", "/admin/outbox"),
        ("GET", "/admin/outbox/1"),
        ("POST", "/admin/outbox/1/replay"),
        ("POST", "/admin/outbox/1/drop"),
        ("POST", "/admin/outbox/1/executed"),
        ("GET", "/admin/approvals"),
        ("POST", "/admin/approvals/1/approve"),
        ("GET", "/admin/tools"),
        ("GET", "/admin/judge/verdicts"),
        ("POST", "/admin/routes/chat/coverage"),
    ];
    let gw = start().await;
    let off = start_with(&CONFIG.replace("admin_key_env = \"ADMIN_KEY\"\n", ""), None).await;
    for (method, path) in routes {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        for (key, status) in [(None, 401), (Some("client-secret-1"), 401)] {
            let mut request = gw.client.request(method.clone(), gw.url(path)).body("not json");
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), status, "{method} {path} with {key:?}");
            let body: Value = response.json().await.unwrap();
            assert!(body["error"]["message"].as_str().unwrap().contains("admin key"), "{body}");
        }
        let response = off
            .client
            .request(method.clone(), off.url(path))
            .bearer_auth("admin-secret-1")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 403, "{method} {path} with the admin API off");
        // With the admin key the route is reached: whatever it answers, it is not a refusal.
        let response = gw
            .client
            .request(method.clone(), gw.url(path))
            .bearer_auth("admin-secret-1")
            .send()
            .await
            .unwrap();
        assert!(
            ![401, 403].contains(&response.status().as_u16()),
            "{method} {path} with the admin key: {}",
            response.status()
        );
    }
    gw.stop().await.unwrap();
    off.stop().await.unwrap();
}

/// An OpenAI-format caller served by a Gemini tier (the simulator speaking Gemini over real
/// HTTP, through the Gemini adapter), whole and streamed; and a failing Gemini tier (503
/// `UNAVAILABLE`) falling back to an OpenAI-format tier.
#[tokio::test]
async fn an_openai_caller_is_served_by_a_gemini_tier_and_falls_back_from_it() {
    let config = r#"
[server]
listen = "127.0.0.1:0"
client_keys_env = ["CLIENT_KEY"]

[store]
sqlite_path = ":memory:"

[providers.sim-gemini]
kind = "sim"
format = "gemini"

[providers.sim-openai]
kind = "sim"
format = "openai"

[routes.chat]
deadline_ms = 5000
first_token_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.chat.tiers]]
name = "gemini"
provider = "sim-gemini"
model = "gemini-sim"

[[routes.chat.tiers]]
name = "openai"
provider = "sim-openai"
model = "sim-fallback"

[routes.down]
deadline_ms = 5000
first_token_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.down.tiers]]
name = "gemini"
provider = "sim-gemini"
model = "sim:503"

[[routes.down.tiers]]
name = "openai"
provider = "sim-openai"
model = "sim-fallback"
"#;
    let gw = start_with(config, None).await;
    let response = gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-outcome"], "answered");
    assert_eq!(response.headers()["x-rein-tier"], "gemini");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["model"], "gemini-sim", "the model Gemini named in modelVersion");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.ends_with(rein_sim::SENTINEL), "{text}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");

    let mut streamed = chat("chat");
    streamed["stream"] = json!(true);
    let response = gw.post("/v1/chat/completions", KEY, streamed).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-tier"], "gemini");
    let sse = response.text().await.unwrap();
    assert!(sse.contains(rein_sim::SENTINEL) && sse.trim_end().ends_with("data: [DONE]"), "{sse}");

    let response = gw.post("/v1/chat/completions", KEY, chat("down")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-outcome"], "fallback");
    assert_eq!(response.headers()["x-rein-tier"], "openai");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["model"], "sim-fallback");
    gw.stop().await.unwrap();
}
