//! The quality score: what the online judge reads of live answers. Which answers are sampled
//! ([`Sampling::draw`]: a route's share, raised to a slice's share for calls carrying its
//! labels, each sampled answer keeping the probability it was drawn with), the rubric prompt a
//! judge route answers and how its verdict is read ([`rubric_prompt`], [`read_verdict`]: shared
//! with `rein eval`'s `judge` checker), and the score over a sample ([`weighted_mean`]): each
//! verdict weighs 1/p, so a slice judged at 100 % while someone investigates it does not pull
//! the route's score toward that slice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The rubric the online judge uses when a route names none: the spec's two criteria for
/// answers drawn from articles.
pub const DEFAULT_RUBRIC: &str = "Every claim in the answer is supported by the evidence, and any \
cutoff, time limit or price the answer states matches the evidence exactly.";

/// One slice sampled at its own share: calls carrying every one of `labels`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    pub labels: BTreeMap<String, String>,
    pub share: f64,
}

/// How a route's answers are sampled for the judge.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// The share of the route's answers judged (0 to 1).
    pub share: f64,
    /// Slices judged at a higher share (e.g. 100 % of one question type while investigating).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<Slice>,
}

/// A sampled answer's draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draw {
    /// The probability the answer was sampled with.
    pub probability: f64,
    /// Also inside the route's own share: part of the route's unbiased sample (a slice's extra
    /// draws are not).
    pub base: bool,
}

impl Sampling {
    /// The share a call with `labels` is sampled at: the route's, or the highest of the slices
    /// it belongs to.
    pub fn probability(&self, labels: &BTreeMap<String, String>) -> f64 {
        self.slices
            .iter()
            .filter(|slice| slice.labels.iter().all(|(key, value)| labels.get(key) == Some(value)))
            .map(|slice| slice.share)
            .fold(self.share, f64::max)
    }

    /// Whether a call with `labels` is sampled, for a uniform draw `u` in [0, 1).
    pub fn draw(&self, labels: &BTreeMap<String, String>, u: f64) -> Option<Draw> {
        let probability = self.probability(labels);
        (u < probability).then_some(Draw { probability, base: u < self.share })
    }
}

/// The prompt a judge route answers PASS or FAIL: the rubric, the question (when known), the
/// evidence (`[id] text` per item) and the answer.
pub fn rubric_prompt(
    rubric: &str,
    question: Option<&str>,
    evidence: &[(String, String)],
    answer: &str,
) -> String {
    let mut prompt = format!("You check an answer against a rubric.\nRubric: {rubric}\n");
    if let Some(question) = question {
        prompt.push_str(&format!("Question:\n{question}\n"));
    }
    prompt.push_str("Evidence:\n");
    if evidence.is_empty() {
        prompt.push_str("(none)\n");
    }
    for (id, text) in evidence {
        prompt.push_str(&format!("[{id}] {text}\n"));
    }
    prompt.push_str(&format!("Answer:\n{answer}\n\nReply with one word: PASS or FAIL."));
    prompt
}

/// A judge's reply read as a verdict: its first word, PASS (true) or FAIL (false), ignoring
/// case and punctuation; anything else is no verdict.
pub fn read_verdict(reply: &str) -> Option<bool> {
    let word = reply.split_whitespace().next()?;
    let word = word.trim_matches(|c: char| !c.is_ascii_alphabetic()).to_ascii_uppercase();
    match word.as_str() {
        "PASS" => Some(true),
        "FAIL" => Some(false),
        _ => None,
    }
}

/// The mean of `(score, probability)` pairs, each weighted by 1/probability (the Hájek
/// estimator of the whole traffic's mean from an unequal-probability sample); `None` for no
/// scores. A probability outside (0, 1] counts as 1.
pub fn weighted_mean(scores: impl IntoIterator<Item = (f64, f64)>) -> Option<f64> {
    let (mut sum, mut weights) = (0.0, 0.0);
    for (score, probability) in scores {
        let weight = if probability > 0.0 && probability <= 1.0 { 1.0 / probability } else { 1.0 };
        sum += score * weight;
        weights += weight;
    }
    (weights > 0.0).then(|| sum / weights)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_slice_raises_the_share_and_its_extra_draws_are_not_the_routes_sample() {
        let sampling = Sampling {
            share: 0.05,
            slices: vec![Slice { labels: labels(&[("topic", "icu")]), share: 1.0 }],
        };
        let icu = labels(&[("topic", "icu"), ("lang", "en")]);
        let other = labels(&[("topic", "delivery")]);
        assert_eq!(sampling.probability(&icu), 1.0);
        assert_eq!(sampling.probability(&other), 0.05);
        assert_eq!(sampling.draw(&icu, 0.5), Some(Draw { probability: 1.0, base: false }));
        assert_eq!(sampling.draw(&icu, 0.01), Some(Draw { probability: 1.0, base: true }));
        assert_eq!(sampling.draw(&other, 0.5), None);
        assert_eq!(sampling.draw(&other, 0.04), Some(Draw { probability: 0.05, base: true }));
        // A slice needs every one of its labels.
        let partial = Sampling {
            share: 0.0,
            slices: vec![Slice { labels: labels(&[("topic", "icu"), ("lang", "de")]), share: 1.0 }],
        };
        assert_eq!(partial.draw(&icu, 0.0), None);
        assert_eq!(Sampling::default().draw(&icu, 0.0), None, "share 0 samples nothing");
    }

    #[test]
    fn verdicts_are_the_first_word() {
        assert_eq!(read_verdict("PASS"), Some(true));
        assert_eq!(read_verdict("  fail: the cutoff is wrong"), Some(false));
        assert_eq!(read_verdict("**Pass**."), Some(true));
        assert_eq!(read_verdict("I think it passes"), None);
        assert_eq!(read_verdict(""), None);
    }

    #[test]
    fn the_prompt_names_rubric_question_evidence_and_answer() {
        let evidence = vec![("140".to_string(), "Changes close 48 hours before.".to_string())];
        let prompt = rubric_prompt("cites it", Some("Can I change?"), &evidence, "Any time.");
        assert!(prompt.contains("Rubric: cites it\nQuestion:\nCan I change?\n"), "{prompt}");
        assert!(prompt.contains("[140] Changes close 48 hours before.\nAnswer:\nAny time.\n"));
        assert!(rubric_prompt("r", None, &[], "a").contains("Evidence:\n(none)\n"));
    }

    #[test]
    fn the_weighted_mean_undoes_an_oversampled_slice() {
        // 95 delivery answers judged at 5 % (say 5 judged, all pass) and the ICU slice judged at
        // 100 % (10 judged, all fail): unweighted the score would be 5/15 = 0.33; weighted, the
        // 5 passes stand for 100 answers and the 10 fails for 10: 100/110.
        let mut scores = vec![(1.0, 0.05); 5];
        scores.extend(vec![(0.0, 1.0); 10]);
        let mean = weighted_mean(scores).unwrap();
        assert!((mean - 100.0 / 110.0).abs() < 1e-12, "{mean}");
        assert_eq!(weighted_mean(vec![(0.5, 1.0), (1.0, 1.0)]), Some(0.75));
        assert_eq!(weighted_mean(Vec::new()), None);
    }
}
