//! The validation ladder: the rungs run cheapest first, and each failure has an action decided in
//! advance. Stop reason (free: cut off → ask again with a higher ceiling, never parse; refusal →
//! the route's safe reply; content filter → the caller gets the reason), then parse with the
//! certain code repairs, then the route's JSON Schema, then the business rules. The result is a
//! [`Verdict`]; the engine acts on it (one re-ask with [`reask_message`], then fail closed).
//! Problems a route declares may fail open (a missing optional field) are moved aside, logged,
//! and the answer is used.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{ChatResponse, StopReason};

use super::repair::{CodeRepair, fix_enum_case, parse_with_repairs};
use super::rules::{Answer, Problem, ProblemKind, RuleSet};
use super::schema::CompiledSchema;
use crate::context::CallContext;

/// Which problems a route lets fail open: by problem label or family, and optionally only under
/// a JSON pointer. `{ kind = "schema/required", path_prefix = "/order_id" }` lets a missing
/// `order_id` through; `kind = "schema"` would let every schema problem through. A `not_json`
/// problem never fails open: there is no object to use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemKindSelector {
    /// A [`ProblemKind::label`] (`schema/required`, `rule/numbers_in_cited_text`) or the family
    /// before its slash (`schema`, `rule`).
    pub kind: String,
    /// Only problems at this JSON pointer or below it (segment-wise: `/order` does not cover
    /// `/order_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
}

impl ProblemKindSelector {
    pub fn new(kind: impl Into<String>, path_prefix: Option<&str>) -> Self {
        Self { kind: kind.into(), path_prefix: path_prefix.map(str::to_string) }
    }

    pub fn matches(&self, problem: &Problem) -> bool {
        if problem.kind == ProblemKind::NotJson {
            return false;
        }
        let label = problem.kind.label();
        let kind_matches = label == self.kind
            || label.strip_prefix(self.kind.as_str()).is_some_and(|rest| rest.starts_with('/'));
        let path_matches = match (&self.path_prefix, &problem.path) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(prefix), Some(path)) => {
                path == prefix
                    || path.strip_prefix(prefix.as_str()).is_some_and(|rest| rest.starts_with('/'))
            }
        };
        kind_matches && path_matches
    }
}

/// What a route expects of an answer.
#[derive(Debug, Clone, Default)]
pub struct OutputContract {
    /// The answer must be JSON (implied by a schema).
    pub json: bool,
    pub schema: Option<CompiledSchema>,
    pub rules: RuleSet,
    pub fail_open: Vec<ProblemKindSelector>,
}

impl OutputContract {
    /// A plain-text answer with no checks beyond the stop reason.
    pub fn text() -> Self {
        Self::default()
    }

    /// A JSON answer, checked against the schema when there is one.
    pub fn json(schema: Option<CompiledSchema>) -> Self {
        Self { json: true, schema, ..Self::default() }
    }

    pub fn with_rules(mut self, rules: RuleSet) -> Self {
        self.rules = rules;
        self
    }

    pub fn with_fail_open(mut self, selector: ProblemKindSelector) -> Self {
        self.fail_open.push(selector);
        self
    }

    /// Whether the parse rung runs: JSON was asked for, or a schema given.
    pub fn expects_json(&self) -> bool {
        self.json || self.schema.is_some()
    }

    fn fails_open(&self, problem: &Problem) -> bool {
        self.fail_open.iter().any(|selector| selector.matches(problem))
    }
}

/// The ladder's decision about one answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Cut off at the token ceiling: not parsed. Ask again once with a higher ceiling
    /// ([`raised_ceiling`]).
    CutOff,
    /// The model declined (stop reason or refusal text): the route's safe reply, counted as a
    /// refusal. Holds the model's refusal text, when it gave one.
    Refused { refusal: Option<String> },
    /// The provider's content filter withheld the output: the caller gets that reason.
    Filtered,
    /// The answer can be used. `text` is what the caller gets (the JSON text after repairs, or
    /// the original text when nothing was repaired); `failed_open` holds the problems the route
    /// let through, already logged.
    Pass { text: String, json: Option<Value>, repairs: Vec<CodeRepair>, failed_open: Vec<Problem> },
    /// The answer cannot be used. `problems` names every problem found at the rung that failed
    /// (including any the route would have let fail open), for the re-ask.
    Fail { problems: Vec<Problem>, repairs: Vec<CodeRepair> },
}

impl Verdict {
    /// A stable name for reports and metrics: `cut_off`, `refused`, `filtered`, `pass`, `fail`.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::CutOff => "cut_off",
            Verdict::Refused { .. } => "refused",
            Verdict::Filtered => "filtered",
            Verdict::Pass { .. } => "pass",
            Verdict::Fail { .. } => "fail",
        }
    }

    pub fn is_pass(&self) -> bool {
        matches!(self, Verdict::Pass { .. })
    }
}

/// Run the ladder over a provider's response: the stop-reason rung, then [`check_output`].
/// This is the ladder of a turn that answers; a turn that stops to call tools
/// ([`super::is_tool_call_turn`]) takes the stop-reason rung and then the tool-call rung
/// ([`super::check_tool_calls`]) instead, never the output contract.
pub async fn check_answer(
    ctx: &CallContext,
    response: &ChatResponse,
    contract: &OutputContract,
) -> Verdict {
    if let Some(verdict) = check_stop(response) {
        return verdict;
    }
    check_output(ctx, &response.text, contract).await
}

/// The stop-reason rung, free and first for every turn: `Some` when the turn is settled by how
/// it stopped (cut off, filtered, refused), `None` when it goes on to the next rung.
pub fn check_stop(response: &ChatResponse) -> Option<Verdict> {
    match &response.stop_reason {
        Some(StopReason::MaxTokens) => return Some(Verdict::CutOff),
        Some(StopReason::ContentFilter) => return Some(Verdict::Filtered),
        Some(StopReason::Refusal) => {
            return Some(Verdict::Refused { refusal: response.refusal.clone() });
        }
        Some(
            StopReason::EndTurn
            | StopReason::StopSequence
            | StopReason::ToolUse
            | StopReason::PauseTurn
            | StopReason::Other(_),
        )
        | None => {}
    }
    if response.refusal.is_some() {
        return Some(Verdict::Refused { refusal: response.refusal.clone() });
    }
    None
}

/// Run the parse, repair, schema and rule rungs over an answer's text.
/// The rules get the call's context: its evidence, and its deadline, which no rule outlives.
pub async fn check_output(ctx: &CallContext, text: &str, contract: &OutputContract) -> Verdict {
    if !contract.expects_json() {
        let answer = Answer::text(text);
        let problems = contract.rules.check(ctx, &answer).await;
        return settle(contract, answer, Vec::new(), Vec::new(), problems);
    }

    let repaired = parse_with_repairs(text);
    let mut repairs = repaired.repairs;
    let mut value = match repaired.json {
        Ok(value) => value,
        Err(problem) => return Verdict::Fail { problems: vec![problem], repairs },
    };
    let mut text = repaired.text;

    let mut failed_open = Vec::new();
    // Most answers satisfy the schema: one pass that builds no error says so, where the enum
    // repair and the problems would each be a pass collecting every error.
    if let Some(schema) = contract.schema.as_ref().filter(|schema| !schema.is_valid(&value)) {
        let fixes = fix_enum_case(&mut value, schema);
        if !fixes.is_empty() {
            text = value.to_string();
            repairs.extend(fixes);
        }
        let problems = schema.validate(&value);
        if problems.iter().any(|problem| !contract.fails_open(problem)) {
            return Verdict::Fail { problems, repairs };
        }
        failed_open = problems;
    }

    let answer = Answer { text, json: Some(value) };
    let problems = contract.rules.check(ctx, &answer).await;
    settle(contract, answer, repairs, failed_open, problems)
}

/// The last rung's problems decide: any the route does not let fail open is a failure.
fn settle(
    contract: &OutputContract,
    answer: Answer,
    repairs: Vec<CodeRepair>,
    mut failed_open: Vec<Problem>,
    problems: Vec<Problem>,
) -> Verdict {
    if problems.iter().any(|problem| !contract.fails_open(problem)) {
        return Verdict::Fail { problems, repairs };
    }
    failed_open.extend(problems);
    for problem in &failed_open {
        tracing::warn!(
            problem = %problem.kind,
            path = problem.path.as_deref().unwrap_or(""),
            message = %problem.message,
            "answer used despite a problem the route lets fail open"
        );
    }
    Verdict::Pass { text: answer.text, json: answer.json, repairs, failed_open }
}

/// The instruction a re-ask sends after the failed output: every problem's exact sentence.
pub fn reask_message(problems: &[Problem], expects_json: bool) -> String {
    let closing = if expects_json {
        "Answer again with only the corrected JSON."
    } else {
        "Answer again with only the corrected answer."
    };
    let sentence = |message: &str| {
        let message = message.trim_end();
        if message.ends_with(['.', '!', '?']) { message.to_string() } else { format!("{message}.") }
    };
    match problems {
        [] => closing.to_string(),
        [only] => {
            format!("Your previous answer had this problem: {} {closing}", sentence(&only.message))
        }
        many => {
            let lines: Vec<String> =
                many.iter().map(|problem| format!("- {}", sentence(&problem.message))).collect();
            format!("Your previous answer had these problems:\n{}\n{closing}", lines.join("\n"))
        }
    }
}

/// The ceiling for the one re-ask after a cut-off answer: double `current` (the `max_tokens`
/// that cut it off), at most `cap`. `None` when `current` is already at the cap: asking again
/// would be cut off the same way.
pub fn raised_ceiling(current: u32, cap: u32) -> Option<u32> {
    let raised = current.saturating_mul(2).max(1).min(cap);
    (raised > current).then_some(raised)
}

#[cfg(test)]
mod tests;
