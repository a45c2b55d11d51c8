//! The Gemini API wire format: `generateContent` bodies (`candidates[0].content.parts`,
//! `finishReason`, `usageMetadata`, `modelVersion`, `responseId`), the
//! `streamGenerateContent?alt=sse` stream (each `data:` a whole response chunk, the last one
//! carrying `finishReason` and the usage, and no terminator after it), the in-stream
//! `{"error"}` record, and Google's error bodies `{"error":{"code","message","status",
//! "details"}}`, with a wait asked for as a `RetryInfo` detail rather than a header.

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
