//! `rein eval DATASET.jsonl --sweep coverage`: the route's coverage cutoff chosen on the
//! dataset, the spec's way (add questions no passage answers, `"answerable": false`, run the
//! check over all of them, try cutoffs). Each case runs once, in two calls with the admin key:
//! its score from the route's own check (`POST /admin/routes/<route>/coverage`, which declines
//! nothing), and, for an answerable case, the route's answer with the check skipped
//! (`x-rein-skip-coverage: true`; like a pinned call it is kept out of the SLIs), checked by the
//! case's `expect`. An unanswerable case needs no answer: answered, it is wrong. Then
//! `rein_core::sweep` gives each cutoff's coverage and accuracy on the answered share, printed
//! as a table (`--json`, and `--html` with a chart of both per cutoff); the lowest cutoff whose
//! accuracy reaches `--min-accuracy` is chosen and written to `--snippet` as the route's whole
//! `[routes.<name>.coverage]` table (exit 3 when no cutoff reaches it).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use rein_core::coverage::CoverageCheck;
use rein_core::sweep::{SweepCase, SweepRow, choose, sweep};
use serde::Serialize;
use serde_json::{Value, json};

use super::{EvalArgs, Prepared, Runner, escape, load, percent};

/// The exit code when no cutoff reaches `--min-accuracy`.
const NONE_REACHES: u8 = 3;

/// One case as the sweep saw it.
#[derive(Debug, Clone, Serialize)]
struct Scored {
    id: String,
    answerable: bool,
    score: f64,
    method: String,
    /// The answer passed the case's checkers (unanswerable cases are not asked).
    correct: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tier: Option<String>,
}

/// The sweep's result, as `--json` writes it.
#[derive(Debug, Serialize)]
struct Report<'a> {
    route: &'a str,
    min_accuracy: f64,
    /// The chosen cutoff, when one reaches `min_accuracy`.
    chosen: Option<f64>,
    rows: &'a [SweepRow],
    cases: &'a [Scored],
}

/// The route's coverage verdict on `case`. `Err` for anything but a verdict: the gateway's
/// message says why (no such route, no coverage check on it, a bad case).
async fn verdict(runner: &Runner, case: &Prepared) -> anyhow::Result<Value> {
    let Some(admin) = &runner.admin_key else { bail!("the coverage sweep needs the admin key") };
    let mut body = json!({
        "evidence": case.case.evidence.iter().map(rein_core::eval::EvidenceSpec::to_json).collect::<Vec<_>>(),
    });
    match (&case.case.question, &case.case.messages) {
        (Some(question), _) => body["question"] = json!(question),
        (None, messages) => body["messages"] = json!(messages),
    }
    let response = runner
        .client
        .post(format!("{}/admin/routes/{}/coverage", runner.url, case.route))
        .bearer_auth(admin)
        .header("x-rein-deadline-ms", runner.timeout.as_millis().to_string())
        .timeout(runner.timeout + Duration::from_secs(5))
        .json(&body)
        .send()
        .await
        .with_context(|| format!("cannot reach {}", runner.url))?;
    let status = response.status();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let message = answer.pointer("/error/message").and_then(Value::as_str).unwrap_or("");
        if status == reqwest::StatusCode::CONFLICT {
            bail!("{message}");
        }
        bail!("case `{}`: the coverage check answered {status}: {message}", case.case.id);
    }
    Ok(answer)
}

/// One case of the sweep: its score and, when answerable, whether the answer is right; and the
/// route's check as the verdict carries it.
async fn sweep_case(runner: &Runner, case: &Prepared) -> anyhow::Result<(Scored, Value)> {
    let verdict = verdict(runner, case).await?;
    let Some(score) = verdict["score"].as_f64() else {
        bail!("case `{}`: the gateway's verdict has no score: {verdict}", case.case.id);
    };
    let mut scored = Scored {
        id: case.case.id.clone(),
        answerable: case.answerable,
        score,
        method: verdict["method"].as_str().unwrap_or("").to_string(),
        correct: false,
        detail: None,
        tier: None,
    };
    if case.answerable {
        let trial = runner.run(case, 0).await?;
        scored.correct = trial.passed;
        scored.detail = trial.detail;
        scored.tier = trial.tier;
    }
    Ok((scored, verdict["check"].clone()))
}

pub(super) async fn coverage(args: EvalArgs) -> anyhow::Result<std::process::ExitCode> {
    if !(0.0..=1.0).contains(&args.min_accuracy) {
        bail!("--min-accuracy must be between 0 and 1 (0.99 is 99 %)");
    }
    if let Some(bad) = args.cutoffs.iter().find(|c| !(0.0..=1.0).contains(*c)) {
        bail!("--cutoffs: {bad} is not between 0 and 1");
    }
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let cases = load(&args.dataset, args.route.as_deref(), args.tier.as_deref())?;
    let route = cases[0].route.clone();
    if let Some(other) = cases.iter().find(|case| case.route != route) {
        bail!(
            "--sweep coverage chooses one route's cutoff: case `{}` is on route `{}`, case `{}` on `{route}`",
            other.case.id,
            other.route,
            cases[0].case.id
        );
    }
    let admin_key = std::env::var(&args.admin_key_env).with_context(|| {
        format!(
            "--sweep coverage needs the gateway's admin key in {}: it scores each case with the route's check and skips the check on the answer",
            args.admin_key_env
        )
    })?;
    let runner = Arc::new(Runner {
        client: reqwest::Client::new(),
        url: args.url.trim_end_matches('/').to_string(),
        key: std::env::var(&args.key_env).ok(),
        admin_key: Some(admin_key),
        tier: args.tier.clone(),
        judge_route: args.judge_route.clone(),
        timeout: Duration::from_millis(args.timeout_ms),
        skip_coverage: true,
    });

    // The first case alone: a route without a coverage check is said once, before the rest.
    let (first, check) = sweep_case(&runner, &cases[0]).await?;
    let mut scored = vec![first];
    let progress = indicatif::ProgressBar::new(cases.len() as u64);
    progress.set_position(1);
    progress.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} cases")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let cases = Arc::new(cases);
    let slots = Arc::new(tokio::sync::Semaphore::new(args.concurrency));
    let mut running = tokio::task::JoinSet::new();
    for index in 1..cases.len() {
        let (runner, cases, slots) = (runner.clone(), cases.clone(), slots.clone());
        running.spawn(async move {
            let _slot = slots.acquire_owned().await;
            sweep_case(&runner, &cases[index]).await.map(|(scored, _)| (index, scored))
        });
    }
    let mut rest = Vec::new();
    while let Some(finished) = running.join_next().await {
        match finished.context("a case's task failed")? {
            Ok(done) => {
                progress.inc(1);
                rest.push(done);
            }
            Err(error) => {
                progress.finish_and_clear();
                running.abort_all();
                return Err(error);
            }
        }
    }
    progress.finish_and_clear();
    rest.sort_by_key(|(index, _)| *index);
    scored.extend(rest.into_iter().map(|(_, scored)| scored));

    let input: Vec<SweepCase> = scored
        .iter()
        .map(|case| SweepCase {
            id: case.id.clone(),
            score: case.score,
            answerable: case.answerable,
            correct: case.correct,
        })
        .collect();
    let rows = sweep(&input, &args.cutoffs).map_err(|error| anyhow::anyhow!("{error}"))?;
    let chosen = choose(&rows, args.min_accuracy);
    let mut stdout = std::io::stdout().lock();
    write_table(&mut stdout, &route, &scored, &rows, chosen, args.min_accuracy)?;
    let report = Report {
        route: &route,
        min_accuracy: args.min_accuracy,
        chosen: chosen.map(|row| row.cutoff),
        rows: &rows,
        cases: &scored,
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        std::fs::write(path, html(&report, &args.dataset))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let Some(chosen) = chosen else {
        if let Some(path) = &args.snippet {
            eprintln!("{} not written: no cutoff to write", path.display());
        }
        return Ok(std::process::ExitCode::from(NONE_REACHES));
    };
    if let Some(path) = &args.snippet {
        let mut check: CoverageCheck = serde_json::from_value(check)
            .context("the gateway's verdict does not carry the route's coverage check")?;
        check.cutoff = chosen.cutoff;
        let table = rein_runtime::config::snippet::coverage(&route, &check)
            .map_err(|error| anyhow::anyhow!("{error}"))?;
        let dataset = args.dataset.file_name().map_or_else(
            || args.dataset.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        );
        let text = format!(
            "# rein eval --sweep coverage on {dataset} ({cases} cases): cutoff {cutoff} answers {coverage} with {accuracy} right,\n# the lowest cutoff with at least {min} on the answered share. It replaces route `{route}`'s coverage setting.\n{table}",
            cases = chosen.cases,
            cutoff = chosen.cutoff,
            coverage = percent(chosen.coverage),
            accuracy = chosen.accuracy.map_or_else(|| "-".to_string(), percent),
            min = percent(args.min_accuracy),
        );
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn or_dash(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), percent)
}

/// The sweep as a terminal table, then the choice.
fn write_table(
    out: &mut dyn Write,
    route: &str,
    cases: &[Scored],
    rows: &[SweepRow],
    chosen: Option<&SweepRow>,
    min_accuracy: f64,
) -> std::io::Result<()> {
    let unanswerable = cases.iter().filter(|case| !case.answerable).count();
    writeln!(
        out,
        "coverage sweep of route `{route}`: {} case(s), {} answerable, {unanswerable} unanswerable",
        cases.len(),
        cases.len() - unanswerable,
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:>6}  {:>9}  {:>8}  {:>8}  {:>12}",
        "CUTOFF", "ANSWERED", "COVERAGE", "ACCURACY", "UNANS. DECL."
    )?;
    for row in rows {
        writeln!(
            out,
            "{:>6.2}  {:>9}  {:>8}  {:>8}  {:>12}",
            row.cutoff,
            format!("{}/{}", row.answered, row.cases),
            percent(row.coverage),
            or_dash(row.accuracy),
            or_dash(row.unanswerable_declined_share),
        )?;
    }
    writeln!(out)?;
    match chosen {
        Some(row) => writeln!(
            out,
            "chosen: cutoff {} answers {} with {} right (the lowest cutoff with at least {} on the answered share)",
            row.cutoff,
            percent(row.coverage),
            or_dash(row.accuracy),
            percent(min_accuracy),
        ),
        None => {
            let best = rows
                .iter()
                .filter_map(|row| row.accuracy.map(|accuracy| (accuracy, row.cutoff)))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let best = best.map_or_else(String::new, |(accuracy, cutoff)| {
                format!(" (the best is {} at cutoff {cutoff})", percent(accuracy))
            });
            writeln!(
                out,
                "no cutoff reaches {} accuracy on the answered share{best}",
                percent(min_accuracy)
            )
        }
    }
}

/// The sweep as one runner-contained HTML page: a chart of coverage and accuracy on the answered
/// share per cutoff (inline SVG, no script), the table and each case's score.
fn html(report: &Report<'_>, dataset: &Path) -> String {
    let (width, height, left, top, plot_w, plot_h) = (640.0, 320.0, 50.0, 20.0, 560.0, 260.0);
    let x = |cutoff: f64| left + plot_w * cutoff;
    let y = |share: f64| top + plot_h * (1.0 - share);
    let line = |values: Vec<(f64, f64)>, colour: &str, name: &str| {
        let points: Vec<String> =
            values.iter().map(|(c, v)| format!("{:.1},{:.1}", x(*c), y(*v))).collect();
        let dots: String = values
            .iter()
            .map(|(c, v)| {
                format!(
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{name} at {c}: {}</title></circle>"#,
                    x(*c),
                    y(*v),
                    percent(*v)
                )
            })
            .collect();
        format!(
            r#"<polyline class="{name}" points="{}" fill="none" stroke="{colour}" stroke-width="2"/>{dots}"#,
            points.join(" ")
        )
    };
    let coverage = report.rows.iter().map(|row| (row.cutoff, row.coverage)).collect();
    let accuracy =
        report.rows.iter().filter_map(|row| row.accuracy.map(|a| (row.cutoff, a))).collect();
    let mut axes = format!(
        r##"<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/><line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#888"/>"##,
        bottom = top + plot_h,
        right = left + plot_w,
    );
    for tick in 0..=10 {
        let value = f64::from(tick) / 10.0;
        axes.push_str(&format!(
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{value:.1}</text>"#,
            x(value),
            top + plot_h + 14.0
        ));
        if tick % 2 == 0 {
            axes.push_str(&format!(
                r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{}%</text>"#,
                left - 4.0,
                y(value) + 3.0,
                tick * 10
            ));
        }
    }
    if let Some(cutoff) = report.chosen {
        axes.push_str(&format!(
            r##"<line class="chosen" x1="{cx:.1}" y1="{top}" x2="{cx:.1}" y2="{bottom}" stroke="#2a7a2a" stroke-dasharray="4 3"><title>chosen: {cutoff}</title></line>"##,
            cx = x(cutoff),
            bottom = top + plot_h,
        ));
    }
    let chart = format!(
        "{axes}{}{}",
        line(coverage, "#4a7bd0", "coverage"),
        line(accuracy, "#d0884a", "accuracy")
    );
    let rows: String = report
        .rows
        .iter()
        .map(|row| {
            format!(
                "<tr{chosen}><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                row.cutoff,
                row.answered,
                row.cases,
                percent(row.coverage),
                or_dash(row.accuracy),
                row.answerable_declined,
                or_dash(row.unanswerable_declined_share),
                chosen = if report.chosen == Some(row.cutoff) { r#" class="chosen""# } else { "" },
            )
        })
        .collect();
    let cases: String = report
        .cases
        .iter()
        .map(|case| {
            format!(
                "<tr><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                escape(&case.id),
                case.score,
                if case.answerable { "yes" } else { "no" },
                match (case.answerable, case.correct) {
                    (false, _) => "-",
                    (true, true) => "right",
                    (true, false) => "wrong",
                },
                escape(case.detail.as_deref().unwrap_or("")),
            )
        })
        .collect();
    let chosen = match report.chosen {
        Some(cutoff) => format!("chosen cutoff <b>{cutoff}</b>"),
        None => "no cutoff reaches it".to_string(),
    };
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>rein eval --sweep coverage: {dataset}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em}}td,th{{padding:2px 8px;text-align:left}}
tr.chosen{{background:#e4f4e4}}</style></head>
<body><h1>Coverage sweep of route {route}: {dataset}</h1>
<p id="choice">{n} case(s); at least {min} accuracy on the answered share: {chosen}.</p>
<h2>Coverage (blue) and accuracy on the answered share (orange) per cutoff</h2>
<svg id="sweep-chart" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">{chart}</svg>
<h2>Cutoffs</h2>
<table id="sweep"><tr><th>cutoff</th><th>answered</th><th>coverage</th><th>accuracy</th><th>answerable declined</th><th>unanswerable declined</th></tr>
{rows}</table>
<h2>Cases</h2>
<table id="cases"><tr><th>case</th><th>score</th><th>answerable</th><th>answer</th><th>detail</th></tr>
{cases}</table>
</body></html>
"#,
        dataset = escape(&dataset.display().to_string()),
        route = escape(report.route),
        n = report.cases.len(),
        min = percent(report.min_accuracy),
    )
}
