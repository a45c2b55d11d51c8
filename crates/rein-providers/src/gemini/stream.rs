//! Decodes a `streamGenerateContent?alt=sse` stream. Every `data:` record is a whole
//! GenerateContentResponse carrying the next piece of the answer: the first yields `Start`
//! (`responseId`, `modelVersion`), each part a text, thought or whole function call (a call
//! arrives complete, never in fragments). There is no terminator such as `[DONE]`: the chunk
//! that carries `finishReason` ends the answer, and yields the usage, the stop and `Done`. A
//! stream whose bytes end before that chunk yields neither, so the engine sees it cut off,
//! never complete. An `{"error"}` record is a mid-stream error; a prompt blocked outright is
//! the content policy's rejection.

use serde_json::Value;

use rein_core::{Failure, StreamEvent};

use super::wire::{self, Part, WireUsage};
use crate::sse::SseEvent;
use crate::stream::{Decoder, malformed};

#[derive(Debug, Default)]
pub(crate) struct GeminiDecoder {
    started: bool,
    response_id: String,
    /// Function calls seen so far: the next call's index, and whether the turn calls tools.
    calls: u32,
}

impl Decoder for GeminiDecoder {
    fn decode(
        &mut self,
        record: &SseEvent<'_>,
        events: &mut Vec<StreamEvent>,
    ) -> Result<(), Failure> {
        let data = record.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let json: Value = serde_json::from_str(data)
            .map_err(|e| malformed("generateContent stream chunk", &e))?;
        if let Some(failure) = wire::error_in_body(&json).or_else(|| wire::prompt_blocked(&json)) {
            return Err(failure);
        }
        if !self.started {
            self.started = true;
            self.response_id =
                json.get("responseId").and_then(Value::as_str).unwrap_or_default().to_owned();
            let model = json.get("modelVersion").and_then(Value::as_str).unwrap_or_default();
            events
                .push(StreamEvent::Start { id: self.response_id.clone(), model: model.to_owned() });
        }
        let candidate = json.get("candidates").and_then(Value::as_array).and_then(|c| c.first());
        let Some(candidate) = candidate else {
            return Ok(());
        };
        for part in wire::parts(candidate) {
            match part {
                Part::Text(text) if !text.is_empty() => {
                    events.push(StreamEvent::TextDelta { text })
                }
                Part::Thought(text) if !text.is_empty() => {
                    events.push(StreamEvent::ThinkingDelta { text })
                }
                Part::Text(_) | Part::Thought(_) => {}
                Part::Call { id, name, arguments } => {
                    let index = self.calls;
                    self.calls = self.calls.saturating_add(1);
                    let id = wire::call_id(id, &self.response_id, index);
                    events.push(StreamEvent::ToolCallStart { index, id, name });
                    events.push(StreamEvent::ToolCallDelta { index, arguments });
                }
            }
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            if let Some(usage) = json.get("usageMetadata") {
                let usage: WireUsage = serde_json::from_value(usage.clone())
                    .map_err(|e| malformed("usageMetadata", &e))?;
                events.push(StreamEvent::Usage { usage: usage.to_usage() });
            }
            events.push(StreamEvent::Stop { reason: wire::stop_reason(reason, self.calls > 0)? });
            events.push(StreamEvent::Done);
        }
        Ok(())
    }
}
