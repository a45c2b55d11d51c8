//! Vertex AI in the simulator: the metadata server's token (refused without
//! `Metadata-Flavor: Google`), the token endpoint's refusals, model paths that need a live
//! token (401 `UNAUTHENTICATED` otherwise, `ACCESS_TOKEN_EXPIRED` once it has expired), the
//! Claude body's Vertex rules, and faults rendered as Vertex sends them. A signed assertion
//! accepted end to end is rein-providers' test (it holds the signing code).

// Helpers of tests: failing loudly is their job.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Sim, sim};

const CLAUDE: &str =
    "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514";
const GEMINI: &str = "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash";

async fn metadata_token(sim: &Sim) -> (reqwest::StatusCode, Value) {
    let response = sim
        .client
        .get(sim.url(rein_sim::vertex::METADATA_TOKEN_PATH))
        .header("Metadata-Flavor", "Google")
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

async fn post(sim: &Sim, path: &str, token: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = sim.client.post(sim.url(path)).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

fn claude_body() -> Value {
    json!({
        "anthropic_version": "vertex-2023-10-16",
        "messages": [{"role": "user", "content": "Hey Claude!"}],
        "max_tokens": 100
    })
}

fn gemini_body() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "How does AI work?"}]}]})
}

#[tokio::test]
async fn the_metadata_server_needs_its_header() {
    let sim = sim().await;
    let refused =
        sim.client.get(sim.url(rein_sim::vertex::METADATA_TOKEN_PATH)).send().await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused.text().await.unwrap().contains("Missing Metadata-Flavor:Google header."));
    sim.handle.set_token_lifetime(Duration::from_secs(120));
    let (status, token) = metadata_token(&sim).await;
    assert_eq!(status, 200);
    assert_eq!(token["token_type"], "Bearer");
    assert_eq!(token["expires_in"], 120);
    assert!(token["access_token"].as_str().unwrap().starts_with("ya29."));
    assert_eq!(sim.handle.token_grants().len(), 1);
}

#[tokio::test]
async fn the_token_endpoint_refuses_what_google_refuses() {
    let sim = sim().await;
    let form = |body: &'static str| {
        sim.client
            .post(sim.url("/token"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    let wrong_grant = form("grant_type=client_credentials").await.unwrap();
    assert_eq!(wrong_grant.status(), 400);
    let body: Value = wrong_grant.json().await.unwrap();
    assert_eq!(body["error"], "unsupported_grant_type");
    let forged = form(
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0.c2ln",
    )
    .await
    .unwrap();
    assert_eq!(forged.status(), 400);
    let body: Value = forged.json().await.unwrap();
    assert_eq!(
        body,
        json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
    );
    assert!(sim.handle.token_grants().is_empty());
}

#[tokio::test]
async fn model_paths_need_a_live_token() {
    let sim = sim().await;
    let missing = post(&sim, &format!("{CLAUDE}:rawPredict"), None, &claude_body()).await;
    assert_eq!(missing.status(), 401);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
    assert_eq!(body["error"]["details"][0]["reason"], "CREDENTIALS_MISSING");

    let (_, token) = metadata_token(&sim).await;
    let token = token["access_token"].as_str().unwrap().to_owned();
    let claude = post(&sim, &format!("{CLAUDE}:rawPredict"), Some(&token), &claude_body()).await;
    assert_eq!(claude.status(), 200);
    let answer: Value = claude.json().await.unwrap();
    assert_eq!(answer["type"], "message");
    assert_eq!(answer["model"], "claude-sonnet-4@20250514");

    let stream =
        post(&sim, &format!("{CLAUDE}:streamRawPredict"), Some(&token), &claude_body()).await;
    assert!(stream.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    assert!(stream.text().await.unwrap().contains("event: message_stop"));

    let gemini = post(
        &sim,
        &format!("{GEMINI}:streamGenerateContent?alt=sse"),
        Some(&token),
        &gemini_body(),
    )
    .await;
    assert_eq!(gemini.status(), 200);
    assert!(gemini.text().await.unwrap().contains("\"finishReason\":\"STOP\""));

    sim.handle.expire_tokens();
    let expired =
        post(&sim, &format!("{GEMINI}:generateContent"), Some(&token), &gemini_body()).await;
    assert_eq!(expired.status(), 401);
    let body: Value = expired.json().await.unwrap();
    assert_eq!(body["error"]["code"], 401);
    assert_eq!(body["error"]["details"][0]["reason"], "ACCESS_TOKEN_EXPIRED");
}

#[tokio::test(start_paused = true)]
async fn a_token_expires_after_its_lifetime() {
    let sim = sim().await;
    sim.handle.set_token_lifetime(Duration::from_secs(60));
    let (_, token) = metadata_token(&sim).await;
    let token = token["access_token"].as_str().unwrap().to_owned();
    let path = format!("{GEMINI}:generateContent");
    assert_eq!(post(&sim, &path, Some(&token), &gemini_body()).await.status(), 200);
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(post(&sim, &path, Some(&token), &gemini_body()).await.status(), 401);
}

/// Claude's body must carry Vertex's `anthropic_version` and no `model`.
#[tokio::test]
async fn the_claude_body_follows_vertex_rules() {
    let sim = sim().await;
    let (_, token) = metadata_token(&sim).await;
    let token = token["access_token"].as_str().unwrap().to_owned();
    let path = format!("{CLAUDE}:rawPredict");
    let mut without_version = claude_body();
    without_version.as_object_mut().unwrap().remove("anthropic_version");
    let mut with_model = claude_body();
    with_model["model"] = json!("claude-sonnet-4");
    for (body, message) in [
        (without_version, "anthropic_version: Field required"),
        (with_model, "model: Extra inputs are not permitted"),
    ] {
        let response = post(&sim, &path, Some(&token), &body).await;
        assert_eq!(response.status(), 400);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], message);
    }
}

/// Faults come as Vertex sends them: Google bodies (a 429 asking for its wait in RetryInfo,
/// 503 UNAVAILABLE), but Anthropic's 529 `overloaded_error` for an overloaded Claude.
#[tokio::test]
async fn faults_are_rendered_as_vertex_sends_them() {
    let sim = sim().await;
    let (_, token) = metadata_token(&sim).await;
    let token = token["access_token"].as_str().unwrap().to_owned();
    let fault = |path: String, body: Value, spec: &'static str| {
        sim.client
            .post(sim.url(&path))
            .bearer_auth(&token)
            .header("x-sim-fault", spec)
            .json(&body)
            .send()
    };
    let limited =
        fault(format!("{CLAUDE}:rawPredict"), claude_body(), "429:retry_after=3").await.unwrap();
    assert_eq!(limited.status(), 429);
    assert!(limited.headers().get("retry-after").is_none());
    let body: Value = limited.json().await.unwrap();
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(
        body["error"]["details"],
        json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}])
    );
    let overloaded = fault(format!("{CLAUDE}:rawPredict"), claude_body(), "529").await.unwrap();
    assert_eq!(overloaded.status(), 529);
    let body: Value = overloaded.json().await.unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error");
    let unavailable =
        fault(format!("{GEMINI}:generateContent"), gemini_body(), "503").await.unwrap();
    assert_eq!(unavailable.status(), 503);
    let body: Value = unavailable.json().await.unwrap();
    assert_eq!(body["error"]["status"], "UNAVAILABLE");
}
