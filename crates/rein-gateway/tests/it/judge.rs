//! The online judge through the gateway: a route's live answers sampled by `[judge]`, judged
//! after they have gone out by a judge route against its rubric, each verdict stored with its
//! sampling probability, and the quality score (the `/admin/sli` SLI and `rein_quality_score`)
//! from them. The Tuesday edit on scripted answers: settings version 2 moves the route to a model
//! that drops the 48-hour cutoff on every other answer; the judge fails those answers and the
//! probe fails its cutoff question; reverting to version 1 restores both.

use std::time::Duration;

use serde_json::{Value, json};

use crate::gateway::{Running, start_with};
use crate::ladder::HEAD;

const SCENARIO: &str = r#"
# The judge's rules first: its prompt quotes the customer's question too.
[[reply]]
contains = "any time before delivery"
models = ["sim-judge"]
text = "FAIL: the article says changes close 48 hours before delivery."

[[reply]]
contains = "Rubric:"
models = ["sim-judge"]
text = "PASS"

[[reply]]
contains = "change my order"
models = ["sim-tuesday"]
texts = ["You can change your order any time before delivery.", "Changes close 48 hours before delivery."]

[[reply]]
contains = "change my order"
text = "Changes close 48 hours before delivery."
"#;

const EVIDENCE: &str = "Changes close 48 hours before delivery.";

fn config(dir: &std::path::Path, judge: &str) -> String {
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    format!(
        r#"{HEAD}
[providers.scripted]
kind = "sim"
format = "openai"
scenario = "{scenario}"

[routes.support]
labels = ["question_type"]
[[routes.support.tiers]]
name = "primary"
provider = "scripted"
model = "sim-primary"

[routes.judge]
[[routes.judge.tiers]]
name = "primary"
provider = "scripted"
model = "sim-judge"

[probe]
every_ms = 3600000
route = "support"
[[probe.questions]]
id = "cutoff"
question = "Can I change my order?"
evidence = [{{ id = "140", source = "search", text = "{EVIDENCE}" }}]
expect = {{ contains = ["48 hours"] }}

{judge}
"#,
        scenario = scenario.display()
    )
}

const EVERY_ANSWER: &str = r#"
[judge]
route = "judge"
[judge.routes.support]
share = 1.0
"#;

async fn ask(gw: &Running, labels: Option<&str>) -> reqwest::Response {
    let body = json!({
        "model": "support",
        "messages": [{"role": "user", "content": "Can I change my order?"}],
        "rein": {"evidence": [{"id": "140", "source": "search", "text": EVIDENCE}]},
    });
    let mut request = gw.client.post(gw.url("/v1/chat/completions")).json(&body);
    request = request.bearer_auth("client-secret-1");
    if let Some(labels) = labels {
        request = request.header("x-rein-labels", labels);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    response
}

async fn admin(gw: &Running, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
    let response = gw.admin(method, path, body).await;
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

/// The verdicts once the judge has judged every sampled answer.
async fn verdicts(gw: &Running, query: &str) -> Value {
    for _ in 0..500 {
        let listed = admin(gw, reqwest::Method::GET, "/admin/judge/verdicts?window=1h", None).await;
        if listed["pending"] == 0 {
            let path = format!("/admin/judge/verdicts?window=1h{query}");
            return admin(gw, reqwest::Method::GET, &path, None).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the judge never finished");
}

async fn metrics(gw: &Running) -> String {
    gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap()
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

async fn support_quality(gw: &Running) -> Option<f64> {
    let view = admin(gw, reqwest::Method::GET, "/admin/sli?window=1h&route=support", None).await;
    view["routes"][0]["slis"]["quality"].as_f64()
}

/// The judge's metrics the alert rules name: exported and checked here, skipped by the alert
/// rules' exercise in `tools.rs`.
pub(crate) const CHECKED_BY_THE_JUDGE_TESTS: &[&str] =
    &["rein_judge_verdicts_total", "rein_judge_no_verdict_total"];

fn assert_exported(text: &str, name: &str) {
    assert!(CHECKED_BY_THE_JUDGE_TESTS.contains(&name));
    let exported = text.lines().any(|line| line.starts_with(&format!("{name}{{")));
    assert!(exported, "`{name}`, which an alert rule names, is not exported:\n{text}");
}

#[tokio::test]
async fn the_judge_flags_the_tuesday_edit_and_a_revert_restores_the_quality_score() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with(&config(dir.path(), EVERY_ANSWER), None).await;
    for _ in 0..4 {
        ask(&gw, None).await;
    }
    let listed = verdicts(&gw, "").await;
    let all = listed["verdicts"].as_array().unwrap();
    assert_eq!(all.len(), 4, "{listed}");
    for verdict in all {
        assert_eq!(verdict["pass"], true, "{verdict}");
        assert_eq!((&verdict["probability"], &verdict["base"]), (&json!(1.0), &json!(true)));
        assert_eq!(verdict["model"], "sim-primary", "tagged with the model that answered");
        assert_eq!(verdict["judge_model"], "sim-judge");
        assert_eq!(verdict["question"], "Can I change my order?");
        assert_eq!(verdict["answer"], EVIDENCE);
        assert_eq!(verdict["evidence"], json!([["140", EVIDENCE]]));
        assert!(verdict["request_id"].as_str().unwrap().starts_with("req_"));
    }
    assert_eq!(support_quality(&gw).await, Some(1.0));

    // Tuesday: version 2 moves the primary to a model that drops the cutoff every other time.
    let change = json!({"author": "tuesday", "note": "shorter answers",
                        "settings": {"tiers": {"primary": {"model": "sim-tuesday"}}}});
    admin(&gw, reqwest::Method::POST, "/admin/routes/support/versions", Some(change)).await;
    for _ in 0..4 {
        ask(&gw, None).await;
    }
    let failed = verdicts(&gw, "&failed=true").await;
    let failed = failed["verdicts"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{failed:?}");
    for verdict in failed {
        assert_eq!(verdict["model"], "sim-tuesday");
        assert_eq!(verdict["answer"], "You can change your order any time before delivery.");
        assert!(verdict["reply"].as_str().unwrap().starts_with("FAIL"), "{verdict}");
    }
    assert_eq!(support_quality(&gw).await, Some(6.0 / 8.0), "the quality score drops");
    let text = metrics(&gw).await;
    let series = |name: &str| sample(&text, name);
    assert_eq!(series("rein_judge_verdicts_total{route=\"support\",verdict=\"pass\"}"), Some(6.0));
    assert_eq!(series("rein_judge_verdicts_total{route=\"support\",verdict=\"fail\"}"), Some(2.0));
    assert_eq!(series("rein_quality_score_count{route=\"support\"}"), Some(8.0), "{text}");
    assert_eq!(series("rein_quality_score_sum{route=\"support\"}"), Some(6.0));
    assert_exported(&text, "rein_judge_verdicts_total");
    // The probe catches it too: its cutoff question fails on the new model.
    let run = admin(&gw, reqwest::Method::POST, "/admin/probe/run", None).await;
    assert_eq!((&run["score"], &run["results"][0]["model"]), (&json!(0.0), &json!("sim-tuesday")));

    // The easiest lever to undo: back to version 1. The judge passes what follows, the probe too.
    let revert = json!({"version": 1, "author": "oncall", "reason": "the judge lost the cutoff"});
    admin(&gw, reqwest::Method::POST, "/admin/routes/support/revert", Some(revert)).await;
    for _ in 0..4 {
        ask(&gw, None).await;
    }
    let run = admin(&gw, reqwest::Method::POST, "/admin/probe/run", None).await;
    assert_eq!(run["score"], 1.0, "{run}");
    let newest = verdicts(&gw, "&limit=5").await;
    for verdict in newest["verdicts"].as_array().unwrap() {
        assert_eq!((&verdict["pass"], &verdict["model"]), (&json!(true), &json!("sim-primary")));
    }
    // 4 + 2 + 0 (the probe's failed answer) + 4 + 1 passes of 14 judged answers.
    let listed = verdicts(&gw, "").await;
    assert_eq!(listed["verdicts"].as_array().unwrap().len(), 14);
    assert_eq!(support_quality(&gw).await, Some(11.0 / 14.0));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_slice_is_judged_at_its_share_weighted_out_of_the_routes_score() {
    let dir = tempfile::tempdir().unwrap();
    let judge = r#"
[judge]
route = "judge"
keep_content = false
[judge.routes.support]
share = 0.0
[[judge.routes.support.slices]]
labels = { question_type = "cutoff" }
share = 1.0
"#;
    let gw = start_with(&config(dir.path(), judge), None).await;
    ask(&gw, Some("question_type=cutoff")).await;
    ask(&gw, Some("question_type=cutoff")).await;
    ask(&gw, Some("question_type=delivery")).await;
    ask(&gw, None).await;
    let listed = verdicts(&gw, "").await;
    let all = listed["verdicts"].as_array().unwrap();
    assert_eq!(all.len(), 2, "only the slice is judged: {listed}");
    for verdict in all {
        assert_eq!(verdict["labels"], json!({"question_type": "cutoff"}));
        assert_eq!((&verdict["probability"], &verdict["base"]), (&json!(1.0), &json!(false)));
        for field in ["question", "answer", "evidence"] {
            assert!(verdict.get(field).is_none(), "keep_content = false keeps no `{field}`");
        }
    }
    let text = metrics(&gw).await;
    let judged = "rein_judge_verdicts_total{route=\"support\",verdict=\"pass\"}";
    assert_eq!(sample(&text, judged), Some(2.0));
    assert_eq!(
        sample(&text, "rein_quality_score_count{route=\"support\"}"),
        None,
        "a slice's extra draws are not the route's sample: {text}"
    );
    assert_eq!(support_quality(&gw).await, Some(1.0));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_judge_that_cannot_answer_leaves_no_verdict_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    // The judge route's model always answers 500.
    let text =
        config(dir.path(), EVERY_ANSWER).replace("model = \"sim-judge\"", "model = \"sim:500\"");
    let gw = start_with(&text, None).await;
    ask(&gw, None).await;
    let listed = verdicts(&gw, "").await;
    assert!(listed["verdicts"].as_array().unwrap().is_empty(), "{listed}");
    let text = metrics(&gw).await;
    let series = "rein_judge_no_verdict_total{route=\"support\",reason=\"judge_failed\"}";
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
    assert_eq!(support_quality(&gw).await, None, "no verdict, no score");
    assert_exported(&text, "rein_judge_no_verdict_total");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_verdict_queries_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with(&config(dir.path(), EVERY_ANSWER), None).await;
    let response = gw.admin(reqwest::Method::GET, "/admin/judge/verdicts?window=soon", None).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("`window`"), "{body}");
    let response = gw.admin(reqwest::Method::GET, "/admin/judge/verdicts?nope=1", None).await;
    assert_eq!(response.status(), 400);
    let anonymous = gw.client.get(gw.url("/admin/judge/verdicts")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401, "the admin key is needed");
    gw.stop().await.unwrap();
}
