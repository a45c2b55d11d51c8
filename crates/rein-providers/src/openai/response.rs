//! Parses a non-streaming Chat Completions answer (`choices[0].message` with `content`,
//! `refusal`, `tool_calls`, reasoning text; `finish_reason`; `usage`; `logprobs`) into a
//! [`ChatResponse`]. A 200 body carrying `{"error": ..}` is reported like the same object
//! arriving mid-stream. The common answer (text, a refusal or reasoning, no tool calls or
//! logprobs) is read in one pass by the provider's JSON scanner, checked against serde_json in
//! debug builds and the fuzz targets; anything else is read by serde_json.

use serde::Deserialize;
use serde_json::Value;

use rein_core::{ChatResponse, Failure, ToolCall, WireFormat};

use super::wire::{WireFunction, WireLogprobs, WireUsage, scan_choices, stop_reason};
use crate::http_error::error_object;
use crate::json_scan::{Scan, first};
use crate::stream::malformed;

#[derive(Debug, PartialEq, Deserialize)]
struct Completion {
    /// Set (not `null`) on a 200 that carries an error instead of an answer.
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Choice {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    logprobs: Option<WireLogprobs>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    function_call: Option<WireFunction>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

pub(crate) fn parse_response(body: &[u8]) -> Result<ChatResponse, Failure> {
    if let Some(completion) = read(body) {
        #[cfg(any(debug_assertions, fuzzing))]
        {
            let slow = serde_json::from_slice::<Completion>(body);
            assert!(
                slow.as_ref().is_ok_and(|slow| *slow == completion),
                "the direct answer reader read {completion:?} where serde read {slow:?}"
            );
        }
        return Ok(answer(completion));
    }
    // One typed pass for the rest; an error body, or one that does not fit the shape, is
    // looked at as a JSON tree (which is what reports the error object of a body whose other
    // fields are malformed).
    match serde_json::from_slice::<Completion>(body) {
        Ok(completion) if completion.error.is_none() => Ok(answer(completion)),
        _ => parse_slow(body),
    }
}

/// The answer in `body` read directly, or `None` when serde_json must read it: an error
/// object, tool calls, logprobs, and whatever the scanner does not read exactly.
fn read(body: &[u8]) -> Option<Completion> {
    let text = std::str::from_utf8(body).ok()?;
    let mut scan = Scan { text, bytes: body, at: 0, finite_numbers: false };
    let mut completion =
        Completion { error: None, id: None, model: None, choices: None, usage: None };
    let mut seen = 0;
    scan.object(|scan, key| {
        match key {
            "error" => {
                first(&mut seen, 1)?;
                scan.null()?;
            }
            "id" => {
                first(&mut seen, 2)?;
                completion.id = scan.optional_owned()?;
            }
            "model" => {
                first(&mut seen, 4)?;
                completion.model = scan.optional_owned()?;
            }
            "choices" => {
                first(&mut seen, 8)?;
                completion.choices =
                    scan_choices(scan, "message", |index, texts, finish_reason| Choice {
                        index,
                        message: texts.map(|texts| WireMessage {
                            content: texts.content,
                            refusal: texts.refusal,
                            reasoning_content: texts.reasoning_content,
                            reasoning: texts.reasoning,
                            tool_calls: None,
                            function_call: None,
                        }),
                        finish_reason,
                        logprobs: None,
                    })?;
            }
            "usage" => {
                first(&mut seen, 16)?;
                completion.usage = WireUsage::read(scan)?;
            }
            _ => scan.skip(1)?,
        }
        Some(())
    })?;
    scan.whitespace();
    (scan.at == scan.bytes.len()).then_some(completion)
}

fn parse_slow(body: &[u8]) -> Result<ChatResponse, Failure> {
    let json: Value = serde_json::from_slice(body).map_err(|e| malformed("chat completion", &e))?;
    if json.get("error").is_some_and(|error| !error.is_null()) {
        let error = error_object(&json);
        return Err(Failure::StreamError {
            format: WireFormat::OpenAi,
            error_type: error.error_type,
            code: error.code,
            message: error.message,
        });
    }
    let completion: Completion =
        serde_json::from_value(json).map_err(|e| malformed("chat completion", &e))?;
    Ok(answer(completion))
}

fn answer(completion: Completion) -> ChatResponse {
    let mut response = ChatResponse {
        id: completion.id.unwrap_or_default(),
        model: completion.model.unwrap_or_default(),
        usage: completion.usage.map(|u| u.to_usage()).unwrap_or_default(),
        ..ChatResponse::default()
    };
    let choice = completion.choices.into_iter().flatten().find(|c| c.index.unwrap_or(0) == 0);
    let Some(choice) = choice else {
        return response;
    };
    response.stop_reason = choice.finish_reason.as_deref().map(stop_reason);
    response.logprobs = choice.logprobs.map(|l| l.to_tokens()).unwrap_or_default();
    if let Some(message) = choice.message {
        response.text = message.content.unwrap_or_default();
        response.thinking = message.reasoning_content.or(message.reasoning).unwrap_or_default();
        response.refusal = message.refusal.filter(|r| !r.is_empty());
        let calls = message.tool_calls.into_iter().flatten().map(|call| {
            let function = call.function.unwrap_or_default();
            ToolCall {
                id: call.id.unwrap_or_default(),
                name: function.name.unwrap_or_default(),
                arguments: function.arguments.unwrap_or_default(),
            }
        });
        response.tool_calls = calls.collect();
        if let Some(function) = message.function_call {
            response.tool_calls.push(ToolCall {
                id: String::new(),
                name: function.name.unwrap_or_default(),
                arguments: function.arguments.unwrap_or_default(),
            });
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_scan::tests::{edited, edits};

    const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1735689600,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Your order shipped.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":24,"total_tokens":36,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},"service_tier":"default","system_fingerprint":"fp_1"}"#;

    /// serde's reading of `body`, which the direct reader's must equal.
    fn agrees(body: &str) -> bool {
        let fast = read(body.as_bytes());
        let slow = serde_json::from_slice::<Completion>(body.as_bytes());
        match fast {
            Some(fast) => slow.is_ok_and(|slow| slow == fast),
            None => true,
        }
    }

    #[test]
    fn the_common_answer_is_read_without_serde_as_serde_reads_it() {
        for body in [
            ANSWER,
            r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}"#,
            r#"{"id":"c","choices":[{"index":0,"message":{"content":"4","reasoning_content":"2+2","tool_calls":null},"finish_reason":"length"}],"usage":null,"error":null}"#,
            r#" { "choices" : [ ] , "id" : "c\u0031" } "#,
        ] {
            assert!(read(body.trim().as_bytes()).is_some(), "left to serde: {body}");
            assert!(agrees(body.trim()), "{body}");
        }
        let response = parse_response(ANSWER.as_bytes()).unwrap();
        assert_eq!(response.text, "Your order shipped.");
        assert_eq!((response.usage.input_tokens, response.usage.output_tokens), (12, 24));
    }

    #[test]
    fn tool_calls_logprobs_errors_and_what_serde_refuses_are_left_to_it() {
        for body in [
            r#"{"choices":[{"index":0,"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[{"index":0,"message":{"content":"a"},"logprobs":{"content":[]}}]}"#,
            r#"{"error":{"message":"quota"}}"#,
            r#"{"id":"a","id":"b"}"#,
            r#"{"choices":[{"message":{"content":"a\q"}}]}"#,
            r#"{"usage":{"prompt_tokens":1.5}}"#,
            r#"{"choices":[]} x"#,
        ] {
            assert!(read(body.as_bytes()).is_none(), "read directly: {body}");
        }
        assert!(read(b"{\"id\":\"\xff\"}").is_none(), "not UTF-8");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        /// Edits of a real answer: what the direct reader accepts, serde reads the same.
        #[test]
        fn the_direct_reader_and_serde_agree_on_any_edit_of_an_answer(
            edits in edits(&["\"id\":\"x\",", "\"content\":\"z\",", "\"error\":null,", "\"usage\":null,"]),
        ) {
            let body = edited(ANSWER, &edits);
            proptest::prop_assert!(agrees(&body), "{}", body);
        }
    }

    #[test]
    fn an_error_beside_well_formed_fields_is_still_the_error() {
        let body = br#"{"id":"x","choices":[{"index":0,"message":{"content":"hi"}}],
            "error":{"type":"server_error","message":"upstream died"}}"#;
        match parse_response(body) {
            Err(Failure::StreamError { error_type, message, .. }) => {
                assert_eq!(error_type.as_deref(), Some("server_error"));
                assert_eq!(message, "upstream died");
            }
            other => panic!("expected the error, got {other:?}"),
        }
        // A null error is no error.
        let body = br#"{"id":"x","choices":[{"index":0,"message":{"content":"hi"}}],"error":null}"#;
        assert_eq!(parse_response(body).unwrap().text, "hi");
        // A malformed answer with an error object reports the error, not the shape.
        let body = br#"{"choices":"nope","error":{"message":"quota"}}"#;
        assert!(matches!(parse_response(body), Err(Failure::StreamError { .. })));
    }
}
