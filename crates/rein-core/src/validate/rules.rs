//! The business-rule rung and the vocabulary every rung reports in. A [`Problem`] is one thing
//! wrong with an answer, with the exact sentence a re-ask will send ("article 212 was not in the
//! search results; cite only 118 or 140"). A [`Rule`] checks an [`Answer`] against the
//! [`Evidence`] of the run; the built-in rules live in `builtin.rs`, library users implement the
//! trait, and the gateway's HTTP webhook rule implements it too (a webhook that fails or times out
//! reports [`ProblemKind::RuleUnavailable`]: a failed check, never a pass). A [`RuleSet`] runs its
//! rules in order and collects every problem, so one re-ask can name them all.

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::builtin::BuiltinRule;
use crate::context::CallContext;

/// Which rung found a problem, and for rules, which rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// JSON was expected and the text is not JSON, even after the certain code fixes.
    NotJson,
    /// The answer breaks the route's JSON Schema; holds the schema keyword (`enum`, `required`).
    Schema(String),
    /// A business rule found the answer wrong; holds the rule's name.
    Rule(String),
    /// A rule could not run (a webhook that failed or timed out); holds the rule's name. The
    /// answer is not accepted: an unavailable check is a failed check.
    RuleUnavailable(String),
    /// A turn's tool call is unusable (an undeclared tool, arguments that are not one JSON
    /// object or break the tool's parameters schema); holds what is wrong (`unknown_tool`,
    /// `arguments_not_json`, `schema/required`).
    ToolCall(String),
}

impl ProblemKind {
    /// A stable label for logs, metrics and fail-open selectors: `not_json`, `schema/enum`,
    /// `rule/cited_ids_returned`, `rule_unavailable/fraud_webhook`, `tool_call/unknown_tool`.
    pub fn label(&self) -> String {
        match self {
            ProblemKind::NotJson => "not_json".to_string(),
            ProblemKind::Schema(keyword) => format!("schema/{keyword}"),
            ProblemKind::Rule(name) => format!("rule/{name}"),
            ProblemKind::RuleUnavailable(name) => format!("rule_unavailable/{name}"),
            ProblemKind::ToolCall(what) => format!("tool_call/{what}"),
        }
    }
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// One thing wrong with an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    pub kind: ProblemKind,
    /// JSON pointer into the answer where the problem is, when it has a place ("" is the top
    /// level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The exact sentence a re-ask sends the model.
    pub message: String,
}

impl Problem {
    pub fn new(kind: ProblemKind, path: Option<String>, message: impl Into<String>) -> Self {
        Self { kind, path, message: message.into() }
    }

    /// A problem found by the named rule.
    pub fn rule(name: &str, path: Option<&str>, message: impl Into<String>) -> Self {
        Self::new(ProblemKind::Rule(name.to_string()), path.map(str::to_string), message)
    }

    /// The named rule could not run; `detail` says what happened (timed out, status 500).
    pub fn rule_unavailable(name: &str, detail: &str) -> Self {
        Self::new(
            ProblemKind::RuleUnavailable(name.to_string()),
            None,
            format!("the check `{name}` could not run ({detail}), so the answer was not accepted"),
        )
    }
}

/// The answer a rule checks: the text as the caller would get it, and its JSON when the route
/// expects JSON (after the certain code repairs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answer {
    pub text: String,
    pub json: Option<Value>,
}

impl Answer {
    /// A plain-text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), json: None }
    }

    /// A JSON answer; its text is the compact serialization.
    pub fn json(json: Value) -> Self {
        Self { text: json.to_string(), json: Some(json) }
    }

    /// The value at a JSON pointer of the answer's JSON, if any. `None` for a text answer.
    pub fn at(&self, pointer: &str) -> Option<&Value> {
        self.json.as_ref().and_then(|json| json.pointer(pointer))
    }
}

/// A business rule. Rules are pure checks of an answer against what rein saw in this run (the
/// context's [`CallContext::evidence`]); the future lets a rule ask something outside (the
/// webhook rule, the judge), and such a rule cuts its own timeout to the context's deadline and
/// reports [`Problem::rule_unavailable`] when it cannot answer in time.
pub trait Rule: Send + Sync {
    /// Stable name, used in [`ProblemKind::Rule`], logs, metrics and fail-open selectors.
    fn name(&self) -> &str;

    /// Every problem the rule finds; empty means the answer passes this rule.
    fn check<'a>(&'a self, ctx: &'a CallContext, answer: &'a Answer)
    -> BoxFuture<'a, Vec<Problem>>;
}

/// An ordered set of rules for a route.
#[derive(Clone, Default)]
pub struct RuleSet {
    rules: Vec<Arc<dyn Rule>>,
}

impl fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.rules.iter().map(|rule| rule.name())).finish()
    }
}

impl RuleSet {
    /// No rules: every answer passes this rung.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a rule at the end.
    pub fn push(&mut self, rule: Arc<dyn Rule>) {
        self.rules.push(rule);
    }

    /// The same set with one more rule at the end (builder form).
    pub fn with(mut self, rule: impl Rule + 'static) -> Self {
        self.rules.push(Arc::new(rule));
        self
    }

    /// The same set without the rules of this name.
    pub fn without(mut self, name: &str) -> Self {
        self.rules.retain(|rule| rule.name() != name);
        self
    }

    /// The rules' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.rules.iter().map(|rule| rule.name()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// A rule set of built-in rules, in this order (as a route's config lists them).
    pub fn from_builtin(rules: impl IntoIterator<Item = BuiltinRule>) -> Self {
        let mut set = RuleSet::new();
        for rule in rules {
            set.push(Arc::new(rule));
        }
        set
    }

    /// Run every rule in order and collect all their problems.
    pub async fn check(&self, ctx: &CallContext, answer: &Answer) -> Vec<Problem> {
        let mut problems = Vec::new();
        for rule in &self.rules {
            problems.extend(rule.check(ctx, answer).await);
        }
        problems
    }
}

impl FromIterator<Arc<dyn Rule>> for RuleSet {
    fn from_iter<T: IntoIterator<Item = Arc<dyn Rule>>>(iter: T) -> Self {
        Self { rules: iter.into_iter().collect() }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use futures_util::FutureExt;
    use serde_json::json;

    /// A rule a library user might write: replies must not promise a refund.
    struct NoRefundPromises;

    impl Rule for NoRefundPromises {
        fn name(&self) -> &str {
            "no_refund_promises"
        }

        fn check<'a>(
            &'a self,
            _ctx: &'a CallContext,
            answer: &'a Answer,
        ) -> BoxFuture<'a, Vec<Problem>> {
            let promises = answer
                .at("/reply")
                .and_then(Value::as_str)
                .is_some_and(|reply| reply.contains("we will refund"));
            let problems = if promises {
                vec![Problem::rule(self.name(), Some("/reply"), "do not promise a refund")]
            } else {
                vec![]
            };
            Box::pin(std::future::ready(problems))
        }
    }

    /// A rule whose backend is down, as the webhook rule reports it.
    struct Unreachable;

    impl Rule for Unreachable {
        fn name(&self) -> &str {
            "fraud_webhook"
        }

        fn check<'a>(&'a self, _: &'a CallContext, _: &'a Answer) -> BoxFuture<'a, Vec<Problem>> {
            Box::pin(async move {
                vec![Problem::rule_unavailable(self.name(), "timed out after 300 ms")]
            })
        }
    }

    #[test]
    fn a_rule_set_runs_every_rule_in_order_and_collects_problems() {
        let rules = RuleSet::new().with(NoRefundPromises).with(Unreachable);
        assert_eq!(rules.names(), ["no_refund_promises", "fraud_webhook"]);
        let answer = Answer::json(json!({"reply": "Sorry! we will refund you."}));
        let problems = rules.check(&CallContext::new(), &answer).now_or_never().unwrap();
        assert_eq!(
            problems.iter().map(|p| p.kind.label()).collect::<Vec<_>>(),
            ["rule/no_refund_promises", "rule_unavailable/fraud_webhook"]
        );
        assert_eq!(
            problems[1].message,
            "the check `fraud_webhook` could not run (timed out after 300 ms), so the answer was not accepted"
        );
        let fewer = rules.without("fraud_webhook");
        assert_eq!(fewer.len(), 1);
        assert_eq!(format!("{fewer:?}"), "[\"no_refund_promises\"]");
    }

    #[test]
    fn problem_kinds_have_stable_labels_and_serialize_plainly() {
        assert_eq!(ProblemKind::NotJson.to_string(), "not_json");
        assert_eq!(ProblemKind::Schema("enum".into()).label(), "schema/enum");
        let problem = Problem::rule("cited_ids_returned", Some("/article_ids"), "x");
        let value = serde_json::to_value(&problem).unwrap();
        assert_eq!(
            value,
            json!({"kind": {"rule": "cited_ids_returned"}, "path": "/article_ids", "message": "x"})
        );
        assert_eq!(serde_json::from_value::<Problem>(value).unwrap(), problem);
    }

    #[test]
    fn answer_pointers_read_the_json() {
        let answer = Answer::json(json!({"article_ids": ["140"]}));
        assert_eq!(answer.at("/article_ids/0"), Some(&json!("140")));
        assert_eq!(Answer::text("hi").at("/reply"), None);
    }
}
