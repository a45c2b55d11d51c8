//! Parses a non-streaming Converse answer (`output.message.content` blocks of `text`,
//! `toolUse`, `reasoningContent`; `stopReason`; `usage`) into a [`ChatResponse`], and maps
//! Converse's stop reasons onto the canonical ones.

use serde::Deserialize;
use serde_json::Value;

use rein_core::{ChatResponse, Failure, StopReason, ToolCall, Usage};

use crate::stream::malformed;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: u32,
    #[serde(default)]
    output_tokens: u32,
}

impl WireUsage {
    pub(crate) fn to_usage(&self) -> Usage {
        Usage { input_tokens: self.input_tokens, output_tokens: self.output_tokens }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Converse {
    #[serde(default)]
    output: Option<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// Converse's `stopReason` as the canonical reason.
pub(crate) fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "guardrail_intervened" | "content_filtered" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}

pub(crate) fn parse_response(body: &[u8]) -> Result<ChatResponse, Failure> {
    let converse: Converse =
        serde_json::from_slice(body).map_err(|e| malformed("converse response", &e))?;
    let mut response = ChatResponse {
        stop_reason: converse.stop_reason.as_deref().map(stop_reason),
        usage: converse.usage.map(|u| u.to_usage()).unwrap_or_default(),
        ..ChatResponse::default()
    };
    let content = converse
        .output
        .as_ref()
        .and_then(|output| output.pointer("/message/content"))
        .and_then(Value::as_array);
    for block in content.into_iter().flatten() {
        if let Some(text) = block.get("text").and_then(Value::as_str) {
            response.text.push_str(text);
        } else if let Some(tool) = block.get("toolUse") {
            let field = |key: &str| tool.get(key).and_then(Value::as_str).unwrap_or_default();
            response.tool_calls.push(ToolCall {
                id: field("toolUseId").to_owned(),
                name: field("name").to_owned(),
                arguments: tool.get("input").map_or_else(|| "{}".to_owned(), Value::to_string),
            });
        } else if let Some(text) =
            block.pointer("/reasoningContent/reasoningText/text").and_then(Value::as_str)
        {
            response.thinking.push_str(text);
        }
    }
    Ok(response)
}
