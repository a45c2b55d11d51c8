//! The coverage check: before the agent drafts an answer, one call to a small model (a route of
//! its own) that reads the question and the retrieved passages and answers with one label,
//! `covered` or `not_covered`. The probability the model gave its label is the score, read from
//! the answer's token log probabilities; a provider that returns none (Anthropic) is asked
//! `samples` times instead, and the share of samples that say `covered` is the score. The
//! verdict records which method produced it. Below the route's cutoff the agent declines: a
//! clarifying question when the message matches one of the route's ambiguous intents, else a
//! hand-off. The cutoff comes from the eval dataset (the spec: 0.8 for policy questions).

use serde::{Deserialize, Serialize};

use crate::chain::{CallError, Engine};
use crate::context::CallContext;
use crate::model::{ChatRequest, ChatResponse, Message};
use crate::validate::EvidenceItem;

/// The label for evidence that answers the question.
pub const COVERED: &str = "covered";
/// The label for evidence that does not.
pub const NOT_COVERED: &str = "not_covered";

/// The longest passage text the check sends, per passage (characters).
const PASSAGE_CHARS: usize = 4_000;

/// A route's coverage check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoverageCheck {
    /// The route that judges coverage (a small model whose provider returns logprobs).
    pub route: String,
    /// The least score that lets the agent answer.
    pub cutoff: f64,
    /// Samples asked for when the answer carries no logprobs.
    pub samples: u32,
    /// What a question under the cutoff gets when no ambiguous intent matches it.
    pub decline: Decline,
    /// Intents that are unclear rather than uncovered: a message containing one of `contains`
    /// (case-insensitive) gets `ask` instead of a hand-off.
    pub ambiguous: Vec<Ambiguity>,
}

impl Default for CoverageCheck {
    fn default() -> Self {
        Self {
            route: String::new(),
            cutoff: 0.8,
            samples: 5,
            decline: Decline::Handoff,
            ambiguous: Vec::new(),
        }
    }
}

/// What declining means for a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decline {
    /// Send the conversation to a person.
    #[default]
    Handoff,
    /// Ask the customer what they mean (the matching ambiguity's question, else the first's).
    Clarify,
}

/// An intent that could mean several things ("can I change my order": the address or the date).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ambiguity {
    pub contains: Vec<String>,
    pub ask: String,
}

/// How a score was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The label token's probability.
    Logprobs,
    /// Agreement across samples.
    Samples,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Logprobs => "logprobs",
            Method::Samples => "samples",
        }
    }
}

/// The check's verdict on one question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The probability that the evidence covers the question, in [0, 1].
    pub score: f64,
    pub cutoff: f64,
    /// `score >= cutoff`.
    pub covered: bool,
    pub method: Method,
    /// The label the model gave (the majority label, by samples).
    pub label: String,
    /// Model calls the check made.
    pub calls: u32,
}

/// What the agent does with a verdict under the cutoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Declined {
    /// Ask the customer this.
    Clarify(String),
    /// Send the conversation to a person.
    Handoff,
}

impl CoverageCheck {
    /// The request the check sends: the question and the passages, one label back.
    pub fn request(&self, question: &str, passages: &[EvidenceItem]) -> ChatRequest {
        let mut listed = String::new();
        for (n, item) in passages.iter().enumerate() {
            let text: String = item.text.chars().take(PASSAGE_CHARS).collect();
            listed.push_str(&format!("[{}] ({}) {}\n", n + 1, item.id, text));
        }
        if passages.is_empty() {
            listed.push_str("(none)\n");
        }
        ChatRequest {
            system: Some(format!(
                "You check whether the passages answer the customer's question. Reply with exactly one label: `{COVERED}` if the passages state the answer, `{NOT_COVERED}` if they do not (a passage about something close is not enough)."
            )),
            messages: vec![Message::user(format!(
                "Question: {question}\n\nPassages:\n{listed}\nLabel:"
            ))],
            max_tokens: Some(4),
            temperature: Some(0.0),
            logprobs: Some(5),
            ..ChatRequest::default()
        }
    }

    /// Judge `question` against `passages` through the engine's coverage route.
    pub async fn judge(
        &self,
        engine: &Engine,
        ctx: &CallContext,
        question: &str,
        passages: &[EvidenceItem],
    ) -> Result<Verdict, CallError> {
        let request = self.request(question, passages);
        let first = engine.complete(ctx.child(), &self.route, request.clone()).await?;
        if let Some(score) = label_score(&first.response) {
            return Ok(self.verdict(score, Method::Logprobs, label(&first.response.text), 1));
        }
        // No logprobs: agreement across samples (the first answer is one of them).
        let mut labels = vec![label(&first.response.text)];
        let mut sampled = request;
        sampled.temperature = Some(1.0);
        sampled.logprobs = None;
        let rest = self.samples.max(1).saturating_sub(1);
        let answers = futures_util::future::join_all(
            (0..rest).map(|_| engine.complete(ctx.child(), &self.route, sampled.clone())),
        )
        .await;
        for answer in answers {
            labels.push(label(&answer?.response.text));
        }
        let covered = labels.iter().filter(|l| l.as_str() == COVERED).count();
        let score = covered as f64 / labels.len() as f64;
        let majority = if covered * 2 > labels.len() { COVERED } else { NOT_COVERED };
        let calls = u32::try_from(labels.len()).unwrap_or(u32::MAX);
        Ok(self.verdict(score, Method::Samples, majority.to_string(), calls))
    }

    fn verdict(&self, score: f64, method: Method, label: String, calls: u32) -> Verdict {
        let score = score.clamp(0.0, 1.0);
        Verdict { score, cutoff: self.cutoff, covered: score >= self.cutoff, method, label, calls }
    }

    /// What a message under the cutoff gets.
    pub fn declined(&self, message: &str) -> Declined {
        let lower = message.to_lowercase();
        let matching = self.ambiguous.iter().find(|ambiguity| {
            ambiguity.contains.iter().any(|phrase| lower.contains(&phrase.to_lowercase()))
        });
        match (matching, self.decline) {
            (Some(ambiguity), _) => Declined::Clarify(ambiguity.ask.clone()),
            (None, Decline::Clarify) => match self.ambiguous.first() {
                Some(ambiguity) => Declined::Clarify(ambiguity.ask.clone()),
                None => Declined::Handoff,
            },
            (None, Decline::Handoff) => Declined::Handoff,
        }
    }
}

/// The label an answer gives: `covered`, `not_covered`, or `unknown` for anything else (which
/// counts as not covered).
pub fn label(text: &str) -> String {
    let word: String = text
        .trim()
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '_')
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ' ' || *c == '-')
        .collect::<String>()
        .to_lowercase()
        .replace([' ', '-'], "_");
    if word.starts_with(NOT_COVERED) || word.starts_with("not_") || word == "not" {
        NOT_COVERED.to_string()
    } else if word.starts_with(COVERED) {
        COVERED.to_string()
    } else {
        "unknown".to_string()
    }
}

/// The probability that the evidence covers the question, from the answer's first token's log
/// probability: `p` for a `covered` label, `1 - p` for `not_covered`, 0 for anything else. None
/// when the answer carries no logprobs.
pub fn label_score(response: &ChatResponse) -> Option<f64> {
    let first = response.logprobs.iter().find(|token| !token.token.trim().is_empty())?;
    let p = first.logprob.min(0.0).exp();
    Some(match label(&response.text).as_str() {
        COVERED => p,
        NOT_COVERED => 1.0 - p,
        _ => 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TokenLogprob;

    fn answer(text: &str, logprob: Option<f64>) -> ChatResponse {
        ChatResponse {
            text: text.to_string(),
            logprobs: logprob
                .map(|lp| vec![TokenLogprob { token: text.to_string(), logprob: lp, top: vec![] }])
                .unwrap_or_default(),
            ..ChatResponse::default()
        }
    }

    #[test]
    fn labels_are_read_loosely_and_anything_else_is_unknown() {
        assert_eq!(label("covered"), COVERED);
        assert_eq!(label(" `Covered`."), COVERED);
        assert_eq!(label("not_covered"), NOT_COVERED);
        assert_eq!(label("Not covered"), NOT_COVERED);
        assert_eq!(label("sim answer 1a2b: w1"), "unknown");
    }

    #[test]
    fn the_label_probability_is_the_score() {
        let covered = label_score(&answer("covered", Some(-0.05))).unwrap();
        assert!((covered - (-0.05f64).exp()).abs() < 1e-9);
        let not = label_score(&answer("not_covered", Some(-0.05))).unwrap();
        assert!((not - (1.0 - (-0.05f64).exp())).abs() < 1e-9);
        assert_eq!(label_score(&answer("banana", Some(-0.01))), Some(0.0));
        assert_eq!(label_score(&answer("covered", None)), None, "no logprobs: no score");
    }

    #[test]
    fn an_ambiguous_intent_gets_its_question_and_the_rest_a_hand_off() {
        let check = CoverageCheck {
            ambiguous: vec![Ambiguity {
                contains: vec!["change my order".into()],
                ask: "Do you want to change the delivery address or the date?".into(),
            }],
            ..CoverageCheck::default()
        };
        assert_eq!(
            check.declined("Can I CHANGE MY ORDER?"),
            Declined::Clarify("Do you want to change the delivery address or the date?".into())
        );
        assert_eq!(check.declined("Can flowers go to an ICU?"), Declined::Handoff);
    }

    #[test]
    fn the_request_lists_every_passage_and_asks_for_logprobs() {
        let check = CoverageCheck::default();
        let passages = [
            EvidenceItem::new("search", "140", "Hospital deliveries go to the front desk."),
            EvidenceItem::new("search", "118", "We deliver to hospitals daily."),
        ];
        let request = check.request("Can flowers go to an ICU?", &passages);
        let text = &request.messages[0].content;
        assert!(text.contains("[1] (140) Hospital deliveries") && text.contains("[2] (118)"));
        assert_eq!(request.logprobs, Some(5));
    }
}
