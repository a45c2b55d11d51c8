//! Integration tests of rein-providers: recorded wire samples parsed (`fixtures`, `errors`),
//! exact request bodies and headers captured by an in-process raw HTTP server (`requests`),
//! streams end to end and transport failures (`streams`, `transport`), response size limits
//! (`limits`), the Anthropic URL and `json_object` prefill (`anthropic_wire`), config
//! (`config`) and secrets (`secrets`). Every server listens on 127.0.0.1:0 and answers one request.

// `Failure` is large; tests match on it by value. Helpers outside `#[test]` functions may
// panic too: this whole crate is a test.
#![allow(clippy::result_large_err, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod anthropic_wire;
mod bedrock;
mod bedrock_invoke;
mod classify;
mod config;
mod errors;
mod fixtures;
mod gemini;
mod limits;
mod requests;
mod responses;
mod secrets;
mod server;
mod streams;
mod transport;
mod vertex;

use futures_util::StreamExt;
use rein_core::{ChatResponse, EventStream, Failure, ResponseBuilder, StreamEvent};
use rein_providers::{
    AnthropicConfig, AnthropicProvider, HttpClient, HttpClientConfig, OpenAiConfig, OpenAiProvider,
    Secret,
};

/// The API key every test provider uses; `secrets` checks it never leaks.
pub const TEST_KEY: &str = "sk-test-0123456789-secret";

pub fn fixture(path: &str) -> Vec<u8> {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&full).unwrap_or_else(|e| panic!("fixture {full}: {e}"))
}

pub fn client() -> HttpClient {
    HttpClient::new(&HttpClientConfig::default()).expect("client")
}

pub fn openai_config(base_url: &str) -> OpenAiConfig {
    let mut config = OpenAiConfig::new("openai-test", base_url);
    config.api_key = Some(Secret::new(TEST_KEY));
    config
}

pub fn anthropic_config(base_url: &str) -> AnthropicConfig {
    let mut config = AnthropicConfig::new("anthropic-test", base_url);
    config.api_key = Some(Secret::new(TEST_KEY));
    config
}

pub fn openai(base_url: &str) -> OpenAiProvider {
    OpenAiProvider::new(openai_config(base_url), client()).expect("openai provider")
}

pub fn anthropic(base_url: &str) -> AnthropicProvider {
    AnthropicProvider::new(anthropic_config(base_url), client()).expect("anthropic provider")
}

pub async fn collect(stream: EventStream) -> Vec<Result<StreamEvent, Failure>> {
    stream.collect().await
}

/// Assembles the answer from successful events (panics on an `Err`).
pub fn assemble(events: &[Result<StreamEvent, Failure>]) -> ChatResponse {
    let mut builder = ResponseBuilder::default();
    for event in events {
        builder.push(event.as_ref().expect("no failure in stream"));
    }
    builder.finish()
}

pub fn ok_events(events: Vec<Result<StreamEvent, Failure>>) -> Vec<StreamEvent> {
    events.into_iter().map(|e| e.expect("no failure in stream")).collect()
}
