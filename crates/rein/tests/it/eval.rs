//! `rein eval` against `rein serve` on simulated providers whose scripted answers make one case
//! flaky (its answers alternate), one steady and one always wrong: the flaky list names exactly
//! the flaky case, pass^k is the hand-computed value, a second run resumes from the state file
//! without calling again, an eval stopped by Ctrl-C resumes where it stopped, and `--tier`
//! evaluates one tier only with the admin key (403 without it: a client key never picks a tier).
//! `--sweep coverage` on a 10-case synthetic dataset with scripted coverage scores and answers
//! reproduces a table computed by hand, and its config snippet is read back by the loader.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::upstream_caps::Gateway;

const BIN: &str = env!("CARGO_BIN_EXE_rein");

const SCENARIO: &str = r#"
[[reply]]
contains = "change my order"
texts = ["Changes close 48 hours before delivery.", "You can change it any time."]

[[reply]]
contains = "deliver to hospitals"
text = "We deliver to hospitals every day before 6 p.m."

[[reply]]
contains = "refund"
text = "Refunds take 5 days."

[[reply]]
contains = "cutoff as json"
text = '{"cutoff_hours": 48, "source": "140"}'
"#;

const DATASET: &str = r#"{"id": "change-order", "question": "Can I change my order?", "expect": {"contains": ["48 hours"]}}
{"id": "hospitals", "question": "Do you deliver to hospitals?", "expect": {"contains": ["6 p.m."], "not_contains": ["intensive care"]}}
{"id": "refund", "question": "How long does a refund take?", "expect": {"contains": ["3 days"]}}
{"id": "cutoff-json", "question": "Give the cutoff as JSON", "expect": {"json": {"/cutoff_hours": 48}}}
"#;

fn config(dir: &Path, primary_model: &str) -> String {
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_key_env = "REIN_EVAL_ADMIN"

[store]
sqlite_path = "{store}"

[providers.sim]
kind = "sim"
scenario = "{scenario}"

[routes.support]
[[routes.support.tiers]]
name = "primary"
provider = "sim"
model = "{primary_model}"

[[routes.support.tiers]]
name = "fallback"
provider = "sim"
model = "sim-fallback"
"#,
        store = dir.join("rein.sqlite").display(),
        scenario = scenario.display(),
    )
}

/// The golden-prompt probe on the same scripted answers: one question passes, one fails.
const PROBE: &str = r#"
[probe]
every_ms = 3600000
route = "support"

[[probe.questions]]
id = "hospitals"
question = "Do you deliver to hospitals?"
expect = { contains = ["6 p.m."] }

[[probe.questions]]
id = "refund"
question = "How long does a refund take?"
expect = { contains = ["3 days"] }
"#;

/// A gateway on the scripted providers (its primary on `primary_model`) and the dataset beside
/// it.
fn start(primary_model: &str) -> (tempfile::TempDir, Gateway, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(
        dir.path(),
        &(config(dir.path(), primary_model) + PROBE),
        &[("REIN_EVAL_ADMIN", "eval-admin-key")],
        "warn",
    );
    let dataset = dir.path().join("cases.jsonl");
    std::fs::write(&dataset, DATASET).unwrap();
    (dir, gateway, dataset)
}

fn eval(args: &[&str], admin: Option<&str>) -> (Option<i32>, String, String) {
    let mut command = Command::new(BIN);
    command.arg("eval").args(args).env_remove("REIN_CLIENT_KEY").env_remove("REIN_ADMIN_KEY");
    if let Some(admin) = admin {
        command.env("REIN_ADMIN_KEY", admin);
    }
    let output = command.output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-9)
}

#[test]
fn the_flaky_case_is_listed_pass_hat_k_is_hand_computed_and_a_rerun_resumes() {
    let (dir, gateway, dataset) = start("sim-primary");
    let (json, html) = (dir.path().join("report.json"), dir.path().join("report.html"));
    let args = [
        dataset.to_str().unwrap(),
        "--route",
        "support",
        "--trials",
        "4",
        "--k",
        "2",
        "--url",
        gateway.url.as_str(),
        "--json",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ];
    let (code, stdout, stderr) = eval(&args, None);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("flaky (1): change-order"), "{stdout}");
    assert!(stdout.contains("4 case(s) x 4 trial(s)"), "{stdout}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["flaky"], serde_json::json!(["change-order"]));
    let case = |id: &str| {
        report["cases"].as_array().unwrap().iter().find(|c| c["case"] == id).unwrap().clone()
    };
    // Two passes in four trials: pass^2 = C(2,2)/C(4,2) = 1/6, pass@2 = 1 - 1/6.
    let flaky = case("change-order");
    assert_eq!(flaky["passes"], 2);
    assert!(close(&flaky["pass_hat_k"], 1.0 / 6.0), "{flaky}");
    assert!(close(&flaky["pass_at_k"], 5.0 / 6.0), "{flaky}");
    assert_eq!(case("hospitals")["passes"], 4);
    assert_eq!(case("cutoff-json")["passes"], 4, "the JSON pointer checker");
    let refund = case("refund");
    assert_eq!((refund["passes"].as_u64(), refund["flaky"].as_bool()), (Some(0), Some(false)));
    assert_eq!(refund["failure"], "missing `3 days`");
    // pass@1 over the cases: (0.5 + 1 + 0 + 1) / 4; pass^2: (1/6 + 1 + 0 + 1) / 4.
    assert!(close(&report["pass_at_1"], 2.5 / 4.0), "{report}");
    assert!(close(&report["pass_hat_k"], (1.0 / 6.0 + 2.0) / 4.0), "{report}");
    assert_eq!(report["tiers"]["primary"]["trials"], 16);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#"<p id="flaky">change-order</p>"#), "{page}");
    assert!(page.contains("<svg id=\"chart\""), "the chart is in the page");

    // Run again: every trial is kept, nothing is called again, the report is the same.
    let calls = calls_made(&gateway);
    let (code, stdout, stderr) = eval(&args, None);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("resuming: 16 of 16 trials kept"), "{stderr}");
    assert!(stdout.contains("flaky (1): change-order"), "{stdout}");
    assert_eq!(calls_made(&gateway), calls, "a resumed eval calls nothing it has");

    // A k beyond the trials is refused before anything runs.
    let (code, _, stderr) =
        eval(&[&args[..5], &["--k", "5", "--url", gateway.url.as_str()]].concat(), None);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--k 5 needs 1 <= k <= --trials (4)"), "{stderr}");
}

/// How many model calls the gateway has counted, from its metrics.
fn calls_made(gateway: &Gateway) -> u64 {
    let text = reqwest::blocking_get(&format!("{}/metrics", gateway.url));
    text.lines()
        .filter(|line| line.starts_with("rein_sli_calls_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

mod reqwest {
    /// A GET on a thread of its own (the tests here are synchronous).
    pub(super) fn blocking_get(url: &str) -> String {
        let url = url.to_string();
        std::thread::spawn(move || {
            rein_providers::install_crypto_provider();
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async { ::reqwest::get(&url).await.unwrap().text().await.unwrap() })
        })
        .join()
        .unwrap()
    }
}

#[test]
fn one_tier_is_evaluated_with_the_admin_key_and_never_without() {
    let (dir, gateway, dataset) = start("sim-primary");
    let json = dir.path().join("report.json");
    let args = [
        dataset.to_str().unwrap(),
        "--route",
        "support",
        "--trials",
        "2",
        "--tier",
        "fallback",
        "--url",
        gateway.url.as_str(),
        "--json",
        json.to_str().unwrap(),
    ];
    let (code, stdout, stderr) = eval(&args, Some("eval-admin-key"));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("on tier fallback"), "{stdout}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let tiers: Vec<&String> = report["tiers"].as_object().unwrap().keys().collect();
    assert_eq!(tiers, ["fallback"], "only the pinned tier answered: {report}");
    assert_eq!(calls_made(&gateway), 0, "an eval's pinned calls are not SLI records");

    // A wrong admin key: the gateway's 403 stops the eval at once, naming the header.
    let (code, _, stderr) = eval(&[&args[..], &["--fresh"]].concat(), Some("wrong"));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("403") && stderr.contains("x-rein-admin-key"), "{stderr}");
    // No admin key at all: refused before anything is sent.
    let (code, _, stderr) = eval(&args, None);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--tier needs the gateway's admin key"), "{stderr}");
    // A tier the route does not have: the gateway's 400 names it.
    let mut unknown = args.to_vec();
    unknown[6] = "reserve";
    let (code, _, stderr) = eval(&[&unknown[..], &["--fresh"]].concat(), Some("eval-admin-key"));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no tier `reserve`"), "{stderr}");
}

#[tokio::test]
async fn an_eval_stopped_by_ctrl_c_resumes_where_it_stopped() {
    // Slow answers, one at a time, so the interrupt lands mid-eval.
    let (dir, gateway, dataset) = start("sim:slow_first_token:ms=300");
    let state = dir.path().join("state.jsonl");
    let args = [
        dataset.to_str().unwrap(),
        "--route",
        "support",
        "--trials",
        "3",
        "--concurrency",
        "1",
        "--url",
        gateway.url.as_str(),
        "--state",
        state.to_str().unwrap(),
    ];
    let child = Command::new(BIN)
        .arg("eval")
        .args(args)
        .env_remove("REIN_CLIENT_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let kept = || std::fs::read_to_string(&state).map_or(0, |text| text.lines().count());
    for _ in 0..1500 {
        if kept() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(kept() >= 2, "two trials finished within 30 s");
    let interrupt = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(interrupt.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("run the same command again to resume"), "{stderr}");
    let done = kept();
    assert!((2..12).contains(&done), "stopped mid-eval with {done} trials kept");

    let (code, stdout, stderr) = eval(&args, None);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stderr.contains(&format!("resuming: {done} of 12 trials kept")), "{stderr}");
    assert_eq!(kept(), 12, "each trial ran once in all");
    assert!(stdout.contains("4 case(s) x 3 trial(s)"), "{stdout}");
}

#[test]
fn rein_probe_runs_the_questions_and_shows_the_last_run() {
    let (_dir, gateway, _) = start("sim-primary");
    let probe = |action: &str| {
        let output = Command::new(BIN)
            .args(["probe", action, "--url", gateway.url.as_str(), "--admin-key-env", "ADMIN"])
            .env("ADMIN", "eval-admin-key")
            .output()
            .unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let (code, stdout) = probe("show");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("has not run yet"), "{stdout}");
    let (code, stdout) = probe("run");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.starts_with("score 50.0% (2 question(s)"), "{stdout}");
    let row = |id: &str| stdout.lines().find(|l| l.starts_with(id)).unwrap_or("").to_string();
    assert!(row("hospitals").contains("pass") && row("hospitals").contains("primary"), "{stdout}");
    assert!(row("refund").contains("fail") && row("refund").contains("missing `3 days`"));
    let (_, shown) = probe("show");
    assert!(shown.starts_with("score 50.0%"), "{shown}");
}

#[test]
fn rein_judge_agreement_reports_both_agreements_and_alerts_on_a_weekly_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("labels.jsonl");
    let mut lines = Vec::new();
    // Week 47: 9 of 10 agree. Week 48: 7 of 10, and one answer the person called a tie.
    for (week, pairs) in [
        ("2026-W47", vec![("pass", "pass", 5), ("fail", "fail", 4), ("fail", "pass", 1)]),
        (
            "2026-W48",
            vec![("pass", "pass", 4), ("fail", "fail", 3), ("fail", "pass", 2), ("tie", "pass", 1)],
        ),
    ] {
        for (human, judge, times) in pairs {
            for _ in 0..times {
                let id = format!("{week}-{}", lines.len());
                lines.push(format!(
                    r#"{{"id": "{id}", "human": "{human}", "judge": "{judge}", "week": "{week}"}}"#
                ));
            }
        }
    }
    std::fs::write(&path, lines.join("\n")).unwrap();
    let judge = |extra: &[&str]| {
        let output = Command::new(BIN)
            .args(["judge", "agreement", path.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = judge(&[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    // 16 of 20 agree with ties counted; 16 of 19 with the tie left out.
    assert!(stdout.contains("agreement, ties counted 80.0% (16/20)"), "{stdout}");
    assert!(stdout.contains("agreement, ties out     84.2% (16/19)"), "{stdout}");
    assert!(stdout.contains("disagreements (4):"), "{stdout}");
    assert!(stdout.contains("week 2026-W48"), "{stdout}");
    let (code, _, stderr) = judge(&["--max-drop", "0.1"]);
    assert_eq!(code, Some(3), "a 20-point drop is more than 10: {stderr}");
    assert!(stderr.contains("fell from 90.0% in 2026-W47 to 70.0% in 2026-W48"), "{stderr}");
    assert_eq!(judge(&["--max-drop", "0.25"]).0, Some(0), "20 points is within 25");
    let (_, json, _) = judge(&["--json"]);
    let numbers: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(numbers["tnr"]["hits"], 7);
    assert_eq!(numbers["tnr"]["of"], 10);

    std::fs::write(&path, r#"{"id": "x", "human": "maybe", "judge": "pass"}"#).unwrap();
    let (code, _, stderr) = judge(&[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("labels.jsonl:1: not a labelled answer"), "{stderr}");
}

/// The coverage sweep's synthetic dataset: (id, the check's score, answerable, the answer right).
/// Scores are scripted as the label's token probability (`not_covered` at p scores 1 - p).
const SWEEP_CASES: [(&str, f64, bool, bool); 10] = [
    ("a1", 0.95, true, true),
    ("a2", 0.95, true, true),
    ("a3", 0.85, true, true),
    ("a4", 0.85, true, false),
    ("a5", 0.75, true, true),
    ("a6", 0.65, true, true),
    ("a7", 0.45, true, false),
    ("u1", 0.72, false, false),
    ("u2", 0.55, false, false),
    ("u3", 0.15, false, false),
];

/// A gateway whose `support` route has a coverage check (`coverage_line`) judged by the `small`
/// model, answered by `big`; `plain` has no check: the config's text.
fn sweep_gateway(dir: &Path, coverage_line: &str) -> String {
    let mut scenario = String::new();
    for (id, score, answerable, right) in SWEEP_CASES {
        let (label, p) =
            if score >= 0.5 { ("covered", score) } else { ("not_covered", 1.0 - score) };
        scenario.push_str(&format!(
            "[[reply]]\ncontains = \"topic-{id}\"\nmodels = [\"small\"]\ntext = \"{label}\"\nlogprob = {}\n\n",
            f64::ln(p)
        ));
        if answerable {
            let answer = if right { "The answer is right." } else { "The answer is wrong." };
            scenario.push_str(&format!(
                "[[reply]]\ncontains = \"topic-{id}\"\nmodels = [\"big\"]\ntext = \"{answer}\"\n\n"
            ));
        }
    }
    let scenario_path = dir.join("sweep.toml");
    std::fs::write(&scenario_path, scenario).unwrap();
    let text = format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_key_env = "REIN_EVAL_ADMIN"

[store]
sqlite_path = "{store}"

[providers.sim]
kind = "sim"
scenario = "{scenario}"

[routes.coverage]
[[routes.coverage.tiers]]
name = "small"
provider = "sim"
model = "small"

[routes.plain]
[[routes.plain.tiers]]
name = "primary"
provider = "sim"
model = "big"

[routes.support]
handoff_reply = {{ template = "A person will reply within 2 hours." }}
{coverage_line}
[[routes.support.tiers]]
name = "primary"
provider = "sim"
model = "big"
"#,
        store = dir.join("rein.sqlite").display(),
        scenario = scenario_path.display(),
    );
    text
}

#[test]
fn the_coverage_sweep_reproduces_the_hand_computed_table_and_writes_the_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let text = sweep_gateway(
        dir.path(),
        r#"coverage = { route = "coverage", cutoff = 0.5, samples = 3 }"#,
    );
    let gateway =
        Gateway::start(dir.path(), &text, &[("REIN_EVAL_ADMIN", "eval-admin-key")], "warn");
    let dataset = dir.path().join("sweep.jsonl");
    let evidence = r#"[{"id": "140", "source": "search", "text": "An article."}]"#;
    let lines: Vec<String> = SWEEP_CASES
        .iter()
        .map(|(id, _, answerable, _)| {
            let question = format!("What about topic-{id}?");
            if *answerable {
                format!(
                    r#"{{"id": "{id}", "question": "{question}", "evidence": {evidence}, "expect": {{"contains": ["right"]}}}}"#
                )
            } else {
                format!(
                    r#"{{"id": "{id}", "question": "{question}", "evidence": {evidence}, "answerable": false}}"#
                )
            }
        })
        .collect();
    std::fs::write(&dataset, lines.join("\n")).unwrap();
    let (json, html, snippet) = (
        dir.path().join("sweep.json"),
        dir.path().join("sweep.html"),
        dir.path().join("coverage.toml"),
    );
    let args = [
        dataset.to_str().unwrap(),
        "--route",
        "support",
        "--sweep",
        "coverage",
        "--cutoffs",
        "0.9,0.3,0.5,0.6,0.7,0.8",
        "--min-accuracy",
        "0.75",
        "--url",
        gateway.url.as_str(),
        "--json",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
        "--snippet",
        snippet.to_str().unwrap(),
    ];
    let (code, stdout, stderr) = eval(&args, Some("eval-admin-key"));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("10 case(s), 7 answerable, 3 unanswerable"), "{stdout}");
    assert!(stdout.contains("chosen: cutoff 0.8 answers 40.0% with 75.0% right"), "{stdout}");

    // By hand, answered = score >= cutoff, right = answerable and answered right:
    // 0.3: all but u3 (9): right a1 a2 a3 a5 a6 (5); u3 of 3 unanswerable declined.
    // 0.5: also a7 declined (8), 5 right.
    // 0.6: also u2 (7), 5 right; 2 of 3 unanswerable declined.
    // 0.7: also a6 (6), 4 right.
    // 0.8: also a5 and u1 (4: a1 a2 a3 a4), 3 right; every unanswerable declined.
    // 0.9: a1 a2 (2), both right.
    let expected = [
        (0.3, 9, 5, 1),
        (0.5, 8, 5, 1),
        (0.6, 7, 5, 2),
        (0.7, 6, 4, 2),
        (0.8, 4, 3, 3),
        (0.9, 2, 2, 3),
    ];
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), expected.len(), "{report}");
    for (row, (cutoff, answered, correct, declined)) in rows.iter().zip(expected) {
        assert!(close(&row["cutoff"], cutoff), "{row}");
        assert_eq!(row["answered"], answered, "{row}");
        assert_eq!(row["correct"], correct, "{row}");
        assert_eq!(row["unanswerable_declined"], declined, "{row}");
        assert!(close(&row["coverage"], f64::from(answered) / 10.0), "{row}");
        assert!(close(&row["accuracy"], f64::from(correct) / f64::from(answered)), "{row}");
        assert!(close(&row["unanswerable_declined_share"], f64::from(declined) / 3.0), "{row}");
    }
    assert!(close(&report["chosen"], 0.8), "3/4 = 75 %, the lowest cutoff reaching it");
    for case in report["cases"].as_array().unwrap() {
        let (_, score, answerable, right) =
            SWEEP_CASES.iter().find(|(id, ..)| case["id"] == *id).unwrap();
        assert!((case["score"].as_f64().unwrap() - score).abs() < 1e-9, "{case}");
        assert_eq!(case["method"], "logprobs");
        assert_eq!(case["correct"], *answerable && *right, "{case}");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#"<svg id="sweep-chart""#), "the chart is in the page");
    assert!(
        page.contains(r#"<polyline class="coverage""#) && page.contains("accuracy at 0.8: 75.0%")
    );
    assert!(page.contains(r#"<tr class="chosen"><td>0.8</td><td>4/10</td>"#), "{page}");
    assert_eq!(calls_made(&gateway), 0, "the sweep's calls are not SLI records");

    // The snippet replaces the route's coverage setting: the config loader reads it back, with
    // the new cutoff and the rest of the check as it was.
    let written = std::fs::read_to_string(&snippet).unwrap();
    assert!(written.contains("[routes.support.coverage]\n"), "{written}");
    let base = sweep_gateway(dir.path(), "");
    let config = rein_runtime::config::Config::from_toml(&format!("{base}\n{written}"), &|_| {
        Some("eval-admin-key".to_string())
    })
    .unwrap();
    let check = config.routes["support"].escalation.coverage.clone().unwrap();
    assert_eq!((check.route.as_str(), check.cutoff, check.samples), ("coverage", 0.8, 3));

    // The same dataset as an ordinary eval, through the check at the gateway's cutoff (0.5): an
    // unanswerable case passes only when declined (u3), an answerable one declined fails (a7).
    let (code, stdout, stderr) = eval(
        &[dataset.to_str().unwrap(), "--route", "support", "--trials", "1", "--url", &gateway.url],
        None,
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("10 case(s) x 1 trial(s): pass@1 60.0%"), "{stdout}");
    let row = |id: &str| stdout.lines().find(|l| l.starts_with(id)).unwrap_or("").to_string();
    assert!(row("u3").contains("1/1") && row("u1").contains("0/1"), "{stdout}");
    assert!(row("u1").contains("answered (answered) a question nothing in the evidence answers"));
    assert!(row("a7").contains("0/1"), "{stdout}");
}

#[test]
fn a_sweep_says_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let text = sweep_gateway(dir.path(), r#"coverage = { route = "coverage", cutoff = 0.8 }"#);
    let gateway =
        Gateway::start(dir.path(), &text, &[("REIN_EVAL_ADMIN", "eval-admin-key")], "warn");
    let dataset = dir.path().join("cases.jsonl");
    std::fs::write(
        &dataset,
        r#"{"id": "a1", "question": "What about topic-a1?", "evidence": [{"id": "1", "text": "x"}], "expect": {"contains": ["right"]}}"#,
    )
    .unwrap();
    let sweep = |route: &str, more: &[&str], admin: Option<&str>| {
        let args = [dataset.to_str().unwrap(), "--route", route, "--url", gateway.url.as_str()];
        eval(&[&args[..], more].concat(), admin)
    };
    let admin = Some("eval-admin-key");
    // A route with no coverage check: named.
    let (code, _, stderr) = sweep("plain", &["--sweep", "coverage"], admin);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("route `plain` has no coverage check"), "{stderr}");
    // Only coverage is swept.
    let (code, _, stderr) = sweep("support", &["--sweep", "latency"], admin);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("invalid value 'latency'") && stderr.contains("coverage"), "{stderr}");
    // The sweep needs the admin key, runs each case once and takes cutoffs between 0 and 1.
    let (code, _, stderr) = sweep("support", &["--sweep", "coverage"], None);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--sweep coverage needs the gateway's admin key"), "{stderr}");
    let (code, _, stderr) = sweep("support", &["--sweep", "coverage", "--trials", "3"], admin);
    assert_eq!(code, Some(2), "{stderr}");
    let (code, _, stderr) =
        sweep("support", &["--sweep", "coverage", "--cutoffs", "0.5,1.5"], admin);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--cutoffs: 1.5 is not between 0 and 1"), "{stderr}");
    // No cutoff reaches 100 % when every answer is wrong: exit 3, no snippet.
    std::fs::write(
        &dataset,
        r#"{"id": "a4", "question": "What about topic-a4?", "evidence": [{"id": "1", "text": "x"}], "expect": {"contains": ["right"]}}"#,
    )
    .unwrap();
    let snippet = dir.path().join("coverage.toml");
    let (code, stdout, _) = sweep(
        "support",
        &["--sweep", "coverage", "--min-accuracy", "1", "--snippet", snippet.to_str().unwrap()],
        admin,
    );
    assert_eq!(code, Some(3), "{stdout}");
    assert!(stdout.contains("no cutoff reaches 100.0% accuracy on the answered share"), "{stdout}");
    assert!(!snippet.exists());
    // A dataset line whose `answerable` is not a boolean: named, with its line.
    std::fs::write(
        &dataset,
        r#"{"id": "u1", "question": "q", "evidence": [{"id": "1"}], "answerable": "no"}"#,
    )
    .unwrap();
    let (code, _, stderr) = sweep("support", &["--sweep", "coverage"], admin);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("cases.jsonl:1: case `u1`: `answerable` must be true or false"),
        "{stderr}"
    );
}
