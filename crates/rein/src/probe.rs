//! `rein probe run` and `rein probe show`: the golden-prompt probe of a running gateway, through
//! its admin API. `run` sends every `[[probe.questions]]` through the production path now and
//! prints each answer's result with the tier and model that gave it; `show` prints the last
//! run (the schedule's or a person's). `--json` prints the admin API's answer as is.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::admin;

#[derive(Debug, Args)]
pub(crate) struct ProbeArgs {
    #[command(flatten)]
    flags: admin::AdminFlags,
    #[command(subcommand)]
    action: ProbeAction,
}

#[derive(Debug, Subcommand)]
enum ProbeAction {
    /// Run the probe's questions now.
    Run,
    /// The last run.
    Show,
}

pub(crate) async fn run(args: ProbeArgs) -> anyhow::Result<std::process::ExitCode> {
    let admin = args.flags.admin()?;
    let (status, body) = match args.action {
        ProbeAction::Run => admin.send(admin.post("/admin/probe/run")).await?,
        ProbeAction::Show => {
            let (status, body) = admin.send(admin.get("/admin/probe")).await?;
            (status, body.get("last").cloned().unwrap_or(Value::Null))
        }
    };
    if args.flags.json {
        return admin::print(status, &body, admin::json);
    }
    admin::print(status, &body, write_run)
}

fn write_run(out: &mut dyn Write, run: &Value) -> std::io::Result<()> {
    if run.is_null() {
        return writeln!(out, "the probe has not run yet");
    }
    let text = |value: &Value, field: &str| match value.get(field) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => "-".to_string(),
        Some(other) => other.to_string(),
    };
    let score = run.get("score").and_then(Value::as_f64).unwrap_or(0.0);
    let results = run.get("results").and_then(Value::as_array).cloned().unwrap_or_default();
    writeln!(
        out,
        "score {:.1}% ({} question(s), {} ms)",
        score * 100.0,
        results.len(),
        text(run, "elapsed_ms")
    )?;
    writeln!(
        out,
        "{:<20}  {:<14}  {:<6}  {:<12}  {:<20}  {:>6}  DETAIL",
        "QUESTION", "ROUTE", "RESULT", "TIER", "MODEL", "MS"
    )?;
    for result in &results {
        writeln!(
            out,
            "{:<20}  {:<14}  {:<6}  {:<12}  {:<20}  {:>6}  {}",
            text(result, "id"),
            text(result, "route"),
            text(result, "result"),
            text(result, "tier"),
            text(result, "model"),
            text(result, "elapsed_ms"),
            result.get("detail").and_then(Value::as_str).unwrap_or(""),
        )?;
    }
    Ok(())
}
