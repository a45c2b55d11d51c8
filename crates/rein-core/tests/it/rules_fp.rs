//! Test the rules before trusting them: the built-in business rules run over a labelled set of
//! the flower shop's answers (`tests/data/labelled_answers.json`). On the correct answers every
//! flag is a false positive, and the counts per rule are asserted, so the trade-off of a literal
//! rule is visible and any change to it shows up here. On the wrong answers the rules must catch
//! what they can; the two they miss are recorded as misses.

use std::collections::BTreeMap;

use rein_core::CallContext;
use rein_core::validate::{
    BuiltinRule, CitedIdsReturned, CompiledSchema, Evidence, EvidenceItem, OutputContract, Problem,
    RuleSet, Verdict, check_output,
};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LabelledSet {
    #[allow(dead_code)]
    about: String,
    articles: BTreeMap<String, String>,
    orders: BTreeMap<String, Order>,
    rules: Vec<BuiltinRule>,
    correct: Vec<Case>,
    wrong: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Order {
    text: String,
    fields: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    customer: String,
    search: Vec<String>,
    #[serde(default)]
    looked_up: Vec<String>,
    answer: Value,
    flagged_by: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)]
    note: Option<String>,
}

fn labelled_set() -> LabelledSet {
    serde_json::from_str(include_str!("../data/labelled_answers.json")).unwrap()
}

impl LabelledSet {
    /// What rein saw in the case's run: the customer's message, the articles search returned,
    /// the orders look_up_order returned.
    fn evidence(&self, case: &Case) -> Evidence {
        let mut evidence =
            Evidence::new().with(EvidenceItem::new("customer", "message", case.customer.as_str()));
        for id in &case.search {
            let text = self.articles.get(id).unwrap_or_else(|| panic!("no article {id}"));
            evidence.push(EvidenceItem::new("search", id.as_str(), text.as_str()));
        }
        for id in &case.looked_up {
            let order = self.orders.get(id).unwrap_or_else(|| panic!("no order {id}"));
            evidence.push(
                EvidenceItem::new("look_up_order", id.as_str(), order.text.as_str())
                    .with_fields(order.fields.clone()),
            );
        }
        evidence
    }

    fn rule_set(&self) -> RuleSet {
        RuleSet::from_builtin(self.rules.clone())
    }
}

async fn problems(rules: &RuleSet, set: &LabelledSet, case: &Case) -> Vec<Problem> {
    let answer = rein_core::validate::Answer::json(case.answer.clone());
    rules.check(&CallContext::new().evidence(set.evidence(case)), &answer).await
}

/// The distinct rule names that flagged the case, in rule order.
fn flagged_by(problems: &[Problem]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for problem in problems {
        let name = problem.kind.label().trim_start_matches("rule/").to_string();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

#[tokio::test]
async fn false_positives_of_each_rule_on_correct_answers() {
    let set = labelled_set();
    let rules = set.rule_set();
    assert!(set.correct.len() >= 20);

    let mut per_rule: BTreeMap<String, usize> =
        set.rules.iter().map(|rule| (rule.rule_name().to_string(), 0)).collect();
    let mut flagged_answers = 0;
    for case in &set.correct {
        let flagged = flagged_by(&problems(&rules, &set, case).await);
        assert_eq!(flagged, case.flagged_by, "case {} (update its flagged_by and note)", case.name);
        for name in &flagged {
            *per_rule.entry(name.clone()).or_default() += 1;
        }
        if !flagged.is_empty() {
            flagged_answers += 1;
        }
    }

    #[allow(clippy::print_stdout)]
    {
        println!("false positives on {} correct answers:", set.correct.len());
        for (rule, count) in &per_rule {
            println!("  {rule}: {count}");
        }
        println!("  answers flagged by any rule: {flagged_answers}");
    }

    let expected: BTreeMap<String, usize> = [
        ("cited_ids_returned", 1),
        ("numbers_in_cited_text", 7),
        ("id_matches_tool", 1),
        ("flag_required_when", 1),
    ]
    .into_iter()
    .map(|(rule, count)| (rule.to_string(), count))
    .collect();
    assert_eq!(per_rule, expected);
    assert_eq!((flagged_answers, set.correct.len()), (9, 27));
}

#[tokio::test]
async fn wrong_answers_are_caught_except_the_recorded_misses() {
    let set = labelled_set();
    let rules = set.rule_set();
    assert!(set.wrong.len() >= 5);

    let mut caught = 0;
    for case in &set.wrong {
        let flagged = flagged_by(&problems(&rules, &set, case).await);
        assert_eq!(flagged, case.flagged_by, "case {}", case.name);
        if !flagged.is_empty() {
            caught += 1;
        }
    }
    assert_eq!((caught, set.wrong.len()), (8, 10));
}

#[tokio::test]
async fn the_invented_citation_gets_the_sentence_a_reask_sends() {
    let set = labelled_set();
    let case = set.wrong.iter().find(|case| case.name == "valentines_week_failure").unwrap();
    let messages: Vec<String> =
        problems(&set.rule_set(), &set, case).await.into_iter().map(|p| p.message).collect();
    assert_eq!(
        messages,
        [
            "article 212 was not in the search results; cite only 118 or 140",
            "24 does not appear in the cited articles (212); state only numbers they give",
        ]
    );
}

#[tokio::test]
async fn without_the_citation_rule_the_invented_citation_passes() {
    let set = labelled_set();
    let case = set.wrong.iter().find(|case| case.name == "invented_citation_212").unwrap();
    let full = set.rule_set();
    assert_eq!(flagged_by(&problems(&full, &set, case).await), ["cited_ids_returned"]);

    let without = full.without(CitedIdsReturned::NAME);
    assert_eq!(without.len(), 3);
    assert_eq!(problems(&without, &set, case).await, vec![]);
}

/// The same answers through the whole ladder with the agent's schema: they are well-formed, so
/// each one passes exactly when no rule flags it.
#[tokio::test]
async fn through_the_ladder_an_answer_passes_exactly_when_no_rule_flags_it() {
    let set = labelled_set();
    let schema = CompiledSchema::new(&json!({
        "type": "object",
        "properties": {
            "reply": {"type": "string"},
            "article_ids": {"type": "array", "items": {"type": "string"}},
            "order_id": {"type": ["string", "null"]},
            "needs_human": {"type": "boolean"}
        },
        "required": ["reply", "article_ids", "order_id", "needs_human"],
        "additionalProperties": false
    }))
    .unwrap();
    let contract = OutputContract::json(Some(schema)).with_rules(set.rule_set());
    for case in set.correct.iter().chain(&set.wrong) {
        let text = case.answer.to_string();
        let verdict =
            check_output(&CallContext::new().evidence(set.evidence(case)), &text, &contract).await;
        match &verdict {
            Verdict::Pass { repairs, failed_open, .. } => {
                assert!(case.flagged_by.is_empty(), "case {} passed", case.name);
                assert!(repairs.is_empty() && failed_open.is_empty(), "case {}", case.name);
            }
            Verdict::Fail { problems, .. } => {
                assert_eq!(flagged_by(problems), case.flagged_by, "case {}", case.name)
            }
            other => panic!("case {}: {other:?}", case.name),
        }
    }
}
