//! The parse rung: find the answer's JSON in the model's text. Besides "it parses" and "it does
//! not", this tells apart the two shapes a code fix can certainly mend — JSON inside a Markdown
//! code fence, and a complete JSON object followed by a line of prose — so the repair step can
//! record exactly what it changed. Anything else (prose before the JSON, two JSON values, a fence
//! tagged with another language) is reported as not JSON: guessing there is not certain.

use serde_json::Value;

/// What the answer's text turned out to be.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerShape {
    /// The whole text, less surrounding whitespace, is one JSON value.
    Json(Value),
    /// A Markdown code fence (```` ```json ```` or a bare ```` ``` ````) opens the text. `inner` is
    /// the text inside the fence; `after` is whatever follows the closing fence, trimmed
    /// (usually empty).
    Fenced { inner: String, after: String },
    /// A complete JSON object or array, then prose that is not JSON. `json_text` is the JSON as
    /// written, `trailing` the prose after it, trimmed.
    TrailingProse { value: Value, json_text: String, trailing: String },
    /// Nothing a certain fix can turn into JSON; `reason` says why, for the re-ask.
    NotJson { reason: String },
}

/// Classify an answer's text. Pure and cheap: one or two passes of the JSON parser.
pub fn parse_answer(text: &str) -> AnswerShape {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return AnswerShape::NotJson { reason: "the answer is empty".to_string() };
    }
    let whole_error = match serde_json::from_str::<Value>(trimmed) {
        Ok(value) => return AnswerShape::Json(value),
        Err(error) => error,
    };
    if let Some((inner, after)) = split_code_fence(trimmed) {
        return AnswerShape::Fenced { inner, after };
    }
    if trimmed.starts_with(['{', '[']) {
        let mut stream = serde_json::Deserializer::from_str(trimmed).into_iter::<Value>();
        if let Some(Ok(value)) = stream.next() {
            let end = stream.byte_offset();
            let json_text = trimmed.get(..end).unwrap_or_default().to_string();
            let trailing = trimmed.get(end..).unwrap_or_default().trim().to_string();
            if trailing.starts_with(['{', '[']) {
                return AnswerShape::NotJson {
                    reason: "the answer holds more than one JSON value".to_string(),
                };
            }
            return AnswerShape::TrailingProse { value, json_text, trailing };
        }
    }
    AnswerShape::NotJson { reason: format!("the answer is not valid JSON ({whole_error})") }
}

/// If `trimmed` opens with a code fence whose language is JSON or absent, the text inside it and
/// the text after it. The closing fence is the first line starting with ```` ``` ````, or a
/// ```` ``` ```` that ends the text on the last line; an unclosed fence runs to the end (the
/// inner text must still parse whole).
fn split_code_fence(trimmed: &str) -> Option<(String, String)> {
    let rest = trimmed.strip_prefix("```")?;
    let (info, body) = rest.split_once('\n')?;
    let info = info.trim();
    if !(info.is_empty() || info.eq_ignore_ascii_case("json")) {
        return None;
    }
    let mut inner_end = body.len();
    let mut after_start = body.len();
    let mut offset = 0;
    let mut closed = false;
    for line in body.split_inclusive('\n') {
        let stripped = line.trim_start();
        if stripped.starts_with("```") {
            inner_end = offset;
            after_start = offset + (line.len() - stripped.len()) + 3;
            closed = true;
            break;
        }
        offset += line.len();
    }
    if !closed {
        let body_trimmed = body.trim_end();
        if let Some(before) = body_trimmed.strip_suffix("```") {
            inner_end = before.len();
            after_start = body_trimmed.len();
        }
    }
    let inner = body.get(..inner_end)?.trim().to_string();
    let after = body.get(after_start..)?.trim().to_string();
    Some((inner, after))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use serde_json::json;

    #[test]
    fn whole_json_parses_with_surrounding_whitespace() {
        assert_eq!(parse_answer("  {\"a\": 1}\n"), AnswerShape::Json(json!({"a": 1})));
        assert_eq!(parse_answer("[1, 2]"), AnswerShape::Json(json!([1, 2])));
    }

    #[test]
    fn a_json_fence_is_recognised_with_or_without_a_language() {
        for text in [
            "```json\n{\"a\": 1}\n```",
            "```JSON\n{\"a\": 1}\n```\n",
            "```\n{\"a\": 1}\n```",
            "```json\n{\"a\": 1}```",
            "```json\n{\"a\": 1}\n",
        ] {
            assert_eq!(
                parse_answer(text),
                AnswerShape::Fenced { inner: "{\"a\": 1}".into(), after: String::new() },
                "{text:?}"
            );
        }
    }

    #[test]
    fn text_after_the_closing_fence_is_kept_apart() {
        let shape = parse_answer("```json\n{\"a\": 1}\n```\nHope this helps!");
        assert_eq!(
            shape,
            AnswerShape::Fenced { inner: "{\"a\": 1}".into(), after: "Hope this helps!".into() }
        );
    }

    #[test]
    fn a_fence_of_another_language_is_not_json() {
        assert!(matches!(parse_answer("```python\nprint(1)\n```"), AnswerShape::NotJson { .. }));
    }

    #[test]
    fn trailing_prose_after_a_complete_object_is_split_off() {
        let shape = parse_answer("{\"a\": \"x}\"}\nLet me know if you need anything else.");
        assert_eq!(
            shape,
            AnswerShape::TrailingProse {
                value: json!({"a": "x}"}),
                json_text: "{\"a\": \"x}\"}".into(),
                trailing: "Let me know if you need anything else.".into(),
            }
        );
    }

    #[test]
    fn a_number_followed_by_prose_is_not_json() {
        // "48 hours" would parse as the number 48 followed by prose; only objects and arrays
        // count as JSON followed by trailing prose.
        assert!(matches!(parse_answer("48 hours"), AnswerShape::NotJson { .. }));
    }

    #[test]
    fn two_json_values_are_not_json() {
        let shape = parse_answer("{\"a\": 1}\n{\"a\": 2}");
        assert_eq!(
            shape,
            AnswerShape::NotJson { reason: "the answer holds more than one JSON value".into() }
        );
    }

    #[test]
    fn prose_and_cut_off_json_are_not_json() {
        match parse_answer("Sure! Here is the answer: {\"a\": 1}") {
            AnswerShape::NotJson { reason } => {
                assert!(reason.starts_with("the answer is not valid JSON ("), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_answer("{\"a\": [1, 2"), AnswerShape::NotJson { .. }));
        assert_eq!(
            parse_answer("   "),
            AnswerShape::NotJson { reason: "the answer is empty".into() }
        );
    }
}
