//! The schema rung: rein checks the route's JSON Schema itself, with the `jsonschema` crate, even
//! when the provider already decoded against a strict schema — providers return enum values in
//! another letter case without an error, and leave limits such as `maximum` or `maxLength` to
//! the client. A schema is compiled once per route ([`CompiledSchema::new`]) and every answer is
//! checked against it into [`Problem`]s whose paths are JSON pointers into the answer and whose
//! messages are sentences a re-ask can send. Enum values are matched exactly; fixing their case
//! is a separate, recorded repair (see `repair.rs`). The crate is built without its network and
//! file resolvers, so a schema that points outside itself fails to compile rather than fetching.

use serde_json::Value;
use thiserror::Error;

use jsonschema::error::ValidationErrorKind;

use super::rules::{Problem, ProblemKind};

/// Why a route's JSON Schema could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SchemaError {
    /// The schema itself breaks the JSON Schema rules (checked against its meta-schema).
    #[error("the JSON Schema is invalid at `{path}`: {message}")]
    Invalid {
        /// JSON pointer into the schema ("" for its top level).
        path: String,
        message: String,
    },
    /// A `$ref` that does not resolve inside the schema; rein never fetches one.
    #[error(
        "the JSON Schema has a `$ref` rein cannot resolve (only references inside the schema are allowed): {message}"
    )]
    UnresolvableReference { message: String },
}

/// A route's JSON Schema, compiled once and shared by every answer on the route.
#[derive(Debug, Clone)]
pub struct CompiledSchema {
    source: Value,
    validator: jsonschema::Validator,
}

/// An enum value that is not one of the schema's members, as the repair step needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct EnumMismatch {
    /// JSON pointer to the value in the answer.
    pub path: String,
    /// The value the answer holds there.
    pub found: Value,
    /// The schema's enum members, in the schema's order.
    pub options: Vec<Value>,
}

impl CompiledSchema {
    /// Compile a schema (draft detected from `$schema`, 2020-12 when absent).
    pub fn new(schema: &Value) -> Result<Self, SchemaError> {
        match jsonschema::validator_for(schema) {
            Ok(validator) => Ok(Self { source: schema.clone(), validator }),
            Err(error) => Err(match error.kind() {
                ValidationErrorKind::Referencing(inner) => {
                    SchemaError::UnresolvableReference { message: inner.to_string() }
                }
                _ => SchemaError::Invalid {
                    path: error.instance_path().as_str().to_string(),
                    message: error.to_string(),
                },
            }),
        }
    }

    /// The schema as the route wrote it.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Whether the value satisfies the schema.
    pub fn is_valid(&self, value: &Value) -> bool {
        self.validator.is_valid(value)
    }

    /// Every way the value breaks the schema, in the validator's order. Empty means valid.
    pub fn validate(&self, value: &Value) -> Vec<Problem> {
        self.validator.iter_errors(value).map(|error| problem_from_error(&error)).collect()
    }

    /// The values that fail an `enum` keyword, with the members they could have been.
    pub fn enum_mismatches(&self, value: &Value) -> Vec<EnumMismatch> {
        self.validator
            .iter_errors(value)
            .filter_map(|error| match error.kind() {
                ValidationErrorKind::Enum { options } => Some(EnumMismatch {
                    path: error.instance_path().as_str().to_string(),
                    found: error.instance().as_ref().clone(),
                    options: options.as_array().cloned().unwrap_or_default(),
                }),
                _ => None,
            })
            .collect()
    }
}

/// How a message names a place in the answer: its JSON pointer in backticks, or "the answer" for
/// the top level.
pub(crate) fn describe_path(path: &str) -> String {
    if path.is_empty() { "the answer".to_string() } else { format!("`{path}`") }
}

/// Escape one property name for a JSON pointer (RFC 6901).
fn escape_pointer_segment(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn problem_from_error(error: &jsonschema::ValidationError<'_>) -> Problem {
    let keyword = error.kind().keyword().to_string();
    let path = error.instance_path().as_str().to_string();
    match error.kind() {
        ValidationErrorKind::Enum { options } => {
            let members = options
                .as_array()
                .map(|members| members.iter().map(Value::to_string).collect::<Vec<_>>().join(", "))
                .unwrap_or_else(|| options.to_string());
            let message = format!(
                "{}: {} is not one of {members}",
                describe_path(&path),
                error.instance().as_ref()
            );
            Problem::new(ProblemKind::Schema(keyword), Some(path), message)
        }
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().map_or_else(|| property.to_string(), str::to_string);
            let missing = format!("{path}/{}", escape_pointer_segment(&name));
            let message = format!("`{missing}` is required but missing");
            Problem::new(ProblemKind::Schema(keyword), Some(missing), message)
        }
        _ => {
            let message = format!("{}: {error}", describe_path(&path));
            Problem::new(ProblemKind::Schema(keyword), Some(path), message)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use serde_json::json;

    fn support_schema() -> CompiledSchema {
        CompiledSchema::new(&json!({
            "type": "object",
            "properties": {
                "reply": {"type": "string", "maxLength": 40},
                "reason": {"enum": ["refund", "delivery"]},
                "article_ids": {"type": "array", "items": {"type": "string"}},
                "order_id": {"type": ["string", "null"]},
                "needs_human": {"type": "boolean"}
            },
            "required": ["reply", "article_ids", "needs_human"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn a_valid_answer_has_no_problems() {
        let schema = support_schema();
        let answer = json!({"reply": "ok", "article_ids": ["140"], "needs_human": false});
        assert!(schema.is_valid(&answer));
        assert_eq!(schema.validate(&answer), vec![]);
    }

    #[test]
    fn enum_values_are_matched_exactly_and_named_in_the_message() {
        let schema = support_schema();
        let answer =
            json!({"reply": "ok", "reason": "Refund", "article_ids": [], "needs_human": false});
        let problems = schema.validate(&answer);
        assert_eq!(
            problems,
            vec![Problem::new(
                ProblemKind::Schema("enum".into()),
                Some("/reason".into()),
                "`/reason`: \"Refund\" is not one of \"refund\", \"delivery\"",
            )]
        );
        assert_eq!(
            schema.enum_mismatches(&answer),
            vec![EnumMismatch {
                path: "/reason".into(),
                found: json!("Refund"),
                options: vec![json!("refund"), json!("delivery")],
            }]
        );
    }

    #[test]
    fn a_missing_field_points_at_the_field() {
        let problems = support_schema().validate(&json!({"reply": "ok", "article_ids": []}));
        assert_eq!(
            problems,
            vec![Problem::new(
                ProblemKind::Schema("required".into()),
                Some("/needs_human".into()),
                "`/needs_human` is required but missing",
            )]
        );
    }

    #[test]
    fn limits_and_types_are_checked_after_the_provider() {
        let answer = json!({
            "reply": "x".repeat(41),
            "article_ids": [140],
            "needs_human": "no",
            "extra": 1
        });
        let problems = support_schema().validate(&answer);
        let mut keywords: Vec<_> = problems
            .iter()
            .map(|problem| (problem.kind.label(), problem.path.clone().unwrap_or_default()))
            .collect();
        keywords.sort();
        assert_eq!(
            keywords,
            vec![
                ("schema/additionalProperties".to_string(), String::new()),
                ("schema/maxLength".to_string(), "/reply".to_string()),
                ("schema/type".to_string(), "/article_ids/0".to_string()),
                ("schema/type".to_string(), "/needs_human".to_string()),
            ]
        );
        let top = problems.iter().find(|p| p.path.as_deref() == Some("")).unwrap();
        assert!(top.message.starts_with("the answer: "), "{}", top.message);
    }

    #[test]
    fn a_broken_schema_is_rejected_with_its_place() {
        let error =
            CompiledSchema::new(&json!({"type": "object", "properties": {"a": {"type": "strng"}}}))
                .unwrap_err();
        match &error {
            SchemaError::Invalid { path, .. } => assert_eq!(path, "/properties/a/type"),
            other => panic!("{other:?}"),
        }
        assert!(
            error.to_string().starts_with("the JSON Schema is invalid at `/properties/a/type`")
        );
    }

    #[test]
    fn a_remote_reference_is_never_fetched() {
        let error =
            CompiledSchema::new(&json!({"$ref": "https://example.com/answer.json"})).unwrap_err();
        assert!(matches!(error, SchemaError::UnresolvableReference { .. }), "{error:?}");
    }

    #[test]
    fn local_references_work() {
        let schema = CompiledSchema::new(&json!({
            "$defs": {"reason": {"enum": ["refund", "delivery"]}},
            "type": "object",
            "properties": {"reason": {"$ref": "#/$defs/reason"}}
        }))
        .unwrap();
        assert!(schema.is_valid(&json!({"reason": "refund"})));
        assert_eq!(schema.enum_mismatches(&json!({"reason": "REFUND"})).len(), 1);
    }
}
