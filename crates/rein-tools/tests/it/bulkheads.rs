//! Bulkheads: a full partition answers `busy` with `retry_after_ms` at once and does not step
//! down the ladder (busy is not down); a dependency that hangs fills only its own partition.

use std::sync::Arc;

use rein_core::CallContext;
use rein_store::tools::ToolStore;
use rein_tools::keys::args_hash;
use rein_tools::{Dispatcher, ToolOutcome, ToolStatus, WallClock};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::backend::{Backend, Mode};
use crate::support::Harness;

fn spawn_call(dispatcher: &Arc<Dispatcher>, tool: &str, args: Value) -> JoinHandle<ToolOutcome> {
    let (dispatcher, tool) = (Arc::clone(dispatcher), tool.to_string());
    tokio::spawn(async move { dispatcher.call(&CallContext::new(), &tool, args).await.unwrap() })
}

#[tokio::test]
async fn a_full_bulkhead_answers_busy_at_once_and_never_serves_a_fallback() {
    let search = Backend::start("search").await;
    let h = Harness::new(&format!(
        r#"
[bulkheads.search]
max_concurrent = 1
retry_after_ms = 250

[tools.search_docs]
kind = "read"
[[tools.search_docs.rungs]]
kind = "http"
source = "search_primary"
url = "{}"
bulkhead = "search"
timeout_ms = 3000
[[tools.search_docs.rungs]]
kind = "cache"
source = "search_cache"
max_age_ms = 21600000
"#,
        search.url("/search/{q}")
    ));
    let args = json!({"q": "runbook"});
    let now = h.clock.now_unix_ms();
    h.store
        .cache_put("search_docs", &args_hash(&args), &json!({"results": ["cached"]}), now)
        .await
        .unwrap();

    search.set(Mode::Hang);
    let first = spawn_call(&h.dispatcher, "search_docs", args.clone());
    search.wait_for_hits(1).await;

    let busy = h.call("search_docs", args.clone()).await;
    let envelope = &busy.envelope;
    assert_eq!(busy.status, ToolStatus::Busy);
    assert_eq!(envelope["status"], "busy");
    assert_eq!(envelope["retry_after_ms"], 250);
    assert!(envelope.get("result").is_none(), "busy serves nothing: {envelope}");
    assert!(envelope["detail"].as_str().unwrap().contains("retry after 250 ms"));
    assert!(envelope["elapsed_ms"].as_u64().unwrap() < 500, "{envelope}");
    assert_eq!(h.store.cache_gets(), 0, "busy does not step down to the cache");
    assert_eq!(search.hits(), 1, "the busy call sent nothing");
    assert!(h.observer.events().contains(&"busy search_docs search".to_string()));

    // The primary answers the held call; the slot frees.
    search.set(Mode::Up);
    let first = first.await.unwrap();
    assert_eq!(first.served_by.as_deref(), Some("search_primary"));
    let again = h.call("search_docs", args).await;
    assert_eq!(again.served_by.as_deref(), Some("search_primary"));
}

#[tokio::test]
async fn a_hanging_dependency_does_not_slow_a_tool_behind_another_bulkhead() {
    let search = Backend::start("search").await;
    let orders = Backend::start("orders").await;
    search.set(Mode::Hang);
    let h = Harness::new(&format!(
        r#"
[bulkheads.search]
max_concurrent = 4
retry_after_ms = 500

[tools.search_docs]
kind = "read"
[[tools.search_docs.rungs]]
kind = "http"
source = "search_primary"
url = "{}"
bulkhead = "search"
timeout_ms = 2000

[tools.lookup_order]
kind = "read"
[[tools.lookup_order.rungs]]
kind = "http"
source = "orders_api"
method = "GET"
url = "{}"
timeout_ms = 2000
"#,
        search.url("/search/{q}"),
        orders.url("/orders/{id}")
    ));

    let searches: Vec<_> = (0..8)
        .map(|i| spawn_call(&h.dispatcher, "search_docs", json!({"q": format!("q{i}")})))
        .collect();
    search.wait_for_hits(4).await;

    for i in 0..5 {
        let order = h.call("lookup_order", json!({"id": i})).await;
        assert_eq!(order.status, ToolStatus::Ok);
        let elapsed = order.envelope["elapsed_ms"].as_u64().unwrap();
        assert!(elapsed < 500, "lookup_order waited on search's dead dependency: {elapsed} ms");
    }
    assert_eq!(orders.received()[0].method, "GET");
    assert_eq!(orders.received()[0].path, "/orders/0");

    search.set(Mode::Up);
    let mut statuses = Vec::new();
    for call in searches {
        statuses.push(call.await.unwrap().status);
    }
    let busy = statuses.iter().filter(|s| **s == ToolStatus::Busy).count();
    assert_eq!(busy, 4, "four in the partition, four turned away: {statuses:?}");
    assert_eq!(search.hits(), 4);
}
