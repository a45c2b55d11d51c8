//! The validation ladder through HTTP: a real gateway on 127.0.0.1:0 in front of in-process
//! simulators whose answers are scripted (`sim:say:b64=…`), spoken to in both wire formats.
//! Code repairs without a second call, a re-ask after an invented citation judged against the
//! caller's evidence, a higher ceiling after a cut-off, the safe reply when every tier fails its
//! checks or the model refuses, a content filter in the caller's format, webhook rules against
//! a real local HTTP server (a problem → re-ask; past its timeout → a failed check, never a
//! pass), and a JSON Schema route asked with `response_format: json_schema`. Then the
//! `output` config: every mistake named by key (snapshots), and the shipped example.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use rein_runtime::config::Config;
use rein_sim::say_spec;
use serde_json::{Value, json};

use crate::gateway::{Running, start_with};

const KEY: Option<&str> = Some("client-secret-1");
const SAFE_REPLY: &str = "A person will reply within 2 hours.";

const GOOD: &str = r#"{"reply":"Changes close 48 hours before delivery.","article_ids":["140"],"needs_human":false}"#;
const INVENTED: &str = r#"{"reply":"Changes close 48 hours before delivery.","article_ids":["212"],"needs_human":false}"#;

/// The server, store and both simulated providers, for test configs to add routes to.
pub(crate) const HEAD: &str = r#"
[server]
listen = "127.0.0.1:0"
client_keys_env = ["CLIENT_KEY"]
admin_key_env = "ADMIN_KEY"

[store]
sqlite_path = ":memory:"

[providers.sim-openai]
kind = "sim"
format = "openai"

[providers.sim-anthropic]
kind = "sim"
format = "anthropic"
"#;

/// The support agent's contract: the schema, cited ids among the search results, numbers in
/// the cited articles.
const SUPPORT_OUTPUT: &str = r#"
rules = [
  { rule = "cited_ids_returned", ids_at = "/article_ids", source = "search", item = "article" },
  { rule = "numbers_in_cited_text", text_at = "/reply", ids_at = "/article_ids", item = "article" },
]

[routes.ROUTE.output.schema]
type = "object"
required = ["reply", "article_ids", "needs_human"]
additionalProperties = false

[routes.ROUTE.output.schema.properties]
reply = { type = "string" }
article_ids = { type = "array", items = { type = "string" } }
order_id = { type = "string" }
needs_human = { type = "boolean" }
reason = { type = "string", enum = ["refund", "delivery", "other"] }
"#;

/// A tier of a route: its name, provider, model and any extra keys.
fn tier(name: &str, provider: &str, model: &str, extra: &str) -> String {
    format!("name = \"{name}\"\nprovider = \"{provider}\"\nmodel = \"{model}\"\n{extra}")
}

/// A route with fast clocks, the safe reply, these tiers and this `output` table body (`None`:
/// no output table at all). `ROUTE` in the output text stands for the route's name.
fn route(name: &str, tiers: &[String], output: Option<&str>) -> String {
    let mut text = format!(
        "\n[routes.{name}]\ndeadline_ms = 10000\nfirst_token_ms = 3000\nstream_idle_ms = 3000\nattempt_ms = 4000\nbackoff_base_ms = 20\nbackoff_floor_ms = 10\nbackoff_cap_ms = 100\ndegraded = {{ template = \"{SAFE_REPLY}\" }}\n"
    );
    for tier in tiers {
        text.push_str(&format!("\n[[routes.{name}.tiers]]\n{tier}"));
    }
    if let Some(output) = output {
        text.push_str(&format!("\n[routes.{name}.output]\n{}", output.replace("ROUTE", name)));
    }
    text
}

/// A simulator model that answers exactly these texts, one per request of a conversation.
fn says(answers: &[&str]) -> String {
    let steps: Vec<String> = answers.iter().map(|answer| say_spec(answer)).collect();
    format!("sim:{}", steps.join(","))
}

async fn gateway(routes: &[String]) -> Running {
    start_with(&format!("{HEAD}{}", routes.concat()), None).await
}

fn search_evidence() -> Value {
    json!({"evidence": [
        {"id": "118", "source": "search", "text": "Deliveries to hospitals go to the front desk."},
        {"id": "140", "source": "search", "text": "Changes close 48 hours before delivery."}
    ]})
}

fn openai(route: &str, rein: Option<Value>) -> Value {
    let mut body = json!({
        "model": route,
        "messages": [{"role": "user", "content": format!("Can I change my order? ({route})")}]
    });
    if let Some(rein) = rein {
        body["rein"] = rein;
    }
    body
}

fn anthropic(route: &str, rein: Option<Value>) -> Value {
    let mut body = json!({
        "model": route,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": format!("Can I change my order? ({route})")}]
    });
    if let Some(rein) = rein {
        body["rein"] = rein;
    }
    body
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no `{name}` header"))
        .to_str()
        .unwrap()
        .to_string()
}

/// What the headers say about a call: outcome, attempts, re-asks, repairs.
fn said(response: &reqwest::Response) -> (String, String, String, String) {
    (
        header(response, "x-rein-outcome"),
        header(response, "x-rein-attempts"),
        header(response, "x-rein-reasks"),
        header(response, "x-rein-repairs"),
    )
}

fn expect(
    outcome: &str,
    attempts: u32,
    reasks: u32,
    repairs: u32,
) -> (String, String, String, String) {
    (outcome.to_string(), attempts.to_string(), reasks.to_string(), repairs.to_string())
}

fn openai_text(body: &Value) -> String {
    body["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string()
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test]
async fn code_fenced_json_is_repaired_in_code_without_a_second_call() {
    // Prose before the fence would not be a certain fix (it is re-asked); a bare fence is.
    let fenced = format!("```json\n{GOOD}\n```");
    let gw = gateway(&[route(
        "support",
        &[tier("primary", "sim-openai", &says(&[&fenced]), "")],
        Some(SUPPORT_OUTPUT),
    )])
    .await;
    let response =
        gw.post("/v1/chat/completions", KEY, openai("support", Some(search_evidence()))).await;
    assert_eq!(response.status(), 200);
    assert_eq!(said(&response), expect("answered", 1, 0, 1), "one call, one code repair");
    let body: Value = response.json().await.unwrap();
    assert_eq!(json_of(&openai_text(&body)), json_of(GOOD), "the caller gets the bare JSON");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_invented_citation_is_re_asked_against_the_callers_evidence_and_accepted() {
    let gw = gateway(&[
        route(
            "support",
            &[tier("primary", "sim-openai", &says(&[INVENTED, GOOD]), "")],
            Some(SUPPORT_OUTPUT),
        ),
        route(
            "support-claude",
            &[tier("primary", "sim-anthropic", &says(&[INVENTED, GOOD]), "")],
            Some(SUPPORT_OUTPUT),
        ),
    ])
    .await;
    let response =
        gw.post("/v1/chat/completions", KEY, openai("support", Some(search_evidence()))).await;
    assert_eq!(response.status(), 200);
    assert_eq!(said(&response), expect("answered", 2, 1, 0));
    assert_eq!(header(&response, "x-rein-tier"), "primary");
    let body: Value = response.json().await.unwrap();
    assert_eq!(json_of(&openai_text(&body)), json_of(GOOD), "the re-asked answer is used");
    assert_eq!(body["rein"]["attempts"], 2);

    // The same through the Anthropic API to an Anthropic-format tier.
    let response =
        gw.post("/v1/messages", KEY, anthropic("support-claude", Some(search_evidence()))).await;
    assert_eq!(response.status(), 200);
    assert_eq!(said(&response), expect("answered", 2, 1, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(json_of(body["content"][0]["text"].as_str().unwrap()), json_of(GOOD));

    // The evidence is the caller's: without it no article was returned in this run, so even the
    // good answer's citation is invented, the re-ask fails too and the safe reply goes out.
    let question =
        json!({"model": "support", "messages": [{"role": "user", "content": "No evidence?"}]});
    let response = gw.post("/v1/chat/completions", KEY, question).await;
    assert_eq!(said(&response), expect("degraded", 2, 1, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(openai_text(&body), SAFE_REPLY);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_cut_off_answer_is_asked_again_with_a_higher_ceiling() {
    // The good answer is 19 tokens of 5 characters; a ceiling of 10 cuts it off, 20 does not.
    let ceiling = "max_tokens = 10\n";
    let gw = gateway(&[
        route(
            "roomy",
            &[tier("primary", "sim-openai", &says(&[GOOD]), ceiling)],
            Some(SUPPORT_OUTPUT),
        ),
        // A cap that leaves no room: the cut-off answer is not asked again; the next tier answers.
        route(
            "capped",
            &[
                tier("primary", "sim-openai", &says(&[GOOD]), ceiling),
                tier("fallback", "sim-anthropic", &says(&[GOOD]), ""),
            ],
            Some(&format!("max_tokens_cap = 10\n{SUPPORT_OUTPUT}")),
        ),
    ])
    .await;
    let response =
        gw.post("/v1/chat/completions", KEY, openai("roomy", Some(search_evidence()))).await;
    assert_eq!(said(&response), expect("answered", 2, 1, 0), "re-asked once, with more room");
    let body: Value = response.json().await.unwrap();
    assert_eq!(json_of(&openai_text(&body)), json_of(GOOD));

    let response =
        gw.post("/v1/chat/completions", KEY, openai("capped", Some(search_evidence()))).await;
    assert_eq!(said(&response), expect("fallback", 2, 0, 0));
    assert_eq!(header(&response, "x-rein-tier"), "fallback");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn every_tier_failing_its_checks_gets_the_degraded_safe_reply() {
    let gw = gateway(&[route(
        "support",
        &[
            tier("primary", "sim-openai", &says(&[INVENTED]), ""),
            tier("fallback", "sim-anthropic", &says(&[INVENTED]), ""),
        ],
        Some(SUPPORT_OUTPUT),
    )])
    .await;
    // One re-ask in the whole call: the primary gets it, the fallback answers once.
    let response =
        gw.post("/v1/chat/completions", KEY, openai("support", Some(search_evidence()))).await;
    assert_eq!(response.status(), 200);
    assert_eq!(said(&response), expect("degraded", 3, 1, 0));
    assert!(response.headers().get("x-rein-tier").is_none(), "no tier served it");
    let body: Value = response.json().await.unwrap();
    assert_eq!(openai_text(&body), SAFE_REPLY);
    assert_eq!(body["rein"]["outcome"], "degraded");

    let response =
        gw.post("/v1/messages", KEY, anthropic("support", Some(search_evidence()))).await;
    assert_eq!(said(&response), expect("degraded", 3, 1, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["content"], json!([{"type": "text", "text": SAFE_REPLY}]));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_refusal_gets_the_declined_safe_reply_in_both_formats() {
    // An empty output table still checks the stop reason; the fallback must not be asked.
    let gw = gateway(&[route(
        "support",
        &[
            tier("primary", "sim-openai", "sim:refusal", ""),
            tier("fallback", "sim-anthropic", "sim-fallback", ""),
        ],
        Some(""),
    )])
    .await;
    let response = gw.post("/v1/chat/completions", KEY, openai("support", None)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(said(&response), expect("declined", 1, 0, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(openai_text(&body), SAFE_REPLY);
    assert_eq!(body["choices"][0]["message"]["refusal"], Value::Null);
    assert_eq!(body["rein"]["outcome"], "declined");

    let response = gw.post("/v1/messages", KEY, anthropic("support", None)).await;
    assert_eq!(said(&response), expect("declined", 1, 0, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["content"], json!([{"type": "text", "text": SAFE_REPLY}]));
    assert_eq!(body["stop_reason"], "end_turn");

    // Streamed (checked release): the safe reply as the stream's text.
    let mut streamed = openai("support", None);
    streamed["stream"] = json!(true);
    let response = gw.post("/v1/chat/completions", KEY, streamed).await;
    assert_eq!(header(&response, "x-rein-outcome"), "declined");
    let text = response.text().await.unwrap();
    assert!(text.contains(SAFE_REPLY) && text.trim_end().ends_with("data: [DONE]"), "{text}");
    gw.stop().await.unwrap();
}

/// A local HTTP server in the test: webhook endpoints and a provider that content-filters.
struct Local {
    base: String,
    /// Every body the `/refunds` webhook received.
    seen: Arc<Mutex<Vec<Value>>>,
}

async fn local_server() -> Local {
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let app = Router::new()
        // Flags any reply that promises a refund.
        .route(
            "/refunds",
            post(|State(seen): State<Arc<Mutex<Vec<Value>>>>, Json(body): Json<Value>| async move {
                seen.lock().unwrap().push(body.clone());
                let reply = body["answer"]["json"]["reply"].as_str().unwrap_or_default();
                let problems = if reply.contains("refund") {
                    json!([{"message": "do not promise a refund; say a person will review it", "path": "/reply"}])
                } else {
                    json!([])
                };
                Json(json!({"problems": problems}))
            }),
        )
        // Answers a pass, but only after the rule's timeout.
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Json(json!({"problems": []}))
            }),
        )
        // An OpenAI-compatible provider whose content filter withholds every answer.
        .route("/v1/chat/completions", post(|| async { filtered_stream() }))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Local { base, seen }
}

fn filtered_stream() -> axum::response::Response {
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({"id": "chatcmpl-f", "object": "chat.completion.chunk", "created": 1,
                           "model": "filtered", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    let body = format!(
        "{}{}data: [DONE]\n\n",
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({}), json!("content_filter"))
    );
    axum::response::Response::builder()
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn a_webhook_that_flags_a_problem_gets_a_re_ask() {
    let local = local_server().await;
    let promise = r#"{"reply":"We will refund you today.","article_ids":[],"needs_human":false}"#;
    let careful =
        r#"{"reply":"A person will review it today.","article_ids":[],"needs_human":true}"#;
    let output = format!(
        "{SUPPORT_OUTPUT}\n[[routes.ROUTE.output.webhooks]]\nname = \"refund_policy\"\nurl = \"{}/refunds\"\ntimeout_ms = 2000\n",
        local.base
    );
    // TOML: the webhook table must follow the route's own keys, so put it after the schema.
    let gw = gateway(&[route(
        "support",
        &[tier("primary", "sim-anthropic", &says(&[promise, careful]), "")],
        Some(&output),
    )])
    .await;
    let response =
        gw.post("/v1/messages", KEY, anthropic("support", Some(search_evidence()))).await;
    assert_eq!(response.status(), 200);
    assert_eq!(said(&response), expect("answered", 2, 1, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(json_of(body["content"][0]["text"].as_str().unwrap()), json_of(careful));

    // The webhook saw both answers, as text and JSON, with the caller's evidence.
    let seen = local.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0]["rule"], "refund_policy");
    assert_eq!(seen[0]["answer"]["json"], json_of(promise));
    assert_eq!(json_of(seen[0]["answer"]["text"].as_str().unwrap()), json_of(promise));
    assert_eq!(seen[0]["evidence"], search_evidence()["evidence"]);
    assert_eq!(seen[1]["answer"]["json"], json_of(careful));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_webhook_past_its_timeout_is_a_failed_check_never_a_pass() {
    let local = local_server().await;
    let output = format!(
        "json = true\nwebhooks = [ {{ name = \"slow_policy\", url = \"{}/slow\", timeout_ms = 200 }} ]\n",
        local.base
    );
    let gw = gateway(&[route(
        "support",
        &[tier("primary", "sim-openai", &says(&[GOOD]), "")],
        Some(&output),
    )])
    .await;
    let response = gw.post("/v1/chat/completions", KEY, openai("support", None)).await;
    assert_eq!(response.status(), 200);
    // A good answer, but the check could not run: re-asked once, then the safe reply.
    assert_eq!(said(&response), expect("degraded", 2, 1, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(openai_text(&body), SAFE_REPLY);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_content_filter_reaches_the_caller_as_a_400_in_its_format() {
    let local = local_server().await;
    let text = format!(
        "{HEAD}\n[providers.filtered]\nkind = \"openai_compatible\"\nbase_url = \"{}/v1\"\n{}",
        local.base,
        route(
            "support",
            &[
                tier("primary", "filtered", "filtered-model", ""),
                tier("fallback", "sim-anthropic", "sim-fallback", ""),
            ],
            Some("json = true\n"),
        )
    );
    let gw = start_with(&text, None).await;
    let response = gw.post("/v1/chat/completions", KEY, openai("support", None)).await;
    assert_eq!(response.status(), 400);
    assert_eq!(header(&response, "x-rein-outcome"), "stopped");
    assert_eq!(header(&response, "x-rein-attempts"), "1", "the fallback is not asked");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "content_filter");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("content filter"), "{body}");

    let response = gw.post("/v1/messages", KEY, anthropic("support", None)).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("content filter"), "{body}");
    assert_eq!(body["rein"]["outcome"], "stopped");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_json_schema_route_asked_with_response_format_json_schema() {
    let schema = json!({
        "type": "object",
        "required": ["reply", "reason"],
        "additionalProperties": false,
        "properties": {
            "reply": {"type": "string"},
            "reason": {"type": "string", "enum": ["refund", "delivery", "other"]}
        }
    });
    let output = r#"
[routes.ROUTE.output.schema]
type = "object"
required = ["reply", "reason"]
additionalProperties = false

[routes.ROUTE.output.schema.properties]
reply = { type = "string" }
reason = { type = "string", enum = ["refund", "delivery", "other"] }
"#;
    let wrong_case = r#"{"reply":"On its way.","reason":"Delivery"}"#;
    let missing = r#"{"reply":"On its way."}"#;
    let whole = r#"{"reply":"On its way.","reason":"delivery"}"#;
    let gw = gateway(&[
        // A healthy simulator answers the schema the request carries: the caller's
        // `response_format` reached the provider, and rein checked the answer itself.
        route("extract", &[tier("primary", "sim-openai", "sim-primary", "")], Some(output)),
        route("cased", &[tier("primary", "sim-openai", &says(&[wrong_case]), "")], Some(output)),
        route(
            "partial",
            &[tier("primary", "sim-openai", &says(&[missing, whole]), "")],
            Some(output),
        ),
    ])
    .await;
    let ask = |route: &str| {
        json!({
            "model": route,
            "messages": [{"role": "user", "content": "Why did the customer write?"}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "reason", "strict": true, "schema": schema}}
        })
    };

    let response = gw.post("/v1/chat/completions", KEY, ask("extract")).await;
    assert_eq!(said(&response), expect("answered", 1, 0, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(json_of(&openai_text(&body))["reason"], "refund", "the schema's first enum value");

    // An enum in another letter case is fixed in code.
    let response = gw.post("/v1/chat/completions", KEY, ask("cased")).await;
    assert_eq!(said(&response), expect("answered", 1, 0, 1));
    let body: Value = response.json().await.unwrap();
    assert_eq!(json_of(&openai_text(&body)), json_of(whole));

    // A missing required field is re-asked.
    let response = gw.post("/v1/chat/completions", KEY, ask("partial")).await;
    assert_eq!(said(&response), expect("answered", 2, 1, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(json_of(&openai_text(&body)), json_of(whole));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_caller_evidence_is_a_400_naming_the_item() {
    let gw = gateway(&[route(
        "support",
        &[tier("primary", "sim-openai", "sim-primary", "")],
        Some(SUPPORT_OUTPUT),
    )])
    .await;
    let bad = json!({"evidence": [{"id": "118"}, {"id": "140"}, {"source": "search"}]});
    let response = gw.post("/v1/chat/completions", KEY, openai("support", Some(bad.clone()))).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["param"], "rein.evidence[2].id");
    let response = gw.post("/v1/messages", KEY, anthropic("support", Some(bad))).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("rein.evidence[2].id"), "{body}");
    gw.stop().await.unwrap();
}

// ---- config ----

fn env(name: &str) -> Option<String> {
    match name {
        "OPENAI_API_KEY" => Some("sk-test-openai".into()),
        "ANTHROPIC_API_KEY" => Some("sk-ant-test".into()),
        "AWS_ACCESS_KEY_ID" => Some("AKIDTESTEXAMPLE".into()),
        "AWS_SECRET_ACCESS_KEY" => Some("aws-secret-test".into()),
        "REIN_CLIENT_KEY" => Some("client-key".into()),
        "REIN_ADMIN_KEY" => Some("admin-key".into()),
        _ => None,
    }
}

fn problems(output: &str) -> String {
    let text = format!(
        "[providers.openai]\nkind = \"openai\"\napi_key_env = \"OPENAI_API_KEY\"\n\n[routes.chat]\n\n[[routes.chat.tiers]]\nname = \"primary\"\nprovider = \"openai\"\nmodel = \"gpt-4o\"\nmax_tokens = 2000\n\n[routes.chat.output]\n{output}"
    );
    Config::from_toml(&text, &env).expect_err("config should be refused").to_string()
}

#[test]
fn bad_output_settings_are_named_by_key() {
    let output = r#"
json = false
max_tokens_cap = 1000
rules = [
  { rule = "cited_ids_returned", ids_at = "article_ids", item = "" },
  { rule = "flag_required_when", flag_at = "/needs_human", when = { kind = "answer_contains_any", phrases = [] } },
]
webhooks = [
  { name = "policy check", url = "ftp://example.com/check" },
  { name = "fraud", url = "https://user:pw@example.com/check", timeout_ms = 30000 },
  { name = "id_matches_tool", url = "http://127.0.0.1:9/x", timeout_ms = 0 },
]
fail_open = [
  { kind = "not_json" },
  { kind = "rule/numbers_in_cited_text" },
  { kind = "rule_unavailable/cited_ids_returned" },
  { kind = "scheme" },
  { kind = "schema/required", path_prefix = "order_id" },
]
schema = { type = "object", properties = { reason = { type = "strng" } } }
"#;
    insta::assert_snapshot!(problems(output), @r#"
    the config has 17 problems:
      - `routes.chat.output.schema`: the JSON Schema is invalid at `/properties/reason/type`: "strng" is not valid under any of the schemas listed in the 'anyOf' keyword
      - `routes.chat.output.json`: is false, but a schema is given and a schema means a JSON answer: remove `json = false`
      - `routes.chat.output.max_tokens_cap`: (1000) is less than `routes.chat.tiers[0].max_tokens` (2000): a cut-off answer could never be asked again with a higher ceiling; raise the cap
      - `routes.chat.output.rules[0].ids_at`: `article_ids` is not a JSON pointer: start it with `/` (e.g. `/article_ids`)
      - `routes.chat.output.rules[0].item`: must not be empty
      - `routes.chat.output.rules[1].when.phrases`: needs at least one phrase
      - `routes.chat.output.webhooks[0].name`: `policy check` must be letters, digits, `_` or `-` (it names the rule in problems and `fail_open`)
      - `routes.chat.output.webhooks[0].url`: `ftp://example.com/check` must start with http:// or https://
      - `routes.chat.output.webhooks[1].url`: must not carry a user or password: the config is printed by `rein check`, and rein takes secrets only from environment variables
      - `routes.chat.output.webhooks[1].timeout_ms`: (30000) is not less than the route's `deadline_ms` (20000): the check could never finish in time
      - `routes.chat.output.webhooks[2].name`: `id_matches_tool` is the name of a built-in rule; choose another
      - `routes.chat.output.webhooks[2].timeout_ms`: must be greater than 0
      - `routes.chat.output.fail_open[0].kind`: a `not_json` problem never fails open: there is no JSON to use
      - `routes.chat.output.fail_open[1].kind`: `numbers_in_cited_text` is not a rule of this route (its rules: cited_ids_returned, flag_required_when, policy check, fraud, id_matches_tool)
      - `routes.chat.output.fail_open[2].kind`: `cited_ids_returned` is not a webhook of this route (only webhooks can be unavailable; its webhooks: policy check, fraud, id_matches_tool)
      - `routes.chat.output.fail_open[3].kind`: `scheme` is not a problem kind: use `schema`, `schema/<keyword>`, `rule`, `rule/<name>`, `rule_unavailable` or `rule_unavailable/<webhook>`
      - `routes.chat.output.fail_open[4].path_prefix`: `order_id` is not a JSON pointer: start it with `/` (e.g. `/order_id`)
    "#);
}

#[test]
fn output_mistakes_one_at_a_time_are_named() {
    insta::assert_snapshot!(problems("jsn = true\n"), @"
    the config has 1 problem:
      - `routes.chat.output.jsn`: unknown field `jsn`, expected one of `json`, `schema`, `schema_file`, `max_tokens_cap`, `rules`, `webhooks`, `fail_open`, `judge`
    ");
    insta::assert_snapshot!(
        problems("json = true\nrules = [ { rule = \"cited_ids\", ids_at = \"/ids\" } ]\n"),
        @"
    the config has 1 problem:
      - `routes.chat.output.rules[0].rule`: unknown variant `cited_ids`, expected one of `cited_ids_returned`, `numbers_in_cited_text`, `id_matches_tool`, `flag_required_when`
    "
    );
    insta::assert_snapshot!(
        problems("json = true\nrules = [ { rule = \"cited_ids_returned\", id_at = \"/ids\" } ]\n"),
        @"
    the config has 1 problem:
      - `routes.chat.output.rules[0]`: unknown field `id_at`, expected one of `ids_at`, `source`, `item`
    "
    );
    insta::assert_snapshot!(
        problems("rules = [ { rule = \"cited_ids_returned\", ids_at = \"/ids\" } ]\n"),
        @"
    the config has 1 problem:
      - `routes.chat.output.rules[0].ids_at`: reads `/ids` of the answer's JSON, but the route does not expect JSON: set `json = true` or give a `schema`
    "
    );
    insta::assert_snapshot!(problems("webhooks = [ { name = \"x\" } ]\n"), @"
    the config has 1 problem:
      - `routes.chat.output.webhooks[0]`: missing field `url`
    ");
}

#[test]
fn schema_files_are_read_and_compiled_at_validation() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("answer.json");
    std::fs::write(&good, r#"{"type": "object", "required": ["reply"]}"#).unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{ not json").unwrap();
    let invalid = dir.path().join("invalid.json");
    std::fs::write(&invalid, r#"{"type": 5}"#).unwrap();
    let missing = dir.path().join("missing.json");

    let base = "[providers.openai]\nkind = \"openai\"\napi_key_env = \"OPENAI_API_KEY\"\n\n[routes.chat]\n\n[[routes.chat.tiers]]\nname = \"primary\"\nprovider = \"openai\"\nmodel = \"gpt-4o\"\n\n[routes.chat.output]\n";
    let with_file =
        |path: &std::path::Path| format!("{base}schema_file = \"{}\"\n", path.display());
    let config = Config::from_toml(&with_file(&good), &env).unwrap();
    let output = config.routes["chat"].output.as_ref().unwrap();
    assert!(output.json, "a schema means JSON");
    assert!(output.compiled_schema.is_some());
    assert_eq!(output.schema, Some(json!({"type": "object", "required": ["reply"]})));
    assert_eq!(output.max_tokens_cap, 8192);

    for (path, needle) in [
        (&broken, "is not JSON"),
        (&invalid, "the JSON Schema is invalid at `/type`"),
        (&missing, "cannot read"),
    ] {
        let error = Config::from_toml(&with_file(path), &env).unwrap_err().to_string();
        assert!(error.contains("`routes.chat.output.schema_file`"), "{error}");
        assert!(error.contains(needle), "{needle}: {error}");
    }
    let both = format!("{}schema = {{ type = \"object\" }}\n", with_file(&good));
    let error = Config::from_toml(&both, &env).unwrap_err().to_string();
    assert!(error.contains("given together with `schema`"), "{error}");
}

#[test]
fn the_support_example_has_a_checked_output_that_rein_check_prints() {
    let path = format!("{}/../../examples/support-agent.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let config = Config::from_toml(&text, &env).unwrap();
    let output = config.routes["support"].output.as_ref().expect("an output section");
    assert!(output.json && output.compiled_schema.is_some());
    let names: Vec<&str> = output.rules.iter().map(|rule| rule.rule_name()).collect();
    assert!(names.contains(&"cited_ids_returned") && names.contains(&"numbers_in_cited_text"));
    assert!(!output.fail_open.is_empty());
    // What `rein check` prints: the contract in full, secrets still masked.
    let printed = serde_json::to_value(&config).unwrap();
    let shown = &printed["routes"]["support"]["output"];
    assert_eq!(shown["rules"][0]["rule"], "cited_ids_returned");
    assert_eq!(shown["schema"]["type"], "object");
    assert!(!printed.to_string().contains("sk-test-openai"));
}

/// A search tool whose results become the run's evidence, in front of a real search backend.
async fn search_tool() -> String {
    let app = Router::new().route(
        "/search",
        post(|| async {
            Json(json!({"results": [
                {"id": "140", "text": "Changes close 48 hours before delivery."},
                {"id": "118", "text": "Deliveries to hospitals go to the front desk."}
            ]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!(
        r#"
[tools.search_docs]
kind = "read"

[tools.search_docs.evidence]
source = "search"
items_at = "/results"
id_at = "/id"
text_at = "/text"

[[tools.search_docs.rungs]]
kind = "http"
source = "search_primary"
url = "http://{addr}/search"
timeout_ms = 2000
"#
    )
}

#[tokio::test]
async fn what_the_runs_tool_calls_returned_is_the_evidence_for_its_citations() {
    let tools = search_tool().await;
    let routes = route(
        "support",
        &[tier("primary", "sim-openai", &says(&[GOOD, GOOD]), "")],
        Some(SUPPORT_OUTPUT),
    );
    let gw = start_with(&format!("{HEAD}{tools}{routes}"), None).await;
    let call = |path: &str, run: &str, body: Value| {
        gw.client
            .post(gw.url(path))
            .bearer_auth(KEY.unwrap())
            .header("x-rein-run-id", run)
            .json(&body)
            .send()
    };

    // The agent searched through rein in run-7: article 140 was returned in this run.
    let searched =
        call("/v1/tools/search_docs", "run-7", json!({"q": "change order"})).await.unwrap();
    assert_eq!(searched.status(), 200);
    let response = call("/v1/chat/completions", "run-7", openai("support", None)).await.unwrap();
    assert_eq!(
        said(&response),
        expect("answered", 1, 0, 0),
        "the citation is backed by the search"
    );

    // The same answer in a run where nothing was searched cites an article nobody returned:
    // re-asked, and with no evidence to fix it, the safe reply.
    let response = call("/v1/chat/completions", "run-8", openai("support", None)).await.unwrap();
    assert_eq!(said(&response), expect("degraded", 2, 1, 0));
    gw.stop().await.unwrap();
}

/// The order-lookup tool in both wire formats; the simulator fills `order_id` with a value of
/// its own (`sim-order_id`), so `pattern` decides whether its call passes rein's check.
fn order_tool(pattern: Option<&str>) -> (Value, Value) {
    let mut order_id = json!({"type": "string"});
    if let Some(pattern) = pattern {
        order_id["pattern"] = json!(pattern);
    }
    let parameters = json!({
        "type": "object",
        "required": ["order_id"],
        "additionalProperties": false,
        "properties": {"order_id": order_id}
    });
    (
        json!([{"type": "function", "function": {"name": "lookup_order", "parameters": parameters}}]),
        json!([{"name": "lookup_order", "input_schema": parameters}]),
    )
}

fn reason_schema() -> Value {
    json!({
        "type": "object",
        "required": ["reply", "reason"],
        "additionalProperties": false,
        "properties": {
            "reply": {"type": "string"},
            "reason": {"type": "string", "enum": ["refund", "delivery", "other"]}
        }
    })
}

const REASON_OUTPUT: &str = r#"
[routes.ROUTE.output.schema]
type = "object"
required = ["reply", "reason"]
additionalProperties = false

[routes.ROUTE.output.schema.properties]
reply = { type = "string" }
reason = { type = "string", enum = ["refund", "delivery", "other"] }
"#;

/// The JSON of every `data:` line of an SSE body, `[DONE]` left out.
async fn sse_data(response: reqwest::Response) -> Vec<Value> {
    let text = response.text().await.unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(json_of)
        .collect()
}

/// Regression: with tools and a JSON Schema in force (the caller's `response_format`, or the
/// route's output schema), the tool call was re-asked as "the answer is empty" and the agent got
/// the safe reply. Now the tool call comes back as it is, whole and streamed, in both wire
/// formats; after the tool result the answer is checked against the schema.
#[tokio::test]
async fn a_tool_call_under_an_output_contract_comes_back_then_the_answer_is_checked() {
    let (openai_tools, anthropic_tools) = order_tool(None);
    let gw = gateway(&[
        route("agent", &[tier("primary", "sim-openai", "sim-agent", "")], None),
        route(
            "agent-claude",
            &[tier("primary", "sim-anthropic", "sim-agent", "")],
            Some(REASON_OUTPUT),
        ),
    ])
    .await;
    let question = json!({"role": "user", "content": "Use the tool to look up order A10."});
    let mut ask = json!({
        "model": "agent",
        "messages": [question],
        "tools": openai_tools,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "reason", "strict": true, "schema": reason_schema()}}
    });

    let response = gw.post("/v1/chat/completions", KEY, ask.clone()).await;
    assert_eq!(said(&response), expect("answered", 1, 0, 0), "the tool call is not re-asked");
    let body: Value = response.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{body}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "lookup_order");
    assert_eq!(
        json_of(call["function"]["arguments"].as_str().unwrap()),
        json!({"order_id": "sim-order_id"})
    );

    // Streamed (checked release): the same call, and nothing else.
    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    let response = gw.post("/v1/chat/completions", KEY, streamed).await;
    assert_eq!(said(&response), expect("answered", 1, 0, 0));
    let chunks = sse_data(response).await;
    let deltas: Vec<&Value> =
        chunks.iter().map(|c| &c["choices"][0]["delta"]["tool_calls"][0]).collect();
    assert!(deltas.iter().any(|d| d["function"]["name"] == "lookup_order"), "{chunks:?}");
    let arguments: String =
        deltas.iter().filter_map(|d| d["function"]["arguments"].as_str()).collect();
    assert_eq!(json_of(&arguments), json!({"order_id": "sim-order_id"}));
    let finish: Vec<&Value> =
        chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
    assert_eq!(finish, vec![&json!("tool_calls")]);

    // After the tool result: the answer, checked against the caller's schema.
    let turn = choice["message"].clone();
    let id = call["id"].clone();
    ask["messages"].as_array_mut().unwrap().extend([
        turn,
        json!({"role": "tool", "tool_call_id": id, "content": "{\"status\": \"shipped\"}"}),
    ]);
    let response = gw.post("/v1/chat/completions", KEY, ask).await;
    assert_eq!(said(&response), expect("answered", 1, 0, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(json_of(&openai_text(&body)), json!({"reply": "sim-reply", "reason": "refund"}));

    // The Anthropic API to a route with its own output schema.
    let mut ask = json!({
        "model": "agent-claude",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Use the tool to look up order A10."}],
        "tools": anthropic_tools,
        "output_config": {"format": {"type": "json_schema", "schema": reason_schema()}}
    });
    let response = gw.post("/v1/messages", KEY, ask.clone()).await;
    assert_eq!(said(&response), expect("answered", 1, 0, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["stop_reason"], "tool_use", "{body}");
    let block = body["content"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "lookup_order");
    assert_eq!(block["input"], json!({"order_id": "sim-order_id"}));

    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    let response = gw.post("/v1/messages", KEY, streamed).await;
    assert_eq!(said(&response), expect("answered", 1, 0, 0));
    let events = sse_data(response).await;
    assert!(
        events.iter().any(|e| e["content_block"]["type"] == "tool_use"
            && e["content_block"]["name"] == "lookup_order"),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e["delta"]["stop_reason"] == "tool_use"), "{events:?}");

    ask["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": [block.clone()]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": block["id"],
                                            "content": "{\"status\": \"shipped\"}"}]}),
    ]);
    let response = gw.post("/v1/messages", KEY, ask).await;
    assert_eq!(said(&response), expect("answered", 1, 0, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(
        json_of(body["content"][0]["text"].as_str().unwrap()),
        json!({"reply": "sim-reply", "reason": "refund"})
    );
    gw.stop().await.unwrap();
}

/// A tool call is still checked: arguments that break the tool's parameters schema (the
/// simulator ignores `pattern`) are asked again once, then the call fails closed to the safe
/// reply, in both wire formats. No unchecked call reaches the agent.
#[tokio::test]
async fn a_tool_call_whose_arguments_break_the_tools_schema_is_re_asked_then_fails_closed() {
    let (openai_tools, anthropic_tools) = order_tool(Some("^A[0-9]+$"));
    let gw = gateway(&[
        route("strict", &[tier("primary", "sim-openai", "sim-agent", "")], None),
        route("strict-claude", &[tier("primary", "sim-anthropic", "sim-agent", "")], None),
    ])
    .await;
    let question = json!([{"role": "user", "content": "Use the tool to look up order A10."}]);
    let response = gw
        .post(
            "/v1/chat/completions",
            KEY,
            json!({"model": "strict", "messages": question, "tools": openai_tools}),
        )
        .await;
    assert_eq!(said(&response), expect("degraded", 2, 1, 0));
    let body: Value = response.json().await.unwrap();
    assert_eq!(openai_text(&body), SAFE_REPLY);
    assert!(body["choices"][0]["message"]["tool_calls"].is_null(), "{body}");

    let response = gw
        .post(
            "/v1/messages",
            KEY,
            json!({"model": "strict-claude", "max_tokens": 1024, "messages": question,
                   "tools": anthropic_tools, "stream": true}),
        )
        .await;
    assert_eq!(said(&response), expect("degraded", 2, 1, 0));
    let events = sse_data(response).await;
    assert!(!events.iter().any(|e| e["content_block"]["type"] == "tool_use"), "{events:?}");
    let text: String =
        events.iter().filter_map(|e| e["delta"]["text"].as_str()).collect::<Vec<_>>().concat();
    assert_eq!(text, SAFE_REPLY);
    gw.stop().await.unwrap();
}

/// Regression: any `x-rein-deadline-ms` at or under the route's minimum attempt (8 s by
/// default) got the degraded reply at once on a healthy route. A shorter deadline now shrinks
/// the attempt to fit; it never skips it.
#[tokio::test]
async fn a_short_caller_deadline_on_a_healthy_route_gets_its_answer() {
    let config = format!(
        "{HEAD}\n[routes.chat]\ndegraded = {{ template = \"{SAFE_REPLY}\" }}\n\n[[routes.chat.tiers]]\n{}",
        tier("primary", "sim-openai", "sim-primary", "")
    );
    let gw = start_with(&config, None).await;
    for deadline in ["5000", "8000", "1000"] {
        let response = gw
            .client
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth(KEY.unwrap())
            .header("x-rein-deadline-ms", deadline)
            .json(&json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-rein-outcome"), "answered", "{deadline} ms");
        let body: Value = response.json().await.unwrap();
        assert!(openai_text(&body).ends_with(rein_sim::SENTINEL), "{deadline} ms: {body}");
    }
    gw.stop().await.unwrap();
}
