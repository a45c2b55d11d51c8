//! Streaming release modes through `Engine::stream`, on paused time.

use std::time::Duration;

use futures_util::StreamExt;
use rein_core::*;
use tokio::time::Instant;

use crate::support::*;

/// Everything the caller received: the text, when each text event arrived, and the end.
async fn drain(mut stream: ReleaseStream) -> (String, Vec<Duration>, Released) {
    let start = Instant::now();
    let mut text = String::new();
    let mut times = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Released::Event(StreamEvent::TextDelta { text: t }) => {
                text.push_str(&t);
                times.push(start.elapsed());
            }
            Released::Event(_) => {}
            end => return (text, times, end),
        }
    }
    panic!("stream ended without Completed or Failed");
}

fn engine_with(
    mode: ReleaseMode,
    primary: Vec<Act>,
    fallback: Vec<Act>,
) -> (Engine, std::sync::Arc<Scripted>) {
    let p = Scripted::new("p", WireFormat::OpenAi, primary);
    let f = Scripted::new("f", WireFormat::Anthropic, fallback);
    let mut route = route("r", vec![("primary", p.clone()), ("fallback", f)]);
    route.release = mode;
    (engine(vec![route]), p)
}

#[tokio::test(start_paused = true)]
async fn checked_mode_hides_a_cut_stream_and_releases_only_the_whole_answer() {
    let (engine, primary) =
        engine_with(ReleaseMode::Checked, vec![Act::CutAfter(3), ok()], vec![ok()]);
    let stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
    let (text, _, end) = drain(stream).await;
    assert_eq!(text, full_text(), "no fragment of the cut attempt reaches the caller");
    let Released::Completed(done) = end else { panic!("expected Completed, got {end:?}") };
    assert_eq!(done.outcome(), Outcome::Answered);
    assert_eq!(primary.arrivals().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn passthrough_failure_after_the_first_token_ends_with_an_in_band_error() {
    let (engine, primary) =
        engine_with(ReleaseMode::Passthrough, vec![Act::StreamErrorAfter(3), ok()], vec![ok()]);
    let stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
    let (text, _, end) = drain(stream).await;
    assert_eq!(text, WORDS[..3].concat());
    let Released::Failed(error) = end else {
        panic!("a cut passthrough stream must not complete: {end:?}")
    };
    assert!(matches!(*error, CallError::Interrupted { .. }), "{error:?}");
    assert_eq!(error.report().unwrap().outcome, Outcome::Interrupted);
    assert_eq!(primary.arrivals().len(), 1, "no retry once tokens were forwarded");
}

#[tokio::test(start_paused = true)]
async fn passthrough_falls_back_invisibly_before_the_first_token() {
    let (engine, _) = engine_with(ReleaseMode::Passthrough, vec![Act::Hang], vec![ok()]);
    let stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
    let (text, _, end) = drain(stream).await;
    assert_eq!(text, full_text());
    let Released::Completed(done) = end else { panic!("{end:?}") };
    assert_eq!(done.outcome(), Outcome::Fallback);
}

#[tokio::test(start_paused = true)]
async fn passthrough_never_holds_back_the_first_token() {
    let slow = Act::Ok {
        first_token: Duration::from_millis(200),
        token_delay: Duration::from_millis(1000),
    };
    let (engine, _) = engine_with(ReleaseMode::Passthrough, vec![slow], vec![ok()]);
    let stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
    let (text, times, end) = drain(stream).await;
    assert_eq!(text, full_text());
    assert_eq!(times[0], Duration::from_millis(200), "first token forwarded the moment it arrived");
    assert_eq!(times[5], Duration::from_millis(5200));
    assert!(matches!(end, Released::Completed(_)));
}

#[tokio::test(start_paused = true)]
async fn checked_mode_holds_tokens_until_the_answer_is_whole() {
    let slow = Act::Ok {
        first_token: Duration::from_millis(200),
        token_delay: Duration::from_millis(1000),
    };
    let (engine, _) = engine_with(ReleaseMode::Checked, vec![slow], vec![ok()]);
    let stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
    let (text, times, _) = drain(stream).await;
    assert_eq!(text, full_text());
    assert_eq!(times[0], Duration::from_millis(5200));
}

#[tokio::test(start_paused = true)]
async fn a_stream_with_every_tier_down_releases_the_degraded_reply() {
    let (engine, _) = engine_with(ReleaseMode::Passthrough, vec![status(503)], vec![status(529)]);
    let stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
    let (text, _, end) = drain(stream).await;
    assert_eq!(text, DegradedReply::default().fallback_text);
    let Released::Completed(done) = end else { panic!("{end:?}") };
    assert_eq!(done.outcome(), Outcome::Degraded);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_hangs_up_mid_stream_is_no_failure_of_the_tier() {
    // Each caller takes the first token and hangs up just as the next one arrives: the tier
    // answered every time, so its breaker must stay closed and every call must reach it.
    let slow = Act::Ok {
        first_token: Duration::from_millis(10),
        token_delay: Duration::from_millis(1000),
    };
    let (engine, primary) = engine_with(ReleaseMode::Passthrough, vec![slow; 20], vec![ok()]);
    for _ in 0..20 {
        let mut stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
        assert!(matches!(stream.next().await, Some(Released::Event(_))));
        tokio::time::sleep(Duration::from_millis(1000)).await;
        drop(stream);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let state = engine.tier_states().into_iter().find(|t| t.tier == "primary").unwrap();
    assert_eq!(state.state, BreakerState::Closed, "callers hanging up opened the breaker");
    assert_eq!(primary.arrivals().len(), 20, "no call was turned away from the primary");
}

#[tokio::test(start_paused = true)]
async fn a_held_answer_longer_than_the_relay_holds_reaches_the_caller_whole() {
    // ~400 pieces: more than the relay between the call and its reader holds at once, so the
    // call waits for room and goes on as the reader reads.
    let text = "the order ships in two days. ".repeat(350);
    let (engine, _) = engine_with(
        ReleaseMode::Checked,
        vec![Act::Say(text.clone(), StopReason::EndTurn)],
        vec![ok()],
    );
    let stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
    let (received, times, end) = drain(stream).await;
    assert!(times.len() > 300, "{} pieces", times.len());
    assert_eq!(received, text);
    let Released::Completed(done) = end else { panic!("{end:?}") };
    assert_eq!(done.outcome(), Outcome::Answered);
}
