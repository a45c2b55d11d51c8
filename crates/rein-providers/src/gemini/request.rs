//! Builds the `generateContent` body from a [`ChatRequest`]: the system prompt as
//! `systemInstruction`, turns as `contents` with the roles `user` and `model`, each of
//! `parts`; an assistant's tool calls as `functionCall` parts (arguments parsed back into
//! JSON `args`), tool results as `functionResponse` parts in a user turn, named after the call
//! they answer (Gemini matches results by name) with the result as `response` (a JSON object
//! as it is, anything else as `{"output": text}`, as Google's SDKs do). Consecutive turns of
//! one side share one content. The first `functionCall` part of each model content carries
//! `thoughtSignature: "skip_thought_signature_validator"`: Gemini 3 rejects (400
//! `INVALID_ARGUMENT`, "Function call is missing a thought_signature") a replayed call whose
//! signature is missing, rein's canonical tool call has no place for the signature the model
//! sent, and this value is the one Google documents for calls without their signature (the
//! one gemini-cli sends too). `generationConfig` carries the ceiling, sampling and stop
//! sequences; `json_object` is `responseMimeType: application/json`, `json_schema` adds the
//! schema as `responseJsonSchema`. Tools are one `functionDeclarations` list; the tool choice
//! is `toolConfig.functionCallingConfig` (`AUTO`, `NONE`, `ANY`, `ANY` with one allowed
//! name). There are no logprobs here; such requests are sent without them.

use serde_json::{Map, Value, json};

use rein_core::{ChatRequest, Failure, Message, ResponseFormat, Role, ToolChoice, WireFormat};

/// Google's stand-in for a thought signature rein does not have (see the module docs).
const SKIP_THOUGHT_SIGNATURE: &str = "skip_thought_signature_validator";

pub(crate) fn build_body(request: &ChatRequest) -> Result<Value, Failure> {
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents(&request.messages)?));
    if let Some(system) = request.system.as_ref().filter(|s| !s.is_empty()) {
        body.insert("systemInstruction".into(), json!({"parts": [{"text": system}]}));
    }
    if !request.tools.is_empty() {
        let declarations = request.tools.iter().map(|tool| {
            let mut out = Map::new();
            out.insert("name".into(), json!(tool.name));
            if let Some(description) = &tool.description {
                out.insert("description".into(), json!(description));
            }
            out.insert("parametersJsonSchema".into(), tool.parameters.clone());
            Value::Object(out)
        });
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations.collect::<Vec<_>>()}]),
        );
    }
    if let Some(choice) = &request.tool_choice {
        let config = match choice {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Required => json!({"mode": "ANY"}),
            ToolChoice::Tool { name } => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
        };
        body.insert("toolConfig".into(), json!({"functionCallingConfig": config}));
    }
    let mut generation = Map::new();
    if let Some(max_tokens) = request.max_tokens {
        generation.insert("maxOutputTokens".into(), json!(max_tokens));
    }
    if let Some(temperature) = request.temperature {
        generation.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        generation.insert("topP".into(), json!(top_p));
    }
    if !request.stop.is_empty() {
        generation.insert("stopSequences".into(), json!(request.stop));
    }
    match &request.response_format {
        Some(ResponseFormat::JsonObject) => {
            generation.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            generation.insert("responseMimeType".into(), json!("application/json"));
            generation.insert("responseJsonSchema".into(), schema.clone());
        }
        Some(ResponseFormat::Text) | None => {}
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    if request.extra_format.is_none_or(|format| format == WireFormat::Gemini) {
        crate::merge_extra(&mut body, &request.extra);
    }
    Ok(Value::Object(body))
}

fn contents(messages: &[Message]) -> Result<Vec<Value>, Failure> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        let (role, parts) = match message.role {
            Role::User => ("user", vec![json!({"text": message.content})]),
            Role::Assistant => {
                let mut parts = Vec::new();
                if !message.content.is_empty() || message.tool_calls.is_empty() {
                    parts.push(json!({"text": message.content}));
                }
                for call in &message.tool_calls {
                    let args: Value = if call.arguments.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&call.arguments).map_err(|e| Failure::Unsendable {
                            detail: format!(
                                "the arguments of tool call `{}` are not JSON ({e}); Gemini needs them as an object",
                                call.id
                            ),
                        })?
                    };
                    parts.push(json!({"functionCall": {"name": call.name, "args": args}}));
                }
                ("model", parts)
            }
            Role::Tool => {
                let name = called_name(&messages[..at], message.tool_call_id.as_deref())
                    .ok_or_else(|| Failure::Unsendable {
                        detail: "a tool result answers no earlier tool call; Gemini names results after their call".into(),
                    })?;
                let response = match serde_json::from_str::<Value>(&message.content) {
                    Ok(Value::Object(object)) => Value::Object(object),
                    _ => json!({"output": message.content}),
                };
                ("user", vec![json!({"functionResponse": {"name": name, "response": response}})])
            }
        };
        match out.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(parts),
            _ => out.push((role, parts)),
        }
    }
    Ok(out
        .into_iter()
        .map(|(role, mut parts)| {
            if role == "model"
                && let Some(Value::Object(call)) =
                    parts.iter_mut().find(|part| part.get("functionCall").is_some())
            {
                call.insert("thoughtSignature".into(), json!(SKIP_THOUGHT_SIGNATURE));
            }
            json!({"role": role, "parts": parts})
        })
        .collect())
}

/// The name of the call a tool result answers, from the assistant turns before it.
fn called_name<'a>(earlier: &'a [Message], id: Option<&str>) -> Option<&'a str> {
    let id = id?;
    earlier
        .iter()
        .rev()
        .flat_map(|m| m.tool_calls.iter())
        .find(|call| call.id == id)
        .map(|call| call.name.as_str())
}
