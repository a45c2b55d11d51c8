//! Builds the Chat Completions request body from a [`ChatRequest`]: the system prompt as the
//! first `system` message, assistant tool calls as `tool_calls`, tool results as `tool`
//! messages, tools as `{"type":"function","function":{..}}`, `response_format` including
//! `json_schema`, and `extra` merged last so a route can set anything the canonical request
//! does not model.

use serde_json::{Map, Value, json};

use rein_core::{ChatRequest, Message, ResponseFormat, Role, ToolChoice, WireFormat};

use crate::config::MaxTokensField;

/// How this provider wants the body shaped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyOptions {
    pub streaming: bool,
    pub max_tokens_field: MaxTokensField,
}

pub(crate) fn build_body(request: &ChatRequest, options: BodyOptions) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(request.model.clone()));

    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.extend(request.messages.iter().map(message));
    body.insert("messages".into(), Value::Array(messages));

    if let Some(max_tokens) = request.max_tokens {
        let field = match options.max_tokens_field {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        body.insert(field.into(), json!(max_tokens));
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        body.insert("top_p".into(), json!(top_p));
    }
    if !request.stop.is_empty() {
        body.insert("stop".into(), json!(request.stop));
    }
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(|tool| {
            let mut function = Map::new();
            function.insert("name".into(), json!(tool.name));
            if let Some(description) = &tool.description {
                function.insert("description".into(), json!(description));
            }
            function.insert("parameters".into(), tool.parameters.clone());
            json!({"type": "function", "function": function})
        });
        body.insert("tools".into(), Value::Array(tools.collect()));
    }
    if let Some(choice) = &request.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool { name } => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(format) = &request.response_format {
        let format = match format {
            ResponseFormat::Text => json!({"type": "text"}),
            ResponseFormat::JsonObject => json!({"type": "json_object"}),
            ResponseFormat::JsonSchema { name, schema, strict } => json!({
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": strict},
            }),
        };
        body.insert("response_format".into(), format);
    }
    if let Some(top) = request.logprobs {
        body.insert("logprobs".into(), json!(true));
        // 0 means "only the chosen token": omit rather than send 0, which some compatible
        // servers reject.
        if top > 0 {
            body.insert("top_logprobs".into(), json!(top));
        }
    }
    if options.streaming {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if request.extra_format.is_none_or(|format| format == WireFormat::OpenAi) {
        crate::merge_extra(&mut body, &request.extra);
    }
    Value::Object(body)
}

fn message(message: &Message) -> Value {
    match message.role {
        Role::User => json!({"role": "user", "content": message.content}),
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": message.tool_call_id.clone().unwrap_or_default(),
            "content": message.content,
        }),
        Role::Assistant => {
            let mut out = Map::new();
            out.insert("role".into(), json!("assistant"));
            // A turn that only calls tools has `content: null` on the wire.
            let content = if message.content.is_empty() && !message.tool_calls.is_empty() {
                Value::Null
            } else {
                json!(message.content)
            };
            out.insert("content".into(), content);
            if !message.tool_calls.is_empty() {
                let calls = message.tool_calls.iter().map(|call| {
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    })
                });
                out.insert("tool_calls".into(), Value::Array(calls.collect()));
            }
            Value::Object(out)
        }
    }
}
