//! Decodes a Chat Completions SSE stream. Each `data:` line is a `chat.completion.chunk`;
//! the first one yields `Start`, then per chunk: `delta.content`, `delta.refusal`, reasoning
//! text (`reasoning_content` from vLLM/DeepSeek, `reasoning` from Ollama/OpenRouter),
//! `delta.tool_calls` fragments keyed by `index`, `logprobs.content`, `finish_reason`, and
//! `usage` (the final `choices: []` chunk when `include_usage` is on). `data: [DONE]` is
//! `Done`. An `{"error": ..}` object on a `data:` line, or an `event: error`, is a
//! mid-stream error. Only choice 0 is read: rein always asks for one answer.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use rein_core::{Failure, StreamEvent, WireFormat};

use super::chunk_scan;
use super::wire::{WireFunction, WireLogprobs, WireUsage, stop_reason};
use crate::http_error::error_object;
use crate::sse::SseEvent;
use crate::stream::{Decoder, malformed};

// `id` and `model` repeat on every chunk and are read from the first: borrowed, not copied.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Chunk<'a> {
    #[serde(default, borrow)]
    pub(super) id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) model: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) choices: Option<Vec<Choice>>,
    #[serde(default)]
    pub(super) usage: Option<WireUsage>,
    /// Present (non-null) on a mid-stream error object: read by the slow path.
    #[serde(default)]
    pub(super) error: Option<serde::de::IgnoredAny>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Choice {
    #[serde(default)]
    pub(super) index: Option<u32>,
    #[serde(default)]
    pub(super) delta: Option<Delta>,
    #[serde(default)]
    pub(super) finish_reason: Option<String>,
    #[serde(default)]
    pub(super) logprobs: Option<WireLogprobs>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Delta {
    #[serde(default)]
    pub(super) content: Option<String>,
    #[serde(default)]
    pub(super) refusal: Option<String>,
    #[serde(default)]
    pub(super) reasoning_content: Option<String>,
    #[serde(default)]
    pub(super) reasoning: Option<String>,
    #[serde(default)]
    pub(super) tool_calls: Option<Vec<ToolCallDelta>>,
    #[serde(default)]
    pub(super) function_call: Option<WireFunction>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct ToolCallDelta {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Debug, Default)]
pub(crate) struct OpenAiDecoder {
    started: bool,
    /// Tool call indexes already announced with `ToolCallStart`. Some servers repeat the id
    /// on every fragment; only the first one starts a call.
    started_calls: Vec<u32>,
    /// Where the direct reader takes up the stream's next chunk.
    resume: Option<chunk_scan::Resume>,
}

impl Decoder for OpenAiDecoder {
    fn decode(&mut self, record: &SseEvent<'_>) -> Result<Vec<StreamEvent>, Failure> {
        let data = record.data.trim();
        if data == "[DONE]" {
            return Ok(vec![StreamEvent::Done]);
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        // The common case: a well-formed chunk with no error, read straight into its struct,
        // by the direct reader when it can and by serde when it cannot. Anything else (an
        // error object, a malformed line) takes the path below, which reads the error or says
        // what is wrong exactly as before.
        if record.event.as_deref() != Some("error") {
            if let Some(chunk) = chunk_scan::read(data, &mut self.resume) {
                #[cfg(any(debug_assertions, fuzzing))]
                chunk_scan::check_against_serde(data, &chunk);
                return Ok(self.events(chunk));
            }
            if let Ok(chunk) = serde_json::from_str::<Chunk>(data)
                && chunk.error.is_none()
            {
                return Ok(self.events(chunk));
            }
        }
        let json: Value =
            serde_json::from_str(data).map_err(|e| malformed("chat completion chunk", &e))?;
        let error_present = json.get("error").is_some_and(|error| !error.is_null());
        if error_present || record.event.as_deref() == Some("error") {
            let error = error_object(&json);
            return Err(Failure::StreamError {
                format: WireFormat::OpenAi,
                error_type: error.error_type,
                code: error.code,
                message: error.message,
            });
        }
        let chunk: Chunk =
            Chunk::deserialize(&json).map_err(|e| malformed("chat completion chunk", &e))?;
        Ok(self.events(chunk))
    }
}

impl OpenAiDecoder {
    /// The events of one chunk.
    fn events(&mut self, chunk: Chunk<'_>) -> Vec<StreamEvent> {
        let mut events = Vec::with_capacity(2);
        let id_or_model = chunk.id.as_deref().is_some_and(|id| !id.is_empty())
            || chunk.model.as_deref().is_some_and(|model| !model.is_empty());
        let has_choices = chunk.choices.as_ref().is_some_and(|choices| !choices.is_empty());
        // Azure opens with an anonymous `prompt_filter_results` chunk (`"id":"","model":""`,
        // no choices); the answer's real id and model come with the next one.
        if !self.started && (id_or_model || has_choices) {
            self.started = true;
            events.push(StreamEvent::Start {
                id: chunk.id.map(Cow::into_owned).unwrap_or_default(),
                model: chunk.model.map(Cow::into_owned).unwrap_or_default(),
            });
        }
        for choice in chunk.choices.into_iter().flatten().filter(|c| c.index.unwrap_or(0) == 0) {
            if let Some(delta) = choice.delta {
                self.delta(delta, &mut events);
            }
            if let Some(logprobs) = &choice.logprobs {
                let tokens = logprobs.to_tokens();
                if !tokens.is_empty() {
                    events.push(StreamEvent::Logprobs { tokens });
                }
            }
            if let Some(reason) = &choice.finish_reason {
                events.push(StreamEvent::Stop { reason: stop_reason(reason) });
            }
        }
        if let Some(usage) = &chunk.usage {
            events.push(StreamEvent::Usage { usage: usage.to_usage() });
        }
        events
    }

    fn delta(&mut self, delta: Delta, events: &mut Vec<StreamEvent>) {
        let reasoning = delta.reasoning_content.or(delta.reasoning);
        if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
            events.push(StreamEvent::ThinkingDelta { text });
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            events.push(StreamEvent::TextDelta { text });
        }
        if let Some(text) = delta.refusal.filter(|t| !t.is_empty()) {
            events.push(StreamEvent::RefusalDelta { text });
        }
        for (position, call) in delta.tool_calls.iter().flatten().enumerate() {
            let index = call.index.unwrap_or(position as u32);
            self.call_fragment(index, call.id.as_deref(), call.function.as_ref(), events);
        }
        if let Some(function) = &delta.function_call {
            // The pre-tools `function_call` shape: one call, no id.
            self.call_fragment(0, None, Some(function), events);
        }
    }

    fn call_fragment(
        &mut self,
        index: u32,
        id: Option<&str>,
        function: Option<&WireFunction>,
        events: &mut Vec<StreamEvent>,
    ) {
        if !self.started_calls.contains(&index) {
            self.started_calls.push(index);
            events.push(StreamEvent::ToolCallStart {
                index,
                id: id.unwrap_or_default().to_owned(),
                name: function.and_then(|f| f.name.clone()).unwrap_or_default(),
            });
        }
        if let Some(arguments) =
            function.and_then(|f| f.arguments.as_ref()).filter(|a| !a.is_empty())
        {
            events.push(StreamEvent::ToolCallDelta { index, arguments: arguments.clone() });
        }
    }
}
