//! The certain repairs, done in code before any re-ask: strip a Markdown code fence around the
//! JSON, drop a line of prose after a complete JSON object, and fix the letter case of an enum
//! value when exactly one of the schema's members matches it ignoring case. Each fix is recorded
//! as a [`CodeRepair`], so the call's report says what rein changed. Nothing uncertain is ever
//! fixed here (prose before the JSON, two JSON values, an enum value matching two members or
//! none): those go to the re-ask, or fail closed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::parse::{AnswerShape, parse_answer};
use super::rules::{Problem, ProblemKind};
use super::schema::CompiledSchema;

/// One fix rein made to an answer in code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "repair", rename_all = "snake_case")]
pub enum CodeRepair {
    /// Removed a ```` ```json ```` (or bare ```` ``` ````) fence around the JSON.
    StrippedCodeFence,
    /// Changed an enum value's letter case to the schema's member.
    FixedEnumCase { path: String, from: String, to: String },
    /// Removed prose after the complete JSON (inside or after the fence).
    DroppedTrailingProse { dropped: String },
}

/// The answer's text after the certain parse fixes.
#[derive(Debug, Clone, PartialEq)]
pub struct RepairedText {
    /// The JSON text the fixes left (the original text, trimmed, when nothing was fixed).
    pub text: String,
    /// The fixes made, in order (some may have been made before the text still failed).
    pub repairs: Vec<CodeRepair>,
    /// The parsed JSON, or the `NotJson` problem saying why there is none.
    pub json: Result<Value, Problem>,
}

/// Parse the answer's JSON, stripping one code fence and dropping trailing prose when that is
/// what stands between the text and valid JSON.
pub fn parse_with_repairs(text: &str) -> RepairedText {
    let mut repairs = Vec::new();
    match parse_answer(text) {
        AnswerShape::Json(value) => {
            RepairedText { text: text.trim().to_string(), repairs, json: Ok(value) }
        }
        AnswerShape::TrailingProse { value, json_text, trailing } => {
            repairs.push(CodeRepair::DroppedTrailingProse { dropped: trailing });
            RepairedText { text: json_text, repairs, json: Ok(value) }
        }
        AnswerShape::NotJson { reason } => {
            RepairedText { text: text.trim().to_string(), repairs, json: Err(not_json(reason)) }
        }
        AnswerShape::Fenced { inner, after } => {
            repairs.push(CodeRepair::StrippedCodeFence);
            if !after.is_empty() {
                repairs.push(CodeRepair::DroppedTrailingProse { dropped: after });
            }
            match parse_answer(&inner) {
                AnswerShape::Json(value) => RepairedText { text: inner, repairs, json: Ok(value) },
                AnswerShape::TrailingProse { value, json_text, trailing } => {
                    repairs.push(CodeRepair::DroppedTrailingProse { dropped: trailing });
                    RepairedText { text: json_text, repairs, json: Ok(value) }
                }
                AnswerShape::Fenced { .. } => RepairedText {
                    json: Err(not_json("the answer has a code fence inside a code fence".into())),
                    text: inner,
                    repairs,
                },
                AnswerShape::NotJson { reason } => {
                    RepairedText { text: inner, repairs, json: Err(not_json(reason)) }
                }
            }
        }
    }
}

fn not_json(reason: String) -> Problem {
    Problem::new(ProblemKind::NotJson, None, reason)
}

/// Fix the letter case of enum values the schema rejects, where exactly one string member of
/// the enum equals the value ignoring case. Returns the fixes made; values with no such member,
/// or with several, are left for the schema rung to report.
pub fn fix_enum_case(value: &mut Value, schema: &CompiledSchema) -> Vec<CodeRepair> {
    let mut repairs = Vec::new();
    for mismatch in schema.enum_mismatches(value) {
        let Value::String(found) = &mismatch.found else {
            continue;
        };
        let lowered = found.to_lowercase();
        let matching: Vec<&str> = mismatch
            .options
            .iter()
            .filter_map(Value::as_str)
            .filter(|member| member.to_lowercase() == lowered)
            .collect();
        let [member] = matching.as_slice() else {
            continue;
        };
        let Some(slot) = value.pointer_mut(&mismatch.path) else {
            continue;
        };
        // Two enum keywords can reject the same value (`allOf`); fix it once.
        if slot.as_str() != Some(found.as_str()) || *member == found.as_str() {
            continue;
        }
        *slot = Value::String((*member).to_string());
        repairs.push(CodeRepair::FixedEnumCase {
            path: mismatch.path.clone(),
            from: found.clone(),
            to: (*member).to_string(),
        });
    }
    repairs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use serde_json::json;

    #[test]
    fn clean_json_needs_no_repair() {
        let repaired = parse_with_repairs(" {\"a\": 1} ");
        assert_eq!(repaired.json, Ok(json!({"a": 1})));
        assert_eq!(repaired.text, "{\"a\": 1}");
        assert_eq!(repaired.repairs, vec![]);
    }

    #[test]
    fn a_code_fence_is_stripped_and_recorded() {
        let repaired = parse_with_repairs("```json\n{\"a\": 1}\n```");
        assert_eq!(repaired.json, Ok(json!({"a": 1})));
        assert_eq!(repaired.text, "{\"a\": 1}");
        assert_eq!(repaired.repairs, vec![CodeRepair::StrippedCodeFence]);
    }

    #[test]
    fn trailing_prose_is_dropped_and_recorded_inside_and_after_a_fence() {
        let repaired = parse_with_repairs("{\"a\": 1}\nHope that helps!");
        assert_eq!(repaired.json, Ok(json!({"a": 1})));
        assert_eq!(
            repaired.repairs,
            vec![CodeRepair::DroppedTrailingProse { dropped: "Hope that helps!".into() }]
        );

        let repaired = parse_with_repairs("```json\n{\"a\": 1}\nNote: a is one.\n```\nBye");
        assert_eq!(repaired.json, Ok(json!({"a": 1})));
        assert_eq!(repaired.text, "{\"a\": 1}");
        assert_eq!(
            repaired.repairs,
            vec![
                CodeRepair::StrippedCodeFence,
                CodeRepair::DroppedTrailingProse { dropped: "Bye".into() },
                CodeRepair::DroppedTrailingProse { dropped: "Note: a is one.".into() },
            ]
        );
    }

    #[test]
    fn uncertain_text_is_not_json_and_keeps_the_repairs_tried() {
        let repaired = parse_with_repairs("Here you go: {\"a\": 1}");
        assert_eq!(repaired.repairs, vec![]);
        let problem = repaired.json.unwrap_err();
        assert_eq!(problem.kind, ProblemKind::NotJson);
        assert!(
            problem.message.starts_with("the answer is not valid JSON ("),
            "{}",
            problem.message
        );

        let repaired = parse_with_repairs("```json\n{\"a\": \n```");
        assert_eq!(repaired.repairs, vec![CodeRepair::StrippedCodeFence]);
        assert!(repaired.json.is_err());

        let nested = parse_with_repairs("```\n```json\n{}\n```\n```");
        assert!(nested.json.is_err());
    }

    fn reason_schema() -> CompiledSchema {
        CompiledSchema::new(&json!({
            "type": "object",
            "properties": {
                "reason": {"enum": ["refund", "delivery", "Other", "other"]},
                "tags": {"type": "array", "items": {"enum": ["urgent", "vip"]}},
                "count": {"enum": [1, 2]}
            }
        }))
        .unwrap()
    }

    #[test]
    fn enum_case_is_fixed_against_the_one_matching_member() {
        let schema = reason_schema();
        let mut value = json!({"reason": "Refund", "tags": ["VIP", "urgent"]});
        let repairs = fix_enum_case(&mut value, &schema);
        assert_eq!(value, json!({"reason": "refund", "tags": ["vip", "urgent"]}));
        assert_eq!(
            repairs,
            vec![
                CodeRepair::FixedEnumCase {
                    path: "/reason".into(),
                    from: "Refund".into(),
                    to: "refund".into()
                },
                CodeRepair::FixedEnumCase {
                    path: "/tags/0".into(),
                    from: "VIP".into(),
                    to: "vip".into()
                },
            ]
        );
        assert!(schema.is_valid(&value));
    }

    #[test]
    fn ambiguous_or_unknown_enum_values_are_left_alone() {
        let schema = reason_schema();
        for mut value in
            [json!({"reason": "OTHER"}), json!({"reason": "refunds"}), json!({"count": 3})]
        {
            let before = value.clone();
            assert_eq!(fix_enum_case(&mut value, &schema), vec![]);
            assert_eq!(value, before);
        }
    }

    #[test]
    fn repairs_serialize_with_their_name() {
        assert_eq!(
            serde_json::to_value(CodeRepair::FixedEnumCase {
                path: "/reason".into(),
                from: "Refund".into(),
                to: "refund".into()
            })
            .unwrap(),
            json!({"repair": "fixed_enum_case", "path": "/reason", "from": "Refund", "to": "refund"})
        );
        assert_eq!(
            serde_json::to_value(CodeRepair::StrippedCodeFence).unwrap(),
            json!({"repair": "stripped_code_fence"})
        );
    }
}
