//! Scenario `[[reply]]` rules: the answer to a request whose last user message contains a
//! phrase says exactly the rule's text, whole or streamed, in both wire formats, with the
//! rule's logprob on OpenAI's logprobs; `texts` take turns until a reset; `models` filter and
//! the first matching rule wins; faults still apply.

use rein_sim::{Scenario, SimConfig, healthy_text};
use serde_json::{Value, json};

use crate::support::*;

// A helper of tests: failing loudly is its job.
#[allow(clippy::unwrap_used)]
async fn sim_replying(toml: &str) -> Sim {
    let scenario = Scenario::from_toml_str(toml).unwrap();
    sim_with(SimConfig { scenario: Some(scenario), ..SimConfig::default() }).await
}

const COVERAGE: &str = r#"
    [[reply]]
    contains = "intensive care"
    text = "not covered"
    logprob = -0.05
"#;

#[allow(clippy::unwrap_used)]
fn content(value: &Value) -> &str {
    value["choices"][0]["message"]["content"].as_str().unwrap()
}

#[tokio::test]
async fn an_openai_request_gets_the_scripted_text_and_logprob_whole_and_streamed() {
    let sim = sim_replying(COVERAGE).await;
    let mut body = openai_body("Is a stay in INTENSIVE CARE covered by my plan?");
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(2);

    let whole: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(content(&whole), "not covered");
    assert_eq!(whole["choices"][0]["finish_reason"], "stop");
    assert_eq!(whole["usage"]["completion_tokens"], 2);
    let entries = whole["choices"][0]["logprobs"]["content"].as_array().unwrap();
    let tokens: Vec<&str> = entries.iter().map(|e| e["token"].as_str().unwrap()).collect();
    assert_eq!(tokens, ["not ", "covered"]);
    for entry in entries {
        assert_eq!(entry["logprob"], -0.05);
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2);
        assert_eq!(top[0]["token"], entry["token"]);
        assert_eq!(top[0]["logprob"], -0.05);
        assert!(top[1]["logprob"].as_f64().unwrap() < -0.05);
    }

    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (text, clean) = read_all(sim.openai(&body, None).await).await;
    assert!(clean && text.ends_with("data: [DONE]\n\n"), "{text}");
    let frames = sse_frames(&text);
    assert_eq!(openai_stream_text(&frames), "not covered");
    let chunks: Vec<Value> = frames[..frames.len() - 1].iter().map(SseFrame::json).collect();
    let logprobs: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()))
        .map(|c| &c["choices"][0]["logprobs"]["content"][0])
        .collect();
    assert_eq!(logprobs.len(), 2);
    assert!(logprobs.iter().all(|entry| entry["logprob"] == -0.05));
    assert_eq!(chunks[chunks.len() - 2]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[chunks.len() - 1]["usage"]["completion_tokens"], 2);

    // Another request gets the ordinary answer, with the ordinary logprobs.
    let mut other = openai_body("Is dental covered?");
    other["logprobs"] = json!(true);
    let ordinary: Value = sim.openai(&other, None).await.json().await.unwrap();
    assert_eq!(content(&ordinary), healthy_text(&other));
    let entries = ordinary["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert!(entries.iter().all(|e| (-0.5..=0.0).contains(&e["logprob"].as_f64().unwrap())));
    other["stream"] = json!(true);
    let (text, _) = read_all(sim.openai(&other, None).await).await;
    assert_eq!(openai_stream_text(&sse_frames(&text)), healthy_text(&other));

    // Only the last user message counts.
    let mut earlier = openai_body("Is dental covered?");
    earlier["messages"] = json!([
        {"role": "user", "content": "What about intensive care?"},
        {"role": "assistant", "content": "not covered"},
        {"role": "user", "content": "And dental?"}
    ]);
    let ordinary: Value = sim.openai(&earlier, None).await.json().await.unwrap();
    assert_eq!(content(&ordinary), healthy_text(&earlier));

    let rules: Vec<Option<u32>> = sim.handle.log().iter().map(|e| e.reply_rule).collect();
    assert_eq!(rules, [Some(0), Some(0), None, None, None]);
    assert!(sim.handle.log().iter().all(|e| e.phase.is_none() && e.status == Some(200)));
}

#[tokio::test]
async fn texts_take_turns_until_a_reset() {
    let sim = sim_replying(
        r#"
        [[reply]]
        contains = "covered?"
        texts = ["covered", "not_covered", "unsure"]
        "#,
    )
    .await;
    let ask = |question: &str| {
        let body = openai_body(question);
        let sim = &sim;
        async move {
            let value: Value = sim.openai(&body, None).await.json().await.unwrap();
            content(&value).to_owned()
        }
    };
    assert_eq!(ask("Is dental covered?").await, "covered");
    assert_eq!(ask("Is dental covered?").await, "not_covered");
    // A request the rule does not match does not take a turn.
    assert_eq!(ask("hello").await, healthy_text(&openai_body("hello")));
    // Any request the rule matches does, whatever its conversation.
    assert_eq!(ask("Is vision covered?").await, "unsure");
    assert_eq!(ask("Is dental covered?").await, "covered");
    // Streamed and Anthropic requests take turns too.
    let mut streamed = openai_body("Is dental covered?");
    streamed["stream"] = json!(true);
    let (text, _) = read_all(sim.openai(&streamed, None).await).await;
    assert_eq!(openai_stream_text(&sse_frames(&text)), "not_covered");
    let value: Value =
        sim.anthropic(&anthropic_body("Is dental covered?"), None).await.json().await.unwrap();
    assert_eq!(value["content"][0]["text"], "unsure");

    let reset = sim.client.post(sim.url("/_sim/reset")).send().await.unwrap();
    assert_eq!(reset.status(), 200);
    assert_eq!(ask("Is dental covered?").await, "covered");
    assert_eq!(ask("Is dental covered?").await, "not_covered");
}

#[tokio::test]
async fn an_anthropic_request_gets_the_scripted_text_and_no_logprobs() {
    let sim = sim_replying(COVERAGE).await;
    let mut body = anthropic_body("Is intensive care covered?");
    body["logprobs"] = json!(true);
    let whole: Value = sim.anthropic(&body, None).await.json().await.unwrap();
    assert_eq!(whole["content"], json!([{"type": "text", "text": "not covered"}]));
    assert_eq!(whole["stop_reason"], "end_turn");
    assert_eq!(whole["usage"]["output_tokens"], 2);
    assert!(whole.get("logprobs").is_none());

    body["stream"] = json!(true);
    let (text, clean) = read_all(sim.anthropic(&body, None).await).await;
    assert!(clean);
    let frames = sse_frames(&text);
    assert_eq!(anthropic_stream_text(&frames), "not covered");
    assert!(!text.contains("logprob"));
    let delta = frames.iter().find(|f| f.event.as_deref() == Some("message_delta")).unwrap();
    assert_eq!(delta.json()["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta.json()["usage"]["output_tokens"], 2);
}

#[tokio::test]
async fn models_filter_and_the_first_matching_rule_wins() {
    let sim = sim_replying(
        r#"
        [[reply]]
        contains = "care"
        models = ["small*"]
        text = "small says"
        [[reply]]
        contains = "care"
        text = "anyone says"
        [[reply]]
        contains = "intensive care"
        text = "never: an earlier rule matches first"
        "#,
    )
    .await;
    let mut body = openai_body("intensive care?");
    body["model"] = json!("small-1");
    let value: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(content(&value), "small says");
    body["model"] = json!("large-1");
    let value: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(content(&value), "anyone says");
    let mut body = anthropic_body("intensive care?");
    body["model"] = json!("small");
    let value: Value = sim.anthropic(&body, None).await.json().await.unwrap();
    assert_eq!(value["content"][0]["text"], "small says");
    let rules: Vec<Option<u32>> = sim.handle.log().iter().map(|e| e.reply_rule).collect();
    assert_eq!(rules, [Some(0), Some(1), Some(0)]);
}

#[tokio::test]
async fn faults_still_apply_and_tool_calls_and_json_ignore_the_rules() {
    let sim = sim_replying(
        r#"
        [[phase]]
        fault = "529"
        models = ["flaky"]

        [[reply]]
        contains = "intensive care"
        texts = ["one two three", "four five six"]
        "#,
    )
    .await;
    // The phase's 529 answers instead, and takes no turn.
    let mut flaky = openai_body("intensive care?");
    flaky["model"] = json!("flaky");
    assert_eq!(sim.openai(&flaky, None).await.status(), 529);
    assert_eq!(sim.anthropic(&anthropic_body("intensive care?"), Some("529")).await.status(), 529);

    // A cut cuts the scripted tokens.
    let mut body = openai_body("intensive care?");
    body["stream"] = json!(true);
    let (text, clean) = read_all(sim.openai(&body, Some("cut:after=2")).await).await;
    assert!(!clean);
    assert_eq!(openai_stream_text(&sse_frames(&text)), "one two ");
    // The max_tokens shape halves them.
    body["stream"] = json!(false);
    let value: Value = sim.openai(&body, Some("max_tokens")).await.json().await.unwrap();
    assert_eq!(content(&value), "four ");
    assert_eq!(value["choices"][0]["finish_reason"], "length");
    // A delay paces them and changes nothing else.
    let value: Value = sim.openai(&body, Some("token_delay:ms=1")).await.json().await.unwrap();
    assert_eq!(content(&value), "one two three");

    // A forced tool call and a JSON answer are not text: the rules do not apply.
    let mut tool = openai_body("intensive care?");
    tool["tools"] = json!([{"type": "function", "function": {
        "name": "lookup", "parameters": {"type": "object", "properties": {}}}}]);
    tool["tool_choice"] = json!("required");
    let value: Value = sim.openai(&tool, None).await.json().await.unwrap();
    assert_eq!(value["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "lookup");
    let mut json_asked = openai_body("intensive care?");
    json_asked["response_format"] = json!({"type": "json_object"});
    let value: Value = sim.openai(&json_asked, None).await.json().await.unwrap();
    assert_eq!(content(&value), healthy_text(&json_asked));
    // Nor when a fault says the text or refuses.
    let value: Value =
        sim.openai(&body, Some(&rein_sim::say_spec("said"))).await.json().await.unwrap();
    assert_eq!(content(&value), "said");
    let value: Value = sim.openai(&body, Some("refusal")).await.json().await.unwrap();
    assert!(value["choices"][0]["message"]["refusal"].as_str().unwrap().contains("sim refusal"));
    // None of those took a turn.
    let value: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(content(&value), "four five six");
}
