//! Decodes an Anthropic Messages SSE stream: `message_start` (id, model, input usage) →
//! `Start` + `Usage`; `content_block_start` / `_delta` / `_stop` for `text`, `tool_use`
//! (`input_json_delta` fragments) and `thinking` blocks; `message_delta` (stop reason,
//! cumulative output usage); `message_stop` → `Done`; `event: error` → a mid-stream error.
//! `ping`, `signature_delta`, citations and event types added after this was written are
//! ignored, as Anthropic's versioning policy asks. Dispatch reads the `type` inside `data`
//! (falling back to the SSE event name), so padding and field order do not matter.

use serde_json::Value;

use rein_core::{Failure, StreamEvent, WireFormat};

use super::wire::{WireUsage, stop_reason};
use crate::http_error::error_object;
use crate::sse::SseEvent;
use crate::stream::{Decoder, malformed};

/// What kind of content block an index holds, for the work `content_block_stop` does.
#[derive(Debug)]
struct Block {
    index: u32,
    tool_use: bool,
    saw_arguments: bool,
}

#[derive(Debug, Default)]
pub(crate) struct AnthropicDecoder {
    blocks: Vec<Block>,
}

fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn index_of(json: &Value) -> u32 {
    json.get("index").and_then(Value::as_u64).map_or(0, |i| u32::try_from(i).unwrap_or(u32::MAX))
}

fn usage_of(value: Option<&Value>) -> Result<Option<StreamEvent>, Failure> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let usage: WireUsage =
        serde_json::from_value(value.clone()).map_err(|e| malformed("usage", &e))?;
    Ok(Some(StreamEvent::Usage { usage: usage.to_usage() }))
}

impl Decoder for AnthropicDecoder {
    fn decode(&mut self, record: &SseEvent) -> Result<Vec<StreamEvent>, Failure> {
        let data = record.data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let json: Value =
            serde_json::from_str(data).map_err(|e| malformed("message stream event", &e))?;
        let kind = json
            .get("type")
            .and_then(Value::as_str)
            .or(record.event.as_deref())
            .unwrap_or_default();
        let mut events = Vec::new();
        match kind {
            "message_start" => {
                let message = json.get("message").unwrap_or(&Value::Null);
                events.push(StreamEvent::Start {
                    id: str_field(message, "id").to_owned(),
                    model: str_field(message, "model").to_owned(),
                });
                events.extend(usage_of(message.get("usage"))?);
            }
            "content_block_start" => self.block_start(&json, &mut events),
            "content_block_delta" => self.block_delta(&json, &mut events),
            "content_block_stop" => {
                let index = index_of(&json);
                let block = self.blocks.iter().find(|b| b.index == index);
                if block.is_some_and(|b| b.tool_use && !b.saw_arguments) {
                    // A call without arguments streams no fragments; its input is `{}`.
                    events.push(StreamEvent::ToolCallDelta { index, arguments: "{}".into() });
                }
            }
            "message_delta" => {
                let delta = json.get("delta").unwrap_or(&Value::Null);
                if let Some(reason) = delta.get("stop_reason").and_then(Value::as_str) {
                    events.push(StreamEvent::Stop { reason: stop_reason(reason) });
                }
                events.extend(usage_of(json.get("usage"))?);
            }
            "message_stop" => events.push(StreamEvent::Done),
            "error" => {
                let error = error_object(&json);
                return Err(Failure::StreamError {
                    format: WireFormat::Anthropic,
                    error_type: error.error_type,
                    code: error.code,
                    message: error.message,
                });
            }
            // `ping`, and any event type added later.
            _ => {}
        }
        Ok(events)
    }
}

impl AnthropicDecoder {
    fn block_start(&mut self, json: &Value, events: &mut Vec<StreamEvent>) {
        let index = index_of(json);
        let block = json.get("content_block").unwrap_or(&Value::Null);
        let mut record = Block { index, tool_use: false, saw_arguments: false };
        match str_field(block, "type") {
            "text" => {
                let text = str_field(block, "text");
                if !text.is_empty() {
                    events.push(StreamEvent::TextDelta { text: text.to_owned() });
                }
            }
            "thinking" => {
                let text = str_field(block, "thinking");
                if !text.is_empty() {
                    events.push(StreamEvent::ThinkingDelta { text: text.to_owned() });
                }
            }
            "tool_use" => {
                record.tool_use = true;
                events.push(StreamEvent::ToolCallStart {
                    index,
                    id: str_field(block, "id").to_owned(),
                    name: str_field(block, "name").to_owned(),
                });
                // Streams start with `input: {}` and send the input as fragments; a block that
                // arrives with its input filled in carries it here.
                if let Some(input) =
                    block.get("input").filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                {
                    record.saw_arguments = true;
                    events.push(StreamEvent::ToolCallDelta { index, arguments: input.to_string() });
                }
            }
            // `redacted_thinking`, server tool blocks and later additions carry nothing the
            // canonical answer models.
            _ => {}
        }
        self.blocks.retain(|b| b.index != index);
        self.blocks.push(record);
    }

    fn block_delta(&mut self, json: &Value, events: &mut Vec<StreamEvent>) {
        let index = index_of(json);
        let delta = json.get("delta").unwrap_or(&Value::Null);
        match str_field(delta, "type") {
            "text_delta" => {
                let text = str_field(delta, "text");
                if !text.is_empty() {
                    events.push(StreamEvent::TextDelta { text: text.to_owned() });
                }
            }
            "thinking_delta" => {
                let text = str_field(delta, "thinking");
                if !text.is_empty() {
                    events.push(StreamEvent::ThinkingDelta { text: text.to_owned() });
                }
            }
            "input_json_delta" => {
                let fragment = str_field(delta, "partial_json");
                if !fragment.is_empty() {
                    if let Some(block) = self.blocks.iter_mut().find(|b| b.index == index) {
                        block.saw_arguments = true;
                    }
                    events
                        .push(StreamEvent::ToolCallDelta { index, arguments: fragment.to_owned() });
                }
            }
            // `signature_delta` (opaque thinking signature), `citations_delta`, later additions.
            _ => {}
        }
    }
}
