//! Evals run more than once: every case of a dataset is tried `n` times from a clean state, and
//! consistency is its own number. From a case's `n` trials with `c` passes, the unbiased
//! estimators (Chen et al., 2021, for pass@k; Yao et al.'s τ-bench for pass^k) give:
//!
//! - **pass@k** = 1 − C(n−c, k) / C(n, k): the chance that at least one of k tries passes;
//! - **pass^k** = C(c, k) / C(n, k): the chance that all k tries pass, the number for an agent
//!   every customer gets one try of (0.75³ ≈ 42 %).
//!
//! Both need k ≤ n: a k larger than the trials run is refused, never extrapolated. A [`Report`]
//! averages them over the cases, lists the **flaky** cases (whose result changed between
//! trials: the first place to look), and keeps repairs and re-asks beside accuracy: an answer
//! that passed after a repair or a re-ask passed, but not cleanly.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::validate::{Answer, BuiltinRule, Evidence, EvidenceItem, RuleSet};

/// An evidence item as a dataset or the probe's config writes it (the shape of the request's
/// `rein.evidence` items).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSpec {
    pub id: Value,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub fields: Value,
}

impl EvidenceSpec {
    /// The item's id as text (a number is written as it is).
    pub fn id_text(&self) -> String {
        match &self.id {
            Value::String(id) => id.clone(),
            other => other.to_string(),
        }
    }

    /// As a `rein.evidence` item of a request body.
    pub fn to_json(&self) -> Value {
        serde_json::json!({"id": self.id, "source": self.source, "text": self.text, "fields": self.fields})
    }

    fn item(&self) -> EvidenceItem {
        let id = self.id_text();
        let source = self.source.clone().unwrap_or_else(|| crate::validate::CALLER_SOURCE.into());
        EvidenceItem::new(source, id, self.text.clone()).with_fields(self.fields.clone())
    }
}

/// What an answer must be, for an eval's case or a probe's question; every checker given must
/// pass. A `judge` rubric is the caller's to ask (it needs a model): [`Expect::check`] leaves it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// Each must be in the answer (ignoring case).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contains: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_contains: Vec<String>,
    /// JSON pointer → the value the answer's JSON has there.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub json: BTreeMap<String, Value>,
    /// A built-in business rule, against the evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<BuiltinRule>,
    /// A rubric a judge answers PASS or FAIL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<String>,
}

fn shorten(text: &str) -> String {
    let mut short: String = text.chars().take(60).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

impl Expect {
    /// No checker at all.
    pub fn is_empty(&self) -> bool {
        self.exact.is_none()
            && self.contains.is_empty()
            && self.not_contains.is_empty()
            && self.json.is_empty()
            && self.rule.is_none()
            && self.judge.is_none()
    }

    /// Every checker but the judge on the answer `text`, with `evidence` for the rule: the
    /// first that fails says why.
    pub async fn check(&self, text: &str, evidence: &[EvidenceSpec]) -> Result<(), String> {
        if let Some(exact) = &self.exact
            && text.trim() != exact.trim()
        {
            return Err(format!("not exactly `{}`", shorten(exact)));
        }
        let lower = text.to_lowercase();
        for needle in &self.contains {
            if !lower.contains(&needle.to_lowercase()) {
                return Err(format!("missing `{needle}`"));
            }
        }
        for needle in &self.not_contains {
            if lower.contains(&needle.to_lowercase()) {
                return Err(format!("contains `{needle}`"));
            }
        }
        let parsed: Option<Value> = serde_json::from_str(text.trim()).ok();
        for (pointer, expected) in &self.json {
            let found = parsed.as_ref().and_then(|json| json.pointer(pointer));
            if found != Some(expected) {
                let shown = found.map_or("nothing".to_string(), Value::to_string);
                return Err(format!("`{pointer}` is {shown}, not {expected}"));
            }
        }
        if let Some(rule) = &self.rule {
            let items = evidence.iter().map(EvidenceSpec::item).collect();
            // Offline: the rule reads the evidence, and no call is made.
            let ctx = crate::CallContext::new().evidence(Evidence::from_items(items));
            let answer = match parsed {
                Some(json) => Answer::json(json),
                None => Answer::text(text),
            };
            let problems = RuleSet::from_builtin([rule.clone()]).check(&ctx, &answer).await;
            if let Some(problem) = problems.first() {
                return Err(format!("rule `{}`: {}", rule.rule_name(), problem.message));
            }
        }
        Ok(())
    }
}

/// `C(a, k) / C(n, k)` for `a ≤ n`, as a product so that large `n` never overflows: the chance
/// that `k` trials drawn without replacement from `n` all fall among `a`.
fn choose_ratio(a: u32, n: u32, k: u32) -> f64 {
    if k > a {
        return 0.0;
    }
    (0..k).map(|i| f64::from(a - i) / f64::from(n - i)).product()
}

/// Why an estimate cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EstimateError {
    #[error("k = {k} is more than the {n} trial(s) run: run at least k trials (--trials)")]
    KBeyondTrials { k: u32, n: u32 },
    #[error("k must be at least 1")]
    ZeroK,
    #[error("{c} passes out of {n} trials is not possible")]
    MorePassesThanTrials { c: u32, n: u32 },
}

fn check(n: u32, c: u32, k: u32) -> Result<(), EstimateError> {
    if k == 0 {
        return Err(EstimateError::ZeroK);
    }
    if c > n {
        return Err(EstimateError::MorePassesThanTrials { c, n });
    }
    if k > n {
        return Err(EstimateError::KBeyondTrials { k, n });
    }
    Ok(())
}

/// The unbiased pass@k of a case with `c` passes in `n` trials.
pub fn pass_at_k(n: u32, c: u32, k: u32) -> Result<f64, EstimateError> {
    check(n, c, k)?;
    Ok(1.0 - choose_ratio(n - c, n, k))
}

/// The unbiased pass^k of a case with `c` passes in `n` trials.
pub fn pass_hat_k(n: u32, c: u32, k: u32) -> Result<f64, EstimateError> {
    check(n, c, k)?;
    Ok(choose_ratio(c, n, k))
}

/// One trial of one case, as the runner saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub case: String,
    /// 0-based.
    pub trial: u32,
    /// The checker passed the answer.
    pub passed: bool,
    /// The answer was repaired by the validation ladder.
    #[serde(default)]
    pub repaired: bool,
    /// A re-ask was needed (a cut-off answer, failed checks).
    #[serde(default)]
    pub reasked: bool,
    /// The tier that answered, when one did.
    #[serde(default)]
    pub tier: Option<String>,
    /// How the call ended (`answered`, `fallback`, `degraded`, ...).
    #[serde(default)]
    pub outcome: Option<String>,
    /// Why the checker failed it, or why the call could not be made.
    #[serde(default)]
    pub detail: Option<String>,
    /// The call itself failed (no answer to check): counted as a failed trial.
    #[serde(default)]
    pub error: bool,
}

impl Trial {
    /// Trial `trial` of `case`, not passed (yet), with nothing known about it.
    pub fn new(case: impl Into<String>, trial: u32) -> Self {
        Self {
            case: case.into(),
            trial,
            passed: false,
            repaired: false,
            reasked: false,
            tier: None,
            outcome: None,
            detail: None,
            error: false,
        }
    }

    /// Passed with nothing repaired or asked again.
    pub fn clean(&self) -> bool {
        self.passed && !self.repaired && !self.reasked
    }
}

/// One case over its trials.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseResult {
    pub case: String,
    pub trials: u32,
    pub passes: u32,
    pub clean_passes: u32,
    pub repaired: u32,
    pub reasked: u32,
    pub errors: u32,
    pub pass_at_1: f64,
    pub pass_at_k: f64,
    pub pass_hat_k: f64,
    /// Its result changed between trials.
    pub flaky: bool,
    /// Each trial's result in order: `true` passed.
    pub results: Vec<bool>,
    /// The first failure's detail.
    pub failure: Option<String>,
}

/// How the trials one tier answered fared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierScore {
    pub trials: u32,
    pub passes: u32,
    pub pass_rate: f64,
}

/// An eval's numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub k: u32,
    /// Trials per case (the fewest any case has).
    pub trials: u32,
    pub cases: Vec<CaseResult>,
    /// Means over the cases.
    pub pass_at_1: f64,
    pub pass_at_k: f64,
    pub pass_hat_k: f64,
    /// The share of trials that passed cleanly (no repair, no re-ask).
    pub clean_pass_rate: f64,
    pub repair_rate: f64,
    pub reask_rate: f64,
    pub error_rate: f64,
    /// The cases whose result changed between trials.
    pub flaky: Vec<String>,
    /// Trials by the tier that answered (`-` for none).
    pub tiers: BTreeMap<String, TierScore>,
}

fn share(part: u32, whole: u32) -> f64 {
    if whole == 0 { 0.0 } else { f64::from(part) / f64::from(whole) }
}

impl Report {
    /// The numbers of `trials` (any order) at `k`. Refused when any case has fewer than `k`
    /// trials, or there are none.
    pub fn of(trials: &[Trial], k: u32) -> Result<Report, EstimateError> {
        let mut by_case: BTreeMap<&str, Vec<&Trial>> = BTreeMap::new();
        for trial in trials {
            by_case.entry(trial.case.as_str()).or_default().push(trial);
        }
        let mut cases = Vec::with_capacity(by_case.len());
        for (case, mut runs) in by_case {
            runs.sort_by_key(|trial| trial.trial);
            let n = u32::try_from(runs.len()).unwrap_or(u32::MAX);
            let count = |f: fn(&Trial) -> bool| {
                u32::try_from(runs.iter().filter(|t| f(t)).count()).unwrap_or(u32::MAX)
            };
            let passes = count(|t| t.passed);
            let results: Vec<bool> = runs.iter().map(|t| t.passed).collect();
            cases.push(CaseResult {
                case: case.to_string(),
                trials: n,
                passes,
                clean_passes: count(Trial::clean),
                repaired: count(|t| t.repaired),
                reasked: count(|t| t.reasked),
                errors: count(|t| t.error),
                pass_at_1: pass_at_k(n, passes, 1)?,
                pass_at_k: pass_at_k(n, passes, k)?,
                pass_hat_k: pass_hat_k(n, passes, k)?,
                flaky: passes > 0 && passes < n,
                failure: runs.iter().find(|t| !t.passed).and_then(|t| t.detail.clone()),
                results,
            });
        }
        if cases.is_empty() {
            return Err(EstimateError::KBeyondTrials { k, n: 0 });
        }
        let mean =
            |f: fn(&CaseResult) -> f64| cases.iter().map(f).sum::<f64>() / cases.len() as f64;
        let total = u32::try_from(trials.len()).unwrap_or(u32::MAX);
        let sum = |f: fn(&CaseResult) -> u32| cases.iter().map(f).sum::<u32>();
        let mut tiers: BTreeMap<String, TierScore> = BTreeMap::new();
        for trial in trials {
            let tier = trial.tier.clone().unwrap_or_else(|| "-".to_string());
            let score =
                tiers.entry(tier).or_insert(TierScore { trials: 0, passes: 0, pass_rate: 0.0 });
            score.trials += 1;
            score.passes += u32::from(trial.passed);
        }
        for score in tiers.values_mut() {
            score.pass_rate = share(score.passes, score.trials);
        }
        Ok(Report {
            k,
            trials: cases.iter().map(|c| c.trials).min().unwrap_or(0),
            pass_at_1: mean(|c| c.pass_at_1),
            pass_at_k: mean(|c| c.pass_at_k),
            pass_hat_k: mean(|c| c.pass_hat_k),
            clean_pass_rate: share(sum(|c| c.clean_passes), total),
            repair_rate: share(sum(|c| c.repaired), total),
            reask_rate: share(sum(|c| c.reasked), total),
            error_rate: share(sum(|c| c.errors), total),
            flaky: cases.iter().filter(|c| c.flaky).map(|c| c.case.clone()).collect(),
            tiers,
            cases,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    fn trial(case: &str, trial: u32, passed: bool) -> Trial {
        Trial {
            passed,
            tier: Some("primary".into()),
            outcome: Some("answered".into()),
            detail: (!passed).then(|| "missing `48 hours`".to_string()),
            ..Trial::new(case, trial)
        }
    }

    #[test]
    fn pass_hat_k_of_a_case_passing_three_in_four_by_hand() {
        // 3 passes in 4 trials: pass^3 = C(3,3)/C(4,3) = 1/4; pass^2 = C(3,2)/C(4,2) = 3/6.
        assert!(close(pass_hat_k(4, 3, 3).unwrap(), 0.25));
        assert!(close(pass_hat_k(4, 3, 2).unwrap(), 0.5));
        assert!(close(pass_hat_k(4, 3, 1).unwrap(), 0.75));
        // pass@2 = 1 - C(1,2)/C(4,2) = 1; pass@1 = 1 - C(1,1)/C(4,1) = 3/4.
        assert!(close(pass_at_k(4, 3, 2).unwrap(), 1.0));
        assert!(close(pass_at_k(4, 3, 1).unwrap(), 0.75));
        // τ-bench's estimator on 8 trials with 5 passes, k = 4: C(5,4)/C(8,4) = 5/70.
        assert!(close(pass_hat_k(8, 5, 4).unwrap(), 5.0 / 70.0));
        // pass@4 = 1 - C(3,4)/C(8,4) = 1 (fewer than 4 failures).
        assert!(close(pass_at_k(8, 5, 4).unwrap(), 1.0));
        // pass@2 with 2 passes in 5: 1 - C(3,2)/C(5,2) = 1 - 3/10.
        assert!(close(pass_at_k(5, 2, 2).unwrap(), 0.7));
    }

    #[test]
    fn the_spec_s_seventy_five_percent_agent_passes_three_in_a_row_about_42_percent() {
        // With many trials the unbiased pass^k tends to p^k: 75 of 100 trials, k = 3.
        let estimate = pass_hat_k(100, 75, 3).unwrap();
        let expected = (75.0 * 74.0 * 73.0) / (100.0 * 99.0 * 98.0);
        assert!(close(estimate, expected));
        assert!((estimate - 0.75f64.powi(3)).abs() < 0.005, "{estimate}");
        assert!((0.41..0.43).contains(&estimate), "about 42 %: {estimate}");
    }

    #[test]
    fn a_k_beyond_the_trials_run_is_refused() {
        assert_eq!(pass_hat_k(3, 3, 5), Err(EstimateError::KBeyondTrials { k: 5, n: 3 }));
        assert_eq!(pass_at_k(3, 1, 0), Err(EstimateError::ZeroK));
        assert_eq!(pass_at_k(3, 4, 1), Err(EstimateError::MorePassesThanTrials { c: 4, n: 3 }));
        let trials = [trial("a", 0, true), trial("a", 1, true)];
        assert!(Report::of(&trials, 3).is_err(), "two trials cannot give pass^3");
        assert!(Report::of(&[], 1).is_err(), "no trials, no report");
    }

    #[test]
    fn a_report_lists_exactly_the_flaky_case_and_keeps_repairs_beside_accuracy() {
        let mut trials = Vec::new();
        for n in 0..4 {
            trials.push(trial("steady", n, true));
            trials.push(trial("broken", n, false));
            trials.push(trial("flaky", n, n % 2 == 0));
        }
        trials[0].repaired = true; // steady, trial 0: passed after a repair
        trials[3].reasked = true; // steady, trial 1: passed after a re-ask
        let report = Report::of(&trials, 2).unwrap();
        assert_eq!(report.flaky, ["flaky"]);
        assert_eq!(report.trials, 4);
        let flaky = report.cases.iter().find(|c| c.case == "flaky").unwrap();
        assert_eq!(flaky.results, [true, false, true, false]);
        assert!(close(flaky.pass_hat_k, 1.0 / 6.0), "C(2,2)/C(4,2)");
        assert!(close(flaky.pass_at_k, 1.0 - 1.0 / 6.0), "1 - C(2,2)/C(4,2)");
        // Means over the cases: pass@1 = (1 + 0 + 0.5) / 3, pass^2 = (1 + 0 + 1/6) / 3.
        assert!(close(report.pass_at_1, 0.5));
        assert!(close(report.pass_hat_k, (1.0 + 1.0 / 6.0) / 3.0));
        // 6 of 12 trials passed, 2 of them not cleanly.
        assert!(close(report.clean_pass_rate, 4.0 / 12.0));
        assert!(close(report.repair_rate, 1.0 / 12.0));
        assert!(close(report.reask_rate, 1.0 / 12.0));
        assert_eq!(report.tiers["primary"].trials, 12);
        let broken = report.cases.iter().find(|c| c.case == "broken").unwrap();
        assert_eq!(broken.failure.as_deref(), Some("missing `48 hours`"));
        assert!(!broken.flaky, "failing every time is not flaky");
    }
}
