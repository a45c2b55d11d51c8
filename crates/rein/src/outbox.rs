//! `rein outbox`: the durable write queue of a running gateway, through its admin API. `list`
//! prints one line per queued write with its key, tool, state, age, attempts and last error;
//! `show` prints one item whole; `replay` makes an item due now (for an item in `review`: the
//! operator releases it to be sent again); `executed` settles an item in `review` whose write the
//! operator found done at the backend; `drop` removes it for good. `--json` prints the admin API's answer as is.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::admin;

#[derive(Debug, Args)]
pub(crate) struct OutboxArgs {
    #[command(flatten)]
    flags: admin::AdminFlags,
    #[command(subcommand)]
    action: OutboxAction,
}

#[derive(Debug, Subcommand)]
enum OutboxAction {
    /// Queued writes, newest first: key, tool, state, age, attempts, last error.
    List {
        /// pending, review, done, failed, dropped or all.
        #[arg(long, default_value = "all")]
        state: String,
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// One queued write, whole (arguments, lease, result).
    Show { id: i64 },
    /// Make a pending or failed write due now; the gateway's worker sends it with its key.
    Replay { id: i64 },
    /// Settle a write held for review (its outcome was unknown) as executed: the backend has it.
    Executed {
        id: i64,
        /// Who checked the backend.
        #[arg(long)]
        by: String,
        /// The backend's result, as JSON (becomes the key's stored answer).
        #[arg(long)]
        result: Option<String>,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Drop a pending or failed write: it is never sent.
    Drop {
        id: i64,
        #[arg(long)]
        reason: String,
        #[arg(long, default_value = "cli")]
        by: String,
    },
}

pub(crate) async fn run(args: OutboxArgs) -> anyhow::Result<std::process::ExitCode> {
    let admin = args.flags.admin()?;
    let request = match &args.action {
        OutboxAction::List { state, limit } => {
            admin.get(&format!("/admin/outbox?state={state}&limit={limit}"))
        }
        OutboxAction::Show { id } => admin.get(&format!("/admin/outbox/{id}")),
        OutboxAction::Replay { id } => admin.post(&format!("/admin/outbox/{id}/replay")),
        OutboxAction::Executed { id, by, result, note } => {
            let result: Option<Value> = match result {
                Some(text) => Some(
                    serde_json::from_str(text)
                        .map_err(|error| anyhow::anyhow!("--result is not JSON: {error}"))?,
                ),
                None => None,
            };
            admin
                .post(&format!("/admin/outbox/{id}/executed"))
                .json(&serde_json::json!({"by": by, "result": result, "note": note}))
        }
        OutboxAction::Drop { id, reason, by } => admin
            .post(&format!("/admin/outbox/{id}/drop"))
            .json(&serde_json::json!({"reason": reason, "by": by})),
    };
    let (status, body) = admin.send(request).await?;
    match (&args.action, args.flags.json) {
        (OutboxAction::List { .. }, false) => admin::print(status, &body, write_table),
        _ => admin::print(status, &body, admin::json),
    }
}

/// `list` as a table, then the queue's numbers.
fn write_table(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    let items = body.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
    writeln!(
        out,
        "{:>6}  {:<36}  {:<16}  {:<8}  {:>9}  {:>8}  LAST ERROR",
        "ID", "IDEMPOTENCY KEY", "TOOL", "STATE", "AGE", "ATTEMPTS"
    )?;
    for item in &items {
        let text = |field: &str| item.get(field).and_then(Value::as_str).unwrap_or("-").to_string();
        let number = |field: &str| item.get(field).and_then(Value::as_i64).unwrap_or(0);
        writeln!(
            out,
            "{:>6}  {:<36}  {:<16}  {:<8}  {:>9}  {:>8}  {}",
            number("id"),
            text("idempotency_key"),
            text("tool"),
            text("state"),
            age(number("age_ms")),
            number("attempts"),
            text("last_error"),
        )?;
    }
    let stats = body.get("stats").cloned().unwrap_or(Value::Null);
    let pending = stats.get("pending").and_then(Value::as_i64).unwrap_or(0);
    let failed = stats.get("failed").and_then(Value::as_i64).unwrap_or(0);
    let review = stats.get("review").and_then(Value::as_i64).unwrap_or(0);
    writeln!(
        out,
        "{} shown; {pending} pending, {review} held for review, {failed} failed",
        items.len()
    )
}

/// `950ms`, `12.5s`, `4.2m`, `3.6h`, `2.1d`.
fn age(ms: i64) -> String {
    let ms = ms.max(0) as f64;
    if ms < 1_000.0 {
        format!("{ms}ms")
    } else if ms < 60_000.0 {
        format!("{:.1}s", ms / 1_000.0)
    } else if ms < 3_600_000.0 {
        format!("{:.1}m", ms / 60_000.0)
    } else if ms < 86_400_000.0 {
        format!("{:.1}h", ms / 3_600_000.0)
    } else {
        format!("{:.1}d", ms / 86_400_000.0)
    }
}
