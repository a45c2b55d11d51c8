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
    fn decode(
        &mut self,
        record: &SseEvent<'_>,
        events: &mut Vec<StreamEvent>,
    ) -> Result<(), Failure> {
        let data = record.data.trim();
        if data == "[DONE]" {
            events.push(StreamEvent::Done);
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        // The common case: a well-formed chunk with no error, read straight into its struct,
        // by the direct reader when it can and by serde when it cannot. Anything else (an
        // error object, a malformed line) takes the path below, which reads the error or says
        // what is wrong exactly as before.
        if record.event.as_deref() != Some("error") {
            // Most chunks: a text delta shaped as the last one, its new text all there is to
            // read. Its events are the text's (the stream has started: the last one did that).
            if self.started
                && let Some(shaped) = chunk_scan::text_of_shape(data, self.resume.as_ref())
            {
                #[cfg(any(debug_assertions, fuzzing))]
                let at = events.len();
                if shaped.index.unwrap_or(0) == 0 && !shaped.content.is_empty() {
                    events.push(StreamEvent::TextDelta { text: shaped.content.into_owned() });
                }
                #[cfg(any(debug_assertions, fuzzing))]
                self.check_shaped(data, &events[at..]);
                return Ok(());
            }
            if let Some(chunk) = chunk_scan::read_whole(data, &mut self.resume) {
                #[cfg(any(debug_assertions, fuzzing))]
                chunk_scan::check_against_serde(data, &chunk);
                self.events(chunk, events);
                return Ok(());
            }
            if let Ok(chunk) = serde_json::from_str::<Chunk>(data)
                && chunk.error.is_none()
            {
                self.events(chunk, events);
                return Ok(());
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
        self.events(chunk, events);
        Ok(())
    }
}

impl OpenAiDecoder {
    /// Debug builds and the fuzz targets: a chunk read from the last one's shape is the chunk
    /// serde reads, and its events are those the whole chunk gives.
    #[cfg(any(debug_assertions, fuzzing))]
    fn check_shaped(&mut self, data: &str, read: &[StreamEvent]) {
        let chunk = self
            .resume
            .as_ref()
            .and_then(|resume| chunk_scan::text_of_shape(data, Some(resume))?.chunk(data, resume));
        assert!(chunk.is_some(), "a shaped chunk read once reads again, from {data:?}");
        let Some(chunk) = chunk else { return };
        chunk_scan::check_against_serde(data, &chunk);
        let mut whole = Vec::new();
        self.events(chunk, &mut whole);
        assert_eq!(read, whole, "a shaped chunk's events are the whole chunk's, from {data:?}");
    }

    /// The events of one chunk, appended to `events`.
    fn events(&mut self, chunk: Chunk<'_>, events: &mut Vec<StreamEvent>) {
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
                self.delta(delta, events);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::replay_sse;

    fn chunk(index: u32, content: &str) -> String {
        format!(
            "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\
             \"choices\":[{{\"index\":{index},\"delta\":{{\"content\":{content}}},\"logprobs\":null,\
             \"finish_reason\":null}}]}}\n\n",
            content = serde_json::to_string(content).unwrap_or_default()
        )
    }

    /// Chunks read from the last one's shape give the events the whole chunk gives: another
    /// choice's text (rein reads choice 0) and an empty text give none, however many come.
    #[test]
    fn a_shaped_chunk_gives_the_whole_chunks_events() {
        let mut body = String::new();
        body.push_str(&chunk(0, ""));
        body.push_str(&chunk(0, "A"));
        for text in ["B", "B2", "B\"3"] {
            body.push_str(&chunk(1, text));
        }
        for text in ["C", "", "C\n2", ""] {
            body.push_str(&chunk(0, text));
        }
        body.push_str(
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\
             \"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n\
             data: [DONE]\n\n",
        );
        let events: Vec<StreamEvent> = replay_sse(body.as_bytes(), OpenAiDecoder::default())
            .into_iter()
            .map(|event| event.map_err(|failure| failure.to_string()))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|failure| panic!("{failure}"));
        let text = |text: &str| StreamEvent::TextDelta { text: text.to_owned() };
        assert_eq!(
            events,
            [
                StreamEvent::Start { id: "c1".into(), model: "m".into() },
                text("A"),
                text("C"),
                text("C\n2"),
                StreamEvent::Stop { reason: rein_core::StopReason::EndTurn },
                StreamEvent::Done,
            ]
        );
    }
}
