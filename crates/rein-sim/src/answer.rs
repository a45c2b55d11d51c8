//! Deterministic answers: the same conversation always gets the same answer, split into the
//! same tokens, so a test can tell a whole answer from a truncated one.
//!
//! A text answer reads `sim answer <8 hex>: w1 w2 … wK [end]`, where the hex is a hash of the
//! normalised conversation, K (8 to 23) is derived from it, every token is one word plus its
//! space, and [`SENTINEL`] is always the last token. JSON answers (when `response_format` or
//! Anthropic's `output_format` asks for JSON) and tool-call arguments are schema-shaped
//! objects, split into short chunks. The hash covers the conversation only (system prompt,
//! messages, tool calls and results), not the model or the endpoint, so every tier and both
//! wire formats give the same answer to the same conversation.
//!
//! A scenario's reply rule ([`Scripted`]) replaces a text answer's words: its text exactly,
//! split into tokens the same way (one word plus its space; no prefix, no [`SENTINEL`]), each
//! token with the rule's log probability when it sets one.

use rein_core::{StopReason, Usage};
use serde_json::{Value, json};

use crate::fault::Shape;
use crate::request::{OutputFormat, SimRequest, ToolChoice};
use crate::schema;

/// The last token of every whole text answer.
pub const SENTINEL: &str = "[end]";

/// Characters per token for JSON text (answers and tool arguments).
const JSON_TOKEN_CHARS: usize = 5;

/// What a healthy answer to a request says, for tests that check an answer arrived whole.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthyAnswer {
    /// The assistant's text (a JSON document when JSON was asked; empty for a tool call).
    pub text: String,
    /// The tool call, when the request gets one.
    pub tool_call: Option<HealthyToolCall>,
    /// `EndTurn`, `ToolUse`, or `MaxTokens` when the request's own `max_tokens` is too small.
    pub stop_reason: StopReason,
    pub usage: Usage,
}

/// A tool call of a healthy answer. Its id differs per wire format and is not included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthyToolCall {
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// The healthy answer the simulator gives to this request body (OpenAI or Anthropic format).
/// Returns an empty answer for a body that is not a JSON object.
pub fn healthy_answer(request_body: &Value) -> HealthyAnswer {
    let Ok(request) = SimRequest::parse(None, request_body) else {
        return HealthyAnswer {
            text: String::new(),
            tool_call: None,
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        };
    };
    let plan = Plan::build(&request, None, None, None);
    let joined = plan.tokens.concat();
    let (text, tool_call) = match &plan.kind {
        Kind::ToolCall { name, .. } => {
            (String::new(), Some(HealthyToolCall { name: name.clone(), arguments: joined }))
        }
        Kind::Text | Kind::Refusal => (joined, None),
    };
    HealthyAnswer {
        text,
        tool_call,
        stop_reason: match plan.stop {
            Stop::EndTurn => StopReason::EndTurn,
            Stop::MaxTokens => StopReason::MaxTokens,
            Stop::ToolUse => StopReason::ToolUse,
            Stop::Refusal => StopReason::Refusal,
        },
        usage: Usage { input_tokens: plan.input_tokens, output_tokens: plan.output_tokens() },
    }
}

/// The text of the healthy answer to this request body: what a client should assemble from
/// a healthy response, streamed or not.
pub fn healthy_text(request_body: &Value) -> String {
    healthy_answer(request_body).text
}

/// An answer ready to be rendered in a wire format.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// 8 hex digits naming the conversation.
    pub hash: String,
    pub kind: Kind,
    /// The content tokens, in order; their concatenation is the text, refusal or arguments.
    pub tokens: Vec<String>,
    pub stop: Stop,
    pub input_tokens: u32,
    /// The log probability of every token, when a reply rule sets one.
    pub fixed_logprob: Option<f64>,
}

/// The text a scenario's reply rule answers, and the log probability of its tokens.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scripted {
    pub text: String,
    pub logprob: Option<f64>,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Text,
    Refusal,
    ToolCall { id_suffix: String, name: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    EndTurn,
    MaxTokens,
    ToolUse,
    Refusal,
}

impl Plan {
    /// The answer to `request`, changed by `shape` (`reject_prefill` has no effect here: the
    /// server answers a prefill with an error before planning). `say` is the exact text to
    /// answer instead of the healthy one (never a tool call), in 5-character tokens; a shape
    /// still applies to it. `scripted` is a reply rule's text, in word tokens, used when there
    /// is no `say` and the shape is no refusal (the caller only scripts text answers).
    pub(crate) fn build(
        request: &SimRequest,
        shape: Option<Shape>,
        say: Option<&str>,
        scripted: Option<&Scripted>,
    ) -> Plan {
        let digest = conversation_hash(request);
        let hash = format!("{:08x}", (digest >> 32) as u32 ^ digest as u32);
        let input_tokens = request.input_tokens();
        let scripted = scripted.filter(|_| say.is_none() && shape != Some(Shape::Refusal));
        let given = match (say, scripted) {
            (Some(text), _) => Some(json_tokens(text)),
            (None, Some(scripted)) => Some(word_tokens(&scripted.text)),
            (None, None) => None,
        };
        let (kind, tokens, mut stop) = match (shape, given) {
            (Some(Shape::Refusal), Some(tokens)) => (Kind::Refusal, tokens, Stop::Refusal),
            (Some(Shape::Refusal), None) => (Kind::Refusal, refusal_tokens(&hash), Stop::Refusal),
            (Some(Shape::CodeFence), given) => {
                let mut tokens = vec!["```json\n".to_owned()];
                match given {
                    Some(given) => tokens.extend(given),
                    None => tokens.extend(json_tokens(&json_answer(request, digest, &hash))),
                }
                tokens.push("\n```".to_owned());
                (Kind::Text, tokens, Stop::EndTurn)
            }
            (_, Some(tokens)) => (Kind::Text, tokens, Stop::EndTurn),
            _ => match tool_to_call(request) {
                Some((name, schema)) => {
                    let arguments = schema::example(&schema, "arg").to_string();
                    let arguments =
                        if arguments.starts_with('{') { arguments } else { "{}".into() };
                    let id_suffix = format!("{digest:016x}");
                    (Kind::ToolCall { id_suffix, name }, json_tokens(&arguments), Stop::ToolUse)
                }
                None => match request.output {
                    OutputFormat::Text => (Kind::Text, text_tokens(digest, &hash), Stop::EndTurn),
                    _ => {
                        let json = json_answer(request, digest, &hash);
                        (Kind::Text, json_tokens(&json), Stop::EndTurn)
                    }
                },
            },
        };
        let mut tokens = tokens;
        let mut limit = request.max_tokens.map(|m| m as usize);
        if shape == Some(Shape::MaxTokens) {
            let half = (tokens.len() / 2).max(1);
            limit = Some(limit.map_or(half, |m| m.min(half)));
        }
        if let Some(limit) = limit
            && tokens.len() > limit
        {
            tokens.truncate(limit);
            stop = Stop::MaxTokens;
        }
        let fixed_logprob = scripted.and_then(|s| s.logprob);
        Plan { hash, kind, tokens, stop, input_tokens, fixed_logprob }
    }

    /// The plan as a model continues it from `prefill`, the start of its answer given as an
    /// assistant message: what follows the prefill, when the answer starts with it (a model
    /// continues its own words); the whole answer otherwise.
    pub(crate) fn continued(mut self, prefill: &str) -> Plan {
        let content = self.content();
        if !prefill.is_empty() && content.len() > prefill.len() && content.starts_with(prefill) {
            self.tokens = json_tokens(&content[prefill.len()..]);
        }
        self
    }

    pub(crate) fn output_tokens(&self) -> u32 {
        u32::try_from(self.tokens.len()).unwrap_or(u32::MAX)
    }

    /// The whole content (text, refusal or tool arguments).
    pub(crate) fn content(&self) -> String {
        self.tokens.concat()
    }

    /// The log probability of the token at `index`: the reply rule's, else a deterministic
    /// one in (-0.5, 0].
    pub(crate) fn logprob(&self, index: usize) -> f64 {
        if let Some(logprob) = self.fixed_logprob {
            return logprob;
        }
        let h = splitmix64(fnv1a(self.hash.as_bytes()) ^ index as u64);
        -((h % 5000) as f64) / 10_000.0
    }
}

/// True when the answer to `request` is text: no tool call and no JSON (what a reply rule may
/// script).
pub(crate) fn answers_text(request: &SimRequest) -> bool {
    matches!(request.output, OutputFormat::Text) && tool_to_call(request).is_none()
}

/// Which tool the answer calls, if any: the named one when the tool choice names one, the
/// first offered when it demands some call or when the last user message says "tool" (and tool
/// choice is not `none`). A named tool the request does not offer was refused when it was read.
fn tool_to_call(request: &SimRequest) -> Option<(String, Value)> {
    let first = request.tools.first()?;
    let chosen = match &request.tool_choice {
        ToolChoice::None => return None,
        ToolChoice::Named(name) => request.tools.iter().find(|t| &t.name == name)?,
        ToolChoice::Required => first,
        ToolChoice::Auto => {
            let asks = request.last_user_text().is_some_and(|text| {
                text.split(|c: char| !c.is_alphanumeric())
                    .any(|word| word.eq_ignore_ascii_case("tool"))
            });
            if !asks {
                return None;
            }
            first
        }
    };
    Some((chosen.name.clone(), chosen.schema.clone()))
}

fn text_tokens(digest: u64, hash: &str) -> Vec<String> {
    let words = 8 + (splitmix64(digest) % 16) as usize;
    let mut tokens = vec!["sim ".to_owned(), "answer ".to_owned(), format!("{hash}: ")];
    tokens.extend((1..=words).map(|i| format!("w{i} ")));
    tokens.push(SENTINEL.to_owned());
    tokens
}

/// Text split as text answers are: one word plus the space after it per token.
fn word_tokens(text: &str) -> Vec<String> {
    text.split_inclusive(' ').map(str::to_owned).collect()
}

fn refusal_tokens(hash: &str) -> Vec<String> {
    let text = format!("I'm sorry, but I can't help with that request. (sim refusal {hash})");
    let words: Vec<&str> = text.split(' ').collect();
    let last = words.len().saturating_sub(1);
    words
        .iter()
        .enumerate()
        .map(|(i, w)| if i == last { (*w).to_owned() } else { format!("{w} ") })
        .collect()
}

/// The JSON document answered when JSON was asked: schema-shaped for `json_schema`, else an
/// object carrying the text answer.
fn json_answer(request: &SimRequest, digest: u64, hash: &str) -> String {
    match &request.output {
        OutputFormat::JsonSchema(schema) if schema.is_object() => {
            schema::example(schema, "answer").to_string()
        }
        _ => json!({ "answer": text_tokens(digest, hash).concat() }).to_string(),
    }
}

fn json_tokens(json: &str) -> Vec<String> {
    let chars: Vec<char> = json.chars().collect();
    chars.chunks(JSON_TOKEN_CHARS).map(|chunk| chunk.iter().collect()).collect()
}

/// A stable hash of the normalised conversation.
fn conversation_hash(request: &SimRequest) -> u64 {
    let mut bytes = Vec::new();
    // A prefill is the start of the answer, not the conversation: the model continues the
    // answer it would have given without it.
    let turns = match request.prefill() {
        Some(_) => &request.turns[..request.turns.len().saturating_sub(1)],
        None => &request.turns[..],
    };
    for turn in turns {
        bytes.extend_from_slice(turn.role.as_bytes());
        bytes.push(0x1f);
        bytes.extend_from_slice(turn.text.as_bytes());
        bytes.push(0x1e);
    }
    fnv1a(&bytes)
}

/// 64-bit FNV-1a: stable across platforms and releases, unlike `std`'s hasher.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The splitmix64 step: a well-mixed, stable function of its input.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(text: &str) -> Value {
        json!({"model": "m", "messages": [{"role": "user", "content": text}]})
    }

    #[test]
    fn same_conversation_same_answer() {
        let a = healthy_text(&body("hello"));
        assert_eq!(a, healthy_text(&body("hello")));
        assert_ne!(a, healthy_text(&body("hello!")));
        assert!(a.starts_with("sim answer "));
        assert!(a.ends_with(SENTINEL));
        // The model does not change the answer.
        let mut other = body("hello");
        other["model"] = json!("another");
        assert_eq!(a, healthy_text(&other));
    }

    #[test]
    fn small_max_tokens_truncates() {
        let mut b = body("hello");
        b["max_tokens"] = json!(3);
        let answer = healthy_answer(&b);
        assert_eq!(answer.stop_reason, StopReason::MaxTokens);
        assert_eq!(answer.usage.output_tokens, 3);
        assert!(!answer.text.ends_with(SENTINEL));
    }

    #[test]
    fn tool_word_asks_for_a_tool_call() {
        let mut b = body("please use the tool");
        b["tools"] = json!([{"type": "function", "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}},
                           "required": ["id"]}}}]);
        let answer = healthy_answer(&b);
        assert_eq!(answer.stop_reason, StopReason::ToolUse);
        let call = answer.tool_call.unwrap();
        assert_eq!(call.name, "lookup");
        assert_eq!(call.arguments, r#"{"id":1}"#);
        b["tool_choice"] = json!("none");
        assert!(healthy_answer(&b).tool_call.is_none());
    }

    #[test]
    fn a_named_tool_choice_calls_that_tool() {
        let tool = |name: &str, property: &str| {
            json!({"type": "function", "function": {"name": name, "parameters": {
                "type": "object", "properties": {property: {"type": "string"}},
                "required": [property]}}})
        };
        let mut b = body("where is my order");
        b["tools"] = json!([tool("search_docs", "query"), tool("lookup_order", "order_id")]);
        for choice in [
            json!({"type": "function", "function": {"name": "lookup_order"}}),
            json!({"type": "tool", "name": "lookup_order"}),
            json!({"type": "function", "name": "lookup_order"}),
        ] {
            b["tool_choice"] = choice.clone();
            let call = healthy_answer(&b).tool_call.unwrap();
            assert_eq!(call.name, "lookup_order", "{choice}");
            assert_eq!(call.arguments, r#"{"order_id":"sim-order_id"}"#, "{choice}");
        }
        b["tool_choice"] = json!("required");
        assert_eq!(healthy_answer(&b).tool_call.unwrap().name, "search_docs");
        b["tool_choice"] = json!({"type": "function", "function": {"name": "cancel_order"}});
        assert_eq!(healthy_answer(&b).tool_call, None, "never a tool that was not named");
    }

    #[test]
    fn json_mode_answers_json() {
        let mut b = body("hi");
        b["response_format"] = json!({"type": "json_object"});
        let text = healthy_text(&b);
        let value: Value = serde_json::from_str(&text).unwrap();
        assert!(value["answer"].as_str().unwrap().ends_with(SENTINEL));
    }

    #[test]
    fn hash_is_stable() {
        // Pinned: changing the hash changes every recorded answer.
        assert_eq!(fnv1a(b"rein"), 0x4d01_791f_bff4_de4f);
    }

    #[test]
    fn scripted_text_is_split_into_words_with_its_logprob() {
        let request = SimRequest::parse(None, &body("is intensive care covered?")).unwrap();
        let scripted = Scripted { text: "not  covered".into(), logprob: Some(-0.05) };
        let plan = Plan::build(&request, None, None, Some(&scripted));
        assert_eq!(plan.tokens, ["not ", " ", "covered"]);
        assert_eq!(plan.stop, Stop::EndTurn);
        assert_eq!(plan.output_tokens(), 3);
        assert!((0..3).all(|i| plan.logprob(i) == -0.05));
        // Without a logprob: the usual deterministic ones.
        let usual = Scripted { logprob: None, ..scripted.clone() };
        let plan = Plan::build(&request, None, None, Some(&usual));
        assert_eq!(plan.content(), "not  covered");
        assert!((-0.5..=0.0).contains(&plan.logprob(0)));
        // `say` and `refusal` win; `max_tokens` cuts.
        let said = Plan::build(&request, None, Some("said"), Some(&scripted));
        assert_eq!((said.content(), said.fixed_logprob), ("said".to_owned(), None));
        let refused = Plan::build(&request, Some(Shape::Refusal), None, Some(&scripted));
        assert!(matches!(refused.kind, Kind::Refusal));
        assert!(refused.content().contains("sim refusal"));
        let half = Plan::build(&request, Some(Shape::MaxTokens), None, Some(&scripted));
        assert_eq!((half.content(), half.stop), ("not ".to_owned(), Stop::MaxTokens));
    }
}
