//! Decodes a ConverseStream body: AWS event-stream frames (`application/vnd.amazon.eventstream`:
//! a prelude of total and header lengths with its CRC32, typed headers, a JSON payload, a CRC32
//! of the whole message), read with `aws-smithy-eventstream`, whose reader checks both CRCs.
//! A frame longer than `max_event_bytes` fails before it is buffered; a bad CRC or a frame that
//! does not parse is a malformed answer, never a complete one.
//!
//! Events (`:event-type`): `messageStart` → `Start`; `contentBlockStart` with a `toolUse` →
//! `ToolCallStart`; `contentBlockDelta` with `text`, `toolUse.input` fragments or
//! `reasoningContent.text`; `messageStop` → `Stop`; `metadata` → `Usage` and `Done`. Converse
//! sends `metadata` after `messageStop`, so the answer is done at `metadata`, or at the end of
//! the body once `messageStop` came; a body that ends before `messageStop` ends without `Done`,
//! which the engine reads as a cut-off stream. Exception frames (`:message-type: exception`,
//! `throttlingException`, `modelStreamErrorException`, ...) and `error` frames become
//! [`Failure::StreamError`] with the exception type.
//!
//! InvokeModelWithResponseStream sends the same frames with one event type, `chunk`, whose
//! payload `{"bytes": "<base64>"}` carries one Anthropic Messages stream event, handed to the
//! Anthropic adapter's decoder: `message_stop` is the end, and the invocation metrics Bedrock
//! adds to it (`amazon-bedrock-invocationMetrics`) give the usage. A `json_object` prefill is
//! put back in front of the answer's text, as for Anthropic's own API.

use std::collections::VecDeque;

use aws_smithy_eventstream::frame::read_message_from;
use aws_smithy_types::event_stream::{HeaderValue, Message};
use bytes::{Buf, BytesMut};
use futures_util::stream::{self, StreamExt};
use serde_json::Value;

use rein_core::failure::ResponseLimit;
use rein_core::{EventStream, Failure, StreamEvent, Usage, WireFormat};

use super::response::{WireUsage, stop_reason};
use crate::anthropic::AnthropicDecoder;
use crate::sse::SseEvent;
use crate::stream::{Body, Decoder, Reading};

/// The bytes of a frame's total-length field, which opens every frame.
const LENGTH_BYTES: usize = 4;

/// Frames → events, synchronously; shared by live bodies and recorded replays.
pub(crate) struct EventStreamPump {
    buffer: BytesMut,
    decoder: ConverseDecoder,
    pending: VecDeque<Result<StreamEvent, Failure>>,
    done: bool,
    received: usize,
    reading: Reading,
}

impl EventStreamPump {
    pub(crate) fn new(model: &str, reading: Reading) -> Self {
        Self {
            buffer: BytesMut::new(),
            decoder: ConverseDecoder { model: model.to_owned(), ..ConverseDecoder::default() },
            pending: VecDeque::new(),
            done: false,
            received: 0,
            reading,
        }
    }

    pub(crate) fn push_bytes(&mut self, bytes: &[u8]) {
        if self.done {
            return;
        }
        self.received = self.received.saturating_add(bytes.len());
        if self.received > self.reading.limits.max_response_bytes {
            let failure = self.reading.too_large();
            self.fail(failure);
            return;
        }
        self.buffer.extend_from_slice(bytes);
        while !self.done && self.buffer.len() >= LENGTH_BYTES {
            let total = (&self.buffer[..LENGTH_BYTES]).get_u32() as usize;
            if total > self.reading.limits.max_event_bytes {
                let limit_bytes = self.reading.limits.max_event_bytes as u64;
                self.fail(Failure::ResponseTooLarge { limit: ResponseLimit::Event, limit_bytes });
                return;
            }
            if self.buffer.len() < total {
                return;
            }
            let frame = self.buffer.split_to(total).freeze();
            match read_message_from(frame) {
                Ok(message) => self.dispatch(&message),
                Err(error) => {
                    let detail = format!("event-stream frame: {error}");
                    self.fail(Failure::Malformed { detail });
                }
            }
        }
    }

    /// The body ended: done if the message stopped, else the stream simply ends (cut off).
    pub(crate) fn finish(&mut self) {
        if !self.done && self.decoder.stopped {
            self.pending.push_back(Ok(StreamEvent::Done));
        } else if !self.buffer.is_empty() {
            tracing::debug!(bytes = self.buffer.len(), "event stream ended inside a frame");
        }
        self.done = true;
    }

    fn fail(&mut self, failure: Failure) {
        self.pending.push_back(Err(failure));
        self.done = true;
    }

    fn dispatch(&mut self, message: &Message) {
        match self.decoder.decode(message) {
            Ok(events) => {
                for mut event in events {
                    if let StreamEvent::TextDelta { text } = &mut event
                        && let Some(prefill) = self.reading.prefill.take()
                    {
                        text.insert_str(0, prefill);
                    }
                    let is_done = event == StreamEvent::Done;
                    self.pending.push_back(Ok(event));
                    if is_done {
                        self.done = true;
                        return;
                    }
                }
            }
            Err(failure) => self.fail(failure),
        }
    }
}

/// The events of a live event-stream body.
pub(crate) fn event_stream_events(body: Body, pump: EventStreamPump) -> EventStream {
    stream::unfold((body, pump), |(mut body, mut pump)| async move {
        loop {
            if let Some(item) = pump.pending.pop_front() {
                return Some((item, (body, pump)));
            }
            if pump.done {
                return None;
            }
            match body.next().await {
                Some(Ok(bytes)) => pump.push_bytes(&bytes),
                Some(Err(failure)) => pump.fail(failure),
                None => pump.finish(),
            }
        }
    })
    .boxed()
}

/// The events of a recorded event-stream body, decoded the way a live one would be.
pub(crate) fn replay_event_stream(bytes: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    let mut pump = EventStreamPump::new("", Reading::default());
    pump.push_bytes(bytes);
    pump.finish();
    pump.pending.into_iter().collect()
}

#[derive(Debug, Default)]
struct ConverseDecoder {
    model: String,
    /// Content block indexes that are tool calls, and whether their input arrived.
    tools: Vec<(u32, bool)>,
    stopped: bool,
    /// The decoder of the Anthropic events InvokeModelWithResponseStream's chunks carry.
    anthropic: AnthropicDecoder,
}

fn header<'a>(message: &'a Message, name: &str) -> Option<&'a str> {
    message.headers().iter().find(|h| h.name().as_str() == name).and_then(|h| match h.value() {
        HeaderValue::String(value) => Some(value.as_str()),
        _ => None,
    })
}

fn index_of(json: &Value) -> u32 {
    json.get("contentBlockIndex")
        .and_then(Value::as_u64)
        .map_or(0, |i| u32::try_from(i).unwrap_or(u32::MAX))
}

fn str_at<'a>(json: &'a Value, pointer: &str) -> Option<&'a str> {
    json.pointer(pointer).and_then(Value::as_str)
}

impl ConverseDecoder {
    fn decode(&mut self, message: &Message) -> Result<Vec<StreamEvent>, Failure> {
        let payload = message.payload();
        let json: Value = if payload.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(payload)
                .map_err(|e| crate::stream::malformed("converse stream event", &e))?
        };
        match header(message, ":message-type").unwrap_or("event") {
            "event" => {}
            "exception" => {
                let kind = header(message, ":exception-type").unwrap_or("exception");
                return Err(stream_error(kind, &json));
            }
            _ => {
                let kind = header(message, ":error-code").unwrap_or("error");
                let mut failure = stream_error(kind, &json);
                if let (Failure::StreamError { message: text, .. }, Some(said)) =
                    (&mut failure, header(message, ":error-message"))
                {
                    said.clone_into(text);
                }
                return Err(failure);
            }
        }
        let mut events = Vec::new();
        match header(message, ":event-type").unwrap_or_default() {
            "messageStart" => {
                events.push(StreamEvent::Start { id: String::new(), model: self.model.clone() });
            }
            "contentBlockStart" => {
                if let Some(tool) = json.pointer("/start/toolUse") {
                    let index = index_of(&json);
                    self.tools.retain(|(i, _)| *i != index);
                    self.tools.push((index, false));
                    events.push(StreamEvent::ToolCallStart {
                        index,
                        id: str_at(tool, "/toolUseId").unwrap_or_default().to_owned(),
                        name: str_at(tool, "/name").unwrap_or_default().to_owned(),
                    });
                }
            }
            "contentBlockDelta" => {
                let index = index_of(&json);
                if let Some(text) = str_at(&json, "/delta/text").filter(|t| !t.is_empty()) {
                    events.push(StreamEvent::TextDelta { text: text.to_owned() });
                } else if let Some(input) =
                    str_at(&json, "/delta/toolUse/input").filter(|t| !t.is_empty())
                {
                    if let Some(tool) = self.tools.iter_mut().find(|(i, _)| *i == index) {
                        tool.1 = true;
                    }
                    events.push(StreamEvent::ToolCallDelta { index, arguments: input.to_owned() });
                } else if let Some(text) =
                    str_at(&json, "/delta/reasoningContent/text").filter(|t| !t.is_empty())
                {
                    events.push(StreamEvent::ThinkingDelta { text: text.to_owned() });
                }
            }
            "contentBlockStop" => {
                let index = index_of(&json);
                if self.tools.iter().any(|(i, saw)| *i == index && !saw) {
                    // A call without arguments streams no input; its input is `{}`.
                    events.push(StreamEvent::ToolCallDelta { index, arguments: "{}".into() });
                }
            }
            "messageStop" => {
                let reason = str_at(&json, "/stopReason").unwrap_or("end_turn");
                events.push(StreamEvent::Stop { reason: stop_reason(reason) });
                self.stopped = true;
            }
            "chunk" => return self.chunk(&json),
            "metadata" => {
                if let Some(usage) = json.get("usage").filter(|u| !u.is_null()) {
                    let usage: WireUsage = serde_json::from_value(usage.clone())
                        .map_err(|e| crate::stream::malformed("usage", &e))?;
                    events.push(StreamEvent::Usage { usage: usage.to_usage() });
                }
                if self.stopped {
                    events.push(StreamEvent::Done);
                }
            }
            // Event types added later.
            _ => {}
        }
        Ok(events)
    }
}

impl ConverseDecoder {
    /// One InvokeModelWithResponseStream chunk: its Anthropic event, and the usage in the
    /// invocation metrics of the last one (before its `Done`).
    fn chunk(&mut self, json: &Value) -> Result<Vec<StreamEvent>, Failure> {
        let malformed =
            |detail: &str| Failure::Malformed { detail: format!("invoke chunk: {detail}") };
        let encoded = str_at(json, "/bytes").ok_or_else(|| malformed("no `bytes`"))?;
        let decoded = aws_smithy_types::base64::decode(encoded)
            .map_err(|_| malformed("`bytes` is not base64"))?;
        let data = String::from_utf8(decoded).map_err(|_| malformed("the event is not UTF-8"))?;
        let usage = if data.contains("amazon-bedrock-invocationMetrics") {
            let event: Value = serde_json::from_str(&data)
                .map_err(|e| crate::stream::malformed("invoke chunk event", &e))?;
            event.get("amazon-bedrock-invocationMetrics").map(metrics_usage)
        } else {
            None
        };
        let record = SseEvent { event: None, data: data.into(), terminated: true };
        let mut events = Vec::new();
        self.anthropic.decode(&record, &mut events)?;
        if let Some(usage) = usage {
            let at = events.iter().position(|e| *e == StreamEvent::Done).unwrap_or(events.len());
            events.insert(at, StreamEvent::Usage { usage });
        }
        Ok(events)
    }
}

/// The usage in Bedrock's invocation metrics: the whole prompt (cache reads and writes
/// included, as the Anthropic adapter counts it) and the output.
fn metrics_usage(metrics: &Value) -> Usage {
    let count = |key: &str| {
        metrics.get(key).and_then(Value::as_u64).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    let input = ["inputTokenCount", "cacheReadInputTokenCount", "cacheWriteInputTokenCount"]
        .into_iter()
        .map(count)
        .fold(0u32, u32::saturating_add);
    Usage { input_tokens: input, output_tokens: count("outputTokenCount") }
}

fn stream_error(kind: &str, json: &Value) -> Failure {
    let message = json
        .get("message")
        .or_else(|| json.get("Message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Failure::StreamError {
        format: WireFormat::Bedrock,
        error_type: Some(kind.to_owned()),
        code: None,
        message,
    }
}
