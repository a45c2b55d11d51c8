//! Builds the Converse request body from a [`ChatRequest`]: `system` as `[{text}]`, turns as
//! `{role, content: [{text} | {toolUse} | {toolResult}]}` (tool results inside the user turn
//! that answers the calls, consecutive same-role messages merged, as Converse requires
//! alternating roles), `inferenceConfig` (`maxTokens` always present, `temperature`, `topP`,
//! `stopSequences`) and `toolConfig` (`toolSpec` with `inputSchema.json`, `toolChoice` as
//! `auto`/`any`/`tool`). Converse has no "no tools" choice: `ToolChoice::None` sends the tools
//! without a choice. The model id travels in the URL, not the body. A JSON schema goes as
//! structured outputs, `outputConfig.textFormat` (`type: json_schema`, the schema as a JSON
//! *string* in `structure.jsonSchema.schema`, with its name). Converse has no JSON-object mode
//! and no logprobs: such requests go without them, and the validation ladder checks the answer.

use serde_json::{Map, Value, json};

use rein_core::{ChatRequest, Failure, Message, ResponseFormat, Role, ToolChoice, WireFormat};

pub(crate) fn build_body(request: &ChatRequest, default_max_tokens: u32) -> Result<Value, Failure> {
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages(&request.messages)?));
    if let Some(system) = request.system.as_ref().filter(|s| !s.is_empty()) {
        body.insert("system".into(), json!([{"text": system}]));
    }
    let mut inference = Map::new();
    inference.insert("maxTokens".into(), json!(request.max_tokens.unwrap_or(default_max_tokens)));
    if let Some(temperature) = request.temperature {
        inference.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        inference.insert("topP".into(), json!(top_p));
    }
    if !request.stop.is_empty() {
        inference.insert("stopSequences".into(), json!(request.stop));
    }
    body.insert("inferenceConfig".into(), Value::Object(inference));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                let mut spec = Map::new();
                spec.insert("name".into(), json!(tool.name));
                if let Some(description) = &tool.description {
                    spec.insert("description".into(), json!(description));
                }
                spec.insert("inputSchema".into(), json!({"json": tool.parameters}));
                json!({"toolSpec": spec})
            })
            .collect();
        let mut config = Map::new();
        config.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            Some(ToolChoice::Auto) => Some(json!({"auto": {}})),
            Some(ToolChoice::Required) => Some(json!({"any": {}})),
            Some(ToolChoice::Tool { name }) => Some(json!({"tool": {"name": name}})),
            Some(ToolChoice::None) | None => None,
        };
        if let Some(choice) = choice {
            config.insert("toolChoice".into(), choice);
        }
        body.insert("toolConfig".into(), Value::Object(config));
    }
    if let Some(ResponseFormat::JsonSchema { name, schema, .. }) = &request.response_format {
        let schema = serde_json::to_string(schema).unwrap_or_default();
        body.insert(
            "outputConfig".into(),
            json!({"textFormat": {
                "type": "json_schema",
                "structure": {"jsonSchema": {"schema": schema, "name": name}},
            }}),
        );
    }
    if request.extra_format.is_none_or(|format| format == WireFormat::Bedrock) {
        crate::merge_extra(&mut body, &request.extra);
    }
    Ok(Value::Object(body))
}

fn messages(messages: &[Message]) -> Result<Vec<Value>, Failure> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message.role {
            Role::User => ("user", vec![json!({"text": message.content})]),
            Role::Tool => (
                "user",
                vec![json!({"toolResult": {
                    "toolUseId": message.tool_call_id.clone().unwrap_or_default(),
                    "content": [{"text": message.content}],
                }})],
            ),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !message.content.is_empty() || message.tool_calls.is_empty() {
                    blocks.push(json!({"text": message.content}));
                }
                for call in &message.tool_calls {
                    blocks.push(json!({"toolUse": {
                        "toolUseId": call.id,
                        "name": call.name,
                        "input": tool_input(&call.id, &call.arguments)?,
                    }}));
                }
                ("assistant", blocks)
            }
        };
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    Ok(turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // Tool results open the user turn that answers the assistant's calls.
            blocks.sort_by_key(|block| block.get("toolResult").is_none());
            json!({"role": role, "content": blocks})
        })
        .collect())
}

/// `toolUse.input` must be JSON; OpenAI-style callers carry it as text.
fn tool_input(id: &str, arguments: &str) -> Result<Value, Failure> {
    if arguments.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(arguments).map_err(|error| Failure::Unsendable {
        detail: format!(
            "arguments of tool call `{id}` are not JSON, cannot send them as toolUse input: {error}"
        ),
    })
}
