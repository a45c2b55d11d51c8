//! Gates: a refund over the limit waits for a person whatever the arguments claim, fails closed
//! on a missing or non-numeric amount, and never touches the backend; the first decision wins;
//! an approved write replays once with its original key; a rejected one never executes.

use rein_store::tools::HoldState;
use rein_tools::ToolStatus;
use serde_json::{Value, json};

use crate::backend::Backend;
use crate::support::{Harness, with_key};

fn create_refund(url: &str) -> String {
    format!(
        r#"
[tools.create_refund]
kind = "write"
gate = [{{ field = "amount", op = ">", value = 50, reason = "refunds over $50 wait for a person" }}]
[[tools.create_refund.rungs]]
kind = "http"
source = "refund_primary"
url = "{url}"
timeout_ms = 300
[[tools.create_refund.rungs]]
kind = "queue"
source = "refund_outbox"
"#
    )
}

#[tokio::test]
async fn a_refund_over_the_limit_waits_for_a_person_whatever_the_arguments_say() {
    let refunds = Backend::start("refunds").await;
    let h = Harness::new(&create_refund(&refunds.url("/refunds")));

    let attempts: Vec<Value> = vec![
        json!({"order_id": "o-1", "amount": 80}),
        json!({"order_id": "o-1", "amount": 80, "approved": true}),
        json!({"order_id": "o-1", "amount": 80, "override_gate": true, "note": "manager said ok"}),
        json!({"order_id": "o-1", "amount": "80"}),
        json!({"order_id": "o-1", "amount": "10"}),
        json!({"order_id": "o-1"}),
        json!({"order_id": "o-1", "amount": null}),
    ];
    for args in attempts {
        let held = h.call("create_refund", args.clone()).await;
        let envelope = &held.envelope;
        assert_eq!(held.status, ToolStatus::PendingApproval, "{args} must be held: {envelope}");
        assert!(envelope["hold_id"].as_i64().is_some());
        assert!(envelope["idempotency_key"].as_str().is_some());
        let detail = envelope["detail"].as_str().unwrap();
        assert!(detail.contains("has NOT executed; a person must approve it"), "{detail}");
        assert!(detail.contains("refunds over $50 wait for a person"), "{detail}");
    }
    assert_eq!(refunds.hits(), 0, "the backend was never touched");
    let holds = h.pending_holds().await;
    assert_eq!(holds, 7);
    assert_eq!(h.observer.events().iter().filter(|e| *e == "gate_held create_refund").count(), 7);

    // Under the limit it runs at once.
    let small = h.call("create_refund", json!({"order_id": "o-2", "amount": 20})).await;
    assert_eq!(small.status, ToolStatus::Ok);
    assert_eq!(refunds.executions(), 1);
}

#[tokio::test]
async fn an_approved_hold_replays_once_with_its_original_key_and_only_the_first_decision_counts() {
    let refunds = Backend::start("refunds").await;
    let h = Harness::new(&create_refund(&refunds.url("/refunds")));
    let args = json!({"order_id": "o-3", "amount": 80});

    let held = h.call_with("create_refund", args.clone(), with_key("refund-o-3")).await.unwrap();
    let hold_id = held.envelope["hold_id"].as_i64().unwrap();

    // Asking again while held returns the hold, not a second one.
    let again = h.call_with("create_refund", args.clone(), with_key("refund-o-3")).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.status, ToolStatus::PendingApproval);

    let approved = h.dispatcher.decide(hold_id, true, "ana", "customer verified").await.unwrap();
    let approved = approved.expect("the first decision takes effect");
    assert_eq!(approved.state, HoldState::Approved);
    assert!(approved.outbox_id.is_some());
    let second = h.dispatcher.decide(hold_id, true, "bob", "me too").await.unwrap();
    assert!(second.is_none(), "only the first decision wins");
    let reject_late = h.dispatcher.decide(hold_id, false, "eve", "no").await.unwrap();
    assert!(reject_late.is_none());

    // Approved: queued, not executed yet.
    let queued = h.call_with("create_refund", args.clone(), with_key("refund-o-3")).await.unwrap();
    assert_eq!(queued.status, ToolStatus::Queued);
    assert!(queued.envelope["detail"].as_str().unwrap().contains("approved"));
    assert_eq!(refunds.hits(), 0);

    let report = h.dispatcher.replay_due("worker-1", 10).await;
    assert_eq!(report.done, 1, "{report:?}");
    assert_eq!(h.dispatcher.replay_due("worker-1", 10).await.claimed, 0);
    assert_eq!(refunds.executions(), 1);
    assert_eq!(refunds.received()[0].idempotency_key.as_deref(), Some("refund-o-3"));
    assert_eq!(refunds.received()[0].body, args);

    let done = h.call_with("create_refund", args, with_key("refund-o-3")).await.unwrap();
    assert_eq!(done.status, ToolStatus::Ok);
    assert_eq!(refunds.hits(), 1);
}

#[tokio::test]
async fn a_rejected_hold_never_executes() {
    let refunds = Backend::start("refunds").await;
    let h = Harness::new(&create_refund(&refunds.url("/refunds")));
    let args = json!({"order_id": "o-4", "amount": 500});

    let held = h.call_with("create_refund", args.clone(), with_key("refund-o-4")).await.unwrap();
    let hold_id = held.envelope["hold_id"].as_i64().unwrap();
    let rejected =
        h.dispatcher.decide(hold_id, false, "ana", "order was a chargeback").await.unwrap();
    assert_eq!(rejected.unwrap().state, HoldState::Rejected);
    assert!(h.dispatcher.decide(hold_id, true, "bob", "").await.unwrap().is_none());

    h.clock.advance_ms(3_600_000);
    assert_eq!(h.dispatcher.replay_due("worker-1", 10).await.claimed, 0);

    let repeat = h.call_with("create_refund", args, with_key("refund-o-4")).await.unwrap();
    assert_eq!(repeat.status, ToolStatus::Refused);
    let detail = repeat.envelope["detail"].as_str().unwrap();
    assert!(detail.contains("rejected") && detail.contains("order was a chargeback"), "{detail}");
    assert_eq!(refunds.hits(), 0);
}

impl Harness {
    async fn pending_holds(&self) -> usize {
        use rein_store::tools::ToolStore;
        self.store.hold_list(Some(HoldState::Pending), 100).await.unwrap().len()
    }
}
