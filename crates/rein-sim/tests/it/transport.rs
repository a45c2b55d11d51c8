//! Faults in transit: reset, hang, cut, stall, malformed, no_done, stream_error and the
//! delays, on both paths.

use std::time::Duration;

use rein_sim::healthy_text;
use serde_json::{Value, json};

use crate::support::*;

fn streaming(mut body: Value) -> Value {
    body["stream"] = json!(true);
    body
}

#[tokio::test]
async fn reset_drops_the_connection_before_any_header() {
    let sim = sim().await;
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let result = sim
            .client
            .post(sim.url(path))
            .header("x-sim-fault", "reset")
            .json(&anthropic_body("reset me"))
            .send()
            .await;
        let error = result.unwrap_err();
        assert!(!error.is_status() && !error.is_timeout(), "{error:?}");
    }
    let log = sim.handle.log();
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|e| e.status.is_none() && e.fault == "reset"));
    // The simulator keeps serving.
    assert_eq!(sim.openai(&openai_body("after"), None).await.status(), 200);
}

/// Over cleartext HTTP/2 (prior knowledge) the simulator answers, and a fault hits its own
/// request only: a `reset` resets that stream and a `cut` cuts that body, while requests on
/// the same connection are answered whole.
#[tokio::test]
async fn over_http2_faults_hit_their_own_stream_not_the_connection() {
    let sim = sim().await;
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let send = |fault: Option<&'static str>| {
        let mut request =
            h2.post(sim.url("/v1/chat/completions")).json(&streaming(openai_body("over h2")));
        if let Some(fault) = fault {
            request = request.header("x-sim-fault", fault);
        }
        request.send()
    };
    // One connection: the first request opens it, the rest share it at once.
    let first = send(None).await.unwrap();
    assert_eq!(first.version(), reqwest::Version::HTTP_2);
    let (text, clean) = read_all(first).await;
    assert!(clean && text.contains("[DONE]"), "{text}");
    let (reset, cut, whole_a, whole_b) =
        tokio::join!(send(Some("reset")), send(Some("cut:after=2")), send(None), send(None));
    let error = reset.unwrap_err();
    assert!(!error.is_status() && !error.is_timeout(), "{error:?}");
    let (text, clean) = read_all(cut.unwrap()).await;
    assert!(!clean && !text.contains("[DONE]"), "a cut body ends in an error: {text}");
    for whole in [whole_a, whole_b] {
        let (text, clean) = read_all(whole.unwrap()).await;
        assert!(clean && text.contains("[DONE]"), "{text}");
    }
    let faults: Vec<_> = sim.handle.log().iter().map(|e| e.fault.clone()).collect();
    assert_eq!(faults.iter().filter(|f| f.as_str() == "reset").count(), 1, "{faults:?}");
    assert_eq!(sim.handle.log().len(), 5);
}

#[tokio::test]
async fn hang_never_answers() {
    let sim = sim().await;
    let send = sim
        .client
        .post(sim.url("/v1/chat/completions"))
        .header("x-sim-fault", "hang")
        .json(&openai_body("x"))
        .send();
    assert!(tokio::time::timeout(Duration::from_millis(200), send).await.is_err());
    assert_eq!(sim.handle.log()[0].fault, "hang");
    assert_eq!(sim.handle.log()[0].status, None);
}

#[tokio::test]
async fn openai_cut_stops_after_n_tokens_without_finish() {
    let sim = sim().await;
    let body = streaming(openai_body("cut me"));
    let response = sim.openai(&body, Some("cut:after=3")).await;
    assert_eq!(response.status(), 200);
    let (text, clean) = read_all(response).await;
    assert!(!clean, "a cut body ends in an error");
    let frames = sse_frames(&text);
    // role chunk + 3 tokens, nothing else.
    assert_eq!(frames.len(), 4, "{text}");
    let whole = healthy_text(&body);
    let got = openai_stream_text(&frames);
    assert_eq!(got, whole.split_inclusive(' ').take(3).collect::<String>());
    assert!(!text.contains("finish_reason\":\"stop"));
    assert!(!text.contains("[DONE]"));

    // Past the end: every token, still no stop reason.
    let (text, clean) = read_all(sim.openai(&body, Some("cut:after=1000")).await).await;
    assert!(!clean);
    assert_eq!(openai_stream_text(&sse_frames(&text)), whole);
    assert!(!text.contains("\"finish_reason\":\"stop\""));
}

#[tokio::test]
async fn anthropic_cut_has_no_stop_events() {
    let sim = sim().await;
    let body = streaming(anthropic_body("cut me"));
    let (text, clean) = read_all(sim.anthropic(&body, Some("cut:after=2")).await).await;
    assert!(!clean);
    let events: Vec<String> = sse_frames(&text).into_iter().map(|f| f.event.unwrap()).collect();
    assert_eq!(
        events,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta"
        ]
    );
}

#[tokio::test]
async fn no_done_finishes_without_terminator_and_closes() {
    let sim = sim().await;
    let body = streaming(openai_body("no done"));
    let response = sim.openai(&body, Some("no_done")).await;
    assert_eq!(header(&response, "connection").as_deref(), Some("close"));
    let (text, clean) = read_all(response).await;
    assert!(clean);
    assert!(text.contains("\"finish_reason\":\"stop\""));
    assert!(!text.contains("[DONE]"));
    assert_eq!(openai_stream_text(&sse_frames(&text)), healthy_text(&body));

    let body = streaming(anthropic_body("no done"));
    let (text, clean) = read_all(sim.anthropic(&body, Some("no_done")).await).await;
    assert!(clean);
    let events: Vec<String> = sse_frames(&text).into_iter().map(|f| f.event.unwrap()).collect();
    assert_eq!(events.last().map(String::as_str), Some("message_delta"));
    assert!(!text.contains("message_stop"));
}

#[tokio::test]
async fn stall_goes_quiet_after_n_tokens() {
    let sim = sim().await;
    let body = streaming(openai_body("stall"));
    let response = sim.openai(&body, Some("stall:after=2")).await;
    let (text, ended) = read_until_quiet(response, Duration::from_millis(300)).await;
    assert!(!ended, "the connection stays open");
    let frames = sse_frames(&text);
    assert_eq!(frames.len(), 3);
    assert_eq!(
        openai_stream_text(&frames),
        healthy_text(&body).split_inclusive(' ').take(2).collect::<String>()
    );

    let body = streaming(anthropic_body("stall"));
    let response = sim.anthropic(&body, Some("stall:after=0")).await;
    let (text, ended) = read_until_quiet(response, Duration::from_millis(200)).await;
    assert!(!ended);
    assert_eq!(sse_frames(&text).len(), 3); // message_start, content_block_start, ping
}

#[tokio::test]
async fn malformed_line_then_the_rest() {
    let sim = sim().await;
    let body = streaming(openai_body("malformed"));
    let (text, clean) = read_all(sim.openai(&body, Some("malformed:after=2")).await).await;
    assert!(clean);
    let frames = sse_frames(&text);
    let bad: Vec<usize> = frames
        .iter()
        .enumerate()
        .filter(|(_, f)| f.data != "[DONE]" && serde_json::from_str::<Value>(&f.data).is_err())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(bad, [3], "role chunk, 2 tokens, then the bad line");
    assert_eq!(openai_stream_text(&frames), healthy_text(&body));
    assert!(text.ends_with("data: [DONE]\n\n"));

    let body = streaming(anthropic_body("malformed"));
    let (text, clean) = read_all(sim.anthropic(&body, Some("malformed:after=1")).await).await;
    assert!(clean);
    let frames = sse_frames(&text);
    let bad = frames.iter().filter(|f| serde_json::from_str::<Value>(&f.data).is_err()).count();
    assert_eq!(bad, 1);
    assert_eq!(anthropic_stream_text(&frames), healthy_text(&body));
}

#[tokio::test]
async fn stream_error_mid_stream() {
    let sim = sim().await;
    let body = streaming(openai_body("error mid-stream"));
    let (text, clean) = read_all(sim.openai(&body, Some("stream_error:after=2")).await).await;
    assert!(clean);
    let frames = sse_frames(&text);
    assert_eq!(frames.len(), 4);
    let error = frames[3].json();
    assert_eq!(error["error"]["type"], "server_error");
    assert!(!text.contains("[DONE]"));

    let body = streaming(anthropic_body("error mid-stream"));
    let (text, _) = read_all(sim.anthropic(&body, Some("stream_error:after=2")).await).await;
    let frames = sse_frames(&text);
    let last = frames.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    assert_eq!(
        last.json(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    assert_eq!(frames.len(), 6); // start, block start, ping, 2 deltas, error

    // Without a stream: the equivalent error status.
    let status = sim.openai(&openai_body("x"), Some("stream_error:after=1")).await.status();
    assert_eq!(status, 500);
    let status = sim.anthropic(&anthropic_body("x"), Some("stream_error:after=1")).await.status();
    assert_eq!(status, 529);
}

#[tokio::test]
async fn non_streaming_cut_and_malformed() {
    let sim = sim().await;
    let response = sim.openai(&openai_body("x"), Some("cut:after=1")).await;
    assert_eq!(response.status(), 200);
    assert!(response.bytes().await.is_err());
    let response = sim.openai(&openai_body("x"), Some("malformed:after=1")).await;
    let bytes = response.bytes().await.unwrap();
    assert!(serde_json::from_slice::<Value>(&bytes).is_err());
}

#[tokio::test(start_paused = true)]
async fn slow_first_token_delays_content_not_headers() {
    let sim = sim().await;
    let body = streaming(openai_body("slow"));
    let started = tokio::time::Instant::now();
    let response = sim.openai(&body, Some("slow_first_token:ms=3000")).await;
    assert!(started.elapsed() < Duration::from_secs(3), "headers come at once");
    let (text, clean) = read_all(response).await;
    assert!(clean);
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert_eq!(openai_stream_text(&sse_frames(&text)), healthy_text(&body));

    // Non-streaming: the whole response waits.
    let started = tokio::time::Instant::now();
    let response = sim.openai(&openai_body("slow"), Some("slow_first_token:ms=2000")).await;
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(response.status(), 200);

    // An error can be slow too.
    let started = tokio::time::Instant::now();
    let response =
        sim.anthropic(&anthropic_body("slow"), Some("529+slow_first_token:ms=1500")).await;
    assert_eq!(response.status(), 529);
    assert!(started.elapsed() >= Duration::from_millis(1500));
}

#[tokio::test(start_paused = true)]
async fn token_delay_paces_tokens_and_combines_with_cut() {
    let sim = sim().await;
    let body = streaming(anthropic_body("pace"));
    let tokens = token_count(&healthy_text(&body)) as u32;
    let started = tokio::time::Instant::now();
    let (_, clean) = read_all(sim.anthropic(&body, Some("token_delay:ms=100")).await).await;
    assert!(clean);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(100) * (tokens - 1), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(100) * (tokens + 1), "{elapsed:?}");

    let started = tokio::time::Instant::now();
    let response =
        sim.anthropic(&body, Some("cut:after=5+token_delay:ms=10+slow_first_token:ms=500")).await;
    let (text, clean) = read_all(response).await;
    assert!(!clean);
    assert_eq!(
        anthropic_stream_text(&sse_frames(&text)),
        healthy_text(&body).split_inclusive(' ').take(5).collect::<String>()
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(540) && elapsed < Duration::from_millis(600),
        "{elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_delivers_every_token_before_closing_under_load() {
    let sim = sim().await;
    let body = streaming(openai_body("cut under load"));
    let whole = healthy_text(&body);
    let mut tasks = Vec::new();
    for n in 0..24usize {
        let client = sim.client.clone();
        let url = sim.url("/v1/chat/completions");
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let response = client
                .post(url)
                .header("x-sim-fault", format!("cut:after={n}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            (n, read_all(response).await)
        }));
    }
    for task in tasks {
        let (n, (text, clean)) = task.await.unwrap();
        assert!(!clean);
        let want: String = whole.split_inclusive(' ').take(n).collect();
        assert_eq!(openai_stream_text(&sse_frames(&text)), want, "cut:after={n}");
    }
}
