//! OpenAI Responses (`POST /v1/responses`): the request body as the official `openai` SDKs send
//! it for `client.responses.create`, the `response` object, and errors in OpenAI's
//! `{"error":{message,type,param,code}}` shape. The streaming encoder is in `responses_stream`.
//!
//! `instructions` and `system`/`developer` input messages become the canonical system prompt;
//! `input` is a string (one user message) or items: messages, `function_call` and
//! `function_call_output`, so a tool loop round-trips with any tier. `text.format` becomes the
//! canonical response format (a `json_schema` is checked by rein like any caller's schema).
//! rein is stateless: `store` is accepted and ignored (nothing is kept, `store: false` is
//! echoed), while `previous_response_id`, `conversation` and `background` are refused by name,
//! as are tools other than functions. Fields with the same meaning in Chat Completions (`user`,
//! `metadata`, `parallel_tool_calls`, `reasoning.effort`, ...) reach OpenAI tiers through
//! `ChatRequest::extra`. The Response object carries only OpenAI's documented fields; what rein
//! did is in the `x-rein-*` headers.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use rein_core::validate::Evidence;
use rein_core::{
    CallError, ChatRequest, ChatResponse, Completion, Message, ResponseFormat, StopReason,
    ToolCall, ToolChoice, ToolSpec,
};

use super::evidence::{REIN_FIELD, caller_options};
use super::json::{TextOr, join, parse_object, require};
use super::{ErrorKind, ResponseMeta, WireError};

pub use super::responses_stream::ResponsesStream;

/// A parsed Responses request.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesRequest {
    /// The request's `model`: the name of a rein route.
    pub route: String,
    pub request: ChatRequest,
    pub stream: bool,
    /// Evidence the caller passed in `rein.evidence`, for the route's business rules.
    pub evidence: Evidence,
    /// Labels the caller passed in `rein.labels`, joined with `x-rein-labels`.
    pub labels: std::collections::BTreeMap<String, String>,
    /// What the Response object repeats of the request.
    pub echo: Echo,
}

/// The request's settings a Response object repeats (`instructions`, `tools`, `text`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    pub instructions: Value,
    pub max_output_tokens: Value,
    pub metadata: Value,
    pub parallel_tool_calls: bool,
    pub temperature: Value,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Value,
    pub top_p: Value,
    pub user: Value,
}

impl Default for Echo {
    fn default() -> Self {
        Self {
            instructions: Value::Null,
            max_output_tokens: Value::Null,
            metadata: json!({}),
            parallel_tool_calls: true,
            temperature: json!(1.0),
            text: json!({"format": {"type": "text"}}),
            tool_choice: json!("auto"),
            tools: json!([]),
            top_p: json!(1.0),
            user: Value::Null,
        }
    }
}

/// Fields rein reads or accepts; any other is refused by name.
const KNOWN_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "text",
    "stream",
    "stream_options",
    "store",
    "previous_response_id",
    "conversation",
    "background",
    "include",
    "truncation",
    "reasoning",
    "metadata",
    "user",
    "parallel_tool_calls",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    REIN_FIELD,
];

/// Fields that mean the same in Chat Completions, passed to OpenAI tiers as they are.
const PASSED_FIELDS: &[&str] = &[
    "metadata",
    "user",
    "parallel_tool_calls",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
];

const STATELESS: &str = "rein keeps no responses (it is stateless, as with `store: false`); \
                         send the whole conversation in `input` instead";

#[derive(Debug, Deserialize)]
struct RawRequest {
    model: String,
    input: Option<TextOr<Value>>,
    instructions: Option<String>,
    max_output_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    text: Option<RawText>,
    stream: Option<bool>,
    #[allow(dead_code)]
    store: Option<bool>,
    include: Option<Vec<String>>,
    truncation: Option<String>,
    reasoning: Option<RawReasoning>,
    metadata: Option<Map<String, Value>>,
    user: Option<String>,
    parallel_tool_calls: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct RawReasoning {
    effort: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawText {
    format: Option<RawFormat>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawFormatKind {
    Text,
    JsonObject,
    JsonSchema,
}

#[derive(Debug, Deserialize)]
struct RawFormat {
    #[serde(rename = "type")]
    kind: RawFormatKind,
    name: Option<String>,
    schema: Option<Value>,
    strict: Option<bool>,
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawRole {
    System,
    Developer,
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    role: RawRole,
    content: TextOr<RawPart>,
}

#[derive(Debug, Deserialize)]
struct RawPart {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    refusal: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawFunctionCall {
    call_id: String,
    name: String,
    arguments: String,
}

#[derive(Debug, Deserialize)]
struct RawFunctionOutput {
    call_id: String,
    output: TextOr<RawPart>,
}

#[derive(Debug, Deserialize)]
struct RawTool {
    #[serde(rename = "type")]
    kind: String,
    name: Option<String>,
    description: Option<String>,
    parameters: Option<Value>,
    strict: Option<bool>,
}

/// Deserialize `value` into `T`, naming the path of the first bad field under `path`.
fn typed_at<T: DeserializeOwned>(value: Value, path: &str) -> Result<T, WireError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let inner = error.path().to_string();
        let at = if inner == "." { path.to_string() } else { join(path, &inner) };
        let detail = error.inner().to_string();
        if let Some(name) =
            detail.strip_prefix("missing field `").and_then(|rest| rest.strip_suffix('`'))
        {
            return WireError::missing(join(&at, name));
        }
        let detail = detail
            .replace("invalid type: map", "invalid type: object")
            .replace("invalid type: sequence", "invalid type: array")
            .replace("expected u32", "expected a non-negative integer")
            .replace("expected f64", "expected a number");
        WireError::invalid(if at.is_empty() { "(body)".into() } else { at }, detail)
    })
}

/// Parse a Responses request body.
pub fn parse_request(body: &[u8]) -> Result<ResponsesRequest, WireError> {
    let mut map = parse_object(body)?;
    require(&map, "model")?;
    for field in ["previous_response_id", "conversation"] {
        if map.get(field).is_some_and(|value| !value.is_null()) {
            return Err(WireError::invalid(field, STATELESS));
        }
    }
    if map.get("background").and_then(Value::as_bool) == Some(true) {
        return Err(WireError::unsupported("background", "background responses"));
    }
    if let Some(unknown) = map.keys().find(|key| !KNOWN_FIELDS.contains(&key.as_str())) {
        return Err(WireError::unsupported(unknown.clone(), format!("the field `{unknown}`")));
    }
    let options = caller_options(&map)?;
    let mut extra: Map<String, Value> = map
        .iter()
        .filter(|(key, value)| PASSED_FIELDS.contains(&key.as_str()) && !value.is_null())
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    map.remove(REIN_FIELD);
    map.retain(|_, value| !value.is_null());
    let raw: RawRequest = typed_at(Value::Object(map), "")?;
    if let Some(effort) = raw.reasoning.as_ref().and_then(|reasoning| reasoning.effort.clone()) {
        extra.insert("reasoning_effort".into(), json!(effort));
    }
    translate(raw, extra, options.evidence).map(|mut parsed| {
        parsed.labels = options.labels;
        parsed
    })
}

fn translate(
    raw: RawRequest,
    extra: Map<String, Value>,
    evidence: Evidence,
) -> Result<ResponsesRequest, WireError> {
    if raw.max_output_tokens == Some(0) {
        return Err(WireError::invalid("max_output_tokens", "must be at least 1"));
    }
    if let Some(include) = raw.include.as_ref().and_then(|include| include.first()) {
        return Err(WireError::unsupported("include", format!("including `{include}`")));
    }
    if let Some(truncation) = raw.truncation.as_deref().filter(|t| *t != "disabled") {
        return Err(WireError::unsupported("truncation", format!("truncation `{truncation}`")));
    }

    let mut system: Vec<String> = raw.instructions.iter().cloned().collect();
    let mut messages: Vec<Message> = Vec::new();
    match raw.input {
        None => return Err(WireError::missing("input")),
        Some(TextOr::Text(text)) => messages.push(Message::user(text)),
        Some(TextOr::List(items)) => {
            for (index, item) in items.into_iter().enumerate() {
                input_item(item, &format!("input[{index}]"), &mut system, &mut messages)?;
            }
        }
    }
    if messages.is_empty() {
        return Err(WireError::invalid("input", "must contain at least one message"));
    }

    let mut tools = Vec::new();
    let mut echoed_tools = Vec::new();
    for (index, tool) in raw.tools.into_iter().flatten().enumerate() {
        let path = format!("tools[{index}]");
        let tool: RawTool = typed_at(tool, &path)?;
        if tool.kind != "function" {
            return Err(WireError::unsupported(
                format!("{path}.type"),
                format!("tool type `{}`", tool.kind),
            ));
        }
        let Some(name) = tool.name else {
            return Err(WireError::missing(format!("{path}.name")));
        };
        let parameters =
            tool.parameters.unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        echoed_tools.push(json!({
            "type": "function",
            "name": name,
            "description": tool.description,
            "parameters": parameters,
            "strict": tool.strict.unwrap_or(true),
        }));
        tools.push(ToolSpec { name, description: tool.description, parameters });
    }

    let (tool_choice, echoed_choice) = match raw.tool_choice {
        None => (None, json!("auto")),
        Some(value) => (Some(tool_choice(&value)?), value),
    };
    let (response_format, echoed_format) = match raw.text.and_then(|text| text.format) {
        None => (None, json!({"type": "text"})),
        Some(format) => text_format(format)?,
    };

    let echo = Echo {
        instructions: json!(raw.instructions),
        max_output_tokens: json!(raw.max_output_tokens),
        metadata: raw.metadata.map(Value::Object).unwrap_or_else(|| json!({})),
        parallel_tool_calls: raw.parallel_tool_calls.unwrap_or(true),
        temperature: json!(raw.temperature.unwrap_or(1.0)),
        text: json!({"format": echoed_format}),
        tool_choice: echoed_choice,
        tools: Value::Array(echoed_tools),
        top_p: json!(raw.top_p.unwrap_or(1.0)),
        user: json!(raw.user),
    };
    let request = ChatRequest {
        model: String::new(),
        system: if system.is_empty() { None } else { Some(system.join("\n\n")) },
        messages,
        max_tokens: raw.max_output_tokens,
        temperature: raw.temperature,
        top_p: raw.top_p,
        stop: Vec::new(),
        tools,
        tool_choice,
        response_format,
        logprobs: None,
        extra,
        extra_format: Some(rein_core::WireFormat::OpenAi),
    };
    Ok(ResponsesRequest {
        route: raw.model,
        request,
        stream: raw.stream.unwrap_or(false),
        evidence,
        labels: std::collections::BTreeMap::new(),
        echo,
    })
}

/// One item of `input`: a message, a function call the model made, or its output.
fn input_item(
    item: Value,
    path: &str,
    system: &mut Vec<String>,
    messages: &mut Vec<Message>,
) -> Result<(), WireError> {
    let kind = match item.get("type") {
        None | Some(Value::Null) => "message".to_string(),
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err(WireError::invalid(format!("{path}.type"), "must be a string")),
    };
    let mut item = item;
    if let Value::Object(map) = &mut item {
        // Fields rein does not need: the item's own id and status, echoed from a response.
        for field in ["type", "id", "status"] {
            map.remove(field);
        }
    }
    match kind.as_str() {
        "message" => {
            let message: RawMessage = typed_at(item, path)?;
            let text = content_text(message.content, &format!("{path}.content"))?;
            match message.role {
                RawRole::System | RawRole::Developer => system.push(text),
                RawRole::User => messages.push(Message::user(text)),
                RawRole::Assistant => messages.push(Message::assistant(text)),
            }
        }
        "function_call" => {
            let call: RawFunctionCall = typed_at(item, path)?;
            let call = ToolCall { id: call.call_id, name: call.name, arguments: call.arguments };
            // Calls of one turn (and the text before them) are one assistant message.
            match messages.last_mut() {
                Some(turn) if turn.role == rein_core::Role::Assistant => turn.tool_calls.push(call),
                _ => {
                    let mut turn = Message::assistant(String::new());
                    turn.tool_calls.push(call);
                    messages.push(turn);
                }
            }
        }
        "function_call_output" => {
            let output: RawFunctionOutput = typed_at(item, path)?;
            let text = content_text(output.output, &format!("{path}.output"))?;
            messages.push(Message::tool_result(output.call_id, text));
        }
        // A reasoning model's reasoning, echoed back: no tier can take another's, and the
        // answer does not depend on it.
        "reasoning" => {}
        "item_reference" => {
            return Err(WireError::invalid(format!("{path}.type"), STATELESS));
        }
        other => {
            return Err(WireError::unsupported(
                format!("{path}.type"),
                format!("input item type `{other}`"),
            ));
        }
    }
    Ok(())
}

/// The text of a content field: a string, or its text parts joined by newlines.
fn content_text(content: TextOr<RawPart>, path: &str) -> Result<String, WireError> {
    let parts = match content {
        TextOr::Text(text) => return Ok(text),
        TextOr::List(parts) => parts,
    };
    let mut texts = Vec::with_capacity(parts.len());
    for (index, part) in parts.into_iter().enumerate() {
        let part_path = format!("{path}[{index}]");
        match part.kind.as_str() {
            "input_text" | "output_text" => match part.text {
                Some(text) => texts.push(text),
                None => return Err(WireError::missing(format!("{part_path}.text"))),
            },
            "refusal" => match part.refusal {
                Some(refusal) => texts.push(refusal),
                None => return Err(WireError::missing(format!("{part_path}.refusal"))),
            },
            other => {
                return Err(WireError::unsupported(
                    format!("{part_path}.type"),
                    format!("content part type `{other}`"),
                ));
            }
        }
    }
    Ok(texts.join("\n"))
}

fn tool_choice(value: &Value) -> Result<ToolChoice, WireError> {
    match value {
        Value::String(mode) => match mode.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(WireError::invalid(
                "tool_choice",
                format!(
                    "unknown value `{other}`, expected one of auto, none, required, or \
                     {{\"type\": \"function\", \"name\": ...}}"
                ),
            )),
        },
        Value::Object(choice) => match choice.get("type").and_then(Value::as_str) {
            Some("function") => match choice.get("name").and_then(Value::as_str) {
                Some(name) => Ok(ToolChoice::Tool { name: name.to_string() }),
                None => Err(WireError::missing("tool_choice.name")),
            },
            Some(other) => Err(WireError::unsupported(
                "tool_choice.type",
                format!("tool choice type `{other}`"),
            )),
            None => Err(WireError::missing("tool_choice.type")),
        },
        _ => Err(WireError::invalid("tool_choice", "must be a string or an object")),
    }
}

/// The canonical format of `text.format`, and the format as the Response repeats it.
fn text_format(format: RawFormat) -> Result<(Option<ResponseFormat>, Value), WireError> {
    Ok(match format.kind {
        RawFormatKind::Text => (Some(ResponseFormat::Text), json!({"type": "text"})),
        RawFormatKind::JsonObject => {
            (Some(ResponseFormat::JsonObject), json!({"type": "json_object"}))
        }
        RawFormatKind::JsonSchema => {
            let Some(name) = format.name else {
                return Err(WireError::missing("text.format.name"));
            };
            let Some(schema) = format.schema else {
                return Err(WireError::missing("text.format.schema"));
            };
            super::check_caller_schema(&schema, "text.format.schema")?;
            let strict = format.strict.unwrap_or(false);
            let echoed = json!({
                "type": "json_schema",
                "name": name,
                "description": format.description,
                "schema": schema,
                "strict": strict,
            });
            (Some(ResponseFormat::JsonSchema { name, schema, strict }), echoed)
        }
    })
}

/// Whether an answer is whole (`completed`) or was cut (`incomplete`, with the reason).
pub(crate) fn status_of(response: &ChatResponse) -> (&'static str, Value) {
    match response.stop_reason {
        Some(StopReason::MaxTokens) => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some(StopReason::ContentFilter) => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

/// The `usage` object of a Response.
pub(crate) fn usage_json(response: &ChatResponse) -> Value {
    let usage = response.usage;
    json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u64::from(usage.input_tokens) + u64::from(usage.output_tokens),
    })
}

/// The id of the output item at `index` of the response `meta` names (`msg_…`, `fc_…`).
pub(crate) fn item_id(meta: &ResponseMeta, prefix: &str, index: usize) -> String {
    let base = meta.id.strip_prefix("resp_").unwrap_or(&meta.id);
    format!("{prefix}_{base}_{index}")
}

/// A `message` output item.
pub(crate) fn message_item(id: &str, status: &str, text: &str, refusal: Option<&str>) -> Value {
    let mut content = Vec::new();
    if !text.is_empty() || refusal.is_none() {
        content.push(output_text_part(text));
    }
    if let Some(refusal) = refusal {
        content.push(json!({"type": "refusal", "refusal": refusal}));
    }
    json!({
        "type": "message",
        "id": id,
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

pub(crate) fn output_text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// A `function_call` output item.
pub(crate) fn function_call_item(id: &str, status: &str, call: &ToolCall) -> Value {
    json!({
        "type": "function_call",
        "id": id,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": status,
    })
}

/// The output items of an answer: its text (and refusal) as one message, then its calls.
pub(crate) fn output_items(response: &ChatResponse, meta: &ResponseMeta) -> Vec<Value> {
    let mut items = Vec::new();
    if !response.text.is_empty() || response.refusal.is_some() || response.tool_calls.is_empty() {
        let id = item_id(meta, "msg", items.len());
        items.push(message_item(&id, "completed", &response.text, response.refusal.as_deref()));
    }
    for call in &response.tool_calls {
        let id = item_id(meta, "fc", items.len());
        items.push(function_call_item(&id, "completed", call));
    }
    items
}

/// A Response object with the given status, output, usage and error.
pub(crate) fn response_object(
    meta: &ResponseMeta,
    echo: &Echo,
    model: &str,
    status: &str,
    output: Vec<Value>,
    usage: Value,
    details: (Value, Value),
) -> Value {
    let (error, incomplete_details) = details;
    json!({
        "id": meta.id,
        "object": "response",
        "created_at": meta.created,
        "status": status,
        "background": false,
        "error": error,
        "incomplete_details": incomplete_details,
        "instructions": echo.instructions,
        "max_output_tokens": echo.max_output_tokens,
        "max_tool_calls": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": echo.parallel_tool_calls,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "service_tier": "default",
        "store": false,
        "temperature": echo.temperature,
        "text": echo.text,
        "tool_choice": echo.tool_choice,
        "tools": echo.tools,
        "top_p": echo.top_p,
        "truncation": "disabled",
        "usage": usage,
        "user": echo.user,
        "metadata": echo.metadata,
    })
}

/// The Response object for a finished call.
pub fn render_response(completion: &Completion, meta: &ResponseMeta, echo: &Echo) -> Value {
    let response = &completion.response;
    let (status, incomplete) = status_of(response);
    response_object(
        meta,
        echo,
        &response.model,
        status,
        output_items(response, meta),
        usage_json(response),
        (Value::Null, incomplete),
    )
}

/// An error body in OpenAI's format (the same as Chat Completions').
pub fn error_body(kind: ErrorKind, message: &str) -> Value {
    super::openai::error_body(kind, message, None)
}

/// The 400 body for a request that could not be parsed.
pub fn wire_error_body(error: &WireError) -> Value {
    super::openai::wire_error_body(error)
}

/// The status and body for a call that ended without an answer: Chat Completions' codes, with
/// a context-length error naming `input`, this format's field for the conversation.
pub fn call_error_body(error: &CallError) -> (ErrorKind, Value) {
    let (kind, mut body) = super::openai::call_error_body(error);
    if let CallError::ContextLength { .. } = error
        && let Some(param) = body.pointer_mut("/error/param")
    {
        *param = json!("input");
    }
    (kind, body)
}

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
