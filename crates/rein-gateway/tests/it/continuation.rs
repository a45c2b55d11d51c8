//! Passthrough continuation through the gateway and `rein sim`: a stream that breaks after text
//! reached the caller (a cut, a stall, a malformed chunk) is continued by a later tier that
//! takes an assistant prefill, and the caller reads one uninterrupted answer, never a garbled or
//! repeated prefix. A tier that refuses the prefill is skipped; with none left, or with
//! continuation off, the stream ends with the in-band error.

use serde_json::{Value, json};

use crate::gateway::{Running, start_with};
use crate::ladder::HEAD;

/// The answer every tier gives: 60 words of five characters, one simulator token each.
fn answer() -> String {
    (1..=60).map(|i| format!("wd{i:02} ")).collect()
}

fn model(fault: &str) -> String {
    let say = rein_sim::say_spec(&answer());
    if fault.is_empty() { format!("sim:{say}") } else { format!("sim:{say}+{fault}") }
}

/// A passthrough route: the primary breaks after 40 words as `fault` says; `later` are the
/// tiers after it as (name, provider, model).
fn config(continuation: bool, fault: &str, later: &[(&str, &str, String)]) -> String {
    let mut text = format!(
        r#"{HEAD}
[routes.live]
release = "passthrough"
continuation = {continuation}
deadline_ms = 10000
first_token_ms = 2000
stream_idle_ms = 300
attempt_ms = 5000
min_attempt_ms = 1000

[[routes.live.tiers]]
name = "primary"
provider = "sim-openai"
model = "{}"
"#,
        model(fault)
    );
    for (name, provider, model) in later {
        text.push_str(&format!(
            "\n[[routes.live.tiers]]\nname = \"{name}\"\nprovider = \"{provider}\"\nmodel = \"{model}\"\n"
        ));
    }
    text
}

/// What the caller read: the content text, the data chunks, and the raw body.
struct Read {
    text: String,
    chunks: Vec<Value>,
    body: String,
}

async fn stream_from(gw: &Running) -> Read {
    let response = gw
        .post(
            "/v1/chat/completions",
            Some("client-secret-1"),
            json!({"model": "live", "stream": true,
                   "messages": [{"role": "user", "content": "where is my order?"}]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let chunks: Vec<Value> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let text = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    Read { text, chunks, body }
}

fn continuing_tier(read: &Read) -> Option<String> {
    read.chunks.iter().rev().find_map(|chunk| chunk["rein"]["tier"].as_str().map(String::from))
}

fn fallback() -> (&'static str, &'static str, String) {
    ("fallback", "sim-anthropic", model(""))
}

#[tokio::test]
async fn a_cut_stream_reaches_the_caller_whole_through_the_continuing_tier() {
    for fault in ["cut:after=40", "stall:after=40", "malformed:after=40"] {
        let gw = start_with(&config(true, fault, &[fallback()]), None).await;
        let read = stream_from(&gw).await;
        assert_eq!(read.text, answer(), "{fault}: 60 words, once each, in order");
        assert_eq!(continuing_tier(&read).as_deref(), Some("fallback"), "{fault}");
        assert!(read.body.trim_end().ends_with("data: [DONE]"), "{fault}: {}", read.body);
        assert!(!read.body.contains("\"error\""), "{fault}: {}", read.body);
        gw.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_tier_that_refuses_the_prefill_is_skipped_for_the_continuation() {
    // The first later tier refuses a prefill, the next one continues.
    let refusing = ("picky", "sim-anthropic", "sim:reject_prefill".to_string());
    let gw = start_with(&config(true, "cut:after=40", &[refusing, fallback()]), None).await;
    let read = stream_from(&gw).await;
    assert_eq!(read.text, answer());
    assert_eq!(continuing_tier(&read).as_deref(), Some("fallback"));
    gw.stop().await.unwrap();

    // With only the refusing tier, the stream ends cleanly in-band after the 40 words.
    let refusing = ("picky", "sim-anthropic", "sim:reject_prefill".to_string());
    let gw = start_with(&config(true, "cut:after=40", &[refusing]), None).await;
    let read = stream_from(&gw).await;
    let first_40: String = answer().split_inclusive(' ').take(40).collect();
    assert_eq!(read.text, first_40);
    assert!(read.body.contains("\"error\""), "an in-band error: {}", read.body);
    assert!(!read.body.contains("data: [DONE]"), "never ends as if complete: {}", read.body);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_openai_format_tier_does_not_continue_unless_it_takes_a_prefill() {
    // OpenAI's API answers a trailing assistant message afresh: such a tier is not asked.
    let openai = ("fallback", "sim-openai", model(""));
    let gw = start_with(&config(true, "cut:after=40", &[openai]), None).await;
    let read = stream_from(&gw).await;
    assert!(read.body.contains("\"error\""), "{}", read.body);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn with_continuation_off_a_cut_stream_ends_with_the_in_band_error() {
    let gw = start_with(&config(false, "cut:after=40", &[fallback()]), None).await;
    let read = stream_from(&gw).await;
    let first_40: String = answer().split_inclusive(' ').take(40).collect();
    assert_eq!(read.text, first_40);
    assert!(read.body.contains("\"error\""), "{}", read.body);
    assert!(!read.body.contains("data: [DONE]"), "{}", read.body);
    gw.stop().await.unwrap();
}
