//! Parses a non-streaming Messages answer (`content` blocks of `text`, `thinking`,
//! `tool_use`; `stop_reason`; `usage`) into a [`ChatResponse`]. A 200 body that is an
//! `{"type":"error"}` object is reported like the same object arriving mid-stream.

use serde::Deserialize;
use serde_json::Value;

use rein_core::{ChatResponse, Failure, ToolCall, WireFormat};

use super::wire::{WireUsage, stop_reason};
use crate::http_error::error_object;
use crate::stream::malformed;

#[derive(Debug, Deserialize)]
struct Message {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Option<Vec<Value>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

pub(crate) fn parse_response(body: &[u8]) -> Result<ChatResponse, Failure> {
    let json: Value = serde_json::from_slice(body).map_err(|e| malformed("message", &e))?;
    if json.get("type").and_then(Value::as_str) == Some("error") {
        let error = error_object(&json);
        return Err(Failure::StreamError {
            format: WireFormat::Anthropic,
            error_type: error.error_type,
            code: error.code,
            message: error.message,
        });
    }
    let message: Message = serde_json::from_value(json).map_err(|e| malformed("message", &e))?;
    let mut response = ChatResponse {
        id: message.id.unwrap_or_default(),
        model: message.model.unwrap_or_default(),
        stop_reason: message.stop_reason.as_deref().map(stop_reason),
        usage: message.usage.map(|u| u.to_usage()).unwrap_or_default(),
        ..ChatResponse::default()
    };
    for block in message.content.iter().flatten() {
        let text =
            |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        match block.get("type").and_then(Value::as_str) {
            Some("text") => response.text.push_str(&text("text")),
            Some("thinking") => response.thinking.push_str(&text("thinking")),
            Some("tool_use") => response.tool_calls.push(ToolCall {
                id: text("id"),
                name: text("name"),
                arguments: block.get("input").map_or_else(|| "{}".to_owned(), Value::to_string),
            }),
            _ => {}
        }
    }
    Ok(response)
}
