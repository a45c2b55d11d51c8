//! Provider and client configs: serde with `deny_unknown_fields`, defaults, and build errors
//! that name the key.

use rein_core::WireFormat;
use rein_providers::{
    ConfigError, HttpClientConfig, MaxTokensField, OpenAiAuth, ProviderConfig, build_provider,
};
use serde_json::json;

use crate::{TEST_KEY, client};

fn parse(value: serde_json::Value) -> Result<ProviderConfig, serde_json::Error> {
    serde_json::from_value(value)
}

#[test]
fn openai_config_with_every_option() {
    let config = parse(json!({
        "format": "openai",
        "name": "azure-east",
        "base_url": "https://east.openai.azure.com",
        "api_key": TEST_KEY,
        "headers": {"x-ms-client": "rein"},
        "streaming": false,
        "max_tokens_field": "max_completion_tokens",
        "auth": "api_key",
        "azure": {"deployment": "gpt-4o", "api_version": "2024-10-21"},
    }))
    .unwrap();
    let ProviderConfig::OpenAi(openai) = &config else { panic!("openai expected") };
    assert!(!openai.streaming);
    assert_eq!(openai.max_tokens_field, Some(MaxTokensField::MaxCompletionTokens));
    assert_eq!(openai.auth, Some(OpenAiAuth::ApiKey));
    let provider = build_provider(config, &client()).unwrap();
    assert_eq!(provider.name(), "azure-east");
    assert_eq!(provider.format(), WireFormat::OpenAi);
}

#[test]
fn defaults_fill_in() {
    let ProviderConfig::Anthropic(config) =
        parse(json!({"format": "anthropic", "name": "claude"})).unwrap()
    else {
        panic!("anthropic expected")
    };
    assert_eq!(config.base_url, None);
    assert_eq!(config.anthropic_version, "2023-06-01");
    assert_eq!(config.default_max_tokens, 4096);
    assert!(config.streaming);
    let provider = rein_providers::AnthropicProvider::new(config, client()).unwrap();
    assert_eq!(provider.endpoint().as_str(), "https://api.anthropic.com/v1/messages");

    let ProviderConfig::OpenAi(config) = parse(json!({"format": "openai", "name": "o"})).unwrap()
    else {
        panic!("openai expected")
    };
    let provider = rein_providers::OpenAiProvider::new(config, client()).unwrap();
    assert_eq!(provider.endpoint().as_str(), "https://api.openai.com/v1/chat/completions");

    let client_config: HttpClientConfig =
        serde_json::from_value(json!({"connect_timeout_ms": 500})).unwrap();
    assert_eq!(client_config.connect_timeout_ms, 500);
    assert_eq!(
        client_config.pool_max_idle_per_host,
        HttpClientConfig::default().pool_max_idle_per_host
    );
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    let error =
        parse(json!({"format": "openai", "name": "o", "base_ur": "http://x/v1"})).unwrap_err();
    assert!(error.to_string().contains("base_ur"), "{error}");
    let error = parse(json!({"format": "anthropic", "name": "a", "max_tokens": 5})).unwrap_err();
    assert!(error.to_string().contains("max_tokens"), "{error}");
    let error = parse(json!({"format": "cohere", "name": "c"})).unwrap_err();
    assert!(error.to_string().contains("cohere"), "{error}");
    let error = parse(json!({"format": "gemini", "name": "g", "api_version": "v1"})).unwrap_err();
    assert!(error.to_string().contains("api_version"), "{error}");
    let error =
        serde_json::from_value::<HttpClientConfig>(json!({"read_timeout_ms": 5})).unwrap_err();
    assert!(error.to_string().contains("read_timeout_ms"), "{error}");
    let error = parse(json!({
        "format": "openai", "name": "o", "azure": {"deployment": "d", "api_version": "v", "region": "x"}
    }))
    .unwrap_err();
    assert!(error.to_string().contains("region"), "{error}");
}

#[test]
fn build_errors_name_the_provider_and_key() {
    let build = |value| build_provider(parse(value).unwrap(), &client()).map(|_| ()).unwrap_err();

    let error = build(json!({"format": "openai", "name": "o", "base_url": "not a url"}));
    assert!(matches!(error, ConfigError::InvalidBaseUrl { .. }));
    assert!(error.to_string().contains("provider `o`: `base_url` (not a url)"), "{error}");

    let error = build(json!({"format": "anthropic", "name": "a", "base_url": "ftp://host/v1"}));
    assert!(matches!(error, ConfigError::UnsupportedScheme { .. }), "{error}");

    let error = build(
        json!({"format": "openai", "name": "az", "azure": {"deployment": "d", "api_version": "v"}}),
    );
    assert_eq!(error, ConfigError::AzureNeedsBaseUrl { provider: "az".into() });

    let error = build(
        json!({"format": "openai", "name": "az", "base_url": "https://x.openai.azure.com", "azure": {"deployment": "", "api_version": "v"}}),
    );
    assert_eq!(error, ConfigError::Empty { provider: "az".into(), key: "azure.deployment" });

    let error = build(json!({"format": "anthropic", "name": " "}));
    assert!(matches!(error, ConfigError::Empty { key: "name", .. }));

    let error = build(json!({"format": "openai", "name": "o", "headers": {"bad header": "v"}}));
    assert!(
        matches!(&error, ConfigError::InvalidHeader { header, .. } if header == "bad header"),
        "{error}"
    );

    let error = build(json!({"format": "openai", "name": "o", "api_key": "line\nbreak"}));
    assert_eq!(error, ConfigError::InvalidApiKey { provider: "o".into() });
    assert!(!error.to_string().contains("line"), "the key itself is never quoted");
}

#[test]
fn base_url_keeps_its_path_and_tolerates_a_trailing_slash() {
    let cases = [
        ("http://localhost:11434/v1", "http://localhost:11434/v1/chat/completions"),
        ("http://localhost:8080/v1/", "http://localhost:8080/v1/chat/completions"),
        ("https://gateway.example/openai/v1", "https://gateway.example/openai/v1/chat/completions"),
    ];
    for (base, expected) in cases {
        let ProviderConfig::OpenAi(config) =
            parse(json!({"format": "openai", "name": "o", "base_url": base})).unwrap()
        else {
            panic!()
        };
        let provider = rein_providers::OpenAiProvider::new(config, client()).unwrap();
        assert_eq!(provider.endpoint().as_str(), expected);
    }
}
