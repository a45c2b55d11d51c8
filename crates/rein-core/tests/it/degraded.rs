//! When no tier answers: the route's degraded reply as the answer, as an error (`deliver =
//! error`, or a caller that asked for JSON and a reply with no JSON shape), or, on a route with
//! no degraded reply, an error that says why and never promises anything.

use rein_core::*;
use serde_json::json;

use crate::support::*;

fn down(route_name: &str, status_code: u16, degraded: Option<DegradedReply>) -> (Engine, Route) {
    let p = Scripted::new("p", WireFormat::OpenAi, vec![status(status_code)]);
    let f = Scripted::new("f", WireFormat::Anthropic, vec![status(status_code)]);
    let mut route = route(route_name, vec![("primary", p), ("fallback", f)]);
    route.degraded = degraded;
    (engine(vec![route.clone()]), route)
}

fn json_request() -> ChatRequest {
    ChatRequest { response_format: Some(ResponseFormat::JsonObject), ..ChatRequest::default() }
}

#[tokio::test(start_paused = true)]
async fn a_route_without_a_degraded_reply_names_a_misconfiguration() {
    let (engine, _) = down("r", 401, None);
    let error = engine.complete(CallContext::new(), "r", ChatRequest::default()).await.unwrap_err();
    let CallError::Unserved { reason, misconfigured, report } = &error else {
        panic!("expected Unserved, got {error:?}")
    };
    assert!(misconfigured, "{reason}");
    assert!(reason.contains("misconfigured") && reason.contains("401"), "{reason}");
    assert!(reason.contains("`primary`") && reason.contains("`fallback`"), "{reason}");
    assert!(!reason.to_lowercase().contains("person"), "nothing is promised: {reason}");
    assert_eq!(report.outcome, Outcome::Degraded);
    assert_eq!(report.alerts.len(), 2, "both tiers alerted");
}

#[tokio::test(start_paused = true)]
async fn a_route_without_a_degraded_reply_says_what_each_tier_did_in_an_outage() {
    let (engine, _) = down("r", 503, None);
    let error = engine.complete(CallContext::new(), "r", ChatRequest::default()).await.unwrap_err();
    let CallError::Unserved { reason, misconfigured, .. } = &error else {
        panic!("expected Unserved, got {error:?}")
    };
    assert!(!misconfigured, "an outage is not a misconfiguration: {reason}");
    assert!(reason.contains("2 attempts, last 503 overloaded"), "{reason}");
    assert!(reason.contains("no degraded reply"), "{reason}");
}

#[tokio::test(start_paused = true)]
async fn a_degraded_reply_can_be_delivered_as_an_error() {
    let reply = DegradedReply { deliver: Delivery::Error, ..DegradedReply::text("We are on it.") };
    let (engine, _) = down("r", 503, Some(reply));
    let error = engine.complete(CallContext::new(), "r", ChatRequest::default()).await.unwrap_err();
    let CallError::Degraded { text, report } = &error else {
        panic!("expected Degraded, got {error:?}")
    };
    assert_eq!(text, "We are on it.");
    assert_eq!(report.outcome, Outcome::Degraded);
    assert_eq!(report.attempt_count(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_asked_for_json_gets_the_json_shape_or_the_error_never_prose() {
    let (engine, _) = down("prose", 503, Some(DegradedReply::text("We are on it.")));
    let error = engine.complete(CallContext::new(), "prose", json_request()).await.unwrap_err();
    assert!(matches!(&error, CallError::Degraded { text, .. } if text == "We are on it."));
    // The same route still answers a prose caller with its text.
    let done = engine.complete(CallContext::new(), "prose", ChatRequest::default()).await.unwrap();
    assert_eq!(done.response.text, "We are on it.");

    let shaped = DegradedReply {
        json: Some(json!({"reply": "We are on it.", "reason": "outage"})),
        ..DegradedReply::text("We are on it.")
    };
    let (engine, _) = down("shaped", 503, Some(shaped));
    let done = engine.complete(CallContext::new(), "shaped", json_request()).await.unwrap();
    assert_eq!(done.outcome(), Outcome::Degraded);
    let value: serde_json::Value = serde_json::from_str(&done.response.text).unwrap();
    assert_eq!(value, json!({"reply": "We are on it.", "reason": "outage"}));
}

#[tokio::test(start_paused = true)]
async fn a_switched_off_route_without_a_degraded_reply_says_so() {
    let (engine, _) = down("r", 503, None);
    engine.kill_switch().set(KillScope::Route("r".into()), true, "answers look wrong");
    let error = engine.complete(CallContext::new(), "r", ChatRequest::default()).await.unwrap_err();
    let CallError::Unserved { reason, misconfigured, .. } = &error else {
        panic!("expected Unserved, got {error:?}")
    };
    assert!(!misconfigured);
    assert!(reason.contains("switched off (answers look wrong)"), "{reason}");
}
