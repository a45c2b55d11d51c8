//! `rein levers ROUTE`: the levers an operator pulls on a route when its quality drops, most
//! easily undone first, on a running gateway through its admin API. Without an action it prints
//! which are engaged and since when (the settings version serving and whether a revert or a
//! model pin made it, the route-to tier, the kill switch of the route and of every route, a
//! failover drill in force); `revert VERSION`, `pin-model TIER MODEL`, `route-to TIER`,
//! `release` and `kill on|off` pull one, each with `--author` and `--reason` for the audit (the
//! kill switch's record keeps one reason, so `kill` writes the author into it). It also lists
//! the route's latest route-to flips. `--json` prints the admin API's answer as is.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::admin;
use crate::traces::utc;

#[derive(Debug, Args)]
pub(crate) struct LeversArgs {
    #[command(flatten)]
    flags: admin::AdminFlags,
    /// The route.
    route: String,
    #[command(subcommand)]
    action: Option<LeversAction>,
}

/// Who pulls a lever and why: every lever is audited.
#[derive(Debug, Args)]
struct Audit {
    /// Who pulls the lever.
    #[arg(long)]
    author: String,
    /// Why.
    #[arg(long)]
    reason: String,
}

#[derive(Debug, Subcommand)]
enum LeversAction {
    /// Lever 1: make an earlier settings version (prompts, models) the one serving.
    Revert {
        version: i64,
        #[command(flatten)]
        audit: Audit,
    },
    /// Lever 2: pin a tier to a model snapshot (a new settings version, revertable).
    PinModel {
        tier: String,
        model: String,
        #[command(flatten)]
        audit: Audit,
    },
    /// Lever 3: start the route's calls at TIER (earlier tiers skipped), without a deploy.
    RouteTo {
        tier: String,
        #[command(flatten)]
        audit: Audit,
    },
    /// Release the route-to lever: calls start at the first tier again.
    Release {
        #[command(flatten)]
        audit: Audit,
    },
    /// Lever 4: the route's kill switch, `on` (its degraded reply) or `off`.
    Kill {
        #[arg(value_parser = ["on", "off"])]
        state: String,
        #[command(flatten)]
        audit: Audit,
    },
}

pub(crate) async fn run(args: LeversArgs) -> anyhow::Result<std::process::ExitCode> {
    let admin = args.flags.admin()?;
    let route = &args.route;
    let base = format!("/admin/routes/{route}");
    let request = match &args.action {
        None => admin.get(&format!("{base}/levers")),
        Some(LeversAction::Revert { version, audit }) => admin
            .post(&format!("{base}/revert"))
            .json(&json!({"version": version, "author": audit.author, "reason": audit.reason})),
        Some(LeversAction::PinModel { tier, model, audit }) => {
            admin.post(&format!("{base}/pin-model")).json(&json!({
                "tier": tier, "model": model, "author": audit.author, "reason": audit.reason,
            }))
        }
        Some(LeversAction::RouteTo { tier, audit }) => admin
            .post(&format!("{base}/route-to"))
            .json(&json!({"tier": tier, "author": audit.author, "reason": audit.reason})),
        Some(LeversAction::Release { audit }) => admin
            .delete(&format!("{base}/route-to"))
            .json(&json!({"author": audit.author, "reason": audit.reason})),
        Some(LeversAction::Kill { state, audit }) => {
            // The kill switch's record keeps one reason: the author goes in it.
            let reason = format!("{} (by {})", audit.reason.trim(), audit.author.trim());
            if audit.author.trim().is_empty() || audit.reason.trim().is_empty() {
                anyhow::bail!("--author and --reason must say who flips the switch and why");
            }
            admin.post("/admin/kill").json(&json!({
                "route": route, "engaged": state == "on", "reason": reason,
            }))
        }
    };
    let (status, body) = admin.send(request).await?;
    if args.flags.json {
        return admin::print(status, &body, admin::json);
    }
    if args.action.is_none() || !status.is_success() {
        return admin::print(status, &body, write_levers);
    }
    // A lever was pulled: say so, then show where every lever stands now.
    let (status, now) = admin.send(admin.get(&format!("{base}/levers"))).await?;
    admin::print(status, &now, |out, now| {
        writeln!(out, "done: {}", pulled(args.action.as_ref(), &body))?;
        write_levers(out, now)
    })
}

/// One line on the lever just pulled.
fn pulled(action: Option<&LeversAction>, body: &Value) -> String {
    match action {
        Some(LeversAction::Revert { version, .. }) => format!("version {version} serves"),
        Some(LeversAction::PinModel { tier, model, .. }) => {
            format!("version {} serves, tier {tier} pinned to {model}", body["version"])
        }
        Some(LeversAction::RouteTo { tier, .. }) => format!("calls start at tier {tier}"),
        Some(LeversAction::Release { .. }) => "route-to released".into(),
        Some(LeversAction::Kill { state, .. }) => format!("kill switch {state}"),
        None => String::new(),
    }
}

fn since(value: &Value) -> String {
    value
        .get("since_unix_ms")
        .and_then(Value::as_i64)
        .map_or_else(|| "-".into(), |ms| format!("{} UTC", utc(ms)))
}

fn text<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or("-")
}

/// Where each lever stands, most easily undone first.
fn write_levers(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    writeln!(out, "levers on route {} (most easily undone first)", text(body, "route"))?;
    let settings = &body["settings"];
    let how = match settings.get("lever").and_then(Value::as_str) {
        Some("revert") => "reverted",
        Some("pin_model") => "model pinned",
        _ => "new version",
    };
    if settings.is_null() {
        writeln!(out, "  {:<10}  no version recorded", "settings")?;
    } else {
        writeln!(
            out,
            "  {:<10}  version {} ({how}) since {} by {}: {}",
            "settings",
            settings["version"],
            since(settings),
            text(settings, "author"),
            text(settings, "reason"),
        )?;
    }
    let route_to = &body["route_to"];
    if route_to.is_null() {
        writeln!(out, "  {:<10}  off (calls start at the first tier)", "route-to")?;
    } else {
        writeln!(
            out,
            "  {:<10}  tier {} since {} by {}: {}",
            "route-to",
            text(route_to, "tier"),
            since(route_to),
            text(route_to, "author"),
            text(route_to, "reason"),
        )?;
        if route_to["applies"] == Value::Bool(false) {
            writeln!(out, "{:<14}(the route has no such tier now: every tier is tried)", "")?;
        }
    }
    for (scope, label) in [("route", "kill"), ("global", "kill (all)")] {
        let flip = &body["kill_switch"][scope];
        if flip.is_null() {
            writeln!(out, "  {label:<10}  off")?;
        } else {
            writeln!(
                out,
                "  {label:<10}  ENGAGED since {}: {}",
                since(flip),
                text(flip, "reason")
            )?;
        }
    }
    let drill = &body["failover_drill"];
    if !drill.is_null() {
        writeln!(
            out,
            "  {:<10}  failover share {} until {} UTC, by {}",
            "drill",
            drill["share"],
            utc(drill["ends_unix_ms"].as_i64().unwrap_or(0)),
            text(drill, "author"),
        )?;
    }
    let history = body["route_to_history"].as_array().cloned().unwrap_or_default();
    if !history.is_empty() {
        writeln!(out, "route-to flips, newest first:")?;
        for flip in history.iter().take(5) {
            let at = flip["at_unix_ms"].as_i64().unwrap_or(0);
            let tier = flip["tier"].as_str().map_or("released".to_string(), |t| format!("to {t}"));
            writeln!(
                out,
                "  {} UTC  {tier:<16}  by {}: {}",
                utc(at),
                text(flip, "author"),
                text(flip, "reason")
            )?;
        }
    }
    let engaged: Vec<&str> = body["engaged"]
        .as_array()
        .map(|levers| levers.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if engaged.is_empty() {
        writeln!(out, "engaged: none")
    } else {
        writeln!(out, "engaged: {}", engaged.join(", "))
    }
}
