//! Parses a non-streaming Responses API answer, the `response` object: `output` items of type
//! `message` (their `output_text` parts are the text, a `refusal` part the refusal) and
//! `function_call` (a tool call, its `call_id` as the id); `reasoning` and any other item are
//! skipped. `usage.input_tokens`/`output_tokens` are the usage. `status` gives the stop
//! reason: `completed` ends the turn (or calls tools when it made calls), `incomplete` is read
//! from `incomplete_details.reason` (`max_output_tokens`, `content_filter`). A `failed`
//! response, or one carrying a non-null `error`, is reported like the same error mid-stream.
//! The same object closes a stream (`response.completed`, `.incomplete`, `.failed`), so the
//! stream decoder reads it with these types too.

use serde::Deserialize;
use serde_json::Value;

use rein_core::{ChatResponse, Failure, StopReason, ToolCall, Usage, WireFormat};

use crate::stream::malformed;

/// The `response` object, every field optional and unknown fields ignored.
#[derive(Debug, Default, Deserialize)]
pub(super) struct WireResponse {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub error: Option<WireError>,
    #[serde(default)]
    pub incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    pub output: Option<Vec<Value>>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct WireError {
    #[serde(default)]
    pub code: Option<Value>,
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

impl WireError {
    /// The mid-stream failure this error stands for.
    pub(super) fn failure(self) -> Failure {
        let code = match self.code {
            Some(Value::String(code)) => Some(code),
            Some(Value::Number(code)) => Some(code.to_string()),
            _ => None,
        };
        Failure::StreamError {
            format: WireFormat::OpenAi,
            error_type: self.error_type,
            code,
            message: self.message.unwrap_or_default(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct IncompleteDetails {
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub input_tokens: Option<u32>,
    #[serde(default)]
    pub output_tokens: Option<u32>,
}

impl WireUsage {
    pub(super) fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
        }
    }
}

impl WireResponse {
    /// The stop reason its status stands for; `called_tools` says whether the answer made tool
    /// calls (a completed turn that did stopped to call them). `None` while in progress.
    pub(super) fn stop_reason(&self, called_tools: bool) -> Option<StopReason> {
        match self.status.as_deref()? {
            "completed" if called_tools => Some(StopReason::ToolUse),
            "completed" => Some(StopReason::EndTurn),
            "incomplete" => {
                let reason = self.incomplete_details.as_ref().and_then(|d| d.reason.as_deref());
                Some(match reason {
                    Some("max_output_tokens") => StopReason::MaxTokens,
                    Some("content_filter") => StopReason::ContentFilter,
                    Some(other) => StopReason::Other(other.to_owned()),
                    None => StopReason::Other("incomplete".to_owned()),
                })
            }
            _ => None,
        }
    }

    /// The failure a `failed` response (or any carrying an error) reports.
    pub(super) fn failure(&mut self) -> Option<Failure> {
        let failed = self.status.as_deref() == Some("failed");
        match self.error.take() {
            Some(error) => Some(error.failure()),
            None if failed => Some(Failure::StreamError {
                format: WireFormat::OpenAi,
                error_type: None,
                code: None,
                message: "the response failed".to_owned(),
            }),
            None => None,
        }
    }
}

pub(crate) fn parse_response(body: &[u8]) -> Result<ChatResponse, Failure> {
    let json: Value = serde_json::from_slice(body).map_err(|e| malformed("response", &e))?;
    // An OpenAI error object on a 200 (`{"error": {"type", "code", "message"}}`).
    if json.get("object").is_none()
        && json.get("output").is_none()
        && json.get("error").is_some_and(Value::is_object)
    {
        let error = crate::http_error::error_object(&json);
        return Err(Failure::StreamError {
            format: WireFormat::OpenAi,
            error_type: error.error_type,
            code: error.code,
            message: error.message,
        });
    }
    let mut response: WireResponse =
        serde_json::from_value(json).map_err(|e| malformed("response", &e))?;
    if let Some(failure) = response.failure() {
        return Err(failure);
    }
    Ok(answer(response))
}

fn answer(response: WireResponse) -> ChatResponse {
    let mut out = ChatResponse {
        id: response.id.clone().unwrap_or_default(),
        model: response.model.clone().unwrap_or_default(),
        usage: response.usage.as_ref().map(WireUsage::to_usage).unwrap_or_default(),
        ..ChatResponse::default()
    };
    for item in response.output.iter().flatten() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let parts = item.get("content").and_then(Value::as_array);
                for part in parts.into_iter().flatten() {
                    let text = |key: &str| part.get(key).and_then(Value::as_str).unwrap_or("");
                    match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => out.text.push_str(text("text")),
                        Some("refusal") => {
                            out.refusal.get_or_insert_with(String::new).push_str(text("refusal"))
                        }
                        _ => {}
                    }
                }
            }
            Some("function_call") => {
                let field = |key: &str| {
                    item.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
                };
                out.tool_calls.push(ToolCall {
                    id: field("call_id"),
                    name: field("name"),
                    arguments: field("arguments"),
                });
            }
            // `reasoning` (encrypted or summarised thinking), built-in tool calls: not answers.
            _ => {}
        }
    }
    out.refusal = out.refusal.filter(|refusal| !refusal.is_empty());
    out.stop_reason = response.stop_reason(!out.tool_calls.is_empty());
    out
}
