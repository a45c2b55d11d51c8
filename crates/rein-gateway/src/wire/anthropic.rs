//! Anthropic Messages (`POST /v1/messages`): the request body as the official `anthropic` SDKs
//! send it, the `message` response, and error bodies in Anthropic's
//! `{"type":"error","error":{type,message}}` shape. The streaming encoder is in
//! `anthropic_stream`.
//!
//! Content blocks map onto canonical turns: `tool_result` blocks of a user turn become `Tool`
//! messages (before the turn's text), `tool_use` blocks become the assistant's tool calls, and
//! `thinking` blocks sent back are dropped (the canonical request has no place for them). A
//! trailing assistant message stays last, as a prefill. Fields rein does not model (`top_k`,
//! `metadata`, `thinking`, ...) pass through `ChatRequest::extra`. The top-level `rein` object
//! (sent with `extra_body`) is rein's own: its evidence is read out and never forwarded.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use rein_core::validate::Evidence;
use rein_core::{
    CallError, ChatRequest, ChatResponse, Completion, Message, ResponseFormat, StopReason,
    ToolCall, ToolChoice, ToolSpec,
};

use super::evidence::{REIN_FIELD, caller_options, rein_options};
use super::json::{
    TextOr, extra, may_hold_what_only_the_tree_refuses, parse_object, require, typed,
};
use super::{ErrorKind, ResponseMeta, WireError, rein_summary};

pub use super::anthropic_stream::AnthropicStream;

/// A parsed Messages request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnthropicRequest {
    /// The request's `model`: the name of a rein route.
    pub route: String,
    pub request: ChatRequest,
    pub stream: bool,
    /// Evidence the caller passed in `rein.evidence`, for the route's business rules.
    #[serde(skip_serializing_if = "Evidence::is_empty")]
    pub evidence: Evidence,
    /// Labels the caller passed in `rein.labels`, joined with `x-rein-labels`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

impl AnthropicRequest {
    /// The same request with the labels of its `rein` object.
    fn labelled(mut self, labels: std::collections::BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }
}

/// Fields rein reads itself; everything else that is not null goes to `ChatRequest::extra`.
const KNOWN_FIELDS: &[&str] = &[
    "model",
    "max_tokens",
    "messages",
    "system",
    "temperature",
    "top_p",
    "stop_sequences",
    "tools",
    "tool_choice",
    "stream",
    REIN_FIELD,
];

// Unknown fields are refused so that a body with any parses the slow way, which moves them
// to `extra`; the tree path removes them before it gets here.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    model: String,
    max_tokens: u32,
    messages: Vec<RawMessage>,
    system: Option<TextOr<RawTextBlock>>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    stop_sequences: Option<Vec<String>>,
    tools: Option<Vec<RawTool>>,
    tool_choice: Option<RawToolChoice>,
    stream: Option<bool>,
    /// rein's own object (`REIN_FIELD`), read as evidence.
    rein: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawRole {
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    role: RawRole,
    content: TextOr<RawBlock>,
}

/// Any content block; which fields matter depends on `type`.
#[derive(Debug, Deserialize)]
struct RawBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
    tool_use_id: Option<String>,
    content: Option<TextOr<RawTextBlock>>,
    is_error: Option<bool>,
}

/// A block that may only be text (`system`, a `tool_result`'s content).
#[derive(Debug, Deserialize)]
struct RawTextBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawTool {
    #[serde(rename = "type")]
    kind: Option<String>,
    name: String,
    description: Option<String>,
    input_schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawChoiceKind {
    Auto,
    Any,
    Tool,
    None,
}

#[derive(Debug, Deserialize)]
struct RawToolChoice {
    #[serde(rename = "type")]
    kind: RawChoiceKind,
    name: Option<String>,
}

/// Parse a Messages request body.
///
/// A body with only the fields rein reads, all well-typed, is parsed in one pass straight into
/// its struct. Anything else (an unknown field for `extra`, a bad value) takes the JSON-tree
/// path, which gives the same result and names the field of the first problem.
pub fn parse_request(body: &[u8]) -> Result<AnthropicRequest, WireError> {
    // JSON is UTF-8 (RFC 8259), but the one pass skips the strings of fields it does not know
    // without reading their bytes: the text is checked whole first, and the tree path says
    // where it is not UTF-8.
    let Ok(text) = std::str::from_utf8(body) else {
        return parse_tree(body);
    };
    // Nor does it read their numbers, which the tree path does.
    if may_hold_what_only_the_tree_refuses(text) {
        return parse_tree(body);
    }
    match serde_json::from_str::<RawRequest>(text) {
        Ok(mut raw) => {
            let options = rein_options(raw.rein.take())?;
            let labels = options.labels;
            translate(raw, Map::new(), options.evidence).map(|parsed| parsed.labelled(labels))
        }
        Err(_) => parse_tree(body),
    }
}

/// The JSON-tree path of [`parse_request`] on its own, which must give the same result as the
/// one-pass path wherever that one applies. For the fuzz targets.
#[doc(hidden)]
pub fn parse_request_tree(body: &[u8]) -> Result<AnthropicRequest, WireError> {
    parse_tree(body)
}

/// The JSON-tree path of [`parse_request`].
fn parse_tree(body: &[u8]) -> Result<AnthropicRequest, WireError> {
    let mut map = parse_object(body)?;
    require(&map, "model")?;
    require(&map, "max_tokens")?;
    require(&map, "messages")?;
    // Read before `typed` takes the map; its error still comes after the typed one.
    let options = caller_options(&map);
    let extra = extra(&map, KNOWN_FIELDS);
    map.retain(|key, _| KNOWN_FIELDS.contains(&key.as_str()));
    let raw: RawRequest = typed(map)?;
    let options = options?;
    let labels = options.labels;
    translate(raw, extra, options.evidence).map(|parsed| parsed.labelled(labels))
}

fn translate(
    raw: RawRequest,
    mut extra: Map<String, Value>,
    evidence: Evidence,
) -> Result<AnthropicRequest, WireError> {
    if raw.messages.is_empty() {
        return Err(WireError::invalid("messages", "must contain at least one message"));
    }
    if raw.max_tokens == 0 {
        return Err(WireError::invalid("max_tokens", "must be at least 1"));
    }

    let system = match raw.system {
        None => None,
        Some(TextOr::Text(text)) => Some(text),
        Some(TextOr::List(blocks)) => Some(text_blocks(blocks, "system")?),
    }
    .filter(|system| !system.is_empty());

    let mut messages = Vec::with_capacity(raw.messages.len());
    for (index, message) in raw.messages.into_iter().enumerate() {
        let path = format!("messages[{index}]");
        match message.role {
            RawRole::User => user_turn(message.content, &path, &mut messages)?,
            RawRole::Assistant => messages.push(assistant_turn(message.content, &path)?),
        }
    }

    let mut tools = Vec::new();
    for (index, tool) in raw.tools.into_iter().flatten().enumerate() {
        if let Some(kind) = tool.kind.filter(|kind| kind != "custom") {
            return Err(WireError::unsupported(
                format!("tools[{index}].type"),
                format!("server tool type `{kind}`"),
            ));
        }
        let Some(schema) = tool.input_schema else {
            return Err(WireError::missing(format!("tools[{index}].input_schema")));
        };
        tools.push(ToolSpec { name: tool.name, description: tool.description, parameters: schema });
    }

    let tool_choice = match raw.tool_choice {
        None => None,
        Some(choice) => Some(match choice.kind {
            RawChoiceKind::Auto => ToolChoice::Auto,
            RawChoiceKind::Any => ToolChoice::Required,
            RawChoiceKind::None => ToolChoice::None,
            RawChoiceKind::Tool => match choice.name {
                Some(name) => ToolChoice::Tool { name },
                None => return Err(WireError::missing("tool_choice.name")),
            },
        }),
    };

    let response_format = structured_output(&mut extra)?;
    let request = ChatRequest {
        model: String::new(),
        system,
        messages,
        max_tokens: Some(raw.max_tokens),
        temperature: raw.temperature,
        top_p: raw.top_p,
        stop: raw.stop_sequences.unwrap_or_default(),
        tools,
        tool_choice,
        response_format,
        logprobs: None,
        extra,
        extra_format: Some(rein_core::WireFormat::Anthropic),
    };
    Ok(AnthropicRequest {
        route: raw.model,
        request,
        stream: raw.stream.unwrap_or(false),
        evidence,
        labels: std::collections::BTreeMap::new(),
    })
}

/// Anthropic structured outputs (`output_config.format`, or the older top-level
/// `output_format`) become the canonical JSON-schema response format, so a tier of either
/// provider is asked for it and rein checks the answer against it. Other `output_config` keys
/// (e.g. `effort`) stay in `extra` for Anthropic tiers.
fn structured_output(
    extra: &mut serde_json::Map<String, Value>,
) -> Result<Option<ResponseFormat>, WireError> {
    let mut format = extra.remove("output_format");
    let mut at = "output_format";
    if let Some(Value::Object(config)) = extra.get_mut("output_config")
        && let Some(inner) = config.remove("format")
    {
        format = Some(inner);
        at = "output_config.format";
        if config.is_empty() {
            extra.remove("output_config");
        }
    }
    let Some(format) = format else {
        return Ok(None);
    };
    match (format.get("type").and_then(Value::as_str), format.get("schema")) {
        (Some("json_schema"), Some(schema)) if schema.is_object() => {
            super::check_caller_schema(schema, &format!("{at}.schema"))?;
            Ok(Some(ResponseFormat::JsonSchema {
                name: "output".to_string(),
                schema: schema.clone(),
                strict: true,
            }))
        }
        (Some("json_schema"), _) => Err(WireError::missing(format!("{at}.schema"))),
        (Some(other), _) => {
            Err(WireError::unsupported(format!("{at}.type"), format!("output format `{other}`")))
        }
        (None, _) => Err(WireError::missing(format!("{at}.type"))),
    }
}

/// The text of blocks that may only be text, joined by newlines.
fn text_blocks(blocks: Vec<RawTextBlock>, path: &str) -> Result<String, WireError> {
    let mut texts = Vec::with_capacity(blocks.len());
    for (index, block) in blocks.into_iter().enumerate() {
        let block_path = format!("{path}[{index}]");
        if block.kind != "text" {
            return Err(WireError::unsupported(
                format!("{block_path}.type"),
                format!("block type `{}`", block.kind),
            ));
        }
        match block.text {
            Some(text) => texts.push(text),
            None => return Err(WireError::missing(format!("{block_path}.text"))),
        }
    }
    Ok(texts.join("\n"))
}

/// A user turn: its `tool_result` blocks become `Tool` messages, then its text (if any, or
/// if there is nothing else) a `User` message.
fn user_turn(
    content: TextOr<RawBlock>,
    path: &str,
    messages: &mut Vec<Message>,
) -> Result<(), WireError> {
    let blocks = match content {
        TextOr::Text(text) => {
            messages.push(Message::user(text));
            return Ok(());
        }
        TextOr::List(blocks) => blocks,
    };
    let mut texts = Vec::new();
    let mut results = Vec::new();
    for (index, block) in blocks.into_iter().enumerate() {
        let block_path = format!("{path}.content[{index}]");
        match block.kind.as_str() {
            "text" => texts.push(block_text(block.text, &block_path)?),
            "tool_result" => {
                let Some(call_id) = block.tool_use_id else {
                    return Err(WireError::missing(format!("{block_path}.tool_use_id")));
                };
                let mut text = match block.content {
                    None => String::new(),
                    Some(TextOr::Text(text)) => text,
                    Some(TextOr::List(inner)) => {
                        text_blocks(inner, &format!("{block_path}.content"))?
                    }
                };
                // The canonical message has no error flag; say it in the text so every
                // provider's model still sees that the tool failed.
                if block.is_error == Some(true) {
                    text = if text.is_empty() { "Error".into() } else { format!("Error: {text}") };
                }
                results.push(Message::tool_result(call_id, text));
            }
            "tool_use" | "thinking" | "redacted_thinking" => {
                return Err(WireError::invalid(
                    format!("{block_path}.type"),
                    format!("`{}` blocks belong to assistant messages", block.kind),
                ));
            }
            other => return Err(unsupported_block(&block_path, other)),
        }
    }
    let has_results = !results.is_empty();
    messages.extend(results);
    if !texts.is_empty() || !has_results {
        messages.push(Message::user(texts.join("\n")));
    }
    Ok(())
}

fn assistant_turn(content: TextOr<RawBlock>, path: &str) -> Result<Message, WireError> {
    let blocks = match content {
        TextOr::Text(text) => return Ok(Message::assistant(text)),
        TextOr::List(blocks) => blocks,
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (index, block) in blocks.into_iter().enumerate() {
        let block_path = format!("{path}.content[{index}]");
        match block.kind.as_str() {
            "text" => texts.push(block_text(block.text, &block_path)?),
            "tool_use" => {
                let Some(id) = block.id else {
                    return Err(WireError::missing(format!("{block_path}.id")));
                };
                let Some(name) = block.name else {
                    return Err(WireError::missing(format!("{block_path}.name")));
                };
                let arguments = match block.input {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(input) => input.to_string(),
                };
                calls.push(ToolCall { id, name, arguments });
            }
            // Reasoning sent back has no canonical place; the answer does not depend on it.
            "thinking" | "redacted_thinking" => {}
            "tool_result" => {
                return Err(WireError::invalid(
                    format!("{block_path}.type"),
                    "`tool_result` blocks belong to user messages",
                ));
            }
            other => return Err(unsupported_block(&block_path, other)),
        }
    }
    let mut turn = Message::assistant(texts.join("\n"));
    turn.tool_calls = calls;
    Ok(turn)
}

fn block_text(text: Option<String>, block_path: &str) -> Result<String, WireError> {
    text.ok_or_else(|| WireError::missing(format!("{block_path}.text")))
}

fn unsupported_block(block_path: &str, kind: &str) -> WireError {
    WireError::unsupported(format!("{block_path}.type"), format!("content block type `{kind}`"))
}

/// Anthropic's `stop_reason` for a canonical stop reason.
pub(crate) fn stop_reason(reason: Option<&StopReason>) -> String {
    match reason {
        None | Some(StopReason::EndTurn) => "end_turn".into(),
        Some(StopReason::MaxTokens) => "max_tokens".into(),
        Some(StopReason::StopSequence) => "stop_sequence".into(),
        Some(StopReason::ToolUse) => "tool_use".into(),
        Some(StopReason::Refusal | StopReason::ContentFilter) => "refusal".into(),
        Some(StopReason::PauseTurn) => "pause_turn".into(),
        Some(StopReason::Other(other)) => other.clone(),
    }
}

/// A tool call's `input`: its arguments parsed as a JSON object. Arguments that are not a JSON
/// object (a model can write anything) become `{}` so the body stays valid for every SDK.
pub(crate) fn tool_input(call: &ToolCall) -> Value {
    if call.arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(input @ Value::Object(_)) => input,
        _ => {
            tracing::warn!(
                tool = %call.name,
                id = %call.id,
                "tool call arguments are not a JSON object; sending `{{}}` as its input"
            );
            json!({})
        }
    }
}

/// The text the caller sees: the answer's text, then any refusal.
pub(crate) fn answer_text(response: &ChatResponse) -> String {
    match &response.refusal {
        Some(refusal) if response.text.is_empty() => refusal.clone(),
        Some(refusal) => format!("{}\n\n{refusal}", response.text),
        None => response.text.clone(),
    }
}

/// The `message` object for a finished call.
pub fn render_response(completion: &Completion, meta: &ResponseMeta) -> Value {
    let response = &completion.response;
    let mut content = Vec::new();
    if !response.thinking.is_empty() {
        content.push(json!({"type": "thinking", "thinking": response.thinking, "signature": ""}));
    }
    let text = answer_text(response);
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in &response.tool_calls {
        content.push(json!({
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": tool_input(call),
        }));
    }
    json!({
        "id": meta.id,
        "type": "message",
        "role": "assistant",
        "model": response.model,
        "content": content,
        "stop_reason": stop_reason(response.stop_reason.as_ref()),
        "stop_sequence": null,
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        },
        "rein": rein_summary(&completion.report),
    })
}

pub(crate) fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest | ErrorKind::UnsupportedMediaType => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::PermissionDenied => "permission_error",
        ErrorKind::NotFound | ErrorKind::UnknownPath => "not_found_error",
        ErrorKind::MethodNotAllowed | ErrorKind::RequestTimeout => "invalid_request_error",
        ErrorKind::RequestTooLarge => "request_too_large",
        ErrorKind::RateLimited => "rate_limit_error",
        ErrorKind::Internal | ErrorKind::Misconfigured => "api_error",
        ErrorKind::Unavailable => "overloaded_error",
        ErrorKind::Timeout => "timeout_error",
    }
}

/// An error body in Anthropic's format.
pub fn error_body(kind: ErrorKind, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(kind), "message": message}})
}

/// The 400 body for a request that could not be parsed.
pub fn wire_error_body(error: &WireError) -> Value {
    error_body(error.kind(), &error.to_string())
}

/// The status and body for a call that ended without an answer, with the `rein` object when
/// there is a report.
pub fn call_error_body(error: &CallError) -> (ErrorKind, Value) {
    let kind = ErrorKind::of_call_error(error);
    let mut body = error_body(kind, &error.to_string());
    if let (Some(report), Value::Object(map)) = (error.report(), &mut body) {
        map.insert("rein".into(), rein_summary(report));
    }
    (kind, body)
}

/// One route as an Anthropic model object (`GET /v1/models/{id}`); `created_at` is RFC 3339.
pub fn model_object(route: &str, created_unix_s: u64) -> Value {
    json!({
        "type": "model",
        "id": route,
        "display_name": route,
        "created_at": rfc3339(created_unix_s),
    })
}

/// The routes as Anthropic's model list (`GET /v1/models` with `anthropic-version`).
pub fn models_body(routes: &[String], created_unix_s: u64) -> Value {
    let data: Vec<Value> = routes.iter().map(|route| model_object(route, created_unix_s)).collect();
    json!({
        "data": data,
        "has_more": false,
        "first_id": routes.first(),
        "last_id": routes.last(),
    })
}

/// `2026-12-01T09:46:44Z` for a Unix time in seconds.
fn rfc3339(unix_s: u64) -> String {
    i64::try_from(unix_s)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|at| at.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into())
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
