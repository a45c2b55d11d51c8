//! `[judge]`: the online judge. A share of each route's live answers (and a higher share of a
//! slice by its labels, while someone investigates it) is judged after the answer has gone out,
//! off the request path, by a judge route against a rubric; each verdict is stored with the
//! probability its answer was sampled with, and the quality score SLI comes from the verdicts.
//! The judge is checked against people's labels with `rein judge agreement`.
//!
//! ```toml
//! [judge]
//! route = "judge"                  # the route whose model judges
//! share = 0.0                      # the share of every route's answers (default: none)
//! [judge.routes.support]
//! share = 0.05                     # 5 % of support's answers
//! rubric = "Every claim is supported by the cited article; a cutoff or price matches it."
//! [[judge.routes.support.slices]]
//! labels = { question_type = "cutoff" }
//! share = 1.0                      # and all of one question type, while investigating
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rein_core::problems::Problems;
use rein_core::quality::{DEFAULT_RUBRIC, Sampling, Slice};
use serde::{Deserialize, Serialize};

/// `[judge]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawJudge {
    /// The route that judges.
    pub route: Option<String>,
    /// The rubric of routes that name none.
    pub rubric: String,
    /// The share of answers judged on routes without their own `[judge.routes.NAME]`.
    pub share: f64,
    /// Each judgement's deadline.
    pub timeout_ms: u64,
    /// Sampled answers waiting for the judge; beyond this they are dropped and counted.
    pub queue: u32,
    /// Judgements in flight at once.
    pub concurrency: u32,
    /// Keep the question, evidence and answer with each verdict (for people to label).
    pub keep_content: bool,
    pub routes: BTreeMap<String, RawRouteJudging>,
}

impl Default for RawJudge {
    fn default() -> Self {
        Self {
            route: None,
            rubric: DEFAULT_RUBRIC.to_string(),
            share: 0.0,
            timeout_ms: 30_000,
            queue: 1_024,
            concurrency: 2,
            keep_content: true,
            routes: BTreeMap::new(),
        }
    }
}

/// `[judge.routes.NAME]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteJudging {
    pub share: f64,
    #[serde(default)]
    pub rubric: Option<String>,
    #[serde(default)]
    pub slices: Vec<RawSlice>,
}

/// `[[judge.routes.NAME.slices]]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSlice {
    pub labels: BTreeMap<String, String>,
    pub share: f64,
}

/// How one route's answers are judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteJudging {
    pub sampling: Sampling,
    pub rubric: String,
}

/// `[judge]`, validated. No judge route: nothing is judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeConfig {
    pub route: Option<String>,
    #[serde(rename = "timeout_ms", with = "rein_core::clock::millis")]
    pub timeout: Duration,
    pub queue: usize,
    pub concurrency: usize,
    pub keep_content: bool,
    /// Every route judged, by name (the judge route itself never is).
    pub routes: BTreeMap<String, RouteJudging>,
}

impl Default for JudgeConfig {
    fn default() -> Self {
        let mut problems = Problems::new();
        validate_judge(&RawJudge::default(), &BTreeMap::new(), &mut problems)
    }
}

impl JudgeConfig {
    /// How `route`'s answers are judged; `None`: not at all.
    pub fn of(&self, route: &str) -> Option<&RouteJudging> {
        self.route.as_ref()?;
        self.routes.get(route)
    }
}

/// The most labels one slice may name.
const MAX_SLICE_LABELS: usize = 8;

fn check_share(key: String, share: f64, problems: &mut Problems) {
    if !(0.0..=1.0).contains(&share) {
        problems.add(key, format!("{share} must be between 0 and 1 (a share: 0.05 is 5 %)"));
    }
}

/// `routes`: every route of the config with the label keys it slices by.
pub(super) fn validate_judge(
    raw: &RawJudge,
    routes: &BTreeMap<String, BTreeSet<String>>,
    problems: &mut Problems,
) -> JudgeConfig {
    check_share("judge.share".into(), raw.share, problems);
    if raw.timeout_ms == 0 {
        problems.add("judge.timeout_ms", "must be at least 1");
    }
    if raw.queue == 0 || raw.queue > 1_000_000 {
        problems.add("judge.queue", "must be between 1 and 1000000");
    }
    if raw.concurrency == 0 || raw.concurrency > 64 {
        problems.add("judge.concurrency", "must be between 1 and 64");
    }
    if raw.rubric.trim().is_empty() {
        problems.add("judge.rubric", "must not be empty");
    }
    let judging = raw.share > 0.0 || !raw.routes.is_empty();
    match &raw.route {
        None if judging => {
            problems.add("judge.route", "is required: the route whose model judges the answers")
        }
        Some(route) if !routes.contains_key(route) => {
            problems.add("judge.route", format!("`{route}` is not a route of this config"))
        }
        _ => {}
    }
    let mut judged = BTreeMap::new();
    for (name, route) in &raw.routes {
        let key = format!("judge.routes.{name}");
        let Some(route_labels) = routes.get(name) else {
            problems.add(key, format!("`{name}` is not a route of this config"));
            continue;
        };
        if raw.route.as_deref() == Some(name.as_str()) {
            problems.add(key, "the judge route is not judged (it would judge its own verdicts)");
            continue;
        }
        check_share(format!("{key}.share"), route.share, problems);
        if route.rubric.as_ref().is_some_and(|rubric| rubric.trim().is_empty()) {
            problems.add(format!("{key}.rubric"), "must not be empty");
        }
        let mut slices = Vec::new();
        for (index, slice) in route.slices.iter().enumerate() {
            let at = format!("{key}.slices[{index}]");
            check_share(format!("{at}.share"), slice.share, problems);
            if slice.labels.is_empty() || slice.labels.len() > MAX_SLICE_LABELS {
                problems.add(
                    format!("{at}.labels"),
                    format!("must name 1 to {MAX_SLICE_LABELS} labels"),
                );
            }
            for label in slice.labels.keys() {
                if !route_labels.contains(label) {
                    problems.add(
                        format!("{at}.labels.{label}"),
                        format!(
                            "`{label}` is not one of `routes.{name}.labels`: add it there so calls carry it"
                        ),
                    );
                }
            }
            slices.push(Slice { labels: slice.labels.clone(), share: slice.share });
        }
        let sampling = Sampling { share: route.share, slices };
        let rubric = route.rubric.clone().unwrap_or_else(|| raw.rubric.clone());
        judged.insert(name.clone(), RouteJudging { sampling, rubric });
    }
    if raw.share > 0.0 {
        for name in routes.keys() {
            if raw.route.as_deref() == Some(name.as_str()) || judged.contains_key(name) {
                continue;
            }
            let sampling = Sampling { share: raw.share, slices: Vec::new() };
            judged.insert(name.clone(), RouteJudging { sampling, rubric: raw.rubric.clone() });
        }
    }
    JudgeConfig {
        route: raw.route.clone(),
        timeout: Duration::from_millis(raw.timeout_ms.max(1)),
        queue: raw.queue.clamp(1, 1_000_000) as usize,
        concurrency: raw.concurrency.clamp(1, 64) as usize,
        keep_content: raw.keep_content,
        routes: judged,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn routes() -> BTreeMap<String, BTreeSet<String>> {
        BTreeMap::from([
            ("support".to_string(), BTreeSet::from(["question_type".to_string()])),
            ("billing".to_string(), BTreeSet::new()),
            ("judge".to_string(), BTreeSet::new()),
        ])
    }

    fn validate(text: &str) -> (JudgeConfig, Vec<String>) {
        #[derive(Deserialize)]
        struct Doc {
            judge: RawJudge,
        }
        let raw: Doc = toml::from_str(text).unwrap();
        let mut problems = Problems::new();
        let config = validate_judge(&raw.judge, &routes(), &mut problems);
        let keys = problems.keys().into_iter().zip(problems.messages());
        (config, keys.map(|(key, message)| format!("{key}: {message}")).collect())
    }

    #[test]
    fn a_route_share_a_default_share_and_a_slice() {
        let (config, problems) = validate(
            r#"[judge]
route = "judge"
share = 0.01
[judge.routes.support]
share = 0.05
[[judge.routes.support.slices]]
labels = { question_type = "cutoff" }
share = 1.0
"#,
        );
        assert!(problems.is_empty(), "{problems:?}");
        let support = config.of("support").unwrap();
        assert_eq!(support.sampling.share, 0.05);
        assert_eq!(support.sampling.slices[0].share, 1.0);
        assert_eq!(support.rubric, DEFAULT_RUBRIC);
        assert_eq!(config.of("billing").unwrap().sampling.share, 0.01, "the default share");
        assert!(config.of("judge").is_none(), "the judge route is never judged");
    }

    #[test]
    fn nothing_is_judged_by_default() {
        let config = JudgeConfig::default();
        assert!(config.of("support").is_none());
        assert_eq!((config.queue, config.concurrency), (1_024, 2));
    }

    #[test]
    fn mistakes_are_named_by_key() {
        let (_, problems) = validate(
            r#"[judge]
share = 1.5
timeout_ms = 0
concurrency = 0
[judge.routes.nope]
share = 0.1
[judge.routes.support]
share = -0.1
rubric = " "
[[judge.routes.support.slices]]
labels = { topic = "icu" }
share = 2
"#,
        );
        let text = problems.join("\n");
        for key in [
            "judge.share: 1.5 must be between 0 and 1",
            "judge.timeout_ms:",
            "judge.concurrency:",
            "judge.route: is required",
            "judge.routes.nope: `nope` is not a route",
            "judge.routes.support.share: -0.1",
            "judge.routes.support.rubric: must not be empty",
            "judge.routes.support.slices[0].share: 2 must be",
            "judge.routes.support.slices[0].labels.topic: `topic` is not one of `routes.support.labels`",
        ] {
            assert!(text.contains(key), "missing `{key}` in:\n{text}");
        }
        let (_, problems) =
            validate("[judge]\nroute = \"judge\"\n[judge.routes.judge]\nshare = 1.0\n");
        assert!(problems[0].starts_with("judge.routes.judge: the judge route is not judged"));
        let (_, problems) = validate("[judge]\nroute = \"gone\"\n");
        assert_eq!(problems, vec!["judge.route: `gone` is not a route of this config"]);
    }
}
