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

async fn check_coverage(gw: &Running, route: &str, key: Option<&str>, body: Value) -> (u16, Value) {
    let mut request =
        gw.client.post(gw.url(&format!("/admin/routes/{route}/coverage"))).json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn sli_calls(gw: &Running) -> u64 {
    let text = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|line| line.starts_with("rein_sli_calls_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// What `rein eval --sweep coverage` needs of a gateway: the route's check run on its own
/// (`POST /admin/routes/{route}/coverage`: the verdict and the whole check, nothing handed off),
/// and the answer the check would have declined (`x-rein-skip-coverage: true`, only with the
/// admin key, and counted in no SLI).
#[tokio::test]
async fn the_admin_endpoint_scores_a_question_and_an_eval_call_may_skip_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with(&config(&scenario_file(&dir)), None).await;
    let admin = Some("admin-secret-1");
    let icu = "Can flowers be delivered to a hospital's intensive care unit?";

    let (status, verdict) =
        check_coverage(&gw, "support", admin, json!({"question": icu, "evidence": evidence()}))
            .await;
    assert_eq!(status, 200, "{verdict}");
    assert_eq!(verdict["method"], "logprobs");
    let score = verdict["score"].as_f64().unwrap();
    assert!((score - (1.0 - (-0.02f64).exp())).abs() < 1e-9, "{verdict}");
    assert_eq!(
        (verdict["cutoff"].as_f64(), verdict["covered"].as_bool()),
        (Some(0.8), Some(false))
    );
    assert_eq!(verdict["check"]["route"], "coverage");
    assert_eq!(verdict["check"]["cutoff"], 0.8);
    assert_eq!(verdict["check"]["ambiguous"][0]["contains"][0], "change my order");
    let messages = json!([{"role": "user", "content": "Do you deliver to hospitals?"}]);
    let (status, verdict) = check_coverage(
        &gw,
        "support",
        admin,
        json!({"messages": messages, "evidence": evidence()}),
    )
    .await;
    assert_eq!(status, 200, "{verdict}");
    assert_eq!(verdict["covered"], true);
    assert!((verdict["score"].as_f64().unwrap() - (-0.05f64).exp()).abs() < 1e-9, "{verdict}");
    assert!(handoffs(&gw).await.is_empty(), "a verdict alone hands nothing off");

    for (body, says) in [
        (json!({"question": "q", "evidence": [{"text": "no id"}]}), "`evidence[0].id` is required"),
        (json!({"evidence": evidence()}), "`question` is required"),
        (json!({"question": "q"}), "`evidence` must hold at least one item"),
        (json!({"question": "q", "evidence": evidence(), "evidense": []}), "`evidense`"),
        (json!({"question": "q", "messages": messages, "evidence": evidence()}), "not both"),
        (
            json!({"messages": [{"role": "wizard", "content": "q"}], "evidence": evidence()}),
            "messages[0]",
        ),
        (json!(["q"]), "body must be"),
    ] {
        let (status, answer) = check_coverage(&gw, "support", admin, body.clone()).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default().to_string();
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(message.contains(says), "{body}: {message}");
    }
    let body = json!({"question": icu, "evidence": evidence()});
    let (status, answer) = check_coverage(&gw, "nowhere", admin, body.clone()).await;
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = check_coverage(&gw, "coverage", admin, body.clone()).await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("route `coverage` has no coverage check")
    );
    assert_eq!(check_coverage(&gw, "support", Some("client-secret-1"), body.clone()).await.0, 401);
    assert_eq!(check_coverage(&gw, "support", None, body).await.0, 401);

    // The eval's answer call: past the check only with the admin key beside the client key.
    let eval_call = |admin: Option<&'static str>| {
        let mut request = gw
            .client
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth("client-secret-1")
            .header("x-rein-run-id", "eval-icu")
            .header("x-rein-skip-coverage", "true")
            .json(&json!({"model": "support", "messages": [{"role": "user", "content": icu}],
                          "rein": {"evidence": evidence()}}));
        if let Some(admin) = admin {
            request = request.header("x-rein-admin-key", admin);
        }
        request.send()
    };
    let refused = eval_call(None).await.unwrap();
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("x-rein-skip-coverage"), "{body}");
    let answered = eval_call(Some("admin-secret-1")).await.unwrap();
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.headers()["x-rein-outcome"], "answered", "declined without the skip");
    assert!(handoffs(&gw).await.is_empty());
    assert_eq!(sli_calls(&gw).await, 0, "an eval's calls are not SLI records");
    gw.stop().await.unwrap();
}
