//! Builds the Messages request body from a [`ChatRequest`]: `system` at the top level,
//! assistant tool calls as `tool_use` blocks (with the arguments parsed back into JSON),
//! tool results as `tool_result` blocks inside a user turn (consecutive user-side messages
//! share one turn, tool results first, as Anthropic requires), `max_tokens` always present,
//! and `ResponseFormat::JsonSchema` as structured outputs
//! (`output_config: {"format": {"type": "json_schema", "schema": ..}}`). Anthropic has no
//! JSON-object mode: `ResponseFormat::JsonObject` is enforced by prefilling the answer with
//! `{` (a last assistant turn, the documented way to shape Claude's output) where the model
//! takes a prefill, and the reader puts the `{` back in front of the answer. Structured
//! outputs cannot stand in for it: their schemas must close every object
//! (`additionalProperties: false`), so "any object" cannot be said. There are no logprobs;
//! such requests are sent without them, and the validation ladder checks every answer as usual.

use serde_json::{Map, Value, json};

use rein_core::{ChatRequest, Failure, Message, ResponseFormat, Role, ToolChoice, WireFormat};

#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyOptions {
    pub streaming: bool,
    pub default_max_tokens: u32,
    /// The provider's `json_prefill`: `None` decides by the model id.
    pub json_prefill: Option<bool>,
}

/// What a `json_object` answer is prefilled with.
pub(crate) const JSON_PREFILL: &str = "{";

/// The prefill this request's body carries, if any: for `json_object`, when the provider (or,
/// unset, the model) takes one and nothing in the request rules it out: a conversation that
/// already ends with the assistant's own words, tools the model may call (a prefilled answer is
/// text, never a tool call), or extended thinking (which Anthropic does not allow with a
/// prefill).
pub(crate) fn prefill(request: &ChatRequest, options: BodyOptions) -> Option<&'static str> {
    if request.response_format != Some(ResponseFormat::JsonObject) {
        return None;
    }
    if !options.json_prefill.unwrap_or_else(|| model_takes_prefill(&request.model)) {
        return None;
    }
    let ends_with_assistant = request.messages.last().is_some_and(|m| m.role == Role::Assistant);
    let may_call_tools = !request.tools.is_empty() && request.tool_choice != Some(ToolChoice::None);
    let extra_applies = request.extra_format.is_none_or(|format| format == WireFormat::Anthropic);
    let thinking = extra_applies
        && request
            .extra
            .get("thinking")
            .is_some_and(|thinking| thinking.get("type") != Some(&json!("disabled")));
    (!ends_with_assistant && !may_call_tools && !thinking).then_some(JSON_PREFILL)
}

/// Whether a model id is of a family known to take an assistant prefill: Claude 2 and 3, and
/// Claude 4.0, 4.1 and 4.5. Claude 4.6 and later answer a prefill with a 400, and ids this does
/// not know (aliases, other companies' models behind an Anthropic-format proxy) get none.
fn model_takes_prefill(model: &str) -> bool {
    const FAMILIES: [&str; 11] = [
        "claude-2",
        "claude-instant",
        "claude-3",
        "claude-opus-4-20",
        "claude-sonnet-4-20",
        "claude-opus-4-0",
        "claude-sonnet-4-0",
        "claude-opus-4-1",
        "claude-opus-4-5",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
    ];
    let model = model.to_ascii_lowercase();
    // Bedrock- and proxy-style ids put a prefix before the name (`anthropic.claude-3-…`).
    let name = model.find("claude-").map_or("", |at| &model[at..]);
    FAMILIES.iter().any(|family| name.starts_with(family))
}

pub(crate) fn build_body(request: &ChatRequest, options: BodyOptions) -> Result<Value, Failure> {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    if let Some(system) = &request.system {
        body.insert("system".into(), json!(system));
    }
    let mut turns = messages(&request.messages)?;
    if let Some(prefill) = prefill(request, options) {
        turns.push(json!({"role": "assistant", "content": prefill}));
    }
    body.insert("messages".into(), Value::Array(turns));
    body.insert(
        "max_tokens".into(),
        json!(request.max_tokens.unwrap_or(options.default_max_tokens)),
    );
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        body.insert("top_p".into(), json!(top_p));
    }
    if !request.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(request.stop));
    }
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(|tool| {
            let mut out = Map::new();
            out.insert("name".into(), json!(tool.name));
            if let Some(description) = &tool.description {
                out.insert("description".into(), json!(description));
            }
            out.insert("input_schema".into(), tool.parameters.clone());
            Value::Object(out)
        });
        body.insert("tools".into(), Value::Array(tools.collect()));
    }
    if let Some(choice) = &request.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool { name } => json!({"type": "tool", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(ResponseFormat::JsonSchema { schema, .. }) = &request.response_format {
        body.insert(
            "output_config".into(),
            json!({"format": {"type": "json_schema", "schema": schema}}),
        );
    }
    if options.streaming {
        body.insert("stream".into(), json!(true));
    }
    if request.extra_format.is_none_or(|format| format == WireFormat::Anthropic) {
        crate::merge_extra(&mut body, &request.extra);
    }
    Ok(Value::Object(body))
}

/// One wire turn being assembled.
struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
}

fn messages(messages: &[Message]) -> Result<Vec<Value>, Failure> {
    let mut turns: Vec<Turn> = Vec::new();
    for message in messages {
        let (role, blocks) = match message.role {
            Role::User => ("user", vec![text_block(&message.content)]),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.clone().unwrap_or_default(),
                    "content": message.content,
                })],
            ),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !message.content.is_empty() || message.tool_calls.is_empty() {
                    blocks.push(text_block(&message.content));
                }
                for call in &message.tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": tool_input(&call.id, &call.arguments)?,
                    }));
                }
                ("assistant", blocks)
            }
        };
        match turns.last_mut() {
            Some(turn) if turn.role == role => turn.blocks.extend(blocks),
            _ => turns.push(Turn { role, blocks }),
        }
    }
    Ok(turns.into_iter().map(turn_value).collect())
}

fn turn_value(mut turn: Turn) -> Value {
    // Tool results must open the user turn that answers the assistant's tool calls.
    turn.blocks.sort_by_key(|block| block.get("type") != Some(&json!("tool_result")));
    let content = match turn.blocks.as_slice() {
        [only] if only.get("type") == Some(&json!("text")) => {
            only.get("text").cloned().unwrap_or_default()
        }
        _ => Value::Array(turn.blocks),
    };
    json!({"role": turn.role, "content": content})
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// `tool_use.input` must be JSON; OpenAI-style callers carry it as text. An empty string is
/// a call without arguments.
fn tool_input(id: &str, arguments: &str) -> Result<Value, Failure> {
    if arguments.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(arguments).map_err(|error| Failure::Unsendable {
        detail: format!("arguments of tool call `{id}` are not JSON, cannot send them as tool_use input: {error}"),
    })
}
