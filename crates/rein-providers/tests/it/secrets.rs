//! The API key and static header values never appear in `Debug`/`Display` of configs,
//! providers or failures, even when a server echoes the key back in an error body.

use rein_core::{ChatRequest, Failure, Provider};
use rein_providers::{
    AnthropicProvider, AzureConfig, OpenAiProvider, ProviderConfig, Secret, build_provider,
};

use crate::server::{Reply, response, serve};
use crate::{TEST_KEY, anthropic_config, client, openai_config};

const HEADER_SECRET: &str = "gateway-token-987654";

fn assert_clean(text: &str) {
    assert!(!text.contains(TEST_KEY), "API key leaked into: {text}");
    assert!(!text.contains(HEADER_SECRET), "header value leaked into: {text}");
}

#[test]
fn secret_prints_stars() {
    let secret = Secret::new(TEST_KEY);
    assert_eq!(format!("{secret}"), "***");
    assert_eq!(format!("{secret:?}"), "***");
    assert_eq!(format!("{secret:#?}"), "***");
}

#[test]
fn configs_and_providers_debug_without_secrets() {
    let mut openai = openai_config("https://example.invalid/v1?key=in-the-query");
    openai.headers.insert("x-gateway-token".into(), Secret::new(HEADER_SECRET));
    let mut azure = openai_config("https://name.openai.azure.com");
    azure.azure = Some(AzureConfig { deployment: "d".into(), api_version: "2024-10-21".into() });
    let mut anthropic = anthropic_config("https://api.anthropic.com/v1");
    anthropic.headers.insert("anthropic-beta".into(), Secret::new(HEADER_SECRET));

    assert_clean(&format!("{openai:?} {azure:?} {anthropic:?} {openai:#?}"));
    let openai_provider = OpenAiProvider::new(openai.clone(), client()).unwrap();
    let azure_provider = OpenAiProvider::new(azure.clone(), client()).unwrap();
    let anthropic_provider = AnthropicProvider::new(anthropic.clone(), client()).unwrap();
    let dyn_provider = build_provider(ProviderConfig::OpenAi(openai), &client()).unwrap();
    let debug =
        format!("{openai_provider:?} {azure_provider:#?} {anthropic_provider:?} {dyn_provider:?}");
    assert_clean(&debug);
    assert!(!debug.contains("in-the-query"), "query strings are hidden: {debug}");
    assert!(debug.contains("x-gateway-token"), "header names are shown: {debug}");
}

#[tokio::test]
async fn an_echoed_key_is_scrubbed_from_the_failure() {
    let body = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {TEST_KEY}. Header was {HEADER_SECRET}.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}}}"#
    );
    let server = serve(Reply::Pieces(vec![response(
        401,
        &[("content-type", "application/json")],
        body.as_bytes(),
    )]))
    .await;
    let mut config = openai_config(&server.base_url);
    config.headers.insert("x-gateway-token".into(), Secret::new(HEADER_SECRET));
    let provider = OpenAiProvider::new(config, client()).unwrap();
    let failure = match provider.send(&ChatRequest::default()).await {
        Err(failure) => failure,
        Ok(_) => panic!("expected a 401"),
    };
    assert!(matches!(failure, Failure::Http { .. }));
    assert_clean(&format!("{failure} {failure:?}"));
    assert!(failure.to_string().contains("Incorrect API key provided: ***"), "{failure}");
    // The key did go out in the header.
    let captured = server.captured().await;
    assert_eq!(captured.header("x-gateway-token"), Some(HEADER_SECRET));
}

#[tokio::test]
async fn an_echoed_key_mid_stream_is_scrubbed() {
    let body = format!(
        "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"authentication_error\",\"message\":\"bad key {TEST_KEY}\"}}}}\n\n"
    );
    let server = serve(Reply::Pieces(crate::server::sse_response(body.as_bytes(), 1))).await;
    let provider = AnthropicProvider::new(anthropic_config(&server.base_url), client()).unwrap();
    let events = crate::collect(provider.send(&ChatRequest::default()).await.unwrap()).await;
    let text = format!("{events:?}");
    assert_clean(&text);
    assert!(text.contains("bad key ***"), "{text}");
}

#[tokio::test]
async fn connection_failures_carry_no_secret() {
    let mut config = openai_config("http://127.0.0.1:9/v1?api_key=query-secret-value");
    config.headers.insert("x-gateway-token".into(), Secret::new(HEADER_SECRET));
    let provider = OpenAiProvider::new(config, client()).unwrap();
    let failure = match provider.send(&ChatRequest::default()).await {
        Err(failure) => failure,
        Ok(_) => panic!("nothing listens on port 9"),
    };
    let text = format!("{failure} {failure:?}");
    assert_clean(&text);
    assert!(!text.contains("query-secret-value"), "{text}");
}
