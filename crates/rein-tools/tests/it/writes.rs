//! Write ladders: a dead primary queues the write with its key; replay sends it with the same
//! key exactly once; a repeated key returns the stored result and sends nothing; other
//! arguments under the same key are refused (422), a concurrent duplicate too (409); a timeout
//! after sending keeps the key, and a backend that deduplicates by key executes once; a
//! hand-off keyed by its conversation opens one ticket.

use std::sync::Arc;
use std::time::Duration;

use rein_core::CallContext;
use rein_store::tools::{OutboxState, ToolStore};
use rein_tools::{ToolError, ToolStatus, WallClock};
use serde_json::json;

use crate::backend::{Backend, Mode, dead_url};
use crate::support::{Harness, outbox_item, with_key};

const OUTBOX: &str = r#"
[outbox]
lease_ms = 30000
backoff_base_ms = 60000
backoff_cap_ms = 240000
"#;

/// create_refund: the primary over http, then the queue (unless `queue` is false).
fn create_refund(url: &str, queue: bool) -> String {
    let queue_rung = if queue {
        "[[tools.create_refund.rungs]]\nkind = \"queue\"\nsource = \"refund_outbox\"\n"
    } else {
        ""
    };
    format!(
        r#"
[tools.create_refund]
kind = "write"
idempotency = "key"
gate = [{{ field = "amount", op = ">", value = 50, reason = "refunds over $50 wait for a person" }}]
[[tools.create_refund.rungs]]
kind = "http"
source = "refund_primary"
url = "{url}"
timeout_ms = 300
{queue_rung}
{OUTBOX}"#
    )
}

fn hand_off(url: &str, queue: bool) -> String {
    let queue_rung = if queue {
        "[[tools.hand_off.rungs]]\nkind = \"queue\"\nsource = \"ticket_outbox\"\n"
    } else {
        ""
    };
    format!(
        r#"
[tools.hand_off]
kind = "write"
key_from = "conversation"
idempotency = "key"
[[tools.hand_off.rungs]]
kind = "http"
source = "ticket_system"
url = "{url}"
timeout_ms = 200
{queue_rung}
{OUTBOX}"#
    )
}

fn conversation(id: &str) -> CallContext {
    CallContext::new().conversation(id)
}

#[tokio::test]
async fn a_dead_primary_queues_the_write_and_replay_executes_it_once_with_the_same_key() {
    let refunds = Backend::start("refunds").await;
    refunds.set(Mode::Fail(503));
    let h = Harness::new(&create_refund(&refunds.url("/refunds"), true));
    let args = json!({"order_id": "o-1", "amount": 20});

    let queued = h.call("create_refund", args.clone()).await;
    let envelope = &queued.envelope;
    assert_eq!(queued.status, ToolStatus::Queued);
    assert_eq!(envelope["status"], "queued");
    assert_eq!(envelope["degraded"], true);
    assert_eq!(envelope["fidelity"], "deferred");
    assert_eq!(envelope["source"], "refund_outbox");
    let key = envelope["idempotency_key"].as_str().unwrap().to_string();
    assert_eq!(uuid_version(&key), 4, "a key minted up front");
    let detail = envelope["detail"].as_str().unwrap();
    assert!(detail.contains("has NOT executed yet"), "{detail}");
    assert!(detail.contains("pending, not completed"), "{detail}");
    assert!(detail.contains(&key), "{detail}");
    assert_eq!(refunds.received()[0].idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(refunds.received()[0].body, args);

    // Still down: the replay fails and the item backs off.
    let report = h.dispatcher.replay_due("worker-1", 10).await;
    assert_eq!((report.claimed, report.retried), (1, 1), "{report:?}");
    let item = outbox_item(&h.store, &key).await;
    assert_eq!(item.state, OutboxState::Pending);
    assert!(item.last_error.as_deref().unwrap().contains("503"), "{item:?}");
    assert!(item.next_attempt_unix_ms >= h.clock.now_unix_ms() + 50_000, "backed off: {item:?}");

    // Back up, but not yet due; then due.
    refunds.set(Mode::Up);
    assert_eq!(h.dispatcher.replay_due("worker-1", 10).await.claimed, 0);
    h.clock.advance_ms(60_000);
    let report = h.dispatcher.replay_due("worker-1", 10).await;
    assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
    assert_eq!(refunds.executions(), 1);
    assert_eq!(refunds.hits(), 3);
    assert!(
        refunds.received().iter().all(|r| r.idempotency_key.as_deref() == Some(key.as_str())),
        "every attempt carried the original key"
    );
    assert_eq!(outbox_item(&h.store, &key).await.state, OutboxState::Done);
    assert_eq!(h.dispatcher.replay_due("worker-1", 10).await.claimed, 0);

    // The key's stored result is now the final `ok`.
    let repeat = h.call_with("create_refund", args, with_key(&key)).await.unwrap();
    assert!(repeat.replayed);
    assert_eq!(repeat.status, ToolStatus::Ok);
    assert_eq!(repeat.envelope["result"]["id"], "refunds_1");
    assert_eq!(repeat.envelope["idempotency_key"], key.as_str());
    assert!(repeat.envelope["detail"].as_str().unwrap().contains("executed after being queued"));
    assert_eq!(refunds.hits(), 3, "a repeat sends nothing");
    assert_eq!(
        h.observer.events(),
        [
            "served create_refund refund_outbox queued",
            "replayed create_refund retry",
            "replayed create_refund done"
        ]
    );
}

#[tokio::test]
async fn a_repeated_key_returns_the_stored_result_and_other_arguments_are_a_mismatch() {
    let refunds = Backend::start("refunds").await;
    let h = Harness::new(&create_refund(&refunds.url("/refunds"), true));

    let first = h
        .call_with("create_refund", json!({"order_id": "o-2", "amount": 10}), with_key("k-2"))
        .await
        .unwrap();
    assert_eq!(first.status, ToolStatus::Ok);
    assert_eq!(first.envelope["degraded"], false);
    assert_eq!(first.envelope["idempotency_key"], "k-2");
    assert_eq!(refunds.received()[0].idempotency_key.as_deref(), Some("k-2"));

    // The same arguments in another key order are the same request.
    let repeat = h
        .call_with("create_refund", json!({"amount": 10, "order_id": "o-2"}), with_key("k-2"))
        .await
        .unwrap();
    assert!(repeat.replayed);
    assert_eq!(repeat.envelope, first.envelope);
    assert_eq!(repeat.served_by.as_deref(), Some("refund_primary"));
    assert_eq!(refunds.hits(), 1);

    for bad in ["", "has space", "line\nbreak"] {
        let result = h
            .call_with("create_refund", json!({"order_id": "o-2", "amount": 10}), with_key(bad))
            .await;
        assert!(matches!(result, Err(ToolError::BadArgs(_))), "{bad:?}: {result:?}");
    }

    let other = h
        .call_with("create_refund", json!({"order_id": "o-2", "amount": 30}), with_key("k-2"))
        .await;
    assert!(
        matches!(&other, Err(ToolError::KeyMismatch { key, tool }) if key == "k-2" && tool == "create_refund"),
        "{other:?}"
    );
    assert_eq!(refunds.hits(), 1);
}

#[tokio::test]
async fn a_concurrent_duplicate_is_in_flight() {
    let refunds = Backend::start("refunds").await;
    refunds.set(Mode::Hang);
    let h = Harness::new(
        &create_refund(&refunds.url("/refunds"), true)
            .replace("timeout_ms = 300", "timeout_ms = 3000"),
    );
    let args = json!({"order_id": "o-3", "amount": 10});

    let dispatcher = Arc::clone(&h.dispatcher);
    let first_args = args.clone();
    let first = tokio::spawn(async move {
        dispatcher.call(&with_key("k-3"), "create_refund", first_args).await.unwrap()
    });
    refunds.wait_for_hits(1).await;

    let duplicate = h.call_with("create_refund", args, with_key("k-3")).await;
    assert!(
        matches!(&duplicate, Err(ToolError::KeyInFlight { key, retry_after_ms }) if key == "k-3" && *retry_after_ms > 0),
        "{duplicate:?}"
    );

    refunds.set(Mode::Up);
    assert_eq!(first.await.unwrap().status, ToolStatus::Ok);
    assert_eq!((refunds.hits(), refunds.executions()), (1, 1));
}

#[tokio::test]
async fn a_timeout_after_sending_queues_and_a_deduplicating_backend_executes_once() {
    let refunds = Backend::start("refunds").await;
    refunds.set(Mode::ExecuteThenHang);
    let h = Harness::new(&create_refund(&refunds.url("/refunds"), true));
    let args = json!({"order_id": "o-4", "amount": 40});

    let queued = h.call("create_refund", args.clone()).await;
    assert_eq!(queued.status, ToolStatus::Queued);
    let key = queued.envelope["idempotency_key"].as_str().unwrap().to_string();
    assert_eq!(refunds.executions(), 1, "the refund ran before the backend hung");
    // It may have executed (it did): never "NOT executed".
    let detail = queued.envelope["detail"].as_str().unwrap();
    assert!(detail.contains("may or may not have executed"), "{detail}");
    assert!(detail.contains("rein will settle it with the same key"), "{detail}");
    assert!(!detail.contains("NOT executed"), "{detail}");
    assert_eq!(queued.envelope["outcome_unknown"], true);
    assert!(outbox_item(&h.store, &key).await.outcome_unknown);

    refunds.set(Mode::Up);
    let report = h.dispatcher.replay_due("worker-1", 10).await;
    assert_eq!(report.done, 1, "{report:?}");
    let keys: Vec<_> = refunds.received().into_iter().map(|r| r.idempotency_key).collect();
    assert_eq!(keys, [Some(key.clone()), Some(key.clone())], "the replay resent the same key");
    assert_eq!(refunds.executions(), 1, "exactly one refund");

    let repeat = h.call_with("create_refund", args, with_key(&key)).await.unwrap();
    assert_eq!(repeat.status, ToolStatus::Ok);
    assert_eq!(repeat.envelope["result"]["id"], "refunds_1");
}

#[tokio::test]
async fn a_hand_off_keyed_by_its_conversation_opens_one_ticket() {
    let tickets = Backend::start("tickets").await;
    tickets.set(Mode::ExecuteThenHang);
    let h = Harness::new(&hand_off(&tickets.url("/tickets"), true));
    let args = json!({"summary": "customer wants a person"});

    let first = h.call_with("hand_off", args.clone(), conversation("c-42")).await.unwrap();
    assert_eq!(first.status, ToolStatus::Queued);
    assert_eq!(first.envelope["idempotency_key"], "hand_off:c-42");
    assert_eq!(tickets.executions(), 1, "the ticket system got it before timing out");

    // The agent repeats the call in the same conversation, with no key.
    let repeat = h.call_with("hand_off", args.clone(), conversation("c-42")).await.unwrap();
    assert!(repeat.replayed);
    assert_eq!(repeat.status, ToolStatus::Queued);
    assert_eq!(tickets.hits(), 1, "the repeat sent nothing");

    tickets.set(Mode::Up);
    assert_eq!(h.dispatcher.replay_due("worker-1", 10).await.done, 1);
    let after = h.call_with("hand_off", args.clone(), conversation("c-42")).await.unwrap();
    assert_eq!(after.status, ToolStatus::Ok);
    assert!(after.replayed);
    assert_eq!(tickets.executions(), 1, "one conversation, one ticket");
    assert!(
        tickets.received().iter().all(|r| r.idempotency_key.as_deref() == Some("hand_off:c-42"))
    );

    let missing = h.call_with("hand_off", args, CallContext::new()).await;
    assert!(matches!(missing, Err(ToolError::MissingConversation { .. })), "{missing:?}");
}

#[tokio::test]
async fn without_a_queue_an_unknown_outcome_keeps_the_key_until_its_lease_expires() {
    let tickets = Backend::start("tickets").await;
    tickets.set(Mode::ExecuteThenHang);
    let h = Harness::new(&hand_off(&tickets.url("/tickets"), false));
    let args = json!({"summary": "customer wants a person"});

    let first = h.call_with("hand_off", args.clone(), conversation("c-7")).await.unwrap();
    assert_eq!(first.status, ToolStatus::Refused);
    assert_eq!(first.envelope["idempotency_key"], "hand_off:c-7");
    let detail = first.envelope["detail"].as_str().unwrap();
    assert!(detail.contains("may or may not have executed"), "{detail}");

    // Within the key's lease a retry is told the key is in flight, and for how long at most;
    // nothing is sent.
    let soon = h.call_with("hand_off", args.clone(), conversation("c-7")).await;
    let Err(ToolError::KeyInFlight { retry_after_ms, .. }) = soon else {
        panic!("expected KeyInFlight, got {soon:?}");
    };
    assert!(retry_after_ms > 0 && retry_after_ms <= 5_201, "{retry_after_ms}");
    assert_eq!(tickets.hits(), 1);
    // Waiting what the 409 said is enough: the retry takes the key over and resends it; the
    // backend deduplicates.
    tickets.set(Mode::Up);
    h.clock.advance_ms(i64::try_from(retry_after_ms).unwrap());
    let later = h.call_with("hand_off", args, conversation("c-7")).await.unwrap();
    assert_eq!(later.status, ToolStatus::Ok);
    assert!(!later.replayed);
    assert_eq!((tickets.hits(), tickets.executions()), (2, 1));
    assert_eq!(tickets.received()[1].idempotency_key.as_deref(), Some("hand_off:c-7"));
}

#[tokio::test]
async fn a_refused_connection_sends_nothing_and_frees_the_key() {
    let h = Harness::new(&create_refund(&dead_url("/refunds").await, false));

    let refused = h
        .call_with("create_refund", json!({"order_id": "o-5", "amount": 5}), with_key("k-5"))
        .await
        .unwrap();
    assert_eq!(refused.status, ToolStatus::Refused);
    let detail = refused.envelope["detail"].as_str().unwrap();
    assert!(detail.contains("It has NOT executed"), "{detail}");

    // The key was let go: the same key with corrected arguments starts afresh.
    let again = h
        .call_with("create_refund", json!({"order_id": "o-5", "amount": 6}), with_key("k-5"))
        .await
        .unwrap();
    assert_eq!(again.status, ToolStatus::Refused);
    assert!(!again.replayed);
}

#[tokio::test]
async fn a_4xx_is_the_final_answer_for_the_key() {
    let refunds = Backend::start("refunds").await;
    refunds.set(Mode::Reject(400, "order o-9 is already refunded".into()));
    let h = Harness::new(&create_refund(&refunds.url("/refunds"), true));
    let args = json!({"order_id": "o-9", "amount": 5});

    let refused = h.call_with("create_refund", args.clone(), with_key("k-9")).await.unwrap();
    assert_eq!(refused.status, ToolStatus::Refused);
    assert!(refused.envelope["detail"].as_str().unwrap().contains("order o-9 is already refunded"));
    assert_eq!(h.store.outbox_stats().await.unwrap().pending, 0, "a rejected write is not queued");

    let repeat = h.call_with("create_refund", args, with_key("k-9")).await.unwrap();
    assert!(repeat.replayed);
    assert_eq!(repeat.envelope, refused.envelope);
    assert_eq!(refunds.hits(), 1);
}

#[tokio::test]
async fn a_replay_the_primary_rejects_fails_for_good() {
    let refunds = Backend::start("refunds").await;
    refunds.set(Mode::Fail(503));
    let h = Harness::new(&create_refund(&refunds.url("/refunds"), true));
    let args = json!({"order_id": "o-10", "amount": 5});
    let key = h.call("create_refund", args.clone()).await.envelope["idempotency_key"]
        .as_str()
        .unwrap()
        .to_string();

    refunds.set(Mode::Reject(422, "order o-10 is closed".into()));
    let report = h.dispatcher.replay_due("worker-1", 10).await;
    assert_eq!(report.failed, 1, "{report:?}");
    let item = outbox_item(&h.store, &key).await;
    assert_eq!(item.state, OutboxState::Failed);
    assert!(item.last_error.as_deref().unwrap().contains("422"));

    let repeat = h.call_with("create_refund", args, with_key(&key)).await.unwrap();
    assert_eq!(repeat.status, ToolStatus::Refused);
    let detail = repeat.envelope["detail"].as_str().unwrap();
    assert!(detail.contains("order o-10 is closed") && detail.contains("NOT executed"), "{detail}");
    assert_eq!(refunds.executions(), 0);
}

#[tokio::test]
async fn an_item_whose_worker_crashed_is_claimed_again_after_its_lease() {
    let refunds = Backend::start("refunds").await;
    refunds.set(Mode::Fail(503));
    let h = Harness::new(&create_refund(&refunds.url("/refunds"), true));
    let key = h.call("create_refund", json!({"order_id": "o-11", "amount": 5})).await.envelope
        ["idempotency_key"]
        .as_str()
        .unwrap()
        .to_string();

    // A 503 says the backend did not process it: the outcome is known.
    assert!(!outbox_item(&h.store, &key).await.outcome_unknown);
    // A worker claims it and dies before finishing.
    let now = h.clock.now_unix_ms();
    assert_eq!(h.store.outbox_claim("crashed", now, 30_000, 10).await.unwrap().len(), 1);
    refunds.set(Mode::Up);
    assert_eq!(h.dispatcher.replay_due("worker-2", 10).await.claimed, 0, "its lease is live");

    h.clock.advance_ms(30_001);
    let report = h.dispatcher.replay_due("worker-2", 10).await;
    assert_eq!(report.done, 1, "{report:?}");
    assert!(outbox_item(&h.store, &key).await.outcome_unknown, "the crashed send may have run");
    assert_eq!(refunds.executions(), 1);
    assert_eq!(refunds.received().last().unwrap().idempotency_key.as_deref(), Some(key.as_str()));
}

#[tokio::test]
async fn a_busy_write_lets_its_key_go() {
    let refunds = Backend::start("refunds").await;
    refunds.set(Mode::Hang);
    let h = Harness::new(&format!(
        "[bulkheads.refund_primary]\nmax_concurrent = 1\nretry_after_ms = 100\n{}",
        create_refund(&refunds.url("/refunds"), true)
            .replace("timeout_ms = 300", "timeout_ms = 3000")
    ));
    let dispatcher = Arc::clone(&h.dispatcher);
    let first = tokio::spawn(async move {
        dispatcher
            .call(&with_key("k-a"), "create_refund", json!({"order_id": "a", "amount": 1}))
            .await
            .unwrap()
    });
    refunds.wait_for_hits(1).await;

    let args = json!({"order_id": "b", "amount": 1});
    let busy = h.call_with("create_refund", args.clone(), with_key("k-b")).await.unwrap();
    assert_eq!(busy.status, ToolStatus::Busy);
    assert_eq!(busy.envelope["retry_after_ms"], 100);
    assert_eq!(busy.envelope["idempotency_key"], "k-b");

    refunds.set(Mode::Up);
    first.await.unwrap();
    let retry = h.call_with("create_refund", args, with_key("k-b")).await.unwrap();
    assert_eq!(retry.status, ToolStatus::Ok, "the busy call's key was free again");
    assert!(!retry.replayed);
}

#[tokio::test]
async fn the_spawned_replay_worker_drains_the_outbox() {
    let refunds = Backend::start("refunds").await;
    refunds.set(Mode::Fail(503));
    let h = Harness::new(&create_refund(&refunds.url("/refunds"), true));
    let key = h.call("create_refund", json!({"order_id": "o-12", "amount": 5})).await.envelope
        ["idempotency_key"]
        .as_str()
        .unwrap()
        .to_string();

    refunds.set(Mode::Up);
    let worker =
        Arc::clone(&h.dispatcher).spawn_replay_worker("worker-1".into(), Duration::from_millis(10));
    let drained = tokio::time::timeout(Duration::from_secs(5), async {
        while outbox_item(&h.store, &key).await.state != OutboxState::Done {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    worker.abort();
    assert!(drained.is_ok(), "the worker did not drain the outbox");
    assert_eq!(refunds.executions(), 1);
}

fn uuid_version(key: &str) -> u32 {
    // xxxxxxxx-xxxx-Vxxx-...
    key.chars().nth(14).and_then(|c| c.to_digit(16)).unwrap_or(0)
}

#[tokio::test]
async fn finished_keys_are_forgotten_after_their_retention_and_queued_writes_never_are() {
    let refunds = Backend::start("refunds").await;
    let h = Harness::new(&create_refund(&refunds.url("/refunds"), true));
    let done = h
        .call_with("create_refund", json!({"order_id": "o-9", "amount": 5}), with_key("k-done"))
        .await
        .unwrap();
    assert_eq!(done.status, ToolStatus::Ok);
    refunds.set(Mode::Fail(503));
    let queued = h
        .call_with("create_refund", json!({"order_id": "o-10", "amount": 6}), with_key("k-queued"))
        .await
        .unwrap();
    assert_eq!(queued.status, ToolStatus::Queued);

    // Within the retention (default seven days) nothing goes.
    assert_eq!(h.dispatcher.prune().await.unwrap(), Default::default());
    h.clock.advance_ms(8 * 24 * 3_600_000);
    let pruned = h.dispatcher.prune().await.unwrap();
    assert_eq!((pruned.keys, pruned.outbox, pruned.holds), (1, 0, 0), "{pruned:?}");

    // The queued write outlived its retention: it is still there and replays once.
    refunds.set(Mode::Up);
    let report = h.dispatcher.replay_due("worker-1", 10).await;
    assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
    assert_eq!(refunds.executions(), 2);

    // The forgotten key runs again (as an expired Stripe key does); the backend's own key check
    // is what keeps that harmless.
    let hits = refunds.hits();
    let again = h
        .call_with("create_refund", json!({"order_id": "o-9", "amount": 5}), with_key("k-done"))
        .await
        .unwrap();
    assert!(!again.replayed);
    assert_eq!(refunds.hits(), hits + 1);
    assert_eq!(refunds.executions(), 2, "the backend saw the key before");
}
