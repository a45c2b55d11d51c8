//! Labels on calls: the caller tags a call (`x-rein-labels: question_type=delivery, locale=de`,
//! or the body's `rein.labels` object, in either wire format), and the route's declared label
//! keys slice its metrics; undeclared keys never become a series,
//! a key's values past the first 50 count as `other`, and a malformed header is the caller's
//! 400, naming it.

use serde_json::{Value, json};

use crate::gateway::{Running, start_with};
use crate::ladder::HEAD;

fn config(labels: &str) -> String {
    format!(
        r#"{HEAD}
[routes.support]
labels = {labels}

[[routes.support.tiers]]
name = "primary"
provider = "sim-openai"
model = "gpt-4o"
"#
    )
}

async fn ask(gw: &Running, labels: &str) -> reqwest::Response {
    gw.client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-1")
        .header("x-rein-labels", labels)
        .json(&json!({"model": "support", "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap()
}

async fn metrics(gw: &Running) -> String {
    gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn the_routes_label_keys_slice_its_metrics_and_nothing_else_does() {
    let gw = start_with(&config(r#"["question_type"]"#), None).await;
    for labels in
        ["question_type=delivery, locale=de", "question_type=delivery", "question_type=icu"]
    {
        assert_eq!(ask(&gw, labels).await.status(), 200);
    }
    let text = metrics(&gw).await;
    let series = |value: &str, count: u64| {
        format!(
            "rein_labeled_calls_total{{route=\"support\",label=\"question_type\",value=\"{value}\",outcome=\"answered\"}} {count}"
        )
    };
    assert!(text.lines().any(|l| l == series("delivery", 2)), "{text}");
    assert!(text.lines().any(|l| l == series("icu", 1)), "{text}");
    assert!(!text.contains("label=\"locale\""), "an undeclared key is never a series");

    // A key's values are bounded: past the first 50, they count as `other`.
    for n in 0..60 {
        assert_eq!(ask(&gw, &format!("question_type=q{n}")).await.status(), 200);
    }
    let text = metrics(&gw).await;
    let values = text
        .lines()
        .filter(|l| {
            l.starts_with("rein_labeled_calls_total{route=\"support\",label=\"question_type\"")
        })
        .count();
    assert_eq!(values, 50 + 1, "50 values and `other`");
    assert!(text.lines().any(|l| l == series("other", 12)), "{text}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_malformed_labels_header_is_the_callers_400_naming_it() {
    let gw = start_with(&config(r#"["question_type"]"#), None).await;
    for (labels, why) in [
        ("question_type", "key=value"),
        ("Question=x", "label key `Question`"),
        ("a=1, a=2", "twice"),
    ] {
        let response = ask(&gw, labels).await;
        assert_eq!(response.status(), 400, "{labels}");
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("x-rein-labels") && message.contains(why), "{labels}: {message}");
    }
    gw.stop().await.unwrap();
}

async fn ask_body(
    gw: &Running,
    path: &str,
    header: Option<&str>,
    rein: Value,
) -> reqwest::Response {
    let mut body = json!({"model": "support", "messages": [{"role": "user", "content": "hello"}]});
    if path.contains("messages") {
        body["max_tokens"] = json!(64);
    }
    body["rein"] = rein;
    let mut request = gw.client.post(gw.url(path)).bearer_auth("client-secret-1").json(&body);
    if let Some(labels) = header {
        request = request.header("x-rein-labels", labels);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn the_bodys_rein_labels_slice_like_the_header_in_both_formats() {
    let gw = start_with(&config(r#"["question_type", "locale"]"#), None).await;
    let labels = json!({"labels": {"question_type": "refund"}});
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let response = ask_body(&gw, path, None, labels.clone()).await;
        assert_eq!(response.status(), 200, "{path}");
    }
    // Joined with the header's; the same value in both is one label.
    let both = json!({"labels": {"question_type": "refund", "locale": "de"}});
    let response = ask_body(&gw, "/v1/chat/completions", Some("question_type=refund"), both).await;
    assert_eq!(response.status(), 200);
    let text = metrics(&gw).await;
    let line = "rein_labeled_calls_total{route=\"support\",label=\"question_type\",value=\"refund\",outcome=\"answered\"} 3";
    assert!(text.lines().any(|l| l == line), "{text}");
    let line = "rein_labeled_calls_total{route=\"support\",label=\"locale\",value=\"de\",outcome=\"answered\"} 1";
    assert!(text.lines().any(|l| l == line), "{text}");

    // Each mistake is a 400 in the caller's format naming the field.
    for (path, header, rein, param) in [
        ("/v1/chat/completions", None, json!({"labels": "question_type=x"}), "rein.labels"),
        ("/v1/chat/completions", None, json!({"labels": {"locale": 5}}), "rein.labels.locale"),
        ("/v1/messages", None, json!({"labels": {"Locale": "de"}}), "rein.labels.Locale"),
        (
            "/v1/chat/completions",
            Some("locale=fr"),
            json!({"labels": {"locale": "de"}}),
            "rein.labels.locale",
        ),
        ("/v1/chat/completions", None, json!({"lables": {}}), "rein.lables"),
    ] {
        let response = ask_body(&gw, path, header, rein.clone()).await;
        assert_eq!(response.status(), 400, "{path} {rein}");
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(param), "{rein}: {body}");
        if path.contains("completions") {
            assert_eq!(body["error"]["param"], param, "{body}");
        } else {
            assert_eq!(body["type"], "error", "the Anthropic error shape: {body}");
        }
    }
    gw.stop().await.unwrap();
}

#[test]
fn a_route_slices_by_a_bounded_set_of_valid_keys() {
    let env = crate::gateway::env();
    let nine: Vec<String> = (0..9).map(|n| format!("\"k{n}\"")).collect();
    for (labels, problem) in [
        (format!("[{}]", nine.join(", ")), "at most 8 label keys"),
        (r#"["Question Type"]"#.to_string(), "is not a label key"),
    ] {
        let error = rein_runtime::config::Config::from_toml(&config(&labels), &*env).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("routes.support.labels") && text.contains(problem), "{text}");
    }
}
