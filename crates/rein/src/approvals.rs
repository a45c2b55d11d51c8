//! `rein approvals`: the writes a gate holds for a person, on a running gateway, through its
//! admin API. `list` prints one line per hold (id, tool, state, age, the gate's reason, the
//! conversation); `approve` puts the held write in the outbox, where the gateway's worker sends
//! it once with its original key; `reject` makes sure it never runs. Only the first decision on
//! a hold counts. `--json` prints the admin API's answer as is.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::admin;

#[derive(Debug, Args)]
pub(crate) struct ApprovalsArgs {
    #[command(flatten)]
    flags: admin::AdminFlags,
    #[command(subcommand)]
    action: ApprovalsAction,
}

#[derive(Debug, Subcommand)]
enum ApprovalsAction {
    /// Holds, newest first.
    List {
        /// pending, approved, rejected or all.
        #[arg(long, default_value = "pending")]
        state: String,
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Approve a held write: it is sent once, with its original idempotency key.
    Approve {
        id: i64,
        /// Who approves (recorded with the decision).
        #[arg(long)]
        by: String,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Reject a held write: it is never sent.
    Reject {
        id: i64,
        #[arg(long)]
        by: String,
        #[arg(long, default_value = "")]
        note: String,
    },
}

pub(crate) async fn run(args: ApprovalsArgs) -> anyhow::Result<std::process::ExitCode> {
    let admin = args.flags.admin()?;
    let request = match &args.action {
        ApprovalsAction::List { state, limit } => {
            admin.get(&format!("/admin/approvals?state={state}&limit={limit}"))
        }
        ApprovalsAction::Approve { id, by, note } => admin
            .post(&format!("/admin/approvals/{id}/approve"))
            .json(&serde_json::json!({"by": by, "note": note})),
        ApprovalsAction::Reject { id, by, note } => admin
            .post(&format!("/admin/approvals/{id}/reject"))
            .json(&serde_json::json!({"by": by, "note": note})),
    };
    let (status, body) = admin.send(request).await?;
    match (&args.action, args.flags.json) {
        (ApprovalsAction::List { .. }, false) => admin::print(status, &body, write_table),
        _ => admin::print(status, &body, admin::json),
    }
}

/// `list` as a table.
fn write_table(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    let holds = body.get("holds").and_then(Value::as_array).cloned().unwrap_or_default();
    writeln!(
        out,
        "{:>6}  {:<16}  {:<8}  {:<24}  {:<36}  REASON",
        "ID", "TOOL", "STATE", "CONVERSATION", "IDEMPOTENCY KEY"
    )?;
    for hold in &holds {
        let text = |field: &str| hold.get(field).and_then(Value::as_str).unwrap_or("-").to_string();
        writeln!(
            out,
            "{:>6}  {:<16}  {:<8}  {:<24}  {:<36}  {}",
            hold.get("id").and_then(Value::as_i64).unwrap_or(0),
            text("tool"),
            text("state"),
            text("conversation_id"),
            text("idempotency_key"),
            text("reason"),
        )?;
        if let Some(args) = hold.get("args") {
            writeln!(out, "        args: {args}")?;
        }
    }
    writeln!(out, "{} shown", holds.len())
}
