//! The built-in business rules, each configured per route by JSON pointers into the answer (serde
//! configs with `deny_unknown_fields`, so the gateway can read them from TOML as
//! `rule = "cited_ids_returned"` tables):
//!
//! - [`CitedIdsReturned`]: every cited id is among the ids returned in this run.
//! - [`NumbersInCitedText`]: every number in the answer appears in the cited text.
//! - [`IdMatchesTool`]: an id in the answer equals the id a named tool returned.
//! - [`FlagRequiredWhen`]: a flag (such as `needs_human`) is true when a condition holds.
//!
//! They are deliberately literal. The numbers rule is the one the course writes — every match of
//! `\d+(?:\.\d+)?` in the answer must occur as a substring of the cited texts — so it flags a
//! correct "2 days" for an article that says "48 hours", and misses a wrong "4 hours" because
//! "4" is inside "48". Making it smarter would hide that trade-off; the false-positive test over
//! `tests/data/labelled_answers.json` measures it instead.

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::evidence::Evidence;
use super::rules::{Answer, Problem, Rule};
use super::schema::describe_path;
use crate::context::CallContext;

fn default_item() -> String {
    "id".to_string()
}

/// Every id the answer cites at `ids_at` is among the ids returned in this run (by `source`
/// only, when given). An absent or null field cites nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CitedIdsReturned {
    /// JSON pointer to the cited ids: a list of strings or numbers, or a single one.
    pub ids_at: String,
    /// Only ids from this tool or caller source count (e.g. `search`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// What one id names in messages ("article"); "id" by default.
    #[serde(default = "default_item")]
    pub item: String,
}

impl CitedIdsReturned {
    pub const NAME: &'static str = "cited_ids_returned";

    pub fn evaluate(&self, answer: &Answer, evidence: &Evidence) -> Vec<Problem> {
        let cited = match ids_at(answer, &self.ids_at, Self::NAME) {
            Ok(cited) => cited,
            Err(problem) => return vec![problem],
        };
        let allowed: Vec<&str> = match &self.source {
            Some(source) => unique(evidence.ids_from(source)),
            None => unique(evidence.ids()),
        };
        let bad: Vec<&str> =
            unique(cited.iter().map(String::as_str).filter(|id| !allowed.contains(id)));
        if bad.is_empty() {
            return vec![];
        }
        let place = match &self.source {
            Some(source) => format!("in the {source} results"),
            None => "returned in this run".to_string(),
        };
        let what = if bad.len() == 1 {
            format!("{} {} was not {place}", self.item, bad.join(""))
        } else {
            format!("{}s {} were not {place}", self.item, english_list(&bad, "and"))
        };
        let instead = if allowed.is_empty() {
            format!("no {}s were returned, so cite none", self.item)
        } else {
            format!("cite only {}", english_list(&allowed, "or"))
        };
        vec![Problem::rule(Self::NAME, Some(&self.ids_at), format!("{what}; {instead}"))]
    }
}

/// Every number in the answer's text (each match of `\d+(?:\.\d+)?`, ASCII digits) occurs as a
/// substring of the cited evidence texts joined together. Exactly the course's rule; see the
/// module notes for what it gets wrong on purpose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumbersInCitedText {
    /// JSON pointer to the text to check (a string, or a number checked as written); absent
    /// means the answer's whole text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_at: Option<String>,
    /// JSON pointer to the cited ids; absent means every evidence text of the run counts as
    /// cited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids_at: Option<String>,
    /// What one id names in messages ("article"); "id" by default.
    #[serde(default = "default_item")]
    pub item: String,
}

impl NumbersInCitedText {
    pub const NAME: &'static str = "numbers_in_cited_text";

    pub fn evaluate(&self, answer: &Answer, evidence: &Evidence) -> Vec<Problem> {
        let text = match &self.text_at {
            None => answer.text.clone(),
            Some(pointer) => match answer.at(pointer) {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Number(number)) => number.to_string(),
                _ => return vec![],
            },
        };
        let (cited_text, cited_ids) = match &self.ids_at {
            None => {
                let texts: Vec<&str> =
                    evidence.items().iter().map(|item| item.text.as_str()).collect();
                (texts.join(" "), None)
            }
            Some(pointer) => {
                let cited = match ids_at(answer, pointer, Self::NAME) {
                    Ok(cited) => cited,
                    Err(problem) => return vec![problem],
                };
                let texts: Vec<&str> = evidence
                    .items()
                    .iter()
                    .filter(|item| cited.contains(&item.id))
                    .map(|item| item.text.as_str())
                    .collect();
                (texts.join(" "), Some(cited))
            }
        };
        let path = self.text_at.as_deref();
        unique(numbers_in(&text).into_iter().filter(|number| !cited_text.contains(number)))
            .into_iter()
            .map(|number| {
                let message = match &cited_ids {
                    None => format!(
                        "{number} does not appear in the evidence of this run; state only numbers it gives"
                    ),
                    Some(ids) if ids.is_empty() => format!(
                        "{number} does not appear in any cited {} (none were cited); state only numbers the cited {}s give",
                        self.item, self.item
                    ),
                    Some(ids) => {
                        let ids: Vec<&str> = unique(ids.iter().map(String::as_str));
                        format!(
                            "{number} does not appear in the cited {}s ({}); state only numbers they give",
                            self.item,
                            english_list(&ids, "and")
                        )
                    }
                };
                Problem::rule(Self::NAME, path, message)
            })
            .collect()
    }
}

/// The id at `id_at`, when the answer has one (absent or null passes), equals an id the named
/// tool returned in this run: its evidence item's id, or the field at `tool_field` of its
/// structured result. An id in the answer when the tool returned nothing is a problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdMatchesTool {
    /// JSON pointer to the id in the answer (e.g. `/order_id`).
    pub id_at: String,
    /// The tool whose result the id must match (e.g. `look_up_order`).
    pub tool: String,
    /// JSON pointer into the tool result's fields (e.g. `/id`); absent means the evidence
    /// item's own id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_field: Option<String>,
}

impl IdMatchesTool {
    pub const NAME: &'static str = "id_matches_tool";

    pub fn evaluate(&self, answer: &Answer, evidence: &Evidence) -> Vec<Problem> {
        let id = match answer.at(&self.id_at) {
            None | Some(Value::Null) => return vec![],
            Some(value) => match id_text(value) {
                Some(id) => id,
                None => {
                    let message = format!(
                        "{} must be an id (a string or a number)",
                        describe_path(&self.id_at)
                    );
                    return vec![Problem::rule(Self::NAME, Some(&self.id_at), message)];
                }
            },
        };
        let returned: Vec<String> = evidence
            .from_tool(&self.tool)
            .filter_map(|item| match &self.tool_field {
                None => Some(item.id.clone()),
                Some(pointer) => item.fields.pointer(pointer).and_then(id_text),
            })
            .collect();
        if returned.contains(&id) {
            return vec![];
        }
        let returned: Vec<String> = unique(returned.iter().map(String::as_str))
            .into_iter()
            .map(|id| format!("\"{id}\""))
            .collect();
        let returned: Vec<&str> = returned.iter().map(String::as_str).collect();
        let message = if returned.is_empty() {
            format!(
                "{} is \"{id}\", but {} returned no id in this run; remove it",
                describe_path(&self.id_at),
                self.tool
            )
        } else {
            format!(
                "{} is \"{id}\", but {} returned {}; use {}",
                describe_path(&self.id_at),
                self.tool,
                english_list(&returned, "and"),
                english_list(&returned, "or")
            )
        };
        vec![Problem::rule(Self::NAME, Some(&self.id_at), message)]
    }
}

/// When does a flag have to be set. Phrase matches are case-insensitive substrings, so
/// "human" also matches "humane": keep phrases specific.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Condition {
    /// The answer (the string at `at`, or its whole text) contains one of the phrases.
    AnswerContainsAny {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<String>,
        phrases: Vec<String>,
    },
    /// Some evidence text (from `source` only, when given; e.g. the customer's message passed
    /// as evidence) contains one of the phrases.
    EvidenceContainsAny {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        phrases: Vec<String>,
    },
    /// The source returned something in this run.
    EvidencePresent { source: String },
    /// The source returned nothing in this run.
    EvidenceAbsent { source: String },
}

impl Condition {
    /// Why the condition holds, as a clause for the message; `None` when it does not hold.
    pub fn holds(&self, answer: &Answer, evidence: &Evidence) -> Option<String> {
        match self {
            Condition::AnswerContainsAny { at, phrases } => {
                let text = match at {
                    None => Some(answer.text.as_str()),
                    Some(pointer) => answer.at(pointer).and_then(Value::as_str),
                }?;
                let phrase = first_phrase_in(text, phrases)?;
                Some(format!("the answer mentions \"{phrase}\""))
            }
            Condition::EvidenceContainsAny { source, phrases } => {
                let phrase = evidence
                    .items()
                    .iter()
                    .filter(|item| source.as_ref().is_none_or(|source| &item.source == source))
                    .find_map(|item| first_phrase_in(&item.text, phrases))?;
                Some(match source {
                    Some(source) => format!("evidence from {source} mentions \"{phrase}\""),
                    None => format!("the evidence mentions \"{phrase}\""),
                })
            }
            Condition::EvidencePresent { source } => evidence
                .has_source(source)
                .then(|| format!("{source} returned a result in this run")),
            Condition::EvidenceAbsent { source } => (!evidence.has_source(source))
                .then(|| format!("{source} returned nothing in this run")),
        }
    }
}

/// The flag at `flag_at` must be `true` whenever `when` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlagRequiredWhen {
    /// JSON pointer to the boolean flag (e.g. `/needs_human`).
    pub flag_at: String,
    pub when: Condition,
}

impl FlagRequiredWhen {
    pub const NAME: &'static str = "flag_required_when";

    pub fn evaluate(&self, answer: &Answer, evidence: &Evidence) -> Vec<Problem> {
        if answer.at(&self.flag_at) == Some(&Value::Bool(true)) {
            return vec![];
        }
        match self.when.holds(answer, evidence) {
            None => vec![],
            Some(reason) => vec![Problem::rule(
                Self::NAME,
                Some(&self.flag_at),
                format!("{} must be true because {reason}", describe_path(&self.flag_at)),
            )],
        }
    }
}

/// Any built-in rule, as a route's config names it: `{"rule": "cited_ids_returned", ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum BuiltinRule {
    CitedIdsReturned(CitedIdsReturned),
    NumbersInCitedText(NumbersInCitedText),
    IdMatchesTool(IdMatchesTool),
    FlagRequiredWhen(FlagRequiredWhen),
}

impl BuiltinRule {
    /// The rule's name, as in [`super::ProblemKind::Rule`].
    pub fn rule_name(&self) -> &'static str {
        match self {
            BuiltinRule::CitedIdsReturned(_) => CitedIdsReturned::NAME,
            BuiltinRule::NumbersInCitedText(_) => NumbersInCitedText::NAME,
            BuiltinRule::IdMatchesTool(_) => IdMatchesTool::NAME,
            BuiltinRule::FlagRequiredWhen(_) => FlagRequiredWhen::NAME,
        }
    }

    /// Check now; built-in rules never wait on anything.
    pub fn evaluate(&self, answer: &Answer, evidence: &Evidence) -> Vec<Problem> {
        match self {
            BuiltinRule::CitedIdsReturned(rule) => rule.evaluate(answer, evidence),
            BuiltinRule::NumbersInCitedText(rule) => rule.evaluate(answer, evidence),
            BuiltinRule::IdMatchesTool(rule) => rule.evaluate(answer, evidence),
            BuiltinRule::FlagRequiredWhen(rule) => rule.evaluate(answer, evidence),
        }
    }
}

macro_rules! rule_from_evaluate {
    ($($rule:ty => $name:expr),* $(,)?) => {$(
        impl Rule for $rule {
            fn name(&self) -> &str {
                $name
            }

            fn check<'a>(
                &'a self,
                ctx: &'a CallContext,
                answer: &'a Answer,
            ) -> BoxFuture<'a, Vec<Problem>> {
                Box::pin(std::future::ready(self.evaluate(answer, &ctx.evidence)))
            }
        }
    )*};
}

rule_from_evaluate! {
    CitedIdsReturned => CitedIdsReturned::NAME,
    NumbersInCitedText => NumbersInCitedText::NAME,
    IdMatchesTool => IdMatchesTool::NAME,
    FlagRequiredWhen => FlagRequiredWhen::NAME,
}

impl Rule for BuiltinRule {
    fn name(&self) -> &str {
        self.rule_name()
    }

    fn check<'a>(
        &'a self,
        ctx: &'a CallContext,
        answer: &'a Answer,
    ) -> BoxFuture<'a, Vec<Problem>> {
        Box::pin(std::future::ready(self.evaluate(answer, &ctx.evidence)))
    }
}

/// Every match of `\d+(?:\.\d+)?` in the text, in order, as Python's `re.findall` returns them
/// (ASCII digits only).
pub fn numbers_in(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let is_digit = |index: usize| bytes.get(index).is_some_and(u8::is_ascii_digit);
    let mut numbers = Vec::new();
    let mut index = 0;
    while index < bytes.len() {
        if !is_digit(index) {
            index += 1;
            continue;
        }
        let start = index;
        while is_digit(index) {
            index += 1;
        }
        if bytes.get(index) == Some(&b'.') && is_digit(index + 1) {
            index += 1;
            while is_digit(index) {
                index += 1;
            }
        }
        if let Some(number) = text.get(start..index) {
            numbers.push(number);
        }
    }
    numbers
}

/// The ids at a pointer: absent or null is none; a string or number is one; a list of strings
/// and numbers is each. Anything else is a problem for the named rule.
fn ids_at(answer: &Answer, pointer: &str, rule: &str) -> Result<Vec<String>, Problem> {
    let not_ids = || {
        Problem::rule(
            rule,
            Some(pointer),
            format!("{} must be a list of ids (strings or numbers)", describe_path(pointer)),
        )
    };
    match answer.at(pointer) {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(values)) => {
            values.iter().map(|value| id_text(value).ok_or_else(not_ids)).collect()
        }
        Some(value) => id_text(value).map(|id| vec![id]).ok_or_else(not_ids),
    }
}

/// An id as text: a string as is, a number as JSON writes it.
fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// The items without repeats, first occurrence kept.
fn unique<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen
}

/// "118", "118 or 140", "118, 140 or 212".
fn english_list(items: &[&str], conjunction: &str) -> String {
    match items {
        [] => String::new(),
        [only] => (*only).to_string(),
        [rest @ .., last] => format!("{} {conjunction} {last}", rest.join(", ")),
    }
}

/// The first phrase that occurs in the text, ignoring case.
fn first_phrase_in<'a>(text: &str, phrases: &'a [String]) -> Option<&'a str> {
    let text = text.to_lowercase();
    phrases
        .iter()
        .find(|phrase| !phrase.is_empty() && text.contains(&phrase.to_lowercase()))
        .map(String::as_str)
}

#[cfg(test)]
mod tests;
