//! Decodes the Responses API's typed SSE stream. Each record's `data` is an event object whose
//! `type` names it (the `event:` line repeats it): `response.created` yields `Start`;
//! `response.output_text.delta` text and `response.refusal.delta` refusal deltas;
//! `response.output_item.added` with a `function_call` item starts a tool call, and
//! `response.function_call_arguments.delta` continues it (a server that only sends
//! `.done`, or the whole call in `response.output_item.done`, still yields its arguments once).
//! `response.completed` and `response.incomplete` carry the final `response` object: its usage,
//! the stop reason and `Done`. `response.failed` (`response.error.code`) and the `error` event
//! are mid-stream errors. Tool calls are numbered from 0 in the order they start, whatever
//! their `output_index` (a reasoning item may come first). Other events (`response.in_progress`,
//! content part and reasoning events, built-in tools) carry nothing rein reads. A stream that
//! ends without a closing event ends without `Done`: the engine sees it cut.

use serde::Deserialize;
use serde_json::Value;

use rein_core::{Failure, StreamEvent, WireFormat};

use super::response::{WireError, WireResponse};
use crate::sse::SseEvent;
use crate::stream::{Decoder, malformed};

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(default)]
    response: Option<WireResponse>,
    #[serde(default)]
    delta: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    output_index: Option<u32>,
    #[serde(default)]
    item: Option<Item>,
    // The `error` event: the error's fields at the top level, or (some servers) in `error`.
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Debug, Deserialize)]
struct Item {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// One tool call of the stream.
#[derive(Debug)]
struct Call {
    output_index: u32,
    /// Whether any of its arguments were sent on.
    sent_arguments: bool,
}

#[derive(Debug, Default)]
pub(crate) struct ResponsesDecoder {
    started: bool,
    /// The calls started so far; a call's position is its index in rein's events.
    calls: Vec<Call>,
}

impl Decoder for ResponsesDecoder {
    fn decode(
        &mut self,
        record: &SseEvent<'_>,
        events: &mut Vec<StreamEvent>,
    ) -> Result<(), Failure> {
        let data = record.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        // The type first: an event rein does not read is skipped whatever its shape (new
        // event types come with fields of their own).
        let named: Named<'_> =
            serde_json::from_str(data).map_err(|e| malformed("responses stream event", &e))?;
        let kind = named.kind.or(record.event.as_deref()).unwrap_or_default().to_owned();
        if !READ.contains(&kind.as_str()) {
            return Ok(());
        }
        let event: Event =
            serde_json::from_str(data).map_err(|e| malformed("responses stream event", &e))?;
        self.events(&kind, event, events)
    }
}

/// The events rein reads; every other one carries nothing it needs.
const READ: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.queued",
    "response.output_text.delta",
    "response.refusal.delta",
    "response.output_item.added",
    "response.output_item.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
];

#[derive(Debug, Deserialize)]
struct Named<'a> {
    #[serde(default, rename = "type", borrow)]
    kind: Option<&'a str>,
}

impl ResponsesDecoder {
    /// The events of one stream event, appended to `events`.
    fn events(
        &mut self,
        kind: &str,
        event: Event,
        events: &mut Vec<StreamEvent>,
    ) -> Result<(), Failure> {
        match kind {
            "response.created" | "response.in_progress" | "response.queued" => {
                self.start(event.response.as_ref(), events);
            }
            "response.output_text.delta" => {
                self.start(None, events);
                if let Some(text) = event.delta.filter(|text| !text.is_empty()) {
                    events.push(StreamEvent::TextDelta { text });
                }
            }
            "response.refusal.delta" => {
                self.start(None, events);
                if let Some(text) = event.delta.filter(|text| !text.is_empty()) {
                    events.push(StreamEvent::RefusalDelta { text });
                }
            }
            "response.output_item.added" | "response.output_item.done" => {
                let Some(item) = event.item.filter(|i| i.kind.as_deref() == Some("function_call"))
                else {
                    return Ok(());
                };
                self.start(None, events);
                let output_index = event.output_index.unwrap_or(self.calls.len() as u32);
                let index = self.call(output_index, &item, events);
                // A call announced with its arguments, or first seen whole when done.
                self.arguments_once(index, item.arguments, events);
            }
            "response.function_call_arguments.delta" => {
                let output_index = event.output_index.unwrap_or(0);
                if let Some(index) = self.position(output_index)
                    && let Some(arguments) = event.delta.filter(|a| !a.is_empty())
                {
                    self.calls[index].sent_arguments = true;
                    events.push(StreamEvent::ToolCallDelta { index: index as u32, arguments });
                }
            }
            "response.function_call_arguments.done" => {
                let output_index = event.output_index.unwrap_or(0);
                if let Some(index) = self.position(output_index) {
                    self.arguments_once(index, event.arguments, events);
                }
            }
            "response.completed" | "response.incomplete" => {
                let Some(response) = event.response else {
                    return Err(Failure::Malformed {
                        detail: format!("`{kind}` without its `response`"),
                    });
                };
                self.start(Some(&response), events);
                if let Some(usage) = &response.usage {
                    events.push(StreamEvent::Usage { usage: usage.to_usage() });
                }
                if let Some(reason) = response.stop_reason(!self.calls.is_empty()) {
                    events.push(StreamEvent::Stop { reason });
                }
                events.push(StreamEvent::Done);
            }
            "response.failed" => {
                let mut response = event.response.unwrap_or_default();
                return Err(response.failure().unwrap_or_else(|| Failure::StreamError {
                    format: WireFormat::OpenAi,
                    error_type: None,
                    code: None,
                    message: "the response failed".to_owned(),
                }));
            }
            "error" => {
                let error = match event.error {
                    Some(error) => error,
                    None => {
                        WireError { code: event.code, error_type: None, message: event.message }
                    }
                };
                return Err(error.failure());
            }
            _ => {}
        }
        Ok(())
    }

    /// `Start`, once, with the response's id and model when the event carries them.
    fn start(&mut self, response: Option<&WireResponse>, events: &mut Vec<StreamEvent>) {
        if self.started {
            return;
        }
        self.started = true;
        let field = |get: fn(&WireResponse) -> &Option<String>| {
            response.and_then(|r| get(r).clone()).unwrap_or_default()
        };
        events.push(StreamEvent::Start { id: field(|r| &r.id), model: field(|r| &r.model) });
    }

    fn position(&self, output_index: u32) -> Option<usize> {
        self.calls.iter().position(|call| call.output_index == output_index)
    }

    /// The position of the call at `output_index`, starting it if it is new.
    fn call(&mut self, output_index: u32, item: &Item, events: &mut Vec<StreamEvent>) -> usize {
        if let Some(index) = self.position(output_index) {
            return index;
        }
        self.calls.push(Call { output_index, sent_arguments: false });
        let index = self.calls.len() - 1;
        events.push(StreamEvent::ToolCallStart {
            index: index as u32,
            id: item.call_id.clone().unwrap_or_default(),
            name: item.name.clone().unwrap_or_default(),
        });
        index
    }

    /// The call's whole arguments, unless some were sent already.
    fn arguments_once(
        &mut self,
        index: usize,
        arguments: Option<String>,
        events: &mut Vec<StreamEvent>,
    ) {
        let call = &mut self.calls[index];
        if call.sent_arguments {
            return;
        }
        if let Some(arguments) = arguments.filter(|a| !a.is_empty()) {
            call.sent_arguments = true;
            events.push(StreamEvent::ToolCallDelta { index: index as u32, arguments });
        }
    }
}
