//! The Gemini path: `generateContent` and `streamGenerateContent?alt=sse` with the model and
//! the method in the path (and a `sim:` fault spec in the model), healthy answers that match
//! the other endpoints', the stream ending at its `finishReason` chunk with no terminator, and
//! Google's error bodies, a wait asked for as `RetryInfo`.

use rein_sim::healthy_text;
use serde_json::{Value, json};

use crate::support::*;

fn gemini_body(text: &str) -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": text}]}]})
}

// A test helper: failing loudly is its job.
#[allow(clippy::unwrap_used)]
async fn post(sim: &Sim, path: &str, body: &Value, fault: Option<&str>) -> reqwest::Response {
    let mut request =
        sim.client.post(sim.url(path)).header("x-goog-api-key", "AIza-sim-test").json(body);
    if let Some(fault) = fault {
        request = request.header("x-sim-fault", fault);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn healthy_generate_content_answers_like_the_other_endpoints() {
    let sim = sim().await;
    let response = post(
        &sim,
        "/v1beta/models/gemini-sim:generateContent",
        &gemini_body("Capital of Norway?"),
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    let value: Value = response.json().await.unwrap();
    let candidate = &value["candidates"][0];
    let text = candidate["content"]["parts"][0]["text"].as_str().unwrap();
    assert_eq!(text, healthy_text(&openai_body("Capital of Norway?")));
    assert_eq!(candidate["content"]["role"], "model");
    assert_eq!(candidate["finishReason"], "STOP");
    assert_eq!(value["modelVersion"], "gemini-sim");
    assert!(value["usageMetadata"]["promptTokenCount"].as_u64().unwrap() > 0);
    let log = sim.handle.log();
    let entry = log.last().unwrap();
    assert_eq!(entry.model.as_deref(), Some("gemini-sim"));
    assert!(entry.auth_present, "the x-goog-api-key header counts as credentials");
}

#[tokio::test]
async fn stream_ends_at_the_finish_reason_chunk() {
    let sim = sim().await;
    let response = post(
        &sim,
        "/v1beta/models/gemini-sim:streamGenerateContent?alt=sse",
        &gemini_body("stream please"),
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    let (text, clean) = read_all(response).await;
    assert!(clean);
    let frames: Vec<Value> = sse_frames(&text).iter().map(SseFrame::json).collect();
    let (last, tokens) = frames.split_last().unwrap();
    assert!(!tokens.is_empty());
    assert!(tokens.iter().all(|f| f["candidates"][0].get("finishReason").is_none()));
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert!(last["usageMetadata"]["candidatesTokenCount"].as_u64().unwrap() > 0);
    let streamed: String = tokens
        .iter()
        .map(|f| f["candidates"][0]["content"]["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, healthy_text(&openai_body("stream please")));
}

#[tokio::test]
async fn faults_in_the_model_and_google_error_bodies() {
    let sim = sim().await;
    let response = post(
        &sim,
        "/v1beta/models/sim:429:retry_after=2:generateContent",
        &gemini_body("hi"),
        None,
    )
    .await;
    assert_eq!(response.status(), 429);
    assert!(response.headers().get("retry-after").is_none(), "Google's wait is in the body");
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["error"]["code"], 429);
    assert_eq!(value["error"]["status"], "RESOURCE_EXHAUSTED");
    let details = value["error"]["details"].as_array().unwrap();
    assert!(details.iter().any(
        |d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo" && d["retryDelay"] == "2s"
    ));

    for (fault, status, rpc) in
        [("503", 503, "UNAVAILABLE"), ("500", 500, "INTERNAL"), ("401", 400, "INVALID_ARGUMENT")]
    {
        let response = post(
            &sim,
            "/v1beta/models/gemini-sim:generateContent",
            &gemini_body("hi"),
            Some(fault),
        )
        .await;
        assert_eq!(response.status(), status, "{fault}");
        let value: Value = response.json().await.unwrap();
        assert_eq!(value["error"]["status"], rpc, "{fault}");
    }
}

#[tokio::test]
async fn a_cut_stream_never_sends_its_finish_reason() {
    let sim = sim().await;
    let response = post(
        &sim,
        "/v1beta/models/gemini-sim:streamGenerateContent?alt=sse",
        &gemini_body("a longer answer please"),
        Some("cut:after=2"),
    )
    .await;
    let (text, clean) = read_all(response).await;
    assert!(!clean, "the connection is cut");
    assert!(!text.contains("finishReason"), "{text}");
}
