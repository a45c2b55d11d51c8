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

/// The request body as bytes: written straight from the request when it has no `extra` fields
/// to merge (the common case), byte for byte what serializing [`build_body`]'s tree gives
/// (keys in the same sorted order); through the tree otherwise.
pub(crate) fn body_bytes(request: &ChatRequest, options: BodyOptions) -> bytes::Bytes {
    let merges_extra = !request.extra.is_empty()
        && request.extra_format.is_none_or(|format| format == WireFormat::OpenAi);
    if merges_extra {
        return crate::to_bytes(&build_body(request, options));
    }
    let body = typed::Body::new(request, options);
    bytes::Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// [`build_body`]'s shapes as borrowed, typed values. Fields are declared in sorted key order,
/// the order `serde_json::Map` serializes a tree in.
mod typed {
    use serde::Serialize;
    use serde::ser::{SerializeMap, SerializeSeq, Serializer};
    use serde_json::Value;

    use rein_core::{ChatRequest, Message, ResponseFormat, Role, ToolCall, ToolChoice, ToolSpec};

    use super::BodyOptions;
    use crate::config::MaxTokensField;

    #[derive(Serialize)]
    pub(super) struct Body<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        logprobs: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_completion_tokens: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
        messages: Messages<'a>,
        model: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        response_format: Option<Format<'a>>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        stop: &'a [String],
        #[serde(skip_serializing_if = "Option::is_none")]
        stream: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        stream_options: Option<StreamOptions>,
        #[serde(skip_serializing_if = "Option::is_none")]
        temperature: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_choice: Option<Choice<'a>>,
        #[serde(skip_serializing_if = "Tools::is_empty")]
        tools: Tools<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        top_logprobs: Option<u8>,
        #[serde(skip_serializing_if = "Option::is_none")]
        top_p: Option<f64>,
    }

    impl<'a> Body<'a> {
        pub(super) fn new(request: &'a ChatRequest, options: BodyOptions) -> Self {
            let (max_tokens, max_completion_tokens) = match options.max_tokens_field {
                MaxTokensField::MaxTokens => (request.max_tokens, None),
                MaxTokensField::MaxCompletionTokens => (None, request.max_tokens),
            };
            Body {
                logprobs: request.logprobs.map(|_| true),
                max_completion_tokens,
                max_tokens,
                messages: Messages { system: request.system.as_deref(), turns: &request.messages },
                model: &request.model,
                response_format: request.response_format.as_ref().map(Format),
                stop: &request.stop,
                stream: options.streaming.then_some(true),
                stream_options: options.streaming.then_some(StreamOptions { include_usage: true }),
                temperature: request.temperature,
                tool_choice: request.tool_choice.as_ref().map(Choice),
                tools: Tools(&request.tools),
                top_logprobs: request.logprobs.filter(|top| *top > 0),
                top_p: request.top_p,
            }
        }
    }

    #[derive(Serialize)]
    struct StreamOptions {
        include_usage: bool,
    }

    struct Messages<'a> {
        system: Option<&'a str>,
        turns: &'a [Message],
    }

    impl Serialize for Messages<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut seq = serializer.serialize_seq(Some(self.turns.len() + 1))?;
            if let Some(system) = self.system {
                seq.serialize_element(&Text { content: system, role: "system" })?;
            }
            for turn in self.turns {
                seq.serialize_element(&Turn(turn))?;
            }
            seq.end()
        }
    }

    #[derive(Serialize)]
    struct Text<'a> {
        content: &'a str,
        role: &'static str,
    }

    struct Turn<'a>(&'a Message);

    impl Serialize for Turn<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let message = self.0;
            match message.role {
                Role::User => {
                    Text { content: &message.content, role: "user" }.serialize(serializer)
                }
                Role::Tool => {
                    let mut map = serializer.serialize_map(Some(3))?;
                    map.serialize_entry("content", &message.content)?;
                    map.serialize_entry("role", "tool")?;
                    map.serialize_entry(
                        "tool_call_id",
                        message.tool_call_id.as_deref().unwrap_or_default(),
                    )?;
                    map.end()
                }
                Role::Assistant => {
                    let calls = !message.tool_calls.is_empty();
                    let mut map = serializer.serialize_map(Some(2 + usize::from(calls)))?;
                    // A turn that only calls tools has `content: null` on the wire.
                    if message.content.is_empty() && calls {
                        map.serialize_entry("content", &())?;
                    } else {
                        map.serialize_entry("content", &message.content)?;
                    }
                    map.serialize_entry("role", "assistant")?;
                    if calls {
                        map.serialize_entry("tool_calls", &Calls(&message.tool_calls))?;
                    }
                    map.end()
                }
            }
        }
    }

    struct Calls<'a>(&'a [ToolCall]);

    impl Serialize for Calls<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            #[derive(Serialize)]
            struct Function<'a> {
                arguments: &'a str,
                name: &'a str,
            }
            #[derive(Serialize)]
            struct Call<'a> {
                function: Function<'a>,
                id: &'a str,
                #[serde(rename = "type")]
                kind: &'static str,
            }
            serializer.collect_seq(self.0.iter().map(|call| Call {
                function: Function { arguments: &call.arguments, name: &call.name },
                id: &call.id,
                kind: "function",
            }))
        }
    }

    struct Tools<'a>(&'a [ToolSpec]);

    impl Tools<'_> {
        fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }

    impl Serialize for Tools<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            #[derive(Serialize)]
            struct Function<'a> {
                #[serde(skip_serializing_if = "Option::is_none")]
                description: Option<&'a str>,
                name: &'a str,
                parameters: &'a Value,
            }
            #[derive(Serialize)]
            struct Tool<'a> {
                function: Function<'a>,
                #[serde(rename = "type")]
                kind: &'static str,
            }
            serializer.collect_seq(self.0.iter().map(|tool| Tool {
                function: Function {
                    description: tool.description.as_deref(),
                    name: &tool.name,
                    parameters: &tool.parameters,
                },
                kind: "function",
            }))
        }
    }

    struct Choice<'a>(&'a ToolChoice);

    impl Serialize for Choice<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            #[derive(Serialize)]
            struct Name<'a> {
                name: &'a str,
            }
            #[derive(Serialize)]
            struct Named<'a> {
                function: Name<'a>,
                #[serde(rename = "type")]
                kind: &'static str,
            }
            match self.0 {
                ToolChoice::Auto => serializer.serialize_str("auto"),
                ToolChoice::None => serializer.serialize_str("none"),
                ToolChoice::Required => serializer.serialize_str("required"),
                ToolChoice::Tool { name } => {
                    Named { function: Name { name }, kind: "function" }.serialize(serializer)
                }
            }
        }
    }

    struct Format<'a>(&'a ResponseFormat);

    impl Serialize for Format<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            #[derive(Serialize)]
            struct Schema<'a> {
                name: &'a str,
                schema: &'a Value,
                strict: bool,
            }
            let mut map = serializer.serialize_map(None)?;
            match self.0 {
                ResponseFormat::Text => map.serialize_entry("type", "text")?,
                ResponseFormat::JsonObject => map.serialize_entry("type", "json_object")?,
                ResponseFormat::JsonSchema { name, schema, strict } => {
                    map.serialize_entry("json_schema", &Schema { name, schema, strict: *strict })?;
                    map.serialize_entry("type", "json_schema")?;
                }
            }
            map.end()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use rein_core::{ToolCall, ToolSpec};

    use super::*;

    fn requests() -> Vec<ChatRequest> {
        let plain = ChatRequest {
            model: "gpt-x".into(),
            messages: vec![Message::user("where is my order?")],
            ..ChatRequest::default()
        };
        let mut assistant = Message::assistant("");
        assistant.tool_calls.push(ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: "{\"id\":\"A-1\"}".into(),
        });
        let mut tool = Message::user("{\"status\":\"shipped\"}");
        tool.role = Role::Tool;
        tool.tool_call_id = Some("call_1".into());
        let mut no_id = Message::user("orphan \"quoted\" \u{1F600}\n");
        no_id.role = Role::Tool;
        let full = ChatRequest {
            model: "gpt-y".into(),
            system: Some("Be brief.".into()),
            messages: vec![
                Message::user("hi"),
                assistant,
                tool,
                no_id,
                Message::assistant("It shipped."),
            ],
            max_tokens: Some(64),
            temperature: Some(0.25),
            top_p: Some(1.0),
            stop: vec!["\n\n".into(), "END".into()],
            tools: vec![
                ToolSpec {
                    name: "lookup".into(),
                    description: Some("Find an order".into()),
                    parameters: json!({"type": "object", "properties": {"id": {"type": "string"}}}),
                },
                ToolSpec { name: "noop".into(), description: None, parameters: json!({}) },
            ],
            tool_choice: Some(ToolChoice::Tool { name: "lookup".into() }),
            response_format: Some(ResponseFormat::JsonSchema {
                name: "answer".into(),
                schema: json!({"type": "object", "required": ["a"]}),
                strict: true,
            }),
            logprobs: Some(3),
            ..ChatRequest::default()
        };
        let mut variants = vec![plain.clone(), full.clone()];
        for choice in [ToolChoice::Auto, ToolChoice::None, ToolChoice::Required] {
            variants.push(ChatRequest { tool_choice: Some(choice), ..full.clone() });
        }
        for format in [ResponseFormat::Text, ResponseFormat::JsonObject] {
            variants.push(ChatRequest { response_format: Some(format), ..plain.clone() });
        }
        variants.push(ChatRequest {
            logprobs: Some(0),
            temperature: Some(f64::NAN),
            ..plain.clone()
        });
        // `extra` for another format is not merged, so it takes the typed path too.
        let mut other_format = plain.clone();
        other_format.extra.insert("seed".into(), json!(7));
        other_format.extra_format = Some(WireFormat::Anthropic);
        variants.push(other_format);
        variants
    }

    #[test]
    fn the_typed_body_is_byte_for_byte_the_tree_body() {
        for request in requests() {
            for streaming in [true, false] {
                for max_tokens_field in
                    [MaxTokensField::MaxTokens, MaxTokensField::MaxCompletionTokens]
                {
                    let options = BodyOptions { streaming, max_tokens_field };
                    let tree = serde_json::to_vec(&build_body(&request, options)).unwrap();
                    let typed = body_bytes(&request, options);
                    assert_eq!(
                        String::from_utf8_lossy(&typed),
                        String::from_utf8_lossy(&tree),
                        "{request:?} {options:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn extra_fields_still_merge() {
        let mut request = ChatRequest {
            model: "m".into(),
            messages: vec![Message::user("hi")],
            ..ChatRequest::default()
        };
        request.extra.insert("seed".into(), json!(7));
        request.extra.insert("stream_options".into(), json!({"include_obfuscation": false}));
        let options = BodyOptions { streaming: true, max_tokens_field: MaxTokensField::MaxTokens };
        let body: Value = serde_json::from_slice(&body_bytes(&request, options)).unwrap();
        assert_eq!(body["seed"], 7);
        assert_eq!(
            body["stream_options"],
            json!({"include_usage": true, "include_obfuscation": false})
        );
    }
}
