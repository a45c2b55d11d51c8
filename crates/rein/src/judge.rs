//! `rein judge agreement labels.jsonl`: how far the judge can be trusted, from answers a person
//! and the judge both labelled (`{"id": "...", "human": "pass", "judge": "fail", "week":
//! "2026-W48"}`; labels `pass`, `fail`, `tie`). Prints agreement with ties counted and left
//! out, Cohen's kappa, TPR and TNR with 95 % intervals, the confusion matrix, agreement per week
//! and the disagreements (`rein_core::agreement`). With `--max-drop 0.05` it exits 3 when the
//! latest week's agreement fell more than that from the week before: the judge and the people
//! drifting apart, for a weekly job to alert on.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use rein_core::agreement::{Agreement, Label, Labelled, Rate};

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
}

pub(crate) fn run(args: JudgeArgs) -> anyhow::Result<std::process::ExitCode> {
    let JudgeAction::Agreement { labels, max_drop, json } = args.action;
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
