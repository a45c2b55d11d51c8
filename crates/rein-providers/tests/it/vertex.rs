//! The Vertex AI adapter: the exact request of each publisher (path, bearer token, body)
//! against the documented examples, answers and faults through the simulator's Vertex paths,
//! the access-token cache on paused time (one fetch per token life, a refresh before expiry,
//! one fetch for concurrent calls), a 401 dropping the token, the assertion's claims, failed
//! token fetches classified, secrets kept out of `Debug` and errors, and config errors.

use std::time::Duration;

use rein_core::classify::{Disposition, FailureKind, classify};
use rein_core::{ChatRequest, Failure, Message, Provider, StreamEvent, WireFormat};
use rein_providers::{
    ConfigError, ServiceAccountKey, VertexConfig, VertexCredentials, VertexProvider,
    VertexPublisher,
};
use rein_sim::{SimConfig, SimHandle};
use serde_json::{Value, json};

use crate::server::{Reply, response, serve};
use crate::{assemble, client, collect, fixture};

async fn sim() -> SimHandle {
    rein_providers::install_crypto_provider();
    let addr = "127.0.0.1:0".parse().expect("an address");
    rein_sim::bind(addr, SimConfig::default()).await.expect("sim")
}

fn key_of(sim: &SimHandle) -> ServiceAccountKey {
    ServiceAccountKey::from_json(sim.vertex_service_account().as_bytes()).expect("test key")
}

fn config(sim: &SimHandle, publisher: VertexPublisher, streaming: bool) -> VertexConfig {
    let credentials =
        VertexCredentials::ServiceAccount { path: Some("sim-key.json".into()), key: key_of(sim) };
    let mut config =
        VertexConfig::new("vertex-test", "rein-test", "us-east5", publisher, credentials);
    config.base_url = Some(sim.base_url());
    config.streaming = streaming;
    config
}

fn vertex(config: VertexConfig) -> VertexProvider {
    VertexProvider::new(config, client()).expect("vertex provider")
}

fn hello(model: &str) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        messages: vec![Message::user("Hey Claude!")],
        max_tokens: Some(100),
        ..ChatRequest::default()
    }
}

/// Sends and collects; the attempt's failure, if any, is the `Err`.
async fn call(provider: &VertexProvider, model: &str) -> Result<Vec<StreamEvent>, Failure> {
    let events = collect(provider.send(&hello(model)).await?).await;
    events.into_iter().collect()
}

fn text_of(events: &[StreamEvent]) -> String {
    let wrapped: Vec<Result<StreamEvent, Failure>> = events.iter().cloned().map(Ok).collect();
    assemble(&wrapped).text
}

/// Claude: `:streamRawPredict` under the project, location and publisher, `Authorization:
/// Bearer` with the token the metadata server gave, and the body of Anthropic's Vertex
/// example (https://docs.anthropic.com/en/api/claude-on-vertex-ai: `anthropic_version`
/// `vertex-2023-10-16`, no `model`), with `stream: true` as Anthropic's Vertex SDK sends it.
#[tokio::test]
async fn claude_request_is_the_documented_raw_predict() {
    let sim = sim().await;
    let server = serve(Reply::Pieces(vec![response(
        200,
        &[("content-type", "application/json")],
        &fixture("anthropic/responses/structured_text.json"),
    )]))
    .await;
    let metadata = VertexCredentials::Metadata { host: sim.addr().to_string() };
    let mut config = VertexConfig::new(
        "vertex-test",
        "my-project",
        "us-east5",
        VertexPublisher::Anthropic,
        metadata,
    );
    config.base_url = Some(server.base_url.trim_end_matches("/v1").to_owned());
    let provider = vertex(config);
    let result = provider.send(&hello("claude-3-7-sonnet@20250219")).await;
    assert!(result.is_ok(), "{:?}", result.err());
    let sent = server.captured().await;
    assert_eq!(
        sent.request_line,
        "POST /v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-3-7-sonnet@20250219:streamRawPredict HTTP/1.1"
    );
    let authorization = sent.header("authorization").expect("a bearer token");
    assert!(authorization.starts_with("Bearer ya29.sim-"), "{authorization}");
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(sent.header("x-api-key"), None);
    assert_eq!(
        sent.json(),
        json!({
            "anthropic_version": "vertex-2023-10-16",
            "messages": [{"role": "user", "content": "Hey Claude!"}],
            "max_tokens": 100,
            "stream": true
        })
    );
    assert_eq!(sim.token_grants().len(), 1);
    assert_eq!(sim.token_grants()[0].grant, "metadata");
}

/// Gemini: `:generateContent` (Google's Vertex REST example,
/// https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/inference), and
/// `:streamGenerateContent?alt=sse` when streaming; the body is the Gemini adapter's.
#[tokio::test]
async fn gemini_request_is_the_documented_generate_content() {
    let sim = sim().await;
    for (streaming, tail) in
        [(false, ":generateContent HTTP/1.1"), (true, ":streamGenerateContent?alt=sse HTTP/1.1")]
    {
        let server = serve(Reply::Pieces(vec![response(
            200,
            &[("content-type", "application/json")],
            &fixture("gemini/responses/text.json"),
        )]))
        .await;
        let metadata = VertexCredentials::Metadata { host: sim.addr().to_string() };
        let mut config = VertexConfig::new(
            "vertex-test",
            "my-project",
            "global",
            VertexPublisher::Google,
            metadata,
        );
        config.base_url = Some(server.base_url.trim_end_matches("/v1").to_owned());
        config.streaming = streaming;
        let provider = vertex(config);
        let mut request = hello("gemini-2.5-flash");
        request.messages = vec![Message::user("How does AI work?")];
        request.max_tokens = None;
        assert!(provider.send(&request).await.is_ok());
        let sent = server.captured().await;
        assert_eq!(
            sent.request_line,
            format!(
                "POST /v1/projects/my-project/locations/global/publishers/google/models/gemini-2.5-flash{tail}"
            )
        );
        assert!(sent.header("authorization").is_some_and(|v| v.starts_with("Bearer ya29.sim-")));
        assert_eq!(
            sent.json(),
            json!({"contents": [{"role": "user", "parts": [{"text": "How does AI work?"}]}]})
        );
    }
    // Without a base URL the host is the region's, and `global` has none.
    let metadata = VertexCredentials::Metadata { host: "metadata.google.internal".into() };
    let config = VertexConfig::new("v", "p", "global", VertexPublisher::Google, metadata);
    assert_eq!(
        vertex(config).endpoint("gemini-2.5-flash").as_str(),
        "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
}

/// Both publishers answer through the simulator's Vertex paths, streaming and not, with the
/// service-account key's token.
#[tokio::test]
async fn both_publishers_answer_through_the_simulator() {
    let sim = sim().await;
    for publisher in [VertexPublisher::Anthropic, VertexPublisher::Google] {
        for streaming in [true, false] {
            let provider = vertex(config(&sim, publisher, streaming));
            let events = call(&provider, "sim-large").await.expect("an answer");
            assert_eq!(events.last(), Some(&StreamEvent::Done), "{publisher:?} {streaming}");
            assert!(!text_of(&events).is_empty());
        }
    }
    let log = sim.log();
    assert_eq!(log.len(), 4);
    assert!(log[0].path.ends_with("/publishers/anthropic/models/sim-large:streamRawPredict"));
    assert!(log[3].path.ends_with("/publishers/google/models/sim-large:generateContent"));
}

/// The assertion the token endpoint got: RS256 with the key's id, and the claims Google's
/// service-account flow documents (iss, scope, aud = token_uri, iat, exp = iat + 3600). The
/// simulator also checked its signature against the test key's public half.
#[tokio::test]
async fn the_assertion_claims_what_google_documents() {
    let sim = sim().await;
    let provider = vertex(config(&sim, VertexPublisher::Google, false));
    call(&provider, "sim-small").await.expect("an answer");
    let grants = sim.token_grants();
    assert_eq!(grants.len(), 1);
    let grant = &grants[0];
    assert_eq!(grant.grant, "jwt-bearer");
    assert_eq!(grant.header, json!({"alg": "RS256", "typ": "JWT", "kid": "rein-sim-test-key"}));
    let claims = &grant.claims;
    assert_eq!(claims["iss"], rein_sim::vertex::TEST_CLIENT_EMAIL);
    assert_eq!(claims["scope"], "https://www.googleapis.com/auth/cloud-platform");
    assert_eq!(claims["aud"], format!("{}/token", sim.base_url()));
    let (iat, exp) = (claims["iat"].as_u64().unwrap(), claims["exp"].as_u64().unwrap());
    assert_eq!(exp - iat, 3600);
    assert_eq!(claims.as_object().map(|c| c.len()), Some(5), "{claims}");
}

/// Two calls in a token's life share it; past its life less the margin it is replaced.
#[tokio::test(start_paused = true)]
async fn a_token_is_fetched_once_per_life_and_refreshed_before_it_expires() {
    let sim = sim().await;
    let mut config = config(&sim, VertexPublisher::Anthropic, true);
    config.token_refresh_margin_ms = 300_000;
    let provider = vertex(config);
    call(&provider, "sim-small").await.expect("first");
    call(&provider, "sim-small").await.expect("second");
    assert_eq!(sim.token_grants().len(), 1, "a live token is reused");
    // 3600 s life, 300 s margin: still good at 3290 s...
    tokio::time::advance(Duration::from_secs(3290)).await;
    call(&provider, "sim-small").await.expect("third");
    assert_eq!(sim.token_grants().len(), 1);
    // ...replaced past 3300 s, before the simulator would refuse it at 3600 s.
    tokio::time::advance(Duration::from_secs(20)).await;
    call(&provider, "sim-small").await.expect("fourth");
    assert_eq!(sim.token_grants().len(), 2, "refreshed inside the margin");
    // A token shorter than the margin is fetched for every call rather than sent stale.
    sim.set_token_lifetime(Duration::from_secs(60));
    tokio::time::advance(Duration::from_secs(3400)).await;
    call(&provider, "sim-small").await.expect("fifth");
    call(&provider, "sim-small").await.expect("sixth");
    assert_eq!(sim.token_grants().len(), 4);
}

/// Calls that arrive together wait for one fetch and share its token.
#[tokio::test(start_paused = true)]
async fn concurrent_calls_share_one_fetch() {
    let sim = sim().await;
    let provider = vertex(config(&sim, VertexPublisher::Google, true));
    let calls = (0..8).map(|_| call(&provider, "sim-small"));
    for result in futures_util::future::join_all(calls).await {
        result.expect("an answer");
    }
    assert_eq!(sim.token_grants().len(), 1);
    assert_eq!(sim.log().len(), 8);
}

/// An expired token is answered with Google's 401; the adapter drops it, so the next attempt
/// fetches a fresh one and succeeds.
#[tokio::test]
async fn a_401_drops_the_token() {
    let sim = sim().await;
    let provider = vertex(config(&sim, VertexPublisher::Anthropic, false));
    call(&provider, "sim-small").await.expect("first");
    sim.expire_tokens();
    let failure = call(&provider, "sim-small").await.expect_err("an expired token");
    let Failure::Http { format, http } = &failure else { panic!("{failure:?}") };
    assert_eq!((*format, http.status), (WireFormat::Gemini, 401));
    assert_eq!(http.error_type.as_deref(), Some("UNAUTHENTICATED"));
    assert_eq!(http.code.as_deref(), Some("ACCESS_TOKEN_EXPIRED"));
    assert_eq!(classify(&failure).kind, FailureKind::Unauthorized);
    assert!(!failure.to_string().contains("ya29."), "{failure}");
    call(&provider, "sim-small").await.expect("a fresh token");
    assert_eq!(sim.token_grants().len(), 2);
}

/// Claude on Vertex answers faults in both shapes: Google bodies (a 429 with RetryInfo's
/// delay as the wait, 503 UNAVAILABLE) and Anthropic's own 529 `overloaded_error`.
#[tokio::test]
async fn errors_of_both_shapes_are_classified() {
    let sim = sim().await;
    let claude = vertex(config(&sim, VertexPublisher::Anthropic, true));
    let gemini = vertex(config(&sim, VertexPublisher::Google, true));
    let cases: [(&VertexProvider, &str, WireFormat, u16, FailureKind); 5] = [
        (&claude, "sim:429:retry_after=3", WireFormat::Gemini, 429, FailureKind::RateLimited),
        (&claude, "sim:503", WireFormat::Gemini, 503, FailureKind::Overloaded),
        (&claude, "sim:529", WireFormat::Anthropic, 529, FailureKind::Overloaded),
        (&claude, "sim:403", WireFormat::Gemini, 403, FailureKind::Forbidden),
        (&gemini, "sim:429:retry_after=3", WireFormat::Gemini, 429, FailureKind::RateLimited),
    ];
    for (provider, model, format, status, kind) in cases {
        let failure = call(provider, model).await.expect_err(model);
        let Failure::Http { format: seen, http } = &failure else { panic!("{failure:?}") };
        assert_eq!((*seen, http.status), (format, status), "{model}: {http:?}");
        let classified = classify(&failure);
        assert_eq!(classified.kind, kind, "{model}");
        if model.contains("retry_after") {
            assert_eq!(classified.retry_after, Some(Duration::from_secs(3)), "{model}");
        }
    }
    // A context-length 400 in Google's words is the larger-context move, as on the Gemini API.
    let failure = call(&claude, "sim:context_length").await.expect_err("too long");
    assert_eq!(classify(&failure).disposition, Disposition::NextLargerContextTier);
}

/// A key the token endpoint does not accept (`invalid_grant`) is an unauthorized tier, and the
/// message names the token endpoint and the account, never the key; an unreachable token
/// endpoint is a connection failure.
#[tokio::test]
async fn failed_token_fetches_are_classified_and_name_their_source() {
    let sim = sim().await;
    let mut key = key_of(&sim);
    let unknown = String::from_utf8(fixture("vertex/unknown-TEST-ONLY-key.pem")).unwrap();
    key.private_key = rein_providers::Secret::new(unknown.clone());
    let mut refused = config(&sim, VertexPublisher::Anthropic, true);
    refused.credentials = VertexCredentials::ServiceAccount { path: None, key };
    let failure = call(&vertex(refused), "sim-small").await.expect_err("a refused key");
    let classified = classify(&failure);
    assert_eq!(classified.kind, FailureKind::Unauthorized, "{failure:?}");
    assert_eq!(classified.disposition, Disposition::SkipTierAndAlert);
    let text = failure.to_string();
    assert!(text.contains(&format!("{}/token", sim.base_url())), "{text}");
    assert!(text.contains("invalid_grant: Invalid JWT Signature."), "{text}");
    assert!(text.contains(rein_sim::vertex::TEST_CLIENT_EMAIL), "{text}");
    assert!(!text.contains("PRIVATE KEY") && !text.contains(&unknown[40..80]), "{text}");
    assert!(sim.token_grants().is_empty());

    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = closed.local_addr().unwrap().to_string();
    drop(closed);
    let mut config = config(&sim, VertexPublisher::Google, true);
    config.credentials = VertexCredentials::Metadata { host: host.clone() };
    let failure = call(&vertex(config), "sim-small").await.expect_err("no metadata server");
    assert_eq!(classify(&failure).kind, FailureKind::ConnectionFailed, "{failure:?}");
    assert!(
        failure.to_string().contains(&format!("the metadata server http://{host}/")),
        "{failure}"
    );
}

/// No `Debug` of the config, the provider or a failure shows the private key or a token.
#[tokio::test]
async fn debug_and_errors_hold_no_private_key_or_token() {
    let sim = sim().await;
    let config = config(&sim, VertexPublisher::Anthropic, true);
    let pem = key_of(&sim).private_key.expose().to_owned();
    let body_line = pem.lines().nth(5).expect("a PEM body line").to_owned();
    let provider = vertex(config.clone());
    call(&provider, "sim-small").await.expect("an answer");
    sim.expire_tokens();
    let failure = call(&provider, "sim-small").await.expect_err("401");
    let shown = format!(
        "{config:?} {provider:?} {failure:?} {failure} {:?}",
        serde_json::to_string(&config).unwrap()
    );
    assert!(shown.contains("rein-sim@rein-sim-test.iam.gserviceaccount.com"), "{shown}");
    assert!(!shown.contains(&body_line), "the private key leaked: {shown}");
    assert!(!shown.contains("BEGIN PRIVATE KEY"), "{shown}");
    assert!(!shown.contains("ya29."), "a token leaked: {shown}");
}

/// Config errors name the key at fault.
#[tokio::test]
async fn config_errors_name_the_key() {
    let sim = sim().await;
    let key = |config: VertexConfig| -> String {
        let error: ConfigError = VertexProvider::new(config, client()).expect_err("invalid");
        error.key()
    };
    let mut bad = config(&sim, VertexPublisher::Google, true);
    bad.project = " ".into();
    assert_eq!(key(bad), "project");
    let mut bad = config(&sim, VertexPublisher::Google, true);
    bad.region = "us east5".into();
    assert_eq!(key(bad), "region");
    let mut bad = config(&sim, VertexPublisher::Google, true);
    let mut broken = key_of(&sim);
    broken.private_key = rein_providers::Secret::new(
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    );
    bad.credentials = VertexCredentials::ServiceAccount { path: None, key: broken };
    assert_eq!(key(bad), "credentials_file");
    let not_a_key =
        ServiceAccountKey::from_json(br#"{"type": "authorized_user", "client_id": "x"}"#);
    assert!(not_a_key.unwrap_err().contains("authorized_user"));
    let missing =
        ServiceAccountKey::from_json(br#"{"type": "service_account", "client_email": "a@b"}"#);
    let message = missing.unwrap_err();
    assert!(message.contains("private_key") || message.contains("token_uri"), "{message}");
    let _: Value = json!(null);
}

/// A token source that never answers fails the attempt after `token_timeout_ms` (a connection
/// failure naming the source); one that answers more than 64 KiB is not read past it.
#[tokio::test(start_paused = true)]
async fn a_token_fetch_is_bounded_in_time_and_size() {
    let sim = sim().await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = silent.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        let (socket, _) = silent.accept().await.unwrap();
        std::future::pending::<()>().await;
        drop(socket);
    });
    let mut config = config(&sim, VertexPublisher::Google, true);
    config.credentials = VertexCredentials::Metadata { host: host.clone() };
    config.token_timeout_ms = 2_000;
    let started = tokio::time::Instant::now();
    let failure = call(&vertex(config.clone()), "sim-small").await.expect_err("no token");
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(classify(&failure).kind, FailureKind::ConnectionFailed, "{failure:?}");
    assert!(failure.to_string().contains("no access token from the metadata server"), "{failure}");
    held.abort();

    let huge = format!("{{\"access_token\": \"{}\", \"expires_in\": 3600}}", "a".repeat(70 * 1024));
    let server = serve(Reply::Pieces(vec![response(
        200,
        &[("content-type", "application/json")],
        huge.as_bytes(),
    )]))
    .await;
    let host = server.base_url.trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    config.credentials = VertexCredentials::Metadata { host };
    let failure = call(&vertex(config), "sim-small").await.expect_err("too large");
    assert_eq!(classify(&failure).kind, FailureKind::MalformedResponse, "{failure:?}");
    assert!(failure.to_string().contains("larger than 65536 bytes"), "{failure}");
}

/// The simulator's transport faults reach a Vertex stream as they reach any other: a Claude
/// stream cut after two tokens ends without its stop reason.
#[tokio::test]
async fn a_cut_vertex_stream_ends_without_done() {
    let sim = sim().await;
    let provider = vertex(config(&sim, VertexPublisher::Anthropic, true));
    let events = collect(provider.send(&hello("sim:cut:after=2")).await.expect("headers")).await;
    assert!(!events.is_empty());
    assert!(!events.iter().any(|event| matches!(event, Ok(StreamEvent::Done))), "{events:?}");
}
