//! The ladder end to end on the support agent's contract: each rung's decided action, the code
//! repairs, fail-open selectors and the re-ask sentence.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::context::CallContext;
use crate::validate::builtin::{CitedIdsReturned, NumbersInCitedText};
use crate::validate::evidence::{Evidence, EvidenceItem};
use futures_util::FutureExt;
use serde_json::json;

fn support_schema() -> CompiledSchema {
    CompiledSchema::new(&json!({
        "type": "object",
        "properties": {
            "reply": {"type": "string"},
            "article_ids": {"type": "array", "items": {"type": "string"}},
            "reason": {"enum": ["refund", "delivery", "other"]},
            "order_id": {"type": ["string", "null"]},
            "needs_human": {"type": "boolean"}
        },
        "required": ["reply", "article_ids", "needs_human", "order_id"],
        "additionalProperties": false
    }))
    .unwrap()
}

fn support_contract() -> OutputContract {
    let rules = RuleSet::new()
        .with(CitedIdsReturned {
            ids_at: "/article_ids".into(),
            source: Some("search".into()),
            item: "article".into(),
        })
        .with(NumbersInCitedText {
            text_at: Some("/reply".into()),
            ids_at: Some("/article_ids".into()),
            item: "article".into(),
        });
    OutputContract::json(Some(support_schema())).with_rules(rules)
}

fn ctx() -> CallContext {
    CallContext::new().evidence(evidence())
}

fn evidence() -> Evidence {
    Evidence::new()
        .with(EvidenceItem::new("search", "118", "We deliver Monday to Saturday, 9 am to 6 pm."))
        .with(EvidenceItem::new("search", "140", "Changes close 48 hours before delivery."))
}

fn response(text: &str, stop: Option<StopReason>) -> ChatResponse {
    ChatResponse { text: text.into(), stop_reason: stop, ..ChatResponse::default() }
}

fn check(text: &str, contract: &OutputContract) -> Verdict {
    check_answer(&ctx(), &response(text, Some(StopReason::EndTurn)), contract)
        .now_or_never()
        .unwrap()
}

const GOOD: &str = r#"{"reply": "Changes close 48 hours before delivery.", "article_ids": ["140"], "order_id": null, "needs_human": false}"#;

#[test]
fn a_good_answer_passes_unchanged() {
    match check(GOOD, &support_contract()) {
        Verdict::Pass { text, json, repairs, failed_open } => {
            assert_eq!(text, GOOD);
            assert_eq!(json.unwrap()["article_ids"], json!(["140"]));
            assert_eq!(repairs, vec![]);
            assert_eq!(failed_open, vec![]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cut_off_answer_is_never_parsed() {
    let cut = response(r#"{"reply": "Changes close 48 ho"#, Some(StopReason::MaxTokens));
    let verdict = check_answer(&ctx(), &cut, &support_contract()).now_or_never().unwrap();
    assert_eq!(verdict, Verdict::CutOff);
    assert_eq!(verdict.label(), "cut_off");
    // Even a complete-looking answer cut off at the ceiling is not used.
    let looks_whole = response(GOOD, Some(StopReason::MaxTokens));
    assert_eq!(
        check_answer(&ctx(), &looks_whole, &support_contract()).now_or_never().unwrap(),
        Verdict::CutOff
    );
}

#[test]
fn refusals_and_filtered_output_have_their_own_verdicts() {
    let contract = support_contract();
    let by_stop = response("", Some(StopReason::Refusal));
    assert_eq!(
        check_answer(&ctx(), &by_stop, &contract).now_or_never().unwrap(),
        Verdict::Refused { refusal: None }
    );
    let by_field = ChatResponse {
        refusal: Some("I can't help with that.".into()),
        ..response("", Some(StopReason::EndTurn))
    };
    assert_eq!(
        check_answer(&ctx(), &by_field, &contract).now_or_never().unwrap(),
        Verdict::Refused { refusal: Some("I can't help with that.".into()) }
    );
    let filtered = response("", Some(StopReason::ContentFilter));
    assert_eq!(
        check_answer(&ctx(), &filtered, &contract).now_or_never().unwrap(),
        Verdict::Filtered
    );
}

#[test]
fn certain_repairs_are_applied_once_and_recorded() {
    let text = "```json\n{\"reply\": \"Changes close 48 hours before delivery.\", \"article_ids\": [\"140\"], \"reason\": \"Delivery\", \"order_id\": null, \"needs_human\": false}\n```\nLet me know if there is anything else!";
    match check(text, &support_contract()) {
        Verdict::Pass { text, json, repairs, .. } => {
            assert_eq!(
                repairs,
                vec![
                    CodeRepair::StrippedCodeFence,
                    CodeRepair::DroppedTrailingProse {
                        dropped: "Let me know if there is anything else!".into()
                    },
                    CodeRepair::FixedEnumCase {
                        path: "/reason".into(),
                        from: "Delivery".into(),
                        to: "delivery".into()
                    },
                ]
            );
            let json = json.unwrap();
            assert_eq!(json["reason"], "delivery");
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn text_that_is_not_json_fails_at_the_parse_rung() {
    match check("Changes close 48 hours before delivery.", &support_contract()) {
        Verdict::Fail { problems, repairs } => {
            assert_eq!(repairs, vec![]);
            assert_eq!(problems.len(), 1);
            assert_eq!(problems[0].kind, ProblemKind::NotJson);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn schema_problems_stop_the_ladder_before_the_rules() {
    // The citation is invented too, but the rules never see a malformed answer.
    let text = r#"{"reply": "x", "article_ids": ["212"], "reason": "refunds", "order_id": null, "needs_human": false}"#;
    match check(text, &support_contract()) {
        Verdict::Fail { problems, .. } => {
            assert_eq!(
                problems.iter().map(|p| p.kind.label()).collect::<Vec<_>>(),
                ["schema/enum"]
            );
            assert_eq!(
                problems[0].message,
                "`/reason`: \"refunds\" is not one of \"refund\", \"delivery\", \"other\""
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rule_problems_fail_the_answer_with_every_sentence() {
    let text = r#"{"reply": "Changes close 24 hours before delivery.", "article_ids": ["140", "212"], "order_id": null, "needs_human": false}"#;
    match check(text, &support_contract()) {
        Verdict::Fail { problems, repairs } => {
            assert_eq!(repairs, vec![]);
            assert_eq!(
                reask_message(&problems, true),
                "Your previous answer had these problems:\n\
                 - article 212 was not in the search results; cite only 118 or 140.\n\
                 - 24 does not appear in the cited articles (140 and 212); state only numbers they give.\n\
                 Answer again with only the corrected JSON."
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_declared_fail_open_problem_is_used_and_kept_aside() {
    let missing_order = r#"{"reply": "Changes close 48 hours before delivery.", "article_ids": ["140"], "needs_human": false}"#;
    assert!(!check(missing_order, &support_contract()).is_pass());

    let lenient = support_contract()
        .with_fail_open(ProblemKindSelector::new("schema/required", Some("/order_id")));
    match check(missing_order, &lenient) {
        Verdict::Pass { failed_open, .. } => {
            assert_eq!(failed_open.len(), 1);
            assert_eq!(failed_open[0].path.as_deref(), Some("/order_id"));
        }
        other => panic!("{other:?}"),
    }

    // The selector does not cover other problems: a missing flag still fails closed.
    let missing_flag = r#"{"reply": "ok", "article_ids": [], "order_id": null}"#;
    assert!(!check(missing_flag, &lenient).is_pass());
}

#[test]
fn selectors_match_by_label_family_and_path_segment() {
    let problem = Problem::new(
        ProblemKind::Schema("required".into()),
        Some("/order_id".into()),
        "`/order_id` is required but missing",
    );
    assert!(ProblemKindSelector::new("schema", None).matches(&problem));
    assert!(ProblemKindSelector::new("schema/required", Some("/order_id")).matches(&problem));
    assert!(ProblemKindSelector::new("schema/required", Some("")).matches(&problem));
    assert!(!ProblemKindSelector::new("schema/req", None).matches(&problem));
    assert!(!ProblemKindSelector::new("schema/required", Some("/order")).matches(&problem));
    assert!(!ProblemKindSelector::new("rule", None).matches(&problem));
    let not_json = Problem::new(ProblemKind::NotJson, None, "x");
    assert!(!ProblemKindSelector::new("not_json", None).matches(&not_json));

    let parsed: ProblemKindSelector =
        serde_json::from_value(json!({"kind": "schema/required", "path_prefix": "/order_id"}))
            .unwrap();
    assert_eq!(parsed, ProblemKindSelector::new("schema/required", Some("/order_id")));
    assert!(
        serde_json::from_value::<ProblemKindSelector>(json!({"kind": "x", "path": "/a"})).is_err()
    );
}

#[test]
fn a_rule_can_fail_open_when_the_route_says_so() {
    let text = r#"{"reply": "Changes close 2 days before delivery.", "article_ids": ["140"], "order_id": null, "needs_human": false}"#;
    assert!(!check(text, &support_contract()).is_pass());
    let lenient = support_contract()
        .with_fail_open(ProblemKindSelector::new("rule/numbers_in_cited_text", None));
    match check(text, &lenient) {
        Verdict::Pass { failed_open, .. } => assert_eq!(failed_open.len(), 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_text_route_runs_only_its_rules() {
    let contract = OutputContract::text();
    assert_eq!(
        check("Changes close two days before delivery.", &contract),
        Verdict::Pass {
            text: "Changes close two days before delivery.".into(),
            json: None,
            repairs: vec![],
            failed_open: vec![],
        }
    );
    let with_numbers = OutputContract::text().with_rules(RuleSet::new().with(NumbersInCitedText {
        text_at: None,
        ids_at: None,
        item: "article".into(),
    }));
    assert!(!check("Changes close 24 hours before delivery.", &with_numbers).is_pass());
    assert!(check("Changes close 48 hours before delivery.", &with_numbers).is_pass());
}

#[test]
fn json_without_a_schema_is_parsed_and_repaired() {
    let contract = OutputContract::json(None);
    match check("```\n{\"a\": 1}\n```", &contract) {
        Verdict::Pass { json, repairs, .. } => {
            assert_eq!(json, Some(json!({"a": 1})));
            assert_eq!(repairs, vec![CodeRepair::StrippedCodeFence]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_reask_names_one_problem_as_a_sentence() {
    let problems = vec![Problem::rule(
        "cited_ids_returned",
        Some("/article_ids"),
        "article 212 was not in the search results; cite only 118 or 140",
    )];
    assert_eq!(
        reask_message(&problems, true),
        "Your previous answer had this problem: article 212 was not in the search results; cite only 118 or 140. Answer again with only the corrected JSON."
    );
    assert_eq!(
        reask_message(&[Problem::new(ProblemKind::NotJson, None, "the answer is empty.")], false),
        "Your previous answer had this problem: the answer is empty. Answer again with only the corrected answer."
    );
}

#[test]
fn the_ceiling_doubles_up_to_the_cap() {
    assert_eq!(raised_ceiling(1000, 8000), Some(2000));
    assert_eq!(raised_ceiling(5000, 8000), Some(8000));
    assert_eq!(raised_ceiling(8000, 8000), None);
    assert_eq!(raised_ceiling(9000, 8000), None);
    assert_eq!(raised_ceiling(0, 8000), Some(1));
    assert_eq!(raised_ceiling(u32::MAX, u32::MAX), None);
}

#[test]
fn the_ladder_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let contract = support_contract();
    let ctx = ctx();
    let answer = response(GOOD, None);
    let future = check_answer(&ctx, &answer, &contract);
    assert_send(&future);
    assert!(future.now_or_never().unwrap().is_pass());
}
