//! Parses a non-streaming `generateContent` answer (`candidates[0].content.parts` of `text`,
//! thought `text` and `functionCall`; `finishReason`; `usageMetadata`; `responseId`;
//! `modelVersion`) into a [`ChatResponse`]. A prompt blocked outright (`promptFeedback`
//! without candidates) is the content policy's rejection; an `{"error"}` body is reported
//! like the same object arriving mid-stream.

use serde_json::Value;

use rein_core::{ChatResponse, Failure, ToolCall};

use super::wire::{self, Part, WireUsage};
use crate::stream::malformed;

pub(crate) fn parse_response(body: &[u8]) -> Result<ChatResponse, Failure> {
    let json: Value =
        serde_json::from_slice(body).map_err(|e| malformed("generateContent response", &e))?;
    if let Some(failure) = wire::error_in_body(&json).or_else(|| wire::prompt_blocked(&json)) {
        return Err(failure);
    }
    let id = json.get("responseId").and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut response = ChatResponse {
        model: json.get("modelVersion").and_then(Value::as_str).unwrap_or_default().to_owned(),
        ..ChatResponse::default()
    };
    if let Some(usage) = json.get("usageMetadata") {
        let usage: WireUsage =
            serde_json::from_value(usage.clone()).map_err(|e| malformed("usageMetadata", &e))?;
        response.usage = usage.to_usage();
    }
    let candidate = json
        .get("candidates")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| Failure::Malformed { detail: "the answer has no candidate".into() })?;
    for part in wire::parts(candidate) {
        match part {
            Part::Text(text) => response.text.push_str(&text),
            Part::Thought(text) => response.thinking.push_str(&text),
            Part::Call { id: call_id, name, arguments } => {
                let index = u32::try_from(response.tool_calls.len()).unwrap_or(u32::MAX);
                let id = wire::call_id(call_id, &id, index);
                response.tool_calls.push(ToolCall { id, name, arguments });
            }
        }
    }
    if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
        response.stop_reason = Some(wire::stop_reason(reason, !response.tool_calls.is_empty())?);
    }
    response.id = id;
    Ok(response)
}
