//! Builds the Responses API request body from a [`ChatRequest`]: the system prompt as
//! `instructions`; the conversation as `input` items (user and assistant messages, an
//! assistant's tool calls as `function_call` items, tool results as `function_call_output`
//! items); function tools in the flat shape (`{"type":"function","name",..,"parameters"}`);
//! `tool_choice`; JSON output as `text.format`; `max_output_tokens`, `temperature`, `top_p`;
//! `store: false` (rein keeps no conversation state upstream) and `stream`. Route-level `extra`
//! fields (those tied to no caller format) are merged last. The API has no stop sequences: a
//! request with some cannot be sent ([`unsendable`]).

use serde_json::{Map, Value, json};

use rein_core::{ChatRequest, Failure, Message, ResponseFormat, Role, ToolChoice};

/// Why `request` cannot go through the Responses API, if it cannot.
pub(crate) fn unsendable(request: &ChatRequest) -> Option<Failure> {
    (!request.stop.is_empty()).then(|| Failure::Unsendable {
        detail: "the Responses API has no stop sequences (`stop`)".to_owned(),
    })
}

/// The body for `request`. `deployment` (Azure) replaces the request's model: Azure's v1 API
/// names the deployment in `model`.
pub(crate) fn build_body(
    request: &ChatRequest,
    streaming: bool,
    deployment: Option<&str>,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(deployment.unwrap_or(&request.model)));
    if let Some(system) = &request.system {
        body.insert("instructions".into(), json!(system));
    }
    let mut input = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        items(message, &mut input);
    }
    body.insert("input".into(), Value::Array(input));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(|tool| {
            let mut function = Map::new();
            function.insert("type".into(), json!("function"));
            function.insert("name".into(), json!(tool.name));
            if let Some(description) = &tool.description {
                function.insert("description".into(), json!(description));
            }
            function.insert("parameters".into(), tool.parameters.clone());
            Value::Object(function)
        });
        body.insert("tools".into(), Value::Array(tools.collect()));
    }
    if let Some(choice) = &request.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool { name } => json!({"type": "function", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(format) = &request.response_format {
        let format = match format {
            ResponseFormat::Text => json!({"type": "text"}),
            ResponseFormat::JsonObject => json!({"type": "json_object"}),
            ResponseFormat::JsonSchema { name, schema, strict } => json!({
                "type": "json_schema", "name": name, "schema": schema, "strict": strict,
            }),
        };
        body.insert("text".into(), json!({"format": format}));
    }
    if let Some(max_tokens) = request.max_tokens {
        body.insert("max_output_tokens".into(), json!(max_tokens));
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        body.insert("top_p".into(), json!(top_p));
    }
    body.insert("store".into(), json!(false));
    if streaming {
        body.insert("stream".into(), json!(true));
    }
    // A caller's extras are in its own format's terms (Chat Completions fields would be
    // refused here); a route's are in no format's and apply to every upstream.
    if request.extra_format.is_none() {
        crate::merge_extra(&mut body, &request.extra);
    }
    Value::Object(body)
}

/// The `input` items of one canonical message.
fn items(message: &Message, input: &mut Vec<Value>) {
    match message.role {
        Role::User => input.push(json!({"role": "user", "content": message.content})),
        Role::Tool => input.push(json!({
            "type": "function_call_output",
            "call_id": message.tool_call_id.clone().unwrap_or_default(),
            "output": message.content,
        })),
        Role::Assistant => {
            if !message.content.is_empty() || message.tool_calls.is_empty() {
                input.push(json!({"role": "assistant", "content": message.content}));
            }
            for call in &message.tool_calls {
                input.push(json!({
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                }));
            }
        }
    }
}
