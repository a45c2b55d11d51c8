//! `rein drill`: drills for what only production has, against a running gateway through its
//! admin API, each refused unless the route is marked `drillable = true` (checked here first, and
//! by the gateway too). `failover` sends a share of the route's traffic to its fallback tier for a
//! while (the gateway ends it at its expiry, so a killed drill never stays on; Ctrl-C ends it
//! early) and prints the fallback's SLIs beside the primary's for the drill's window.
//! `kill-switch` flips the route's switch on (reason `drill`, in the switch's audit), sends one
//! customer-like call and prints exactly the status, rein headers and body the customer got,
//! flips it back and checks the route answers normally again. `handoff` seeds conversations into
//! the hand-off queue, waits for a reviewer's decision on each (up to a bound) and prints the
//! time to reply of each against the promised time. Each prints a short report (`--json`: the
//! numbers as JSON).

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::admin::{self, Admin};

#[derive(Debug, Args)]
pub(crate) struct DrillArgs {
    #[command(flatten)]
    flags: admin::AdminFlags,
    #[command(subcommand)]
    drill: Drill,
}

#[derive(Debug, Args)]
struct Target {
    /// The route to drill (it must be marked `drillable = true` in the gateway's config).
    #[arg(long)]
    route: String,
    /// Who runs the drill (kept with what it did).
    #[arg(long, default_value = "rein drill")]
    author: String,
}

#[derive(Debug, Subcommand)]
enum Drill {
    /// Send a share of the route's traffic to its fallback tier for a while and compare the
    /// fallback's numbers with the primary's.
    Failover {
        #[command(flatten)]
        target: Target,
        /// The share of calls that start at the fallback during the drill.
        #[arg(long, default_value_t = 0.5)]
        share: f64,
        /// How long the drill lasts, in minutes.
        #[arg(long, default_value_t = 5, conflicts_with = "seconds")]
        minutes: u64,
        /// How long the drill lasts, in seconds (instead of --minutes).
        #[arg(long)]
        seconds: Option<u64>,
    },
    /// Flip the route's kill switch on, show what a customer gets, flip it back.
    KillSwitch {
        #[command(flatten)]
        target: Target,
        /// The customer's message of the call sent while the switch is on.
        #[arg(long, default_value = "Where is my order?")]
        message: String,
        /// Environment variable holding a client key for that call (unset: none is sent).
        #[arg(long, default_value = "REIN_CLIENT_KEY")]
        client_key_env: String,
    },
    /// Seed conversations into the hand-off queue and time the reviewers' replies.
    Handoff {
        #[command(flatten)]
        target: Target,
        /// How many conversations to seed.
        #[arg(long, default_value_t = 3)]
        count: usize,
        /// The reply time promised to customers (the safe reply's "within 2 hours"), minutes.
        #[arg(long, default_value_t = 120, conflicts_with = "promised_seconds")]
        promised_minutes: u64,
        /// The promised reply time in seconds (instead of --promised-minutes).
        #[arg(long)]
        promised_seconds: Option<u64>,
        /// How long to wait for the replies, in minutes (default: the promised time).
        #[arg(long, conflicts_with = "wait_seconds")]
        wait_minutes: Option<u64>,
        /// How long to wait for the replies, in seconds.
        #[arg(long)]
        wait_seconds: Option<u64>,
        /// How often to look for the replies, in milliseconds.
        #[arg(long, default_value_t = 2000)]
        poll_ms: u64,
    },
}

pub(crate) async fn run(args: DrillArgs) -> anyhow::Result<std::process::ExitCode> {
    let admin = args.flags.admin()?;
    let json = args.flags.json;
    let target = match &args.drill {
        Drill::Failover { target, .. }
        | Drill::KillSwitch { target, .. }
        | Drill::Handoff { target, .. } => target,
    };
    if let Some(refused) = refuse_undrillable(&admin, &target.route).await? {
        return Ok(refused);
    }
    match &args.drill {
        Drill::Failover { target, share, minutes, seconds } => {
            let length = Duration::from_secs(seconds.unwrap_or(minutes * 60));
            failover(&admin, target, *share, length, json).await
        }
        Drill::KillSwitch { target, message, client_key_env } => {
            kill_switch(&admin, target, message, client_key_env, json).await
        }
        Drill::Handoff {
            target,
            count,
            promised_minutes,
            promised_seconds,
            wait_minutes,
            wait_seconds,
            poll_ms,
        } => {
            let promised = Duration::from_secs(promised_seconds.unwrap_or(promised_minutes * 60));
            let wait = match (wait_seconds, wait_minutes) {
                (Some(seconds), _) => Duration::from_secs(*seconds),
                (None, Some(minutes)) => Duration::from_secs(minutes * 60),
                (None, None) => promised,
            };
            let poll = Duration::from_millis((*poll_ms).max(50));
            handoff(&admin, target, *count, promised, wait, poll, json).await
        }
    }
}

/// Print an admin error answer and fail.
fn failed(status: reqwest::StatusCode, body: &Value) -> anyhow::Result<std::process::ExitCode> {
    admin::print(status, body, |_, _| Ok(()))
}

/// The route must exist and be drillable; a refusal is printed, naming both.
async fn refuse_undrillable(
    admin: &Admin,
    route: &str,
) -> anyhow::Result<Option<std::process::ExitCode>> {
    let (status, body) = admin.send(admin.get(&format!("/admin/routes/{route}/levers"))).await?;
    if !status.is_success() {
        return failed(status, &body).map(Some);
    }
    if body["drillable"] == Value::Bool(true) {
        return Ok(None);
    }
    writeln!(
        std::io::stdout().lock(),
        "refused: route `{route}` is not drillable; set `drillable = true` under [routes.{route}] in the gateway's config to allow drills on it"
    )?;
    Ok(Some(std::process::ExitCode::FAILURE))
}

fn now_ms() -> i64 {
    i64::try_from(rein_core::clock::unix_ms()).unwrap_or(i64::MAX)
}

async fn failover(
    admin: &Admin,
    target: &Target,
    share: f64,
    length: Duration,
    json: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let route = &target.route;
    // The report reads the recorded calls: without them, do not move traffic for nothing.
    let (status, slis) =
        admin.send(admin.get(&format!("/admin/sli?window=1s&route={route}"))).await?;
    if !status.is_success() {
        return failed(status, &slis);
    }
    let path = format!("/admin/routes/{route}/drill/failover");
    let body = json!({"share": share, "seconds": length.as_secs(), "author": target.author});
    let (status, started) = admin.send(admin.post(&path).json(&body)).await?;
    if !status.is_success() {
        return failed(status, &started);
    }
    let (primary, fallback) = (text(&started, "primary"), text(&started, "fallback"));
    if !json {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "failover drill on route {route}: {:.0}% of calls start at tier {fallback} for {}s (Ctrl-C ends it early)",
            share * 100.0,
            length.as_secs(),
        )?;
    }
    let start = started["started_unix_ms"].as_i64().unwrap_or_else(now_ms);
    let ends = started["ends_unix_ms"].as_i64().unwrap_or(start);
    let left = Duration::from_millis(u64::try_from(ends - now_ms()).unwrap_or(0));
    let stopped_early = tokio::select! {
        _ = tokio::time::sleep(left + Duration::from_millis(100)) => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    if stopped_early {
        // The gateway would end it at its expiry anyway; end it now.
        admin.send(admin.delete(&path)).await?;
    }
    let window_s = ((now_ms() - start).max(1) + 999) / 1000;
    let query = format!("/admin/sli?window={window_s}s&since_ms={start}&route={route}");
    let (status, slis) = admin.send(admin.get(&query)).await?;
    if !status.is_success() {
        return failed(status, &slis);
    }
    let tier_slis = |tier: &str| -> Value {
        slis["slices"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|slice| slice["route"] == route.as_str() && slice["tier"] == tier)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let (on_primary, on_fallback) = (tier_slis(&primary), tier_slis(&fallback));
    if json {
        let report = json!({
            "drill": started,
            "stopped_early": stopped_early,
            "window_s": window_s,
            "primary": {"tier": primary, "slis": on_primary},
            "fallback": {"tier": fallback, "slis": on_fallback},
        });
        return admin::print(status, &report, admin::json);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} after {window_s}s; each tier's calls since the drill started:",
        if stopped_early { "stopped early" } else { "ended" }
    )?;
    writeln!(
        out,
        "{:<10}  {:<16}  {:>6}  {:>12}  {:>14}  {:>8}  {:>8}",
        "ROLE", "TIER", "CALLS", "AVAILABILITY", "VALID 1ST TRY", "P50 MS", "P95 MS"
    )?;
    for (role, tier, slis) in
        [("primary", &primary, &on_primary), ("fallback", &fallback, &on_fallback)]
    {
        let latency = |p: &str| {
            slis["latency_end_ms"][p].as_u64().map_or_else(|| "-".into(), |ms| ms.to_string())
        };
        writeln!(
            out,
            "{role:<10}  {tier:<16}  {:>6}  {:>12}  {:>14}  {:>8}  {:>8}",
            slis["calls"].as_u64().unwrap_or(0),
            percent(&slis["availability"]),
            percent(&slis["valid_first_try"]),
            latency("p50"),
            latency("p95"),
        )?;
    }
    if on_fallback["calls"].as_u64().unwrap_or(0) == 0 {
        writeln!(out, "note: no call reached the fallback in the window: was there traffic?")?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn text(value: &Value, field: &str) -> String {
    value.get(field).and_then(Value::as_str).unwrap_or("-").to_string()
}

fn percent(value: &Value) -> String {
    value.as_f64().map_or_else(|| "-".into(), |share| format!("{:.1}%", share * 100.0))
}

/// One customer-like call: the status, the rein headers (and request ids) and the body.
async fn customer_call(
    admin: &Admin,
    route: &str,
    message: &str,
    client_key: Option<&str>,
) -> anyhow::Result<(u16, Vec<(String, String)>, String)> {
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", admin.base()))
        .json(&json!({"model": route, "messages": [{"role": "user", "content": message}]}));
    if let Some(key) = client_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.context("the customer-like call failed")?;
    let status = response.status().as_u16();
    let mut headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("x-rein-") || name.as_str() == "x-request-id")
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or("?").to_string()))
        .collect();
    headers.sort();
    let body = response.text().await.unwrap_or_default();
    Ok((status, headers, body))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers.iter().find(|(n, _)| n == name).map_or("-", |(_, v)| v.as_str())
}

async fn kill_switch(
    admin: &Admin,
    target: &Target,
    message: &str,
    client_key_env: &str,
    json: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let route = &target.route;
    let path = format!("/admin/routes/{route}/drill/kill-switch");
    let flip = |engaged: bool| json!({"engaged": engaged, "author": target.author});
    let (status, on) = admin.send(admin.post(&path).json(&flip(true))).await?;
    if !status.is_success() {
        return failed(status, &on);
    }
    let key = std::env::var(client_key_env).ok();
    // Whatever the call does, the switch goes back.
    let during = customer_call(admin, route, message, key.as_deref()).await;
    let (status, off) = admin.send(admin.post(&path).json(&flip(false))).await?;
    if !status.is_success() {
        writeln!(std::io::stdout().lock(), "THE KILL SWITCH ON `{route}` IS STILL ON:")?;
        return failed(status, &off);
    }
    let (code, headers, body) = during?;
    let (after_code, after_headers, _) =
        customer_call(admin, route, message, key.as_deref()).await?;
    let after_outcome = header(&after_headers, "x-rein-outcome");
    let normal =
        (200..300).contains(&after_code) && matches!(after_outcome, "answered" | "fallback");
    if json {
        let report = json!({
            "route": route,
            "engaged": on["flip"],
            "released": off["flip"],
            "customer_got": {
                "status": code,
                "headers": headers.iter().map(|(n, v)| (n.clone(), Value::String(v.clone()))).collect::<serde_json::Map<String, Value>>(),
                "body": serde_json::from_str::<Value>(&body).unwrap_or(Value::String(body.clone())),
            },
            "after": {"status": after_code, "outcome": after_outcome, "tier": header(&after_headers, "x-rein-tier")},
            "answers_normally": normal,
        });
        admin::json(&mut std::io::stdout().lock(), &report)?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(out, "kill-switch drill on route {route}")?;
        writeln!(out, "switch on (reason `drill`); what a customer got:")?;
        writeln!(out, "  HTTP {code}")?;
        for (name, value) in &headers {
            writeln!(out, "  {name}: {value}")?;
        }
        let pretty = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|value| serde_json::to_string_pretty(&value).ok())
            .unwrap_or(body);
        writeln!(out, "  body:")?;
        for line in pretty.lines() {
            writeln!(out, "    {line}")?;
        }
        writeln!(
            out,
            "switch off; the route {}: HTTP {after_code}, {after_outcome} on tier {}",
            if normal { "answers normally again" } else { "DOES NOT answer normally" },
            header(&after_headers, "x-rein-tier"),
        )?;
    }
    Ok(if normal { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE })
}

async fn handoff(
    admin: &Admin,
    target: &Target,
    count: usize,
    promised: Duration,
    wait: Duration,
    poll: Duration,
    json: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let route = &target.route;
    let body = json!({"count": count, "author": target.author});
    let path = format!("/admin/routes/{route}/drill/handoff");
    let (status, seeded) = admin.send(admin.post(&path).json(&body)).await?;
    if !status.is_success() {
        return failed(status, &seeded);
    }
    let ids: Vec<i64> = seeded["handoffs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["id"].as_i64())
        .collect();
    if !json {
        writeln!(
            std::io::stdout().lock(),
            "hand-off drill on route {route}: {} conversation(s) seeded (ids {}); waiting up to {}s for the replies",
            ids.len(),
            ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", "),
            wait.as_secs(),
        )?;
    }
    let deadline = tokio::time::Instant::now() + wait;
    let mut found: Vec<Value> = Vec::new();
    loop {
        found.clear();
        for id in &ids {
            let (status, handoff) = admin.send(admin.get(&format!("/admin/handoffs/{id}"))).await?;
            if !status.is_success() {
                return failed(status, &handoff);
            }
            found.push(handoff);
        }
        let pending = found.iter().filter(|h| h["decision"].is_null()).count();
        if pending == 0 || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(poll.min(deadline - tokio::time::Instant::now())) => {}
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    let promised_ms = promised.as_millis() as i64;
    let rows: Vec<Value> = found
        .iter()
        .map(|h| {
            let reply_ms = h["decided_unix_ms"]
                .as_i64()
                .map(|decided| decided - h["created_unix_ms"].as_i64().unwrap_or(decided));
            json!({
                "id": h["id"],
                "conversation_id": h["conversation_id"],
                "decision": h["decision"],
                "decided_by": h["decided_by"],
                "reply_ms": reply_ms,
                "within_promise": reply_ms.map(|ms| ms <= promised_ms),
            })
        })
        .collect();
    let on_time = rows.iter().filter(|r| r["within_promise"] == Value::Bool(true)).count();
    let replied = rows.iter().filter(|r| !r["reply_ms"].is_null()).count();
    let all_on_time = on_time == rows.len() && !rows.is_empty();
    if json {
        let report = json!({
            "route": route,
            "promised_ms": promised_ms,
            "seeded": rows.len(),
            "replied": replied,
            "within_promise": on_time,
            "conversations": rows,
        });
        admin::json(&mut std::io::stdout().lock(), &report)?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{:>6}  {:<40}  {:<9}  {:<12}  {:>10}  WITHIN {}s",
            "ID",
            "CONVERSATION",
            "DECISION",
            "BY",
            "REPLY S",
            promised.as_secs()
        )?;
        for row in &rows {
            let reply = row["reply_ms"]
                .as_i64()
                .map_or_else(|| "-".into(), |ms| format!("{:.1}", ms as f64 / 1000.0));
            let within = match row["within_promise"].as_bool() {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "no reply",
            };
            writeln!(
                out,
                "{:>6}  {:<40}  {:<9}  {:<12}  {reply:>10}  {within}",
                row["id"].as_i64().unwrap_or(0),
                text(row, "conversation_id"),
                text(row, "decision"),
                text(row, "decided_by"),
            )?;
        }
        writeln!(
            out,
            "{replied} of {} replied, {on_time} within the promised {}s",
            rows.len(),
            promised.as_secs()
        )?;
    }
    // Exit 3 when a reply missed the promise (or never came), for a scheduled drill to alert on.
    Ok(if all_on_time { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::from(3) })
}
