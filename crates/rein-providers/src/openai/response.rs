//! Parses a non-streaming Chat Completions answer (`choices[0].message` with `content`,
//! `refusal`, `tool_calls`, reasoning text; `finish_reason`; `usage`; `logprobs`) into a
//! [`ChatResponse`]. A 200 body carrying `{"error": ..}` is reported like the same object
//! arriving mid-stream.

use serde::Deserialize;
use serde_json::Value;

use rein_core::{ChatResponse, Failure, ToolCall, WireFormat};

use super::wire::{WireFunction, WireLogprobs, WireUsage, stop_reason};
use crate::http_error::error_object;
use crate::stream::malformed;

#[derive(Debug, Deserialize)]
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

#[derive(Debug, Deserialize)]
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

#[derive(Debug, Deserialize)]
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

#[derive(Debug, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

pub(crate) fn parse_response(body: &[u8]) -> Result<ChatResponse, Failure> {
    // One typed pass for the common case; an error body, or one that does not fit the shape,
    // is looked at as a JSON tree (which is what reports the error object of a body whose
    // other fields are malformed).
    match serde_json::from_slice::<Completion>(body) {
        Ok(completion) if completion.error.is_none() => Ok(answer(completion)),
        _ => parse_slow(body),
    }
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
