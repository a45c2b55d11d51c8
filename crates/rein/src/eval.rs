//! `rein eval DATASET.jsonl --trials k`: every case of a dataset sent through a running gateway
//! `k` times, each trial from a clean state (its own run id, so no run's evidence, counts or
//! coverage verdict carries over), through the case's route or one named tier of it (`--tier
//! fallback`, which needs the admin key: a fallback is evaluated before it is needed). Each
//! answer is checked by the case's checkers (all must pass): `exact`, `contains`,
//! `not_contains`, `json` (JSON pointers to expected values), a built-in business `rule` against
//! the case's evidence, and a `judge` rubric answered PASS or FAIL by a judge route. The report
//! (`rein_core::eval`) gives pass@1, pass@k and pass^k, the flaky cases, per-tier scores and the
//! repair and re-ask rates beside accuracy, as a table, JSON (`--json`) and an HTML page with
//! its charts (`--html`).
//!
//! Trials run `--concurrency` at a time with a progress bar. Each finished trial is appended
//! to a state file (`--state`, by default beside the dataset), so an eval stopped with Ctrl-C
//! resumes where it stopped; a case whose line, route or tier changed is run afresh.
//!
//! A dataset line:
//!
//! ```json
//! {"id": "cutoff", "question": "Can I change my order?",
//!  "evidence": [{"id": "140", "source": "search", "text": "Changes close 48 hours before delivery."}],
//!  "expect": {"contains": ["48 hours"]}}
//! ```
//!
//! (`messages` instead of `question` for a whole conversation; `route` to override `--route`;
//! `labels` for the call's labels; `"answerable": false` for a question nothing in the evidence
//! answers, which is right only when the gateway declines it: handed off or clarified, and
//! needs no `expect`.)
//!
//! `--sweep coverage` chooses the route's coverage cutoff instead ([`sweep`]): each case once,
//! its coverage score from the route's check and its answer with the check skipped, then
//! coverage and accuracy on the answered share at each `--cutoffs` value, and the cutoff
//! `--min-accuracy` asks for written as a config snippet (`--snippet`).

mod sweep;

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use rein_core::eval::{EvidenceSpec, Expect, Report, Trial};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// The dataset: one JSON case per line.
    dataset: PathBuf,
    /// The route cases without their own `route` are sent to.
    #[arg(long)]
    route: Option<String>,
    /// Trials per case.
    #[arg(long, default_value_t = 5, conflicts_with = "sweep")]
    trials: u32,
    /// The k of pass@k and pass^k (at most --trials; default: --trials).
    #[arg(long, conflicts_with = "sweep")]
    k: Option<u32>,
    /// Evaluate only this tier of the route (needs the admin key).
    #[arg(long)]
    tier: Option<String>,
    /// The gateway's address.
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    url: String,
    /// Environment variable holding a client key (none: the gateway takes calls without one).
    #[arg(long, default_value = "REIN_CLIENT_KEY")]
    key_env: String,
    /// Environment variable holding the admin key (for --tier).
    #[arg(long, default_value = "REIN_ADMIN_KEY")]
    admin_key_env: String,
    /// The route that answers `judge` rubrics.
    #[arg(long)]
    judge_route: Option<String>,
    /// Trials in flight at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Each call's deadline, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
    /// Where finished trials are kept for resuming (default: DATASET.state.jsonl).
    #[arg(long, conflicts_with = "sweep")]
    state: Option<PathBuf>,
    /// Forget the kept trials and run every trial again.
    #[arg(long, conflicts_with = "sweep")]
    fresh: bool,
    /// Also write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also write the report as an HTML page here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Sweep a setting's threshold over the dataset instead of scoring trials: `coverage`, the
    /// route's coverage check (needs the admin key).
    #[arg(long, value_enum)]
    sweep: Option<Sweep>,
    /// The cutoffs the sweep tries.
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95],
        requires = "sweep"
    )]
    cutoffs: Vec<f64>,
    /// The sweep chooses the lowest cutoff whose accuracy on the answered share reaches this.
    #[arg(long, default_value_t = 0.99, requires = "sweep")]
    min_accuracy: f64,
    /// Write the chosen cutoff here, as the route's `[routes.<name>.coverage]` table.
    #[arg(long, requires = "sweep")]
    snippet: Option<PathBuf>,
}

/// What `--sweep` sweeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Sweep {
    /// The coverage check's cutoff.
    Coverage,
}

/// One case as the dataset has it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    id: String,
    #[serde(default)]
    route: Option<String>,
    #[serde(default)]
    question: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Value>>,
    #[serde(default)]
    evidence: Vec<EvidenceSpec>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Required unless the case is unanswerable.
    #[serde(default)]
    expect: Option<Expect>,
    /// `false`: nothing in the evidence answers the question (read as a value, so a mistake
    /// names the field).
    #[serde(default)]
    answerable: Option<Value>,
}

/// A case ready to run: its request body (to its route), and the fingerprint its kept trials are
/// matched by.
#[derive(Debug)]
struct Prepared {
    case: Case,
    route: String,
    /// Something in the evidence answers the question.
    answerable: bool,
    body: Value,
    fingerprint: String,
}

/// Read the dataset; every mistake names its line and field.
fn load(path: &Path, route: Option<&str>, tier: Option<&str>) -> anyhow::Result<Vec<Prepared>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut cases = Vec::new();
    let mut seen = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = serde_json::from_str(line)
            .with_context(|| format!("{}:{number}: not a case", path.display()))?;
        if let Some(first) = seen.insert(case.id.clone(), number) {
            bail!("{}:{number}: case id `{}` is also on line {first}", path.display(), case.id);
        }
        let answerable = match &case.answerable {
            None | Some(Value::Bool(true)) => true,
            Some(Value::Bool(false)) => false,
            Some(other) => bail!(
                "{}:{number}: case `{}`: `answerable` must be true or false, not {other}",
                path.display(),
                case.id
            ),
        };
        match (&case.expect, answerable) {
            (None, true) => bail!(
                "{}:{number}: not a case: missing field `expect` (only an unanswerable case, `\"answerable\": false`, goes without)",
                path.display()
            ),
            (Some(expect), true) if expect.is_empty() => {
                bail!("{}:{number}: case `{}` has nothing in `expect`", path.display(), case.id)
            }
            _ => {}
        }
        let Some(route) = case.route.clone().or_else(|| route.map(str::to_string)) else {
            bail!("{}:{number}: case `{}` names no route (give --route)", path.display(), case.id);
        };
        let messages = match (&case.question, &case.messages) {
            (Some(question), None) => vec![json!({"role": "user", "content": question})],
            (None, Some(messages)) if !messages.is_empty() => messages.clone(),
            _ => bail!(
                "{}:{number}: case `{}` needs one of `question` or `messages`",
                path.display(),
                case.id
            ),
        };
        let evidence: Vec<Value> = case.evidence.iter().map(EvidenceSpec::to_json).collect();
        let mut rein = serde_json::Map::new();
        if !evidence.is_empty() {
            rein.insert("evidence".into(), Value::Array(evidence));
        }
        if !case.labels.is_empty() {
            rein.insert("labels".into(), json!(case.labels));
        }
        let mut body = json!({"model": route, "messages": messages});
        if !rein.is_empty() {
            body["rein"] = Value::Object(rein);
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (line.trim(), &route, tier).hash(&mut hasher);
        let fingerprint = format!("{:016x}", hasher.finish());
        cases.push(Prepared { case, route, answerable, body, fingerprint });
    }
    if cases.is_empty() {
        bail!("{}: no cases", path.display());
    }
    Ok(cases)
}

/// A kept trial: the case's fingerprint when it ran, and how it went.
#[derive(Debug, serde::Serialize, Deserialize)]
struct Kept {
    fingerprint: String,
    trial: Trial,
}

/// The trials kept in `state` that still stand for `cases` (a truncated last line, from a
/// process stopped mid-write, is skipped).
fn kept(state: &Path, cases: &[Prepared], trials: u32) -> anyhow::Result<Vec<Trial>> {
    let file = match std::fs::File::open(state) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(error).with_context(|| format!("cannot read {}", state.display()));
        }
    };
    let current: HashMap<&str, &str> =
        cases.iter().map(|c| (c.case.id.as_str(), c.fingerprint.as_str())).collect();
    let mut found: BTreeMap<(String, u32), Trial> = BTreeMap::new();
    for line in std::io::BufReader::new(file).lines() {
        let Ok(kept) = serde_json::from_str::<Kept>(&line?) else { continue };
        if current.get(kept.trial.case.as_str()) == Some(&kept.fingerprint.as_str())
            && kept.trial.trial < trials
        {
            found.insert((kept.trial.case.clone(), kept.trial.trial), kept.trial);
        }
    }
    Ok(found.into_values().collect())
}

/// What every trial needs.
struct Runner {
    client: reqwest::Client,
    url: String,
    key: Option<String>,
    admin_key: Option<String>,
    tier: Option<String>,
    judge_route: Option<String>,
    timeout: Duration,
    /// The case's calls skip the route's coverage check (a coverage sweep; needs the admin key).
    skip_coverage: bool,
}

impl Runner {
    /// One call to the gateway: the status, the headers and the JSON body.
    async fn chat(
        &self,
        body: &Value,
        run_id: &str,
        pin: bool,
    ) -> anyhow::Result<(reqwest::StatusCode, reqwest::header::HeaderMap, Value)> {
        let mut request = self
            .client
            .post(format!("{}/v1/chat/completions", self.url))
            .header("x-rein-run-id", run_id)
            .header("x-rein-deadline-ms", self.timeout.as_millis().to_string())
            .timeout(self.timeout + Duration::from_secs(5))
            .json(body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        if pin && let Some(admin) = &self.admin_key {
            if let Some(tier) = &self.tier {
                request = request.header("x-rein-pin-tier", tier);
            }
            if self.skip_coverage {
                request = request.header("x-rein-skip-coverage", "true");
            }
            if self.tier.is_some() || self.skip_coverage {
                request = request.header("x-rein-admin-key", admin);
            }
        }
        let response =
            request.send().await.with_context(|| format!("cannot reach {}", self.url))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.json().await.unwrap_or(Value::Null);
        Ok((status, headers, body))
    }

    /// Trial `trial` of `case`, from a clean state. `Err` when the gateway refuses the call as
    /// the caller's mistake (a key, a route, a tier, the case's body): no later trial can fare
    /// better, so the eval stops.
    async fn run(&self, case: &Prepared, trial: u32) -> anyhow::Result<Trial> {
        let run_id = format!("eval-{}-{}", rein_core::trace::new_span_id(), trial);
        let mut result = Trial::new(case.case.id.clone(), trial);
        let (status, headers, body) = match self.chat(&case.body, &run_id, true).await {
            Ok(answer) => answer,
            Err(error) => {
                result.error = true;
                result.detail = Some(format!("{error:#}"));
                return Ok(result);
            }
        };
        let header =
            |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let count = |name: &str| header(name).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
        result.tier = header("x-rein-tier");
        result.outcome = header("x-rein-outcome");
        result.repaired = count("x-rein-repairs") > 0;
        result.reasked = count("x-rein-reasks") > 0;
        if !status.is_success() {
            let message = body.pointer("/error/message").and_then(Value::as_str).unwrap_or("");
            if matches!(status.as_u16(), 400 | 401 | 403 | 404 | 413 | 415 | 422) {
                bail!(
                    "case `{}`: the gateway refused the call ({status}): {message}",
                    case.case.id
                );
            }
            result.error = true;
            result.detail = Some(format!("the gateway answered {status}: {message}"));
            return Ok(result);
        }
        if !case.answerable {
            // Right only when declined: whatever an answer says, nothing backs it.
            let outcome = result.outcome.as_deref().unwrap_or("");
            match outcome {
                "handed_off" | "clarified" => result.passed = true,
                _ => {
                    result.detail = Some(format!(
                        "answered ({outcome}) a question nothing in the evidence answers"
                    ));
                }
            }
            return Ok(result);
        }
        let text = body.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap_or("");
        match self.check(&case.case, text).await {
            Ok(()) => result.passed = true,
            Err(why) => result.detail = Some(why),
        }
        Ok(result)
    }

    /// Every checker of the case on `text`: the first that fails says why.
    async fn check(&self, case: &Case, text: &str) -> Result<(), String> {
        let Some(expect) = &case.expect else { return Ok(()) };
        expect.check(text, &case.evidence).await?;
        if let Some(rubric) = &expect.judge {
            return self.judge(rubric, case, text).await;
        }
        Ok(())
    }

    /// The judge route's verdict on `text` by `rubric`: its first word, PASS or FAIL.
    async fn judge(&self, rubric: &str, case: &Case, text: &str) -> Result<(), String> {
        let Some(route) = &self.judge_route else {
            return Err("a `judge` rubric needs --judge-route".to_string());
        };
        let evidence: Vec<(String, String)> =
            case.evidence.iter().map(|item| (item.id_text(), item.text.clone())).collect();
        let prompt = rein_core::quality::rubric_prompt(rubric, None, &evidence, text);
        let body = json!({"model": route, "messages": [{"role": "user", "content": prompt}]});
        let run_id = format!("eval-judge-{}", rein_core::trace::new_span_id());
        let (status, _, answer) =
            self.chat(&body, &run_id, false).await.map_err(|error| format!("judge: {error:#}"))?;
        let reply = answer.pointer("/choices/0/message/content").and_then(Value::as_str);
        match (status.is_success(), reply.and_then(rein_core::quality::read_verdict)) {
            (true, Some(true)) => Ok(()),
            (true, Some(false)) => Err(format!("the judge failed it by its rubric `{rubric}`")),
            _ => Err(format!("the judge gave no verdict ({status})")),
        }
    }
}

pub(crate) async fn run(args: EvalArgs) -> anyhow::Result<std::process::ExitCode> {
    if let Some(Sweep::Coverage) = args.sweep {
        return sweep::coverage(args).await;
    }
    if args.trials == 0 {
        bail!("--trials must be at least 1");
    }
    let k = args.k.unwrap_or(args.trials);
    if k == 0 || k > args.trials {
        bail!(
            "--k {k} needs 1 <= k <= --trials ({}): pass^k needs k trials of each case",
            args.trials
        );
    }
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let cases = load(&args.dataset, args.route.as_deref(), args.tier.as_deref())?;
    let admin_key = match &args.tier {
        Some(_) => Some(std::env::var(&args.admin_key_env).with_context(|| {
            format!("--tier needs the gateway's admin key in {}", args.admin_key_env)
        })?),
        None => None,
    };
    let state = args.state.clone().unwrap_or_else(|| {
        let mut name = args.dataset.clone().into_os_string();
        name.push(".state.jsonl");
        PathBuf::from(name)
    });
    if args.fresh && state.exists() {
        std::fs::remove_file(&state)
            .with_context(|| format!("cannot remove {}", state.display()))?;
    }
    let mut trials = kept(&state, &cases, args.trials)?;
    let done: std::collections::HashSet<(String, u32)> =
        trials.iter().map(|t| (t.case.clone(), t.trial)).collect();
    let todo: Vec<(usize, u32)> = cases
        .iter()
        .enumerate()
        .flat_map(|(index, _)| (0..args.trials).map(move |trial| (index, trial)))
        .filter(|(index, trial)| !done.contains(&(cases[*index].case.id.clone(), *trial)))
        .collect();
    let total = cases.len() as u64 * u64::from(args.trials);
    if !done.is_empty() {
        eprintln!("resuming: {} of {total} trials kept in {}", done.len(), state.display());
    }

    let runner = Arc::new(Runner {
        client: reqwest::Client::new(),
        url: args.url.trim_end_matches('/').to_string(),
        key: std::env::var(&args.key_env).ok(),
        admin_key,
        tier: args.tier.clone(),
        judge_route: args.judge_route.clone(),
        timeout: Duration::from_millis(args.timeout_ms),
        skip_coverage: false,
    });
    let cases = Arc::new(cases);
    let mut writer = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&state)
        .with_context(|| format!("cannot write {}", state.display()))?;
    let progress = indicatif::ProgressBar::new(total);
    progress.set_position(done.len() as u64);
    progress.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} trials {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let slots = Arc::new(tokio::sync::Semaphore::new(args.concurrency));
    let mut running = tokio::task::JoinSet::new();
    let mut queue = todo.into_iter();
    let mut interrupted = false;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        // Keep `concurrency` trials in flight until the queue is empty.
        while running.len() < args.concurrency {
            let Some((index, trial)) = queue.next() else { break };
            let (runner, cases, slots) = (runner.clone(), cases.clone(), slots.clone());
            running.spawn(async move {
                let _slot = slots.acquire_owned().await;
                let case = &cases[index];
                runner.run(case, trial).await.map(|trial| (case.fingerprint.clone(), trial))
            });
        }
        let finished = tokio::select! {
            finished = running.join_next() => finished,
            _ = &mut ctrl_c, if !interrupted => {
                interrupted = true;
                progress.set_message("stopping: finishing the trials in flight");
                // Nothing new starts; the ones in flight are kept when they end.
                queue = Vec::new().into_iter();
                continue;
            }
        };
        let Some(finished) = finished else { break };
        let (fingerprint, trial) = match finished.context("a trial's task failed")? {
            Ok(done) => done,
            Err(refused) => {
                progress.finish_and_clear();
                running.abort_all();
                return Err(refused);
            }
        };
        let line = serde_json::to_string(&Kept { fingerprint, trial: trial.clone() })?;
        writeln!(writer, "{line}")?;
        writer.flush()?;
        progress.inc(1);
        trials.push(trial);
    }
    progress.finish_and_clear();
    if interrupted {
        eprintln!(
            "interrupted: {} of {total} trials done, kept in {}; run the same command again to resume",
            trials.len(),
            state.display()
        );
        return Ok(std::process::ExitCode::from(130));
    }

    let report = Report::of(&trials, k).map_err(|error| anyhow::anyhow!("{error}"))?;
    let mut stdout = std::io::stdout().lock();
    write_table(&mut stdout, &report, args.tier.as_deref())?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        std::fs::write(path, html(&report, &args.dataset, args.tier.as_deref()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn percent(value: f64) -> String {
    format!("{:.1}%", value * 100.0)
}

/// The report as a terminal table: the totals, each case, the flaky list, the tiers.
fn write_table(out: &mut dyn Write, report: &Report, tier: Option<&str>) -> std::io::Result<()> {
    let k = report.k;
    let scope = tier.map_or(String::new(), |tier| format!(" on tier {tier}"));
    writeln!(
        out,
        "{} case(s) x {} trial(s){scope}: pass@1 {}  pass@{k} {}  pass^{k} {}",
        report.cases.len(),
        report.trials,
        percent(report.pass_at_1),
        percent(report.pass_at_k),
        percent(report.pass_hat_k),
    )?;
    writeln!(
        out,
        "clean passes {}  repaired {}  re-asked {}  errors {}",
        percent(report.clean_pass_rate),
        percent(report.repair_rate),
        percent(report.reask_rate),
        percent(report.error_rate),
    )?;
    writeln!(out)?;
    let pass_k = format!("PASS^{k}");
    writeln!(
        out,
        "{:<24}  {:>6}  {:>7}  {:<12}  FIRST FAILURE",
        "CASE", "PASSED", pass_k, "TRIALS"
    )?;
    for case in &report.cases {
        let marks: String = case.results.iter().map(|&ok| if ok { '✓' } else { '✗' }).collect();
        writeln!(
            out,
            "{:<24}  {:>3}/{:<2}  {:>7}  {:<12}  {}",
            case.case,
            case.passes,
            case.trials,
            percent(case.pass_hat_k),
            marks,
            case.failure.as_deref().unwrap_or("")
        )?;
    }
    writeln!(out)?;
    if report.flaky.is_empty() {
        writeln!(out, "flaky: none")?;
    } else {
        writeln!(out, "flaky ({}): {}", report.flaky.len(), report.flaky.join(", "))?;
    }
    for (tier, score) in &report.tiers {
        writeln!(
            out,
            "tier {tier}: {}/{} passed ({})",
            score.passes,
            score.trials,
            percent(score.pass_rate)
        )?;
    }
    Ok(())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The report as one self-contained HTML page: the totals, a bar chart of pass@1 beside pass^k
/// per case (inline SVG, no script), the per-trial grid, the flaky list and the tiers.
fn html(report: &Report, dataset: &Path, tier: Option<&str>) -> String {
    let k = report.k;
    let width = 640.0;
    let row = 22.0;
    let height = row * report.cases.len() as f64 + 30.0;
    let mut bars = String::new();
    for (index, case) in report.cases.iter().enumerate() {
        let y = 20.0 + row * index as f64;
        bars.push_str(&format!(
            r##"<text x="0" y="{ty}" font-size="12">{name}</text><rect x="200" y="{y}" width="{w1:.1}" height="8" fill="#4a7bd0"><title>pass@1 {p1}</title></rect><rect x="200" y="{y2}" width="{w2:.1}" height="8" fill="#d0884a"><title>pass^{k} {p2}</title></rect>"##,
            ty = y + 10.0,
            name = escape(&case.case),
            y = y,
            y2 = y + 9.0,
            w1 = (width - 220.0) * case.pass_at_1,
            w2 = (width - 220.0) * case.pass_hat_k,
            p1 = percent(case.pass_at_1),
            p2 = percent(case.pass_hat_k),
        ));
    }
    let mut rows = String::new();
    for case in &report.cases {
        let cells: String = case
            .results
            .iter()
            .map(|&ok| if ok { r#"<td class="pass">✓</td>"# } else { r#"<td class="fail">✗</td>"# })
            .collect();
        rows.push_str(&format!(
            "<tr{flaky}><td>{name}</td><td>{passes}/{trials}</td><td>{p1}</td><td>{pk}</td><td>{phk}</td>{cells}<td>{failure}</td></tr>\n",
            flaky = if case.flaky { r#" class="flaky""# } else { "" },
            name = escape(&case.case),
            passes = case.passes,
            trials = case.trials,
            p1 = percent(case.pass_at_1),
            pk = percent(case.pass_at_k),
            phk = percent(case.pass_hat_k),
            failure = escape(case.failure.as_deref().unwrap_or("")),
        ));
    }
    let tiers: String = report
        .tiers
        .iter()
        .map(|(tier, score)| {
            format!(
                "<li>{}: {}/{} passed ({})</li>",
                escape(tier),
                score.passes,
                score.trials,
                percent(score.pass_rate)
            )
        })
        .collect();
    let flaky =
        if report.flaky.is_empty() { "none".to_string() } else { escape(&report.flaky.join(", ")) };
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>rein eval: {dataset}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em}}td,th{{padding:2px 8px;text-align:left}}
td.pass{{color:#2a7a2a}}td.fail{{color:#b22}}tr.flaky{{background:#fff4d6}}</style></head>
<body><h1>rein eval: {dataset}{scope}</h1>
<p id="totals">{cases} case(s) × {trials} trial(s): pass@1 <b>{p1}</b>, pass@{k} <b>{pk}</b>, pass^{k} <b>{phk}</b>;
clean passes {clean}, repaired {repaired}, re-asked {reasked}, errors {errors}.</p>
<h2>pass@1 (blue) and pass^{k} (orange) per case</h2>
<svg id="chart" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">{bars}</svg>
<h2>Trials</h2>
<table id="cases"><tr><th>case</th><th>passed</th><th>pass@1</th><th>pass@{k}</th><th>pass^{k}</th><th colspan="{trials}">trials</th><th>first failure</th></tr>
{rows}</table>
<h2>Flaky</h2><p id="flaky">{flaky}</p>
<h2>Tiers</h2><ul id="tiers">{tiers}</ul>
</body></html>
"#,
        dataset = escape(&dataset.display().to_string()),
        scope = tier.map_or(String::new(), |tier| format!(" (tier {})", escape(tier))),
        cases = report.cases.len(),
        trials = report.trials,
        p1 = percent(report.pass_at_1),
        pk = percent(report.pass_at_k),
        phk = percent(report.pass_hat_k),
        clean = percent(report.clean_pass_rate),
        repaired = percent(report.repair_rate),
        reasked = percent(report.reask_rate),
        errors = percent(report.error_rate),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn dataset(lines: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cases.jsonl");
        std::fs::write(&path, lines.join("\n")).unwrap();
        (dir, path)
    }

    #[test]
    fn a_dataset_mistake_names_its_line() {
        let good = r#"{"id": "a", "question": "q?", "expect": {"contains": ["x"]}}"#;
        for (line, says) in [
            (r#"{"id": "b", "question": "q?"}"#, "2: not a case"),
            (r#"{"id": "b", "question": "q?", "expect": {}}"#, "nothing in `expect`"),
            (r#"{"id": "a", "question": "q?", "expect": {"exact": "x"}}"#, "also on line 1"),
            (r#"{"id": "b", "expect": {"exact": "x"}}"#, "`question` or `messages`"),
            (r#"{"id": "b", "question": "q", "expect": {"contians": ["x"]}}"#, "2: not a case"),
        ] {
            let (_dir, path) = dataset(&[good, line]);
            let error = format!("{:#}", load(&path, Some("support"), None).unwrap_err());
            assert!(error.contains(says), "{line}: {error}");
        }
        let (_dir, path) = dataset(&[good]);
        let error = load(&path, None, None).unwrap_err().to_string();
        assert!(error.contains("--route"), "{error}");
    }

    #[test]
    fn an_unanswerable_case_needs_no_expect_and_answerable_must_be_a_boolean() {
        let (_dir, path) = dataset(&[
            r#"{"id": "icu", "question": "ICU?", "answerable": false}"#,
            r#"{"id": "hours", "question": "Hours?", "answerable": true, "expect": {"contains": ["9"]}}"#,
        ]);
        let cases = load(&path, Some("support"), None).unwrap();
        let answerable: Vec<bool> = cases.iter().map(|case| case.answerable).collect();
        assert_eq!(answerable, [false, true]);
        assert_eq!(cases[0].route, "support");
        for (line, says) in [
            (
                r#"{"id": "b", "question": "q", "answerable": "no"}"#,
                "1: case `b`: `answerable` must be true or false, not \"no\"",
            ),
            (
                r#"{"id": "b", "question": "q", "answerable": true}"#,
                "1: not a case: missing field `expect`",
            ),
        ] {
            let (_dir, path) = dataset(&[line]);
            let error = format!("{:#}", load(&path, Some("support"), None).unwrap_err());
            assert!(error.contains(says), "{line}: {error}");
        }
    }

    #[test]
    fn a_changed_case_or_tier_is_run_afresh() {
        let (dir, path) =
            dataset(&[r#"{"id": "a", "question": "q?", "expect": {"contains": ["x"]}}"#]);
        let cases = load(&path, Some("support"), None).unwrap();
        let state = dir.path().join("state.jsonl");
        let trial = Trial { passed: true, ..Trial::new("a", 0) };
        let line = serde_json::to_string(&Kept {
            fingerprint: cases[0].fingerprint.clone(),
            trial: trial.clone(),
        })
        .unwrap();
        std::fs::write(&state, format!("{line}\n{{\"fingerprint\": \"trunc")).unwrap();
        assert_eq!(kept(&state, &cases, 5).unwrap(), [trial], "the cut-off line is skipped");
        assert!(kept(&state, &cases, 0).unwrap().is_empty(), "beyond --trials");
        let on_tier = load(&path, Some("support"), Some("fallback")).unwrap();
        assert!(kept(&state, &on_tier, 5).unwrap().is_empty(), "another tier is another eval");
    }

    #[tokio::test]
    async fn a_business_rule_checks_the_answer_against_the_cases_evidence() {
        let line = r#"{"id": "cutoff", "question": "When do changes close?",
            "evidence": [{"id": "140", "source": "search", "text": "Changes close 48 hours before delivery."}],
            "expect": {"rule": {"rule": "numbers_in_cited_text"}}}"#;
        let (_dir, path) = dataset(&[&line.replace('\n', " ")]);
        let cases = load(&path, Some("support"), None).unwrap();
        rein_providers::install_crypto_provider();
        let runner = Runner {
            client: reqwest::Client::new(),
            url: "http://127.0.0.1:9".into(),
            key: None,
            admin_key: None,
            tier: None,
            judge_route: None,
            timeout: Duration::from_secs(1),
            skip_coverage: false,
        };
        let case = &cases[0].case;
        assert_eq!(runner.check(case, "Changes close 48 hours before delivery.").await, Ok(()));
        let wrong = runner.check(case, "Changes close 24 hours before delivery.").await;
        assert!(wrong.unwrap_err().starts_with("rule `numbers_in_cited_text`"));
        let judged = r#"{"id": "j", "question": "q", "expect": {"judge": "cites the article"}}"#;
        let (_dir, path) = dataset(&[judged]);
        let cases = load(&path, Some("support"), None).unwrap();
        let no_judge = runner.check(&cases[0].case, "anything").await.unwrap_err();
        assert!(no_judge.contains("--judge-route"), "{no_judge}");
    }
}
