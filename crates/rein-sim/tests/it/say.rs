//! The `say:b64=<…>` fault: an answer whose text is exactly the given text, whole or streamed,
//! in both wire formats; in scripts (a retry and a re-ask walk them); cut by the request's own
//! `max_tokens` and by the `max_tokens` shape; as a refusal's words.

use rein_sim::say_spec;
use serde_json::{Value, json};

use crate::support::*;

/// A JSON answer with spaces, quotes, a newline and non-ASCII text: the bytes must survive.
const ANSWER: &str = "```json\n{\"reply\": \"Changes close 48 hours before delivery — café\", \"article_ids\": [\"140\"]}\n```";

fn model(spec: &str) -> Value {
    json!(format!("sim:{spec}"))
}

#[tokio::test]
async fn say_answers_exactly_the_text_in_both_formats_whole_and_streamed() {
    let sim = sim().await;
    let spec = say_spec(ANSWER);

    let mut body = openai_body("anything");
    body["model"] = model(&spec);
    // JSON asked, tools offered: the said text still wins.
    body["response_format"] = json!({"type": "json_object"});
    let whole: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(whole["choices"][0]["message"]["content"], ANSWER);
    assert_eq!(whole["choices"][0]["finish_reason"], "stop");
    assert_eq!(whole["usage"]["completion_tokens"], ANSWER.chars().count().div_ceil(5));
    body["stream"] = json!(true);
    let (text, clean) = read_all(sim.openai(&body, None).await).await;
    assert!(clean && text.ends_with("data: [DONE]\n\n"));
    assert_eq!(openai_stream_text(&sse_frames(&text)), ANSWER);

    let mut body = anthropic_body("anything");
    body["model"] = model(&spec);
    let whole: Value = sim.anthropic(&body, None).await.json().await.unwrap();
    assert_eq!(whole["content"][0]["text"], ANSWER);
    assert_eq!(whole["stop_reason"], "end_turn");
    body["stream"] = json!(true);
    let (text, clean) = read_all(sim.anthropic(&body, None).await).await;
    assert!(clean);
    assert_eq!(anthropic_stream_text(&sse_frames(&text)), ANSWER);

    let log = sim.handle.log();
    assert!(log.iter().all(|entry| entry.fault == spec && entry.status == Some(200)));
}

#[tokio::test]
async fn a_script_of_answers_walks_across_retries_and_a_re_ask() {
    let sim = sim().await;
    let script = format!("{},{},{}", say_spec("first"), say_spec("second"), say_spec("third"));
    let content = |value: Value| value["choices"][0]["message"]["content"].clone();

    let mut body = openai_body("a question");
    body["model"] = model(&script);
    // The same request again (a retry) takes the next step.
    assert_eq!(content(sim.openai(&body, None).await.json().await.unwrap()), "first");
    assert_eq!(content(sim.openai(&body, None).await.json().await.unwrap()), "second");

    // A re-ask extends the conversation with the failed answer and the problems: it continues
    // the script of the request it extends rather than starting its own.
    body["messages"] = json!([
        {"role": "user", "content": "a question"},
        {"role": "assistant", "content": "second"},
        {"role": "user", "content": "Your previous answer had this problem: it was wrong."}
    ]);
    assert_eq!(content(sim.openai(&body, None).await.json().await.unwrap()), "third");
    let steps: Vec<Option<u32>> = sim.handle.log().iter().map(|e| e.script_step).collect();
    assert_eq!(steps, [Some(1), Some(2), Some(3)]);

    // A conversation the simulator has not seen under this script starts its own sequence.
    body["messages"][0]["content"] = json!("another question");
    assert_eq!(content(sim.openai(&body, None).await.json().await.unwrap()), "first");

    // Anthropic bodies walk the same way.
    let mut body = anthropic_body("a question");
    body["model"] = model(&script);
    let text = |value: Value| value["content"][0]["text"].clone();
    assert_eq!(text(sim.anthropic(&body, None).await.json().await.unwrap()), "first");
    body["messages"] = json!([
        {"role": "user", "content": "a question"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "Answer again."}
    ]);
    assert_eq!(text(sim.anthropic(&body, None).await.json().await.unwrap()), "second");
}

#[tokio::test]
async fn said_text_is_cut_by_max_tokens_and_can_be_a_refusal() {
    let sim = sim().await;
    // 30 characters: 6 tokens of 5.
    let said = "0123456789abcdefghijABCDEFGHIJ";

    let mut body = openai_body("cut me");
    body["model"] = model(&say_spec(said));
    body["max_tokens"] = json!(4);
    let cut: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(cut["choices"][0]["message"]["content"], &said[..20]);
    assert_eq!(cut["choices"][0]["finish_reason"], "length");
    body["max_tokens"] = json!(8);
    let whole: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(whole["choices"][0]["message"]["content"], said);

    body["model"] = model(&format!("{}+max_tokens", say_spec(said)));
    let half: Value = sim.openai(&body, None).await.json().await.unwrap();
    assert_eq!(half["choices"][0]["message"]["content"], &said[..15]);
    assert_eq!(half["choices"][0]["finish_reason"], "length");

    let refusal = "I can't share other customers' orders.";
    let mut body = anthropic_body("whose order is this?");
    body["model"] = model(&format!("{}+refusal", say_spec(refusal)));
    let refused: Value = sim.anthropic(&body, None).await.json().await.unwrap();
    assert_eq!(refused["stop_reason"], "refusal");
    assert_eq!(refused["content"][0]["text"], refusal);

    let mut body = openai_body("bad spec");
    body["model"] = json!("sim:say:b64=%%");
    let response = sim.openai(&body, None).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains("b64 is not base64url"));
}
