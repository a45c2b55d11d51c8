//! The canonical shape of a model call: the request rein sends to a tier, the events a
//! provider's stream yields, and the response assembled from them. Provider adapters translate
//! between these types and each provider's wire format; everything else in rein speaks only these.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    /// The result of a tool call, answering the assistant's `tool_calls`.
    Tool,
}

/// One turn of the conversation. The system prompt is not a message: it lives on
/// [`ChatRequest::system`], because the providers disagree on where it goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// Plain text of the turn (may be empty for an assistant turn that only calls tools).
    #[serde(default)]
    pub content: String,
    /// Tool calls made by an assistant turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `Tool` turn: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Self { role: Role::User, content: text.into(), tool_calls: Vec::new(), tool_call_id: None }
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// A call the model asked for. `arguments` is the JSON text exactly as the model wrote it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// How the model may use tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    Auto,
    None,
    /// Must call some tool.
    Required,
    /// Must call this tool.
    Tool {
        name: String,
    },
}

/// The output format asked of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Value,
        #[serde(default)]
        strict: bool,
    },
}

/// A model call, independent of provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The provider's model id. Set by the tier that sends the request.
    #[serde(default)]
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Ask for token log probabilities, with this many alternatives per token (0 = only the
    /// chosen token). Providers that have none ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<u8>,
    /// Provider-specific fields passed through unchanged into the request body.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
    /// The wire format `extra` was written for. Adapters of another format leave `extra` out,
    /// so an OpenAI-only field never breaks a fallback to an Anthropic tier (and back).
    /// `None`: send it to every provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_format: Option<crate::failure::WireFormat>,
}

impl ChatRequest {
    /// The text of the last user message: the customer's message in an agent's loop.
    pub fn last_user_text(&self) -> Option<&str> {
        self.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.as_str())
    }
}

/// Why the model stopped writing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Finished its turn (OpenAI `stop`, Anthropic `end_turn`).
    EndTurn,
    /// Hit a caller-supplied stop sequence.
    StopSequence,
    /// Cut off at the token ceiling (OpenAI `length`, Anthropic `max_tokens`).
    MaxTokens,
    /// Stopped to call tools.
    ToolUse,
    /// Output withheld by the provider's content filter (OpenAI `content_filter`).
    ContentFilter,
    /// The model declined (Anthropic `refusal`, or OpenAI's `refusal` field).
    Refusal,
    /// A long-running turn paused (Anthropic `pause_turn`); the caller may continue it.
    PauseTurn,
    /// A value rein does not know yet, kept verbatim.
    Other(String),
}

impl StopReason {
    /// True when the output is complete as far as the provider is concerned. A `MaxTokens`
    /// answer is cut off and must never be presented as complete.
    pub fn is_complete(&self) -> bool {
        !matches!(self, StopReason::MaxTokens)
    }
}

/// Token counts of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// Log probability of one output token, with the alternatives the provider returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top: Vec<(String, f64)>,
}

/// One event of a provider's stream, already translated out of the wire format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// The provider accepted the request (OpenAI: first chunk; Anthropic: `message_start`).
    Start {
        id: String,
        model: String,
    },
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        text: String,
    },
    RefusalDelta {
        text: String,
    },
    /// A tool call begins; `index` identifies it in later argument deltas.
    ToolCallStart {
        index: u32,
        id: String,
        name: String,
    },
    ToolCallDelta {
        index: u32,
        arguments: String,
    },
    Logprobs {
        tokens: Vec<TokenLogprob>,
    },
    /// Usage so far; later values replace earlier ones field by field when non-zero.
    Usage {
        usage: Usage,
    },
    /// The model's stop reason (OpenAI `finish_reason`, Anthropic `message_delta.stop_reason`).
    Stop {
        reason: StopReason,
    },
    /// The stream's terminator (`[DONE]`, `message_stop`).
    Done,
}

impl StreamEvent {
    /// True for events that carry part of the answer itself: the first of these is the
    /// "first token" that the first-token clock waits for, and the point after which a
    /// passthrough stream can no longer be retried invisibly.
    pub fn is_content(&self) -> bool {
        matches!(
            self,
            StreamEvent::TextDelta { .. }
                | StreamEvent::ThinkingDelta { .. }
                | StreamEvent::RefusalDelta { .. }
                | StreamEvent::ToolCallStart { .. }
                | StreamEvent::ToolCallDelta { .. }
        )
    }
}

/// A complete answer from one tier.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The provider's id for this answer.
    pub id: String,
    /// The model that produced this answer, as the provider reported it.
    pub model: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thinking: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    pub stop_reason: Option<StopReason>,
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logprobs: Vec<TokenLogprob>,
}

impl ChatResponse {
    /// The events a stream of this response would carry, in order. Adapters for
    /// non-streaming calls and the simulator use it, so the two paths cannot drift.
    pub fn to_events(&self) -> Vec<StreamEvent> {
        self.clone().into_events()
    }

    /// [`ChatResponse::to_events`], moving the texts instead of copying them.
    pub fn into_events(self) -> Vec<StreamEvent> {
        let mut events = Vec::with_capacity(6 + 2 * self.tool_calls.len());
        events.push(StreamEvent::Start { id: self.id, model: self.model });
        // Usage goes first, where a provider's stream reports the prompt's size (Anthropic's
        // `message_start`): the whole answer is known, so an encoder can say it up front.
        events.push(StreamEvent::Usage { usage: self.usage });
        if !self.thinking.is_empty() {
            events.push(StreamEvent::ThinkingDelta { text: self.thinking });
        }
        if !self.text.is_empty() {
            events.push(StreamEvent::TextDelta { text: self.text });
        }
        if let Some(refusal) = self.refusal {
            events.push(StreamEvent::RefusalDelta { text: refusal });
        }
        for (index, call) in self.tool_calls.into_iter().enumerate() {
            let index = index as u32;
            events.push(StreamEvent::ToolCallStart { index, id: call.id, name: call.name });
            events.push(StreamEvent::ToolCallDelta { index, arguments: call.arguments });
        }
        if !self.logprobs.is_empty() {
            events.push(StreamEvent::Logprobs { tokens: self.logprobs });
        }
        if let Some(reason) = self.stop_reason {
            events.push(StreamEvent::Stop { reason });
        }
        events.push(StreamEvent::Done);
        events
    }
}

/// Builds a [`ChatResponse`] from stream events, in the order they arrived.
#[derive(Debug, Default, Clone)]
pub struct ResponseBuilder {
    response: ChatResponse,
    /// Tool calls by stream index, in the order they started.
    calls: Vec<(u32, ToolCall)>,
    saw_content: bool,
    saw_done: bool,
}

impl ResponseBuilder {
    pub fn push(&mut self, event: &StreamEvent) {
        if event.is_content() {
            self.saw_content = true;
        }
        match event {
            StreamEvent::Start { id, model } => {
                if self.response.id.is_empty() {
                    self.response.id = id.clone();
                }
                if self.response.model.is_empty() {
                    self.response.model = model.clone();
                }
            }
            StreamEvent::TextDelta { text } => self.response.text.push_str(text),
            StreamEvent::ThinkingDelta { text } => self.response.thinking.push_str(text),
            StreamEvent::RefusalDelta { text } => {
                self.response.refusal.get_or_insert_with(String::new).push_str(text)
            }
            StreamEvent::ToolCallStart { index, id, name } => self.calls.push((
                *index,
                ToolCall { id: id.clone(), name: name.clone(), arguments: String::new() },
            )),
            StreamEvent::ToolCallDelta { index, arguments } => {
                if let Some((_, call)) = self.calls.iter_mut().rev().find(|(i, _)| i == index) {
                    call.arguments.push_str(arguments);
                }
            }
            StreamEvent::Logprobs { tokens } => {
                self.response.logprobs.extend(tokens.iter().cloned())
            }
            StreamEvent::Usage { usage } => {
                if usage.input_tokens > 0 {
                    self.response.usage.input_tokens = usage.input_tokens;
                }
                if usage.output_tokens > 0 {
                    self.response.usage.output_tokens = usage.output_tokens;
                }
            }
            StreamEvent::Stop { reason } => self.response.stop_reason = Some(reason.clone()),
            StreamEvent::Done => self.saw_done = true,
        }
    }

    /// Whether any part of the answer has arrived.
    pub fn has_content(&self) -> bool {
        self.saw_content
    }

    /// Whether the model's stop reason has arrived (the answer is whole even if the
    /// terminator never comes).
    pub fn has_stop(&self) -> bool {
        self.response.stop_reason.is_some()
    }

    pub fn saw_done(&self) -> bool {
        self.saw_done
    }

    pub fn finish(mut self) -> ChatResponse {
        self.response.tool_calls = self.calls.into_iter().map(|(_, c)| c).collect();
        if self.response.refusal.is_some() && self.response.stop_reason == Some(StopReason::EndTurn)
        {
            self.response.stop_reason = Some(StopReason::Refusal);
        }
        self.response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_round_trips_through_events() {
        let response = ChatResponse {
            id: "r1".into(),
            model: "m".into(),
            text: "hello".into(),
            thinking: "hmm".into(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }],
            refusal: None,
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage { input_tokens: 3, output_tokens: 4 },
            logprobs: vec![],
        };
        let mut builder = ResponseBuilder::default();
        for event in response.to_events() {
            builder.push(&event);
        }
        assert!(builder.saw_done());
        assert_eq!(builder.finish(), response);
    }

    #[test]
    fn max_tokens_is_not_complete() {
        assert!(!StopReason::MaxTokens.is_complete());
        assert!(StopReason::EndTurn.is_complete());
    }
}
