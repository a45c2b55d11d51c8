//! Reading a chat request in either wire format into the few facts the simulator acts on.
//!
//! The reader is deliberately lenient about *which* format a body is in: OpenAI and Anthropic
//! shapes for tools, tool choice, system prompt and content blocks are all recognised wherever
//! they appear, and the conversation is normalised to plain `(role, text)` turns. That makes the
//! healthy answer a function of the conversation alone, so the same conversation gets the same
//! answer from either endpoint, and tests can compute it from whatever body they sent.

use serde_json::{Map, Value};

use rein_core::WireFormat;

/// A request reduced to what decides the simulator's answer.
#[derive(Debug, Clone)]
pub(crate) struct SimRequest {
    pub model: String,
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    /// OpenAI `logprobs: true`, with `top_logprobs` alternatives.
    pub logprobs: bool,
    pub top_logprobs: u8,
    /// `max_tokens` / `max_completion_tokens`.
    pub max_tokens: Option<u32>,
    pub tools: Vec<Tool>,
    pub tool_choice: ToolChoice,
    pub output: OutputFormat,
    pub turns: Vec<Turn>,
    /// The raw `messages` array, for the sequence key.
    pub messages: Value,
}

#[derive(Debug, Clone)]
pub(crate) struct Tool {
    pub name: String,
    /// JSON Schema of the arguments.
    pub schema: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToolChoice {
    Auto,
    None,
    /// Must call some tool (OpenAI `required`, Anthropic `any`).
    Required,
    /// Must call this tool.
    Named(String),
}

#[derive(Debug, Clone)]
pub(crate) enum OutputFormat {
    Text,
    JsonObject,
    /// The JSON Schema the answer must satisfy.
    JsonSchema(Value),
}

/// One normalised turn. Tool results become their own `tool` turns; tool calls are rendered
/// into the assistant's text, so both formats normalise the same conversation alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Turn {
    pub role: String,
    pub text: String,
}

impl SimRequest {
    /// Reads a request body. `format` only decides which fields are mandatory; the content is
    /// read leniently (see the module docs).
    pub(crate) fn parse(format: Option<WireFormat>, body: &Value) -> Result<SimRequest, String> {
        let Some(obj) = body.as_object() else {
            return Err("the request body must be a JSON object".into());
        };
        let model = match obj.get("model") {
            Some(Value::String(m)) => m.clone(),
            Some(_) => return Err("model: must be a string".into()),
            None if format.is_some() => return Err("model: Field required".into()),
            None => String::new(),
        };
        let messages = match obj.get("messages") {
            Some(Value::Array(m)) => Value::Array(m.clone()),
            Some(_) => return Err("messages: must be an array".into()),
            None if format.is_some() => return Err("messages: Field required".into()),
            None => Value::Array(Vec::new()),
        };
        let max_tokens = obj
            .get("max_completion_tokens")
            .or_else(|| obj.get("max_tokens"))
            .and_then(Value::as_u64)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        if format == Some(WireFormat::Anthropic) && !obj.contains_key("max_tokens") {
            return Err("max_tokens: Field required".into());
        }
        let stream = obj.get("stream").and_then(Value::as_bool).unwrap_or(false);
        let include_usage = obj
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let logprobs = obj.get("logprobs").and_then(Value::as_bool).unwrap_or(false);
        let top_logprobs =
            obj.get("top_logprobs").and_then(Value::as_u64).map(|n| n.min(20) as u8).unwrap_or(0);
        let mut turns = Vec::new();
        if let Some(system) = obj.get("system") {
            push_turn(&mut turns, "system", content_text(system));
        }
        if let Value::Array(list) = &messages {
            for message in list {
                read_message(message, &mut turns);
            }
        }
        let tools = read_tools(obj.get("tools"));
        let tool_choice = read_tool_choice(obj.get("tool_choice"));
        // Both providers refuse to force a tool the request does not offer.
        if let ToolChoice::Named(name) = &tool_choice
            && !tools.iter().any(|tool| &tool.name == name)
        {
            return Err(format!(
                "tool_choice: the tool `{name}` is not one of the request's `tools`"
            ));
        }
        Ok(SimRequest {
            model,
            stream,
            include_usage,
            logprobs,
            top_logprobs,
            max_tokens,
            tools,
            tool_choice,
            output: read_output_format(obj),
            turns,
            messages,
        })
    }

    /// True when the conversation ends with an assistant turn that the model should continue.
    pub(crate) fn ends_with_prefill(&self) -> bool {
        match self.messages.as_array().and_then(|m| m.last()) {
            Some(last) => last.get("role").and_then(Value::as_str) == Some("assistant"),
            None => false,
        }
    }

    /// The text of the assistant prefill the model should continue, if the conversation ends
    /// with one.
    pub(crate) fn prefill(&self) -> Option<&str> {
        if !self.ends_with_prefill() {
            return None;
        }
        self.turns.last().filter(|t| t.role == "assistant").map(|t| t.text.as_str())
    }

    /// The text of the last turn when it is the user's own words (not a tool result).
    pub(crate) fn last_user_text(&self) -> Option<&str> {
        self.turns.last().filter(|t| t.role == "user").map(|t| t.text.as_str())
    }

    /// The text of the conversation's last user turn, wherever it is (tool results and an
    /// assistant prefill may follow it): what a scenario's reply rules look at.
    pub(crate) fn last_user_message(&self) -> Option<&str> {
        self.turns.iter().rev().find(|t| t.role == "user").map(|t| t.text.as_str())
    }

    /// A rough token count of the prompt: its words.
    pub(crate) fn input_tokens(&self) -> u32 {
        let words: usize = self.turns.iter().map(|t| t.text.split_whitespace().count()).sum();
        u32::try_from(words.max(1)).unwrap_or(u32::MAX)
    }
}

fn push_turn(turns: &mut Vec<Turn>, role: &str, text: String) {
    turns.push(Turn { role: role.to_owned(), text });
}

fn read_message(message: &Value, turns: &mut Vec<Turn>) {
    let role = match message.get("role").and_then(Value::as_str) {
        Some("developer") | Some("system") => "system",
        Some(role) => role,
        None => "user",
    };
    let content = message.get("content").unwrap_or(&Value::Null);
    if role == "tool" {
        push_turn(turns, "tool", content_text(content));
        return;
    }
    let mut text = String::new();
    let mut pending_tool_results = Vec::new();
    match content {
        Value::String(s) => text.push_str(s),
        Value::Array(blocks) => {
            for block in blocks {
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_result") => {
                        pending_tool_results
                            .push(content_text(block.get("content").unwrap_or(&Value::Null)));
                    }
                    Some("tool_use") => {
                        let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                        let input = block.get("input").cloned().unwrap_or(Value::Null);
                        append(&mut text, &tool_use_text(name, &input));
                    }
                    _ => append(&mut text, &block_text(block)),
                }
            }
        }
        _ => {}
    }
    // OpenAI assistant tool calls, rendered like Anthropic tool_use blocks.
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for call in calls {
            let function = call.get("function").unwrap_or(&Value::Null);
            let name = function.get("name").and_then(Value::as_str).unwrap_or("");
            let args = function.get("arguments").and_then(Value::as_str).unwrap_or("");
            let input = serde_json::from_str(args).unwrap_or(Value::String(args.to_owned()));
            append(&mut text, &tool_use_text(name, &input));
        }
    }
    for result in pending_tool_results {
        push_turn(turns, "tool", result);
    }
    if !text.is_empty() || !matches!(content, Value::Array(_)) {
        push_turn(turns, role, text);
    }
}

fn tool_use_text(name: &str, input: &Value) -> String {
    format!("[tool_use {name} {input}]")
}

fn append(text: &mut String, piece: &str) {
    if piece.is_empty() {
        return;
    }
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(piece);
}

/// The text of a `content` value: a string, or the text of its blocks.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            let mut text = String::new();
            for block in blocks {
                append(&mut text, &block_text(block));
            }
            text
        }
        _ => String::new(),
    }
}

fn block_text(block: &Value) -> String {
    match block {
        Value::String(s) => s.clone(),
        Value::Object(b) => match b.get("text").and_then(Value::as_str) {
            Some(text) => text.to_owned(),
            None => match b.get("type").and_then(Value::as_str) {
                Some(kind) => format!("[{kind}]"),
                None => String::new(),
            },
        },
        _ => String::new(),
    }
}

fn read_tools(tools: Option<&Value>) -> Vec<Tool> {
    let Some(Value::Array(list)) = tools else { return Vec::new() };
    list.iter()
        .filter_map(|tool| {
            // OpenAI: {"type":"function","function":{"name","parameters"}}.
            if let Some(function) = tool.get("function") {
                let name = function.get("name")?.as_str()?.to_owned();
                let schema = function.get("parameters").cloned().unwrap_or(Value::Null);
                return Some(Tool { name, schema });
            }
            // Anthropic: {"name","input_schema"}.
            let name = tool.get("name")?.as_str()?.to_owned();
            let schema = tool.get("input_schema").cloned().unwrap_or(Value::Null);
            Some(Tool { name, schema })
        })
        .collect()
}

fn read_tool_choice(choice: Option<&Value>) -> ToolChoice {
    match choice {
        Some(Value::String(s)) => match s.as_str() {
            "required" | "any" => ToolChoice::Required,
            "none" => ToolChoice::None,
            _ => ToolChoice::Auto,
        },
        Some(Value::Object(o)) => {
            let named = |o: &Map<String, Value>| {
                o.get("function")
                    .and_then(|f| f.get("name"))
                    .or_else(|| o.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            match o.get("type").and_then(Value::as_str) {
                Some("any") | Some("required") => ToolChoice::Required,
                Some("none") => ToolChoice::None,
                Some("tool") | Some("function") => match named(o) {
                    Some(name) => ToolChoice::Named(name),
                    None => ToolChoice::Required,
                },
                _ => ToolChoice::Auto,
            }
        }
        _ => ToolChoice::Auto,
    }
}

fn read_output_format(obj: &Map<String, Value>) -> OutputFormat {
    // OpenAI `response_format`; Anthropic `output_format` and `output_config.format`.
    let format = obj
        .get("response_format")
        .or_else(|| obj.get("output_format"))
        .or_else(|| obj.get("output_config").and_then(|c| c.get("format")));
    let Some(format) = format else { return OutputFormat::Text };
    match format.get("type").and_then(Value::as_str) {
        Some("json_object") => OutputFormat::JsonObject,
        Some("json_schema") => {
            let schema = format
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .or_else(|| format.get("schema"))
                .cloned()
                .unwrap_or(Value::Null);
            OutputFormat::JsonSchema(schema)
        }
        _ => OutputFormat::Text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn both_formats_normalise_to_the_same_turns() {
        let openai = json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "get", "arguments": "{\"city\":\"Oslo\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
            ]
        });
        let anthropic = json!({
            "model": "m",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "get", "input": {"city": "Oslo"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}
                ]}
            ]
        });
        let a = SimRequest::parse(Some(WireFormat::OpenAi), &openai).unwrap();
        let b = SimRequest::parse(Some(WireFormat::Anthropic), &anthropic).unwrap();
        assert_eq!(a.turns, b.turns);
        assert_eq!(a.turns.len(), 4);
        assert_eq!(a.last_user_text(), None);
    }

    #[test]
    fn anthropic_requires_max_tokens() {
        let body = json!({"model": "m", "messages": []});
        let err = SimRequest::parse(Some(WireFormat::Anthropic), &body).unwrap_err();
        assert!(err.contains("max_tokens"));
        assert!(SimRequest::parse(Some(WireFormat::OpenAi), &body).is_ok());
    }

    #[test]
    fn a_named_tool_must_be_offered() {
        let body = json!({
            "model": "m",
            "messages": [],
            "tools": [{"type": "function", "function": {"name": "a", "parameters": {}}}],
            "tool_choice": {"type": "function", "function": {"name": "b"}}
        });
        let err = SimRequest::parse(Some(WireFormat::OpenAi), &body).unwrap_err();
        assert_eq!(err, "tool_choice: the tool `b` is not one of the request's `tools`");
        let mut offered = body.clone();
        offered["tool_choice"]["function"]["name"] = json!("a");
        let request = SimRequest::parse(Some(WireFormat::OpenAi), &offered).unwrap();
        assert_eq!(request.tool_choice, ToolChoice::Named("a".into()));
    }

    #[test]
    fn tool_choice_shapes() {
        let cases = [
            (json!("required"), ToolChoice::Required),
            (json!("none"), ToolChoice::None),
            (json!({"type": "any"}), ToolChoice::Required),
            (json!({"type": "tool", "name": "x"}), ToolChoice::Named("x".into())),
            (json!({"type": "function", "function": {"name": "y"}}), ToolChoice::Named("y".into())),
            (json!({"type": "auto"}), ToolChoice::Auto),
        ];
        for (value, want) in cases {
            assert_eq!(read_tool_choice(Some(&value)), want, "{value}");
        }
    }
}
