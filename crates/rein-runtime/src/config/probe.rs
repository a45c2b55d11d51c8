//! `[probe]`: the golden-prompt probe. A fixed list of questions with known answers, sent through
//! the production path (the gateway's own HTTP endpoint, with a client key) on a schedule, every
//! `every_ms` (15 minutes by default) with ± `jitter` of it, each answer checked like an eval's
//! case (`rein_core::eval::Expect`) and tagged with the tier and model that answered. The online
//! judge sees whatever customers ask; the probe asks the same questions every time, so a change
//! in its score points at the system and away from the traffic.
//!
//! ```toml
//! [probe]
//! every_ms = 900000
//! [[probe.questions]]
//! id = "cutoff"
//! route = "support"
//! question = "Can I change my order?"
//! evidence = [{ id = "140", source = "search", text = "Changes close 48 hours before delivery." }]
//! expect = { contains = ["48 hours"] }
//! ```

use std::collections::BTreeSet;
use std::time::Duration;

use rein_core::eval::{EvidenceSpec, Expect};
use rein_core::problems::Problems;
use serde::{Deserialize, Serialize};

/// `[probe]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawProbe {
    pub every_ms: u64,
    /// The share of `every_ms` each wait varies by, either way (0 to 0.5).
    pub jitter: f64,
    /// Each question's deadline.
    pub timeout_ms: u64,
    /// The route of questions that name none.
    pub route: Option<String>,
    pub questions: Vec<RawQuestion>,
}

impl Default for RawProbe {
    fn default() -> Self {
        Self { every_ms: 900_000, jitter: 0.1, timeout_ms: 30_000, route: None, questions: vec![] }
    }
}

/// One `[[probe.questions]]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawQuestion {
    pub id: String,
    #[serde(default)]
    pub route: Option<String>,
    pub question: String,
    #[serde(default)]
    pub evidence: Vec<EvidenceSpec>,
    pub expect: Expect,
}

/// A probe question, validated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeQuestion {
    pub id: String,
    pub route: String,
    pub question: String,
    pub evidence: Vec<EvidenceSpec>,
    pub expect: Expect,
}

/// `[probe]`, validated. No questions: no probe runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeConfig {
    #[serde(rename = "every_ms", with = "rein_core::clock::millis")]
    pub every: Duration,
    pub jitter: f64,
    #[serde(rename = "timeout_ms", with = "rein_core::clock::millis")]
    pub timeout: Duration,
    pub questions: Vec<ProbeQuestion>,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        let mut problems = Problems::new();
        validate_probe(&RawProbe::default(), &BTreeSet::new(), &mut problems)
    }
}

impl ProbeConfig {
    /// The wait before the next run, for a jitter draw `unit` in [0, 1): `every` ± `jitter`.
    pub fn next_wait(&self, unit: f64) -> Duration {
        let spread = (unit.clamp(0.0, 1.0) * 2.0 - 1.0) * self.jitter;
        self.every.mul_f64((1.0 + spread).max(0.0))
    }
}

/// The longest probe id (it is a metric label).
const MAX_ID: usize = 64;

pub(super) fn validate_probe(
    raw: &RawProbe,
    routes: &BTreeSet<String>,
    problems: &mut Problems,
) -> ProbeConfig {
    if raw.every_ms < 1_000 {
        problems.add("probe.every_ms", "must be at least 1000 (one second)");
    }
    if !(0.0..=0.5).contains(&raw.jitter) {
        problems.add("probe.jitter", "must be between 0 and 0.5 (a share of every_ms)");
    }
    if raw.timeout_ms == 0 {
        problems.add("probe.timeout_ms", "must be at least 1");
    }
    let mut seen = BTreeSet::new();
    let mut questions = Vec::new();
    for (index, question) in raw.questions.iter().enumerate() {
        let at = format!("probe.questions[{index}]");
        let id_ok = !question.id.is_empty()
            && question.id.len() <= MAX_ID
            && question.id.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        if !id_ok {
            problems.add(
                format!("{at}.id"),
                format!("`{}` must be 1 to {MAX_ID} of a-z, A-Z, 0-9, `_`, `-`, `.`", question.id),
            );
        }
        if !seen.insert(question.id.clone()) {
            problems.add(format!("{at}.id"), format!("`{}` is used twice", question.id));
        }
        if question.question.trim().is_empty() {
            problems.add(format!("{at}.question"), "must not be empty");
        }
        if question.expect.is_empty() {
            problems.add(format!("{at}.expect"), "names no checker (contains, exact, json, rule)");
        }
        if question.expect.judge.is_some() {
            problems.add(
                format!("{at}.expect.judge"),
                "the probe checks answers without a model: use contains, exact, json or rule",
            );
        }
        let route = question.route.clone().or_else(|| raw.route.clone());
        match &route {
            None => problems.add(format!("{at}.route"), "names no route (nor does `probe.route`)"),
            Some(route) if !routes.contains(route) => {
                problems.add(format!("{at}.route"), format!("no route named `{route}`"))
            }
            Some(_) => {}
        }
        questions.push(ProbeQuestion {
            id: question.id.clone(),
            route: route.unwrap_or_default(),
            question: question.question.clone(),
            evidence: question.evidence.clone(),
            expect: question.expect.clone(),
        });
    }
    ProbeConfig {
        every: Duration::from_millis(raw.every_ms.max(1_000)),
        jitter: raw.jitter.clamp(0.0, 0.5),
        timeout: Duration::from_millis(raw.timeout_ms.max(1)),
        questions,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_wait_is_every_ms_give_or_take_the_jitter() {
        let probe = ProbeConfig { every: Duration::from_secs(900), ..ProbeConfig::default() };
        assert_eq!(probe.next_wait(0.5), Duration::from_secs(900));
        assert_eq!(probe.next_wait(0.0), Duration::from_secs(810));
        assert_eq!(probe.next_wait(1.0), Duration::from_secs(990));
        assert!(probe.questions.is_empty(), "no questions by default: no probe");
    }
}
