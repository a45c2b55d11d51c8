//! The Anthropic streaming encoder: the engine's released items as Messages SSE events, as
//! Anthropic streams them: `message_start`, then content blocks (`content_block_start`, deltas,
//! `content_block_stop`; a new block opens whenever the kind of content changes), then (only
//! once the answer is whole) `message_delta` with the stop reason and usage, and
//! `message_stop`.
//!
//! A call that fails after it started ends with `event: error` (`api_error`) and no
//! `message_stop`, so no SDK takes a cut answer for a complete one.

use bytes::Bytes;
use serde_json::{Value, json};

use rein_core::{CallError, Completion, Released, StreamEvent, Usage};

use super::anthropic::{call_error_body, stop_reason};
use super::json::sse_frame;
use super::{ResponseMeta, push_summary, rein_summary};

/// The kind of the content block being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Thinking,
    /// A tool call, by its canonical index.
    Tool(u32),
}

/// Encodes one streamed answer. Feed it every [`Released`] item in order; call
/// [`close`](Self::close) if the engine's stream ends without a `Completed` or `Failed`.
#[derive(Debug)]
pub struct AnthropicStream {
    meta: ResponseMeta,
    /// The model that answered, from the `Start` event (or the completion).
    model: Option<String>,
    /// Usage seen before `message_start` (a provider that reports input tokens up front).
    usage: Usage,
    /// Whether `message_start` has gone out.
    started: bool,
    /// Whether a terminal item has been encoded; nothing follows it.
    finished: bool,
    /// The block being written and its index.
    open: Option<(Block, u32)>,
    next_index: u32,
    /// Canonical tool-call index → its block index.
    tools: Vec<(u32, u32)>,
}

impl AnthropicStream {
    pub fn new(meta: ResponseMeta) -> Self {
        Self {
            meta,
            model: None,
            usage: Usage::default(),
            started: false,
            finished: false,
            open: None,
            next_index: 0,
            tools: Vec::new(),
        }
    }

    /// Whether the stream has ended (answer complete, or failed); later items are ignored.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The SSE frames for one released item (possibly none).
    pub fn encode(&mut self, item: &Released) -> Vec<Bytes> {
        if self.finished {
            return Vec::new();
        }
        match item {
            Released::Event(event) => self.event(event),
            Released::Completed(completion) => self.completed(completion),
            Released::Failed(error) => self.failed(error),
        }
    }

    /// The engine's stream ended without a terminal item: if the answer was not finished, end
    /// with an error event rather than let the caller take what it has as complete.
    pub fn close(&mut self) -> Vec<Bytes> {
        if self.finished {
            return Vec::new();
        }
        self.finished = true;
        vec![error_frame("api_error", "the stream ended before the answer was complete", None)]
    }

    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        let mut frames = Vec::new();
        match event {
            // `message_start` waits for the first content (which follows at once: the engine
            // holds `Start` back until then), so it can carry usage the provider sent first.
            StreamEvent::Start { model, .. } => {
                if self.model.is_none() {
                    self.model = Some(model.clone());
                }
            }
            StreamEvent::Usage { usage } => {
                if usage.input_tokens > 0 {
                    self.usage.input_tokens = usage.input_tokens;
                }
                if usage.output_tokens > 0 {
                    self.usage.output_tokens = usage.output_tokens;
                }
            }
            // A refusal is text in the Messages format; `stop_reason: refusal` says the rest.
            StreamEvent::TextDelta { text } | StreamEvent::RefusalDelta { text }
                if !text.is_empty() =>
            {
                let index = self.block(Block::Text, &mut frames);
                frames.push(text_delta(index, TextKind::Text, text));
            }
            StreamEvent::ThinkingDelta { text } if !text.is_empty() => {
                let index = self.block(Block::Thinking, &mut frames);
                frames.push(text_delta(index, TextKind::Thinking, text));
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.ensure_started(&mut frames);
                self.close_block(&mut frames);
                let block_index = self.open_block(Block::Tool(*index));
                self.tools.push((*index, block_index));
                let block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                frames.push(block_start(block_index, block));
            }
            StreamEvent::ToolCallDelta { index, arguments } if !arguments.is_empty() => {
                // Usually the open block. A provider that interleaves parallel calls' arguments
                // gets its deltas sent to each call's own block index, which the SDKs'
                // accumulators follow.
                match self.tools.iter().rev().find(|(canonical, _)| canonical == index) {
                    Some((_, block_index)) => frames.push(delta(
                        *block_index,
                        json!({"type": "input_json_delta", "partial_json": arguments}),
                    )),
                    None => {
                        tracing::warn!(index, "tool call arguments for a call that never started")
                    }
                }
            }
            // The stop reason and final usage are sent from the completion, once the answer is known
            // to be whole. The Messages format has no logprobs.
            StreamEvent::TextDelta { .. }
            | StreamEvent::RefusalDelta { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::ToolCallDelta { .. }
            | StreamEvent::Logprobs { .. }
            | StreamEvent::Stop { .. }
            | StreamEvent::Done => {}
        }
        frames
    }

    fn completed(&mut self, completion: &Completion) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let response = &completion.response;
        if self.model.is_none() {
            self.model = Some(response.model.clone());
        }
        self.ensure_started(&mut frames);
        self.close_block(&mut frames);
        let message_delta = message_delta(completion);
        #[cfg(debug_assertions)]
        assert_eq!(
            message_delta,
            message_delta_tree(completion),
            "the written delta is the tree's"
        );
        frames.push(message_delta);
        frames.push(Bytes::from_static(MESSAGE_STOP));
        self.finished = true;
        frames
    }

    fn failed(&mut self, error: &CallError) -> Vec<Bytes> {
        self.finished = true;
        let summary = error.report().map(rein_summary);
        if self.started {
            return vec![error_frame("api_error", &error.to_string(), summary)];
        }
        // Nothing was sent yet: the caller gets the error the plain call would have had.
        let (_, body) = call_error_body(error);
        vec![sse_frame(Some("error"), &body)]
    }

    /// `message_start`, once. The model is empty only if the engine sent content before its
    /// `Start`, which it does not.
    fn ensure_started(&mut self, frames: &mut Vec<Bytes>) {
        if self.started {
            return;
        }
        self.started = true;
        let start = json!({
            "type": "message_start",
            "message": {
                "id": self.meta.id,
                "type": "message",
                "role": "assistant",
                "model": self.model.as_deref().unwrap_or_default(),
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {
                    "input_tokens": self.usage.input_tokens,
                    "output_tokens": self.usage.output_tokens,
                },
            },
        });
        frames.push(sse_frame(Some("message_start"), &start));
    }

    /// The index of an open block of this kind, opening one (and closing the last) if needed.
    fn block(&mut self, kind: Block, frames: &mut Vec<Bytes>) -> u32 {
        self.ensure_started(frames);
        if let Some((open, index)) = self.open
            && open == kind
        {
            return index;
        }
        self.close_block(frames);
        let index = self.open_block(kind);
        // Tool blocks open on `ToolCallStart`, with the call's id and name; only text and
        // thinking come through here.
        let block = if kind == Block::Thinking {
            json!({"type": "thinking", "thinking": "", "signature": ""})
        } else {
            json!({"type": "text", "text": ""})
        };
        frames.push(block_start(index, block));
        index
    }

    fn open_block(&mut self, kind: Block) -> u32 {
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((kind, index));
        index
    }

    fn close_block(&mut self, frames: &mut Vec<Bytes>) {
        if let Some((_, index)) = self.open.take() {
            let stop = json!({"type": "content_block_stop", "index": index});
            frames.push(sse_frame(Some("content_block_stop"), &stop));
        }
    }
}

fn block_start(index: u32, block: Value) -> Bytes {
    let start = json!({"type": "content_block_start", "index": index, "content_block": block});
    sse_frame(Some("content_block_start"), &start)
}

fn delta(index: u32, delta: Value) -> Bytes {
    let body = json!({"type": "content_block_delta", "index": index, "delta": delta});
    sse_frame(Some("content_block_delta"), &body)
}

/// What a text-like delta carries.
#[derive(Debug, Clone, Copy)]
enum TextKind {
    Text,
    Thinking,
}

/// A text or thinking delta's frame (most of a stream's frames), written directly: the bytes
/// [`delta`] renders from a JSON tree, keys in the same sorted order. Debug builds check it.
fn text_delta(index: u32, kind: TextKind, text: &str) -> Bytes {
    use rein_providers::json_write::{push_str, push_u64};
    let (field, delta_type) = match kind {
        TextKind::Text => ("text", "text_delta"),
        TextKind::Thinking => ("thinking", "thinking_delta"),
    };
    let mut out = Vec::with_capacity(112 + text.len());
    out.extend_from_slice(b"event: content_block_delta\ndata: {\"delta\":{\"");
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(b"\":");
    push_str(&mut out, text);
    out.extend_from_slice(b",\"type\":\"");
    out.extend_from_slice(delta_type.as_bytes());
    out.extend_from_slice(b"\"},\"index\":");
    push_u64(&mut out, u64::from(index));
    out.extend_from_slice(b",\"type\":\"content_block_delta\"}\n\n");
    let frame = Bytes::from(out);
    #[cfg(debug_assertions)]
    {
        let mut body = serde_json::Map::new();
        body.insert("type".into(), json!(delta_type));
        body.insert(field.into(), json!(text));
        assert_eq!(frame, delta(index, Value::Object(body)), "a directly written delta differs");
    }
    frame
}

/// The stream's last frame, always the same bytes.
const MESSAGE_STOP: &[u8] = b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// `message_delta` (the stop reason, the usage, rein's summary), written field by field: the
/// bytes [`message_delta_tree`] renders, keys in the same sorted order. Debug builds check it.
fn message_delta(completion: &Completion) -> Bytes {
    use rein_providers::json_write::{push_str, push_u64};
    let response = &completion.response;
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"event: message_delta\ndata: {\"delta\":{\"stop_reason\":");
    push_str(&mut out, &stop_reason(response.stop_reason.as_ref()));
    out.extend_from_slice(br#","stop_sequence":null},"rein":"#);
    push_summary(&mut out, &completion.report);
    out.extend_from_slice(br#","type":"message_delta","usage":{"input_tokens":"#);
    push_u64(&mut out, u64::from(response.usage.input_tokens));
    out.extend_from_slice(br#","output_tokens":"#);
    push_u64(&mut out, u64::from(response.usage.output_tokens));
    out.extend_from_slice(b"}}\n\n");
    Bytes::from(out)
}

/// [`message_delta`] as a JSON tree: the reference it is checked against.
#[cfg(any(test, debug_assertions))]
fn message_delta_tree(completion: &Completion) -> Bytes {
    let response = &completion.response;
    let body = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(response.stop_reason.as_ref()),
                  "stop_sequence": null},
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        },
        "rein": rein_summary(&completion.report),
    });
    sse_frame(Some("message_delta"), &body)
}

fn error_frame(kind: &str, message: &str, summary: Option<Value>) -> Bytes {
    let mut body = json!({"type": "error", "error": {"type": kind, "message": message}});
    if let (Some(summary), Value::Object(map)) = (summary, &mut body) {
        map.insert("rein".into(), summary);
    }
    sse_frame(Some("error"), &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::fixtures::{self, frames_json};

    fn encode_all(stream: &mut AnthropicStream, items: &[Released]) -> Vec<Bytes> {
        items.iter().flat_map(|item| stream.encode(item)).collect()
    }

    fn event_names(frames: &Value) -> Vec<String> {
        frames
            .as_array()
            .unwrap()
            .iter()
            .map(|frame| frame["event"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn the_last_frame_is_the_tree_frame() {
        assert_eq!(
            Bytes::from_static(MESSAGE_STOP),
            sse_frame(Some("message_stop"), &json!({"type": "message_stop"}))
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// `message_delta` written directly is byte for byte the tree's frame, whatever the
        /// strings hold and whichever optional parts the summary has.
        #[test]
        fn a_directly_written_message_delta_is_the_tree_frame(
            completion in fixtures::ended_calls(),
        ) {
            proptest::prop_assert_eq!(
                String::from_utf8(message_delta(&completion).to_vec()).unwrap(),
                String::from_utf8(message_delta_tree(&completion).to_vec()).unwrap()
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1_000))]

        /// A text or thinking delta written directly is byte for byte the tree's frame.
        #[test]
        fn a_directly_written_delta_is_the_tree_frame(
            text in proptest::prelude::any::<String>(),
            index in proptest::prelude::any::<u32>(),
            thinking in proptest::prelude::any::<bool>(),
        ) {
            let (kind, body) = if thinking {
                (TextKind::Thinking, json!({"type": "thinking_delta", "thinking": text}))
            } else {
                (TextKind::Text, json!({"type": "text_delta", "text": text}))
            };
            proptest::prop_assert_eq!(text_delta(index, kind, &text), delta(index, body));
        }
    }

    #[test]
    fn streams_thinking_text_tool_calls_and_usage() {
        let mut stream = AnthropicStream::new(fixtures::meta("msg_rein_1"));
        let frames = frames_json(&encode_all(&mut stream, &fixtures::tool_answer_items()));
        assert!(stream.is_finished());
        // Every frame's `event:` matches its data's `type`.
        for frame in frames.as_array().unwrap() {
            assert_eq!(frame["event"], frame["data"]["type"]);
        }
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(frames);
        });
    }

    #[test]
    fn streams_a_plain_text_answer() {
        let mut stream = AnthropicStream::new(fixtures::meta("msg_rein_2"));
        let frames = frames_json(&encode_all(&mut stream, &fixtures::text_answer_items()));
        assert_eq!(
            event_names(&frames),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(frames);
        });
    }

    #[test]
    fn a_refusal_streams_as_text_with_stop_reason_refusal() {
        let mut stream = AnthropicStream::new(fixtures::meta("msg_rein_3"));
        let frames = frames_json(&encode_all(&mut stream, &fixtures::refusal_items()));
        let frames = frames.as_array().unwrap();
        assert_eq!(frames[2]["data"]["delta"]["text"], "I can't help with that.");
        let message_delta = frames.iter().find(|f| f["event"] == "message_delta").unwrap();
        assert_eq!(message_delta["data"]["delta"]["stop_reason"], "refusal");
    }

    #[test]
    fn failure_after_tokens_is_an_error_event_without_message_stop() {
        let mut stream = AnthropicStream::new(fixtures::meta("msg_rein_4"));
        let frames = frames_json(&encode_all(&mut stream, &fixtures::interrupted_items()));
        let names = event_names(&frames);
        assert_eq!(names.last().map(String::as_str), Some("error"));
        assert!(!names.iter().any(|n| n == "message_stop" || n == "message_delta"));
        assert!(stream.encode(&fixtures::completed(fixtures::text_response())).is_empty());
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(frames);
        });
    }

    #[test]
    fn failure_before_any_token_carries_the_call_error() {
        let mut stream = AnthropicStream::new(fixtures::meta("msg_rein_5"));
        let frames = frames_json(&stream.encode(&fixtures::context_length_failure()));
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(frames);
        });
    }

    #[test]
    fn a_stream_that_ends_without_a_terminal_item_is_interrupted() {
        let mut stream = AnthropicStream::new(fixtures::meta("msg_rein_6"));
        let items = fixtures::text_answer_items();
        let mut frames = encode_all(&mut stream, &items[..3]);
        frames.extend(stream.close());
        let frames = frames_json(&frames);
        assert_eq!(event_names(&frames).last().map(String::as_str), Some("error"));
        assert!(stream.close().is_empty());
    }

    #[test]
    fn usage_sent_before_content_goes_in_message_start() {
        let mut stream = AnthropicStream::new(fixtures::meta("msg_rein_8"));
        let usage = Usage { input_tokens: 25, output_tokens: 1 };
        let items = [
            Released::Event(StreamEvent::Start { id: "x".into(), model: "claude".into() }),
            Released::Event(StreamEvent::Usage { usage }),
            Released::Event(StreamEvent::TextDelta { text: "a".into() }),
        ];
        let frames = frames_json(&encode_all(&mut stream, &items));
        let message = &frames[0]["data"]["message"];
        assert_eq!(message["model"], "claude");
        assert_eq!(message["usage"], json!({"input_tokens": 25, "output_tokens": 1}));
    }

    /// Regression: a checked answer is released whole, and its `message_start` said
    /// `input_tokens: 0` though the count was known.
    #[test]
    fn a_held_answer_reports_its_input_tokens_in_message_start() {
        let mut stream = AnthropicStream::new(fixtures::meta("msg_rein_9"));
        let frames = frames_json(&encode_all(&mut stream, &fixtures::text_answer_items()));
        let frames = frames.as_array().unwrap();
        let usage = fixtures::text_response().usage;
        assert_eq!(frames[0]["data"]["message"]["usage"]["input_tokens"], usage.input_tokens);
        let message_delta = frames.iter().find(|f| f["event"] == "message_delta").unwrap();
        assert_eq!(
            message_delta["data"]["usage"],
            json!({"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens})
        );
    }

    #[test]
    fn text_after_a_tool_call_opens_a_new_block() {
        let mut stream = AnthropicStream::new(fixtures::meta("msg_rein_7"));
        let items = [
            Released::Event(StreamEvent::Start { id: "x".into(), model: "gpt-4o".into() }),
            Released::Event(StreamEvent::TextDelta { text: "a".into() }),
            Released::Event(StreamEvent::ToolCallStart {
                index: 0,
                id: "call_1".into(),
                name: "f".into(),
            }),
            Released::Event(StreamEvent::ToolCallDelta { index: 0, arguments: "{}".into() }),
            Released::Event(StreamEvent::TextDelta { text: "b".into() }),
        ];
        let frames = frames_json(&encode_all(&mut stream, &items));
        let starts: Vec<(u64, String)> = frames
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["event"] == "content_block_start")
            .map(|f| {
                let data = &f["data"];
                (data["index"].as_u64().unwrap(), data["content_block"]["type"].to_string())
            })
            .collect();
        assert_eq!(
            starts,
            [(0, "\"text\"".into()), (1, "\"tool_use\"".into()), (2, "\"text\"".into())]
        );
    }
}
