//! OpenAI Chat Completions (`POST /v1/chat/completions`): the request body as the official
//! `openai` SDKs send it, the `chat.completion` response, and error bodies in OpenAI's
//! `{"error":{message,type,param,code}}` shape. The streaming encoder is in `openai_stream`.
//!
//! `system` and `developer` messages become the canonical system prompt; content may be a
//! string or text parts; fields rein does not model (`seed`, `user`, `metadata`, ...) pass
//! through `ChatRequest::extra` so they still reach OpenAI tiers. The top-level `rein` object
//! (sent with `extra_body`) is rein's own: its evidence is read out and never forwarded.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use rein_core::validate::Evidence;
use rein_core::{
    CallError, ChatRequest, ChatResponse, Completion, Message, ResponseFormat, StopReason,
    TokenLogprob, ToolCall, ToolChoice, ToolSpec,
};

use super::evidence::{REIN_FIELD, caller_options, rein_options};
use super::json::{
    StringOrObject, TextOr, extra, may_hold_what_only_the_tree_refuses, parse_object, require,
    typed,
};
use super::{ErrorKind, ResponseMeta, WireError, push_summary, rein_summary};

pub use super::openai_stream::OpenAiStream;

/// A parsed Chat Completions request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenAiRequest {
    /// The request's `model`: the name of a rein route.
    pub route: String,
    pub request: ChatRequest,
    pub stream: bool,
    /// `stream_options.include_usage`: end the stream with a usage chunk.
    pub include_usage: bool,
    /// Evidence the caller passed in `rein.evidence`, for the route's business rules.
    #[serde(skip_serializing_if = "Evidence::is_empty")]
    pub evidence: Evidence,
    /// Labels the caller passed in `rein.labels`, joined with `x-rein-labels`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

impl OpenAiRequest {
    /// The same request with the labels of its `rein` object.
    fn labelled(mut self, labels: std::collections::BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }
}

/// Fields rein reads itself; everything else that is not null goes to `ChatRequest::extra`.
const KNOWN_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "tools",
    "tool_choice",
    "response_format",
    "logprobs",
    "top_logprobs",
    "n",
    "stream",
    "stream_options",
    "modalities",
    "functions",
    "function_call",
    "audio",
    REIN_FIELD,
];

const LEGACY_FUNCTIONS: &str =
    "legacy function calling is not supported; use `tools`, `tool_choice` and `tool_calls`";

// Unknown fields are refused so that a body with any parses the slow way, which moves them
// to `extra`; the tree path removes them before it gets here.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    model: String,
    messages: Vec<RawMessage>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    stop: Option<TextOr<String>>,
    tools: Option<Vec<RawTool>>,
    tool_choice: Option<StringOrObject<RawNamedToolChoice>>,
    response_format: Option<RawResponseFormat>,
    logprobs: Option<bool>,
    top_logprobs: Option<u8>,
    n: Option<u32>,
    stream: Option<bool>,
    stream_options: Option<RawStreamOptions>,
    modalities: Option<Vec<String>>,
    functions: Option<Value>,
    function_call: Option<Value>,
    audio: Option<Value>,
    /// rein's own object (`REIN_FIELD`), read as evidence.
    rein: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawRole {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    role: RawRole,
    content: Option<TextOr<RawPart>>,
    tool_calls: Option<Vec<RawToolCall>>,
    tool_call_id: Option<String>,
    refusal: Option<String>,
    function_call: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RawPart {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    refusal: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawToolCall {
    id: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    function: RawFunctionCall,
}

#[derive(Debug, Deserialize)]
struct RawFunctionCall {
    name: String,
    arguments: String,
}

#[derive(Debug, Deserialize)]
struct RawTool {
    #[serde(rename = "type")]
    kind: String,
    function: Option<RawFunction>,
}

#[derive(Debug, Deserialize)]
struct RawFunction {
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RawNamedToolChoice {
    #[serde(rename = "type")]
    kind: String,
    function: Option<RawFunctionName>,
}

#[derive(Debug, Deserialize)]
struct RawFunctionName {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawFormatKind {
    Text,
    JsonObject,
    JsonSchema,
}

#[derive(Debug, Deserialize)]
struct RawResponseFormat {
    #[serde(rename = "type")]
    kind: RawFormatKind,
    json_schema: Option<RawJsonSchema>,
}

#[derive(Debug, Deserialize)]
struct RawJsonSchema {
    name: String,
    schema: Option<Value>,
    strict: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct RawStreamOptions {
    include_usage: Option<bool>,
}

/// Parse a Chat Completions request body.
///
/// A body with only the fields rein reads, all well-typed, is parsed in one pass straight into
/// its struct. Anything else (an unknown field for `extra`, a bad value) takes the JSON-tree
/// path, which gives the same result and names the field of the first problem.
pub fn parse_request(body: &[u8]) -> Result<OpenAiRequest, WireError> {
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
pub fn parse_request_tree(body: &[u8]) -> Result<OpenAiRequest, WireError> {
    parse_tree(body)
}

/// The JSON-tree path of [`parse_request`].
fn parse_tree(body: &[u8]) -> Result<OpenAiRequest, WireError> {
    let mut map = parse_object(body)?;
    require(&map, "model")?;
    require(&map, "messages")?;
    // Read before `typed` takes the map; its error still comes after the typed one.
    let extra = extra(&map, KNOWN_FIELDS);
    let options = caller_options(&map);
    map.retain(|key, _| KNOWN_FIELDS.contains(&key.as_str()));
    let raw: RawRequest = typed(map)?;
    let options = options?;
    let labels = options.labels;
    translate(raw, extra, options.evidence).map(|parsed| parsed.labelled(labels))
}

fn translate(
    raw: RawRequest,
    extra: Map<String, Value>,
    evidence: Evidence,
) -> Result<OpenAiRequest, WireError> {
    if raw.functions.is_some() {
        return Err(WireError::invalid("functions", LEGACY_FUNCTIONS));
    }
    if raw.function_call.is_some() {
        return Err(WireError::invalid("function_call", LEGACY_FUNCTIONS));
    }
    if raw.audio.is_some() {
        return Err(WireError::unsupported("audio", "audio output"));
    }
    for (field, value) in
        [("max_completion_tokens", raw.max_completion_tokens), ("max_tokens", raw.max_tokens)]
    {
        if value == Some(0) {
            return Err(WireError::invalid(field, "must be at least 1"));
        }
    }
    // `modalities: ["text"]` asks for the default and goes nowhere (it is a known field), rather
    // than confuse a provider that has no such field.
    if let Some(modality) = raw.modalities.iter().flatten().find(|m| m.as_str() != "text") {
        return Err(WireError::unsupported("modalities", format!("the `{modality}` modality")));
    }
    if let Some(n) = raw.n
        && n != 1
    {
        return Err(WireError::invalid("n", format!("only 1 choice is supported, got {n}")));
    }
    if let Some(top) = raw.top_logprobs
        && top > 20
    {
        return Err(WireError::invalid("top_logprobs", format!("must be from 0 to 20, got {top}")));
    }
    if raw.messages.is_empty() {
        return Err(WireError::invalid("messages", "must contain at least one message"));
    }

    let mut system: Vec<String> = Vec::new();
    let mut messages = Vec::with_capacity(raw.messages.len());
    for (index, message) in raw.messages.into_iter().enumerate() {
        let path = format!("messages[{index}]");
        if message.function_call.is_some() {
            return Err(WireError::invalid(format!("{path}.function_call"), LEGACY_FUNCTIONS));
        }
        let text = content_text(message.content, &path)?;
        match message.role {
            RawRole::System | RawRole::Developer => system.push(text),
            RawRole::User => messages.push(Message::user(text)),
            RawRole::Assistant => {
                // A refused turn echoed back has only `refusal`; keep its words.
                let text = match message.refusal {
                    Some(refusal) if text.is_empty() => refusal,
                    _ => text,
                };
                let mut turn = Message::assistant(text);
                for (call_index, call) in message.tool_calls.into_iter().flatten().enumerate() {
                    if let Some(kind) = call.kind.filter(|kind| kind != "function") {
                        return Err(WireError::unsupported(
                            format!("{path}.tool_calls[{call_index}].type"),
                            format!("tool call type `{kind}`"),
                        ));
                    }
                    turn.tool_calls.push(ToolCall {
                        id: call.id,
                        name: call.function.name,
                        arguments: call.function.arguments,
                    });
                }
                messages.push(turn);
            }
            RawRole::Tool => {
                let Some(call_id) = message.tool_call_id else {
                    return Err(WireError::missing(format!("{path}.tool_call_id")));
                };
                messages.push(Message::tool_result(call_id, text));
            }
        }
    }

    let mut tools = Vec::new();
    for (index, tool) in raw.tools.into_iter().flatten().enumerate() {
        if tool.kind != "function" {
            return Err(WireError::unsupported(
                format!("tools[{index}].type"),
                format!("tool type `{}`", tool.kind),
            ));
        }
        let Some(function) = tool.function else {
            return Err(WireError::missing(format!("tools[{index}].function")));
        };
        tools.push(ToolSpec {
            name: function.name,
            description: function.description,
            // A function without `parameters` takes none.
            parameters: function
                .parameters
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        });
    }

    let tool_choice = raw.tool_choice.map(tool_choice).transpose()?;
    let response_format = raw.response_format.map(response_format).transpose()?;
    let logprobs = match raw.logprobs {
        Some(true) => Some(raw.top_logprobs.unwrap_or(0)),
        _ => None,
    };
    let stop = match raw.stop {
        None => Vec::new(),
        Some(TextOr::Text(stop)) => vec![stop],
        Some(TextOr::List(stops)) => stops,
    };

    let request = ChatRequest {
        model: String::new(),
        system: if system.is_empty() { None } else { Some(system.join("\n\n")) },
        messages,
        max_tokens: raw.max_completion_tokens.or(raw.max_tokens),
        temperature: raw.temperature,
        top_p: raw.top_p,
        stop,
        tools,
        tool_choice,
        response_format,
        logprobs,
        extra,
        extra_format: Some(rein_core::WireFormat::OpenAi),
    };
    Ok(OpenAiRequest {
        route: raw.model,
        request,
        stream: raw.stream.unwrap_or(false),
        include_usage: raw.stream_options.and_then(|o| o.include_usage).unwrap_or(false),
        evidence,
        labels: std::collections::BTreeMap::new(),
    })
}

/// The text of a message's content: a string, or its text parts joined by newlines.
fn content_text(content: Option<TextOr<RawPart>>, path: &str) -> Result<String, WireError> {
    let parts = match content {
        None => return Ok(String::new()),
        Some(TextOr::Text(text)) => return Ok(text),
        Some(TextOr::List(parts)) => parts,
    };
    let mut texts = Vec::with_capacity(parts.len());
    for (index, part) in parts.into_iter().enumerate() {
        let part_path = format!("{path}.content[{index}]");
        match part.kind.as_str() {
            "text" => match part.text {
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

fn tool_choice(raw: StringOrObject<RawNamedToolChoice>) -> Result<ToolChoice, WireError> {
    match raw {
        StringOrObject::String(mode) => match mode.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(WireError::invalid(
                "tool_choice",
                format!(
                    "unknown value `{other}`, expected one of auto, none, required, or an \
                     object naming a function"
                ),
            )),
        },
        StringOrObject::Object(named) => {
            if named.kind != "function" {
                return Err(WireError::unsupported(
                    "tool_choice.type",
                    format!("tool choice type `{}`", named.kind),
                ));
            }
            match named.function {
                Some(function) => Ok(ToolChoice::Tool { name: function.name }),
                None => Err(WireError::missing("tool_choice.function")),
            }
        }
    }
}

fn response_format(raw: RawResponseFormat) -> Result<ResponseFormat, WireError> {
    Ok(match raw.kind {
        RawFormatKind::Text => ResponseFormat::Text,
        RawFormatKind::JsonObject => ResponseFormat::JsonObject,
        RawFormatKind::JsonSchema => {
            let Some(schema) = raw.json_schema else {
                return Err(WireError::missing("response_format.json_schema"));
            };
            let body = schema.schema.unwrap_or_else(|| json!({}));
            super::check_caller_schema(&body, "response_format.json_schema.schema")?;
            ResponseFormat::JsonSchema {
                name: schema.name,
                schema: body,
                strict: schema.strict.unwrap_or(false),
            }
        }
    })
}

/// OpenAI's `finish_reason` for a canonical stop reason.
pub(crate) fn finish_reason(reason: Option<&StopReason>) -> String {
    match reason {
        None | Some(StopReason::EndTurn | StopReason::StopSequence) => "stop".into(),
        Some(StopReason::MaxTokens) => "length".into(),
        Some(StopReason::ToolUse) => "tool_calls".into(),
        Some(StopReason::ContentFilter) => "content_filter".into(),
        // The refusal itself is in `message.refusal`.
        Some(StopReason::Refusal | StopReason::PauseTurn) => "stop".into(),
        Some(StopReason::Other(other)) => other.clone(),
    }
}

/// The `chat.completion` object for a finished call.
pub fn render_response(completion: &Completion, meta: &ResponseMeta) -> Value {
    let response = &completion.response;
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), message_content(response));
    message.insert("refusal".into(), json!(response.refusal));
    if !response.tool_calls.is_empty() {
        let calls = response.tool_calls.iter().map(tool_call_json).collect();
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    message.insert("annotations".into(), json!([]));

    json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": response.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": logprobs_json(&response.logprobs),
            "finish_reason": finish_reason(response.stop_reason.as_ref()),
        }],
        "usage": usage_json(response),
        "system_fingerprint": null,
        "rein": rein_summary(&completion.report),
    })
}

/// The same `chat.completion` as [`render_response`] (the hot path of every non-streamed
/// answer): the same bytes, keys in the same sorted order, without building a JSON tree first.
/// An answer without logprobs (nearly all) is written directly, field by field; one with them
/// is serialized from borrowed typed fields. Debug builds check the direct bytes against the
/// serialized ones on every answer.
pub fn render_response_bytes(completion: &Completion, meta: &ResponseMeta) -> Vec<u8> {
    if !completion.response.logprobs.is_empty() {
        return render_response_typed(completion, meta);
    }
    let out = render_response_direct(completion, meta);
    #[cfg(debug_assertions)]
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&render_response_typed(completion, meta)),
        "the directly written answer differs from the serialized one"
    );
    out
}

/// [`render_response_bytes`] for an answer without logprobs, written field by field.
fn render_response_direct(completion: &Completion, meta: &ResponseMeta) -> Vec<u8> {
    use rein_providers::json_write::{push_opt_str, push_str, push_u64};
    let response = &completion.response;
    let report = &completion.report;
    let content = content_of(response);
    let mut out = Vec::with_capacity(
        512 + response.text.len()
            + response
                .tool_calls
                .iter()
                .map(|call| 96 + call.arguments.len() + call.name.len() + call.id.len())
                .sum::<usize>(),
    );
    out.extend_from_slice(br#"{"choices":[{"finish_reason":"#);
    push_str(&mut out, &finish_reason(response.stop_reason.as_ref()));
    out.extend_from_slice(br#","index":0,"logprobs":null,"message":{"annotations":[],"content":"#);
    push_opt_str(&mut out, content);
    out.extend_from_slice(br#","refusal":"#);
    push_opt_str(&mut out, response.refusal.as_deref());
    out.extend_from_slice(br#","role":"assistant""#);
    for (index, call) in response.tool_calls.iter().enumerate() {
        out.extend_from_slice(if index == 0 { br#","tool_calls":["# } else { b"," });
        out.extend_from_slice(br#"{"function":{"arguments":"#);
        push_str(&mut out, &call.arguments);
        out.extend_from_slice(br#","name":"#);
        push_str(&mut out, &call.name);
        out.extend_from_slice(br#"},"id":"#);
        push_str(&mut out, &call.id);
        out.extend_from_slice(br#","type":"function"}"#);
    }
    if !response.tool_calls.is_empty() {
        out.push(b']');
    }
    out.extend_from_slice(br#"}}],"created":"#);
    push_u64(&mut out, meta.created);
    out.extend_from_slice(br#","id":"#);
    push_str(&mut out, &meta.id);
    out.extend_from_slice(br#","model":"#);
    push_str(&mut out, &response.model);
    out.extend_from_slice(br#","object":"chat.completion","rein":"#);
    push_summary(&mut out, report);
    out.extend_from_slice(br#","system_fingerprint":null,"usage":{"completion_tokens":"#);
    push_u64(&mut out, u64::from(response.usage.output_tokens));
    out.extend_from_slice(br#","prompt_tokens":"#);
    push_u64(&mut out, u64::from(response.usage.input_tokens));
    out.extend_from_slice(br#","total_tokens":"#);
    push_u64(
        &mut out,
        u64::from(response.usage.input_tokens) + u64::from(response.usage.output_tokens),
    );
    out.extend_from_slice(b"}}");
    out
}

/// [`render_response_bytes`] serialized from borrowed typed fields: the answers with logprobs,
/// and the reference the direct writing is checked against in debug builds.
fn render_response_typed(completion: &Completion, meta: &ResponseMeta) -> Vec<u8> {
    #[derive(Serialize)]
    struct Function<'a> {
        arguments: &'a str,
        name: &'a str,
    }
    #[derive(Serialize)]
    struct Call<'a> {
        function: Function<'a>,
        id: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
    }
    #[derive(Serialize)]
    struct Message<'a> {
        annotations: [(); 0],
        content: Option<&'a str>,
        refusal: Option<&'a str>,
        role: &'static str,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<Call<'a>>,
    }
    #[derive(Serialize)]
    struct Choice<'a> {
        finish_reason: String,
        index: u32,
        logprobs: Value,
        message: Message<'a>,
    }
    #[derive(Serialize)]
    struct Usage {
        completion_tokens: u32,
        prompt_tokens: u32,
        total_tokens: u64,
    }
    #[derive(Serialize)]
    struct Summary<'a> {
        attempts: usize,
        outcome: &'a str,
        route: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_status: Option<&'a str>,
        settings_version: Option<i64>,
        tier: Option<&'a str>,
    }
    #[derive(Serialize)]
    struct Body<'a> {
        choices: [Choice<'a>; 1],
        created: u64,
        id: &'a str,
        model: &'a str,
        object: &'static str,
        rein: Summary<'a>,
        system_fingerprint: Option<()>,
        usage: Usage,
    }
    let response = &completion.response;
    let report = &completion.report;
    let content = content_of(response);
    let body = Body {
        choices: [Choice {
            finish_reason: finish_reason(response.stop_reason.as_ref()),
            index: 0,
            logprobs: logprobs_json(&response.logprobs),
            message: Message {
                annotations: [],
                content,
                refusal: response.refusal.as_deref(),
                role: "assistant",
                tool_calls: response
                    .tool_calls
                    .iter()
                    .map(|call| Call {
                        function: Function { arguments: &call.arguments, name: &call.name },
                        id: &call.id,
                        kind: "function",
                    })
                    .collect(),
            },
        }],
        created: meta.created,
        id: &meta.id,
        model: &response.model,
        object: "chat.completion",
        rein: Summary {
            attempts: report.attempt_count(),
            outcome: report.outcome.as_str(),
            route: &report.route,
            run_status: report.run_status(),
            settings_version: report.settings_version,
            tier: report.served_by.as_ref().map(|served| served.tier_name.as_str()),
        },
        system_fingerprint: None,
        usage: Usage {
            completion_tokens: response.usage.output_tokens,
            prompt_tokens: response.usage.input_tokens,
            total_tokens: u64::from(response.usage.input_tokens)
                + u64::from(response.usage.output_tokens),
        },
    };
    // Sized for the answer and its frame at once, not grown by doubling.
    let mut out = Vec::with_capacity(512 + response.text.len() + 64 * response.tool_calls.len());
    match serde_json::to_writer(&mut out, &body) {
        Ok(()) => out,
        Err(_) => render_response(completion, meta).to_string().into_bytes(),
    }
}

/// `content` is null when the answer is only tool calls or a refusal, as OpenAI sends it.
fn content_of(response: &ChatResponse) -> Option<&str> {
    if response.text.is_empty() && (!response.tool_calls.is_empty() || response.refusal.is_some()) {
        None
    } else {
        Some(response.text.as_str())
    }
}

/// [`content_of`] as JSON.
fn message_content(response: &ChatResponse) -> Value {
    content_of(response).map_or(Value::Null, |text| json!(text))
}

fn tool_call_json(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

pub(crate) fn usage_json(response: &ChatResponse) -> Value {
    let usage = response.usage;
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": u64::from(usage.input_tokens) + u64::from(usage.output_tokens),
    })
}

/// `{"content": [...], "refusal": null}`, or null when there are none.
pub(crate) fn logprobs_json(tokens: &[TokenLogprob]) -> Value {
    if tokens.is_empty() {
        return Value::Null;
    }
    let content: Vec<Value> = tokens
        .iter()
        .map(|token| {
            let top: Vec<Value> = token
                .top
                .iter()
                .map(|(text, logprob)| {
                    json!({"token": text, "logprob": logprob, "bytes": text.as_bytes()})
                })
                .collect();
            json!({
                "token": token.token,
                "logprob": token.logprob,
                "bytes": token.token.as_bytes(),
                "top_logprobs": top,
            })
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// OpenAI's error `type` and default `code` for each kind. A bad key is an
/// `invalid_request_error` with code `invalid_api_key`, as OpenAI sends it.
fn type_and_code(kind: ErrorKind) -> (&'static str, Option<&'static str>) {
    match kind {
        ErrorKind::InvalidRequest => ("invalid_request_error", None),
        ErrorKind::Authentication => ("invalid_request_error", Some("invalid_api_key")),
        ErrorKind::PermissionDenied => ("invalid_request_error", Some("permission_denied")),
        ErrorKind::NotFound => ("invalid_request_error", Some("model_not_found")),
        // As OpenAI answers an unknown URL: no code, so no client reads it as a model problem.
        ErrorKind::UnknownPath => ("invalid_request_error", None),
        ErrorKind::MethodNotAllowed => ("invalid_request_error", Some("method_not_allowed")),
        ErrorKind::RequestTimeout => ("invalid_request_error", Some("request_timeout")),
        ErrorKind::RequestTooLarge => ("invalid_request_error", Some("request_too_large")),
        ErrorKind::UnsupportedMediaType => {
            ("invalid_request_error", Some("unsupported_media_type"))
        }
        ErrorKind::RateLimited => ("requests", Some("rate_limit_exceeded")),
        ErrorKind::Internal => ("server_error", None),
        ErrorKind::Misconfigured => ("server_error", Some("rein_misconfigured")),
        ErrorKind::Unavailable => ("server_error", Some("service_unavailable")),
        ErrorKind::Timeout => ("server_error", Some("timeout")),
    }
}

/// An error body in OpenAI's format, with the kind's default `code`.
pub fn error_body(kind: ErrorKind, message: &str, param: Option<&str>) -> Value {
    error_body_with_code(kind, message, param, type_and_code(kind).1)
}

/// An error body in OpenAI's format with an explicit `code` (`context_length_exceeded`, ...).
pub fn error_body_with_code(
    kind: ErrorKind,
    message: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Value {
    json!({
        "error": {
            "message": message,
            "type": type_and_code(kind).0,
            "param": param,
            "code": code,
        }
    })
}

/// The 400 body for a request that could not be parsed.
pub fn wire_error_body(error: &WireError) -> Value {
    error_body(error.kind(), &error.to_string(), error.param())
}

/// The status and body for a call that ended without an answer, with OpenAI's codes for
/// context length and content policy, and the `rein` object when there is a report.
pub fn call_error_body(error: &CallError) -> (ErrorKind, Value) {
    let kind = ErrorKind::of_call_error(error);
    let message = error.to_string();
    let mut body = match error {
        CallError::UnknownRoute(_) => {
            error_body_with_code(kind, &message, Some("model"), Some("model_not_found"))
        }
        CallError::ContentPolicy { .. } => {
            error_body_with_code(kind, &message, None, Some("content_policy_violation"))
        }
        CallError::ContentFilter { .. } => {
            error_body_with_code(kind, &message, None, Some("content_filter"))
        }
        CallError::ContextLength { .. } => {
            error_body_with_code(kind, &message, Some("messages"), Some("context_length_exceeded"))
        }
        CallError::Interrupted { .. } => {
            error_body_with_code(kind, &message, None, Some("stream_interrupted"))
        }
        CallError::Degraded { .. } => {
            error_body_with_code(kind, &message, None, Some("rein_degraded"))
        }
        CallError::Unserved { misconfigured: true, .. } => error_body(kind, &message, None),
        CallError::Unserved { .. } => {
            error_body_with_code(kind, &message, None, Some("rein_unserved"))
        }
    };
    if let (Some(report), Value::Object(map)) = (error.report(), &mut body) {
        map.insert("rein".into(), rein_summary(report));
    }
    (kind, body)
}

/// The `GET /v1/models` list: one entry per route name.
pub fn models_body(routes: &[String], created: u64) -> Value {
    let data: Vec<Value> = routes
        .iter()
        .map(
            |route| json!({"id": route, "object": "model", "created": created, "owned_by": "rein"}),
        )
        .collect();
    json!({"object": "list", "data": data})
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
