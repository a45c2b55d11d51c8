//! `rein judge agreement labels.jsonl`: how far the judge can be trusted, from answers a person
//! and the judge both labelled (`{"id": "...", "human": "pass", "judge": "fail", "week":
//! "2026-W48"}`; labels `pass`, `fail`, `tie`). Prints agreement with ties counted and left
//! out, Cohen's kappa, TPR and TNR with 95 % intervals, the confusion matrix, agreement per week
//! and the disagreements (`rein_core::agreement`). With `--max-drop 0.05` it exits 3 when the
//! latest week's agreement fell more than that from the week before: the judge and the people
//! drifting apart, for a weekly job to alert on.
//!
//! `rein judge verdicts` lists a running gateway's online-judge verdicts (through its admin
//! API); `--labels-out FILE` writes them as the lines `agreement` reads, each with the judge's
//! verdict, the week it was judged, what a person reads to label it, and `"human": null` for
//! that person to fill in: the weekly sample that checks the judge.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use rein_core::agreement::{Agreement, Label, Labelled, Rate};
use serde_json::Value;

use crate::admin;

#[derive(Debug, Args)]
pub(crate) struct JudgeArgs {
    #[command(subcommand)]
    action: JudgeAction,
}

#[derive(Debug, Subcommand)]
enum JudgeAction {
    /// The judge's verdicts against a person's labels of the same answers.
    Agreement {
        /// One labelled answer per line.
        labels: PathBuf,
        /// Exit 3 when agreement fell more than this (a share, e.g. 0.05) from the week before
        /// the latest to the latest.
        #[arg(long)]
        max_drop: Option<f64>,
        /// Print the numbers as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The online judge's verdicts on a running gateway's sampled answers (newest first).
    Verdicts {
        #[command(flatten)]
        flags: admin::AdminFlags,
        /// Of calls made within this window (`90m`, `24h`, `7d`).
        #[arg(long, default_value = "7d")]
        window: String,
        /// Only this route's.
        #[arg(long)]
        route: Option<String>,
        /// Only the answers the judge failed.
        #[arg(long)]
        failed: bool,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Write them for a person to label: one line each in the form `agreement` reads.
        #[arg(long, value_name = "FILE")]
        labels_out: Option<PathBuf>,
    },
}

pub(crate) async fn run(args: JudgeArgs) -> anyhow::Result<std::process::ExitCode> {
    match args.action {
        JudgeAction::Agreement { labels, max_drop, json } => agreement(labels, max_drop, json),
        JudgeAction::Verdicts { flags, window, route, failed, limit, labels_out } => {
            verdicts(flags, window, route, failed, limit, labels_out).await
        }
    }
}

async fn verdicts(
    flags: admin::AdminFlags,
    window: String,
    route: Option<String>,
    failed: bool,
    limit: u32,
    labels_out: Option<PathBuf>,
) -> anyhow::Result<std::process::ExitCode> {
    let admin = flags.admin()?;
    let mut query: Vec<(&str, String)> = vec![("window", window), ("limit", limit.to_string())];
    if let Some(route) = route {
        query.push(("route", route));
    }
    if failed {
        query.push(("failed", "true".to_string()));
    }
    let mut path = reqwest::Url::parse("http://gateway/admin/judge/verdicts")?;
    path.query_pairs_mut().extend_pairs(&query);
    let path = format!("{}?{}", path.path(), path.query().unwrap_or(""));
    let (status, body) = admin.send(admin.get(&path)).await?;
    if let (true, Some(path)) = (status.is_success(), &labels_out) {
        let verdicts = body.get("verdicts").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut text = String::new();
        for verdict in &verdicts {
            text.push_str(&serde_json::to_string(&to_label(verdict))?);
            text.push('\n');
        }
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {} answer(s) to label to {}", verdicts.len(), path.display());
    }
    if flags.json {
        return admin::print(status, &body, admin::json);
    }
    admin::print(status, &body, write_verdicts)
}

/// A verdict as a line for a person to label: the judge's side filled in, `human` left null.
fn to_label(verdict: &Value) -> Value {
    let judged = verdict.get("judged_unix_ms").and_then(Value::as_i64).unwrap_or(0);
    let pass = verdict.get("pass").and_then(Value::as_bool).unwrap_or(false);
    let mut context = serde_json::Map::new();
    for field in ["route", "tier", "model", "labels", "question", "evidence", "answer", "reply"] {
        if let Some(value) = verdict.get(field).filter(|value| !value.is_null()) {
            context.insert(field.to_string(), value.clone());
        }
    }
    serde_json::json!({
        "id": verdict.get("request_id").cloned().unwrap_or(Value::Null),
        "judge": if pass { "pass" } else { "fail" },
        "human": Value::Null,
        "week": rein_core::agreement::iso_week(judged),
        "context": context,
    })
}

fn write_verdicts(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    let text = |value: &Value, field: &str| match value.get(field) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => "-".to_string(),
        Some(other) => other.to_string(),
    };
    let verdicts = body.get("verdicts").and_then(Value::as_array).cloned().unwrap_or_default();
    let passed = verdicts.iter().filter(|v| v.get("pass") == Some(&Value::Bool(true))).count();
    writeln!(
        out,
        "{} verdict(s), {} passed; {} answer(s) waiting for the judge, {} dropped",
        verdicts.len(),
        passed,
        text(body, "pending"),
        text(body, "dropped")
    )?;
    writeln!(
        out,
        "{:<28}  {:<14}  {:<12}  {:<20}  {:<7}  {:>5}  REPLY",
        "REQUEST", "ROUTE", "TIER", "MODEL", "VERDICT", "P"
    )?;
    for verdict in &verdicts {
        let pass = verdict.get("pass") == Some(&Value::Bool(true));
        let reply: String = text(verdict, "reply").chars().take(60).collect();
        writeln!(
            out,
            "{:<28}  {:<14}  {:<12}  {:<20}  {:<7}  {:>5}  {}",
            text(verdict, "request_id"),
            text(verdict, "route"),
            text(verdict, "tier"),
            text(verdict, "model"),
            if pass { "pass" } else { "fail" },
            text(verdict, "probability"),
            reply.replace('\n', " "),
        )?;
    }
    Ok(())
}

fn agreement(
    labels: PathBuf,
    max_drop: Option<f64>,
    json: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let text = std::fs::read_to_string(&labels)
        .with_context(|| format!("cannot read {}", labels.display()))?;
    let mut read = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let labelled: Labelled = serde_json::from_str(line).with_context(|| {
            format!("{}:{}: not a labelled answer", labels.display(), index + 1)
        })?;
        read.push(labelled);
    }
    if read.is_empty() {
        anyhow::bail!("{}: no labelled answers", labels.display());
    }
    let agreement = Agreement::of(&read);
    let mut stdout = std::io::stdout().lock();
    if json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&agreement)?)?;
    } else {
        write_agreement(&mut stdout, &agreement)?;
    }
    if let (Some(max_drop), Some(drop)) = (max_drop, agreement.weekly_drop())
        && drop > max_drop
    {
        let [.., before, latest] = agreement.weeks.as_slice() else { unreachable!() };
        eprintln!(
            "ALERT: judge agreement fell from {} in {} to {} in {} ({:.1} points, more than {:.1})",
            percent(before.with_ties),
            before.week,
            percent(latest.with_ties),
            latest.week,
            drop * 100.0,
            max_drop * 100.0
        );
        return Ok(std::process::ExitCode::from(3));
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

fn rate(rate: &Rate) -> String {
    format!(
        "{} ({}/{}) [95% CI {} to {}]",
        percent(rate.rate),
        rate.hits,
        rate.of,
        percent(rate.low),
        percent(rate.high)
    )
}

fn label(label: Label) -> &'static str {
    match label {
        Label::Pass => "pass",
        Label::Fail => "fail",
        Label::Tie => "tie",
    }
}

fn write_agreement(out: &mut dyn Write, agreement: &Agreement) -> std::io::Result<()> {
    writeln!(out, "labelled answers        {}", agreement.labelled)?;
    writeln!(out, "agreement, ties counted {}", rate(&agreement.with_ties))?;
    writeln!(out, "agreement, ties out     {}", rate(&agreement.without_ties))?;
    writeln!(out, "Cohen's kappa           {:.3}", agreement.kappa)?;
    writeln!(out, "TPR (passes kept)       {}", rate(&agreement.tpr))?;
    writeln!(out, "TNR (failures caught)   {}", rate(&agreement.tnr))?;
    writeln!(out)?;
    writeln!(out, "person \\ judge   pass  fail   tie")?;
    let all = [Label::Pass, Label::Fail, Label::Tie];
    for human in all {
        let row = agreement.confusion.get(&human);
        let cell = |judge: Label| row.and_then(|row| row.get(&judge)).copied().unwrap_or(0);
        writeln!(
            out,
            "{:<15} {:>5} {:>5} {:>5}",
            label(human),
            cell(Label::Pass),
            cell(Label::Fail),
            cell(Label::Tie)
        )?;
    }
    if !agreement.weeks.is_empty() {
        writeln!(out)?;
        for week in &agreement.weeks {
            writeln!(
                out,
                "week {:<10} {:>4} labelled, agreement {} (ties out {})",
                week.week,
                week.labelled,
                percent(week.with_ties),
                percent(week.without_ties)
            )?;
        }
    }
    writeln!(out)?;
    writeln!(out, "disagreements ({}):", agreement.disagreements.len())?;
    for disagreement in &agreement.disagreements {
        writeln!(
            out,
            "  {}: person {}, judge {}",
            disagreement.id,
            label(disagreement.human),
            label(disagreement.judge)
        )?;
    }
    Ok(())
}
