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
use crate::json_scan::{Scan, first};
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

/// A `content_block_delta` carrying a `text_delta` (all but a handful of a stream's events),
/// read directly: its text, or `None` for any other event and for anything not read exactly as
/// the `Value` tree reads it (a missing or repeated field, an escaped key, a number an `f64`
/// may not hold), which the tree then reads. Parsing a tree for these cost about four times the
/// direct reading.
fn text_delta(data: &str) -> Option<String> {
    let mut scan = Scan { text: data, bytes: data.as_bytes(), at: 0, finite_numbers: true };
    let mut seen = 0;
    let mut text = None;
    scan.object(|scan, key| {
        match key {
            "type" => {
                first(&mut seen, 1)?;
                (scan.optional_string()?? == "content_block_delta").then_some(())?;
            }
            "index" => {
                first(&mut seen, 2)?;
                scan.optional_u32()??;
            }
            "delta" => {
                first(&mut seen, 4)?;
                let mut inner = 0;
                scan.object(|scan, key| {
                    match key {
                        "type" => {
                            first(&mut inner, 1)?;
                            (scan.optional_string()?? == "text_delta").then_some(())?;
                        }
                        "text" => {
                            first(&mut inner, 2)?;
                            text = Some(scan.optional_string()??.into_owned());
                        }
                        _ => scan.skip(2)?,
                    }
                    Some(())
                })?;
                (inner == 3).then_some(())?;
            }
            _ => scan.skip(1)?,
        }
        Some(())
    })?;
    scan.whitespace();
    (scan.at == scan.bytes.len() && seen == 7).then_some(())?;
    text
}

impl Decoder for AnthropicDecoder {
    fn decode(
        &mut self,
        record: &SseEvent<'_>,
        events: &mut Vec<StreamEvent>,
    ) -> Result<(), Failure> {
        let data = record.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if let Some(text) = text_delta(data) {
            #[cfg(any(debug_assertions, fuzzing))]
            {
                let direct: &[StreamEvent] = if text.is_empty() {
                    &[]
                } else {
                    &[StreamEvent::TextDelta { text: text.clone() }]
                };
                let mut tree = Vec::new();
                let read = self.decode_tree(data, record, &mut tree);
                assert!(
                    read.is_ok() && tree == direct,
                    "the direct text delta reader gave {direct:?} where the tree gave \
                     {read:?} {tree:?}, from {data:?}"
                );
            }
            if !text.is_empty() {
                events.push(StreamEvent::TextDelta { text });
            }
            return Ok(());
        }
        self.decode_tree(data, record, events)
    }
}

impl AnthropicDecoder {
    /// Any event, read as a JSON tree.
    fn decode_tree(
        &mut self,
        data: &str,
        record: &SseEvent<'_>,
        events: &mut Vec<StreamEvent>,
    ) -> Result<(), Failure> {
        let json: Value =
            serde_json::from_str(data).map_err(|e| malformed("message stream event", &e))?;
        let kind = json
            .get("type")
            .and_then(Value::as_str)
            .or(record.event.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                let message = json.get("message").unwrap_or(&Value::Null);
                events.push(StreamEvent::Start {
                    id: str_field(message, "id").to_owned(),
                    model: str_field(message, "model").to_owned(),
                });
                events.extend(usage_of(message.get("usage"))?);
            }
            "content_block_start" => self.block_start(&json, events),
            "content_block_delta" => self.block_delta(&json, events),
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
        Ok(())
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_scan::tests::{edited, edits};

    const DELTA: &str =
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#;

    fn record(data: &str) -> SseEvent<'_> {
        SseEvent { event: Some("content_block_delta".into()), data: data.into(), terminated: true }
    }

    /// The events the tree reads from `data`.
    fn tree(data: &str) -> Result<Vec<StreamEvent>, Failure> {
        let mut events = Vec::new();
        AnthropicDecoder::default().decode_tree(data, &record(data), &mut events).map(|()| events)
    }

    /// The events the decoder reads from `data`, by either of its readers.
    fn decoded(data: &str) -> Result<Vec<StreamEvent>, Failure> {
        let mut events = Vec::new();
        AnthropicDecoder::default().decode(&record(data), &mut events).map(|()| events)
    }

    #[test]
    fn a_text_delta_is_read_directly_as_the_tree_reads_it() {
        assert_eq!(text_delta(DELTA).as_deref(), Some("Hello"));
        for data in [
            DELTA,
            r#"{"delta":{"text":"a\nb \"q\" \ud83d\ude00","type":"text_delta"},"index":3,"type":"content_block_delta"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}"#,
            r#" { "type" : "content_block_delta" , "index" : 1 , "delta" : { "type" : "text_delta" , "text" : "x" , "extra" : [ 1.5 , { } ] } , "padding" : null } "#,
        ] {
            let direct =
                text_delta(data.trim()).unwrap_or_else(|| panic!("left to the tree: {data}"));
            let events = decoded(data).unwrap();
            assert_eq!(events, tree(data.trim()).unwrap(), "{data}");
            assert_eq!(events.is_empty(), direct.is_empty());
        }
    }

    #[test]
    fn other_events_and_what_the_tree_reads_another_way_are_left_to_it() {
        for data in [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
            // No type: the SSE event's name decides. An index the tree reads as 0 or as u32::MAX.
            r#"{"index":0,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":1.0,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":null,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":4294967296,"delta":{"type":"text_delta","text":"a"}}"#,
            // Repeated or missing fields, an escaped key, a null text.
            r#"{"type":"content_block_delta","type":"ping","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a","text":"b"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"text":"a"}}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","t\u0065xt":"a"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":null}}"#,
        ] {
            assert!(text_delta(data).is_none(), "read directly: {data}");
        }
        // A number no `f64` holds: the tree refuses the event, so the direct reader must too.
        for number in ["1e999", &"9".repeat(400)] {
            let data = format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"a"}},"x":{number}}}"#
            );
            assert!(text_delta(&data).is_none(), "{data}");
            assert!(decoded(&data).is_err(), "{data}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        /// Edits of a real text delta: what the direct reader accepts, the tree reads as the same
        /// events.
        #[test]
        fn the_direct_reader_and_the_tree_agree_on_any_edit_of_a_text_delta(
            edits in edits(&["\"type\":\"ping\",", "\"text\":\"z\",", "\"index\":2,", "\"x\":2.5,"]),
        ) {
            let data = edited(DELTA, &edits);
            if let Some(text) = text_delta(&data) {
                let events =
                    if text.is_empty() { Vec::new() } else { vec![StreamEvent::TextDelta { text }] };
                proptest::prop_assert_eq!(Ok(events), tree(&data).map_err(|e| e.to_string()));
            }
        }
    }
}
