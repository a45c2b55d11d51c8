//! Read ladders: a dead primary serves the cache with full provenance, fast; a stripped
//! annotation fails the provenance check; an over-age cache declines; a dead ladder refuses in a
//! structured way; a 4xx is the tool's answer, not a reason to serve stale data; the per-rung
//! breaker stops calling a dead primary; the deadline caps every rung.

use std::time::Duration;

use rein_core::BreakerState;
use rein_core::CallContext;
use rein_store::tools::ToolStore;
use rein_tools::keys::args_hash;
use rein_tools::{ToolError, ToolStatus, WallClock};
use serde_json::{Value, json};

use crate::backend::{Backend, Mode, dead_url};
use crate::support::{Harness, assert_provenance, strip_provenance};

const SIX_HOURS_MS: i64 = 6 * 3_600_000;

/// search_docs: primary over http, then `extra` rungs (TOML), as in the spec.
fn search_docs(primary: &str, breaker: &str, extra: &str) -> String {
    format!(
        r#"
[tools.search_docs]
kind = "read"
[[tools.search_docs.rungs]]
kind = "http"
source = "search_primary"
fidelity = "exact"
method = "POST"
url = "{primary}"
headers = {{ "x-team" = "support" }}
headers_env = {{ "authorization" = "TEST_TOOL_TOKEN" }}
timeout_ms = 400
breaker = {breaker}
{extra}
"#
    )
}

const CACHE_RUNG: &str = r#"
[[tools.search_docs.rungs]]
kind = "cache"
source = "search_cache"
fidelity = "stale"
max_age_ms = 21600000
timeout_ms = 50
"#;

const STATIC_RUNG: &str = r#"
[[tools.search_docs.rungs]]
kind = "static"
source = "canned"
fidelity = "partial"
result = { results = [] }
"#;

const BREAKER: &str = "{ failures = 4, cooldown_ms = 30000 }";

/// Put `result` in the cache for `args`, captured `age_ms` ago.
async fn cache(h: &Harness, args: &Value, result: Value, age_ms: i64) {
    let captured = h.clock.now_unix_ms() - age_ms;
    h.store.cache_put("search_docs", &args_hash(args), &result, captured).await.unwrap();
}

#[tokio::test]
async fn dead_primary_serves_the_stale_cache_with_provenance_fast() {
    let search = Backend::start("search").await;
    let ladder = format!("{CACHE_RUNG}{STATIC_RUNG}");
    let h = Harness::new(&search_docs(&search.url("/search/{q}"), BREAKER, &ladder));
    let args = json!({"q": "runbook restore"});

    // While the primary is up it answers exactly, and its answer is cached.
    let live = h.call("search_docs", args.clone()).await;
    assert_eq!(live.status, ToolStatus::Ok);
    assert_eq!(live.envelope["degraded"], false);
    assert!(live.envelope.get("fidelity").is_none(), "the exact primary carries no fidelity claim");
    assert_eq!(live.served_by.as_deref(), Some("search_primary"));
    let request = &search.received()[0];
    assert_eq!(request.path, "/search/runbook%20restore");
    assert_eq!(request.headers["x-team"], "support");
    assert_eq!(request.headers["authorization"], "Bearer s3cret");
    assert!(request.idempotency_key.is_none(), "reads carry no idempotency key");

    // 3.6 hours later the search vendor dies.
    h.clock.advance_ms(214 * 60_000 + 30_000);
    search.set(Mode::Fail(503));
    let result = h.call("search_docs", args).await;

    assert_provenance(&result.envelope, 360).unwrap();
    let envelope = &result.envelope;
    assert_eq!(envelope["source"], "search_cache");
    assert_eq!(envelope["age_minutes"], 214);
    assert_eq!(envelope["result"], live.envelope["result"], "the cached answer, as captured");
    assert_eq!(envelope["rung"], json!({"index": 1, "source": "search_cache"}));
    let detail = envelope["detail"].as_str().unwrap();
    assert!(detail.contains("captured 3.6 hours ago"), "{detail}");
    assert_eq!(result.served_by.as_deref(), Some("search_cache"));
    assert_eq!(
        h.observer.events(),
        ["served search_docs search_primary ok", "served search_docs search_cache ok"]
    );
}

#[tokio::test]
async fn stripping_the_provenance_annotation_turns_the_provenance_check_red() {
    let search = Backend::start("search").await;
    search.set(Mode::Fail(503));
    let h = Harness::new(&search_docs(&search.url("/search/{q}"), BREAKER, CACHE_RUNG));
    let args = json!({"q": "runbook restore"});
    cache(&h, &args, json!({"results": ["restore.md"]}), 214 * 60_000).await;

    let envelope = h.call("search_docs", args).await.envelope;
    assert_provenance(&envelope, 360).unwrap();

    let stripped = strip_provenance(&envelope);
    assert!(
        assert_provenance(&stripped, 360).is_err(),
        "a stripped envelope must fail: {stripped}"
    );
    for field in ["degraded", "fidelity", "age_minutes", "detail"] {
        let mut partial = envelope.clone();
        partial.as_object_mut().unwrap().remove(field);
        assert!(assert_provenance(&partial, 360).is_err(), "missing `{field}` must fail");
    }
    let mut reworded = envelope.clone();
    reworded["detail"] = json!("here are the search results");
    assert!(assert_provenance(&reworded, 360).is_err(), "lost steering wording must fail");
}

#[tokio::test]
async fn a_cache_older_than_max_age_declines_and_the_ladder_falls_through() {
    let search = Backend::start("search").await;
    search.set(Mode::Fail(503));
    let args = json!({"q": "stock price"});

    // With a static rung below: the canned answer, never the over-age entry.
    let h = Harness::new(&search_docs(
        &search.url("/search/{q}"),
        BREAKER,
        &format!("{CACHE_RUNG}{STATIC_RUNG}"),
    ));
    cache(&h, &args, json!({"results": ["stale"]}), SIX_HOURS_MS + 60_000).await;
    let result = h.call("search_docs", args.clone()).await;
    assert_eq!(result.status, ToolStatus::Ok);
    assert_eq!(result.served_by.as_deref(), Some("canned"));
    assert_eq!(result.envelope["fidelity"], "partial");
    assert_eq!(result.envelope["result"], json!({"results": []}));
    assert!(result.envelope.get("age_minutes").is_none());
    assert_eq!(h.store.cache_gets(), 1, "the cache was consulted and declined");

    // Without one: the structured refusal.
    let h = Harness::new(&search_docs(&search.url("/search/{q}"), BREAKER, CACHE_RUNG));
    cache(&h, &args, json!({"results": ["stale"]}), SIX_HOURS_MS + 60_000).await;
    let result = h.call("search_docs", args).await;
    assert_eq!(result.status, ToolStatus::Refused);
    assert!(result.envelope.get("result").is_none(), "never stale-on-the-sly: {}", result.envelope);
}

#[tokio::test]
async fn every_rung_dead_ends_in_a_structured_refusal_fast() {
    let primary = Backend::start("search").await;
    let replica = Backend::start("replica").await;
    primary.set(Mode::Hang); // its budget fires
    replica.set(Mode::Close); // connection dropped
    let ladder = format!(
        r#"
[[tools.search_docs.rungs]]
kind = "http"
source = "search_replica"
url = "{}"
timeout_ms = 100
[[tools.search_docs.rungs]]
kind = "http"
source = "search_far_replica"
url = "{}"
timeout_ms = 100
{CACHE_RUNG}"#,
        replica.url("/search/{q}"),
        dead_url("/search/{q}").await,
    );
    let h = Harness::new(
        &search_docs(&primary.url("/search/{q}"), BREAKER, &ladder)
            .replace("timeout_ms = 400", "timeout_ms = 150"),
    );
    h.store.fail_cache.store(true, std::sync::atomic::Ordering::SeqCst);

    let result = h.call("search_docs", json!({"q": "runbook"})).await;
    let envelope = &result.envelope;
    assert_eq!(result.status, ToolStatus::Refused);
    assert_eq!(envelope["status"], "refused");
    assert_eq!(envelope["tool"], "search_docs");
    assert_eq!(envelope["degraded"], true);
    assert!(envelope.get("result").is_none(), "no empty success: {envelope}");
    let detail = envelope["detail"].as_str().unwrap();
    assert!(detail.contains("answer without it or ask the user"), "{detail}");
    assert!(envelope["elapsed_ms"].as_u64().unwrap() < 500, "{envelope}");
    assert_eq!(result.served_by, None);
    assert_eq!(primary.hits(), 1);
    assert_eq!(replica.hits(), 1);
    assert_eq!(h.store.cache_gets(), 1);
    assert_eq!(h.observer.events(), ["served search_docs ladder_exhausted refused"]);
}

#[tokio::test]
async fn a_4xx_is_the_tools_answer_and_never_falls_through_to_stale_data() {
    let search = Backend::start("search").await;
    search.set(Mode::Reject(400, "q must be at least 3 characters".into()));
    let h = Harness::new(&search_docs(&search.url("/search/{q}"), BREAKER, CACHE_RUNG));
    let args = json!({"q": "ab"});
    cache(&h, &args, json!({"results": ["old"]}), 60_000).await;

    let result = h.call("search_docs", args).await;
    assert_eq!(result.status, ToolStatus::Refused);
    assert_eq!(result.served_by.as_deref(), Some("search_primary"));
    let detail = result.envelope["detail"].as_str().unwrap();
    assert!(detail.contains("q must be at least 3 characters"), "{detail}");
    assert!(result.envelope.get("result").is_none());
    assert_eq!(h.store.cache_gets(), 0, "the cache was not consulted");
    let breaker = &h.dispatcher.breakers()[0];
    assert_eq!(
        breaker.state,
        BreakerState::Closed,
        "a 4xx says nothing about the backend's health"
    );
}

#[tokio::test]
async fn the_per_rung_breaker_stops_calling_a_dead_primary_and_probes_it_later() {
    let search = Backend::start("search").await;
    search.set(Mode::Fail(503));
    let h = Harness::new(&search_docs(
        &search.url("/search/{q}"),
        "{ failures = 3, cooldown_ms = 300 }",
        CACHE_RUNG,
    ));
    let args = json!({"q": "runbook"});
    cache(&h, &args, json!({"results": ["runbook.md"]}), 60_000).await;

    for _ in 0..3 {
        let result = h.call("search_docs", args.clone()).await;
        assert_eq!(result.served_by.as_deref(), Some("search_cache"));
    }
    assert_eq!(search.hits(), 3);
    let primary = |h: &Harness| {
        h.dispatcher.breakers().into_iter().find(|b| b.source == "search_primary").unwrap().state
    };
    assert_eq!(primary(&h), BreakerState::Open);

    for _ in 0..5 {
        let result = h.call("search_docs", args.clone()).await;
        assert_eq!(result.served_by.as_deref(), Some("search_cache"));
        assert!(result.envelope["elapsed_ms"].as_u64().unwrap() < 500, "{}", result.envelope);
    }
    assert_eq!(search.hits(), 3, "an open breaker sends nothing");

    // After the cooldown one probe goes through; the primary is back, so it closes.
    search.set(Mode::Up);
    tokio::time::sleep(Duration::from_millis(350)).await;
    let result = h.call("search_docs", args).await;
    assert_eq!(result.served_by.as_deref(), Some("search_primary"));
    assert_eq!(search.hits(), 4);
    assert_eq!(primary(&h), BreakerState::Closed);
}

#[tokio::test]
async fn a_replica_answers_fresh_with_provenance_and_refills_the_cache() {
    let primary = Backend::start("search").await;
    let replica = Backend::start("replica").await;
    primary.set(Mode::Fail(503));
    let ladder = format!(
        r#"
[[tools.search_docs.rungs]]
kind = "http"
source = "search_replica"
url = "{}"
timeout_ms = 300
{CACHE_RUNG}"#,
        replica.url("/search/{q}")
    );
    let h = Harness::new(&search_docs(&primary.url("/search/{q}"), BREAKER, &ladder));
    let args = json!({"q": "runbook"});

    let result = h.call("search_docs", args.clone()).await;
    let envelope = &result.envelope;
    assert_eq!(envelope["status"], "ok");
    assert_eq!(envelope["degraded"], true);
    assert_eq!(envelope["fidelity"], "fresh");
    assert_eq!(envelope["source"], "search_replica");
    assert!(envelope["detail"].as_str().unwrap().contains("search_replica"));

    // The replica's answer was cached for the next outage.
    replica.set(Mode::Fail(503));
    let cached = h.call("search_docs", args).await;
    assert_eq!(cached.served_by.as_deref(), Some("search_cache"));
    assert_eq!(cached.envelope["result"], envelope["result"]);
    assert_eq!(cached.envelope["age_minutes"], 0);
}

#[tokio::test]
async fn the_call_deadline_caps_every_rung() {
    let search = Backend::start("search").await;
    search.set(Mode::Hang);
    let h = Harness::new(
        &search_docs(&search.url("/search/{q}"), BREAKER, &format!("{CACHE_RUNG}{STATIC_RUNG}"))
            .replace("timeout_ms = 400", "timeout_ms = 5000"),
    );
    let ctx = CallContext::with_deadline(Duration::from_millis(150));
    let result = h.call_with("search_docs", json!({"q": "x"}), ctx).await.unwrap();
    assert_eq!(result.served_by.as_deref(), Some("canned"), "{}", result.envelope);
    let elapsed = result.envelope["elapsed_ms"].as_u64().unwrap();
    assert!((140..500).contains(&elapsed), "the primary got the deadline, not its 5 s: {elapsed}");
}

#[tokio::test]
async fn bad_calls_are_errors_or_refusals_that_send_nothing() {
    let search = Backend::start("search").await;
    let h = Harness::new(&search_docs(&search.url("/search/{q}"), BREAKER, STATIC_RUNG));

    let not_object = h.call_with("search_docs", json!(["q"]), CallContext::new()).await;
    assert!(matches!(not_object, Err(ToolError::BadArgs(_))), "{not_object:?}");
    let unknown = h.call_with("search_everything", json!({}), CallContext::new()).await;
    assert!(matches!(unknown, Err(ToolError::UnknownTool(name)) if name == "search_everything"));

    let missing = h.call_with("search_docs", json!({"query": "x"}), CallContext::new()).await;
    let Err(ToolError::BadArgument { argument, message }) = missing else {
        panic!("expected BadArgument, got {missing:?}");
    };
    assert_eq!((argument.as_str(), message.as_str()), ("q", "argument `q` is required"));
    for dots in [".", ".."] {
        let walk = h.call_with("search_docs", json!({ "q": dots }), CallContext::new()).await;
        assert!(
            matches!(&walk, Err(ToolError::BadArgument { argument, .. }) if argument == "q"),
            "{walk:?}"
        );
    }
    assert_eq!(search.hits(), 0);
}
