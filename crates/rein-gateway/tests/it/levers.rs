//! The levers and the drills through the admin API of a real gateway in front of in-process
//! simulators: route-to (calls start at the named tier, audited, counted in the SLIs, kept
//! across a restart on the same SQLite file and synced to another replica through Postgres,
//! released), the model pin (a new revertable version), `GET .../levers`, bad input by field,
//! and the drills: refused on a route not marked drillable, a failover drill that ends by itself,
//! the kill-switch drill's guards, the hand-off drill's seeded conversations.

use std::sync::Arc;
use std::time::Duration;

use rein_runtime::EnvSource;
use reqwest::Method;
use serde_json::{Value, json};

use crate::gateway::{CONFIG, Running, chat, env, start, start_with, start_with_env};

const KEY: Option<&str> = Some("client-secret-1");

/// The test config with `chat` drillable.
fn drillable_config() -> String {
    CONFIG.replace("[routes.chat]\n", "[routes.chat]\ndrillable = true\n")
}

/// The tier that answered a call on `route`, and its outcome.
async fn served(gw: &Running, route: &str) -> (String, String) {
    let response = gw.post("/v1/chat/completions", KEY, chat(route)).await;
    assert_eq!(response.status(), 200);
    let header =
        |name: &str| response.headers().get(name).map_or("-", |v| v.to_str().unwrap()).to_string();
    (header("x-rein-tier"), header("x-rein-outcome"))
}

async fn levers(gw: &Running, route: &str) -> Value {
    let response = gw.admin(Method::GET, &format!("/admin/routes/{route}/levers"), None).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn route_to(gw: &Running, route: &str, body: Value) -> reqwest::Response {
    gw.admin(Method::POST, &format!("/admin/routes/{route}/route-to"), Some(body)).await
}

#[tokio::test]
async fn route_to_starts_calls_at_the_tier_is_audited_survives_a_restart_and_releases() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = dir.path().join("rein.sqlite");
    let config = CONFIG.replace(
        "sqlite_path = \":memory:\"",
        &format!("sqlite_path = {:?}", sqlite.to_str().unwrap()),
    );
    let gw = start_with(&config, None).await;
    assert_eq!(served(&gw, "chat").await, ("primary".into(), "answered".into()));
    let before = levers(&gw, "chat").await;
    assert_eq!(before["engaged"], json!([]));
    assert_eq!(before["route_to"], Value::Null);

    let flip = json!({"tier": "fallback", "author": "ana", "reason": "quality score dropped"});
    let response = route_to(&gw, "chat", flip).await;
    assert_eq!(response.status(), 200);
    let recorded: Value = response.json().await.unwrap();
    assert_eq!(recorded["tier"], "fallback");
    assert!(recorded["at_unix_ms"].as_u64().unwrap() > 0);
    // Every call now starts at the fallback, which answers by plan (as the failover share's
    // calls do: no tier failed), and the response names it.
    for _ in 0..3 {
        assert_eq!(served(&gw, "chat").await, ("fallback".into(), "answered".into()));
    }
    // Other routes are untouched.
    assert_eq!(served(&gw, "flaky").await.1, "fallback");
    let engaged = levers(&gw, "chat").await;
    assert_eq!(engaged["engaged"], json!(["route_to"]));
    assert_eq!(engaged["route_to"]["tier"], "fallback");
    assert_eq!(engaged["route_to"]["applies"], true);
    assert_eq!(engaged["route_to"]["author"], "ana");
    assert_eq!(engaged["route_to"]["reason"], "quality score dropped");
    assert_eq!(engaged["route_to"]["since_unix_ms"], recorded["at_unix_ms"]);
    // Counted in the SLIs like any call (an eval's pinned calls are not).
    let slis: Value =
        gw.admin(Method::GET, "/admin/sli?window=1h&route=chat", None).await.json().await.unwrap();
    let on_fallback = slis["slices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|slice| slice["tier"] == "fallback")
        .unwrap_or_else(|| panic!("no fallback slice in {slis}"));
    assert_eq!(on_fallback["calls"], 3);
    gw.stop().await.unwrap();

    // A new process on the same store: still routed, with the same audit.
    let gw = start_with(&config, None).await;
    assert_eq!(served(&gw, "chat").await.0, "fallback");
    assert_eq!(levers(&gw, "chat").await["route_to"], engaged["route_to"]);

    let release = json!({"author": "bo", "reason": "prompt reverted"});
    let response = gw.admin(Method::DELETE, "/admin/routes/chat/route-to", Some(release)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(served(&gw, "chat").await, ("primary".into(), "answered".into()));
    let released = levers(&gw, "chat").await;
    assert_eq!(released["route_to"], Value::Null);
    let history: Vec<(&str, &str)> = released["route_to_history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["author"].as_str().unwrap(), f["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(history, [("bo", "prompt reverted"), ("ana", "quality score dropped")]);
    // `{"tier": null}` releases too; both stay in the audit after a restart.
    let flip = json!({"tier": "fallback", "author": "ana", "reason": "again"});
    assert_eq!(route_to(&gw, "chat", flip).await.status(), 200);
    let flip = json!({"tier": null, "author": "ana", "reason": "over"});
    assert_eq!(route_to(&gw, "chat", flip).await.status(), 200);
    gw.stop().await.unwrap();
    let store = rein_store::Store::open(&sqlite).unwrap();
    let audit: Vec<(Option<String>, String)> = store
        .route_to_flips_after(0)
        .unwrap()
        .into_iter()
        .map(|(_, flip)| (flip.tier, flip.author))
        .collect();
    assert_eq!(
        audit,
        [
            (Some("fallback".into()), "ana".into()),
            (None, "bo".into()),
            (Some("fallback".into()), "ana".into()),
            (None, "ana".into()),
        ]
    );
}

#[tokio::test]
async fn a_lever_with_bad_input_is_refused_by_field() {
    let gw = start().await;
    let cases = [
        ("chat", json!({"tier": "nope", "author": "ana", "reason": "r"}), 400, "`tier`"),
        ("chat", json!({"tier": "fallback", "author": " ", "reason": "r"}), 400, "`author`"),
        ("chat", json!({"tier": "fallback", "author": "ana", "reason": ""}), 400, "`reason`"),
        ("chat", json!({"tier": "fallback", "reason": "r"}), 400, "author"),
        ("nope", json!({"tier": "fallback", "author": "ana", "reason": "r"}), 404, "nope"),
    ];
    for (route, body, status, needle) in cases {
        let response = route_to(&gw, route, body.clone()).await;
        assert_eq!(response.status(), status, "{body}");
        let answer: Value = response.json().await.unwrap();
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: `{needle}` not in {message}");
    }
    let pins = [
        (json!({"tier": "nope", "model": "m", "author": "ana", "reason": "r"}), "`tier`"),
        (json!({"tier": "primary", "model": "", "author": "ana", "reason": "r"}), "`model`"),
        (json!({"tier": "primary", "model": "m", "author": "", "reason": "r"}), "`author`"),
    ];
    for (body, needle) in pins {
        let response =
            gw.admin(Method::POST, "/admin/routes/chat/pin-model", Some(body.clone())).await;
        assert_eq!(response.status(), 400, "{body}");
        let answer: Value = response.json().await.unwrap();
        assert!(answer["error"]["message"].as_str().unwrap().contains(needle), "{answer}");
    }
    // Nothing was engaged, and the admin key is still required.
    assert_eq!(levers(&gw, "chat").await["engaged"], json!([]));
    let anonymous = gw.client.get(gw.url("/admin/routes/chat/levers")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_model_pin_is_a_new_version_that_serves_and_reverts() {
    let gw = start().await;
    let response = gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    assert_eq!(response.headers()["x-rein-model"], "sim-primary");
    let before = levers(&gw, "chat").await["settings"]["version"].as_i64().unwrap();

    let pin = json!({"tier": "primary", "model": "sim-primary-2024-08-06", "author": "ana",
                     "reason": "the provider changed the alias"});
    let response = gw.admin(Method::POST, "/admin/routes/chat/pin-model", Some(pin)).await;
    assert_eq!(response.status(), 200);
    let version: Value = response.json().await.unwrap();
    assert_eq!(version["version"], before + 1);
    assert_eq!(version["settings"]["tiers"]["primary"]["model"], "sim-primary-2024-08-06");
    assert_eq!(version["settings"]["tiers"]["fallback"]["model"], "sim-fallback");
    let response = gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    assert_eq!(response.headers()["x-rein-model"], "sim-primary-2024-08-06");
    let pinned = levers(&gw, "chat").await;
    assert_eq!(pinned["engaged"], json!(["pin_model"]));
    assert_eq!(pinned["settings"]["lever"], "pin_model");
    assert_eq!(pinned["settings"]["author"], "ana");
    assert_eq!(pinned["settings"]["reason"], "the provider changed the alias");

    // Revertable like any version: the first lever undoes the second.
    let revert = json!({"version": before, "author": "bo", "reason": "pin did not help"});
    let response = gw.admin(Method::POST, "/admin/routes/chat/revert", Some(revert)).await;
    assert_eq!(response.status(), 200);
    let response = gw.post("/v1/chat/completions", KEY, chat("chat")).await;
    assert_eq!(response.headers()["x-rein-model"], "sim-primary");
    let reverted = levers(&gw, "chat").await;
    assert_eq!(reverted["engaged"], json!(["revert"]));
    assert_eq!(reverted["settings"]["version"], before);
    assert_eq!(reverted["settings"]["author"], "bo");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_route_to_flip_on_one_replica_reaches_the_others() {
    let postgres = rein_store::testing::TempPostgres::shared().unwrap();
    let url = postgres.create_database().await.unwrap();
    let text = CONFIG
        .replace("drain_timeout_ms = 5000", "drain_timeout_ms = 5000\nkill_sync_ms = 20")
        .replace(
            "sqlite_path = \":memory:\"",
            "sqlite_path = \":memory:\"\npostgres_url_env = \"PG_URL\"",
        );
    let base = env();
    let with_pg: EnvSource = Arc::new(move |name: &str| match name {
        "PG_URL" => Some(url.clone()),
        other => base(other),
    });
    let a = start_with_env(&text, None, with_pg.clone()).await;
    let b = start_with_env(&text, None, with_pg).await;
    let flip = json!({"tier": "fallback", "author": "ana", "reason": "incident 7"});
    assert_eq!(route_to(&a, "chat", flip).await.status(), 200);
    assert_eq!(served(&a, "chat").await.0, "fallback", "the replica that flipped applies it");
    let mut waited = 0;
    while served(&b, "chat").await.0 != "fallback" {
        assert!(waited < 250, "replica B never applied the flip");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
    }
    assert_eq!(levers(&b, "chat").await["route_to"]["reason"], "incident 7");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test]
async fn every_drill_is_refused_on_a_route_not_marked_drillable() {
    let gw = start().await;
    let drills = [
        ("failover", json!({"share": 0.5, "seconds": 1, "author": "ana"})),
        ("kill-switch", json!({"engaged": true, "author": "ana"})),
        ("handoff", json!({"count": 1, "author": "ana"})),
    ];
    for (drill, body) in drills {
        let path = format!("/admin/routes/chat/drill/{drill}");
        let response = gw.admin(Method::POST, &path, Some(body)).await;
        assert_eq!(response.status(), 403, "{drill}");
        let answer: Value = response.json().await.unwrap();
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("`chat`") && message.contains("drillable"), "{message}");
    }
    // Nothing happened: the switch is off, calls answer on the primary, no hand-off was made.
    assert_eq!(served(&gw, "chat").await, ("primary".into(), "answered".into()));
    let handoffs: Value =
        gw.admin(Method::GET, "/admin/handoffs", None).await.json().await.unwrap();
    assert_eq!(handoffs["handoffs"], json!([]));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_failover_drill_sends_its_share_to_the_fallback_and_ends_by_itself() {
    let gw = start_with(&drillable_config(), None).await;
    let start = json!({"share": 1.0, "seconds": 1, "author": "ana"});
    let response = gw.admin(Method::POST, "/admin/routes/chat/drill/failover", Some(start)).await;
    assert_eq!(response.status(), 200);
    let drill: Value = response.json().await.unwrap();
    assert_eq!(
        (drill["primary"].as_str(), drill["fallback"].as_str()),
        (Some("primary"), Some("fallback"))
    );
    let length =
        drill["ends_unix_ms"].as_u64().unwrap() - drill["started_unix_ms"].as_u64().unwrap();
    assert_eq!(length, 1000);
    assert_eq!(served(&gw, "chat").await.0, "fallback");
    assert_eq!(levers(&gw, "chat").await["failover_drill"]["share"], 1.0);
    // Nobody stops it: the gateway does, at its expiry.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(served(&gw, "chat").await.0, "primary");
    assert_eq!(levers(&gw, "chat").await["failover_drill"], Value::Null);

    for (body, needle) in [
        (json!({"share": 0.0, "seconds": 1, "author": "ana"}), "`share`"),
        (json!({"share": 0.5, "seconds": 0, "author": "ana"}), "`seconds`"),
        (json!({"share": 0.5, "seconds": 1, "author": ""}), "`author`"),
    ] {
        let response =
            gw.admin(Method::POST, "/admin/routes/chat/drill/failover", Some(body)).await;
        assert_eq!(response.status(), 400);
        let answer: Value = response.json().await.unwrap();
        assert!(answer["error"]["message"].as_str().unwrap().contains(needle), "{answer}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_kill_switch_drill_is_audited_and_never_touches_a_real_flip() {
    let gw = start_with(&drillable_config(), None).await;
    let drill = |engaged: bool| json!({"engaged": engaged, "author": "ana"});
    let path = "/admin/routes/chat/drill/kill-switch";
    assert_eq!(gw.admin(Method::POST, path, Some(drill(true))).await.status(), 200);
    assert_eq!(served(&gw, "chat").await.1, "degraded");
    assert_eq!(gw.admin(Method::POST, path, Some(drill(true))).await.status(), 409);
    assert_eq!(gw.admin(Method::POST, path, Some(drill(false))).await.status(), 200);
    assert_eq!(served(&gw, "chat").await.1, "answered");
    assert_eq!(gw.admin(Method::POST, path, Some(drill(false))).await.status(), 409);
    let state: Value = gw.admin(Method::GET, "/admin/kill", None).await.json().await.unwrap();
    let reasons: Vec<&str> =
        state["audit"].as_array().unwrap().iter().map(|f| f["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["drill", "drill over"]);

    // A drill whose operator went away: the gateway flips the switch back at its expiry.
    let forgotten = json!({"engaged": true, "author": "ana", "seconds": 1});
    assert_eq!(gw.admin(Method::POST, path, Some(forgotten)).await.status(), 200);
    assert_eq!(served(&gw, "chat").await.1, "degraded");
    let mut waited = 0;
    while served(&gw, "chat").await.1 != "answered" {
        assert!(waited < 100, "the forgotten drill was never released");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    let state: Value = gw.admin(Method::GET, "/admin/kill", None).await.json().await.unwrap();
    let last = state["audit"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["engaged"].as_bool(), last["reason"].as_str()),
        (Some(false), Some("drill expired"))
    );

    // A real flip: the drill neither runs during it nor releases it.
    let real = json!({"route": "chat", "engaged": true, "reason": "incident"});
    assert_eq!(gw.admin(Method::POST, "/admin/kill", Some(real)).await.status(), 200);
    assert_eq!(gw.admin(Method::POST, path, Some(drill(true))).await.status(), 409);
    assert_eq!(gw.admin(Method::POST, path, Some(drill(false))).await.status(), 409);
    assert_eq!(served(&gw, "chat").await.1, "degraded");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_handoff_drill_seeds_conversations_under_their_own_trigger() {
    let gw = start_with(&drillable_config(), None).await;
    let seed = json!({"count": 2, "author": "ana"});
    let response = gw.admin(Method::POST, "/admin/routes/chat/drill/handoff", Some(seed)).await;
    assert_eq!(response.status(), 200);
    let seeded: Value = response.json().await.unwrap();
    let seeded = seeded["handoffs"].as_array().unwrap();
    assert_eq!(seeded.len(), 2);
    let listed: Value =
        gw.admin(Method::GET, "/admin/handoffs?trigger=drill", None).await.json().await.unwrap();
    assert_eq!(listed["handoffs"].as_array().unwrap().len(), 2);
    let id = seeded[0]["id"].as_i64().unwrap();
    let shown: Value =
        gw.admin(Method::GET, &format!("/admin/handoffs/{id}"), None).await.json().await.unwrap();
    assert_eq!(shown["packet"]["drill"], true);
    assert_eq!(shown["route"], "chat");
    let bad = json!({"count": 0, "author": "ana"});
    let response = gw.admin(Method::POST, "/admin/routes/chat/drill/handoff", Some(bad)).await;
    assert_eq!(response.status(), 400);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn route_to_a_middle_tier_skips_the_earlier_ones_and_keeps_the_later_ones_behind_it() {
    let three = format!(
        "{CONFIG}
[routes.three]
deadline_ms = 5000
first_token_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.three.tiers]]
name = \"primary\"
provider = \"sim-openai\"
model = \"sim-primary\"

[[routes.three.tiers]]
name = \"middle\"
provider = \"sim-openai\"
model = \"sim:400\"

[[routes.three.tiers]]
name = \"last\"
provider = \"sim-anthropic\"
model = \"sim-fallback\"
"
    );
    let gw = start_with(&three, None).await;
    let flip = json!({"tier": "middle", "author": "ana", "reason": "primary drifted"});
    assert_eq!(route_to(&gw, "three", flip).await.status(), 200);
    let response = gw.post("/v1/chat/completions", KEY, chat("three")).await;
    assert_eq!(response.status(), 200);
    // The primary was skipped; the middle tier failed and the last one answered behind it.
    assert_eq!(response.headers()["x-rein-tier"], "last");
    assert_eq!(response.headers()["x-rein-outcome"], "fallback");
    assert_eq!(response.headers()["x-rein-attempts"], "2");
    gw.stop().await.unwrap();
}

#[test]
fn drillable_must_be_true_or_false_and_the_error_names_it() {
    let text = "[providers.p]\nkind = \"sim\"\nformat = \"openai\"\n[routes.r]\ndrillable = \"yes\"\n\
                [[routes.r.tiers]]\nname = \"t\"\nprovider = \"p\"\nmodel = \"m\"\n";
    let refused = rein_runtime::config::Config::from_toml(text, &*env());
    let message = refused.expect_err("a string is not a bool").to_string();
    assert!(message.contains("drillable"), "{message}");
    let config =
        rein_runtime::config::Config::from_toml(&text.replace("\"yes\"", "true"), &*env()).unwrap();
    assert!(config.routes["r"].drillable);
    let config = rein_runtime::config::Config::from_toml(
        &text.replace("drillable = \"yes\"\n", ""),
        &*env(),
    )
    .unwrap();
    assert!(!config.routes["r"].drillable, "off unless marked");
}
