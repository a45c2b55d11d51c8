//! The judge: an optional last rung of the validation ladder, where a second model (another
//! route of the same engine) reads the answer beside the evidence and says whether the evidence
//! supports it. Its verdict is one signal: always recorded, and failing the answer only when the
//! route says so (otherwise it fails open, logged). A judge that cannot answer is a failed check.
//!
//! It holds the engine weakly, so a route whose contract uses a judge does not keep the engine
//! alive by itself.

use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;

use super::{Engine, Inner};
use crate::context::CallContext;
use crate::model::{ChatRequest, Message};
use crate::validate::{Answer, Evidence, Problem, ProblemKindSelector, Rule};

/// The rule's name in problems, selectors and metrics.
pub const JUDGE_RULE: &str = "judge";

const INSTRUCTIONS: &str = "You check answers against evidence. Read the evidence and the answer. \
If every claim in the answer is supported by the evidence, reply with exactly `supported`. \
Otherwise reply with exactly `not_supported`. Reply with that one word only.";

/// A rule that asks a judge route whether the evidence supports the answer.
#[derive(Debug, Clone)]
pub struct JudgeRule {
    engine: Weak<Inner>,
    route: String,
}

impl JudgeRule {
    /// A judge that calls `route` on `engine`.
    pub fn new(engine: &Engine, route: impl Into<String>) -> Self {
        Self { engine: Arc::downgrade(&engine.inner), route: route.into() }
    }

    /// The selector that makes the judge's verdict a recorded signal rather than a failure.
    pub fn advisory() -> ProblemKindSelector {
        ProblemKindSelector::new(format!("rule/{JUDGE_RULE}"), None)
    }

    fn question(answer: &Answer, evidence: &Evidence) -> ChatRequest {
        let mut prompt = String::from("Evidence:\n");
        for item in evidence.items() {
            prompt.push_str(&format!("[{}] {}\n", item.id, item.text));
        }
        if evidence.is_empty() {
            prompt.push_str("(none)\n");
        }
        prompt.push_str("\nAnswer:\n");
        prompt.push_str(&answer.text);
        ChatRequest {
            system: Some(INSTRUCTIONS.to_string()),
            messages: vec![Message::user(prompt)],
            max_tokens: Some(16),
            temperature: Some(0.0),
            ..ChatRequest::default()
        }
    }
}

impl Rule for JudgeRule {
    fn name(&self) -> &str {
        JUDGE_RULE
    }

    /// The judge's call is made on the checked call's behalf: it runs on that call's deadline
    /// (cut to the judge route's own), never on a fresh one.
    fn check<'a>(
        &'a self,
        ctx: &'a CallContext,
        answer: &'a Answer,
    ) -> BoxFuture<'a, Vec<Problem>> {
        Box::pin(async move {
            let Some(inner) = self.engine.upgrade() else {
                return vec![Problem::rule_unavailable(JUDGE_RULE, "the engine is gone")];
            };
            let engine = Engine { inner };
            let request = Self::question(answer, &ctx.evidence);
            match engine.complete(ctx.child(), &self.route, request).await {
                Ok(done) if done.report.served_by.is_some() => {
                    let verdict = done.response.text.trim().trim_matches('`').to_ascii_lowercase();
                    if verdict.starts_with("supported") {
                        Vec::new()
                    } else if verdict.starts_with("not_supported")
                        || verdict.starts_with("not supported")
                    {
                        vec![Problem::rule(
                            JUDGE_RULE,
                            None,
                            "a reviewer found claims in the answer that the evidence does not support; answer only from the evidence",
                        )]
                    } else {
                        let shown: String = verdict.chars().take(40).collect();
                        vec![Problem::rule_unavailable(
                            JUDGE_RULE,
                            &format!("unreadable verdict `{shown}`"),
                        )]
                    }
                }
                Ok(_) => vec![Problem::rule_unavailable(
                    JUDGE_RULE,
                    "the judge route gave its degraded reply",
                )],
                Err(error) => vec![Problem::rule_unavailable(JUDGE_RULE, &error.to_string())],
            }
        })
    }
}
