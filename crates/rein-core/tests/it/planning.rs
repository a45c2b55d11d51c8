//! The deadline planned across the chain, on paused time: a retry is taken only while the same
//! failure again would still leave the next tier a full attempt, and a route may send a kind of
//! timeout to the next tier at once. The scenarios are the ones gateway comparisons run (up to
//! two retries, 30 s request and stream-idle timeouts, one fallback, a 100 s deadline), where a
//! loop that only asks "does the next attempt fit?" spends 91 s on a stalled primary and sends
//! the degraded reply while the fallback is up.

use std::time::Duration;

use rein_core::*;

use crate::support::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The comparisons' settings: 30 s for the first token, between tokens and per attempt, three
/// attempts per tier, 100 s for the call.
fn comparison_route(primary: Vec<Act>, fallback: Vec<Act>) -> (Route, Scripted2) {
    let p = Scripted::new("p", WireFormat::OpenAi, primary);
    let f = Scripted::new("f", WireFormat::Anthropic, fallback);
    let mut route = route("r", vec![("primary", p.clone()), ("fallback", f.clone())]);
    route.clocks = ClockPolicy {
        first_token: ms(30_000),
        stream_idle: ms(30_000),
        attempt: ms(30_000),
        deadline: ms(100_000),
        min_attempt: ms(30_000),
    };
    route.retry.attempts = 3;
    (route, (p, f))
}

type Scripted2 = (std::sync::Arc<Scripted>, std::sync::Arc<Scripted>);

struct Seen {
    result: Result<Completion, CallError>,
    elapsed: Duration,
    attempts: (usize, usize),
}

async fn run(route: Route, (p, f): Scripted2) -> Seen {
    let engine = engine(vec![route]);
    let started = tokio::time::Instant::now();
    let result = engine.complete(CallContext::new(), "r", ChatRequest::default()).await;
    Seen { result, elapsed: started.elapsed(), attempts: (p.arrivals().len(), f.arrivals().len()) }
}

fn served_by_fallback(seen: &Seen) -> &Completion {
    let done = seen.result.as_ref().unwrap_or_else(|e| panic!("expected an answer, got {e:?}"));
    assert_eq!(done.outcome(), Outcome::Fallback);
    assert_eq!(done.response.text, full_text(), "the fallback's whole answer");
    done
}

fn skips(done: &Completion) -> Vec<SkipReason> {
    done.report
        .steps
        .iter()
        .filter_map(|step| match step {
            Step::TierSkipped { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_primary_that_stalls_mid_stream_leaves_the_fallback_its_full_attempt() {
    // Attempt 1 stalls at 30 s; a retry like it (300 ms wait + 30 s) still leaves 39.7 s, so it
    // is taken; after it, a third (550 ms + 30 s) would leave the fallback 9.2 s: move down.
    let (route, providers) = comparison_route(vec![Act::StallAfter(3)], vec![ok()]);
    let seen = run(route, providers).await;
    let done = served_by_fallback(&seen);
    assert_eq!(seen.attempts, (2, 1), "attempts on (primary, fallback)");
    assert_eq!(seen.elapsed, ms(60_300), "well inside the 100 s deadline");
    assert_eq!(
        skips(done),
        [SkipReason::SavedForNextTier {
            remaining_ms: 39_700,
            retry_ms: 30_550,
            reserve_ms: 30_000
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_primary_leaves_the_fallback_its_full_attempt() {
    let (route, providers) = comparison_route(vec![Act::Hang], vec![ok()]);
    let seen = run(route, providers).await;
    served_by_fallback(&seen);
    assert_eq!(seen.attempts, (2, 1));
    assert_eq!(seen.elapsed, ms(60_300));
}

#[tokio::test(start_paused = true)]
async fn with_no_later_tier_to_save_time_for_every_attempt_runs() {
    // The same stalls on a route with one tier: nothing is saved for, so all three attempts
    // run (at 0, 30.3 and 60.85 s) and the safe reply ends the call at 90.85 s.
    let (mut route, (p, f)) = comparison_route(vec![Act::StallAfter(3)], vec![]);
    route.tiers.truncate(1);
    let seen = run(route, (p, f)).await;
    let done = seen.result.as_ref().unwrap();
    assert_eq!(done.outcome(), Outcome::Degraded);
    assert_eq!(seen.attempts, (3, 0));
    assert_eq!(seen.elapsed, ms(90_850));
}

#[tokio::test(start_paused = true)]
async fn the_specs_slow_stream_with_no_fallback_keeps_its_two_attempts_and_safe_reply() {
    // The spec's budget (4 s / 2 s / 8 s / 20 s), tokens every 1.9 s: each attempt runs to its
    // 8 s cap; with no later tier the second runs too and the safe reply goes out at 16.3 s.
    let p = Scripted::new("p", WireFormat::OpenAi, vec![slow_stream(1900)]);
    let route = route("r", vec![("primary", p.clone())]);
    let engine = engine(vec![route]);
    let started = tokio::time::Instant::now();
    let done = engine.complete(CallContext::new(), "r", ChatRequest::default()).await.unwrap();
    assert_eq!(done.outcome(), Outcome::Degraded);
    assert_eq!(p.arrivals().len(), 2);
    assert_eq!(started.elapsed(), ms(16_300));
}

#[tokio::test(start_paused = true)]
async fn a_route_can_send_a_stall_to_the_next_tier_at_once() {
    let (mut route, providers) = comparison_route(vec![Act::StallAfter(3)], vec![ok()]);
    route.on_timeout.stream_idle = TimeoutMove::NextTier;
    let seen = run(route, providers).await;
    let done = served_by_fallback(&seen);
    assert_eq!(seen.attempts, (1, 1));
    assert_eq!(seen.elapsed, ms(30_000));
    assert_eq!(skips(done), [SkipReason::SentOn { clock: "stream_idle" }]);
}

#[tokio::test(start_paused = true)]
async fn a_route_can_send_a_silent_provider_to_the_next_tier_at_once() {
    let (mut route, providers) = comparison_route(vec![Act::Hang], vec![ok()]);
    route.on_timeout.first_token = TimeoutMove::NextTier;
    let seen = run(route, providers).await;
    served_by_fallback(&seen);
    assert_eq!(seen.attempts, (1, 1));
    assert_eq!(seen.elapsed, ms(30_000));
}

#[tokio::test(start_paused = true)]
async fn a_stall_moves_on_only_by_its_own_setting() {
    // Sending first-token timeouts on leaves stalls to the retry and the plan.
    let (mut route, providers) = comparison_route(vec![Act::StallAfter(3)], vec![ok()]);
    route.on_timeout.first_token = TimeoutMove::NextTier;
    let seen = run(route, providers).await;
    served_by_fallback(&seen);
    assert_eq!(seen.attempts, (2, 1));
}

#[tokio::test(start_paused = true)]
async fn a_pushback_longer_than_the_time_left_goes_to_the_next_tier_at_once() {
    // "Please try again in 20s" with 5 s of the call left.
    let p = Scripted::new("p", WireFormat::OpenAi, vec![retry_after(429, ms(20_000)), ok()]);
    let f = Scripted::new("f", WireFormat::Anthropic, vec![ok()]);
    let route = route("r", vec![("primary", p.clone()), ("fallback", f.clone())]);
    let engine = engine(vec![route]);
    let started = tokio::time::Instant::now();
    let done = engine
        .complete(CallContext::with_deadline(ms(5_000)), "r", ChatRequest::default())
        .await
        .unwrap();
    assert_eq!(done.outcome(), Outcome::Fallback);
    assert_eq!((p.arrivals().len(), f.arrivals().len()), (1, 1));
    assert_eq!(started.elapsed(), Duration::ZERO);
}

fn slow_stream(gap_ms: u64) -> Act {
    Act::Ok { first_token: Duration::ZERO, token_delay: ms(gap_ms) }
}

#[tokio::test(start_paused = true)]
async fn the_plan_holds_for_streamed_calls_in_both_release_modes() {
    use futures_util::StreamExt;
    for mode in [ReleaseMode::Checked, ReleaseMode::Passthrough] {
        let (mut route, (p, f)) = comparison_route(vec![Act::Hang], vec![ok()]);
        route.release = mode;
        let engine = engine(vec![route]);
        let started = tokio::time::Instant::now();
        let mut stream = engine.stream(CallContext::new(), "r", ChatRequest::default()).unwrap();
        let mut text = String::new();
        let mut end = None;
        while let Some(item) = stream.next().await {
            match item {
                Released::Event(StreamEvent::TextDelta { text: piece }) => text.push_str(&piece),
                Released::Event(_) => {}
                other => end = Some(other),
            }
        }
        let Some(Released::Completed(done)) = end else { panic!("{mode:?}: {end:?}") };
        assert_eq!(done.outcome(), Outcome::Fallback, "{mode:?}");
        assert_eq!(text, full_text(), "{mode:?}: the fallback's whole answer");
        assert_eq!((p.arrivals().len(), f.arrivals().len()), (2, 1), "{mode:?}");
        assert_eq!(started.elapsed(), ms(60_300), "{mode:?}");
    }
}
