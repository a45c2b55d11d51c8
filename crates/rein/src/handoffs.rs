//! `rein handoffs`: the conversations sent to a person, on a running gateway, through its admin
//! API. `list` prints one line per hand-off (id, trigger, decision, delivery, conversation, the
//! customer's message); `show` prints one hand-off's whole packet (the draft beside the evidence,
//! the run's tool calls, the attempts, the trace link); `decide` records a reviewer's decision
//! (approve, edit with the new draft, reject; only the first counts); `stats` prints the edit
//! rate per trigger, flagged when it stays near zero, and the share of canary drafts caught.
//! `--json` prints the admin API's answer as is.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::admin;

#[derive(Debug, Args)]
pub(crate) struct HandoffsArgs {
    #[command(flatten)]
    flags: admin::AdminFlags,
    #[command(subcommand)]
    action: HandoffsAction,
}

#[derive(Debug, Subcommand)]
enum HandoffsAction {
    /// Hand-offs, newest first.
    List {
        /// pending (undecided), decided or all.
        #[arg(long, default_value = "all")]
        state: String,
        /// Only this trigger (handoff_rule, coverage, checks_failed, stop_condition, gate,
        /// degraded).
        #[arg(long)]
        trigger: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// One hand-off with its packet.
    Show { id: i64 },
    /// A reviewer's decision on the draft.
    Decide {
        id: i64,
        /// approve, edit or reject.
        decision: String,
        /// Who decides.
        #[arg(long)]
        by: String,
        /// The reviewer's version of the draft (with `edit`).
        #[arg(long)]
        draft: Option<String>,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Edit rate and canaries caught, per trigger.
    Stats {
        /// Hand-offs made since this many hours ago.
        #[arg(long, default_value_t = 720)]
        hours: i64,
    },
}

pub(crate) async fn run(args: HandoffsArgs) -> anyhow::Result<std::process::ExitCode> {
    let admin = args.flags.admin()?;
    let request = match &args.action {
        HandoffsAction::List { state, trigger, limit } => {
            let mut path = format!("/admin/handoffs?state={state}&limit={limit}");
            if let Some(trigger) = trigger {
                path.push_str(&format!("&trigger={trigger}"));
            }
            admin.get(&path)
        }
        HandoffsAction::Show { id } => admin.get(&format!("/admin/handoffs/{id}")),
        HandoffsAction::Decide { id, decision, by, draft, note } => {
            let mut body = serde_json::json!({"decision": decision, "by": by, "note": note});
            if let Some(draft) = draft {
                body["draft"] = Value::String(draft.clone());
            }
            admin.post(&format!("/admin/handoffs/{id}/decision")).json(&body)
        }
        HandoffsAction::Stats { hours } => {
            let now = i64::try_from(rein_core::clock::unix_ms()).unwrap_or(i64::MAX);
            admin.get(&format!("/admin/handoffs/stats?since_ms={}", now - hours * 3_600_000))
        }
    };
    let (status, body) = admin.send(request).await?;
    match (&args.action, args.flags.json) {
        (HandoffsAction::List { .. }, false) => admin::print(status, &body, write_table),
        (HandoffsAction::Show { .. }, false) => admin::print(status, &body, write_packet),
        (HandoffsAction::Stats { .. }, false) => admin::print(status, &body, write_stats),
        _ => admin::print(status, &body, admin::json),
    }
}

fn text(value: &Value, field: &str) -> String {
    match value.get(field) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => "-".to_string(),
        Some(other) => other.to_string(),
    }
}

/// `list` as a table.
fn write_table(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    let handoffs = body.get("handoffs").and_then(Value::as_array).cloned().unwrap_or_default();
    writeln!(
        out,
        "{:>6}  {:<15}  {:<23}  {:<9}  {:<9}  {:<24}  MESSAGE",
        "ID", "TRIGGER", "STATUS", "DECISION", "DELIVERY", "CONVERSATION"
    )?;
    for handoff in &handoffs {
        let message: String = text(handoff, "customer_message").chars().take(60).collect();
        writeln!(
            out,
            "{:>6}  {:<15}  {:<23}  {:<9}  {:<9}  {:<24}  {}",
            handoff.get("id").and_then(Value::as_i64).unwrap_or(0),
            text(handoff, "trigger"),
            text(handoff, "stop_status"),
            text(handoff, "decision"),
            text(handoff, "delivery"),
            text(handoff, "conversation_id"),
            message,
        )?;
    }
    writeln!(out, "{} shown", handoffs.len())
}

/// `show`: the packet laid out for a reviewer, the draft beside its evidence.
fn write_packet(out: &mut dyn Write, handoff: &Value) -> std::io::Result<()> {
    let packet = handoff.get("packet").cloned().unwrap_or(Value::Null);
    writeln!(out, "hand-off {}  ({})", text(handoff, "id"), text(handoff, "delivery"))?;
    writeln!(out, "conversation  {}", text(&packet, "conversation_id"))?;
    writeln!(out, "run           {}", text(&packet, "run_id"))?;
    writeln!(out, "route         {}", text(&packet, "route"))?;
    writeln!(out, "trigger       {}: {}", text(&packet, "trigger"), text(&packet, "reason"))?;
    writeln!(out, "customer      {}", text(&packet, "customer_message"))?;
    writeln!(out, "draft         {}", text(&packet, "draft"))?;
    let evidence = packet.get("evidence").and_then(Value::as_array).cloned().unwrap_or_default();
    writeln!(out, "evidence      {} item(s)", evidence.len())?;
    for item in &evidence {
        writeln!(out, "  [{}] {}: {}", text(item, "source"), text(item, "id"), text(item, "text"))?;
    }
    let calls = packet.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
    writeln!(out, "tool calls    {}", calls.len())?;
    for call in &calls {
        let detail = call.get("result").map(|r| text(r, "detail")).unwrap_or_default();
        writeln!(
            out,
            "  {} {} -> {} {}",
            text(call, "tool"),
            call.get("args").cloned().unwrap_or(Value::Null),
            text(call, "status"),
            detail
        )?;
    }
    if let Some(attempts) = packet.get("attempts").filter(|a| !a.is_null()) {
        writeln!(out, "attempts      {attempts}")?;
    }
    writeln!(out, "trace         {}", text(&packet, "trace_url"))?;
    writeln!(out, "decision      {} by {}", text(handoff, "decision"), text(handoff, "decided_by"))
}

/// `stats` as a table.
fn write_stats(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    let triggers = body.get("triggers").and_then(Value::as_array).cloned().unwrap_or_default();
    writeln!(
        out,
        "{:<15}  {:>8}  {:>7}  {:>7}  {:>9}  {:>8}  {:>6}  FLAG",
        "TRIGGER", "HANDOFFS", "DECIDED", "CHANGED", "EDIT RATE", "CANARIES", "CAUGHT"
    )?;
    let rate = |value: Option<&Value>| {
        value
            .and_then(Value::as_f64)
            .map_or_else(|| "-".to_string(), |r| format!("{:.1}%", r * 100.0))
    };
    for row in &triggers {
        let number = |field: &str| row.get(field).and_then(Value::as_i64).unwrap_or(0);
        let flagged = row.get("flagged").and_then(Value::as_bool).unwrap_or(false);
        writeln!(
            out,
            "{:<15}  {:>8}  {:>7}  {:>7}  {:>9}  {:>8}  {:>6}  {}",
            text(row, "trigger"),
            number("handoffs"),
            number("decided"),
            number("changed"),
            rate(row.get("edit_rate")),
            number("canaries"),
            format!("{}/{}", number("canaries_caught"), number("canaries_decided")),
            if flagged {
                "edit rate near zero: is anyone reading, or is the trigger too loose?"
            } else {
                ""
            },
        )?;
    }
    Ok(())
}
