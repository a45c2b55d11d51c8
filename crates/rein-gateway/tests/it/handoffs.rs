//! Escalation through the gateway: each trigger sends the conversation to a person once, with a
//! packet kept in the store and delivered through the route's hand-off tool (an ordinary write
//! tool keyed by the conversation) to a real HTTP ticket backend started by the test; the
//! reviewer's side (`/admin/handoffs`, decisions, the edit rate); and each trigger's count in
//! `/metrics`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::gateway::{Running, start_with};
use crate::ladder::HEAD;

const ADMIN: &str = "admin-secret-1";
const CLIENT: &str = "client-secret-1";
const HANDED_OFF: &str =
    "I've passed this to a person on our team; they will reply within 2 hours.";

// ---------------------------------------------------------------------------------------------
// The backends: orders, help-center search, tickets
// ---------------------------------------------------------------------------------------------

/// A ticket system that opens one ticket per idempotency key (as Stripe executes once per
/// key), logging every POST. `hang_first`: the first POST opens its ticket, then never answers.
#[derive(Debug, Default)]
struct TicketLog {
    posts: Mutex<Vec<(Option<String>, Value)>>,
    tickets: Mutex<HashMap<String, Value>>,
    hang_first: std::sync::atomic::AtomicBool,
}

struct Backends {
    url: String,
    tickets: Arc<TicketLog>,
    order_hits: Arc<std::sync::atomic::AtomicUsize>,
}

impl Backends {
    fn posts(&self) -> Vec<(Option<String>, Value)> {
        self.tickets.posts.lock().unwrap().clone()
    }

    fn ticket_count(&self) -> usize {
        self.tickets.tickets.lock().unwrap().len()
    }

    async fn wait_for_tickets(&self, count: usize) {
        for _ in 0..500 {
            if self.ticket_count() >= count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {count} ticket(s); have {}", self.ticket_count());
    }
}

async fn backends() -> Backends {
    let tickets = Arc::new(TicketLog::default());
    let order_hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));

    async fn order(
        State(hits): State<Arc<std::sync::atomic::AtomicUsize>>,
        Path(id): Path<String>,
    ) -> (StatusCode, axum::Json<Value>) {
        hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if id == "4417" || id == "44781" {
            let body = json!({"order_id": id, "status": "out for delivery", "eta": "6 p.m."});
            (StatusCode::OK, axum::Json(body))
        } else {
            (StatusCode::NOT_FOUND, axum::Json(json!({"error": format!("no order {id}")})))
        }
    }
    /// Help-center search: nothing for a query about gift cards, else two articles.
    async fn search(axum::Json(args): axum::Json<Value>) -> axum::Json<Value> {
        let query = args["query"].as_str().unwrap_or_default().to_lowercase();
        if query.contains("gift card") {
            return axum::Json(json!({"results": []}));
        }
        axum::Json(json!({"results": [
            {"id": "140", "title": "Hospital deliveries go to the front desk", "url": "https://help.example/articles/140"},
            {"id": "118", "title": "We deliver to hospitals every day", "url": "https://help.example/articles/118"},
        ]}))
    }
    async fn open_ticket(
        State(log): State<Arc<TicketLog>>,
        headers: HeaderMap,
        body: Bytes,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(String::from);
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let first = {
            let mut posts = log.posts.lock().unwrap();
            posts.push((key.clone(), body.clone()));
            posts.len() == 1
        };
        let ticket = {
            let mut tickets = log.tickets.lock().unwrap();
            let id = key.clone().unwrap_or_else(|| format!("unkeyed-{}", tickets.len()));
            let n = tickets.len() + 1;
            tickets
                .entry(id)
                .or_insert_with(
                    || json!({"ticket": format!("T-{n}"), "conversation": body["conversation_id"]}),
                )
                .clone()
        };
        if first && log.hang_first.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        (StatusCode::OK, axum::Json(ticket)).into_response()
    }

    let app = axum::Router::new()
        .route("/orders/{id}", get(order).with_state(order_hits.clone()))
        .route("/search", post(search))
        .route("/tickets", post(open_ticket).with_state(tickets.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Backends { url: format!("http://{addr}"), tickets, order_hits }
}

/// The tools every test has: the order lookup, help-center search and the hand-off tool.
fn tools(url: &str) -> String {
    format!(
        r#"
[handoffs]
tool = "hand_off"
trace_url = "https://traces.example/runs/{{run_id}}"

[tools.look_up_order]
kind = "read"
detail = {{ rejected_args = "No order {{arg.order_id}}. Ask the customer to check the number." }}

[[tools.look_up_order.rungs]]
kind = "http"
source = "orders"
method = "GET"
url = "{url}/orders/{{order_id}}"
timeout_ms = 2000

[tools.search_help_center]
kind = "read"
evidence = {{ items_at = "/results", id_at = "/id", text_at = "/title", source = "search" }}

[[tools.search_help_center.rungs]]
kind = "http"
source = "help_center"
method = "POST"
url = "{url}/search"
timeout_ms = 2000

[tools.hand_off]
kind = "write"
key_from = "conversation"
idempotency = "key"

[[tools.hand_off.rungs]]
kind = "http"
source = "tickets"
url = "{url}/tickets"
timeout_ms = 300
breaker = {{ failures = 1000, cooldown_ms = 100 }}

[[tools.hand_off.rungs]]
kind = "queue"
source = "ticket_outbox"
timeout_ms = 2000

[outbox]
poll_ms = 50
backoff_base_ms = 20
backoff_cap_ms = 100
lease_ms = 5000
"#
    )
}

fn config(url: &str, route: &str) -> String {
    format!(
        r#"{HEAD}
{tools}

[routes.support]
stopped_reply = {{ template = "I couldn't find order {{{{order_id}}}}. Could you check the number? I've also passed this to the team." }}
handoff_reply = {{ template = "{HANDED_OFF}" }}
{route}

[[routes.support.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim-agent"
"#,
        tools = tools(url)
    )
}

async fn chat(gw: &Running, run: &str, conversation: &str, body: Value) -> reqwest::Response {
    gw.client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(CLIENT)
        .header("x-rein-run-id", run)
        .header("x-rein-conversation-id", conversation)
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn ask(gw: &Running, run: &str, conversation: &str, text: &str) -> reqwest::Response {
    chat(
        gw,
        run,
        conversation,
        json!({"model": "support", "messages": [{"role": "user", "content": text}]}),
    )
    .await
}

async fn tool(gw: &Running, name: &str, run: &str, conversation: &str, args: Value) -> Value {
    gw.client
        .post(gw.url(&format!("/v1/tools/{name}")))
        .bearer_auth(CLIENT)
        .header("x-rein-run-id", run)
        .header("x-rein-conversation-id", conversation)
        .json(&args)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn admin_get(gw: &Running, path: &str) -> (u16, Value) {
    let response = gw.client.get(gw.url(path)).bearer_auth(ADMIN).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn admin_post(gw: &Running, path: &str, body: Value) -> (u16, Value) {
    let response =
        gw.client.post(gw.url(path)).bearer_auth(ADMIN).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn handoffs(gw: &Running) -> Vec<Value> {
    let (status, body) = admin_get(gw, "/admin/handoffs").await;
    assert_eq!(status, 200, "{body}");
    body["handoffs"].as_array().cloned().unwrap_or_default()
}

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response.headers().get(name).and_then(|v| v.to_str().ok()).map(String::from)
}

/// The value of `rein_escalations_total{route,trigger}` in `/metrics`.
async fn escalations(gw: &Running, route: &str, trigger: &str) -> u64 {
    let text = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let series = format!("rein_escalations_total{{route=\"{route}\",trigger=\"{trigger}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |value| value.trim().parse().unwrap())
}

// ---------------------------------------------------------------------------------------------
// The swapped-digit loop: a stop condition hands off once
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_swapped_digit_loop_ends_in_the_decided_reply_and_exactly_one_hand_off() {
    let backends = backends().await;
    let gw = start_with(&config(&backends.url, ""), None).await;
    let tools = json!([{"type": "function", "function": {
        "name": "look_up_order",
        "parameters": {"type": "object", "required": ["order_id"],
                       "properties": {"order_id": {"type": "string", "const": "44718"}}}
    }}]);
    let mut messages = vec![json!({"role": "user", "content": "Where is my order 44718?"})];
    let mut answer = None;
    for _ in 0..6 {
        let body = json!({"model": "support", "messages": messages, "tools": tools,
                          "tool_choice": "required"});
        let response = chat(&gw, "run-1", "conv-1", body).await;
        let outcome = header(&response, "x-rein-outcome");
        let body: Value = response.json().await.unwrap();
        let message = body["choices"][0]["message"].clone();
        let Some(call) = message["tool_calls"].get(0).cloned() else {
            answer = Some((outcome, body));
            break;
        };
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        let envelope = tool(&gw, "look_up_order", "run-1", "conv-1", arguments).await;
        if envelope["status"] == "refused" {
            // The failed lookup gives the model a next step, from the tool's config.
            assert_eq!(envelope["detail"], "No order 44718. Ask the customer to check the number.");
        }
        messages.push(message);
        messages.push(
            json!({"role": "tool", "tool_call_id": call["id"], "content": envelope.to_string()}),
        );
    }
    let (outcome, body) = answer.expect("the loop ends with an answer");
    assert_eq!(outcome.as_deref(), Some("stopped"));
    // The decided reply uses the stop's facts: the order the run kept looking up.
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "I couldn't find order 44718. Could you check the number? I've also passed this to the team."
    );
    assert_eq!(backends.order_hits.load(std::sync::atomic::Ordering::SeqCst), 2);

    // Exactly one hand-off, triggered by the stop, with what the reviewer needs.
    let listed = handoffs(&gw).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["trigger"], "stop_condition");
    assert_eq!(listed[0]["stop_status"], "stopped_repeated_call");
    assert_eq!(listed[0]["conversation_id"], "conv-1");
    assert!(listed[0].get("canary").is_none(), "the canary mark stays in the store");
    let id = listed[0]["id"].as_i64().unwrap();
    let (status, shown) = admin_get(&gw, &format!("/admin/handoffs/{id}")).await;
    assert_eq!(status, 200);
    let packet = &shown["packet"];
    assert_eq!(packet["schema_version"], 1);
    assert_eq!(packet["run_id"], "run-1");
    assert_eq!(packet["route"], "support");
    assert_eq!(packet["customer_message"], "Where is my order 44718?");
    assert_eq!(packet["trace_url"], "https://traces.example/runs/run-1");
    let calls = packet["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "both lookups are in the packet: {calls:?}");
    assert!(calls.iter().all(|c| c["tool"] == "look_up_order" && c["args"]["order_id"] == "44718"));

    // Delivered through the hand-off tool: one ticket, keyed by the conversation.
    backends.wait_for_tickets(1).await;
    let posts = backends.posts();
    assert_eq!(backends.ticket_count(), 1);
    assert_eq!(posts[0].0.as_deref(), Some("hand_off:conv-1"));
    assert_eq!(posts[0].1["trigger"], "stop_condition");
    assert_eq!(escalations(&gw, "support", "stop_condition").await, 1);

    // The stopped run's later calls get the decided reply; no second hand-off.
    let again = ask(&gw, "run-1", "conv-1", "Where is my order 44718?").await;
    assert_eq!(header(&again, "x-rein-outcome").as_deref(), Some("stopped"));
    assert_eq!(handoffs(&gw).await.len(), 1);
    assert_eq!(escalations(&gw, "support", "stop_condition").await, 1);
    gw.stop().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// One ticket per conversation, whoever retries
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_ticket_call_that_times_out_after_reaching_the_ticket_system_makes_one_ticket() {
    let backends = backends().await;
    backends.tickets.hang_first.store(true, std::sync::atomic::Ordering::SeqCst);
    let gw = start_with(&config(&backends.url, "[routes.support.handoff_rules]"), None).await;

    let response = ask(&gw, "run-9", "conv-9", "I want to talk to a person").await;
    assert_eq!(header(&response, "x-rein-outcome").as_deref(), Some("handed_off"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], HANDED_OFF);
    // The first POST opened the ticket and never answered: rein's rung timed out, the write
    // went to the outbox with its key, and the outbox resends it with the same key.
    let wait = async {
        for _ in 0..500 {
            if backends.posts().len() >= 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("rein never resent the ticket");
    };
    wait.await;
    // The caller retries the hand-off itself, through the same tool, for the same conversation:
    // the conversation's key already stands for rein's ticket, so nothing is sent.
    let retried = gw
        .client
        .post(gw.url("/v1/tools/hand_off"))
        .bearer_auth(CLIENT)
        .header("x-rein-conversation-id", "conv-9")
        .json(&json!({"summary": "customer asked for a person"}))
        .send()
        .await
        .unwrap();
    assert_eq!(retried.status(), 422);
    let retried: Value = retried.json().await.unwrap();
    assert_eq!(retried["error"]["param"], "idempotency-key");
    assert!(retried["error"]["message"].as_str().unwrap().contains("hand_off:conv-9"), "{retried}");
    // And the customer sends the same message again.
    let again = ask(&gw, "run-10", "conv-9", "I want to talk to a person").await;
    assert_eq!(header(&again, "x-rein-outcome").as_deref(), Some("handed_off"));
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The ticket backend's own log: every POST carried the conversation's key, and one ticket
    // exists.
    let posts = backends.posts();
    assert!(posts.len() >= 2, "{posts:?}");
    assert!(posts.iter().all(|(key, _)| key.as_deref() == Some("hand_off:conv-9")), "{posts:?}");
    assert_eq!(backends.ticket_count(), 1);
    assert_eq!(handoffs(&gw).await.len(), 1);
    assert_eq!(escalations(&gw, "support", "handoff_rule").await, 1);
    gw.stop().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Each trigger, counted on its own
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_hand_off_rules_read_the_customers_message_first() {
    let backends = backends().await;
    let gw = start_with(&config(&backends.url, "[routes.support.handoff_rules]"), None).await;

    // Asks for a person: handed off before any model is asked.
    let response = ask(&gw, "r-1", "c-person", "Can I speak to a HUMAN please").await;
    assert_eq!(header(&response, "x-rein-outcome").as_deref(), Some("handed_off"));
    assert_eq!(header(&response, "x-rein-attempts").as_deref(), Some("0"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["rein"]["outcome"], "handed_off");

    // The same question in a second run of the conversation.
    let first = ask(&gw, "r-2", "c-again", "Can I change my delivery address?").await;
    assert_eq!(header(&first, "x-rein-outcome").as_deref(), Some("answered"));
    let second = ask(&gw, "r-3", "c-again", "can I change my delivery ADDRESS").await;
    assert_eq!(header(&second, "x-rein-outcome").as_deref(), Some("handed_off"));

    // Search found nothing: the run's next model call goes to a person.
    let found =
        tool(&gw, "search_help_center", "r-4", "c-empty", json!({"query": "gift cards"})).await;
    assert_eq!(found["status"], "ok");
    let response = ask(&gw, "r-4", "c-empty", "Do you sell gift cards?").await;
    assert_eq!(header(&response, "x-rein-outcome").as_deref(), Some("handed_off"));

    let listed = handoffs(&gw).await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    let reasons: Vec<&str> = listed.iter().map(|h| h["reason"].as_str().unwrap()).collect();
    assert!(reasons.iter().any(|r| r.contains("asked for a person")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("same question")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("found nothing")), "{reasons:?}");
    assert_eq!(escalations(&gw, "support", "handoff_rule").await, 3);
    backends.wait_for_tickets(3).await;
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_answer_that_fails_its_checks_after_its_repair_goes_to_a_person_with_its_draft() {
    let backends = backends().await;
    let output = r#"
degraded = { template = "Sorry, I can't answer that right now." }

[routes.support.output]
rules = [{ rule = "cited_ids_returned", ids_at = "/article_ids", source = "search", item = "article" }]

[routes.support.output.schema]
type = "object"
required = ["reply", "article_ids"]
properties = { reply = { type = "string" }, article_ids = { type = "array", minItems = 1, items = { type = "string" } } }
"#;
    let gw = start_with(&config(&backends.url, output), None).await;
    let response = ask(&gw, "r-c", "c-checks", "Can flowers go to an intensive care unit?").await;
    assert_eq!(header(&response, "x-rein-outcome").as_deref(), Some("degraded"));
    assert_eq!(header(&response, "x-rein-reasks").as_deref(), Some("1"), "one repair first");
    let listed = handoffs(&gw).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["trigger"], "checks_failed");
    let id = listed[0]["id"].as_i64().unwrap();
    let (_, shown) = admin_get(&gw, &format!("/admin/handoffs/{id}")).await;
    let draft = shown["packet"]["draft"].as_str().expect("the failed draft is in the packet");
    assert!(draft.starts_with("sim answer"), "the answer that failed: {draft}");
    assert!(shown["packet"]["attempts"]["attempts"].as_array().unwrap().len() >= 2);
    assert_eq!(escalations(&gw, "support", "checks_failed").await, 1);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_gated_action_is_counted_as_an_escalation() {
    let backends = backends().await;
    let refund = format!(
        r#"
[tools.issue_refund]
kind = "write"
gate = [{{ field = "amount", op = ">", value = 50, reason = "refunds over $50 wait for a person" }}]

[[tools.issue_refund.rungs]]
kind = "http"
source = "payments"
url = "{}/tickets"
timeout_ms = 1000
"#,
        backends.url
    );
    let text = config(&backends.url, "")
        .replace("[routes.support]", &format!("{refund}\n[routes.support]"));
    let gw = start_with(&text, None).await;
    let response = ask(&gw, "r-g", "c-gate", "Please refund my order").await;
    assert_eq!(header(&response, "x-rein-outcome").as_deref(), Some("answered"));
    let held = tool(&gw, "issue_refund", "r-g", "c-gate", json!({"amount": 80})).await;
    assert_eq!(held["status"], "pending_approval");
    assert_eq!(escalations(&gw, "support", "gate").await, 1);
    gw.stop().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The reviewer's side
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn reviewers_decide_once_and_the_edit_rate_is_tracked_per_trigger() {
    let backends = backends().await;
    let gw = start_with(&config(&backends.url, "[routes.support.handoff_rules]"), None).await;
    for n in 0..3 {
        let response = ask(&gw, &format!("r-{n}"), &format!("c-{n}"), "I want a real person").await;
        assert_eq!(header(&response, "x-rein-outcome").as_deref(), Some("handed_off"));
    }
    let ids: Vec<i64> = handoffs(&gw).await.iter().map(|h| h["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    let decide = |id: i64, body: Value| {
        let gw = &gw;
        async move { admin_post(gw, &format!("/admin/handoffs/{id}/decision"), body).await }
    };
    let (status, body) = decide(ids[0], json!({"decision": "approve", "by": "ana"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["handoff"]["decision"], "approved");
    let (status, _) = decide(ids[0], json!({"decision": "reject", "by": "ben"})).await;
    assert_eq!(status, 409, "only the first decision counts");
    let (status, body) = decide(ids[1], json!({"decision": "edit", "by": "ana"})).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("`draft`"), "{body}");
    let (status, _) = decide(
        ids[1],
        json!({"decision": "edit", "by": "ana", "draft": "We can't deliver to an ICU."}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = decide(ids[2], json!({"decision": "maybe", "by": "ana"})).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("`decision`"), "{body}");
    let (status, _) = decide(9_999, json!({"decision": "approve", "by": "ana"})).await;
    assert_eq!(status, 404);

    let (status, stats) = admin_get(&gw, "/admin/handoffs/stats").await;
    assert_eq!(status, 200, "{stats}");
    let row = &stats["triggers"][0];
    assert_eq!(row["trigger"], "handoff_rule");
    assert_eq!(
        (row["handoffs"].as_i64(), row["decided"].as_i64(), row["changed"].as_i64()),
        (Some(3), Some(2), Some(1))
    );
    assert_eq!(row["edit_rate"], 0.5);
    let (status, pending) = admin_get(&gw, "/admin/handoffs?state=pending").await;
    assert_eq!(status, 200);
    assert_eq!(pending["handoffs"].as_array().unwrap().len(), 1);
    let (status, _) = admin_get(&gw, "/admin/handoffs?state=maybe").await;
    assert_eq!(status, 400);
    // Behind the admin key.
    let anonymous = gw.client.get(gw.url("/admin/handoffs")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let client = gw.client.get(gw.url("/admin/handoffs")).bearer_auth(CLIENT).send().await.unwrap();
    assert_eq!(client.status(), 401);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn canary_drafts_join_the_queue_marked_only_in_the_store() {
    let backends = backends().await;
    let canaries = r#"
canary_rate = 1.0
[[handoffs.canaries]]
message = "Can flowers go to an intensive care unit?"
draft = "Yes, we deliver to every intensive care unit."
"#;
    let text = config(&backends.url, "[routes.support.handoff_rules]").replace(
        "trace_url = \"https://traces.example/runs/{run_id}\"",
        &format!("trace_url = \"https://traces.example/runs/{{run_id}}\"\n{canaries}"),
    );
    let gw = start_with(&text, None).await;
    let response = ask(&gw, "r-k", "c-k", "I need a person").await;
    assert_eq!(header(&response, "x-rein-outcome").as_deref(), Some("handed_off"));
    let listed = handoffs(&gw).await;
    assert_eq!(listed.len(), 2, "the hand-off and its canary: {listed:?}");
    assert!(listed.iter().all(|h| h.get("canary").is_none()));
    let canary = listed.iter().find(|h| h["conversation_id"] != "c-k").unwrap();
    let id = canary["id"].as_i64().unwrap();
    let (_, shown) = admin_get(&gw, &format!("/admin/handoffs/{id}")).await;
    assert!(shown.get("canary").is_none());
    assert_eq!(shown["packet"]["draft"], "Yes, we deliver to every intensive care unit.");
    // A reviewer who rejects it caught it.
    let (status, _) = admin_post(
        &gw,
        &format!("/admin/handoffs/{id}/decision"),
        json!({"decision": "reject", "by": "ana"}),
    )
    .await;
    assert_eq!(status, 200);
    let (_, stats) = admin_get(&gw, "/admin/handoffs/stats").await;
    let rows = stats["triggers"].as_array().unwrap();
    let coverage =
        rows.iter().find(|r| r["trigger"] == "coverage").expect("the canary poses as coverage");
    assert_eq!(
        (coverage["canaries"].as_i64(), coverage["canaries_caught"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(coverage["decided"], 0, "a canary is never in the edit rate");
    gw.stop().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Degraded modes that act, with every model tier down
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn with_every_tier_down_the_degraded_mode_answers_from_the_tools() {
    let backends = backends().await;
    let text = format!(
        r#"{HEAD}
{tools}

[routes.shop]
degraded = {{ template = "Sorry, we can't answer right now." }}

[[routes.shop.degraded_rules]]
name = "order_status"
pattern = '(?i)\border\s*#?\s*(?P<order_id>\d{{4,}})'
tool = "look_up_order"
args = {{ order_id = "{{order_id}}" }}
template = "Order {{{{order_id}}}} is {{{{status}}}} and should arrive by {{{{eta}}}}"

[[routes.shop.degraded_rules]]
name = "policy_link"
pattern = '(?i)\b(policy|refund|return|deliver|delivery)\b'
tool = "search_help_center"
args = {{ query = "{{message}}" }}
template = "This article should help: {{{{results.0.url}}}}"

[[routes.shop.degraded_rules]]
name = "person"
template = "A person will reply within 2 hours."
handoff = true

[[routes.shop.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:500"
attempts = 1

[[routes.shop.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim:529"
attempts = 1
"#,
        tools = tools(&backends.url)
    );
    let gw = start_with(&text, None).await;
    let shop = |run: &'static str, conversation: &'static str, text: &'static str| {
        let gw = &gw;
        async move {
            let body = json!({"model": "shop", "messages": [{"role": "user", "content": text}]});
            let response = chat(gw, run, conversation, body).await;
            let outcome = header(&response, "x-rein-outcome");
            let body: Value = response.json().await.unwrap();
            (
                outcome,
                body["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string(),
            )
        }
    };
    let (outcome, reply) = shop("d-1", "dc-1", "Where is order 4417?").await;
    assert_eq!(outcome.as_deref(), Some("degraded"));
    assert_eq!(reply, "Order 4417 is out for delivery and should arrive by 6 p.m.");
    let (_, reply) = shop("d-2", "dc-2", "What is your refund policy?").await;
    assert_eq!(reply, "This article should help: https://help.example/articles/140");
    // An order the backend does not know: its rule gives way to the next that applies.
    let (_, reply) = shop("d-3", "dc-3", "What about order 9999 delivery?").await;
    assert_eq!(reply, "This article should help: https://help.example/articles/140");
    let (outcome, reply) = shop("d-4", "dc-4", "Do you sell gift cards?").await;
    assert_eq!(outcome.as_deref(), Some("degraded"));
    assert_eq!(reply, "A person will reply within 2 hours.");
    let listed = handoffs(&gw).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["trigger"], "degraded");
    assert_eq!(listed[0]["conversation_id"], "dc-4");
    backends.wait_for_tickets(1).await;

    // The kill switch sends the route to the same degraded mode, counted and logged.
    let (status, _) = admin_post(
        &gw,
        "/admin/kill",
        json!({"route": "shop", "engaged": true, "reason": "answers went bad after the prompt edit"}),
    )
    .await;
    assert_eq!(status, 200);
    let (outcome, reply) = shop("d-5", "dc-5", "Where is order 44781?").await;
    assert_eq!(outcome.as_deref(), Some("degraded"));
    assert_eq!(reply, "Order 44781 is out for delivery and should arrive by 6 p.m.");

    let metrics = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for series in [
        "rein_kill_switch_diversions_total{route=\"shop\"} 1",
        "rein_degraded_acted_total{route=\"shop\",rule=\"order_status\"} 2",
        "rein_degraded_acted_total{route=\"shop\",rule=\"policy_link\"} 2",
        "rein_degraded_acted_total{route=\"shop\",rule=\"person\"} 1",
        "rein_escalations_total{route=\"shop\",trigger=\"degraded\"} 1",
    ] {
        assert!(metrics.lines().any(|line| line == series), "{series} missing in:\n{metrics}");
    }
    gw.stop().await.unwrap();
}
