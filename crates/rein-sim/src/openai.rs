//! The OpenAI Chat Completions wire format: completion bodies, `chat.completion.chunk`
//! streams (with the `choices: []` usage chunk and `data: [DONE]`), logprobs, tool calls,
//! refusals, and error bodies `{"error":{"message","type","param","code"}}` worded as the
//! API words them.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::answer::{Kind, Plan, Stop};
use crate::fault::{ErrorFault, ErrorKind};
use crate::wire::{Ctx, Frame, FrameRole, MODELS, WireError, frame, sse_data};

const FINGERPRINT: &str = "fp_sim";

fn finish_reason(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn | Stop::Refusal => "stop",
        Stop::MaxTokens => "length",
        Stop::ToolUse => "tool_calls",
    }
}

fn usage(plan: &Plan) -> Value {
    let (input, output) = (plan.input_tokens, plan.output_tokens());
    json!({
        "prompt_tokens": input,
        "completion_tokens": output,
        "total_tokens": input.saturating_add(output),
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0
        }
    })
}

fn tool_call_id(id_suffix: &str) -> String {
    format!("call_sim{id_suffix}")
}

/// One logprobs entry for token `index`, with `top` alternatives (the token itself first).
fn logprob_entry(ctx: &Ctx<'_>, plan: &Plan, index: usize) -> Value {
    let token = plan.tokens.get(index).map(String::as_str).unwrap_or("");
    let logprob = plan.logprob(index);
    let top: Vec<Value> = (0..usize::from(ctx.request.top_logprobs))
        .map(|rank| {
            let (alt, lp) = if rank == 0 {
                (token.to_owned(), logprob)
            } else {
                (format!("alt{rank}"), logprob - rank as f64)
            };
            json!({"token": alt, "logprob": lp, "bytes": alt.as_bytes()})
        })
        .collect();
    json!({"token": token, "logprob": logprob, "bytes": token.as_bytes(), "top_logprobs": top})
}

fn wants_logprobs(ctx: &Ctx<'_>, plan: &Plan) -> bool {
    ctx.request.logprobs && matches!(plan.kind, Kind::Text)
}

/// The non-streaming `chat.completion` body.
pub(crate) fn body(ctx: &Ctx<'_>, plan: &Plan) -> Value {
    let content = plan.content();
    let message = match &plan.kind {
        Kind::Text => json!({
            "role": "assistant", "content": content, "refusal": null, "annotations": []
        }),
        Kind::Refusal => json!({
            "role": "assistant", "content": null, "refusal": content, "annotations": []
        }),
        Kind::ToolCall { id_suffix, name } => json!({
            "role": "assistant",
            "content": null,
            "refusal": null,
            "annotations": [],
            "tool_calls": [{
                "id": tool_call_id(id_suffix),
                "type": "function",
                "function": {"name": name, "arguments": content}
            }]
        }),
    };
    let logprobs = if wants_logprobs(ctx, plan) {
        let entries: Vec<Value> =
            (0..plan.tokens.len()).map(|i| logprob_entry(ctx, plan, i)).collect();
        json!({"content": entries, "refusal": null})
    } else {
        Value::Null
    };
    json!({
        "id": ctx.response_id,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.request.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": finish_reason(plan.stop)
        }],
        "usage": usage(plan),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT
    })
}

fn chunk(ctx: &Ctx<'_>, choices: Value, usage: Option<Value>) -> Value {
    let mut chunk = json!({
        "id": ctx.response_id,
        "object": "chat.completion.chunk",
        "created": ctx.created,
        "model": ctx.request.model,
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
        "choices": choices
    });
    // With include_usage every chunk carries `usage`: null until the last one.
    if ctx.request.include_usage {
        chunk["usage"] = usage.unwrap_or(Value::Null);
    }
    chunk
}

fn choice(delta: Value, logprobs: Value, finish_reason: Option<&str>) -> Value {
    json!([{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}])
}

/// The `chat.completion.chunk` stream.
pub(crate) fn frames(ctx: &Ctx<'_>, plan: &Plan) -> Vec<Frame> {
    let mut frames = Vec::new();
    let data = |value: Value| sse_data(&chunk(ctx, value, None));
    match &plan.kind {
        Kind::Text => {
            let delta = json!({"role": "assistant", "content": "", "refusal": null});
            frames.push(frame(data(choice(delta, Value::Null, None)), FrameRole::Meta));
        }
        Kind::Refusal => {
            let delta = json!({"role": "assistant", "content": null, "refusal": ""});
            frames.push(frame(data(choice(delta, Value::Null, None)), FrameRole::Meta));
        }
        Kind::ToolCall { id_suffix, name } => {
            let delta = json!({
                "role": "assistant",
                "content": null,
                "refusal": null,
                "tool_calls": [{
                    "index": 0,
                    "id": tool_call_id(id_suffix),
                    "type": "function",
                    "function": {"name": name, "arguments": ""}
                }]
            });
            frames.push(frame(data(choice(delta, Value::Null, None)), FrameRole::ContentStart));
        }
    }
    for (index, token) in plan.tokens.iter().enumerate() {
        let delta = match &plan.kind {
            Kind::Text => json!({"content": token}),
            Kind::Refusal => json!({"refusal": token}),
            Kind::ToolCall { .. } => {
                json!({"tool_calls": [{"index": 0, "function": {"arguments": token}}]})
            }
        };
        let logprobs = if wants_logprobs(ctx, plan) {
            json!({"content": [logprob_entry(ctx, plan, index)], "refusal": null})
        } else {
            Value::Null
        };
        frames.push(frame(data(choice(delta, logprobs, None)), FrameRole::Token));
    }
    let finish = choice(json!({}), Value::Null, Some(finish_reason(plan.stop)));
    frames.push(frame(data(finish), FrameRole::Tail));
    if ctx.request.include_usage {
        let last = chunk(ctx, json!([]), Some(usage(plan)));
        frames.push(frame(sse_data(&last), FrameRole::Tail));
    }
    frames.push(frame(Bytes::from_static(b"data: [DONE]\n\n"), FrameRole::Terminator));
    frames
}

pub(crate) fn malformed_frame(ctx: &Ctx<'_>) -> Bytes {
    Bytes::from(format!(
        "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\
         \"delta\":{{\"content\":\"w\n\n",
        ctx.response_id
    ))
}

pub(crate) fn stream_error_frame() -> Bytes {
    let error = json!({"error": {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": null,
        "code": null
    }});
    sse_data(&error)
}

pub(crate) fn models(unix_s: u64) -> Value {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": unix_s, "owned_by": "rein-sim"}))
        .collect();
    json!({"object": "list", "data": data})
}

/// The error body and status OpenAI sends for this fault.
pub(crate) fn error(fault: &ErrorFault, model: &str) -> WireError {
    let mut headers = Vec::new();
    let mut param = Value::Null;
    let (error_type, code, message): (&str, Option<&str>, String) = match fault.kind {
        ErrorKind::RateLimit => {
            headers.extend([
                ("x-ratelimit-limit-requests", "60".to_owned()),
                ("x-ratelimit-remaining-requests", "0".to_owned()),
                ("x-ratelimit-reset-requests", "1s".to_owned()),
            ]);
            let wait = fault.try_again.as_deref().unwrap_or("1s");
            (
                "requests",
                Some("rate_limit_exceeded"),
                format!(
                    "Rate limit reached for {model} in organization org-sim on requests per min \
                     (RPM): Limit 60, Used 60, Requested 1. Please try again in {wait}. Visit \
                     https://platform.openai.com/account/rate-limits to learn more."
                ),
            )
        }
        ErrorKind::InsufficientQuota => (
            "insufficient_quota",
            Some("insufficient_quota"),
            "You exceeded your current quota, please check your plan and billing details. For \
             more information on this error, read the docs: \
             https://platform.openai.com/docs/guides/error-codes/api-errors."
                .to_owned(),
        ),
        ErrorKind::SpendCap => (
            "invalid_request_error",
            Some("billing_hard_limit_reached"),
            "Billing hard limit has been reached".to_owned(),
        ),
        ErrorKind::Overloaded | ErrorKind::Unavailable => (
            "service_unavailable_error",
            Some("server_is_overloaded"),
            "The engine is currently overloaded, please try again later".to_owned(),
        ),
        ErrorKind::Internal => (
            "server_error",
            None,
            "The server had an error while processing your request. Sorry about that!".to_owned(),
        ),
        ErrorKind::Timeout => ("timeout_error", None, "Request timed out.".to_owned()),
        ErrorKind::Conflict => (
            "invalid_request_error",
            Some("conflict"),
            "The request conflicted with another request in progress. Please try again.".to_owned(),
        ),
        ErrorKind::ContextLength => {
            param = json!("messages");
            let max = fault.max_tokens.unwrap_or(128_000);
            let tokens = fault.tokens.unwrap_or(210_000);
            (
                "invalid_request_error",
                Some("context_length_exceeded"),
                format!(
                    "This model's maximum context length is {max} tokens. However, your \
                     messages resulted in {tokens} tokens. Please reduce the length of the \
                     messages."
                ),
            )
        }
        ErrorKind::ContentPolicy => {
            let reason = fault.reason.as_deref().unwrap_or("sim_policy");
            (
                "invalid_request_error",
                Some("content_policy_violation"),
                format!(
                    "Your request was rejected as a result of our safety system. Your prompt \
                     may contain text that is not allowed by our safety system. (reason: \
                     {reason})"
                ),
            )
        }
        ErrorKind::Unauthorized => (
            "invalid_request_error",
            Some("invalid_api_key"),
            "Incorrect API key provided: sk-sim****. You can find your API key at \
             https://platform.openai.com/account/api-keys."
                .to_owned(),
        ),
        ErrorKind::Forbidden => (
            "request_forbidden",
            Some("unsupported_country_region_territory"),
            "Country, region, or territory not supported".to_owned(),
        ),
        ErrorKind::NotFound => (
            "invalid_request_error",
            Some("model_not_found"),
            format!("The model `{model}` does not exist or you do not have access to it."),
        ),
        ErrorKind::TooLarge => (
            "invalid_request_error",
            Some("request_too_large"),
            "Request too large: the request body exceeds the maximum allowed size.".to_owned(),
        ),
        ErrorKind::PrefillRejected => {
            ("invalid_request_error", None, crate::anthropic::PREFILL_MESSAGE.to_owned())
        }
        ErrorKind::BadRequest => (
            "invalid_request_error",
            None,
            fault.reason.clone().unwrap_or_else(|| "Bad request".to_owned()),
        ),
    };
    WireError {
        status: fault.kind.default_status(),
        body: json!({"error": {
            "message": message, "type": error_type, "param": param, "code": code
        }}),
        headers,
    }
}
