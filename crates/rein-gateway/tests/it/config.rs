//! Config parsing and validation: every shipped example parses, and bad configs are refused with
//! messages that name the key (snapshots).

use rein_runtime::config::{Config, ProviderKind};

fn env(name: &str) -> Option<String> {
    match name {
        "OPENAI_API_KEY" => Some("sk-test-openai".into()),
        "ANTHROPIC_API_KEY" => Some("sk-ant-test".into()),
        "AWS_ACCESS_KEY_ID" => Some("AKIDTESTEXAMPLE".into()),
        "AWS_SECRET_ACCESS_KEY" => Some("aws-secret-test".into()),
        "REIN_CLIENT_KEY" => Some("client-key".into()),
        "REIN_ADMIN_KEY" => Some("admin-key".into()),
        _ => None,
    }
}

fn example(name: &str) -> String {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn problems(text: &str) -> String {
    Config::from_toml(text, &env).expect_err("config should be refused").to_string()
}

#[test]
fn every_shipped_example_parses() {
    for name in ["minimal.toml", "support-agent.toml", "embedded.toml", "drill.toml"] {
        let config =
            Config::from_toml(&example(name), &env).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!config.routes.is_empty(), "{name}");
    }
    let support = Config::from_toml(&example("support-agent.toml"), &env).unwrap();
    let route = &support.routes["support"];
    // The spec's chain: OpenAI, the same Claude on Anthropic and on Bedrock, Gemini on Vertex.
    let chain: Vec<(&str, &str)> =
        route.tiers.iter().map(|tier| (tier.provider.as_str(), tier.name.as_str())).collect();
    assert_eq!(
        chain,
        [
            ("openai", "primary"),
            ("anthropic", "fallback"),
            ("bedrock", "claude-bedrock"),
            ("vertex", "gemini-vertex")
        ]
    );
    assert_eq!(route.failover, Some((1, 0.05)));
    assert_eq!(route.clocks.deadline.as_millis(), 20_000);
    assert_eq!(support.providers["anthropic"].kind, ProviderKind::Anthropic);
    assert_eq!(support.providers["bedrock"].kind, ProviderKind::Bedrock);
    assert_eq!(support.providers["vertex"].kind, ProviderKind::Vertex);
    assert_eq!(support.server.client_keys.len(), 1);
}

#[test]
fn secrets_never_print() {
    let config = Config::from_toml(&example("support-agent.toml"), &env).unwrap();
    let debug = format!("{config:?}");
    let json = serde_json::to_string(&config).unwrap();
    for secret in ["sk-test-openai", "sk-ant-test", "aws-secret-test", "client-key", "admin-key"] {
        assert!(!debug.contains(secret), "{secret} in Debug output");
        assert!(!json.contains(secret), "{secret} in serialized config");
    }
    assert!(json.contains("***"));
}

#[test]
fn unknown_key_is_named() {
    let text = example("minimal.toml").replace("model = ", "modle = ");
    insta::assert_snapshot!(problems(&text), @r"
    the config has 1 problem:
      - `routes.chat.tiers[0].modle`: unknown field `modle`, expected one of `name`, `provider`, `model`, `context_window`, `system_prompt`, `max_tokens`, `temperature`, `top_p`, `attempts`, `allowed_fails`, `cooldown_s`, `prefill`
    ");
}

#[test]
fn clock_contradictions_name_both_keys() {
    let text = r#"
[providers.openai]
kind = "openai"
api_key_env = "OPENAI_API_KEY"

[routes.chat]
deadline_ms = 500
first_token_ms = 9000
backoff_floor_ms = 9000

[[routes.chat.tiers]]
name = "primary"
provider = "openai"
model = "gpt-4o-mini"
"#;
    insta::assert_snapshot!(problems(text), @r"
    the config has 4 problems:
      - `routes.chat.deadline_ms`: (500) is less than `min_attempt_ms` (8000): no attempt could ever start; raise the deadline or lower `attempt_ms`/`min_attempt_ms`
      - `routes.chat.first_token_ms`: (9000) is more than `attempt_ms` (8000): the attempt cap would always fire first
      - `routes.chat.backoff_floor_ms`: (9000) is more than `backoff_cap_ms` (8000)
      - `routes.chat.backoff_cap_ms`: (8000) is not less than `deadline_ms` (500): a wait that long could never be followed by an attempt
    ");
}

#[test]
fn missing_env_unknown_provider_and_open_listen_are_all_reported() {
    let text = r#"
[server]
listen = "0.0.0.0:8787"

[providers.openai]
kind = "openai"
api_key_env = "NOT_SET_ANYWHERE"

[routes.chat]
failover = { tier = "nope", share = 1.5 }

[[routes.chat.tiers]]
name = "primary"
provider = "openia"
model = "gpt-4o-mini"
"#;
    insta::assert_snapshot!(problems(text), @r"
    the config has 5 problems:
      - `providers.openai.api_key_env`: environment variable `NOT_SET_ANYWHERE` is not set
      - `routes.chat.tiers[0].provider`: `openia` is not a configured provider (known: openai)
      - `routes.chat.failover.share`: (1.5) must be between 0.0 and 1.0
      - `routes.chat.failover.tier`: `nope` is not a tier of this route
      - `server.client_keys_env`: rein refuses to listen on the non-loopback address 0.0.0.0:8787 without client keys: set `server.client_keys_env` to the environment variables holding them, or listen on 127.0.0.1
    ");
}

#[test]
fn a_provider_its_adapter_could_not_build_is_refused_at_validation() {
    let config = |provider: &str| {
        format!(
            "{provider}\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"p\"\nprovider = \"local\"\nmodel = \"m\"\n"
        )
    };
    insta::assert_snapshot!(problems(&config(r#"
[providers.local]
kind = "openai_compatible"
base_url = "http://exa mple:8000/v1"
"#)), @r"
    the config has 1 problem:
      - `providers.local.base_url`: (http://exa mple:8000/v1) is not a valid URL: invalid international domain name
    ");
    insta::assert_snapshot!(problems(&config(r#"
[providers.local]
kind = "openai_compatible"
base_url = "ftp://example.com/v1"
"#)), @r"
    the config has 1 problem:
      - `providers.local.base_url`: (ftp://example.com/v1) must start with http:// or https://
    ");
    insta::assert_snapshot!(problems(&config(r#"
[providers.local]
kind = "openai_compatible"
base_url = "http://127.0.0.1:8000/v1"
headers = { "bad header" = "v" }
"#)), @r"
    the config has 1 problem:
      - `providers.local.headers.bad header`: header `bad header` is not a valid HTTP header: invalid HTTP header name
    ");
}

#[test]
fn a_routes_timeout_moves_parse_and_a_wrong_one_is_named() {
    let config = |moves: &str| {
        format!(
            "[providers.sim]\nkind = \"sim\"\n[routes.chat.on_timeout]\n{moves}\n[[routes.chat.tiers]]\nname = \"p\"\nprovider = \"sim\"\nmodel = \"m\"\n"
        )
    };
    let parsed = Config::from_toml(&config("stream_idle = \"next_tier\""), &env).unwrap();
    let moves = parsed.routes["chat"].on_timeout;
    assert_eq!(moves.stream_idle, rein_core::TimeoutMove::NextTier);
    assert_eq!(moves.first_token, rein_core::TimeoutMove::Retry, "the default retries");
    let message = problems(&config("stall = \"next_tier\""));
    assert!(message.contains("routes.chat.on_timeout") && message.contains("stall"), "{message}");
    let message = problems(&config("first_token = \"later\""));
    assert!(message.contains("routes.chat.on_timeout.first_token"), "{message}");
}

#[test]
fn malformed_toml_is_reported_with_its_position() {
    let message = problems("[routes.chat\nx = 1");
    assert!(message.contains("(file)"), "{message}");
}

#[test]
fn a_judge_must_name_another_route() {
    let text = r#"
[providers.sim]
kind = "sim"

[routes.chat]
output = { judge = { route = "nope" } }
[[routes.chat.tiers]]
name = "primary"
provider = "sim"
model = "m"

[routes.self]
output = { judge = { route = "self", fail = true } }
[[routes.self.tiers]]
name = "primary"
provider = "sim"
model = "m"
"#;
    let message = problems(text);
    assert!(
        message.contains("`routes.chat.output.judge.route`: `nope` is not a route of this config"),
        "{message}"
    );
    assert!(
        message.contains("`routes.self.output.judge.route`: a route cannot judge itself"),
        "{message}"
    );
}

#[test]
fn a_zero_kill_sync_interval_is_named() {
    let text = "[server]\nkill_sync_ms = 0\n[providers.p]\nkind = \"sim\"\nformat = \"openai\"\n\
                [routes.r]\n[[routes.r.tiers]]\nname = \"t\"\nprovider = \"p\"\nmodel = \"m\"\n";
    let message = problems(text);
    assert!(message.contains("`server.kill_sync_ms`: must be at least 1"), "{message}");
}

#[test]
fn bedrock_names_each_missing_credential_and_its_variable() {
    let text = r#"
[providers.bedrock]
kind = "bedrock"
access_key_id_env = "REIN_TEST_AWS_KEY_ID"

[routes.chat]
[[routes.chat.tiers]]
name = "primary"
provider = "bedrock"
model = "anthropic.claude-3-haiku-20240307-v1:0"
"#;
    // An environment with no AWS variable at all.
    let found = Config::from_toml(text, &|_: &str| None).expect_err("refused").to_string();
    assert!(
        found.contains("`providers.bedrock.region`: is required for kind `bedrock`"),
        "{found}"
    );
    assert!(
        found.contains("`providers.bedrock.access_key_id_env`: environment variable `REIN_TEST_AWS_KEY_ID` is not set"),
        "{found}"
    );
    assert!(
        found.contains("`providers.bedrock.secret_access_key_env`: environment variable `AWS_SECRET_ACCESS_KEY` is not set"),
        "{found}"
    );
    assert!(!found.contains("session_token"), "the session token is optional: {found}");
    // Set, they build, and no secret is shown anywhere.
    let env = |name: &str| match name {
        "REIN_TEST_AWS_KEY_ID" => Some("AKIDEXAMPLE".to_owned()),
        "AWS_SECRET_ACCESS_KEY" => Some("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned()),
        "AWS_REGION" => Some("eu-west-1".to_owned()),
        _ => None,
    };
    let config = Config::from_toml(text, &env).expect("valid");
    assert_eq!(config.providers["bedrock"].kind, ProviderKind::Bedrock);
    let shown = format!("{:?}", config.providers["bedrock"]);
    assert!(!shown.contains("wJalrXUtnFEMI"), "{shown}");
    assert!(!shown.contains("AKIDEXAMPLE"), "{shown}");
    // Without the variables, the profile of the shared credentials file.
    let file = std::env::temp_dir().join(format!("rein-aws-credentials-{}", std::process::id()));
    std::fs::write(
        &file,
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = default-secret\n[ci]\naws_access_key_id = AKIDFROMFILE\naws_secret_access_key = file-secret\n",
    )
    .unwrap();
    let path = file.to_string_lossy().into_owned();
    let from_file = move |name: &str| match name {
        "AWS_SHARED_CREDENTIALS_FILE" => Some(path.clone()),
        "AWS_PROFILE" => Some("ci".to_owned()),
        "AWS_REGION" => Some("eu-west-1".to_owned()),
        _ => None,
    };
    let config = Config::from_toml(text, &from_file).expect("credentials from the profile");
    let adapter = serde_json::to_value(&config.providers["bedrock"].adapter).unwrap();
    assert_eq!(adapter["region"], "eu-west-1");
    let _ = std::fs::remove_file(&file);
    // A key that only applies to Bedrock is refused elsewhere.
    let openai = "[providers.o]\nkind = \"openai\"\napi_key_env = \"OPENAI_API_KEY\"\nregion = \"us-east-1\"\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"p\"\nprovider = \"o\"\nmodel = \"m\"\n";
    assert!(
        problems(openai)
            .contains("`providers.o.region`: only applies to kinds `bedrock` and `vertex`")
    );
}

#[test]
fn bedrock_api_chooses_converse_or_invoke_and_nothing_else() {
    let config = |provider: &str| {
        format!(
            "{provider}\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"p\"\nprovider = \"b\"\nmodel = \"anthropic.claude-3-haiku-20240307-v1:0\"\n"
        )
    };
    let env = |name: &str| match name {
        "AWS_ACCESS_KEY_ID" => Some("AKIDEXAMPLE".to_owned()),
        "AWS_SECRET_ACCESS_KEY" => Some("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned()),
        "AWS_REGION" => Some("us-east-1".to_owned()),
        _ => None,
    };
    let api_of = |provider: &str| {
        let config = Config::from_toml(&config(provider), &env).expect("valid");
        serde_json::to_value(&config.providers["b"].adapter).unwrap()["api"].clone()
    };
    assert_eq!(api_of("[providers.b]\nkind = \"bedrock\""), "converse");
    assert_eq!(api_of("[providers.b]\nkind = \"bedrock\"\napi = \"converse\""), "converse");
    assert_eq!(api_of("[providers.b]\nkind = \"bedrock\"\napi = \"invoke\""), "invoke");
    assert_eq!(
        api_of("[providers.b]\nkind = \"sim\"\nformat = \"bedrock\"\napi = \"invoke\""),
        "invoke"
    );
    let found = problems(&config("[providers.b]\nkind = \"bedrock\"\napi = \"invoke_model\""));
    assert!(
        found.contains("`providers.b.api`: `invoke_model` is not a Bedrock API here: use `converse` or `invoke`"),
        "{found}"
    );
    let found = problems(&config(
        "[providers.b]\nkind = \"sim\"\nformat = \"anthropic\"\napi = \"invoke\"",
    ));
    assert!(
        found.contains(
            "`providers.b.api`: only applies to kind `bedrock` (or `sim` with format `bedrock`)"
        ),
        "{found}"
    );
}

#[test]
fn a_gemini_provider_needs_its_key_env_and_builds_with_the_google_default() {
    let config = |provider: &str| {
        format!(
            "{provider}\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"p\"\nprovider = \"gemini\"\nmodel = \"gemini-2.5-flash\"\n"
        )
    };
    insta::assert_snapshot!(problems(&config("[providers.gemini]\nkind = \"gemini\"\n")), @r"
    the config has 1 problem:
      - `providers.gemini.api_key_env`: is required for this kind: name the environment variable that holds the API key
    ");
    insta::assert_snapshot!(problems(&config("[providers.gemini]\nkind = \"gemini\"\napi_key_env = \"GEMINI_API_KEY\"\n")), @r"
    the config has 1 problem:
      - `providers.gemini.api_key_env`: environment variable `GEMINI_API_KEY` is not set
    ");
    let with_key = |name: &str| (name == "GEMINI_API_KEY").then(|| "AIza-test-key".to_owned());
    let text = config("[providers.gemini]\nkind = \"gemini\"\napi_key_env = \"GEMINI_API_KEY\"\n");
    let parsed = Config::from_toml(&text, &with_key).unwrap();
    let provider = &parsed.providers["gemini"];
    assert_eq!(provider.kind, ProviderKind::Gemini);
    assert_eq!(provider.genai_name(), "gcp.gemini");
    let rein_providers::ProviderConfig::Gemini(adapter) = &provider.adapter else {
        panic!("a Gemini adapter: {:?}", provider.adapter);
    };
    assert_eq!(adapter.base_url, None, "the adapter's default, Google's host");
    assert!(!format!("{parsed:?}").contains("AIza-test-key"), "the key is never printed");
}

#[test]
fn api_chooses_the_responses_api_of_the_openai_kinds_only() {
    let config = |provider: &str| {
        format!(
            "{provider}\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"p\"\nprovider = \"p\"\nmodel = \"m\"\n"
        )
    };
    let adapter_api = |provider: &str| {
        let parsed = Config::from_toml(&config(provider), &env).unwrap();
        let rein_providers::ProviderConfig::OpenAi(adapter) = &parsed.providers["p"].adapter else {
            panic!("an OpenAI adapter: {:?}", parsed.providers["p"].adapter);
        };
        (adapter.api, adapter.azure.clone())
    };
    let openai = "[providers.p]\nkind = \"openai\"\napi_key_env = \"OPENAI_API_KEY\"\n";
    assert_eq!(adapter_api(openai).0, rein_providers::OpenAiApi::ChatCompletions);
    let responses = format!("{openai}api = \"responses\"\n");
    assert_eq!(adapter_api(&responses).0, rein_providers::OpenAiApi::Responses);
    let chat = format!("{openai}api = \"chat_completions\"\n");
    assert_eq!(adapter_api(&chat).0, rein_providers::OpenAiApi::ChatCompletions);
    let sim = "[providers.p]\nkind = \"sim\"\napi = \"responses\"\n";
    assert_eq!(adapter_api(sim).0, rein_providers::OpenAiApi::Responses);
    // Azure's v1 endpoint needs no api_version.
    let azure = "[providers.p]\nkind = \"azure_openai\"\napi_key_env = \"OPENAI_API_KEY\"\nbase_url = \"https://r.openai.azure.com\"\ndeployment = \"d\"\napi = \"responses\"\n";
    let (api, azure) = adapter_api(azure);
    assert_eq!(api, rein_providers::OpenAiApi::Responses);
    assert_eq!(azure.unwrap().api_version, "");

    insta::assert_snapshot!(problems(&config(&format!("{openai}api = \"assistants\"\n"))), @r"
    the config has 1 problem:
      - `providers.p.api`: `assistants` is not an API of this kind: use `chat_completions` (the default) or `responses`
    ");
    let refused = |provider: &str, expected: &str| {
        let message = problems(&config(provider));
        assert!(message.contains(expected), "{provider}: {message}");
    };
    refused(
        "[providers.p]\nkind = \"sim\"\nformat = \"anthropic\"\napi = \"responses\"\n",
        "`providers.p.api`: only applies to kinds `openai`, `openai_compatible`, `azure_openai`, and `sim` with format `openai`",
    );
    refused(
        "[providers.p]\nkind = \"anthropic\"\napi_key_env = \"ANTHROPIC_API_KEY\"\napi = \"chat_completions\"\n",
        "`providers.p.api`: only applies to kinds",
    );
    refused(
        "[providers.p]\nkind = \"replay\"\ncassette = \"missing.jsonl\"\napi = \"responses\"\n",
        "`providers.p.api`: `responses` is served by kind `sim` only; replay has no Responses API cassettes",
    );
    // Chat Completions on Azure still needs its version.
    refused(
        "[providers.p]\nkind = \"azure_openai\"\napi_key_env = \"OPENAI_API_KEY\"\nbase_url = \"https://r.openai.azure.com\"\ndeployment = \"d\"\n",
        "`providers.p.api_version`: is required for kind `azure_openai`",
    );
}

#[test]
fn a_vertex_provider_names_what_it_is_missing() {
    let config = |provider: &str| {
        format!(
            "{provider}\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"p\"\nprovider = \"v\"\nmodel = \"claude-sonnet-4@20250514\"\n"
        )
    };
    let message = problems(&config("[providers.v]\nkind = \"vertex\"\n"));
    assert!(message.contains("the config has 3 problems"), "{message}");
    assert!(message.contains("`providers.v.publisher`: is required for kind `vertex`: `anthropic` (Claude) or `google` (Gemini)"), "{message}");
    assert!(
        message.contains(
            "`providers.v.project`: is required for kind `vertex` (or set `GOOGLE_CLOUD_PROJECT`"
        ),
        "{message}"
    );
    assert!(
        message.contains(
            "`providers.v.region`: is required for kind `vertex` (or set `GOOGLE_CLOUD_LOCATION`)"
        ),
        "{message}"
    );

    let message = problems(&config(
        "[providers.v]\nkind = \"vertex\"\npublisher = \"meta\"\nproject = \"p\"\nregion = \"us-east5\"\ncredentials_file = \"/nonexistent/rein-key.json\"\napi_key_env = \"OPENAI_API_KEY\"\nheaders = { x-goog-user-project = \"p\" }\n",
    ));
    assert!(
        message.contains("`providers.v.headers`: does not apply to kind `vertex`"),
        "{message}"
    );
    assert!(
        message.contains("`providers.v.publisher`: `meta` is not a Vertex publisher here"),
        "{message}"
    );
    assert!(
        message.contains(
            "`providers.v.credentials_file`: `/nonexistent/rein-key.json` cannot be read"
        ),
        "{message}"
    );
    assert!(
        message.contains("`providers.v.api_key_env`: does not apply to kind `vertex`"),
        "{message}"
    );

    let message = problems(&config(
        "[providers.v]\nkind = \"openai\"\napi_key_env = \"OPENAI_API_KEY\"\nproject = \"p\"\npublisher = \"google\"\n",
    ));
    assert!(message.contains("`providers.v.project`: only applies to kind `vertex`"), "{message}");
    assert!(
        message.contains("`providers.v.publisher`: only applies to kind `vertex`"),
        "{message}"
    );
}

#[test]
fn a_vertex_provider_reads_its_key_file_and_the_google_variables() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("key.json");
    let key = rein_sim::vertex::test_service_account("https://oauth2.googleapis.com/token");
    std::fs::write(&key_path, &key).unwrap();
    let path = key_path.to_str().unwrap().to_owned();
    let text = "[providers.v]\nkind = \"vertex\"\npublisher = \"anthropic\"\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"p\"\nprovider = \"v\"\nmodel = \"claude-sonnet-4@20250514\"\n";
    let google_env = |name: &str| match name {
        "GOOGLE_APPLICATION_CREDENTIALS" => Some(path.clone()),
        "GOOGLE_CLOUD_LOCATION" => Some("global".to_owned()),
        _ => None,
    };
    let parsed = Config::from_toml(text, &google_env).unwrap();
    let provider = &parsed.providers["v"];
    assert_eq!(provider.kind, ProviderKind::Vertex);
    assert_eq!(provider.genai_name(), "gcp.vertex_ai");
    let rein_providers::ProviderConfig::Vertex(adapter) = &provider.adapter else {
        panic!("a Vertex adapter: {:?}", provider.adapter);
    };
    // The project from the key file's `project_id`, the region from the variable.
    assert_eq!((adapter.project.as_str(), adapter.region.as_str()), ("rein-sim-test", "global"));
    assert_eq!(
        adapter.credentials.describe(),
        format!(
            "service-account key `{path}` ({}, token endpoint https://oauth2.googleapis.com/token)",
            rein_sim::vertex::TEST_CLIENT_EMAIL
        )
    );
    let shown = format!("{parsed:?} {}", serde_json::to_string(&parsed).unwrap());
    assert!(!shown.contains("BEGIN PRIVATE KEY"), "the private key is never printed");

    // Without a key file: the metadata server, `GCE_METADATA_HOST` overriding its host.
    let metadata_env = |name: &str| match name {
        "GOOGLE_CLOUD_PROJECT" => Some("my-project".to_owned()),
        "CLOUD_ML_REGION" => Some("us-east5".to_owned()),
        "GCE_METADATA_HOST" => Some("169.254.169.254".to_owned()),
        _ => None,
    };
    let parsed = Config::from_toml(text, &metadata_env).unwrap();
    let rein_providers::ProviderConfig::Vertex(adapter) = &parsed.providers["v"].adapter else {
        panic!("a Vertex adapter");
    };
    assert_eq!((adapter.project.as_str(), adapter.region.as_str()), ("my-project", "us-east5"));
    assert_eq!(adapter.credentials.describe(), "the metadata server at 169.254.169.254");
}
