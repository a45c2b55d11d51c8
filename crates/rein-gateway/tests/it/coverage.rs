//! The coverage check through the gateway, on the spec's hospital intensive-care example: the
//! evidence is about hospital deliveries and says nothing about intensive care units, so the
//! question is declined at the default cutoff (0.8) and the conversation goes to a person; a
//! question the same passages do answer passes. The scores come from the token log
//! probabilities `rein sim` returns for its scripted labels; on a provider with none
//! (Anthropic's format) the check falls back to agreement across samples, and says so.

use serde_json::{Value, json};

use crate::gateway::{Running, start_with};
use crate::ladder::HEAD;

const HANDED_OFF: &str = "A person from our team will reply within 2 hours.";

/// The labels the small models give: `not_covered` for intensive care (scripted as five
/// samples on the Anthropic side: four of them `not_covered`), `covered` for hospitals.
const SCENARIO: &str = r#"
[[reply]]
contains = "intensive care"
models = ["small-openai"]
text = "not_covered"
logprob = -0.02

[[reply]]
contains = "intensive care"
models = ["small-claude"]
texts = ["not_covered", "not_covered", "covered", "not_covered", "not_covered"]

[[reply]]
contains = "hospital"
text = "covered"
logprob = -0.05
"#;

fn config(scenario: &str) -> String {
    let route = |name: &str, coverage: &str| {
        format!(
            r#"
[routes.{name}]
handoff_reply = {{ template = "{HANDED_OFF}" }}
coverage = {{ route = "{coverage}", ambiguous = [{{ contains = ["change my order"], ask = "Do you want to change the delivery address or the date?" }}] }}

[[routes.{name}.tiers]]
name = "primary"
provider = "sim-openai"
model = "gpt-4o"
"#
        )
    };
    format!(
        r#"{HEAD}
[providers.small-openai]
kind = "sim"
format = "openai"
scenario = "{scenario}"

[providers.small-anthropic]
kind = "sim"
format = "anthropic"
scenario = "{scenario}"

[routes.coverage]
[[routes.coverage.tiers]]
name = "small"
provider = "small-openai"
model = "small-openai"

[routes.coverage-claude]
[[routes.coverage-claude.tiers]]
name = "small"
provider = "small-anthropic"
model = "small-claude"
{support}
{support_claude}
"#,
        support = route("support", "coverage"),
        support_claude = route("support-claude", "coverage-claude"),
    )
}

fn evidence() -> Value {
    json!([
        {"id": "140", "source": "search", "text": "Hospital deliveries go to the front desk, not to the ward."},
        {"id": "118", "source": "search", "text": "We deliver to hospitals every day before 6 p.m."},
    ])
}

async fn ask(gw: &Running, route: &str, run: &str, question: &str) -> (String, Value) {
    let response = gw
        .client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .header("x-rein-run-id", run)
        .header("x-rein-conversation-id", format!("conv-{run}"))
        .json(&json!({"model": route, "messages": [{"role": "user", "content": question}],
                      "rein": {"evidence": evidence()}}))
        .send()
        .await
        .unwrap();
    let outcome = response.headers()["x-rein-outcome"].to_str().unwrap().to_string();
    (outcome, response.json().await.unwrap())
}

async fn metric(gw: &Running, series: &str) -> u64 {
    let text = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .map_or(0, |value| value.trim().parse().unwrap())
}

async fn handoffs(gw: &Running) -> Vec<Value> {
    let response = gw
        .client
        .get(gw.url("/admin/handoffs"))
        .bearer_auth("admin-secret-1")
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    body["handoffs"].as_array().cloned().unwrap()
}

async fn packet(gw: &Running, id: i64) -> Value {
    let response = gw
        .client
        .get(gw.url(&format!("/admin/handoffs/{id}")))
        .bearer_auth("admin-secret-1")
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    body["packet"].clone()
}

fn scenario_file(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("coverage.toml");
    std::fs::write(&path, SCENARIO).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn the_intensive_care_question_is_declined_on_logprobs_and_a_covered_one_passes() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with(&config(&scenario_file(&dir)), None).await;

    let (outcome, body) =
        ask(&gw, "support", "icu", "Can flowers be delivered to a hospital's intensive care unit?")
            .await;
    assert_eq!(outcome, "handed_off");
    assert_eq!(body["choices"][0]["message"]["content"], HANDED_OFF);
    let listed = handoffs(&gw).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["trigger"], "coverage");
    let packet = packet(&gw, listed[0]["id"].as_i64().unwrap()).await;
    let verdict = &packet["coverage"];
    assert_eq!(verdict["method"], "logprobs");
    // `not_covered` at p = e^-0.02: the evidence covers the question with 1 - 0.980 = 0.020.
    let score = verdict["score"].as_f64().unwrap();
    assert!((score - (1.0 - (-0.02f64).exp())).abs() < 1e-9, "{verdict}");
    assert_eq!(verdict["cutoff"], 0.8);
    assert_eq!(packet["evidence"].as_array().unwrap().len(), 2, "the passages beside the question");

    let (outcome, _) = ask(&gw, "support", "hosp", "Do you deliver to hospitals?").await;
    assert_eq!(outcome, "answered", "covered at e^-0.05 = 0.951, over the cutoff");
    assert_eq!(handoffs(&gw).await.len(), 1);

    assert_eq!(
        metric(
            &gw,
            r#"rein_coverage_checks_total{route="support",method="logprobs",verdict="not_covered"}"#
        )
        .await,
        1
    );
    assert_eq!(
        metric(
            &gw,
            r#"rein_coverage_checks_total{route="support",method="logprobs",verdict="covered"}"#
        )
        .await,
        1
    );
    assert_eq!(
        metric(&gw, r#"rein_escalations_total{route="support",trigger="coverage"}"#).await,
        1
    );

    // The declined call's trace: the check is a span over its model call, before the decided
    // reply, and the hand-off an event that says it was made.
    let list = admin_json(&gw, "/admin/traces?route=support&outcome=handed_off").await;
    let trace_id = list["traces"][0]["trace_id"].as_str().unwrap().to_string();
    let kept = admin_json(&gw, &format!("/admin/traces/{trace_id}")).await;
    let spans = kept["calls"][0]["trace"]["spans"].as_array().unwrap().clone();
    let root = &spans[0];
    let check = spans.iter().find(|s| s["name"] == "coverage_check").expect("the check's span");
    assert_eq!(check["parent_id"], root["span_id"]);
    assert_eq!(check["attributes"]["rein.coverage.method"], "logprobs");
    assert_eq!(check["attributes"]["rein.coverage.covered"], false);
    assert_eq!(check["attributes"]["rein.coverage.cutoff"], 0.8);
    assert!(check["end_ms"].as_u64().unwrap() <= root["end_ms"].as_u64().unwrap());
    let handoff = root["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "handoff")
        .expect("the hand-off event")
        .clone();
    assert_eq!(handoff["attributes"]["rein.trigger"], "coverage");
    assert_eq!(handoff["attributes"]["rein.handoff.created"], true);
    assert!(handoff["at_ms"].as_u64().unwrap() >= check["end_ms"].as_u64().unwrap());
    let tree = kept["calls"][0]["tree"].as_str().unwrap();
    assert!(tree.contains("coverage_check") && tree.contains("handoff"), "{tree}");
    gw.stop().await.unwrap();
}

async fn admin_json(gw: &Running, path: &str) -> Value {
    let response = gw.client.get(gw.url(path)).bearer_auth("admin-secret-1").send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

#[tokio::test]
async fn without_logprobs_the_score_is_agreement_across_samples() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with(&config(&scenario_file(&dir)), None).await;
    let (outcome, _) =
        ask(&gw, "support-claude", "icu", "Can flowers go to an intensive care unit?").await;
    assert_eq!(outcome, "handed_off");
    let listed = handoffs(&gw).await;
    let packet = packet(&gw, listed[0]["id"].as_i64().unwrap()).await;
    let verdict = &packet["coverage"];
    assert_eq!(verdict["method"], "samples");
    assert_eq!(verdict["calls"], 5);
    assert_eq!(verdict["score"], 0.2, "one sample of five said covered: {verdict}");
    let (outcome, _) = ask(&gw, "support-claude", "hosp", "Do you deliver to hospitals?").await;
    assert_eq!(outcome, "answered");
    assert_eq!(
        metric(&gw, r#"rein_coverage_checks_total{route="support-claude",method="samples",verdict="not_covered"}"#).await,
        1
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_unclear_question_under_the_cutoff_gets_a_clarifying_question() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("unclear.toml");
    std::fs::write(
        &scenario,
        "[[reply]]\ncontains = \"change my order\"\ntext = \"not_covered\"\nlogprob = -0.1\n",
    )
    .unwrap();
    let gw = start_with(&config(&scenario.display().to_string()), None).await;
    let (outcome, body) = ask(&gw, "support", "unclear", "Can I change my order?").await;
    assert_eq!(outcome, "clarified");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Do you want to change the delivery address or the date?"
    );
    assert!(handoffs(&gw).await.is_empty(), "a clarifying question is not a hand-off");
    gw.stop().await.unwrap();
}
