//! The attempt log: fields, `GET /_sim/log`, the file, and no secrets anywhere.

use rein_sim::{FaultSource, LogEntry, SimConfig};
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn log_records_requests_without_secrets() {
    let path = std::env::temp_dir().join(format!("rein-sim-log-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let sim = sim_with(SimConfig { log_path: Some(path.clone()), ..SimConfig::default() }).await;

    let response = sim
        .client
        .post(sim.url("/v1/chat/completions"))
        .header("authorization", "Bearer sk-secret-openai-key")
        .header("idempotency-key", "idem-1")
        .header("x-request-id", "client-req-1")
        .header("x-sim-fault", "429:retry_after=1")
        .json(&openai_body("log me"))
        .send()
        .await
        .unwrap();
    let returned_id = header(&response, "x-request-id").unwrap();
    assert_eq!(response.status(), 429);
    let response = sim
        .client
        .post(sim.url("/v1/messages"))
        .header("x-api-key", "sk-ant-secret-anthropic-key")
        .json(&anthropic_body("log me"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let _ = sim.openai(&openai_body("no auth"), None).await;

    let log = sim.handle.log();
    assert_eq!(log.len(), 3);
    let first = &log[0];
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.method, "POST");
    assert_eq!(first.format.as_deref(), Some("openai"));
    assert_eq!(first.model.as_deref(), Some("gpt-sim"));
    assert_eq!(first.fault, "429:retry_after=1");
    assert_eq!(first.fault_source, FaultSource::Header);
    assert_eq!(first.status, Some(429));
    assert_eq!(first.request_id.as_deref(), Some(returned_id.as_str()));
    assert_eq!(first.idempotency_key.as_deref(), Some("idem-1"));
    assert_eq!(first.client_request_id.as_deref(), Some("client-req-1"));
    assert!(first.auth_present);
    assert!(!first.stream);
    assert_eq!(first.sequence_key.len(), 16);
    assert_eq!(log[1].format.as_deref(), Some("anthropic"));
    assert_eq!(log[1].fault, "ok");
    assert_eq!(log[1].fault_source, FaultSource::None);
    assert!(log[1].auth_present);
    assert!(!log[2].auth_present);

    // The same entries over HTTP and in the file, and no secret in either.
    let over_http: Vec<LogEntry> =
        sim.client.get(sim.url("/_sim/log")).send().await.unwrap().json().await.unwrap();
    assert_eq!(over_http, log);
    let raw = sim.client.get(sim.url("/_sim/log")).send().await.unwrap().text().await.unwrap();
    let file = std::fs::read_to_string(&path).unwrap();
    for text in [&raw, &file] {
        assert!(!text.contains("secret"), "{text}");
    }
    let lines: Vec<LogEntry> =
        file.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(lines, log);
    // One JSON object per line, with the documented keys.
    let keys: Value = serde_json::from_str(file.lines().next().unwrap()).unwrap();
    for key in [
        "unix_ms",
        "elapsed_ms",
        "method",
        "path",
        "format",
        "model",
        "stream",
        "fault",
        "fault_source",
        "script",
        "script_step",
        "phase",
        "sequence_key",
        "status",
        "request_id",
        "idempotency_key",
        "client_request_id",
        "auth_present",
    ] {
        assert!(keys.get(key).is_some(), "{key}");
    }
    sim.handle.shutdown().await;
    let _ = std::fs::remove_file(&path);
}

/// The models of the log's entries, in order.
fn models(log: &[LogEntry]) -> Vec<&str> {
    log.iter().map(|entry| entry.model.as_deref().unwrap_or("")).collect()
}

#[tokio::test]
async fn the_log_in_memory_keeps_the_newest_requests_and_the_file_every_one() {
    let path = std::env::temp_dir().join(format!("rein-sim-log-keep-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let config =
        SimConfig { log_path: Some(path.clone()), log_keep: Some(3), ..SimConfig::default() };
    let sim = sim_with(config).await;
    for n in 0..5 {
        let body =
            json!({"model": format!("m{n}"), "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(sim.post("/v1/chat/completions", &body, None).await.status(), 200);
    }

    // The newest three, oldest first; the two before them counted.
    assert_eq!(models(&sim.handle.log()), ["m2", "m3", "m4"]);
    assert_eq!(sim.handle.log_dropped(), 2);
    let response = sim.client.get(sim.url("/_sim/log")).send().await.unwrap();
    assert_eq!(header(&response, "x-sim-log-dropped").as_deref(), Some("2"));
    let over_http: Vec<LogEntry> = response.json().await.unwrap();
    assert_eq!(over_http, sim.handle.log());
    // The file has every request.
    let file = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<LogEntry> =
        file.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(models(&lines), ["m0", "m1", "m2", "m3", "m4"]);

    // A reset starts both over.
    let reset = sim.client.post(sim.url("/_sim/reset")).send().await.unwrap();
    assert_eq!(reset.status(), 200);
    assert!(sim.handle.log().is_empty());
    assert_eq!(sim.handle.log_dropped(), 0);
    sim.handle.shutdown().await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_log_that_keeps_nothing_in_memory_counts_every_request_dropped() {
    let sim = sim_with(SimConfig { log_keep: Some(0), ..SimConfig::default() }).await;
    for _ in 0..2 {
        let _ = sim.openai(&openai_body("hi"), None).await;
    }
    assert!(sim.handle.log().is_empty());
    let response = sim.client.get(sim.url("/_sim/log")).send().await.unwrap();
    assert_eq!(header(&response, "x-sim-log-dropped").as_deref(), Some("2"));
    assert_eq!(response.json::<Vec<LogEntry>>().await.unwrap(), []);
}

#[tokio::test]
async fn shutdown_stops_serving() {
    let sim = sim().await;
    let url = sim.url("/_sim/health");
    assert_eq!(sim.client.get(&url).send().await.unwrap().status(), 200);
    let client = sim.client.clone();
    sim.handle.shutdown().await;
    let fresh = reqwest::Client::new();
    assert!(fresh.get(&url).send().await.is_err());
    drop(client);
}
