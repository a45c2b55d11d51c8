//! `rein judge verdicts` against `rein serve`: every answer of a route judged by a scripted judge
//! route, the verdicts listed, written as lines for a person to label, and (once labelled) read
//! back by `rein judge agreement`: the weekly loop that checks the judge.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::upstream_caps::Gateway;

const BIN: &str = env!("CARGO_BIN_EXE_rein");

const SCENARIO: &str = r#"
[[reply]]
contains = "any time"
models = ["sim-judge"]
text = "FAIL: the article says 48 hours."

[[reply]]
contains = "Rubric:"
models = ["sim-judge"]
text = "PASS"

[[reply]]
contains = "change my order"
texts = ["You can change it any time.", "Changes close 48 hours before delivery."]
"#;

fn config(dir: &std::path::Path) -> String {
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_key_env = "REIN_JUDGE_ADMIN"

[store]
sqlite_path = "{store}"

[providers.sim]
kind = "sim"
scenario = "{scenario}"

[routes.support]
[[routes.support.tiers]]
name = "primary"
provider = "sim"
model = "sim-primary"

[routes.judge]
[[routes.judge.tiers]]
name = "primary"
provider = "sim"
model = "sim-judge"

[judge]
route = "judge"
[judge.routes.support]
share = 1.0
"#,
        store = dir.join("rein.sqlite").display(),
        scenario = scenario.display(),
    )
}

fn rein(args: &[&str], url: &str) -> (Option<i32>, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .args(["--url", url, "--admin-key-env", "ADMIN"])
        .env("ADMIN", "judge-admin-key")
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_are_listed_written_for_labelling_and_read_back_by_agreement() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(
        dir.path(),
        &config(dir.path()),
        &[("REIN_JUDGE_ADMIN", "judge-admin-key")],
        "warn",
    );
    let client = reqwest::Client::new();
    let body = serde_json::json!({
        "model": "support",
        "messages": [{"role": "user", "content": "Can I change my order?"}],
    });
    for _ in 0..3 {
        let url = format!("{}/v1/chat/completions", gateway.url);
        let response = client.post(url).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let url = gateway.url.as_str();
    let mut listed = Value::Null;
    for _ in 0..250 {
        let (code, stdout, stderr) = rein(&["judge", "verdicts", "--json"], url);
        assert_eq!(code, Some(0), "{stdout}{stderr}");
        listed = serde_json::from_str(&stdout).unwrap();
        if listed["pending"] == 0 && listed["verdicts"].as_array().unwrap().len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert_eq!(listed["verdicts"].as_array().unwrap().len(), 3, "{listed}");

    let (code, table, _) = rein(&["judge", "verdicts", "--failed"], url);
    assert_eq!(code, Some(0));
    assert!(table.starts_with("2 verdict(s), 0 passed; 0 answer(s) waiting"), "{table}");
    assert!(table.contains("FAIL: the article says 48 hours."), "{table}");

    let labels = dir.path().join("week.jsonl");
    let labels_arg = labels.to_str().unwrap();
    let (code, _, stderr) = rein(&["judge", "verdicts", "--labels-out", labels_arg], url);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("wrote 3 answer(s) to label"), "{stderr}");
    let text = std::fs::read_to_string(&labels).unwrap();
    let mut lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    for line in &lines {
        assert_eq!(line["human"], Value::Null, "left for a person: {line}");
        assert_eq!(line["context"]["question"], "Can I change my order?");
        assert!(line["week"].as_str().unwrap().contains("-W"), "{line}");
        let said = line["context"]["answer"].as_str().unwrap();
        let expected = if said.contains("any time") { "fail" } else { "pass" };
        assert_eq!(line["judge"], expected, "{line}");
    }

    // Not labelled yet: agreement says which line.
    let output = Command::new(BIN).args(["judge", "agreement", labels_arg]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("week.jsonl:1: not a labelled answer"), "{stderr}");

    // The person agrees on every answer but one the judge passed, which they fail.
    for line in &mut lines {
        let judge = line["judge"].as_str().unwrap().to_string();
        line["human"] = Value::from(if judge == "pass" { "fail" } else { judge.as_str() });
    }
    let labelled: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&labels, labelled.join("\n")).unwrap();
    let output =
        Command::new(BIN).args(["judge", "agreement", labels_arg, "--json"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let agreement: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(agreement["labelled"], 3);
    assert_eq!(
        (&agreement["with_ties"]["hits"], &agreement["with_ties"]["of"]),
        (&2.into(), &3.into())
    );
    assert_eq!(agreement["disagreements"].as_array().unwrap().len(), 1);
}
