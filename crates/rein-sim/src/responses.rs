//! OpenAI's Responses API (`POST /v1/responses`): the `response` object of a non-streaming
//! answer (`output` items `message` with an `output_text` or `refusal` part, or
//! `function_call`; `status` `completed` or `incomplete` with `incomplete_details.reason`;
//! `usage`), the typed SSE stream (`response.created`, `response.output_item.added`,
//! `response.output_text.delta` / `response.refusal.delta` / `response.function_call_arguments.delta`
//! per token, the `.done` events, then `response.completed` or `response.incomplete`, which
//! close the stream: a stream without one is cut), and `response.failed` with
//! `error.code = server_error` as the in-stream error. Error statuses carry the Chat
//! Completions error bodies ([`crate::openai::error`]). A request is read by rewriting it as
//! the Chat Completions body the rest of the simulator reads ([`chat_body`]); a Chat
//! Completions body sent here is refused as the API refuses it.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::answer::{Kind, Plan, Stop};
use crate::wire::{Ctx, Frame, FrameRole, frame, sse_event};

/// The id of a response, from a unique number.
pub(crate) fn response_id(unique: u64) -> String {
    format!("resp_sim{unique:024x}")
}

/// The Chat Completions body a Responses API request stands for, or the API's complaint about
/// it.
pub(crate) fn chat_body(body: &Value) -> Result<Value, String> {
    let Some(obj) = body.as_object() else {
        return Err("the request body must be a JSON object".into());
    };
    for moved in ["messages", "response_format", "max_tokens", "max_completion_tokens"] {
        if obj.contains_key(moved) {
            return Err(format!(
                "Unsupported parameter: '{moved}'. In the Responses API, this parameter has moved."
            ));
        }
    }
    let mut out = Map::new();
    if let Some(model) = obj.get("model") {
        out.insert("model".into(), model.clone());
    }
    let mut messages: Vec<Value> = Vec::new();
    if let Some(instructions) = obj.get("instructions").and_then(Value::as_str) {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    match obj.get("input") {
        Some(Value::String(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            for item in items {
                input_item(item, &mut messages)?;
            }
        }
        Some(_) => return Err("Invalid type for 'input': expected a string or an array.".into()),
        None => return Err("Missing required parameter: 'input'.".into()),
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(Value::Array(tools)) = obj.get("tools") {
        let mut chat_tools = Vec::new();
        for (index, tool) in tools.iter().enumerate() {
            if tool.get("type").and_then(Value::as_str) != Some("function") {
                continue;
            }
            let Some(name) = tool.get("name") else {
                return Err(format!("Missing required parameter: 'tools[{index}].name'."));
            };
            let mut function = Map::new();
            function.insert("name".into(), name.clone());
            for key in ["description", "parameters"] {
                if let Some(value) = tool.get(key) {
                    function.insert(key.into(), value.clone());
                }
            }
            chat_tools.push(json!({"type": "function", "function": function}));
        }
        out.insert("tools".into(), Value::Array(chat_tools));
    }
    if let Some(choice) = obj.get("tool_choice") {
        out.insert("tool_choice".into(), choice.clone());
    }
    if let Some(format) = obj.get("text").and_then(|text| text.get("format")) {
        out.insert("response_format".into(), format.clone());
    }
    if let Some(max) = obj.get("max_output_tokens") {
        out.insert("max_tokens".into(), max.clone());
    }
    if let Some(stream) = obj.get("stream") {
        out.insert("stream".into(), stream.clone());
    }
    Ok(Value::Object(out))
}

/// Appends one `input` item as Chat Completions messages. Function calls join the assistant
/// turn before them, as Chat Completions carries them.
fn input_item(item: &Value, messages: &mut Vec<Value>) -> Result<(), String> {
    let text = |value: Option<&Value>| match value {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    match item.get("type").and_then(Value::as_str) {
        Some("function_call") => {
            let call = json!({
                "id": item.get("call_id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": item.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": item.get("arguments").cloned().unwrap_or(json!("")),
                },
            });
            let joins = messages
                .last()
                .is_some_and(|last| last.get("role").and_then(Value::as_str) == Some("assistant"));
            if !joins {
                messages.push(json!({"role": "assistant", "content": null}));
            }
            if let Some(last) = messages.last_mut().and_then(Value::as_object_mut) {
                let calls = last.entry("tool_calls").or_insert_with(|| json!([]));
                if let Some(calls) = calls.as_array_mut() {
                    calls.push(call);
                }
                // A turn that only calls tools has `content: null`, as Chat Completions sends it.
                if last.get("content").and_then(Value::as_str) == Some("") {
                    last.insert("content".into(), Value::Null);
                }
            }
        }
        Some("function_call_output") => messages.push(json!({
            "role": "tool",
            "tool_call_id": item.get("call_id").cloned().unwrap_or(Value::Null),
            "content": text(item.get("output")),
        })),
        Some("message") | None => {
            let Some(role) = item.get("role").and_then(Value::as_str) else {
                return Err("Missing required parameter: 'input[].role'.".into());
            };
            let role = if role == "developer" { "system" } else { role };
            messages.push(json!({"role": role, "content": text(item.get("content"))}));
        }
        // Reasoning items and the like carry nothing the simulator answers from.
        Some(_) => {}
    }
    Ok(())
}

fn usage(plan: &Plan) -> Value {
    let (input, output) = (plan.input_tokens, plan.output_tokens());
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input.saturating_add(output)
    })
}

fn item_id(ctx: &Ctx<'_>, prefix: &str) -> String {
    let unique = ctx.response_id.trim_start_matches("resp_sim");
    format!("{prefix}_sim{unique}")
}

/// The one output item of the answer, as it is when done.
fn item(ctx: &Ctx<'_>, plan: &Plan, done: bool) -> Value {
    let content = if done { plan.content() } else { String::new() };
    let status = if done { "completed" } else { "in_progress" };
    match &plan.kind {
        Kind::ToolCall { id_suffix, name } => json!({
            "id": item_id(ctx, "fc"),
            "type": "function_call",
            "status": status,
            "arguments": content,
            "call_id": format!("call_sim{id_suffix}"),
            "name": name
        }),
        Kind::Text | Kind::Refusal => {
            let parts = if done { vec![part(plan, &content)] } else { Vec::new() };
            json!({
                "id": item_id(ctx, "msg"),
                "type": "message",
                "status": status,
                "content": parts,
                "role": "assistant"
            })
        }
    }
}

fn part(plan: &Plan, content: &str) -> Value {
    match plan.kind {
        Kind::Refusal => json!({"type": "refusal", "refusal": content}),
        _ => json!({"type": "output_text", "annotations": [], "text": content}),
    }
}

/// The `response` object: `in_progress` and empty while streaming, else the whole answer.
fn response(ctx: &Ctx<'_>, plan: &Plan, done: bool) -> Value {
    let (status, incomplete) = match (done, plan.stop) {
        (false, _) => ("in_progress", Value::Null),
        (true, Stop::MaxTokens) => ("incomplete", json!({"reason": "max_output_tokens"})),
        (true, _) => ("completed", Value::Null),
    };
    json!({
        "id": ctx.response_id,
        "object": "response",
        "created_at": ctx.created,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": null,
        "max_output_tokens": ctx.request.max_tokens,
        "model": ctx.request.model,
        "output": if done { json!([item(ctx, plan, true)]) } else { json!([]) },
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "store": false,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": if done { usage(plan) } else { Value::Null },
        "metadata": {}
    })
}

/// The non-streaming `response` body.
pub(crate) fn body(ctx: &Ctx<'_>, plan: &Plan) -> Value {
    response(ctx, plan, true)
}

/// The typed event stream, each event numbered by `sequence_number`.
pub(crate) fn frames(ctx: &Ctx<'_>, plan: &Plan) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut sequence = 0u64;
    let mut push = |mut event: Value, role: FrameRole| {
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        event["sequence_number"] = json!(sequence);
        sequence += 1;
        frames.push(frame(sse_event(&kind, &event), role));
    };
    push(
        json!({"type": "response.created", "response": response(ctx, plan, false)}),
        FrameRole::Meta,
    );
    push(
        json!({"type": "response.in_progress", "response": response(ctx, plan, false)}),
        FrameRole::Meta,
    );
    let added = json!({"type": "response.output_item.added", "output_index": 0, "item": item(ctx, plan, false)});
    let content = plan.content();
    match &plan.kind {
        Kind::ToolCall { .. } => {
            let id = item_id(ctx, "fc");
            push(added, FrameRole::ContentStart);
            for token in &plan.tokens {
                push(
                    json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": 0, "delta": token}),
                    FrameRole::Token,
                );
            }
            push(
                json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": 0, "arguments": content}),
                FrameRole::Tail,
            );
        }
        Kind::Text | Kind::Refusal => {
            let id = item_id(ctx, "msg");
            let refusal = matches!(plan.kind, Kind::Refusal);
            let (delta, done, field) = if refusal {
                ("response.refusal.delta", "response.refusal.done", "refusal")
            } else {
                ("response.output_text.delta", "response.output_text.done", "text")
            };
            push(added, FrameRole::Meta);
            push(
                json!({"type": "response.content_part.added", "item_id": id, "output_index": 0, "content_index": 0, "part": part(plan, "")}),
                FrameRole::Meta,
            );
            for token in &plan.tokens {
                push(
                    json!({"type": delta, "item_id": id, "output_index": 0, "content_index": 0, "delta": token}),
                    FrameRole::Token,
                );
            }
            let mut done_event =
                json!({"type": done, "item_id": id, "output_index": 0, "content_index": 0});
            done_event[field] = json!(content);
            push(done_event, FrameRole::Tail);
            push(
                json!({"type": "response.content_part.done", "item_id": id, "output_index": 0, "content_index": 0, "part": part(plan, &content)}),
                FrameRole::Tail,
            );
        }
    }
    push(
        json!({"type": "response.output_item.done", "output_index": 0, "item": item(ctx, plan, true)}),
        FrameRole::Tail,
    );
    let closing =
        if plan.stop == Stop::MaxTokens { "response.incomplete" } else { "response.completed" };
    // The closing event is the stream's terminator: without it the answer is cut.
    push(json!({"type": closing, "response": response(ctx, plan, true)}), FrameRole::Terminator);
    frames
}

pub(crate) fn malformed_frame(ctx: &Ctx<'_>) -> Bytes {
    Bytes::from(format!(
        "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"{}\",\"delta\":\"w\n\n",
        item_id(ctx, "msg")
    ))
}

/// `response.failed` with a server error, as the API reports a response that died mid-way.
pub(crate) fn stream_error_frame(ctx: &Ctx<'_>) -> Bytes {
    let event = json!({
        "type": "response.failed",
        "response": {
            "id": ctx.response_id,
            "object": "response",
            "created_at": ctx.created,
            "status": "failed",
            "error": {"code": "server_error", "message": "The model failed to generate a response."},
            "incomplete_details": null,
            "model": ctx.request.model,
            "output": [],
            "usage": null
        }
    });
    sse_event("response.failed", &event)
}
