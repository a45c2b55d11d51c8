//! Gemini `generateContent` shapes shared by the streaming and non-streaming paths: the usage
//! (`promptTokenCount` already counts cached tokens; the prompts of server-side tools such as
//! URL context or code execution, `toolUsePromptTokenCount`, are input beside it; thinking
//! tokens are billed as output, so `thoughtsTokenCount` joins `candidatesTokenCount`: the four
//! add up to `totalTokenCount`), the `finishReason` → [`StopReason`] mapping, and the reading
//! of one candidate's `parts`.

use serde::Deserialize;
use serde_json::Value;

use rein_core::{Failure, StopReason, Usage, WireFormat};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub prompt_token_count: Option<u32>,
    #[serde(default)]
    pub candidates_token_count: Option<u32>,
    #[serde(default)]
    pub thoughts_token_count: Option<u32>,
    #[serde(default)]
    pub tool_use_prompt_token_count: Option<u32>,
}

impl WireUsage {
    pub(super) fn to_usage(&self) -> Usage {
        let output = self
            .candidates_token_count
            .unwrap_or(0)
            .saturating_add(self.thoughts_token_count.unwrap_or(0));
        let input = self
            .prompt_token_count
            .unwrap_or(0)
            .saturating_add(self.tool_use_prompt_token_count.unwrap_or(0));
        Usage { input_tokens: input, output_tokens: output }
    }
}

/// The stop reason for a `finishReason`; `called_tools` because Gemini ends a turn that calls
/// functions with `STOP`. `MALFORMED_FUNCTION_CALL` is no stop at all: the model wrote a call
/// that could not be parsed, which is a malformed answer (retried like one).
pub(crate) fn stop_reason(reason: &str, called_tools: bool) -> Result<StopReason, Failure> {
    Ok(match reason {
        "STOP" if called_tools => StopReason::ToolUse,
        "STOP" => StopReason::EndTurn,
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT" => StopReason::ContentFilter,
        "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" => {
            return Err(Failure::Malformed {
                detail: format!("the model's function call could not be used ({reason})"),
            });
        }
        other => StopReason::Other(other.to_owned()),
    })
}

/// A prompt Gemini refused to answer at all (`promptFeedback.blockReason`, no candidates):
/// reported as the content policy's rejection, with the reason.
pub(crate) fn prompt_blocked(json: &Value) -> Option<Failure> {
    let reason = json.get("promptFeedback")?.get("blockReason")?.as_str()?;
    let has_candidates =
        json.get("candidates").and_then(Value::as_array).is_some_and(|c| !c.is_empty());
    (!has_candidates).then(|| Failure::StreamError {
        format: WireFormat::Gemini,
        error_type: None,
        code: Some("content_filter".into()),
        message: format!("the prompt was blocked by Gemini's content policy ({reason})"),
    })
}

/// An `{"error": {...}}` object inside a 200 body or a stream, as Google sends it.
pub(crate) fn error_in_body(json: &Value) -> Option<Failure> {
    let error = json.get("error")?;
    let read = crate::http_error::google_error(error);
    Some(Failure::StreamError {
        format: WireFormat::Gemini,
        error_type: read.error_type,
        code: read.code,
        message: read.message,
    })
}

/// One part of a candidate's content, as the canonical answer sees it.
pub(crate) enum Part {
    Text(String),
    Thought(String),
    Call { id: Option<String>, name: String, arguments: String },
}

pub(crate) fn parts(candidate: &Value) -> Vec<Part> {
    let parts = candidate.get("content").and_then(|c| c.get("parts")).and_then(Value::as_array);
    let mut out = Vec::new();
    for part in parts.into_iter().flatten() {
        if let Some(call) = part.get("functionCall") {
            let name = call.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let arguments = call
                .get("args")
                .filter(|args| !args.is_null())
                .map_or_else(|| "{}".to_owned(), Value::to_string);
            let id = call.get("id").and_then(Value::as_str).map(str::to_owned);
            out.push(Part::Call { id, name, arguments });
        } else if let Some(text) = part.get("text").and_then(Value::as_str) {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                out.push(Part::Thought(text.to_owned()));
            } else {
                out.push(Part::Text(text.to_owned()));
            }
        }
        // `inlineData`, `executableCode`, `codeExecutionResult` and later part kinds carry
        // nothing the canonical answer models.
    }
    out
}

/// The id of a function call that came without one (older models send none): unique within
/// the answer, so a tool result can name the call it answers.
pub(crate) fn call_id(id: Option<String>, response_id: &str, index: u32) -> String {
    id.filter(|id| !id.is_empty()).unwrap_or_else(|| format!("call_{response_id}_{index}"))
}
