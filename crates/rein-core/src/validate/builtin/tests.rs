//! The built-in rules one by one: their exact sentences, their literal edges, their configs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::validate::RuleSet;
use crate::validate::evidence::EvidenceItem;
use serde_json::json;

fn search(ids_and_texts: &[(&str, &str)]) -> Evidence {
    Evidence::from_items(
        ids_and_texts.iter().map(|(id, text)| EvidenceItem::new("search", *id, *text)).collect(),
    )
}

fn flower_evidence() -> Evidence {
    search(&[
        ("118", "We deliver Monday to Saturday, 9 am to 6 pm."),
        ("140", "Changes close 48 hours before delivery."),
    ])
}

fn citations() -> CitedIdsReturned {
    CitedIdsReturned {
        ids_at: "/article_ids".into(),
        source: Some("search".into()),
        item: "article".into(),
    }
}

fn numbers() -> NumbersInCitedText {
    NumbersInCitedText {
        text_at: Some("/reply".into()),
        ids_at: Some("/article_ids".into()),
        item: "article".into(),
    }
}

fn messages(problems: &[Problem]) -> Vec<&str> {
    problems.iter().map(|problem| problem.message.as_str()).collect()
}

#[test]
fn an_invented_citation_names_the_allowed_ids() {
    let answer = Answer::json(json!({"article_ids": ["140", "212"]}));
    let problems = citations().evaluate(&answer, &flower_evidence());
    assert_eq!(
        problems,
        vec![Problem::rule(
            "cited_ids_returned",
            Some("/article_ids"),
            "article 212 was not in the search results; cite only 118 or 140"
        )]
    );
}

#[test]
fn several_invented_citations_and_no_results_read_as_sentences() {
    let answer = Answer::json(json!({"article_ids": ["212", 300, "212"]}));
    assert_eq!(
        messages(&citations().evaluate(&answer, &flower_evidence())),
        ["articles 212 and 300 were not in the search results; cite only 118 or 140"]
    );
    assert_eq!(
        messages(&citations().evaluate(&answer, &Evidence::new())),
        [
            "articles 212 and 300 were not in the search results; no articles were returned, so cite none"
        ]
    );
    let any_source = CitedIdsReturned { source: None, item: default_item(), ..citations() };
    assert_eq!(
        messages(
            &any_source.evaluate(&Answer::json(json!({"article_ids": "9"})), &flower_evidence())
        ),
        ["id 9 was not returned in this run; cite only 118 or 140"]
    );
}

#[test]
fn citations_from_another_source_do_not_count() {
    let evidence = flower_evidence().with(EvidenceItem::new("look_up_order", "212", ""));
    let answer = Answer::json(json!({"article_ids": [212]}));
    assert_eq!(citations().evaluate(&answer, &evidence).len(), 1);
    let any_source = CitedIdsReturned { source: None, ..citations() };
    assert_eq!(any_source.evaluate(&answer, &evidence), vec![]);
}

#[test]
fn no_citations_and_bad_shapes() {
    assert_eq!(citations().evaluate(&Answer::json(json!({})), &flower_evidence()), vec![]);
    assert_eq!(
        messages(
            &citations()
                .evaluate(&Answer::json(json!({"article_ids": [{"id": 1}]})), &flower_evidence())
        ),
        ["`/article_ids` must be a list of ids (strings or numbers)"]
    );
}

#[test]
fn numbers_are_found_as_the_course_regex_finds_them() {
    assert_eq!(
        numbers_in("48 hours, $7.99, 1.2.3, 10,000 and 3."),
        ["48", "7.99", "1.2", "3", "10", "000", "3"]
    );
    assert_eq!(numbers_in("two days"), Vec::<&str>::new());
    assert_eq!(numbers_in("A10234 on 14/2"), ["10234", "14", "2"]);
}

#[test]
fn a_wrong_number_is_flagged_with_the_cited_articles() {
    let answer = Answer::json(json!({
        "reply": "Changes close 24 hours before delivery.",
        "article_ids": ["140"]
    }));
    assert_eq!(
        numbers().evaluate(&answer, &flower_evidence()),
        vec![Problem::rule(
            "numbers_in_cited_text",
            Some("/reply"),
            "24 does not appear in the cited articles (140); state only numbers they give"
        )]
    );
}

#[test]
fn the_numbers_rule_is_literal_both_ways() {
    let check = |reply: &str| {
        numbers()
            .evaluate(
                &Answer::json(json!({"reply": reply, "article_ids": ["140"]})),
                &flower_evidence(),
            )
            .len()
    };
    assert_eq!(check("Changes close 48 hours before delivery."), 0);
    assert_eq!(check("Changes close two days before delivery."), 0);
    // A correct paraphrase with digits is flagged: the false positive the course warns of.
    assert_eq!(check("Changes close 2 days before delivery."), 1);
    // A wrong number that is a substring of a right one passes: "4" is inside "48".
    assert_eq!(check("Changes close 4 hours before delivery."), 0);
    // A number from an article that was not cited does not count.
    assert_eq!(check("We deliver until 6 pm."), 1);
}

#[test]
fn numbers_without_citations_or_without_pointers() {
    let answer = Answer::json(json!({"reply": "Order 10234 arrives at 9.", "article_ids": []}));
    assert_eq!(
        messages(&numbers().evaluate(&answer, &flower_evidence())),
        [
            "10234 does not appear in any cited article (none were cited); state only numbers the cited articles give",
            "9 does not appear in any cited article (none were cited); state only numbers the cited articles give",
        ]
    );
    let whole_run = NumbersInCitedText { text_at: None, ids_at: None, item: default_item() };
    assert_eq!(
        whole_run
            .evaluate(&Answer::text("open 9 to 6, closes 48 hours before"), &flower_evidence()),
        vec![]
    );
    assert_eq!(
        messages(&whole_run.evaluate(&Answer::text("7 days a week"), &flower_evidence())),
        ["7 does not appear in the evidence of this run; state only numbers it gives"]
    );
    let amount = Answer::json(json!({"reply": 50, "article_ids": ["140"]}));
    assert_eq!(numbers().evaluate(&amount, &flower_evidence()).len(), 1);
}

fn order_rule() -> IdMatchesTool {
    IdMatchesTool {
        id_at: "/order_id".into(),
        tool: "look_up_order".into(),
        tool_field: Some("/id".into()),
    }
}

fn order_evidence() -> Evidence {
    flower_evidence().with(
        EvidenceItem::new("look_up_order", "call_1", "Order A10234: 12 red roses")
            .with_fields(json!({"id": "A10234"})),
    )
}

#[test]
fn an_order_id_must_be_the_looked_up_one() {
    let rule = order_rule();
    let evidence = order_evidence();
    assert_eq!(rule.evaluate(&Answer::json(json!({"order_id": "A10234"})), &evidence), vec![]);
    assert_eq!(rule.evaluate(&Answer::json(json!({"order_id": null})), &evidence), vec![]);
    assert_eq!(rule.evaluate(&Answer::json(json!({})), &evidence), vec![]);
    assert_eq!(
        messages(&rule.evaluate(&Answer::json(json!({"order_id": "A99999"})), &evidence)),
        ["`/order_id` is \"A99999\", but look_up_order returned \"A10234\"; use \"A10234\""]
    );
    assert_eq!(
        messages(&rule.evaluate(&Answer::json(json!({"order_id": "A10234"})), &flower_evidence())),
        ["`/order_id` is \"A10234\", but look_up_order returned no id in this run; remove it"]
    );
    assert_eq!(
        messages(&rule.evaluate(&Answer::json(json!({"order_id": true})), &evidence)),
        ["`/order_id` must be an id (a string or a number)"]
    );
}

#[test]
fn without_a_field_the_evidence_id_is_the_tool_id() {
    let rule = IdMatchesTool { tool_field: None, ..order_rule() };
    let evidence = Evidence::new().with(EvidenceItem::new("look_up_order", "10234", ""));
    assert_eq!(rule.evaluate(&Answer::json(json!({"order_id": 10234})), &evidence), vec![]);
}

fn needs_human(when: Condition) -> FlagRequiredWhen {
    FlagRequiredWhen { flag_at: "/needs_human".into(), when }
}

#[test]
fn a_flag_must_be_true_when_its_condition_holds() {
    let customer =
        Evidence::new().with(EvidenceItem::new("customer", "m1", "I will call my LAWYER"));
    let rule = needs_human(Condition::EvidenceContainsAny {
        source: Some("customer".into()),
        phrases: vec!["lawyer".into(), "chargeback".into()],
    });
    assert_eq!(
        messages(&rule.evaluate(&Answer::json(json!({"needs_human": false})), &customer)),
        ["`/needs_human` must be true because evidence from customer mentions \"lawyer\""]
    );
    assert_eq!(rule.evaluate(&Answer::json(json!({"needs_human": true})), &customer), vec![]);
    assert_eq!(
        rule.evaluate(&Answer::json(json!({"needs_human": false})), &flower_evidence()),
        vec![]
    );
    // A missing flag is not true.
    assert_eq!(rule.evaluate(&Answer::json(json!({})), &customer).len(), 1);
}

#[test]
fn every_condition_kind() {
    let answer = Answer::json(json!({"reply": "A Refund is on its way", "needs_human": false}));
    let mentions =
        Condition::AnswerContainsAny { at: Some("/reply".into()), phrases: vec!["refund".into()] };
    assert_eq!(
        mentions.holds(&answer, &Evidence::new()),
        Some("the answer mentions \"refund\"".into())
    );
    let whole = Condition::AnswerContainsAny { at: None, phrases: vec!["on its WAY".into()] };
    assert!(whole.holds(&answer, &Evidence::new()).is_some());
    let anywhere =
        Condition::EvidenceContainsAny { source: None, phrases: vec!["48 HOURS".into()] };
    assert_eq!(
        anywhere.holds(&answer, &flower_evidence()),
        Some("the evidence mentions \"48 HOURS\"".into())
    );
    let present = Condition::EvidencePresent { source: "search".into() };
    assert_eq!(
        present.holds(&answer, &flower_evidence()),
        Some("search returned a result in this run".into())
    );
    assert_eq!(present.holds(&answer, &Evidence::new()), None);
    let absent = Condition::EvidenceAbsent { source: "look_up_order".into() };
    assert_eq!(
        absent.holds(&answer, &flower_evidence()),
        Some("look_up_order returned nothing in this run".into())
    );
    assert_eq!(absent.holds(&answer, &order_evidence()), None);
}

#[test]
fn rules_are_configured_from_plain_data() {
    let rules: Vec<BuiltinRule> = serde_json::from_value(json!([
        {"rule": "cited_ids_returned", "ids_at": "/article_ids", "source": "search", "item": "article"},
        {"rule": "numbers_in_cited_text", "text_at": "/reply", "ids_at": "/article_ids"},
        {"rule": "id_matches_tool", "id_at": "/order_id", "tool": "look_up_order", "tool_field": "/id"},
        {"rule": "flag_required_when", "flag_at": "/needs_human",
         "when": {"kind": "evidence_absent", "source": "search"}},
    ]))
    .unwrap();
    assert_eq!(rules[0], BuiltinRule::CitedIdsReturned(citations()));
    let set = RuleSet::from_builtin(rules);
    assert_eq!(
        set.names(),
        ["cited_ids_returned", "numbers_in_cited_text", "id_matches_tool", "flag_required_when"]
    );

    let typo =
        serde_json::from_value::<BuiltinRule>(json!({"rule": "cited_ids_returned", "ids": "/a"}));
    assert!(typo.is_err());
    let bad_condition = serde_json::from_value::<BuiltinRule>(json!({
        "rule": "flag_required_when", "flag_at": "/f", "when": {"kind": "evidence_absent", "sources": "x"}
    }));
    assert!(bad_condition.is_err());
}
