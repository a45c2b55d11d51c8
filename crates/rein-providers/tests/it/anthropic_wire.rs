//! The Anthropic adapter's URL and its `json_object` prefill, against a server that checks
//! what it gets: `base_url` works with or without `/v1` (and under a proxy's own prefix), and
//! a `json_object` request carries a last assistant turn `{` whose answer, streamed or whole,
//! comes back starting with that `{`.

use rein_core::{ChatRequest, Message, Provider, ResponseFormat, ToolChoice, ToolSpec};
use rein_providers::AnthropicProvider;
use serde_json::{Value, json};

use crate::server::{Reply, response, serve, sse_response};
use crate::{anthropic_config, assemble, client, collect};

const MESSAGE: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[{"type":"text","text":"Hello."}],"stop_reason":"end_turn","usage":{"input_tokens":9,"output_tokens":2}}"#;

fn request(model: &str) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        messages: vec![Message::user("Give me the order as JSON.")],
        response_format: Some(ResponseFormat::JsonObject),
        ..ChatRequest::default()
    }
}

/// The server answers 200 only on `POST /v1/messages` (under `prefix`), 404 elsewhere.
async fn path_checked(base: impl Fn(&str) -> String, prefix: &str) {
    let server = serve(Reply::Pieces(vec![response(
        200,
        &[("content-type", "application/json")],
        MESSAGE.as_bytes(),
    )]))
    .await;
    let root = server.base_url.trim_end_matches("/v1").to_owned();
    let mut config = anthropic_config(&base(&root));
    config.streaming = false;
    let provider = AnthropicProvider::new(config, client()).unwrap();
    let events = collect(provider.send(&ChatRequest::default()).await.unwrap()).await;
    assert_eq!(assemble(&events).text, "Hello.");
    let captured = server.captured().await;
    assert_eq!(captured.request_line, format!("POST {prefix}/v1/messages HTTP/1.1"));
}

#[tokio::test]
async fn base_url_with_or_without_v1_posts_to_v1_messages() {
    path_checked(|root| format!("{root}/v1"), "").await;
    path_checked(|root| format!("{root}/v1/"), "").await;
    path_checked(|root| root.to_owned(), "").await;
    path_checked(|root| format!("{root}/"), "").await;
    path_checked(|root| format!("{root}/anthropic"), "/anthropic").await;
    path_checked(|root| format!("{root}/anthropic/v1"), "/anthropic").await;
}

#[test]
fn the_endpoint_is_the_same_for_both_spellings() {
    for base in [
        "https://api.anthropic.com",
        "https://api.anthropic.com/v1",
        "https://api.anthropic.com/v1/",
    ] {
        let provider = AnthropicProvider::new(anthropic_config(base), client()).unwrap();
        assert_eq!(provider.endpoint().as_str(), "https://api.anthropic.com/v1/messages", "{base}");
    }
}

#[tokio::test]
async fn json_object_is_prefilled_and_the_streamed_answer_starts_with_the_brace() {
    // What Claude streams after a `{` prefill: the rest of the object.
    let stream = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":21,"output_tokens":1}}}"#,
        "\n\nevent: content_block_start\n",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        "\n\nevent: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\"order\": "}}"#,
        "\n\nevent: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\"A-1\"}"}}"#,
        "\n\nevent: content_block_stop\n",
        r#"data: {"type":"content_block_stop","index":0}"#,
        "\n\nevent: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":8}}"#,
        "\n\nevent: message_stop\n",
        r#"data: {"type":"message_stop"}"#,
        "\n\n",
    );
    let server = serve(Reply::Pieces(sse_response(stream.as_bytes(), 4))).await;
    let provider = AnthropicProvider::new(anthropic_config(&server.base_url), client()).unwrap();
    let events = collect(provider.send(&request("claude-3-5-haiku-20241022")).await.unwrap()).await;
    let answer = assemble(&events);
    assert_eq!(answer.text, r#"{"order": "A-1"}"#);
    let parsed: Value = serde_json::from_str(&answer.text).unwrap();
    assert_eq!(parsed, json!({"order": "A-1"}));

    let body = server.captured().await.json();
    assert_eq!(
        body,
        json!({
            "model": "claude-3-5-haiku-20241022",
            "messages": [
                {"role": "user", "content": "Give me the order as JSON."},
                {"role": "assistant", "content": "{"},
            ],
            "max_tokens": 4096,
            "stream": true,
        })
    );
}

#[tokio::test]
async fn json_object_is_prefilled_and_the_whole_answer_starts_with_the_brace() {
    let answer = r#"{"id":"msg_2","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"\"ok\": true}"}],"stop_reason":"end_turn","usage":{"input_tokens":9,"output_tokens":4}}"#;
    let server = serve(Reply::Pieces(vec![response(
        200,
        &[("content-type", "application/json")],
        answer.as_bytes(),
    )]))
    .await;
    let mut config = anthropic_config(&server.base_url);
    config.streaming = false;
    let provider = AnthropicProvider::new(config, client()).unwrap();
    let events =
        collect(provider.send(&request("claude-sonnet-4-5-20250929")).await.unwrap()).await;
    assert_eq!(assemble(&events).text, r#"{"ok": true}"#);
    let body = server.captured().await.json();
    assert_eq!(body["messages"][1], json!({"role": "assistant", "content": "{"}));
}

#[test]
fn the_prefill_follows_the_model_and_the_setting() {
    let last_turn = |provider: &AnthropicProvider, request: &ChatRequest| {
        let body = provider.request_body(request).unwrap();
        body["messages"].as_array().unwrap().last().cloned().unwrap()
    };
    let prefill = json!({"role": "assistant", "content": "{"});
    let auto = AnthropicProvider::new(anthropic_config("http://127.0.0.1:9"), client()).unwrap();
    for model in [
        "claude-3-5-sonnet-20241022",
        "claude-3-haiku-20240307",
        "claude-sonnet-4-20250514",
        "claude-opus-4-1-20250805",
        "claude-sonnet-4-5",
        "anthropic.claude-3-5-sonnet-20240620-v1:0",
    ] {
        assert_eq!(last_turn(&auto, &request(model)), prefill, "{model}");
    }
    // Claude 4.6 and later refuse a prefill; unknown ids get none.
    for model in ["claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-7", "sim-model"] {
        assert_ne!(last_turn(&auto, &request(model)), prefill, "{model}");
    }
    // The setting wins over the model, both ways.
    let mut config = anthropic_config("http://127.0.0.1:9");
    config.json_prefill = Some(true);
    let on = AnthropicProvider::new(config, client()).unwrap();
    assert_eq!(last_turn(&on, &request("claude-opus-4-7")), prefill);
    let mut config = anthropic_config("http://127.0.0.1:9");
    config.json_prefill = Some(false);
    let off = AnthropicProvider::new(config, client()).unwrap();
    assert_ne!(last_turn(&off, &request("claude-3-5-sonnet-20241022")), prefill);

    // What rules a prefill out: other formats, the caller's own prefill, callable tools,
    // extended thinking.
    let model = "claude-3-5-sonnet-20241022";
    let text = ChatRequest { response_format: None, ..request(model) };
    assert_ne!(last_turn(&on, &text), prefill);
    let mut own = request(model);
    own.messages.push(Message::assistant("Here:"));
    assert_eq!(last_turn(&on, &own), json!({"role": "assistant", "content": "Here:"}));
    let mut tools = request(model);
    tools.tools.push(ToolSpec {
        name: "lookup".into(),
        description: None,
        parameters: json!({"type": "object"}),
    });
    assert_ne!(last_turn(&on, &tools), prefill);
    tools.tool_choice = Some(ToolChoice::None);
    assert_eq!(last_turn(&on, &tools), prefill);
    let mut thinking = request(model);
    thinking.extra.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": 1024}));
    assert_ne!(last_turn(&on, &thinking), prefill);
}
