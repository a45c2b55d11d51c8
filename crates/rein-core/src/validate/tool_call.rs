//! The tool-call rung: a turn that stops to call tools is not the final answer, so the route's
//! output contract (the caller's `json_schema`, the route's schema, the business rules) does not
//! apply to it. It is checked as what it is: every call names a tool the request declared, its
//! arguments parse as one JSON object, and that object satisfies the tool's parameters schema.
//! The same discipline as for answers holds: the certain code fixes first (a code fence or prose
//! around the arguments, an enum value in the wrong letter case), recorded as [`CodeRepair`]s;
//! whatever is left is a [`Problem`] for the one re-ask ([`tool_reask_message`]), then the chain
//! fails closed. A parameters schema that does not compile is logged and not checked: rein never
//! refuses a call for the caller's broken schema.

use serde_json::Value;

use crate::model::{ChatResponse, StopReason, ToolCall, ToolSpec};

use super::repair::{CodeRepair, fix_enum_case, parse_with_repairs};
use super::rules::{Problem, ProblemKind};
use super::schema::CompiledSchema;

/// Whether a turn stops to call tools rather than answer: its stop reason says so, or it holds
/// tool calls (OpenAI reports a forced call with `finish_reason: "stop"`).
pub fn is_tool_call_turn(response: &ChatResponse) -> bool {
    response.stop_reason == Some(StopReason::ToolUse) || !response.tool_calls.is_empty()
}

/// What the tool-call rung found in one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallCheck {
    /// The calls as the caller gets them: the model's, with any code repairs applied.
    pub calls: Vec<ToolCall>,
    /// The fixes made in code, in call order.
    pub repairs: Vec<CodeRepair>,
    /// What is still wrong; empty when the turn can be used.
    pub problems: Vec<Problem>,
}

impl ToolCallCheck {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Check the tool calls of a turn against the tools its request declared. Pure: no I/O, no
/// clocks. Each parameters schema is compiled once per check.
pub fn check_tool_calls(response: &ChatResponse, tools: &[ToolSpec]) -> ToolCallCheck {
    let mut check = ToolCallCheck {
        calls: Vec::with_capacity(response.tool_calls.len()),
        repairs: Vec::new(),
        problems: Vec::new(),
    };
    if response.tool_calls.is_empty() {
        check.problems.push(Problem::new(
            ProblemKind::ToolCall("no_call".into()),
            None,
            "the turn stopped to call a tool but named none",
        ));
        return check;
    }
    for (index, call) in response.tool_calls.iter().enumerate() {
        let place = format!("/tool_calls/{index}");
        let Some(tool) = tools.iter().find(|tool| tool.name == call.name) else {
            let declared: Vec<String> = tools.iter().map(|t| format!("`{}`", t.name)).collect();
            let offer = if declared.is_empty() {
                "no tools were offered".to_string()
            } else {
                format!("call only {}", declared.join(" or "))
            };
            check.problems.push(Problem::new(
                ProblemKind::ToolCall("unknown_tool".into()),
                Some(format!("{place}/name")),
                format!("`{}` is not a tool of this request; {offer}", call.name),
            ));
            check.calls.push(call.clone());
            continue;
        };
        check.calls.push(check_one(call, tool, &place, &mut check.repairs, &mut check.problems));
    }
    check
}

/// Check one call to a declared tool; returns the call as the caller gets it.
fn check_one(
    call: &ToolCall,
    tool: &ToolSpec,
    place: &str,
    repairs: &mut Vec<CodeRepair>,
    problems: &mut Vec<Problem>,
) -> ToolCall {
    let name = &call.name;
    let arguments_at = format!("{place}/arguments");
    // A call without parameters may come with no argument text at all: that is `{}`.
    let written = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.as_str() };
    let repaired = parse_with_repairs(written);
    let mut value = match repaired.json {
        Ok(value) => value,
        Err(problem) => {
            problems.push(Problem::new(
                ProblemKind::ToolCall("arguments_not_json".into()),
                Some(arguments_at),
                format!("the arguments of the call to `{name}` are not JSON: {}", problem.message),
            ));
            return call.clone();
        }
    };
    let mut fixes = repaired.repairs;
    if !value.is_object() {
        problems.push(Problem::new(
            ProblemKind::ToolCall("arguments_not_object".into()),
            Some(arguments_at),
            format!("the arguments of the call to `{name}` must be one JSON object"),
        ));
        return call.clone();
    }
    let mut text = if fixes.is_empty() { call.arguments.clone() } else { repaired.text };
    if let Some(schema) = parameters_schema(tool) {
        let enum_fixes = fix_enum_case(&mut value, &schema);
        if !enum_fixes.is_empty() {
            text = value.to_string();
            fixes.extend(enum_fixes);
        }
        for problem in schema.validate(&value) {
            let keyword = match &problem.kind {
                ProblemKind::Schema(keyword) => keyword.clone(),
                other => other.label(),
            };
            let detail = problem.message.strip_prefix("the answer: ").unwrap_or(&problem.message);
            problems.push(Problem::new(
                ProblemKind::ToolCall(format!("schema/{keyword}")),
                Some(format!("{arguments_at}{}", problem.path.unwrap_or_default())),
                format!(
                    "the arguments of the call to `{name}` break its parameters schema: {detail}"
                ),
            ));
        }
    }
    for fix in &mut fixes {
        if let CodeRepair::FixedEnumCase { path, .. } = fix {
            *path = format!("{arguments_at}{path}");
        }
    }
    repairs.extend(fixes);
    ToolCall { arguments: text, ..call.clone() }
}

/// The tool's parameters as a compiled schema; `None` when it declares none (any object goes)
/// or when it does not compile (logged: the caller's schema is theirs to fix).
fn parameters_schema(tool: &ToolSpec) -> Option<CompiledSchema> {
    match &tool.parameters {
        Value::Null => None,
        Value::Object(map) if map.is_empty() => None,
        parameters => match CompiledSchema::new(parameters) {
            Ok(schema) => Some(schema),
            Err(error) => {
                tracing::warn!(tool = %tool.name, "the tool's parameters schema does not compile; its calls are not checked against it: {error}");
                None
            }
        },
    }
}

/// The instruction a re-ask sends after a tool-call turn failed its checks: every problem's
/// exact sentence, then what to do.
pub fn tool_reask_message(problems: &[Problem]) -> String {
    let closing = "Make the tool call again, correctly.";
    let sentence = |message: &str| {
        let message = message.trim_end();
        if message.ends_with(['.', '!', '?']) { message.to_string() } else { format!("{message}.") }
    };
    match problems {
        [] => closing.to_string(),
        [only] => {
            format!(
                "Your previous tool call had this problem: {} {closing}",
                sentence(&only.message)
            )
        }
        many => {
            let lines: Vec<String> =
                many.iter().map(|problem| format!("- {}", sentence(&problem.message))).collect();
            format!("Your previous tool call had these problems:\n{}\n{closing}", lines.join("\n"))
        }
    }
}

/// The failed turn as the text of an assistant message, for the re-ask. The calls are written
/// out rather than replayed as tool calls: a call with broken arguments (or to a tool that does
/// not exist) cannot be sent back to every provider as a structured call, and a structured call
/// would need a tool result before the correction.
pub fn tool_calls_as_text(response: &ChatResponse) -> String {
    let mut text = response.text.trim().to_string();
    for call in &response.tool_calls {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("[tool call `{}` with arguments {}]", call.name, call.arguments));
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::*;

    fn lookup() -> ToolSpec {
        ToolSpec {
            name: "lookup_order".into(),
            description: None,
            parameters: json!({
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "pattern": "^A[0-9]+$"},
                    "reason": {"enum": ["refund", "delivery"]}
                },
                "required": ["order_id"],
                "additionalProperties": false
            }),
        }
    }

    fn turn(calls: &[(&str, &str)]) -> ChatResponse {
        ChatResponse {
            tool_calls: calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| ToolCall {
                    id: format!("call_{i}"),
                    name: (*name).into(),
                    arguments: (*arguments).into(),
                })
                .collect(),
            stop_reason: Some(StopReason::ToolUse),
            ..ChatResponse::default()
        }
    }

    fn labels(check: &ToolCallCheck) -> Vec<(String, String)> {
        check
            .problems
            .iter()
            .map(|p| (p.kind.label(), p.path.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn a_good_call_passes_unchanged() {
        let response = turn(&[("lookup_order", r#"{"order_id": "A10"}"#)]);
        let check = check_tool_calls(&response, &[lookup()]);
        assert!(check.passed(), "{:?}", check.problems);
        assert_eq!(check.calls, response.tool_calls);
        assert_eq!(check.repairs, vec![]);
    }

    #[test]
    fn a_tool_turn_is_known_by_its_stop_reason_or_its_calls() {
        assert!(is_tool_call_turn(&turn(&[("lookup_order", "{}")])));
        let mut forced = turn(&[("lookup_order", "{}")]);
        forced.stop_reason = Some(StopReason::EndTurn);
        assert!(is_tool_call_turn(&forced));
        let answer = ChatResponse {
            text: "{}".into(),
            stop_reason: Some(StopReason::EndTurn),
            ..ChatResponse::default()
        };
        assert!(!is_tool_call_turn(&answer));
    }

    #[test]
    fn an_undeclared_tool_is_a_problem_that_names_the_declared_ones() {
        let check = check_tool_calls(&turn(&[("delete_order", "{}")]), &[lookup()]);
        assert_eq!(
            labels(&check),
            vec![("tool_call/unknown_tool".into(), "/tool_calls/0/name".into())]
        );
        assert_eq!(
            check.problems[0].message,
            "`delete_order` is not a tool of this request; call only `lookup_order`"
        );
        let none = check_tool_calls(&turn(&[("lookup_order", "{}")]), &[]);
        assert!(none.problems[0].message.ends_with("no tools were offered"));
    }

    #[test]
    fn arguments_that_are_not_one_object_are_problems() {
        let check = check_tool_calls(
            &turn(&[("lookup_order", r#"{"order_id": "A1"#), ("lookup_order", "[1]")]),
            &[lookup()],
        );
        assert_eq!(
            labels(&check),
            vec![
                ("tool_call/arguments_not_json".into(), "/tool_calls/0/arguments".into()),
                ("tool_call/arguments_not_object".into(), "/tool_calls/1/arguments".into()),
            ]
        );
    }

    #[test]
    fn arguments_are_checked_against_the_parameters_schema() {
        let check = check_tool_calls(
            &turn(&[("lookup_order", r#"{"order_id": "sim-order_id", "extra": 1}"#)]),
            &[lookup()],
        );
        let mut found = labels(&check);
        found.sort();
        assert_eq!(
            found,
            vec![
                ("tool_call/schema/additionalProperties".into(), "/tool_calls/0/arguments".into()),
                ("tool_call/schema/pattern".into(), "/tool_calls/0/arguments/order_id".into()),
            ]
        );
        let missing = check_tool_calls(&turn(&[("lookup_order", "")]), &[lookup()]);
        assert_eq!(
            missing.problems[0].message,
            "the arguments of the call to `lookup_order` break its parameters schema: `/order_id` is required but missing"
        );
    }

    #[test]
    fn certain_fixes_are_made_in_code_and_recorded() {
        let check = check_tool_calls(
            &turn(&[(
                "lookup_order",
                "```json\n{\"order_id\": \"A1\", \"reason\": \"Refund\"}\n```",
            )]),
            &[lookup()],
        );
        assert!(check.passed(), "{:?}", check.problems);
        let arguments: Value = serde_json::from_str(&check.calls[0].arguments).unwrap();
        assert_eq!(arguments, json!({"order_id": "A1", "reason": "refund"}));
        assert_eq!(
            check.repairs,
            vec![
                CodeRepair::StrippedCodeFence,
                CodeRepair::FixedEnumCase {
                    path: "/tool_calls/0/arguments/reason".into(),
                    from: "Refund".into(),
                    to: "refund".into()
                },
            ]
        );
    }

    #[test]
    fn a_broken_parameters_schema_is_not_held_against_the_call() {
        let mut tool = lookup();
        tool.parameters = json!({"type": "objekt"});
        let check = check_tool_calls(&turn(&[("lookup_order", r#"{"any": 1}"#)]), &[tool]);
        assert!(check.passed(), "{:?}", check.problems);
    }

    #[test]
    fn a_tool_stop_without_calls_is_a_problem() {
        let check = check_tool_calls(&turn(&[]), &[lookup()]);
        assert_eq!(labels(&check), vec![("tool_call/no_call".into(), String::new())]);
    }

    #[test]
    fn the_reask_names_every_problem_and_asks_for_the_call_again() {
        let check = check_tool_calls(&turn(&[("delete_order", "{}")]), &[lookup()]);
        assert_eq!(
            tool_reask_message(&check.problems),
            "Your previous tool call had this problem: `delete_order` is not a tool of this request; call only `lookup_order`. Make the tool call again, correctly."
        );
        assert_eq!(
            tool_calls_as_text(&turn(&[("delete_order", "{}")])),
            "[tool call `delete_order` with arguments {}]"
        );
    }
}
