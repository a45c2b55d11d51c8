//! The OpenAI streaming encoder: the engine's released items as `chat.completion.chunk` SSE
//! frames, as OpenAI streams them: a first chunk with `delta.role`, content, refusal and tool
//! call deltas, then (only once the answer is whole) a chunk with `finish_reason`, the usage
//! chunk with `choices: []` when the caller asked for it, and `data: [DONE]`.
//!
//! A call that fails after it started ends with an in-band error frame (`code:
//! stream_interrupted`) and neither a `finish_reason` nor `[DONE]`, so no SDK takes a cut
//! answer for a complete one.

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};

use rein_core::{CallError, ChatResponse, Completion, Released, StreamEvent};

use super::json::sse_frame;
use super::openai::{call_error_body, finish_reason, logprobs_json};
use super::{ResponseMeta, push_summary, rein_summary};

/// Encodes one streamed answer. Feed it every [`Released`] item in order; call
/// [`close`](Self::close) if the engine's stream ends without a `Completed` or `Failed`.
#[derive(Debug)]
pub struct OpenAiStream {
    meta: ResponseMeta,
    include_usage: bool,
    /// The model that answered, from the `Start` event (or the completion).
    model: Option<String>,
    /// Whether the first chunk (`delta.role`) has gone out.
    started: bool,
    /// Whether a terminal item has been encoded; nothing follows it.
    finished: bool,
    /// Canonical tool-call index → the dense index the caller sees (0, 1, 2, ... in order of
    /// start), since SDKs accumulate tool calls into a list by index.
    tool_indices: Vec<(u32, u32)>,
    /// The bytes after the content of a text chunk, once rendered (they depend on the model).
    text_tail: Option<Vec<u8>>,
}

impl OpenAiStream {
    pub fn new(meta: ResponseMeta, include_usage: bool) -> Self {
        Self {
            meta,
            include_usage,
            model: None,
            started: false,
            finished: false,
            tool_indices: Vec::new(),
            text_tail: None,
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

    /// As [`Self::encode`], the frames appended to `out`; a text delta, most of a streamed
    /// answer, is written there directly.
    pub fn encode_into(&mut self, item: &Released, out: &mut Vec<u8>) {
        if let Released::Event(StreamEvent::TextDelta { text }) = item
            && self.started
            && !self.finished
            && !text.is_empty()
        {
            self.write_text_frame(text, out);
            return;
        }
        for frame in self.encode(item) {
            out.extend_from_slice(&frame);
        }
    }

    /// The engine's stream ended without a terminal item: if the answer was not finished, end
    /// with the in-band error rather than let the caller take what it has as complete.
    pub fn close(&mut self) -> Vec<Bytes> {
        if self.finished {
            return Vec::new();
        }
        self.finished = true;
        vec![interrupted_frame("the stream ended before the answer was complete", None)]
    }

    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let delta = match event {
            StreamEvent::Start { model, .. } => {
                if self.model.is_none() {
                    self.model = Some(model.clone());
                    self.text_tail = None;
                }
                self.ensure_started(&mut frames);
                return frames;
            }
            StreamEvent::TextDelta { text } if !text.is_empty() => {
                // The hot path of a streamed answer: one typed frame, no JSON tree.
                self.ensure_started(&mut frames);
                frames.push(self.text_frame(text));
                return frames;
            }
            StreamEvent::RefusalDelta { text } if !text.is_empty() => json!({"refusal": text}),
            StreamEvent::ToolCallStart { index, id, name } => {
                let index = self.start_tool(*index);
                json!({"tool_calls": [{
                    "index": index,
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }]})
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                let index = self.tool_index(*index);
                json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
            }
            StreamEvent::Logprobs { tokens } if !tokens.is_empty() => {
                self.ensure_started(&mut frames);
                frames.push(sse_frame(
                    None,
                    &self.chunk(json!({}), Value::Null, logprobs_json(tokens)),
                ));
                return frames;
            }
            // Chat Completions has no place for reasoning text. The stop reason and usage are
            // sent from the completion, once the answer is known to be whole.
            StreamEvent::TextDelta { .. }
            | StreamEvent::RefusalDelta { .. }
            | StreamEvent::Logprobs { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::Usage { .. }
            | StreamEvent::Stop { .. }
            | StreamEvent::Done => return frames,
        };
        self.ensure_started(&mut frames);
        frames.push(sse_frame(None, &self.chunk(delta, Value::Null, Value::Null)));
        frames
    }

    fn completed(&mut self, completion: &Completion) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let response = &completion.response;
        if self.model.is_none() {
            self.model = Some(response.model.clone());
            self.text_tail = None;
        }
        self.ensure_started(&mut frames);
        let last = self.last_frame(completion);
        #[cfg(debug_assertions)]
        assert_eq!(last, self.last_frame_tree(completion), "the written last chunk is the tree's");
        frames.push(last);
        if self.include_usage {
            let usage = self.usage_frame(response);
            #[cfg(debug_assertions)]
            assert_eq!(usage, self.usage_frame_tree(response), "the written usage is the tree's");
            frames.push(usage);
        }
        frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
        self.finished = true;
        frames
    }

    fn failed(&mut self, error: &CallError) -> Vec<Bytes> {
        self.finished = true;
        let summary = error.report().map(rein_summary);
        if self.started {
            return vec![interrupted_frame(&error.to_string(), summary)];
        }
        // Nothing was sent yet: the caller gets the error the plain call would have had.
        let (_, body) = call_error_body(error);
        vec![sse_frame(None, &body)]
    }

    /// The chunk with the finish reason and rein's summary, written field by field: the same
    /// bytes as [`Self::last_frame_tree`] (keys in the same sorted order), without building
    /// and serializing the tree each stream ended with.
    fn last_frame(&self, completion: &Completion) -> Bytes {
        use rein_providers::json_write::push_str;
        let mut out = Vec::with_capacity(320);
        out.extend_from_slice(br#"data: {"choices":[{"delta":{},"finish_reason":"#);
        push_str(&mut out, &finish_reason(completion.response.stop_reason.as_ref()));
        out.extend_from_slice(br#","index":0,"logprobs":null}],"#);
        self.push_created_id_model(&mut out);
        out.extend_from_slice(br#","object":"chat.completion.chunk","rein":"#);
        push_summary(&mut out, &completion.report);
        out.extend_from_slice(br#","system_fingerprint":null"#);
        if self.include_usage {
            out.extend_from_slice(br#","usage":null"#);
        }
        out.extend_from_slice(b"}\n\n");
        Bytes::from(out)
    }

    /// A chunk's `"created":…,"id":…,"model":…` (the keys between `choices` and `object` in
    /// sorted order), as [`Self::last_frame`] and [`Self::usage_frame`] write them.
    fn push_created_id_model(&self, out: &mut Vec<u8>) {
        use rein_providers::json_write::{push_str, push_u64};
        out.extend_from_slice(br#""created":"#);
        push_u64(out, self.meta.created);
        out.extend_from_slice(br#","id":"#);
        push_str(out, &self.meta.id);
        out.extend_from_slice(br#","model":"#);
        push_str(out, self.model.as_deref().unwrap_or_default());
    }

    /// The usage chunk (`choices: []`) the caller asked for with `include_usage`, written
    /// field by field: the same bytes as [`Self::usage_frame_tree`].
    fn usage_frame(&self, response: &ChatResponse) -> Bytes {
        use rein_providers::json_write::push_u64;
        let usage = response.usage;
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(br#"data: {"choices":[],"#);
        self.push_created_id_model(&mut out);
        out.extend_from_slice(br#","object":"chat.completion.chunk","system_fingerprint":null"#);
        out.extend_from_slice(br#","usage":{"completion_tokens":"#);
        push_u64(&mut out, u64::from(usage.output_tokens));
        out.extend_from_slice(br#","prompt_tokens":"#);
        push_u64(&mut out, u64::from(usage.input_tokens));
        out.extend_from_slice(br#","total_tokens":"#);
        push_u64(&mut out, u64::from(usage.input_tokens) + u64::from(usage.output_tokens));
        out.extend_from_slice(b"}}\n\n");
        Bytes::from(out)
    }

    /// [`Self::usage_frame`] as a JSON tree: the reference it is checked against.
    #[cfg(any(test, debug_assertions))]
    fn usage_frame_tree(&self, response: &ChatResponse) -> Bytes {
        let mut usage = self.base();
        if let Value::Object(map) = &mut usage {
            map.insert("choices".into(), json!([]));
            map.insert("usage".into(), super::openai::usage_json(response));
        }
        sse_frame(None, &usage)
    }

    /// [`Self::last_frame`] as a JSON tree: the reference it is checked against.
    #[cfg(any(test, debug_assertions))]
    fn last_frame_tree(&self, completion: &Completion) -> Bytes {
        let reason = finish_reason(completion.response.stop_reason.as_ref());
        let mut last = self.chunk(json!({}), json!(reason), Value::Null);
        if let Value::Object(map) = &mut last {
            map.insert("rein".into(), rein_summary(&completion.report));
        }
        sse_frame(None, &last)
    }

    fn ensure_started(&mut self, frames: &mut Vec<Bytes>) {
        if self.started {
            return;
        }
        self.started = true;
        frames.push(self.role_frame());
    }

    /// The first chunk, `delta: {"role": "assistant", "content": "", "refusal": null}`: the
    /// text chunk's head and tail around a fixed delta, the same bytes [`Self::chunk`] renders.
    fn role_frame(&mut self) -> Bytes {
        const HEAD: &[u8] =
            br#"data: {"choices":[{"delta":{"content":"","refusal":null,"role":"assistant""#;
        let tail = match &self.text_tail {
            Some(tail) => tail,
            None => self.text_tail.insert(self.render_text_tail()),
        };
        let mut out = Vec::with_capacity(HEAD.len() + tail.len());
        out.extend_from_slice(HEAD);
        out.extend_from_slice(tail);
        Bytes::from(out)
    }

    fn start_tool(&mut self, canonical: u32) -> u32 {
        let dense = self.tool_indices.len() as u32;
        self.tool_indices.push((canonical, dense));
        dense
    }

    fn tool_index(&mut self, canonical: u32) -> u32 {
        match self.tool_indices.iter().rev().find(|(c, _)| *c == canonical) {
            Some((_, dense)) => *dense,
            None => self.start_tool(canonical),
        }
    }

    /// The fields every chunk carries.
    fn base(&self) -> Value {
        let mut chunk = json!({
            "id": self.meta.id,
            "object": "chat.completion.chunk",
            "created": self.meta.created,
            "model": self.model.as_deref().unwrap_or_default(),
            "system_fingerprint": null,
        });
        if self.include_usage
            && let Value::Object(map) = &mut chunk
        {
            map.insert("usage".into(), Value::Null);
        }
        chunk
    }

    /// `data: {chunk with delta.content = text}`: a fixed head, the text as a JSON string, and
    /// the rest of the chunk, which is the same for every text chunk of the stream and so is
    /// rendered once. The same bytes as [`Self::chunk`] renders (keys in the same sorted order).
    fn text_frame(&mut self, text: &str) -> Bytes {
        let mut out = Vec::new();
        self.write_text_frame(text, &mut out);
        Bytes::from(out)
    }

    /// [`Self::text_frame`]'s bytes, appended to `out`.
    fn write_text_frame(&mut self, text: &str, out: &mut Vec<u8>) {
        const HEAD: &[u8] = br#"data: {"choices":[{"delta":{"content":"#;
        let tail = match &self.text_tail {
            Some(tail) => tail,
            None => self.text_tail.insert(self.render_text_tail()),
        };
        out.reserve(HEAD.len() + text.len() + 8 + tail.len());
        out.extend_from_slice(HEAD);
        rein_providers::json_write::push_str(out, text);
        out.extend_from_slice(tail);
    }

    /// What follows the content string in a text chunk, through the frame's blank line.
    fn render_text_tail(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Rest<'a> {
            created: u64,
            id: &'a str,
            model: &'a str,
            object: &'static str,
            system_fingerprint: Option<()>,
            /// `null` when the caller asked for usage (it comes in a chunk of its own).
            #[serde(skip_serializing_if = "Option::is_none")]
            usage: Option<Option<()>>,
        }
        let rest = Rest {
            created: self.meta.created,
            id: &self.meta.id,
            model: self.model.as_deref().unwrap_or_default(),
            object: "chat.completion.chunk",
            system_fingerprint: None,
            usage: self.include_usage.then_some(None),
        };
        const CHOICES_END: &[u8] = br#"},"finish_reason":null,"index":0,"logprobs":null}],"#;
        let rest = serde_json::to_vec(&rest).unwrap_or_default();
        // `{"created":..}` without its opening brace continues the chunk's object.
        let rest = rest.get(1..).unwrap_or_default();
        // Made at its size: the stream keeps it to its end.
        let mut tail = Vec::with_capacity(CHOICES_END.len() + rest.len() + 2);
        tail.extend_from_slice(CHOICES_END);
        tail.extend_from_slice(rest);
        tail.extend_from_slice(b"\n\n");
        tail
    }

    fn chunk(&self, delta: Value, finish: Value, logprobs: Value) -> Value {
        let mut chunk = self.base();
        if let Value::Object(map) = &mut chunk {
            map.insert(
                "choices".into(),
                json!([{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]),
            );
        }
        chunk
    }
}

fn interrupted_frame(message: &str, summary: Option<Value>) -> Bytes {
    let mut body = json!({
        "error": {
            "message": message,
            "type": "server_error",
            "param": null,
            "code": "stream_interrupted",
        }
    });
    if let (Some(summary), Value::Object(map)) = (summary, &mut body) {
        map.insert("rein".into(), summary);
    }
    sse_frame(None, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_text_and_role_frames_are_byte_for_byte_the_json_tree_frames() {
        for include_usage in [false, true] {
            let mut stream =
                OpenAiStream::new(ResponseMeta::new("chatcmpl-abc", 1_700_000_000), include_usage);
            stream.model = Some("gpt-4o-mini".into());
            for text in ["Hello", "say \"hi\"\n\ttab \\ and ünïcödé 🚀", "</script>\u{1}"] {
                let tree = sse_frame(
                    None,
                    &stream.chunk(json!({"content": text}), Value::Null, Value::Null),
                );
                assert_eq!(stream.text_frame(text), tree, "include_usage={include_usage} {text:?}");
            }
            let delta = json!({"role": "assistant", "content": "", "refusal": null});
            let tree = sse_frame(None, &stream.chunk(delta, Value::Null, Value::Null));
            assert_eq!(stream.role_frame(), tree, "include_usage={include_usage}");
        }
    }

    /// The text chunk's tail lives as long as the stream: it takes no room beyond its bytes.
    #[test]
    fn the_text_tail_is_kept_at_its_size() {
        for include_usage in [false, true] {
            let mut stream =
                OpenAiStream::new(ResponseMeta::new("chatcmpl-abc", 1_700_000_000), include_usage);
            stream.model = Some("gpt-4o-mini-2024-07-18".into());
            let _ = stream.text_frame("Hello");
            let tail = stream.text_tail.as_ref().expect("rendered with the first text frame");
            assert!(tail.ends_with(b"}\n\n"), "{:?}", String::from_utf8_lossy(tail));
            assert_eq!(tail.capacity(), tail.len(), "include_usage={include_usage}");
        }
    }
    use crate::wire::fixtures::{self, frames_json};

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// The last chunk and the usage chunk written directly are byte for byte the tree's
        /// frames, whatever the strings hold and whichever optional parts the summary has.
        #[test]
        fn a_directly_written_last_chunk_is_the_tree_frame(
            include_usage in proptest::prelude::any::<bool>(),
            model in proptest::option::of("\\PC{0,20}"),
            id in ".{0,16}",
            created in proptest::prelude::any::<u64>(),
            completion in fixtures::ended_calls(),
        ) {
            let mut stream = OpenAiStream::new(ResponseMeta::new(id, created), include_usage);
            stream.model = model;
            proptest::prop_assert_eq!(
                String::from_utf8(stream.last_frame(&completion).to_vec()).unwrap(),
                String::from_utf8(stream.last_frame_tree(&completion).to_vec()).unwrap()
            );
            proptest::prop_assert_eq!(
                String::from_utf8(stream.usage_frame(&completion.response).to_vec()).unwrap(),
                String::from_utf8(stream.usage_frame_tree(&completion.response).to_vec()).unwrap()
            );
        }
    }

    fn encode_all(stream: &mut OpenAiStream, items: &[Released]) -> Vec<Bytes> {
        items.iter().flat_map(|item| stream.encode(item)).collect()
    }

    /// Writing frames straight into the body's buffer changes no byte of the stream, in any
    /// state: before the first frame, mid-answer, and after the answer has finished.
    #[test]
    fn frames_written_into_a_buffer_are_the_frames_encoded() {
        let text = |text: &str| Released::Event(StreamEvent::TextDelta { text: text.into() });
        let mut late = fixtures::text_answer_items();
        late.push(text("after the end"));
        let mut early = vec![text("before any start")];
        early.extend(fixtures::interrupted_items());
        let lists = [
            fixtures::text_answer_items(),
            fixtures::tool_answer_items(),
            fixtures::refusal_items(),
            fixtures::interrupted_items(),
            late,
            early,
        ];
        for (n, items) in lists.iter().enumerate() {
            for include_usage in [false, true] {
                let mut framed =
                    OpenAiStream::new(fixtures::meta("chatcmpl-rein-9"), include_usage);
                let expected: Vec<u8> = encode_all(&mut framed, items).concat();
                let mut written =
                    OpenAiStream::new(fixtures::meta("chatcmpl-rein-9"), include_usage);
                let mut out = Vec::new();
                for item in items {
                    written.encode_into(item, &mut out);
                }
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    String::from_utf8(expected).unwrap(),
                    "list {n}, include_usage={include_usage}"
                );
            }
        }
    }

    #[test]
    fn streams_text_tool_calls_and_usage() {
        let mut stream = OpenAiStream::new(fixtures::meta("chatcmpl-rein-1"), true);
        let frames = encode_all(&mut stream, &fixtures::tool_answer_items());
        assert!(stream.is_finished());
        assert!(frames.iter().all(|f| f.starts_with(b"data: ") && f.ends_with(b"\n\n")));
        assert_eq!(frames.last().unwrap().as_ref(), b"data: [DONE]\n\n");
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(frames_json(&frames));
        });
    }

    #[test]
    fn without_include_usage_there_is_no_usage_chunk() {
        let mut stream = OpenAiStream::new(fixtures::meta("chatcmpl-rein-2"), false);
        let frames = encode_all(&mut stream, &fixtures::text_answer_items());
        let json = frames_json(&frames);
        let frames = json.as_array().unwrap();
        assert!(frames.iter().all(|frame| frame["data"].get("usage").is_none()));
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(json);
        });
    }

    #[test]
    fn refusal_streams_as_refusal_deltas() {
        let mut stream = OpenAiStream::new(fixtures::meta("chatcmpl-rein-3"), false);
        let frames = encode_all(&mut stream, &fixtures::refusal_items());
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(frames_json(&frames));
        });
    }

    #[test]
    fn failure_after_tokens_is_an_in_band_error_without_done() {
        let mut stream = OpenAiStream::new(fixtures::meta("chatcmpl-rein-4"), true);
        let frames = encode_all(&mut stream, &fixtures::interrupted_items());
        let text: String = frames.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect();
        assert!(!text.contains("[DONE]"));
        assert!(!text.contains("\"finish_reason\":\"stop\""));
        assert!(stream.is_finished());
        assert!(stream.encode(&fixtures::completed(fixtures::text_response())).is_empty());
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(frames_json(&frames));
        });
    }

    #[test]
    fn failure_before_any_token_carries_the_call_error() {
        let mut stream = OpenAiStream::new(fixtures::meta("chatcmpl-rein-5"), false);
        let frames = stream.encode(&fixtures::context_length_failure());
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(frames_json(&frames));
        });
    }

    #[test]
    fn a_stream_that_ends_without_a_terminal_item_is_interrupted() {
        let mut stream = OpenAiStream::new(fixtures::meta("chatcmpl-rein-6"), false);
        let items = fixtures::text_answer_items();
        let mut frames = encode_all(&mut stream, &items[..3]);
        frames.extend(stream.close());
        let last = String::from_utf8_lossy(frames.last().unwrap()).into_owned();
        assert!(last.contains("stream_interrupted"), "{last}");
        assert!(stream.close().is_empty());
    }

    #[test]
    fn tool_call_indices_are_dense_in_order_of_start() {
        let mut stream = OpenAiStream::new(fixtures::meta("chatcmpl-rein-7"), false);
        let items = [
            Released::Event(StreamEvent::Start { id: "x".into(), model: "m".into() }),
            Released::Event(StreamEvent::ToolCallStart {
                index: 1,
                id: "toolu_a".into(),
                name: "f".into(),
            }),
            Released::Event(StreamEvent::ToolCallDelta { index: 1, arguments: "{}".into() }),
            Released::Event(StreamEvent::ToolCallStart {
                index: 3,
                id: "toolu_b".into(),
                name: "g".into(),
            }),
            Released::Event(StreamEvent::ToolCallDelta { index: 3, arguments: "{}".into() }),
        ];
        let json = frames_json(&encode_all(&mut stream, &items));
        let indices: Vec<u64> = json
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["data"]["choices"][0]["delta"]["tool_calls"][0]["index"].as_u64())
            .collect();
        assert_eq!(indices, [0, 0, 1, 1]);
    }
}
