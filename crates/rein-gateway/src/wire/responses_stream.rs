//! The OpenAI Responses streaming encoder: the engine's released items as the typed SSE events
//! OpenAI sends (`event: <type>` and a `data` object with the same `type` and a
//! `sequence_number` counting from 0): `response.created` and `response.in_progress` first;
//! for text, `response.output_item.added` (a message), `response.content_part.added`,
//! `response.output_text.delta`s, `response.output_text.done`, `response.content_part.done`,
//! `response.output_item.done`; for each function call, `response.output_item.added`,
//! `response.function_call_arguments.delta`s and `.done`, `response.output_item.done`; then,
//! only once the answer is whole, `response.completed` (or `response.incomplete` when it was
//! cut at `max_output_tokens`) with the whole Response.
//!
//! A call that fails after the stream started ends with `response.failed` (status `failed`,
//! its `error` saying why, the items so far marked `incomplete`); one that fails before ends
//! with an `error` event. Neither is ever followed by `response.completed`, so no SDK takes a
//! cut answer for a complete one.

use bytes::Bytes;
use serde_json::{Value, json};

use rein_core::{CallError, Completion, Released, StreamEvent, ToolCall};

use super::ResponseMeta;
use super::json::sse_frame;
use super::responses::{
    Echo, call_error_body, function_call_item, item_id, message_item, output_text_part,
    response_object, status_of, usage_json,
};

/// What an open or finished output item holds.
#[derive(Debug)]
enum Item {
    /// A message: its text and, when the model refused, the refusal (each a content part).
    Message { id: String, text: String, refusal: Option<String> },
    /// A function call, with the canonical index its argument deltas carry.
    Call { id: String, canonical: u32, call: ToolCall },
}

/// Encodes one streamed answer. Feed it every [`Released`] item in order; call
/// [`close`](Self::close) if the engine's stream ends without a `Completed` or `Failed`.
#[derive(Debug)]
pub struct ResponsesStream {
    meta: ResponseMeta,
    echo: Echo,
    model: String,
    sequence: u64,
    started: bool,
    finished: bool,
    items: Vec<Item>,
    /// Whether the last item is still open (its `done` events not yet sent).
    open: bool,
}

impl ResponsesStream {
    pub fn new(meta: ResponseMeta, echo: Echo) -> Self {
        Self {
            meta,
            echo,
            model: String::new(),
            sequence: 0,
            started: false,
            finished: false,
            items: Vec::new(),
            open: false,
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
        let mut frames = Vec::new();
        match item {
            Released::Event(event) => self.event(event, &mut frames),
            Released::Completed(completion) => self.completed(completion, &mut frames),
            Released::Failed(error) => self.failed(error, &mut frames),
        }
        frames
    }

    /// The engine's stream ended without a terminal item: if the answer was not finished, end
    /// with `response.failed` rather than let the caller take what it has as complete.
    pub fn close(&mut self) -> Vec<Bytes> {
        if self.finished {
            return Vec::new();
        }
        let mut frames = Vec::new();
        self.ensure_started(&mut frames);
        self.fail(&mut frames, "the stream ended before the answer was complete");
        frames
    }

    fn emit(&mut self, frames: &mut Vec<Bytes>, kind: &str, fields: Value) {
        let mut data = json!({"type": kind, "sequence_number": self.sequence});
        if let (Value::Object(data), Value::Object(fields)) = (&mut data, fields) {
            data.extend(fields);
        }
        self.sequence += 1;
        frames.push(sse_frame(Some(kind), &data));
    }

    fn event(&mut self, event: &StreamEvent, frames: &mut Vec<Bytes>) {
        match event {
            StreamEvent::Start { model, .. } => {
                if self.model.is_empty() {
                    self.model = model.clone();
                }
                self.ensure_started(frames);
            }
            StreamEvent::TextDelta { text } if !text.is_empty() => {
                self.ensure_started(frames);
                self.text(frames, text, false);
            }
            StreamEvent::RefusalDelta { text } if !text.is_empty() => {
                self.ensure_started(frames);
                self.text(frames, text, true);
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.ensure_started(frames);
                self.close_item(frames);
                let output_index = self.items.len();
                let item_id = item_id(&self.meta, "fc", output_index);
                let call =
                    ToolCall { id: id.clone(), name: name.clone(), arguments: String::new() };
                let item = function_call_item(&item_id, "in_progress", &call);
                self.items.push(Item::Call { id: item_id, canonical: *index, call });
                self.open = true;
                self.emit(
                    frames,
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": item}),
                );
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                self.ensure_started(frames);
                let found =
                    self.items.iter_mut().enumerate().rev().find_map(|(at, item)| match item {
                        Item::Call { id, canonical, call } if canonical == index => {
                            call.arguments.push_str(arguments);
                            Some((at, id.clone()))
                        }
                        _ => None,
                    });
                if let Some((output_index, item_id)) = found {
                    self.emit(
                        frames,
                        "response.function_call_arguments.delta",
                        json!({"item_id": item_id, "output_index": output_index, "delta": arguments}),
                    );
                }
            }
            // The Responses format's reasoning items need summaries no tier gives alike, and
            // logprobs were not asked for; the stop reason and usage come with the completion.
            StreamEvent::TextDelta { .. }
            | StreamEvent::RefusalDelta { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::Logprobs { .. }
            | StreamEvent::Usage { .. }
            | StreamEvent::Stop { .. }
            | StreamEvent::Done => {}
        }
    }

    /// A piece of text (or of a refusal): into the open message, opening one when needed.
    fn text(&mut self, frames: &mut Vec<Bytes>, delta: &str, refusal: bool) {
        let open_message = self.open && matches!(self.items.last(), Some(Item::Message { .. }));
        if !open_message {
            self.close_item(frames);
            let output_index = self.items.len();
            let id = item_id(&self.meta, "msg", output_index);
            let item = json!({
                "type": "message", "id": id, "status": "in_progress", "role": "assistant",
                "content": [],
            });
            self.items.push(Item::Message { id, text: String::new(), refusal: None });
            self.open = true;
            self.emit(
                frames,
                "response.output_item.added",
                json!({"output_index": output_index, "item": item}),
            );
        }
        let output_index = self.items.len() - 1;
        let Some(Item::Message { id, text, refusal: refused }) = self.items.last_mut() else {
            return;
        };
        let id = id.clone();
        // The text part is content 0; a refusal follows it (content 1 when there is text).
        let (kind, content_index, first) = if refusal {
            let first = refused.is_none();
            refused.get_or_insert_with(String::new).push_str(delta);
            ("response.refusal.delta", usize::from(!text.is_empty()), first)
        } else {
            if refused.is_some() {
                // Text after a refusal has no part to go in; the refusal is the answer.
                return;
            }
            let first = text.is_empty();
            text.push_str(delta);
            ("response.output_text.delta", 0, first)
        };
        if first {
            let part = if refusal {
                json!({"type": "refusal", "refusal": ""})
            } else {
                output_text_part("")
            };
            if refusal && content_index == 1 {
                self.text_done(frames, output_index);
            }
            self.emit(
                frames,
                "response.content_part.added",
                json!({"item_id": id, "output_index": output_index,
                       "content_index": content_index, "part": part}),
            );
        }
        if delta.is_empty() {
            return;
        }
        let mut fields = json!({"item_id": id, "output_index": output_index,
                                "content_index": content_index, "delta": delta});
        if !refusal && let Value::Object(map) = &mut fields {
            map.insert("logprobs".into(), json!([]));
        }
        self.emit(frames, kind, fields);
    }

    /// `response.output_text.done` and `response.content_part.done` of a message's text.
    fn text_done(&mut self, frames: &mut Vec<Bytes>, output_index: usize) {
        let Some(Item::Message { id, text, .. }) = self.items.get(output_index) else {
            return;
        };
        let (id, text) = (id.clone(), text.clone());
        let at = json!({"item_id": id, "output_index": output_index, "content_index": 0});
        let mut done = at.clone();
        let mut part_done = at;
        if let (Value::Object(done), Value::Object(part_done)) = (&mut done, &mut part_done) {
            done.insert("text".into(), json!(text));
            done.insert("logprobs".into(), json!([]));
            part_done.insert("part".into(), output_text_part(&text));
        }
        self.emit(frames, "response.output_text.done", done);
        self.emit(frames, "response.content_part.done", part_done);
    }

    /// The `done` events of the open item, if any.
    fn close_item(&mut self, frames: &mut Vec<Bytes>) {
        if !self.open {
            return;
        }
        self.open = false;
        let output_index = self.items.len() - 1;
        let Some(item) = self.items.last() else { return };
        match item {
            Item::Message { id, text, refusal } => {
                let (id, text, refusal) = (id.clone(), text.clone(), refusal.clone());
                match &refusal {
                    Some(refusal) => {
                        // A text part before it was closed when the refusal began.
                        let content_index = usize::from(!text.is_empty());
                        let at = json!({"item_id": id, "output_index": output_index,
                                        "content_index": content_index});
                        let mut done = at.clone();
                        let mut part_done = at;
                        if let (Value::Object(done), Value::Object(part_done)) =
                            (&mut done, &mut part_done)
                        {
                            done.insert("refusal".into(), json!(refusal));
                            part_done.insert(
                                "part".into(),
                                json!({"type": "refusal", "refusal": refusal}),
                            );
                        }
                        self.emit(frames, "response.refusal.done", done);
                        self.emit(frames, "response.content_part.done", part_done);
                    }
                    None => self.text_done(frames, output_index),
                }
                let item = message_item(&id, "completed", &text, refusal.as_deref());
                self.emit(
                    frames,
                    "response.output_item.done",
                    json!({"output_index": output_index, "item": item}),
                );
            }
            Item::Call { id, call, .. } => {
                let (id, call) = (id.clone(), call.clone());
                self.emit(
                    frames,
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": output_index, "name": call.name,
                           "arguments": call.arguments}),
                );
                let item = function_call_item(&id, "completed", &call);
                self.emit(
                    frames,
                    "response.output_item.done",
                    json!({"output_index": output_index, "item": item}),
                );
            }
        }
    }

    /// The output items so far, each with `status`.
    fn output(&self, status: &str) -> Vec<Value> {
        self.items
            .iter()
            .map(|item| match item {
                Item::Message { id, text, refusal } => {
                    message_item(id, status, text, refusal.as_deref())
                }
                Item::Call { id, call, .. } => function_call_item(id, status, call),
            })
            .collect()
    }

    fn ensure_started(&mut self, frames: &mut Vec<Bytes>) {
        if self.started {
            return;
        }
        self.started = true;
        let response = response_object(
            &self.meta,
            &self.echo,
            &self.model,
            "in_progress",
            Vec::new(),
            Value::Null,
            (Value::Null, Value::Null),
        );
        self.emit(frames, "response.created", json!({"response": response.clone()}));
        self.emit(frames, "response.in_progress", json!({"response": response}));
    }

    fn completed(&mut self, completion: &Completion, frames: &mut Vec<Bytes>) {
        let response = &completion.response;
        self.ensure_started(frames);
        // The model that answered, whichever tier's stream started first.
        if !response.model.is_empty() {
            self.model = response.model.clone();
        }
        if self.items.is_empty() {
            // Nothing of the answer was streamed (an empty answer, or one released whole):
            // stream it now, so the events always carry what the Response holds.
            for event in response.to_events() {
                self.event(&event, frames);
            }
            if self.items.is_empty() {
                self.text(frames, "", false);
            }
        }
        self.close_item(frames);
        let (status, incomplete) = status_of(response);
        let kind = if status == "completed" { "response.completed" } else { "response.incomplete" };
        let body = response_object(
            &self.meta,
            &self.echo,
            &self.model,
            status,
            self.output("completed"),
            usage_json(response),
            (Value::Null, incomplete),
        );
        self.emit(frames, kind, json!({"response": body}));
        self.finished = true;
    }

    fn failed(&mut self, error: &CallError, frames: &mut Vec<Bytes>) {
        if self.started {
            self.fail(frames, &error.to_string());
            return;
        }
        // Nothing was sent yet: an `error` event with the error the plain call would have had.
        let (_, body) = call_error_body(error);
        let error = body.get("error").cloned().unwrap_or_default();
        self.emit(
            frames,
            "error",
            json!({
                "code": error.get("code").cloned().unwrap_or_default(),
                "message": error.get("message").cloned().unwrap_or_default(),
                "param": error.get("param").cloned().unwrap_or_default(),
            }),
        );
        self.finished = true;
    }

    /// `response.failed`, with the items so far marked incomplete.
    fn fail(&mut self, frames: &mut Vec<Bytes>, message: &str) {
        let body = response_object(
            &self.meta,
            &self.echo,
            &self.model,
            "failed",
            self.output("incomplete"),
            Value::Null,
            (json!({"code": "server_error", "message": message}), Value::Null),
        );
        self.emit(frames, "response.failed", json!({"response": body}));
        self.finished = true;
    }
}
