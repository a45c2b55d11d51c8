//! The Gemini API wire format: `generateContent` bodies (`candidates[0].content.parts`,
//! `finishReason`, `usageMetadata`, `modelVersion`, `responseId`), the
//! `streamGenerateContent?alt=sse` stream (each `data:` a whole response chunk, the last one
//! carrying `finishReason` and the usage, and no terminator after it), the in-stream
//! `{"error"}` record, and Google's error bodies `{"error":{"code","message","status",
//! "details"}}`, with a wait asked for as a `RetryInfo` detail rather than a header. A request
//! (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent`) is read by rewriting it
//! as the Chat Completions body the rest of the simulator reads ([`chat_body`]).

use bytes::Bytes;
use serde_json::{Value, json};

use crate::answer::{Kind, Plan, Stop};
use crate::fault::{ErrorFault, ErrorKind};
use crate::wire::{Ctx, Frame, FrameRole, MODELS, WireError, frame, sse_data};

fn finish_reason(stop: Stop) -> &'static str {
    match stop {
        // A turn that calls a function ends with `STOP` too.
        Stop::EndTurn | Stop::ToolUse => "STOP",
        Stop::MaxTokens => "MAX_TOKENS",
        Stop::Refusal => "SAFETY",
    }
}

fn usage(input: u32, output: u32) -> Value {
    json!({
        "promptTokenCount": input,
        "candidatesTokenCount": output,
        "totalTokenCount": input + output
    })
}

fn chunk(ctx: &Ctx<'_>, parts: Vec<Value>, tail: Option<(&Plan, Stop)>) -> Value {
    let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    let mut out = json!({
        "candidates": [],
        "modelVersion": ctx.request.model,
        "responseId": ctx.response_id
    });
    if let Some((plan, stop)) = tail {
        candidate["finishReason"] = json!(finish_reason(stop));
        out["usageMetadata"] = usage(plan.input_tokens, plan.output_tokens());
    }
    out["candidates"] = json!([candidate]);
    out
}

/// The non-streaming `generateContent` body.
pub(crate) fn body(ctx: &Ctx<'_>, plan: &Plan) -> Value {
    let content = plan.content();
    let part = match &plan.kind {
        Kind::Text | Kind::Refusal => json!({"text": content}),
        Kind::ToolCall { name, .. } => {
            let args: Value = serde_json::from_str(&content)
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            json!({"functionCall": {"name": name, "args": args}})
        }
    };
    chunk(ctx, vec![part], Some((plan, plan.stop)))
}

/// The stream: one chunk per token, then the closing chunk with the reason and the usage. A
/// function call arrives whole, so its stream is the call's chunk and the closing one.
pub(crate) fn frames(ctx: &Ctx<'_>, plan: &Plan) -> Vec<Frame> {
    let mut frames = Vec::new();
    match &plan.kind {
        Kind::Text | Kind::Refusal => {
            for token in &plan.tokens {
                let value = chunk(ctx, vec![json!({"text": token})], None);
                frames.push(frame(sse_data(&value), FrameRole::Token));
            }
        }
        Kind::ToolCall { .. } => {
            let value = body(ctx, plan);
            let part = value["candidates"][0]["content"]["parts"].clone();
            let call = chunk(ctx, part.as_array().cloned().unwrap_or_default(), None);
            frames.push(frame(sse_data(&call), FrameRole::Token));
        }
    }
    let end = chunk(ctx, vec![json!({"text": ""})], Some((plan, plan.stop)));
    // No terminator follows: this chunk ends the stream, as the tail of its content.
    frames.push(frame(sse_data(&end), FrameRole::Tail));
    frames
}

pub(crate) fn malformed_frame(ctx: &Ctx<'_>) -> Bytes {
    Bytes::from(format!(
        "data: {{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": \"w\n\n\"responseId\": \"{}\"",
        ctx.response_id
    ))
}

pub(crate) fn stream_error_frame() -> Bytes {
    let error = json!({"error": {
        "code": 503,
        "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE"
    }});
    sse_data(&error)
}

pub(crate) fn models() -> Value {
    let models: Vec<Value> = MODELS
        .iter()
        .map(|id| {
            json!({
                "name": format!("models/{id}"),
                "displayName": id,
                "supportedGenerationMethods": ["generateContent", "countTokens"]
            })
        })
        .collect();
    json!({"models": models})
}

/// The error body and status Google sends for this fault. A wait (`retry_after`) becomes a
/// `RetryInfo` detail, which is how Google asks for one.
pub(crate) fn error(fault: &ErrorFault, model: &str) -> WireError {
    let mut status = fault.kind.default_status();
    let mut details = Vec::new();
    let (rpc, message): (&str, String) = match fault.kind {
        ErrorKind::RateLimit => {
            status = 429;
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{
                    "quotaMetric": "generativelanguage.googleapis.com/generate_content_paid_tier_requests",
                    "quotaId": "GenerateRequestsPerMinutePerProjectPerModel",
                    "quotaDimensions": {"model": model, "location": "global"},
                    "quotaValue": "60"
                }]
            }));
            (
                "RESOURCE_EXHAUSTED",
                "You exceeded your current quota, please check your plan and billing details. \
                 For more information on this error, head to: \
                 https://ai.google.dev/gemini-api/docs/rate-limits."
                    .to_owned(),
            )
        }
        ErrorKind::InsufficientQuota | ErrorKind::SpendCap => {
            status = 429;
            (
                "RESOURCE_EXHAUSTED",
                "Your project has exceeded its monthly spending cap. Please go to AI Studio at \
                 https://ai.studio/spend to manage your project spend cap."
                    .to_owned(),
            )
        }
        ErrorKind::Overloaded | ErrorKind::Unavailable => {
            status = 503;
            ("UNAVAILABLE", "The model is overloaded. Please try again later.".to_owned())
        }
        ErrorKind::Internal => (
            "INTERNAL",
            "An internal error has occurred. Please retry or report in \
             https://developers.generativeai.google/guide/troubleshooting"
                .to_owned(),
        ),
        ErrorKind::Timeout => {
            status = 504;
            ("DEADLINE_EXCEEDED", "Deadline expired before operation could complete.".to_owned())
        }
        ErrorKind::Conflict => ("ABORTED", "The operation was aborted.".to_owned()),
        ErrorKind::ContextLength => {
            status = 400;
            let max = fault.max_tokens.unwrap_or(1_048_576);
            let tokens = fault.tokens.unwrap_or(1_200_000);
            (
                "INVALID_ARGUMENT",
                format!(
                    "The input token count ({tokens}) exceeds the maximum number of tokens \
                     allowed ({max})."
                ),
            )
        }
        ErrorKind::ContentPolicy => {
            status = 400;
            let reason = fault.reason.as_deref().unwrap_or("sim_policy");
            ("INVALID_ARGUMENT", format!("Request blocked by content policy (reason: {reason})"))
        }
        ErrorKind::Unauthorized => {
            status = 400;
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"}
            }));
            ("INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.".to_owned())
        }
        ErrorKind::Forbidden => (
            "PERMISSION_DENIED",
            "You do not have permission to access the requested resource.".to_owned(),
        ),
        ErrorKind::NotFound => (
            "NOT_FOUND",
            format!(
                "models/{model} is not found for API version v1beta, or is not supported for \
                 generateContent."
            ),
        ),
        ErrorKind::TooLarge => {
            ("INVALID_ARGUMENT", "Request payload size exceeds the limit.".to_owned())
        }
        ErrorKind::PrefillRejected | ErrorKind::BadRequest => (
            "INVALID_ARGUMENT",
            fault
                .reason
                .clone()
                .unwrap_or_else(|| "Request contains an invalid argument.".to_owned()),
        ),
    };
    if let Some(seconds) = &fault.retry_after {
        details.push(json!({
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{seconds}s")
        }));
    }
    let mut error = json!({"code": status, "message": message, "status": rpc});
    if !details.is_empty() {
        error["details"] = Value::Array(details);
    }
    WireError { status, body: json!({"error": error}), headers: Vec::new() }
}

/// The model and whether to stream, from a `generateContent` path:
/// `/v1beta/models/{model}:generateContent` or `:streamGenerateContent` (`/v1/...` too, and
/// Vertex AI's `/v1/projects/{p}/locations/{l}/publishers/google/models/...`). The
/// model is percent-decoded, so `sim:` fault specs travel in it as they do in a body.
pub(crate) fn method_of(path: &str) -> Option<(String, bool)> {
    if let Some(("google", model, method)) = crate::vertex::route(path) {
        let stream = match method {
            "generateContent" => false,
            "streamGenerateContent" => true,
            _ => return None,
        };
        return Some((model, stream));
    }
    let rest = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, method) = rest.rsplit_once(':')?;
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        _ => return None,
    };
    Some((percent_decoded(model), stream))
}

pub(crate) fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes.get(at + 1..at + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[at], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `generateContent` request rewritten as the Chat Completions body the simulator reads
/// (model and streaming from the path), so a Gemini conversation gets the answer the same
/// conversation gets on the other endpoints: `systemInstruction` → a system message,
/// `contents` (`user`/`model`) → messages, `functionCall` parts → tool calls,
/// `functionResponse` parts → tool messages, `functionDeclarations` → tools, `toolConfig` →
/// the tool choice, `generationConfig` → the ceiling and the output format.
pub(crate) fn chat_body(path: &str, body: &Value) -> Value {
    let (model, stream) = method_of(path).unwrap_or_default();
    let texts = |parts: Option<&Value>| -> String {
        let texts: Vec<&str> = parts
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        texts.join("\n")
    };
    let mut messages = Vec::new();
    if let Some(system) = body.get("systemInstruction") {
        messages.push(json!({"role": "system", "content": texts(system.get("parts"))}));
    }
    for content in body.get("contents").and_then(Value::as_array).into_iter().flatten() {
        let parts = content.get("parts");
        let role = match content.get("role").and_then(Value::as_str) {
            Some("model") => "assistant",
            _ => "user",
        };
        let mut calls = Vec::new();
        for (index, part) in parts.and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Some(call) = part.get("functionCall") {
                let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({
                    "id": format!("call_{index}"),
                    "type": "function",
                    "function": {"name": call.get("name"), "arguments": args.to_string()}
                }));
            }
            if let Some(result) = part.get("functionResponse") {
                let response = result.get("response").cloned().unwrap_or(Value::Null);
                messages.push(json!({"role": "tool", "content": response.to_string()}));
            }
        }
        let text = texts(parts);
        if !calls.is_empty() {
            messages.push(json!({"role": role, "content": text, "tool_calls": calls}));
        } else if !text.is_empty() || parts.and_then(Value::as_array).is_some_and(Vec::is_empty) {
            messages.push(json!({"role": role, "content": text}));
        }
    }
    let mut chat = json!({"model": model, "stream": stream, "messages": messages});
    let declarations = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|tool| tool.get("functionDeclarations").and_then(Value::as_array))
        .flatten();
    let tools: Vec<Value> = declarations
        .map(|d| {
            let schema = d.get("parametersJsonSchema").or_else(|| d.get("parameters"));
            json!({"type": "function", "function": {"name": d.get("name"), "parameters": schema}})
        })
        .collect();
    if !tools.is_empty() {
        chat["tools"] = Value::Array(tools);
    }
    if let Some(config) = body.get("toolConfig").and_then(|c| c.get("functionCallingConfig")) {
        let allowed = config.get("allowedFunctionNames").and_then(Value::as_array);
        chat["tool_choice"] = match config.get("mode").and_then(Value::as_str) {
            Some("ANY") => match allowed.filter(|names| names.len() == 1) {
                Some(names) => json!({"type": "function", "function": {"name": names.first()}}),
                None => json!("required"),
            },
            Some("NONE") => json!("none"),
            _ => json!("auto"),
        };
    }
    let generation = body.get("generationConfig").unwrap_or(&Value::Null);
    if let Some(max) = generation.get("maxOutputTokens") {
        chat["max_tokens"] = max.clone();
    }
    if generation.get("responseMimeType").and_then(Value::as_str) == Some("application/json") {
        let schema =
            generation.get("responseJsonSchema").or_else(|| generation.get("responseSchema"));
        chat["response_format"] = match schema {
            Some(schema) => {
                json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
            }
            None => json!({"type": "json_object"}),
        };
    }
    chat
}
