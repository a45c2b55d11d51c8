//! `rein levers` and `rein drill` against `rein serve` on simulated providers: each lever pulled
//! and shown (route-to, release, pin-model, revert, kill), with the audit's author and reason
//! required; every drill refused on a route not marked drillable (by the CLI, naming the route
//! and `drillable`); a two-second failover drill whose report splits the calls made meanwhile
//! between the primary and the fallback; the kill-switch drill printing what the customer got
//! and the route answering again; the hand-off drill timing two replies (and exiting 3 when none
//! comes within its wait).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::upstream_caps::Gateway;

const BIN: &str = env!("CARGO_BIN_EXE_rein");
const ADMIN_ENV: &str = "REIN_LEVERS_ADMIN";
const ADMIN_KEY: &str = "levers-admin-key";

fn config(dir: &Path) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_key_env = "{ADMIN_ENV}"

[store]
sqlite_path = "{store}"

[providers.sim]
kind = "sim"

[routes.chat]
drillable = true
degraded = {{ template = "We are on it; a person will reply within 2 hours." }}

[[routes.chat.tiers]]
name = "primary"
provider = "sim"
model = "sim-primary"

[[routes.chat.tiers]]
name = "fallback"
provider = "sim"
model = "sim-fallback"

[routes.plain]
[[routes.plain.tiers]]
name = "primary"
provider = "sim"
model = "sim-primary"

[[routes.plain.tiers]]
name = "fallback"
provider = "sim"
model = "sim-fallback"
"#,
        store = dir.join("rein.sqlite").display(),
    )
}

fn start() -> (tempfile::TempDir, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let gateway =
        Gateway::start(dir.path(), &config(dir.path()), &[(ADMIN_ENV, ADMIN_KEY)], "warn");
    (dir, gateway)
}

/// `rein <args> --url URL --admin-key-env ...` as a child, not yet waited for.
fn command(gateway: &Gateway, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .args(["--url", &gateway.url, "--admin-key-env", ADMIN_ENV])
        .env(ADMIN_ENV, ADMIN_KEY)
        .env_remove("REIN_CLIENT_KEY")
        .stdin(Stdio::null());
    command
}

fn rein(gateway: &Gateway, args: &[&str]) -> (Option<i32>, String, String) {
    let Output { status, stdout, stderr } = command(gateway, args).output().unwrap();
    (
        status.code(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A customer's call on `route`: the tier that answered, the model and the outcome.
async fn call(gateway: &Gateway, route: &str) -> (String, String, String) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gateway.url))
        .json(&json!({"model": route, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let header =
        |name: &str| response.headers().get(name).map_or("-", |v| v.to_str().unwrap()).to_string();
    (header("x-rein-tier"), header("x-rein-model"), header("x-rein-outcome"))
}

async fn admin(
    gateway: &Gateway,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", gateway.url))
        .bearer_auth(ADMIN_KEY);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn levers_shows_and_pulls_each_lever_with_its_audit() {
    let (_dir, gateway) = start();
    let (code, stdout, stderr) = rein(&gateway, &["levers", "chat"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("levers on route chat"), "{stdout}");
    assert!(stdout.contains("route-to    off") && stdout.contains("engaged: none"), "{stdout}");

    // Every action needs its author and reason.
    let (code, _, stderr) =
        rein(&gateway, &["levers", "chat", "route-to", "fallback", "--reason", "r"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--author"), "{stderr}");
    let (code, stdout, _) =
        rein(&gateway, &["levers", "chat", "route-to", "nope", "--author", "ana", "--reason", "r"]);
    assert_eq!(code, Some(1));
    assert!(stdout.contains("400") && stdout.contains("`tier`"), "{stdout}");

    let (code, stdout, _) = rein(
        &gateway,
        &["levers", "chat", "route-to", "fallback", "--author", "ana", "--reason", "score dropped"],
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.starts_with("done: calls start at tier fallback"), "{stdout}");
    assert!(stdout.contains("route-to    tier fallback since 20"), "{stdout}");
    assert!(
        stdout.contains("by ana: score dropped") && stdout.contains("engaged: route_to"),
        "{stdout}"
    );
    assert_eq!(call(&gateway, "chat").await.0, "fallback");
    let (code, stdout, _) =
        rein(&gateway, &["levers", "chat", "release", "--author", "bo", "--reason", "fixed"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("route-to    off"), "{stdout}");
    assert!(stdout.contains("released          by bo: fixed"), "{stdout}");
    assert!(stdout.contains("to fallback       by ana: score dropped"), "{stdout}");
    assert_eq!(call(&gateway, "chat").await.0, "primary");

    let (code, stdout, _) = rein(
        &gateway,
        &[
            "levers",
            "chat",
            "pin-model",
            "primary",
            "sim-primary-0806",
            "--author",
            "ana",
            "--reason",
            "alias moved",
        ],
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("version 2 serves, tier primary pinned to sim-primary-0806"),
        "{stdout}"
    );
    assert!(
        stdout.contains("version 2 (model pinned)") && stdout.contains("engaged: pin_model"),
        "{stdout}"
    );
    assert_eq!(call(&gateway, "chat").await.1, "sim-primary-0806");
    let (code, stdout, _) = rein(
        &gateway,
        &["levers", "chat", "revert", "1", "--author", "bo", "--reason", "no better"],
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("version 1 (reverted)") && stdout.contains("by bo: no better"),
        "{stdout}"
    );
    assert_eq!(call(&gateway, "chat").await.1, "sim-primary");

    let (code, stdout, _) = rein(
        &gateway,
        &["levers", "chat", "kill", "on", "--author", "ana", "--reason", "incident"],
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("kill        ENGAGED since") && stdout.contains("incident (by ana)"),
        "{stdout}"
    );
    assert_eq!(call(&gateway, "chat").await.2, "degraded");
    let (code, stdout, _) = rein(&gateway, &["levers", "chat", "--json"]);
    assert_eq!(code, Some(0));
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown["engaged"], json!(["revert", "kill_switch"]));
    let (code, _, _) =
        rein(&gateway, &["levers", "chat", "kill", "off", "--author", "ana", "--reason", "over"]);
    assert_eq!(code, Some(0));
    assert_eq!(call(&gateway, "chat").await.2, "answered");
}

#[test]
fn every_drill_is_refused_on_a_route_not_marked_drillable() {
    let (_dir, gateway) = start();
    for drill in [
        &["drill", "failover", "--route", "plain", "--seconds", "1"][..],
        &["drill", "kill-switch", "--route", "plain"],
        &["drill", "handoff", "--route", "plain", "--count", "1"],
    ] {
        let (code, stdout, stderr) = rein(&gateway, drill);
        assert_eq!(code, Some(1), "{drill:?}: {stdout}{stderr}");
        assert!(stdout.contains("route `plain` is not drillable"), "{stdout}");
        assert!(stdout.contains("drillable = true"), "{stdout}");
    }
    let (code, stdout, _) = rein(&gateway, &["drill", "kill-switch", "--route", "nope"]);
    assert_eq!(code, Some(1));
    assert!(stdout.contains("404"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_drill_reports_the_fallback_beside_the_primary() {
    let (_dir, gateway) = start();
    let drill = command(
        &gateway,
        &["drill", "failover", "--route", "chat", "--share", "0.5", "--seconds", "2", "--json"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    // Traffic while it runs: half of it starts at the fallback.
    let mut calls = 0;
    let started = tokio::time::Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        let levers = admin(&gateway, reqwest::Method::GET, "/admin/routes/chat/levers", None).await;
        if levers["failover_drill"].is_null() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        call(&gateway, "chat").await;
        calls += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let output = drill.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["primary"]["tier"], "primary");
    assert_eq!(report["fallback"]["tier"], "fallback");
    let (primary, fallback) = (
        report["primary"]["slis"]["calls"].as_u64().unwrap(),
        report["fallback"]["slis"]["calls"].as_u64().unwrap(),
    );
    assert!(calls >= 4, "{calls}");
    assert_eq!(primary + fallback, calls, "{report}");
    assert!(primary.abs_diff(fallback) <= 1, "half each: {report}");
    assert_eq!(report["fallback"]["slis"]["availability"], 1.0);
    assert_eq!(report["stopped_early"], false);
    // Ended by the gateway at its expiry.
    let levers = admin(&gateway, reqwest::Method::GET, "/admin/routes/chat/levers", None).await;
    assert_eq!(levers["failover_drill"], Value::Null);

    // As text, the two tiers side by side; a drill nobody sent traffic through says so.
    let (code, stdout, _) =
        rein(&gateway, &["drill", "failover", "--route", "chat", "--seconds", "1"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.starts_with(
            "failover drill on route chat: 50% of calls start at tier fallback for 1s"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("ROLE") && stdout.contains("AVAILABILITY"), "{stdout}");
    let fallback_row = stdout.lines().find(|l| l.starts_with("fallback")).unwrap();
    assert!(fallback_row.split_whitespace().nth(2) == Some("0"), "{stdout}");
    assert!(stdout.contains("note: no call reached the fallback"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_drill_prints_what_the_customer_got_and_flips_back() {
    let (_dir, gateway) = start();
    let (code, stdout, stderr) = rein(&gateway, &["drill", "kill-switch", "--route", "chat"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("HTTP 200"), "{stdout}");
    assert!(stdout.contains("x-rein-outcome: degraded"), "{stdout}");
    assert!(stdout.contains("a person will reply within 2 hours"), "{stdout}");
    assert!(
        stdout.contains("the route answers normally again: HTTP 200, answered on tier primary"),
        "{stdout}"
    );
    let kill = admin(&gateway, reqwest::Method::GET, "/admin/kill", None).await;
    let reasons: Vec<&str> =
        kill["audit"].as_array().unwrap().iter().map(|f| f["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["drill", "drill over"]);
    assert_eq!(call(&gateway, "chat").await.2, "answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handoff_drill_times_the_replies_against_the_promise() {
    let (_dir, gateway) = start();
    let drill = command(
        &gateway,
        &[
            "drill",
            "handoff",
            "--route",
            "chat",
            "--count",
            "2",
            "--promised-seconds",
            "60",
            "--wait-seconds",
            "30",
            "--poll-ms",
            "100",
            "--json",
        ],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    // A reviewer answers both seeded conversations.
    let mut decided = 0;
    for _ in 0..300 {
        let listed = admin(
            &gateway,
            reqwest::Method::GET,
            "/admin/handoffs?trigger=drill&state=pending",
            None,
        )
        .await;
        for handoff in listed["handoffs"].as_array().cloned().unwrap_or_default() {
            let id = handoff["id"].as_i64().unwrap();
            let body = json!({"decision": "approve", "by": "reviewer-1"});
            admin(
                &gateway,
                reqwest::Method::POST,
                &format!("/admin/handoffs/{id}/decision"),
                Some(body),
            )
            .await;
            decided += 1;
        }
        if decided == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(decided, 2);
    let output = drill.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((report["seeded"].as_u64(), report["replied"].as_u64()), (Some(2), Some(2)));
    assert_eq!(report["within_promise"], 2);
    for conversation in report["conversations"].as_array().unwrap() {
        assert_eq!(conversation["decided_by"], "reviewer-1");
        assert!(conversation["reply_ms"].as_i64().unwrap() < 30_000, "{conversation}");
    }

    // Nobody answers: the report says so and the drill exits 3.
    let (code, stdout, _) = rein(
        &gateway,
        &[
            "drill",
            "handoff",
            "--route",
            "chat",
            "--count",
            "1",
            "--promised-seconds",
            "60",
            "--wait-seconds",
            "1",
            "--poll-ms",
            "100",
        ],
    );
    assert_eq!(code, Some(3), "{stdout}");
    assert!(stdout.contains("no reply") && stdout.contains("0 of 1 replied"), "{stdout}");
}
