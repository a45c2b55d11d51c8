//! The operator's page at `/` and the trace pages under `/traces/`: with an admin key configured
//! they need it (a bearer token or HTTP Basic, a refusal asking for Basic so a browser prompts),
//! every number on the page is the one `/admin/sli` gives and every breaker the one
//! `/admin/tiers` gives, and a failing call links to its trace. Then the same page in a real
//! headless Chromium (Debian's `chromium`; the test fails, naming scripts/test.sh, when it is
//! missing), logged in with Basic credentials in the URL: the numbers and states it shows are
//! held against the admin API, and a screenshot is kept under the target's tmp directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::gateway::{Running, chat, start_with};
use crate::ladder::HEAD;

const ADMIN: &str = "admin-secret-1";

/// `flaky` falls back from a primary that always answers 529; every tier of `broken` does, so
/// it gives its degraded reply, and its primary's breaker opens after one failed call.
fn config() -> String {
    format!(
        r#"{HEAD}
[routes.flaky]
deadline_ms = 5000
first_token_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100

[[routes.flaky.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"

[[routes.flaky.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim-fallback"

[routes.broken]
deadline_ms = 5000
first_token_ms = 1000
attempt_ms = 2000
backoff_base_ms = 20
backoff_floor_ms = 10
backoff_cap_ms = 100
degraded = {{ template = "We are on it." }}

[[routes.broken.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"
allowed_fails = 1
cooldown_s = 600

[[routes.broken.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim:529"
"#
    )
}

/// A gateway with one fallback call and one degraded call behind it; the fallback call's trace id.
async fn with_traffic() -> (Running, String) {
    let gw = start_with(&config(), None).await;
    let fallback = gw.post("/v1/chat/completions", Some("client-secret-1"), chat("flaky")).await;
    assert_eq!(fallback.headers()["x-rein-outcome"], "fallback");
    let trace_id = fallback.headers()["x-rein-trace-id"].to_str().unwrap().to_string();
    let degraded = gw.post("/v1/chat/completions", Some("client-secret-1"), chat("broken")).await;
    assert_eq!(degraded.headers()["x-rein-outcome"], "degraded");
    (gw, trace_id)
}

async fn admin_json(gw: &Running, path: &str) -> Value {
    let response = gw.client.get(gw.url(path)).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

async fn page(gw: &Running, path: &str) -> (u16, String) {
    let response = gw.client.get(gw.url(path)).basic_auth("ops", Some(ADMIN)).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// An element of an HTML text: its attributes (entities decoded) and the text up to the next tag.
#[derive(Debug)]
struct Element {
    attrs: BTreeMap<String, String>,
    text: String,
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// Every start tag of `html` with its attributes, quoted or not: enough for the page rein writes
/// and for the DOM Chromium serialises from it.
fn elements(html: &str) -> Vec<Element> {
    let bytes = html.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = html[i..].find('<') {
        let start = i + at + 1;
        i = start;
        if !bytes.get(start).is_some_and(u8::is_ascii_alphabetic) {
            continue;
        }
        let mut j = start;
        while j < bytes.len() && !bytes[j].is_ascii_whitespace() && bytes[j] != b'>' {
            j += 1;
        }
        let mut attrs = BTreeMap::new();
        loop {
            while j < bytes.len() && (bytes[j].is_ascii_whitespace() || bytes[j] == b'/') {
                j += 1;
            }
            if j >= bytes.len() || bytes[j] == b'>' {
                break;
            }
            let name_start = j;
            while j < bytes.len() && !b" \t\n\r=>/".contains(&bytes[j]) {
                j += 1;
            }
            let name = html[name_start..j].to_ascii_lowercase();
            let mut value = String::new();
            if bytes.get(j) == Some(&b'=') {
                j += 1;
                match bytes.get(j) {
                    Some(&quote) if quote == b'"' || quote == b'\'' => {
                        let end = j + 1 + html[j + 1..].find(char::from(quote)).unwrap();
                        value = unescape(&html[j + 1..end]);
                        j = end + 1;
                    }
                    _ => {
                        let value_start = j;
                        while j < bytes.len() && !bytes[j].is_ascii_whitespace() && bytes[j] != b'>'
                        {
                            j += 1;
                        }
                        value = unescape(&html[value_start..j]);
                    }
                }
            }
            attrs.insert(name, value);
        }
        let text_start = (j + 1).min(html.len());
        let text_end = html[text_start..].find('<').map_or(html.len(), |k| text_start + k);
        out.push(Element { attrs, text: unescape(&html[text_start..text_end]) });
        i = text_start;
    }
    out
}

/// The element whose `attr` is `value`, the only one.
fn by<'a>(elements: &'a [Element], attr: &str, value: &str) -> &'a Element {
    let found: Vec<&Element> =
        elements.iter().filter(|e| e.attrs.get(attr).map(String::as_str) == Some(value)).collect();
    assert_eq!(found.len(), 1, "one element with {attr}=\"{value}\": {found:?}");
    found[0]
}

/// `data-value` against the admin API's number: equal as numbers, or both absent.
fn same_number(element: &Element, expected: &Value, what: &str) {
    let raw = &element.attrs["data-value"];
    match expected.as_f64() {
        Some(number) => assert_eq!(raw.parse::<f64>().ok(), Some(number), "{what}: {raw}"),
        None => assert!(expected.is_null() && raw.is_empty(), "{what}: {raw} vs {expected}"),
    }
}

/// Every SLI on the page is `/admin/sli`'s (and every number of `/admin/sli`'s routes is on the
/// page), every breaker `/admin/tiers`'s. Returns how many numbers were compared.
fn matches_the_admin_api(html: &str, slis: &Value, tiers: &Value) -> usize {
    let elements = elements(html);
    let mut expected: BTreeMap<String, Value> = BTreeMap::new();
    for route in slis["routes"].as_array().unwrap() {
        let name = route["route"].as_str().unwrap();
        let s = &route["slis"];
        for field in ["calls", "availability", "fallback_beyond_plan", "degraded_share"] {
            expected.insert(format!("{name}:{field}"), s[field].clone());
        }
        for p in ["p50", "p95"] {
            expected.insert(format!("{name}:latency_end_ms.{p}"), s["latency_end_ms"][p].clone());
        }
        for (trigger, rate) in s["escalation_rate"].as_object().unwrap() {
            expected.insert(format!("{name}:escalation_rate.{trigger}"), rate.clone());
        }
    }
    let shown: Vec<&Element> =
        elements.iter().filter(|e| e.attrs.contains_key("data-sli")).collect();
    let keys: Vec<&str> = shown.iter().map(|e| e.attrs["data-sli"].as_str()).collect();
    assert_eq!(
        keys.iter().copied().collect::<std::collections::BTreeSet<_>>(),
        expected.keys().map(String::as_str).collect(),
        "the page shows exactly /admin/sli's numbers"
    );
    assert_eq!(keys.len(), expected.len(), "each once: {keys:?}");
    for (key, value) in &expected {
        let element = by(&elements, "data-sli", key);
        same_number(element, value, key);
        // What is printed is the same number.
        let text = element.text.trim();
        if let Some(share) = value.as_f64().filter(|_| !key.ends_with(":calls")) {
            let printed = if key.contains("latency") {
                format!("{share} ms")
            } else {
                format!("{:.1}%", share * 100.0)
            };
            assert_eq!(text, printed, "{key}");
        } else if let Some(calls) = value.as_u64() {
            assert_eq!(text, calls.to_string(), "{key}");
        } else {
            assert_eq!(text, "—", "{key}");
        }
    }
    // Each chart's latest value is the last bucket with calls of `/admin/sli`'s series.
    let mut compared = expected.len();
    for (route, buckets) in slis["series"].as_object().unwrap() {
        for (field, path) in [
            ("availability", &["availability"][..]),
            ("fallback_beyond_plan", &["fallback_beyond_plan"][..]),
            ("degraded_share", &["degraded_share"][..]),
            ("latency_end_ms.p95", &["latency_end_ms", "p95"][..]),
        ] {
            let values: Vec<Value> = buckets
                .as_array()
                .unwrap()
                .iter()
                .map(|b| path.iter().fold(b["slis"].clone(), |v, key| v[*key].clone()))
                .collect();
            let last = values.iter().rev().find(|v| !v.is_null()).cloned().unwrap_or(Value::Null);
            let key = format!("{route}:{field}");
            same_number(by(&elements, "data-sli-latest", &key), &last, &key);
            compared += 1;
        }
    }
    for tier in tiers["tiers"].as_array().unwrap() {
        let key = format!("{}:{}", tier["route"].as_str().unwrap(), tier["tier"].as_str().unwrap());
        let row = by(&elements, "data-tier", &key);
        assert_eq!(row.attrs["data-state"], tier["state"].as_str().unwrap(), "{key}");
        compared += 1;
    }
    assert_eq!(
        elements.iter().filter(|e| e.attrs.contains_key("data-tier")).count(),
        tiers["tiers"].as_array().unwrap().len()
    );
    compared
}

/// The numbers this traffic must give, so the comparison is not of two empty pages.
fn the_traffic_is_counted(slis: &Value, tiers: &Value) {
    let route = |name: &str| {
        slis["routes"].as_array().unwrap().iter().find(|r| r["route"] == name).unwrap()["slis"]
            .clone()
    };
    let (flaky, broken) = (route("flaky"), route("broken"));
    assert_eq!((flaky["calls"].as_u64(), flaky["availability"].as_f64()), (Some(1), Some(1.0)));
    assert_eq!(flaky["fallback_beyond_plan"], 1.0);
    assert_eq!(
        (broken["availability"].as_f64(), broken["degraded_share"].as_f64()),
        (Some(0.0), Some(1.0))
    );
    let state = |route: &str, tier: &str| {
        tiers["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["route"] == route && t["tier"] == tier)
            .unwrap()["state"]
            .clone()
    };
    assert_eq!(state("broken", "primary"), "open", "one failed call opens it: {tiers}");
    assert_eq!(state("flaky", "fallback"), "closed");
}

#[tokio::test]
async fn the_page_needs_the_admin_key_as_a_bearer_token_or_basic_credentials() {
    let gw = start_with(&config(), None).await;
    for path in ["/", "/traces/abc"] {
        let anonymous = gw.client.get(gw.url(path)).send().await.unwrap();
        assert_eq!(
            anonymous.status(),
            401,
            "{path}: on loopback too, with an admin key configured"
        );
        let challenge = anonymous.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Basic realm=\"rein\""), "a browser prompts: {challenge}");
        for wrong in [
            gw.client.get(gw.url(path)).bearer_auth("client-secret-1"),
            gw.client.get(gw.url(path)).basic_auth("admin", Some("client-secret-1")),
            gw.client.get(gw.url(path)).basic_auth(ADMIN, None::<&str>),
            gw.client.get(gw.url(path)).header("authorization", "Basic not*base64"),
        ] {
            assert_eq!(wrong.send().await.unwrap().status(), 401, "{path}");
        }
    }
    let bearer = gw.client.get(gw.url("/")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(bearer.status(), 200);
    assert!(bearer.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert_eq!(bearer.headers()["cache-control"], "no-store");
    assert!(
        bearer.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    let (status, html) = page(&gw, "/").await;
    assert_eq!(status, 200, "Basic with any user name");
    assert!(html.contains("<h1>rein</h1>") && html.contains("Kill switch"), "{html}");
    // The admin API takes the same Basic credentials, so the page's links work in a browser.
    let tiers =
        gw.client.get(gw.url("/admin/tiers")).basic_auth("ops", Some(ADMIN)).send().await.unwrap();
    assert_eq!(tiers.status(), 200);
    // `/metrics` keeps its own rule: open on loopback.
    assert_eq!(gw.client.get(gw.url("/metrics")).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn the_page_shows_the_admin_apis_numbers_and_links_a_failing_call_to_its_trace() {
    let (gw, trace_id) = with_traffic().await;
    let (status, html) = page(&gw, "/").await;
    assert_eq!(status, 200);
    let slis = admin_json(&gw, "/admin/sli?window=1h&buckets=12").await;
    let tiers = admin_json(&gw, "/admin/tiers").await;
    the_traffic_is_counted(&slis, &tiers);
    let compared = matches_the_admin_api(&html, &slis, &tiers);
    assert!(compared >= 2 * 6 + 2 * 4 + 4, "{compared}");
    assert!(html.matches("<circle").count() > 0, "the charts have points");
    assert_eq!(html.matches("<svg").count(), 8, "four charts per route with calls");
    // The open breaker says when it lets a probe through.
    let shown = elements(&html);
    let probe = shown.iter().find(|e| e.attrs.contains_key("data-next-probe-ms")).unwrap();
    let wait: u64 = probe.attrs["data-next-probe-ms"].parse().unwrap();
    assert!((590_000..=600_000).contains(&wait), "{wait}");
    assert!(probe.text.starts_with("in 9m"), "{probe:?}");
    assert_eq!(by(&shown, "data-kill", "global").attrs["data-engaged"], "false");
    assert_eq!(by(&shown, "data-outbox", "pending").text, "0");

    // Both calls were not answered on the first try; each links to its trace.
    let link = format!("href=\"/traces/{trace_id}\"");
    assert!(html.contains(&link), "{link} in {html}");
    let (status, trace) = page(&gw, &format!("/traces/{trace_id}")).await;
    assert_eq!(status, 200, "{trace}");
    assert!(
        trace.contains("<pre data-trace=") && trace.contains("chat flaky (fallback)"),
        "{trace}"
    );
    assert!(trace.contains("tier=primary"), "{trace}");
    let (status, _) = page(&gw, "/traces/not-a-trace!").await;
    assert_eq!(status, 400);
    let (status, _) = page(&gw, &format!("/traces/{}", "a".repeat(129))).await;
    assert_eq!(status, 400);
    let (status, missing) = page(&gw, "/traces/0123456789abcdef0123456789abcdef").await;
    assert_eq!(status, 404, "{missing}");
    assert!(missing.contains("No kept trace"));

    // Kill-switch flips show, newest first, with their reasons escaped.
    let flip =
        serde_json::json!({"route": "flaky", "engaged": true, "reason": "<b>bad</b> prompt"});
    assert_eq!(gw.admin(reqwest::Method::POST, "/admin/kill", Some(flip)).await.status(), 200);
    let (_, html) = page(&gw, "/").await;
    assert!(
        html.contains("&lt;b&gt;bad&lt;/b&gt; prompt") && !html.contains("<b>bad</b>"),
        "{html}"
    );
    assert_eq!(by(&elements(&html), "data-kill", "route:flaky").attrs["data-engaged"], "true");
}

#[tokio::test]
async fn the_page_shows_the_levers_engaged_beside_the_quality_score() {
    let (gw, _) = with_traffic().await;
    let (_, html) = page(&gw, "/").await;
    let shown = elements(&html);
    for route in ["broken", "flaky"] {
        let row = by(&shown, "data-levers", route);
        assert_eq!(row.attrs["data-engaged"], "", "{route}: nothing engaged yet");
        // The quality score is the SLI view's (no judge here: none).
        let slis = admin_json(&gw, &format!("/admin/sli?window=1h&route={route}")).await;
        let quality = by(&shown, "data-quality", route);
        same_number(quality, &slis["routes"][0]["slis"]["quality"], route);
        assert!(
            by(&shown, "data-lever", &format!("{route}:settings")).text.starts_with("v1 by config")
        );
    }
    let flip =
        serde_json::json!({"tier": "fallback", "author": "ana", "reason": "<i>score</i> dropped"});
    let response =
        gw.admin(reqwest::Method::POST, "/admin/routes/flaky/route-to", Some(flip)).await;
    assert_eq!(response.status(), 200);
    let kill = serde_json::json!({"route": "flaky", "engaged": true, "reason": "incident"});
    assert_eq!(gw.admin(reqwest::Method::POST, "/admin/kill", Some(kill)).await.status(), 200);
    let (_, html) = page(&gw, "/").await;
    let shown = elements(&html);
    let levers = admin_json(&gw, "/admin/routes/flaky/levers").await;
    assert_eq!(levers["engaged"], serde_json::json!(["route_to", "kill_switch"]));
    assert_eq!(by(&shown, "data-levers", "flaky").attrs["data-engaged"], "route_to kill_switch");
    let route_to = by(&shown, "data-lever", "flaky:route_to");
    assert!(route_to.text.starts_with("tier fallback since"), "{route_to:?}");
    assert!(route_to.text.ends_with("<i>score</i> dropped"), "escaped: {route_to:?}");
    assert!(!html.contains("<i>score</i>"));
    assert!(by(&shown, "data-lever", "flaky:kill_switch").text.starts_with("engaged since"));
    assert_eq!(by(&shown, "data-levers", "broken").attrs["data-engaged"], "");
}

/// Debian's `chromium`, or `$CHROMIUM`; without one the test fails, saying how to get it.
fn chromium() -> PathBuf {
    let chosen = std::env::var_os("CHROMIUM").map(PathBuf::from);
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .flat_map(|dir| [dir.join("chromium"), dir.join("chromium-browser")]);
    // `$CHROMIUM`, when set, is the only one tried.
    let candidates: Vec<PathBuf> = match chosen {
        Some(path) => vec![path],
        None => std::iter::once(PathBuf::from("/usr/bin/chromium")).chain(on_path).collect(),
    };
    candidates
        .into_iter()
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "headless Chromium is missing: run scripts/test.sh, which installs Debian's `chromium` (or set CHROMIUM to a Chromium binary)"
            )
        })
}

/// Run headless Chromium on `url` with `args` (in a fresh profile, within a minute and a half).
async fn headless(url: &str, args: &[&str]) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(chromium());
    command
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(90), command.output())
        .await
        .expect("headless Chromium did not finish within 90 s")
        .expect("headless Chromium could not be started");
    assert!(
        output.status.success(),
        "chromium {args:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_chromium_shows_the_admin_apis_numbers_and_breakers() {
    let (gw, trace_id) = with_traffic().await;
    // Basic credentials in the URL: Chromium answers the page's Basic challenge with them.
    let url = format!("http://ops:{ADMIN}@{}/", gw.addr);
    let output = headless(&url, &["--dump-dom"]).await;
    let dom = String::from_utf8(output.stdout).unwrap();
    assert!(dom.contains("<h1>rein</h1>"), "Chromium got the page, not the refusal: {dom}");
    let slis = admin_json(&gw, "/admin/sli?window=1h&buckets=12").await;
    let tiers = admin_json(&gw, "/admin/tiers").await;
    the_traffic_is_counted(&slis, &tiers);
    let compared = matches_the_admin_api(&dom, &slis, &tiers);
    assert!(compared >= 2 * 6 + 2 * 4 + 4, "{compared}");
    assert!(dom.contains(&format!("href=\"/traces/{trace_id}\"")), "{dom}");

    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let screenshot = format!("--screenshot={}", shot.display());
    headless(&url, &[&screenshot, "--window-size=1280,2000"]).await;
    let png = std::fs::read(&shot).expect("Chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{} bytes", png.len());
    eprintln!("dashboard screenshot: {}", shot.display());

    // The trace page, linked from the dashboard, in the browser too.
    let trace_url = format!("http://ops:{ADMIN}@{}/traces/{trace_id}", gw.addr);
    let trace = String::from_utf8(headless(&trace_url, &["--dump-dom"]).await.stdout).unwrap();
    assert!(trace.contains("chat flaky (fallback)"), "{trace}");
}
