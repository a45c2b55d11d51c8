//! Anthropic Messages shapes shared by the streaming and non-streaming paths: usage (with the
//! prompt-cache counts folded into `input_tokens`, so usage means the whole prompt as it does
//! for OpenAI) and the `stop_reason` → [`StopReason`] mapping.

use serde::Deserialize;

use rein_core::{StopReason, Usage};

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub input_tokens: Option<u32>,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u32>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u32>,
    #[serde(default)]
    pub output_tokens: Option<u32>,
}

impl WireUsage {
    pub(super) fn to_usage(&self) -> Usage {
        let input =
            [self.input_tokens, self.cache_creation_input_tokens, self.cache_read_input_tokens]
                .into_iter()
                .flatten()
                .fold(0u32, u32::saturating_add);
        Usage { input_tokens: input, output_tokens: self.output_tokens.unwrap_or(0) }
    }
}

pub(crate) fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" => StopReason::EndTurn,
        "max_tokens" => StopReason::MaxTokens,
        // The answer hit the context window: cut off just like at max_tokens, and must never
        // pass as complete.
        "model_context_window_exceeded" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "tool_use" => StopReason::ToolUse,
        "pause_turn" => StopReason::PauseTurn,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}
