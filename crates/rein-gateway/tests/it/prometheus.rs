//! The Prometheus and Grafana files in deploy/: promtool checks both rules files and runs their
//! unit tests (every alert must have a firing and a quiet case, every recorded series a value
//! check), the Grafana dashboard names only series that exist, and a real `prometheus` scrapes a
//! running gateway and loads both rules files. promtool and prometheus come from Debian's
//! `prometheus` package, which scripts/test.sh installs: when they are missing these tests fail.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::gateway::{chat, start};
use crate::tools::CHECKED_BY_THE_GATEWAY_SLI_TESTS;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");

/// The rules files, relative to deploy/.
const RULE_FILES: [&str; 2] = ["prometheus/rein-slis.yml", "prometheus/rein-alerts.yml"];

/// Metrics the gateway exports once it has answered a call (the names a query uses), besides
/// those in [`CHECKED_BY_THE_GATEWAY_SLI_TESTS`]. A test checks each against a running gateway's
/// /metrics (a family appears there with its first series); the dashboard may name only these,
/// those, and the rules files' recorded series.
const EXPORTED: &[&str] = &[
    "rein_requests_total",
    "rein_request_duration_seconds_bucket",
    "rein_request_duration_seconds_sum",
    "rein_request_duration_seconds_count",
    "rein_attempts_total",
    "rein_tier_breaker_state",
    "rein_outbox_depth",
    "rein_outbox_failed",
    "rein_outbox_review",
    "rein_outbox_oldest_age_seconds",
];

fn deploy(path: &str) -> PathBuf {
    Path::new(DEPLOY).join(path)
}

/// Run a tool from Debian's `prometheus` package; a missing binary fails the test, naming the
/// script that installs it.
fn run(program: &str, args: &[&str], dir: &Path) -> Output {
    match Command::new(program).args(args).current_dir(dir).output() {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            panic!("{}", missing(program))
        }
        Err(error) => panic!("cannot run {program}: {error}"),
    }
}

fn missing(program: &str) -> String {
    format!(
        "`{program}` is not on PATH: run scripts/test.sh, which installs Debian's `prometheus` \
         package (promtool and prometheus), or install Prometheus yourself"
    )
}

fn assert_success(what: &str, output: &Output) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn yaml(path: &Path) -> serde_yaml::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The unit-test files, sorted.
fn test_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy("prometheus/tests"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no promtool tests in deploy/prometheus/tests");
    files
}

/// Every rule of a rules file: (group, rule).
fn rules_of(path: &Path) -> Vec<(String, serde_yaml::Value)> {
    let rules = yaml(path);
    let groups = rules["groups"].as_sequence().expect("`groups` is a list");
    let mut all = Vec::new();
    for group in groups {
        let name = group["name"].as_str().expect("each group has a name").to_string();
        let list = group["rules"].as_sequence().unwrap_or_else(|| panic!("group {name}: rules"));
        assert!(!list.is_empty(), "group {name} has no rules");
        all.extend(list.iter().map(|rule| (name.clone(), rule.clone())));
    }
    all
}

fn recorded_names() -> BTreeSet<String> {
    RULE_FILES
        .iter()
        .flat_map(|file| rules_of(&deploy(file)))
        .filter_map(|(_, rule)| rule["record"].as_str().map(str::to_string))
        .collect()
}

/// The series names (`rein_*` and `rein:*`) a PromQL expression names.
fn series_names(expr: &str) -> BTreeSet<String> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("rein") {
        let preceded = rest[..at].chars().next_back().is_some_and(is_name);
        let tail = &rest[at..];
        let end = tail.find(|c: char| !is_name(c)).unwrap_or(tail.len());
        let name = &tail[..end];
        rest = &tail[end..];
        if !preceded && (name.starts_with("rein_") || name.starts_with("rein:")) {
            names.insert(name.to_string());
        }
    }
    names
}

#[test]
fn the_name_scan_finds_metrics_and_recorded_series() {
    assert_eq!(
        series_names(
            r#"sum by (route) (rate(rein_sli_calls_total{route=~"$route"}[5m])) / on () group_left () (1 - rein:sli_availability:objective) > bar_rein_x"#
        ),
        BTreeSet::from(["rein:sli_availability:objective".into(), "rein_sli_calls_total".into()])
    );
}

// ---------------------------------------------------------------------------------------------
// promtool
// ---------------------------------------------------------------------------------------------

#[test]
fn promtool_checks_both_rules_files() {
    let output =
        run("promtool", &["check", "rules", RULE_FILES[0], RULE_FILES[1]], Path::new(DEPLOY));
    assert_success("promtool check rules", &output);
}

#[test]
fn promtool_unit_tests_of_the_rules_pass() {
    let files: Vec<String> =
        test_files().iter().map(|path| path.to_str().unwrap().to_string()).collect();
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    let output = run("promtool", &args, Path::new(DEPLOY));
    assert_success("promtool test rules", &output);
}

/// Each alert of both files is complete (the style rein-alerts.yml's test checks), fires in at
/// least one unit test and stays quiet in another; each recorded series has its value checked;
/// and the tests load both rules files.
#[test]
fn every_alert_has_a_firing_and_a_quiet_test_and_every_recorded_series_a_value_test() {
    let mut alerts = Vec::new();
    for file in RULE_FILES {
        for (group, rule) in rules_of(&deploy(file)) {
            let Some(alert) = rule["alert"].as_str() else {
                assert!(rule["record"].as_str().is_some(), "{file}/{group}: {rule:?}");
                continue;
            };
            assert!(rule["expr"].as_str().is_some(), "{alert}: no `expr`");
            let duration = rule["for"].as_str().unwrap_or_else(|| panic!("{alert}: no `for`"));
            let (number, unit) = duration.split_at(duration.len() - 1);
            assert!(
                number.parse::<u32>().is_ok() && ["s", "m", "h"].contains(&unit),
                "{alert}: `for: {duration}` is not a plain Prometheus duration"
            );
            let severity = rule["labels"]["severity"].as_str();
            assert!(matches!(severity, Some("page" | "warn")), "{alert}: severity {severity:?}");
            for annotation in ["summary", "description"] {
                let text = rule["annotations"][annotation].as_str().unwrap_or_default();
                assert!(!text.trim().is_empty(), "{alert}: no `annotations.{annotation}`");
            }
            alerts.push(alert.to_string());
        }
    }
    let unique: BTreeSet<&String> = alerts.iter().collect();
    assert_eq!(unique.len(), alerts.len(), "an alert name is used twice: {alerts:?}");

    // alert name → (firing cases, quiet cases); every promql_expr_test's expression.
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut exprs = Vec::new();
    let mut loaded = BTreeSet::new();
    for path in test_files() {
        let suite = yaml(&path);
        for file in suite["rule_files"].as_sequence().expect("rule_files") {
            let file = path.parent().unwrap().join(file.as_str().unwrap());
            loaded.insert(file.canonicalize().unwrap());
        }
        for test in suite["tests"].as_sequence().expect("tests") {
            for case in test["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = case["alertname"].as_str().expect("alertname").to_string();
                assert!(alerts.contains(&name), "{}: tests unknown alert {name}", path.display());
                let fires = case["exp_alerts"].as_sequence().is_some_and(|a| !a.is_empty());
                let entry = cases.entry(name).or_default();
                if fires {
                    entry.0 += 1;
                } else {
                    entry.1 += 1;
                }
            }
            for case in test["promql_expr_test"].as_sequence().into_iter().flatten() {
                exprs.push(case["expr"].as_str().expect("expr").to_string());
            }
        }
    }
    for file in RULE_FILES {
        assert!(
            loaded.contains(&deploy(file).canonicalize().unwrap()),
            "no unit test loads {file}"
        );
    }
    for alert in &alerts {
        let (firing, quiet) = cases.get(alert).copied().unwrap_or_default();
        assert!(firing > 0, "{alert}: no alert_rule_test with non-empty exp_alerts fires it");
        assert!(quiet > 0, "{alert}: no alert_rule_test with empty exp_alerts keeps it quiet");
    }
    let checked: BTreeSet<String> = exprs.iter().flat_map(|expr| series_names(expr)).collect();
    for record in recorded_names() {
        assert!(checked.contains(&record), "no promql_expr_test checks the value of {record}");
    }
}

// ---------------------------------------------------------------------------------------------
// Grafana
// ---------------------------------------------------------------------------------------------

/// Every panel, rows' nested panels included.
fn panels(list: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in list.as_array().expect("panels is a list") {
        all.push(panel);
        if let Some(nested) = panel.get("panels") {
            all.extend(panels(nested));
        }
    }
    all
}

#[test]
fn the_grafana_dashboard_queries_only_series_that_exist() {
    let path = deploy("grafana/rein-dashboard.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is valid JSON");
    let datasource = "${DS_PROMETHEUS}";

    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| (36..=41).contains(&v)));
    assert!(
        dashboard["__inputs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|input| input["name"] == "DS_PROMETHEUS" && input["pluginId"] == "prometheus"),
        "no DS_PROMETHEUS datasource input"
    );
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let route = variables.iter().find(|v| v["name"] == "route").expect("a `route` variable");
    assert_eq!(route["datasource"]["uid"], datasource);
    assert_eq!(route["query"]["query"], "label_values(rein_sli_calls_total, route)");

    let recorded = recorded_names();
    let known: BTreeSet<&str> =
        EXPORTED.iter().chain(CHECKED_BY_THE_GATEWAY_SLI_TESTS).copied().collect();
    let mut ids = BTreeSet::new();
    let mut titles = Vec::new();
    for panel in panels(&dashboard["panels"]) {
        let title = panel["title"].as_str().expect("every panel has a title");
        assert!(ids.insert(panel["id"].as_u64().expect("a panel id")), "{title}: id reused");
        if panel["type"] == "row" {
            // A row only groups the panels below it: no query of its own.
            assert!(panel.get("targets").is_none(), "row {title} has targets");
            continue;
        }
        titles.push(title.to_string());
        assert_eq!(panel["datasource"]["uid"], datasource, "{title}: datasource");
        let targets = panel["targets"].as_array().filter(|t| !t.is_empty());
        let targets = targets.unwrap_or_else(|| panic!("{title}: no targets"));
        for target in targets {
            assert_eq!(target["datasource"]["uid"], datasource, "{title}: a target's datasource");
            let expr = target["expr"].as_str().unwrap_or_default();
            let names = series_names(expr);
            assert!(!names.is_empty(), "{title}: `{expr}` names no rein series");
            for name in names {
                if name.starts_with("rein:") {
                    assert!(recorded.contains(&name), "{title}: {name} is recorded by no rule");
                } else {
                    assert!(known.contains(name.as_str()), "{title}: {name} is not exported");
                }
            }
        }
    }
    for wanted in [
        "Availability vs SLO",
        "Error budget burn rate",
        "Latency p50 / p95 / p99",
        "Fallback beyond plan & degraded share",
        "Invalid on the first try",
        "Escalations by trigger",
        "Quality score",
        "Tier breaker states",
        "Kill switch diversions & degraded rules",
        "Outbox depth & age",
        "Dropped spans & call records",
    ] {
        assert!(titles.iter().any(|t| t == wanted), "no panel `{wanted}`: {titles:?}");
    }
}

#[tokio::test]
async fn the_exported_list_matches_the_gateways_metrics() {
    let gw = start().await;
    let response = gw.post("/v1/chat/completions", Some("client-secret-1"), chat("chat")).await;
    assert_eq!(response.status(), 200);
    let metrics = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for name in EXPORTED {
        assert!(
            metrics.lines().any(|line| line.starts_with(&format!("{name}{{"))
                || line.starts_with(&format!("{name} "))),
            "{name} is listed as exported, but /metrics has no series of it:\n{metrics}"
        );
    }
    gw.stop().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// A real Prometheus scraping a real gateway
// ---------------------------------------------------------------------------------------------

/// A `prometheus` process with its own storage and config in a temp dir, killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let rule_files: String = RULE_FILES
            .iter()
            .map(|file| format!("  - '{}'\n", deploy(file).canonicalize().unwrap().display()))
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n{rule_files}\
             scrape_configs:\n  - job_name: rein\n    scrape_interval: 1s\n    scrape_timeout: 1s\n    \
             static_configs:\n      - targets: ['{target}']\n"
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                panic!("{}", missing("prometheus"))
            }
            Err(error) => panic!("cannot start prometheus: {error}"),
        };
        Prometheus { child, port, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/{path}`'s `data`, or why not.
    async fn api(&self, client: &reqwest::Client, path: &str) -> Result<Value, String> {
        let url = format!("http://127.0.0.1:{}/api/v1/{path}", self.port);
        let response = client.get(&url).send().await.map_err(|e| format!("{url}: {e}"))?;
        let body: Value = response.json().await.map_err(|e| format!("{url}: {e}"))?;
        if body["status"] != "success" {
            return Err(format!("{url}: {body}"));
        }
        Ok(body["data"].clone())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ok once the target is up, the gateway's series are stored, the recording rules have produced
/// a series and every rule group is loaded and healthy; else what is still missing.
async fn ready(
    prometheus: &Prometheus,
    client: &reqwest::Client,
    groups: &BTreeSet<String>,
) -> Result<(), String> {
    let targets = prometheus.api(client, "targets").await?;
    let active = targets["activeTargets"].as_array().cloned().unwrap_or_default();
    let [target] = active.as_slice() else {
        return Err(format!("not one active target: {targets}"));
    };
    if target["health"] != "up" || target["lastError"] != "" {
        return Err(format!("target not up: {target}"));
    }

    let requests = prometheus.api(client, "query?query=rein_requests_total").await?;
    let series = requests["result"].as_array().cloned().unwrap_or_default();
    if !series.iter().any(|s| s["metric"]["route"] == "chat" && s["metric"]["job"] == "rein") {
        return Err(format!("rein_requests_total has no chat series yet: {requests}"));
    }
    let objective = prometheus.api(client, "query?query=rein:sli_availability:objective").await?;
    if objective["result"][0]["value"][1] != "0.995" {
        return Err(format!("rein:sli_availability:objective not recorded yet: {objective}"));
    }

    let rules = prometheus.api(client, "rules").await?;
    let loaded = rules["groups"].as_array().cloned().unwrap_or_default();
    let names: BTreeSet<String> =
        loaded.iter().filter_map(|g| g["name"].as_str().map(str::to_string)).collect();
    if &names != groups {
        return Err(format!("rule groups loaded: {names:?}, want {groups:?}"));
    }
    for group in &loaded {
        for rule in group["rules"].as_array().cloned().unwrap_or_default() {
            if rule["health"] != "ok" || rule.get("lastError").is_some_and(|e| e != "") {
                let name = rule.get("name").cloned().unwrap_or_default();
                let health = rule.get("health").cloned().unwrap_or_default();
                let error = rule.get("lastError").cloned().unwrap_or_default();
                return Err(format!("rule {name}: health {health}, lastError {error}"));
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_real_prometheus_scrapes_the_gateway_and_loads_both_rules_files() {
    let gw = start().await;
    for route in ["chat", "chat", "flaky"] {
        let response = gw.post("/v1/chat/completions", Some("client-secret-1"), chat(route)).await;
        assert_eq!(response.status(), 200);
    }
    let mut groups = BTreeSet::new();
    for file in RULE_FILES {
        let rules = yaml(&deploy(file));
        for group in rules["groups"].as_sequence().unwrap() {
            groups.insert(group["name"].as_str().unwrap().to_string());
        }
    }

    let mut prometheus = Prometheus::start(&gw.addr.to_string());
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    // The long-window group runs once a minute, first at an offset of up to a minute after
    // Prometheus starts: its rules are `unknown` until then.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let state = ready(&prometheus, &client, &groups).await;
        let Err(why) = state else { break };
        if let Ok(Some(status)) = prometheus.child.try_wait() {
            panic!("prometheus exited ({status}):\n{}", prometheus.log());
        }
        assert!(
            Instant::now() < deadline,
            "prometheus not ready after 120 s: {why}\n--- prometheus log\n{}",
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(prometheus);
    gw.stop().await.unwrap();
}
