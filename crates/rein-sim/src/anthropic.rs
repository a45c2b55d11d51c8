//! The Anthropic Messages wire format: message bodies, the named-event SSE stream
//! (`message_start`, `content_block_start/delta/stop` with `text_delta` / `input_json_delta`,
//! a `ping`, `message_delta` with the stop reason and usage, `message_stop`), the in-stream
//! `error` event, and error bodies `{"type":"error","error":{..},"request_id":..}` worded as
//! the API words them.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::answer::{Kind, Plan, Stop};
use crate::fault::{ErrorFault, ErrorKind};
use crate::wire::{Ctx, Frame, FrameRole, MODELS, WireError, frame, sse_event};

/// What a model that takes no assistant prefill says to one.
pub(crate) const PREFILL_MESSAGE: &str = "This model does not support assistant message prefill. \
     The conversation must end with a user message.";

fn stop_reason(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn => "end_turn",
        Stop::MaxTokens => "max_tokens",
        Stop::ToolUse => "tool_use",
        Stop::Refusal => "refusal",
    }
}

fn tool_use_id(id_suffix: &str) -> String {
    format!("toolu_sim{id_suffix}")
}

fn full_usage(input: u32, output: u32) -> Value {
    json!({
        "input_tokens": input,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output
    })
}

/// The non-streaming message body.
pub(crate) fn body(ctx: &Ctx<'_>, plan: &Plan) -> Value {
    let content = plan.content();
    let block = match &plan.kind {
        Kind::Text | Kind::Refusal => json!({"type": "text", "text": content}),
        Kind::ToolCall { id_suffix, name } => {
            // A tool input cut short by max_tokens is not an object; the API gives `{}`.
            let input: Value = serde_json::from_str(&content)
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            json!({"type": "tool_use", "id": tool_use_id(id_suffix), "name": name, "input": input})
        }
    };
    json!({
        "id": ctx.response_id,
        "type": "message",
        "role": "assistant",
        "model": ctx.request.model,
        "content": [block],
        "stop_reason": stop_reason(plan.stop),
        "stop_sequence": null,
        "usage": full_usage(plan.input_tokens, plan.output_tokens())
    })
}

/// The named-event stream.
pub(crate) fn frames(ctx: &Ctx<'_>, plan: &Plan) -> Vec<Frame> {
    let mut frames = Vec::new();
    let start = json!({
        "type": "message_start",
        "message": {
            "id": ctx.response_id,
            "type": "message",
            "role": "assistant",
            "model": ctx.request.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": full_usage(plan.input_tokens, 1)
        }
    });
    frames.push(frame(sse_event("message_start", &start), FrameRole::Meta));
    let (block, block_role) = match &plan.kind {
        Kind::Text | Kind::Refusal => (json!({"type": "text", "text": ""}), FrameRole::Meta),
        Kind::ToolCall { id_suffix, name } => (
            json!({"type": "tool_use", "id": tool_use_id(id_suffix), "name": name, "input": {}}),
            FrameRole::ContentStart,
        ),
    };
    let block_start = json!({"type": "content_block_start", "index": 0, "content_block": block});
    frames.push(frame(sse_event("content_block_start", &block_start), block_role));
    frames.push(frame(sse_event("ping", &json!({"type": "ping"})), FrameRole::Meta));
    for token in &plan.tokens {
        let delta = match &plan.kind {
            Kind::Text | Kind::Refusal => json!({"type": "text_delta", "text": token}),
            Kind::ToolCall { .. } => json!({"type": "input_json_delta", "partial_json": token}),
        };
        let event = json!({"type": "content_block_delta", "index": 0, "delta": delta});
        frames.push(frame(sse_event("content_block_delta", &event), FrameRole::Token));
    }
    let stop = json!({"type": "content_block_stop", "index": 0});
    frames.push(frame(sse_event("content_block_stop", &stop), FrameRole::Tail));
    let delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(plan.stop), "stop_sequence": null},
        "usage": {"output_tokens": plan.output_tokens()}
    });
    frames.push(frame(sse_event("message_delta", &delta), FrameRole::Tail));
    let end = json!({"type": "message_stop"});
    frames.push(frame(sse_event("message_stop", &end), FrameRole::Terminator));
    frames
}

pub(crate) fn malformed_frame() -> Bytes {
    Bytes::from_static(
        b"event: content_block_delta\n\
          data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"w\n\n",
    )
}

pub(crate) fn stream_error_frame() -> Bytes {
    let error =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    sse_event("error", &error)
}

pub(crate) fn models() -> Value {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|id| {
            json!({
                "type": "model",
                "id": id,
                "display_name": id,
                "created_at": "2025-01-01T00:00:00Z"
            })
        })
        .collect();
    json!({
        "data": data,
        "has_more": false,
        "first_id": MODELS.first(),
        "last_id": MODELS.last()
    })
}

/// The error body and status Anthropic sends for this fault.
pub(crate) fn error(fault: &ErrorFault, model: &str, request_id: &str, unix_s: u64) -> WireError {
    let mut headers = Vec::new();
    let mut status = fault.kind.default_status();
    let (error_type, message): (&str, String) = match fault.kind {
        ErrorKind::RateLimit => {
            headers.extend([
                ("anthropic-ratelimit-requests-limit", "50".to_owned()),
                ("anthropic-ratelimit-requests-remaining", "0".to_owned()),
            ]);
            (
                "rate_limit_error",
                "This request would exceed the rate limit for your organization of 50 requests \
                 per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. \
                 You can see the response headers for current usage. Please reduce the prompt \
                 length or the maximum tokens requested, or try again later."
                    .to_owned(),
            )
        }
        ErrorKind::InsufficientQuota => {
            status = 400;
            (
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans \
                 & Billing to upgrade or purchase credits."
                    .to_owned(),
            )
        }
        ErrorKind::SpendCap => {
            let (year, month) = next_month(unix_s);
            (
                "rate_limit_error",
                format!(
                    "You have reached your specified workspace API usage limits. You will \
                     regain access on {year:04}-{month:02}-01 at 00:00 UTC."
                ),
            )
        }
        ErrorKind::Overloaded => ("overloaded_error", "Overloaded".to_owned()),
        ErrorKind::Unavailable => ("api_error", "Service Unavailable".to_owned()),
        ErrorKind::Internal => ("api_error", "Internal server error".to_owned()),
        ErrorKind::Timeout => ("timeout_error", "Request timeout".to_owned()),
        ErrorKind::Conflict => (
            "conflict_error",
            "The request conflicts with the current state of the resource.".to_owned(),
        ),
        ErrorKind::ContextLength => {
            let max = fault.max_tokens.unwrap_or(200_000);
            let tokens = fault.tokens.unwrap_or(210_000);
            (
                "invalid_request_error",
                format!("prompt is too long: {tokens} tokens > {max} maximum"),
            )
        }
        ErrorKind::ContentPolicy => {
            let reason = fault.reason.as_deref().unwrap_or("sim_policy");
            (
                "invalid_request_error",
                format!("Output blocked by content filtering policy (reason: {reason})"),
            )
        }
        ErrorKind::Unauthorized => ("authentication_error", "invalid x-api-key".to_owned()),
        ErrorKind::Forbidden => (
            "permission_error",
            "Your API key does not have permission to use the specified resource.".to_owned(),
        ),
        ErrorKind::NotFound => ("not_found_error", format!("model: {model}")),
        ErrorKind::TooLarge => {
            ("request_too_large", "Request exceeds the maximum allowed number of bytes.".to_owned())
        }
        ErrorKind::PrefillRejected => ("invalid_request_error", PREFILL_MESSAGE.to_owned()),
        ErrorKind::BadRequest => (
            "invalid_request_error",
            fault.reason.clone().unwrap_or_else(|| "Bad request".to_owned()),
        ),
    };
    WireError {
        status,
        body: json!({
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": request_id
        }),
        headers,
    }
}

/// The year and month after the one containing `unix_s` (UTC).
fn next_month(unix_s: u64) -> (i64, u32) {
    let (year, month, _) = civil_from_days((unix_s / 86_400) as i64);
    if month == 12 { (year + 1, 1) } else { (year, month + 1) }
}

/// Howard Hinnant's days-to-civil conversion.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(next_month(1_735_603_200), (2025, 1)); // 2024-12-31
    }
}
