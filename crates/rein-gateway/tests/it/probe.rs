//! The golden-prompt probe through the production path: its questions go to the gateway's own
//! listener with a client key, each answer is checked and tagged with the tier and model that
//! answered, `rein_probe_score` says the share that passed. The Tuesday edit on scripted
//! answers: settings version 2 moves the route to a model that drops the 48-hour cutoff, the
//! probe's score falls, and reverting to version 1 restores it on the next run. The schedule
//! runs it on its own.

use serde_json::{Value, json};

use crate::gateway::{Running, start_with};
use crate::ladder::HEAD;

const SCENARIO: &str = r#"
[[reply]]
contains = "change my order"
models = ["sim-tuesday"]
text = "You can change your order any time before delivery."

[[reply]]
contains = "change my order"
text = "Changes close 48 hours before delivery."

[[reply]]
contains = "deliver to hospitals"
text = "We deliver to hospitals every day before 6 p.m."
"#;

fn config(dir: &std::path::Path, every_ms: u64) -> String {
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    format!(
        r#"{HEAD}
[providers.scripted]
kind = "sim"
format = "openai"
scenario = "{scenario}"

[routes.support]
[[routes.support.tiers]]
name = "primary"
provider = "scripted"
model = "sim-primary"

[probe]
every_ms = {every_ms}
jitter = 0.0
route = "support"

[[probe.questions]]
id = "cutoff"
question = "Can I change my order?"
evidence = [{{ id = "140", source = "search", text = "Changes close 48 hours before delivery." }}]
expect = {{ contains = ["48 hours"] }}

[[probe.questions]]
id = "hospitals"
question = "Do you deliver to hospitals?"
expect = {{ contains = ["6 p.m."] }}
"#,
        scenario = scenario.display()
    )
}

async fn admin(gw: &Running, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
    let mut request = gw.client.request(method, gw.url(path)).bearer_auth("admin-secret-1");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    assert!(response.status().is_success(), "{path}: {}", response.status());
    response.json().await.unwrap()
}

async fn metrics(gw: &Running) -> String {
    gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap()
}

/// The probe's metrics the alert rules name: the probe tests export and check them, and the
/// alert rules' exercise in `tools.rs` skips them.
pub(crate) const CHECKED_BY_THE_PROBE_TESTS: &[&str] =
    &["rein_probe_score", "rein_probe_last_run_timestamp_seconds"];

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test]
async fn the_probe_flags_the_tuesday_edit_and_a_revert_restores_its_score() {
    let dir = tempfile::tempdir().unwrap();
    // A long schedule: these runs are the admin's.
    let gw = start_with(&config(dir.path(), 3_600_000), None).await;
    let run = admin(&gw, reqwest::Method::POST, "/admin/probe/run", None).await;
    assert_eq!(run["score"], 1.0, "{run}");
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["id"], "cutoff");
    assert_eq!(results[0]["result"], "pass");
    assert_eq!(results[0]["tier"], "primary", "tagged with the tier that answered");
    assert_eq!(results[0]["model"], "sim-primary", "and the model");
    assert!(results[0]["trace_id"].is_string(), "through the real path: it has a trace");
    let text = metrics(&gw).await;
    assert_eq!(sample(&text, "rein_probe_score{route=\"support\"}"), Some(1.0), "{text}");

    // Tuesday: version 2 moves the primary to a model that drops the cutoff.
    let change = json!({"author": "tuesday", "note": "friendlier answers",
                        "settings": {"tiers": {"primary": {"model": "sim-tuesday"}}}});
    admin(&gw, reqwest::Method::POST, "/admin/routes/support/versions", Some(change)).await;
    let run = admin(&gw, reqwest::Method::POST, "/admin/probe/run", None).await;
    assert_eq!(run["score"], 0.5, "{run}");
    let cutoff = &run["results"][0];
    assert_eq!((&cutoff["result"], &cutoff["model"]), (&json!("fail"), &json!("sim-tuesday")));
    assert_eq!(cutoff["detail"], "missing `48 hours`");
    let text = metrics(&gw).await;
    assert_eq!(sample(&text, "rein_probe_score{route=\"support\"}"), Some(0.5), "{text}");
    let fails = "rein_probe_checks_total{route=\"support\",question=\"cutoff\",result=\"fail\"}";
    assert_eq!(sample(&text, fails), Some(1.0), "{text}");

    // The easiest lever to undo: back to version 1; the next run passes again.
    let revert = json!({"version": 1, "author": "oncall", "reason": "the probe lost the cutoff"});
    admin(&gw, reqwest::Method::POST, "/admin/routes/support/revert", Some(revert)).await;
    let run = admin(&gw, reqwest::Method::POST, "/admin/probe/run", None).await;
    assert_eq!(run["score"], 1.0, "{run}");
    let shown = admin(&gw, reqwest::Method::GET, "/admin/probe", None).await;
    assert_eq!(shown["last"]["score"], 1.0);
    assert_eq!(shown["questions"], 2);
    // The dashboard shows the last run beside the SLIs.
    let page = gw.client.get(gw.url("/")).bearer_auth("admin-secret-1").send().await.unwrap();
    let page = page.text().await.unwrap();
    assert!(page.contains("<h2>Golden-prompt probe</h2>"), "{page}");
    assert!(page.contains("data-probe=score data-value=1>100%"), "{page}");
    assert!(page.contains("<tr data-probe-question=cutoff>"), "{page}");
    let text = metrics(&gw).await;
    assert_eq!(sample(&text, "rein_probe_runs_total"), Some(3.0), "{text}");
    for name in CHECKED_BY_THE_PROBE_TESTS {
        let exported = text.lines().any(|line| {
            line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} "))
        });
        assert!(exported, "`{name}`, which an alert rule names, is not exported:\n{text}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_schedule_runs_the_probe_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_with(&config(dir.path(), 1_000), None).await;
    let mut runs = None;
    for _ in 0..100 {
        runs = sample(&metrics(&gw).await, "rein_probe_runs_total").filter(|runs| *runs >= 1.0);
        if runs.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(runs.is_some(), "the probe ran within 10 s of a 1 s schedule");
    let shown = admin(&gw, reqwest::Method::GET, "/admin/probe", None).await;
    assert_eq!(shown["last"]["score"], 1.0, "{shown}");
    gw.stop().await.unwrap();
}

#[test]
fn probe_mistakes_are_named_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let env = crate::gateway::env();
    let base = config(dir.path(), 900_000);
    for (from, to, problem) in [
        (
            "route = \"support\"\n\n[[probe",
            "route = \"billing\"\n\n[[probe",
            "probe.questions[0].route",
        ),
        ("id = \"hospitals\"", "id = \"cutoff\"", "probe.questions[1].id"),
        ("every_ms = 900000", "every_ms = 10", "probe.every_ms"),
        ("expect = { contains = [\"6 p.m.\"] }", "expect = {}", "probe.questions[1].expect"),
        (
            "expect = { contains = [\"6 p.m.\"] }",
            "expect = { judge = \"is it right\" }",
            "probe.questions[1].expect.judge",
        ),
    ] {
        assert!(base.contains(from), "{from}");
        let text = base.replacen(from, to, 1);
        let error = rein_runtime::config::Config::from_toml(&text, &*env).unwrap_err();
        assert!(error.to_string().contains(problem), "{problem}: {error}");
    }
}
