//! Amazon Bedrock's Converse API: `POST /model/{modelId}/converse` answers JSON
//! (`output.message.content`, `stopReason`, `usage`, `metrics`), `/converse-stream` answers
//! AWS event-stream frames (`application/vnd.amazon.eventstream`, written with
//! `aws-smithy-eventstream`, CRCs included): `messageStart`, `contentBlockStart` for a tool
//! call, `contentBlockDelta`s, `contentBlockStop`, `messageStop`, `metadata`. Errors are
//! `{"message"}` bodies typed by the `x-amzn-ErrorType` header, as Bedrock sends them; an
//! unauthorized fault is Bedrock's 403 `ExpiredTokenException` (Bedrock answers an expired
//! token with 403, not 401), and a request without a SigV4 `authorization` header gets 403
//! `MissingAuthenticationTokenException`. The in-stream error is a `throttlingException`
//! frame; the malformed frame is a real frame whose message CRC is wrong.
//!
//! A Converse body is read by translating it into the shape the rest of the simulator reads
//! (`model` and `stream` from the path, `inferenceConfig.maxTokens`, text, `toolUse` and
//! `toolResult` blocks, `toolConfig`), so faults, scripts and answers work as for the others.
//!
//! InvokeModel for Claude (`/model/{modelId}/invoke`, `/invoke-with-response-stream`) takes
//! Anthropic's Messages body with `anthropic_version` (refused without it, as Bedrock does) and
//! no `model` or `stream` (the path names them). It answers a Messages body (`msg_bdrk_…`), or
//! event-stream `chunk` frames, each `{"bytes": <base64 of one Anthropic stream event>}` with
//! Bedrock's `p` padding, the last (`message_stop`) carrying `amazon-bedrock-invocationMetrics`;
//! Anthropic's `ping` is not sent. Errors and exception frames are Converse's.

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::answer::{Kind, Plan, Stop};
use crate::fault::{ErrorFault, ErrorKind};
use crate::wire::{Ctx, Frame, FrameRole, MODELS, WireError, frame};

/// The content type of a ConverseStream answer.
pub(crate) const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// The Bedrock Runtime call a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// The (decoded) model id.
    pub model: String,
    pub stream: bool,
    /// InvokeModel (a Messages body) rather than Converse.
    pub invoke: bool,
}

/// The Converse or InvokeModel call a path names.
pub(crate) fn route(path: &str) -> Option<Call> {
    let rest = path.strip_prefix("/v1").unwrap_or(path).strip_prefix("/model/")?;
    let (model, action) = rest.rsplit_once('/')?;
    let (stream, invoke) = match action {
        "converse" => (false, false),
        "converse-stream" => (true, false),
        "invoke" => (false, true),
        "invoke-with-response-stream" => (true, true),
        _ => return None,
    };
    Some(Call { model: percent_decode(model), stream, invoke })
}

/// An InvokeModel body without `anthropic_version`, refused as Bedrock refuses it.
pub(crate) fn missing_anthropic_version() -> WireError {
    WireError {
        status: 400,
        body: json!({"message": "Malformed input request: #: required key [anthropic_version] not found, please reformat your input and try again."}),
        headers: vec![("x-amzn-errortype", error_type_header("ValidationException"))],
    }
}

/// An InvokeModel (Messages) body in the shape the simulator's request reader takes: `model`
/// and `stream` from the path; `None` when it has no `anthropic_version`.
pub(crate) fn translate_invoke(body: &Value, call: &Call) -> Option<Value> {
    let mut out = body.as_object()?.clone();
    out.get("anthropic_version")?;
    out.insert("model".into(), json!(call.model));
    out.insert("stream".into(), json!(call.stream));
    Some(Value::Object(out))
}

/// The id of an InvokeModel answer, from a unique number.
pub(crate) fn invoke_response_id(unique: u64) -> String {
    format!("msg_bdrk_sim{unique:016x}")
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the request carries a SigV4 signature (its validity is not checked: the simulator
/// has no secret to check it with).
pub(crate) fn signed(authorization: Option<&str>) -> bool {
    authorization.is_some_and(|value| value.starts_with("AWS4-HMAC-SHA256 Credential="))
}

/// A Converse body in the shape the simulator's request reader takes.
pub(crate) fn translate(body: &Value, model: &str, stream: bool) -> Value {
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    out.insert("stream".into(), json!(stream));
    if let Some(max) = body.pointer("/inferenceConfig/maxTokens") {
        out.insert("max_tokens".into(), max.clone());
    }
    if let Some(system) = body.get("system").and_then(Value::as_array) {
        let text: Vec<&str> =
            system.iter().filter_map(|block| block.get("text").and_then(Value::as_str)).collect();
        out.insert("system".into(), json!(text.join("\n")));
    }
    let messages: Vec<Value> = body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|message| {
            let blocks: Vec<Value> = message
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(translate_block)
                .collect();
            json!({"role": message.get("role").cloned().unwrap_or(Value::Null), "content": blocks})
        })
        .collect();
    out.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = body.pointer("/toolConfig/tools").and_then(Value::as_array) {
        let tools: Vec<Value> = tools
            .iter()
            .filter_map(|tool| tool.get("toolSpec"))
            .map(|spec| {
                json!({
                    "name": spec.get("name").cloned().unwrap_or(Value::Null),
                    "description": spec.get("description").cloned().unwrap_or(Value::Null),
                    "input_schema": spec.pointer("/inputSchema/json").cloned().unwrap_or(json!({})),
                })
            })
            .collect();
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = body.pointer("/toolConfig/toolChoice") {
        let choice = if choice.get("any").is_some() {
            json!({"type": "any"})
        } else if let Some(name) = choice.pointer("/tool/name") {
            json!({"type": "tool", "name": name})
        } else {
            json!({"type": "auto"})
        };
        out.insert("tool_choice".into(), choice);
    }
    // Structured outputs: the schema arrives as a JSON string.
    if let Some(format) = body.pointer("/outputConfig/textFormat") {
        let schema = format
            .pointer("/structure/jsonSchema/schema")
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str::<Value>(text).ok());
        if let Some(schema) = schema {
            out.insert(
                "output_config".into(),
                json!({"format": {"type": "json_schema", "schema": schema}}),
            );
        }
    }
    Value::Object(out)
}

fn translate_block(block: &Value) -> Value {
    if let Some(text) = block.get("text") {
        json!({"type": "text", "text": text})
    } else if let Some(tool) = block.get("toolUse") {
        json!({
            "type": "tool_use",
            "id": tool.get("toolUseId").cloned().unwrap_or(Value::Null),
            "name": tool.get("name").cloned().unwrap_or(Value::Null),
            "input": tool.get("input").cloned().unwrap_or(json!({})),
        })
    } else if let Some(result) = block.get("toolResult") {
        let text: Vec<String> = result
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|part| match part.get("text").and_then(Value::as_str) {
                Some(text) => text.to_owned(),
                None => part.get("json").map(Value::to_string).unwrap_or_default(),
            })
            .collect();
        json!({
            "type": "tool_result",
            "tool_use_id": result.get("toolUseId").cloned().unwrap_or(Value::Null),
            "content": text.concat(),
        })
    } else {
        json!({"type": "text", "text": ""})
    }
}

fn stop_reason(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn => "end_turn",
        Stop::MaxTokens => "max_tokens",
        Stop::ToolUse => "tool_use",
        // Converse has no refusal reason: a declined answer is filtered content.
        Stop::Refusal => "content_filtered",
    }
}

fn tool_use_id(id_suffix: &str) -> String {
    format!("tooluse_sim{id_suffix}")
}

fn usage(plan: &Plan) -> Value {
    let (input, output) = (plan.input_tokens, plan.output_tokens());
    json!({"inputTokens": input, "outputTokens": output, "totalTokens": input.saturating_add(output)})
}

/// The non-streaming Converse body (or InvokeModel's Messages body).
pub(crate) fn body(ctx: &Ctx<'_>, plan: &Plan) -> Value {
    if ctx.invoke {
        return crate::anthropic::body(ctx, plan);
    }
    let content = plan.content();
    let block = match &plan.kind {
        Kind::Text | Kind::Refusal => json!({"text": content}),
        Kind::ToolCall { id_suffix, name } => {
            let input: Value = serde_json::from_str(&content)
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            json!({"toolUse": {"toolUseId": tool_use_id(id_suffix), "name": name, "input": input}})
        }
    };
    json!({
        "output": {"message": {"role": "assistant", "content": [block]}},
        "stopReason": stop_reason(plan.stop),
        "usage": usage(plan),
        "metrics": {"latencyMs": 1}
    })
}

/// One event-stream frame. Writing a message to a `Vec` fails only for oversized headers,
/// which these are not; an empty frame would then fail the client's CRC check, loudly.
fn encode(headers: Vec<Header>, payload: &Value) -> Bytes {
    let message = Message::new_from_parts(headers, payload.to_string().into_bytes());
    let mut out = Vec::new();
    if write_message_to(&message, &mut out).is_err() {
        out.clear();
    }
    Bytes::from(out)
}

fn string(value: &'static str) -> HeaderValue {
    HeaderValue::String(value.into())
}

fn event(event_type: &'static str, payload: &Value) -> Bytes {
    encode(
        vec![
            Header::new(":event-type", string(event_type)),
            Header::new(":content-type", string("application/json")),
            Header::new(":message-type", string("event")),
        ],
        payload,
    )
}

/// One InvokeModelWithResponseStream chunk carrying `event`, padded as Bedrock pads them.
fn chunk(anthropic_event: &Value) -> Bytes {
    let encoded = base64::engine::general_purpose::STANDARD.encode(anthropic_event.to_string());
    let padding =
        &"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[..encoded.len() % 37];
    event("chunk", &json!({"bytes": encoded, "p": padding}))
}

/// The InvokeModelWithResponseStream frames: Anthropic's events (without `ping`), each in a
/// `chunk`, the invocation metrics in the last.
fn invoke_frames(ctx: &Ctx<'_>, plan: &Plan) -> Vec<Frame> {
    crate::anthropic::frames(ctx, plan)
        .into_iter()
        .filter_map(|frame| {
            let text = std::str::from_utf8(&frame.bytes).ok()?;
            let data = text.lines().find_map(|line| line.strip_prefix("data: "))?;
            let mut event: Value = serde_json::from_str(data).ok()?;
            match event.get("type").and_then(Value::as_str) {
                Some("ping") => return None,
                Some("message_stop") => {
                    let (input, output) = (plan.input_tokens, plan.output_tokens());
                    event["amazon-bedrock-invocationMetrics"] = json!({
                        "inputTokenCount": input,
                        "outputTokenCount": output,
                        "invocationLatency": 1,
                        "firstByteLatency": 1
                    });
                }
                _ => {}
            }
            Some(crate::wire::frame(chunk(&event), frame.role))
        })
        .collect()
}

/// The ConverseStream frames (or InvokeModelWithResponseStream's).
pub(crate) fn frames(ctx: &Ctx<'_>, plan: &Plan) -> Vec<Frame> {
    if ctx.invoke {
        return invoke_frames(ctx, plan);
    }
    let mut frames = vec![frame(
        event("messageStart", &json!({"p": "abcdefgh", "role": "assistant"})),
        FrameRole::Meta,
    )];
    if let Kind::ToolCall { id_suffix, name } = &plan.kind {
        let start = json!({
            "contentBlockIndex": 0,
            "start": {"toolUse": {"toolUseId": tool_use_id(id_suffix), "name": name}}
        });
        frames.push(frame(event("contentBlockStart", &start), FrameRole::ContentStart));
    }
    for token in &plan.tokens {
        let delta = match &plan.kind {
            Kind::Text | Kind::Refusal => json!({"text": token}),
            Kind::ToolCall { .. } => json!({"toolUse": {"input": token}}),
        };
        let payload = json!({"contentBlockIndex": 0, "delta": delta});
        frames.push(frame(event("contentBlockDelta", &payload), FrameRole::Token));
    }
    frames
        .push(frame(event("contentBlockStop", &json!({"contentBlockIndex": 0})), FrameRole::Tail));
    let stop = json!({"stopReason": stop_reason(plan.stop)});
    frames.push(frame(event("messageStop", &stop), FrameRole::Tail));
    let metadata = json!({"usage": usage(plan), "metrics": {"latencyMs": 1}});
    frames.push(frame(event("metadata", &metadata), FrameRole::Terminator));
    frames
}

/// A content delta whose message CRC is wrong (one payload byte changed after encoding).
pub(crate) fn malformed_frame(ctx: &Ctx<'_>) -> Bytes {
    let good = if ctx.invoke {
        chunk(
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "w"}}),
        )
    } else {
        event("contentBlockDelta", &json!({"contentBlockIndex": 0, "delta": {"text": "w"}}))
    };
    let mut bytes = good.to_vec();
    let at = bytes.len().saturating_sub(8);
    if let Some(byte) = bytes.get_mut(at) {
        *byte ^= 0x01;
    }
    Bytes::from(bytes)
}

/// The in-stream throttling exception.
pub(crate) fn stream_error_frame() -> Bytes {
    encode(
        vec![
            Header::new(":exception-type", string("throttlingException")),
            Header::new(":content-type", string("application/json")),
            Header::new(":message-type", string("exception")),
        ],
        &json!({"message": "Too many tokens, please wait before trying again."}),
    )
}

pub(crate) fn models() -> Value {
    let summaries: Vec<Value> =
        MODELS.iter().map(|id| json!({"modelId": id, "modelName": id})).collect();
    json!({"modelSummaries": summaries})
}

/// The `x-amzn-ErrorType` header value for an error type.
fn error_type_header(error_type: &str) -> String {
    format!("{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/")
}

/// A request without a SigV4 signature, as Bedrock refuses it.
pub(crate) fn missing_signature() -> WireError {
    WireError {
        status: 403,
        body: json!({"message": "Missing Authentication Token"}),
        headers: vec![(
            "x-amzn-errortype",
            error_type_header("MissingAuthenticationTokenException"),
        )],
    }
}

/// The error body, status and type Bedrock sends for this fault.
pub(crate) fn error(fault: &ErrorFault, model: &str) -> WireError {
    let (status, error_type, message): (u16, &str, String) = match fault.kind {
        ErrorKind::RateLimit => (
            429,
            "ThrottlingException",
            "Too many requests, please wait before trying again.".to_owned(),
        ),
        ErrorKind::InsufficientQuota | ErrorKind::SpendCap => (
            400,
            "ServiceQuotaExceededException",
            "Your request exceeded the quota for this account.".to_owned(),
        ),
        ErrorKind::Overloaded | ErrorKind::Unavailable => (
            503,
            "ServiceUnavailableException",
            "Bedrock is unable to process your request.".to_owned(),
        ),
        ErrorKind::Internal => (
            500,
            "InternalServerException",
            "The system encountered an unexpected error during processing. Try your request again."
                .to_owned(),
        ),
        ErrorKind::Timeout => (
            408,
            "ModelTimeoutException",
            "The request took too long to process. Processing time exceeded the model timeout length."
                .to_owned(),
        ),
        ErrorKind::Conflict => (
            429,
            "ModelNotReadyException",
            "Model is not ready for inference. Wait and try your request again.".to_owned(),
        ),
        ErrorKind::ContextLength => {
            (400, "ValidationException", "Input is too long for requested model.".to_owned())
        }
        ErrorKind::ContentPolicy => {
            let reason = fault.reason.as_deref().unwrap_or("sim_policy");
            (
                400,
                "ValidationException",
                format!("Output blocked by content filtering policy (reason: {reason})"),
            )
        }
        ErrorKind::Unauthorized => (
            403,
            "ExpiredTokenException",
            "The security token included in the request is expired".to_owned(),
        ),
        ErrorKind::Forbidden => (
            403,
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.".to_owned(),
        ),
        ErrorKind::NotFound => (
            404,
            "ResourceNotFoundException",
            format!("Could not resolve the foundation model from the provided model identifier: {model}"),
        ),
        ErrorKind::TooLarge => (
            413,
            "ValidationException",
            "Request exceeds the maximum allowed number of bytes.".to_owned(),
        ),
        ErrorKind::PrefillRejected | ErrorKind::BadRequest => (
            400,
            "ValidationException",
            fault.reason.clone().unwrap_or_else(|| "Bad request".to_owned()),
        ),
    };
    WireError {
        status,
        body: json!({"message": message}),
        headers: vec![("x-amzn-errortype", error_type_header(error_type))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converse_paths_name_the_model_and_the_mode() {
        let call =
            |model: &str, stream, invoke| Some(Call { model: model.to_owned(), stream, invoke });
        assert_eq!(
            route("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"),
            call("anthropic.claude-3-haiku-20240307-v1:0", true, false)
        );
        assert_eq!(route("/v1/model/sim-small/converse"), call("sim-small", false, false));
        assert_eq!(route("/model/x/invoke"), call("x", false, true));
        assert_eq!(route("/model/x/invoke-with-response-stream"), call("x", true, true));
        assert_eq!(route("/model/x/invoke-stream"), None);
        assert!(signed(Some(
            "AWS4-HMAC-SHA256 Credential=AKID/20250101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00"
        )));
        assert!(!signed(Some("Bearer x")));
    }
}
