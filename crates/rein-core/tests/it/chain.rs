//! Behaviour across many calls: cooldowns, the failover share, and the retry budget under
//! sustained failure. All on paused time.

use std::sync::Arc;
use std::time::Duration;

use rein_core::*;

use crate::support::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A primary down for the first minute, twenty requests five seconds apart over it.
#[tokio::test(start_paused = true)]
async fn a_tier_down_for_a_minute_cools_down_then_takes_traffic_back() {
    let primary = Scripted::new("p", WireFormat::OpenAi, vec![Act::DownUntil(secs(60), 503)]);
    let fallback = Scripted::new("f", WireFormat::Anthropic, vec![ok()]);
    let engine = engine(vec![route(
        "r",
        vec![("primary", primary.clone()), ("fallback", fallback.clone())],
    )]);
    let start = tokio::time::Instant::now();

    let mut served = Vec::new();
    for i in 0..20u64 {
        tokio::time::sleep_until(start + secs(5 * i)).await;
        let done = engine.complete(CallContext::new(), "r", ChatRequest::default()).await.unwrap();
        served.push((
            5 * i,
            done.report.served_by.as_ref().unwrap().tier,
            done.report.attempts_on(0),
        ));
    }

    // While it was down, the primary saw the three failing calls that opened the breaker (two
    // attempts each) and then only single half-open probes, one per cooldown.
    let during_outage: Vec<Duration> =
        primary.arrivals().into_iter().filter(|t| *t < secs(60)).collect();
    let failing_calls = served.iter().filter(|(t, _, n)| *t < 60 && *n > 0).count();
    assert_eq!(failing_calls, 3 + 1, "three calls to open the breaker, then one probe: {served:?}");
    assert_eq!(during_outage.len(), 3 * 2 + 1, "{during_outage:?}");
    // Recovery at 60 s: within one cooldown (30 s) every call is back on the primary.
    for (t, tier, _) in &served {
        if *t >= 60 + 30 {
            assert_eq!(*tier, 0, "call at {t}s after recovery went to tier {tier}");
        }
    }
    assert!(served.iter().any(|(t, tier, _)| *t < 90 && *t >= 60 && *tier == 0), "{served:?}");
    assert_eq!(engine.tier_states()[1].state, BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn failover_share_keeps_a_steady_slice_on_the_fallback() {
    let primary = Scripted::new("p", WireFormat::OpenAi, vec![ok()]);
    let fallback = Scripted::new("f", WireFormat::Anthropic, vec![ok()]);
    let mut route = route("r", vec![("primary", primary.clone()), ("fallback", fallback.clone())]);
    route.failover = Some(FailoverShare { tier: 1, share: 0.05 });
    let engine = engine(vec![route]);
    let mut on_fallback = 0;
    for _ in 0..200 {
        let done = engine.complete(CallContext::new(), "r", ChatRequest::default()).await.unwrap();
        let served = done.report.served_by.unwrap();
        if served.tier == 1 {
            on_fallback += 1;
            assert!(served.failover);
            assert_eq!(
                done.report.outcome,
                Outcome::Answered,
                "planned failover is an ordinary answer"
            );
        }
    }
    assert_eq!(on_fallback, 10, "5% of 200 calls");
    assert_eq!(fallback.arrivals().len(), 10);
}

#[tokio::test(start_paused = true)]
async fn the_route_to_lever_and_a_failover_drill_move_calls_until_released_or_expired() {
    let primary = Scripted::new("p", WireFormat::OpenAi, vec![ok()]);
    let middle = Scripted::new("m", WireFormat::OpenAi, vec![status(400)]);
    let last = Scripted::new("l", WireFormat::Anthropic, vec![ok()]);
    let tiers = vec![("primary", primary.clone()), ("middle", middle.clone()), ("last", last)];
    let engine = engine(vec![route("r", tiers)]);
    let tier_of = |done: &Completion| done.report.served_by.as_ref().unwrap().tier;
    let call = || engine.complete(CallContext::new(), "r", ChatRequest::default());

    engine.levers().apply(RouteToFlip::now("r", Some("middle".into()), "ana", "eval"));
    let done = call().await.unwrap();
    assert_eq!(tier_of(&done), 2, "the middle tier failed: the one behind it answered");
    assert!(primary.arrivals().is_empty(), "the tier before the lever's was skipped");
    assert_eq!(middle.arrivals().len(), 1);
    // An eval's pin still reaches any tier.
    let mut pinned = CallContext::new();
    pinned.pin_tier = Some("primary".into());
    let done = engine.complete(pinned, "r", ChatRequest::default()).await.unwrap();
    assert_eq!(tier_of(&done), 0);
    engine.levers().apply(RouteToFlip::now("r", None, "ana", "fixed"));
    assert_eq!(tier_of(&call().await.unwrap()), 0);

    // A drill's share goes to the failover tier (the second, with none configured) until expiry.
    engine.levers().start_drill("r", 1.0, Duration::from_secs(300), "ana");
    assert_eq!(engine.failover_tier("r").as_deref(), Some("middle"));
    let on_drill = call().await.unwrap();
    assert_eq!(middle.arrivals().len(), 2, "the drill sent the call to the failover tier first");
    assert_eq!(tier_of(&on_drill), 0, "which failed, so the primary took it");
    tokio::time::sleep(Duration::from_secs(300)).await;
    call().await.unwrap();
    assert_eq!(middle.arrivals().len(), 2, "the drill ended by itself");
}

/// Steady load at 10 calls/s for 20 s against a provider that fails every request, with three
/// attempts per call allowed and no cooldown: the retry budget alone must hold upstream attempts
/// to 1.2 × calls plus the floor.
async fn storm(budget: RetryBudgetPolicy) -> (usize, usize) {
    let primary = Scripted::new("p", WireFormat::OpenAi, vec![status(503)]);
    let mut route = route("r", vec![("primary", primary.clone())]);
    route.retry.attempts = 3;
    route.tiers[0].cooldown =
        Cooldown::new(CooldownPolicy { allowed_fails: u32::MAX, cooldown: secs(1) });
    let engine = Engine::builder()
        .jitter(Arc::new(FixedJitter(0.5)))
        .retry_budget(budget)
        .route(route)
        .build();
    let start = tokio::time::Instant::now();
    let calls = 200;
    let mut tasks = Vec::new();
    for i in 0..calls {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start + Duration::from_millis(100 * i as u64)).await;
            engine
                .complete(CallContext::new(), "r", ChatRequest::default())
                .await
                .unwrap()
                .outcome()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Outcome::Degraded);
    }
    (calls, primary.arrivals().len())
}

#[tokio::test(start_paused = true)]
async fn retry_budget_keeps_sustained_failure_from_becoming_a_storm() {
    let policy = RetryBudgetPolicy { ratio: 0.2, min_retries_per_s: 1.0, window: secs(10) };
    let (calls, attempts) = storm(policy).await;
    // 20 s of load plus the window the floor is counted over.
    let floor = policy.min_retries_per_s * (20.0 + policy.window.as_secs_f64());
    assert!(
        attempts as f64 <= 1.2 * calls as f64 + floor,
        "{attempts} upstream attempts for {calls} calls"
    );
    assert!(attempts > calls, "some retries were still allowed");
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_the_same_load_triples() {
    // The control for the test above: an unlimited budget lets every call use all three attempts.
    let (calls, attempts) =
        storm(RetryBudgetPolicy { ratio: 10.0, min_retries_per_s: 1000.0, window: secs(10) }).await;
    assert_eq!(attempts, 3 * calls);
}

#[tokio::test(start_paused = true)]
async fn kill_switch_sends_the_route_to_its_degraded_reply_and_back() {
    let primary = Scripted::new("p", WireFormat::OpenAi, vec![ok()]);
    let mut route = route("support", vec![("primary", primary.clone())]);
    route.degraded = Some(DegradedReply {
        template: "Order {{order_id}} is on its way. A person will reply within 2 hours.".into(),
        fallback_text: "A person will reply within 2 hours.".into(),
        ..DegradedReply::default()
    });
    let engine = engine(vec![route]);
    engine.kill_switch().set(KillScope::Route("support".into()), true, "answers look wrong");
    let mut ctx = CallContext::new();
    ctx.vars.insert("order_id".into(), "4417".into());
    let done = engine.complete(ctx, "support", ChatRequest::default()).await.unwrap();
    assert_eq!(done.outcome(), Outcome::Degraded);
    assert_eq!(done.response.text, "Order 4417 is on its way. A person will reply within 2 hours.");
    assert!(primary.arrivals().is_empty(), "no model call while the switch is on");

    engine.kill_switch().set(KillScope::Route("support".into()), false, "fixed");
    let done =
        engine.complete(CallContext::new(), "support", ChatRequest::default()).await.unwrap();
    assert_eq!(done.outcome(), Outcome::Answered);
    assert_eq!(engine.kill_switch().audit().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn each_tier_sends_its_own_model_and_prompt_and_the_answer_names_who_answered() {
    let primary = Scripted::new("p", WireFormat::OpenAi, vec![status(503)]);
    let fallback = Scripted::new("f", WireFormat::Anthropic, vec![ok()]);
    let mut route = route("r", vec![("primary", primary), ("fallback", fallback)]);
    route.tiers[1].params.system_prompt = Some("fallback prompt".into());
    let request = ChatRequest { system: Some("caller prompt".into()), ..ChatRequest::default() };
    assert_eq!(route.tiers[1].prepare(&request).system.as_deref(), Some("fallback prompt"));
    assert_eq!(route.tiers[1].prepare(&request).model, "fallback-model");
    assert_eq!(route.tiers[0].prepare(&request).system.as_deref(), Some("caller prompt"));
    let engine = engine(vec![route]);
    let done = engine.complete(CallContext::new(), "r", request).await.unwrap();
    let served = done.report.served_by.unwrap();
    assert_eq!((served.tier_name.as_str(), served.provider.as_str()), ("fallback", "f"));
    // Usage is that of the answer only, not summed over failed attempts.
    assert_eq!(done.response.usage, Usage { input_tokens: 5, output_tokens: 6 });
}

#[tokio::test(start_paused = true)]
async fn unknown_route_is_a_typed_error() {
    let engine = engine(vec![]);
    let error =
        engine.complete(CallContext::new(), "nope", ChatRequest::default()).await.unwrap_err();
    assert!(matches!(error, CallError::UnknownRoute(name) if name == "nope"));
}

/// A call in flight holds its whole chain's state (every open stream, every waiting call), so
/// that state stays small: the context and the request are kept once, not once per `async fn`
/// they pass through (they were kept four times, 5.2 KiB a call; 3.5 KiB while an attempt's
/// result and record, the contract check and a continuation's request stayed in line; 2,408
/// while an attempt kept the request as the tier sends it and the call's end was laid out in
/// line; under mimalloc's 2,048-byte class now).
#[tokio::test(start_paused = true)]
async fn a_call_in_flight_holds_its_context_and_request_once() {
    let primary = Scripted::new("p", WireFormat::OpenAi, vec![ok()]);
    let engine = engine(vec![route("support", vec![("primary", primary)])]);
    let call = engine.complete(CallContext::new(), "support", ChatRequest::default());
    let size = std::mem::size_of_val(&call);
    assert!(size <= 2048, "a call's state is {size} bytes");
    assert!(call.await.is_ok());
}
