//! Tool-call turns in the validation ladder, on paused time: one table of rows run through one
//! `check` helper. A turn that stops to call a tool is checked as a tool call (a declared tool,
//! arguments that parse and match its parameters schema), with the same code repairs and one
//! re-ask; the output contract (the route's schema and rules, or the caller's `json_schema`)
//! applies only to the turn that answers. Regression: with tools and an output contract in one
//! request, the tool call was dropped and re-asked as "the answer is empty".

use futures_util::StreamExt;
use rein_core::validate::*;
use rein_core::*;
use serde_json::{Value, json};

use crate::support::*;

const GOOD: &str =
    r#"{"reply":"Order A10 ships tomorrow.","article_ids":["140"],"needs_human":false}"#;
const INVENTED: &str =
    r#"{"reply":"Order A10 ships tomorrow.","article_ids":["212"],"needs_human":false}"#;
const ARGS: &str = r#"{"order_id":"A10"}"#;

fn answer_schema() -> Value {
    json!({
        "type": "object",
        "required": ["reply", "article_ids", "needs_human"],
        "additionalProperties": false,
        "properties": {
            "reply": {"type": "string"},
            "article_ids": {"type": "array", "items": {"type": "string"}},
            "needs_human": {"type": "boolean"}
        }
    })
}

fn lookup_order() -> ToolSpec {
    ToolSpec {
        name: "lookup_order".into(),
        description: Some("Look an order up by its id.".into()),
        parameters: json!({
            "type": "object",
            "required": ["order_id"],
            "additionalProperties": false,
            "properties": {
                "order_id": {"type": "string", "pattern": "^A[0-9]+$"},
                "reason": {"type": "string", "enum": ["refund", "delivery"]}
            }
        }),
    }
}

fn evidence() -> Evidence {
    Evidence::new().with(EvidenceItem::new("search", "140", "Orders ship the next day."))
}

/// Where the output contract comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Contract {
    /// The route's schema and the citation rule.
    Route,
    /// The caller's `response_format: json_schema`, on a route with none.
    Caller,
    /// No contract at all.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// The first tier's tool call reaches the caller.
    ToolCall,
    /// The second tier's tool call reaches the caller.
    FallbackToolCall,
    /// The first tier's checked answer reaches the caller.
    Answer,
    Degraded,
}

struct Row {
    name: &'static str,
    contract: Contract,
    primary: Vec<Act>,
    fallback: Vec<Act>,
    /// The conversation already holds the tool call and its result.
    after_tool_result: bool,
    expect: Expect,
    attempts: (usize, usize),
    reasks: usize,
    repairs: usize,
    /// Text the re-ask must contain.
    reask_says: &'static [&'static str],
    /// The arguments the caller gets, when a tool call is expected.
    arguments: Value,
}

fn row(name: &'static str, contract: Contract, primary: Vec<Act>, expect: Expect) -> Row {
    Row {
        name,
        contract,
        primary,
        fallback: vec![call("lookup_order", ARGS)],
        after_tool_result: false,
        expect,
        attempts: (1, 0),
        reasks: 0,
        repairs: 0,
        reask_says: &[],
        arguments: json!({"order_id": "A10"}),
    }
}

impl Row {
    fn fallback(mut self, acts: Vec<Act>) -> Self {
        self.fallback = acts;
        self
    }
    fn attempts(mut self, primary: usize, fallback: usize) -> Self {
        self.attempts = (primary, fallback);
        self
    }
    fn reasks(mut self, n: usize, says: &'static [&'static str]) -> Self {
        self.reasks = n;
        self.reask_says = says;
        self
    }
    fn repairs(mut self, n: usize, arguments: Value) -> Self {
        self.repairs = n;
        self.arguments = arguments;
        self
    }
    fn after_tool_result(mut self) -> Self {
        self.after_tool_result = true;
        self
    }
}

fn rows() -> Vec<Row> {
    use Contract::*;
    use Expect::*;
    let good = || call("lookup_order", ARGS);
    vec![
        row(
            "a tool call on a route with a contract is the tool call",
            Route,
            vec![good()],
            ToolCall,
        ),
        row(
            "a tool call with the caller's json_schema is the tool call",
            Caller,
            vec![good()],
            ToolCall,
        ),
        row("a tool call on a route with no contract passes", None, vec![good()], ToolCall),
        row(
            "a forced call reported with stop `end_turn` is still a tool call",
            Route,
            vec![Act::Call(vec![("lookup_order".into(), ARGS.into())], StopReason::EndTurn)],
            ToolCall,
        ),
        row(
            "after the tool result the answer is held to the route's contract",
            Route,
            vec![say(GOOD)],
            Answer,
        )
        .after_tool_result(),
        row(
            "after the tool result the answer is held to the caller's schema",
            Caller,
            vec![say(r#"{"reply":"ships tomorrow"}"#), say(GOOD)],
            Answer,
        )
        .after_tool_result()
        .attempts(2, 0)
        .reasks(1, &["/article_ids"]),
        row(
            "after the tool result an invented citation is still caught",
            Route,
            vec![say(INVENTED), say(GOOD)],
            Answer,
        )
        .after_tool_result()
        .attempts(2, 0)
        .reasks(1, &["212"]),
        row(
            "an answer instead of a call is held to the contract",
            Route,
            vec![say("I will look that up."), say(GOOD)],
            Answer,
        )
        .attempts(2, 0)
        .reasks(1, &["not valid JSON"]),
        row(
            "a call to an undeclared tool is asked again once, naming the declared ones",
            Route,
            vec![call("cancel_order", ARGS), good()],
            ToolCall,
        )
        .attempts(2, 0)
        .reasks(1, &["`cancel_order` is not a tool", "`lookup_order`"]),
        row(
            "arguments that break the parameters schema are asked again",
            Caller,
            vec![call("lookup_order", r#"{"order":"A10"}"#), good()],
            ToolCall,
        )
        .attempts(2, 0)
        .reasks(1, &["`/order_id` is required but missing"]),
        row(
            "arguments that are not JSON are asked again",
            None,
            vec![call("lookup_order", r#"{"order_id": "A1"#), good()],
            ToolCall,
        )
        .attempts(2, 0)
        .reasks(1, &["are not JSON"]),
        row(
            "a value against the parameters' pattern is asked again",
            Route,
            vec![call("lookup_order", r#"{"order_id":"sim-order_id"}"#), good()],
            ToolCall,
        )
        .attempts(2, 0)
        .reasks(1, &["/order_id"]),
        row(
            "an enum's letter case in the arguments is fixed in code",
            Route,
            vec![call("lookup_order", r#"{"order_id":"A10","reason":"Refund"}"#)],
            ToolCall,
        )
        .repairs(1, json!({"order_id": "A10", "reason": "refund"})),
        row(
            "a tool call cut off at the ceiling is asked again with a higher one",
            Route,
            vec![
                Act::Call(
                    vec![("lookup_order".into(), r#"{"order_"#.into())],
                    StopReason::MaxTokens,
                ),
                good(),
            ],
            ToolCall,
        )
        .attempts(2, 0)
        .reasks(1, &[]),
        row(
            "still wrong after the re-ask: the next tier's call is used",
            Route,
            vec![call("cancel_order", ARGS)],
            FallbackToolCall,
        )
        .attempts(2, 1)
        .reasks(1, &["cancel_order"]),
        row(
            "every tier calls wrongly: the safe reply, never a bad call",
            None,
            vec![call("lookup_order", "[]")],
            Degraded,
        )
        .fallback(vec![call("lookup_order", "not json")])
        .attempts(2, 1)
        .reasks(1, &["one JSON object"]),
    ]
}

fn request(row: &Row) -> ChatRequest {
    let mut messages = vec![Message::user("Where is order A10?")];
    if row.after_tool_result {
        let mut turn = Message::assistant("");
        turn.tool_calls = vec![ToolCall {
            id: "call_0".into(),
            name: "lookup_order".into(),
            arguments: ARGS.into(),
        }];
        messages.push(turn);
        messages.push(Message::tool_result("call_0", r#"{"status":"shipping"}"#));
    }
    ChatRequest {
        max_tokens: Some(500),
        messages,
        tools: vec![lookup_order()],
        response_format: (row.contract == Contract::Caller).then(|| ResponseFormat::JsonSchema {
            name: "reply".into(),
            schema: answer_schema(),
            strict: true,
        }),
        ..ChatRequest::default()
    }
}

fn engine_for(row: &Row) -> (Engine, std::sync::Arc<Scripted>, std::sync::Arc<Scripted>) {
    let primary = Scripted::new("p", WireFormat::OpenAi, row.primary.clone());
    let fallback = Scripted::new("f", WireFormat::Anthropic, row.fallback.clone());
    let mut route = route("r", vec![("primary", primary.clone()), ("fallback", fallback.clone())]);
    route.max_tokens_cap = 4000;
    if row.contract == Contract::Route {
        let rules = RuleSet::new().with(CitedIdsReturned {
            ids_at: "/article_ids".into(),
            source: Some("search".into()),
            item: "article".into(),
        });
        let schema = CompiledSchema::new(&answer_schema()).unwrap();
        route.contract = Some(OutputContract::json(Some(schema)).with_rules(rules));
    }
    (engine(vec![route]), primary, fallback)
}

fn check_result(row: &Row, result: &Result<Completion, CallError>) {
    let name = row.name;
    let done = match result {
        Ok(done) => done,
        Err(error) => panic!("{name}: {error:?}"),
    };
    match row.expect {
        Expect::ToolCall | Expect::FallbackToolCall => {
            let outcome =
                if row.expect == Expect::ToolCall { Outcome::Answered } else { Outcome::Fallback };
            assert_eq!(done.outcome(), outcome, "{name}: {:?}", done.report.steps);
            let [used] = done.response.tool_calls.as_slice() else {
                panic!("{name}: one tool call reaches the caller: {:?}", done.response);
            };
            assert_eq!(used.name, "lookup_order", "{name}");
            let arguments: Value = serde_json::from_str(&used.arguments).unwrap();
            assert_eq!(arguments, row.arguments, "{name}: the arguments the caller gets");
        }
        Expect::Answer => {
            assert_eq!(done.outcome(), Outcome::Answered, "{name}: {:?}", done.report.steps);
            assert!(done.response.tool_calls.is_empty(), "{name}");
            let value: Value = serde_json::from_str(&done.response.text).unwrap();
            assert_eq!(value, serde_json::from_str::<Value>(GOOD).unwrap(), "{name}");
        }
        Expect::Degraded => {
            assert_eq!(done.outcome(), Outcome::Degraded, "{name}");
            assert!(done.response.tool_calls.is_empty(), "{name}: no unchecked call leaks");
        }
    }
    assert_eq!(done.report.reask_count(), row.reasks, "{name}: re-asks");
    assert_eq!(done.report.repairs().len(), row.repairs, "{name}: code repairs");
}

async fn check(row: Row) {
    let name = row.name;
    let (engine, primary, fallback) = engine_for(&row);
    let ctx = CallContext::new().evidence(evidence());
    let result = engine.complete(ctx, "r", request(&row)).await;
    assert_eq!(
        (primary.requests().len(), fallback.requests().len()),
        row.attempts,
        "{name}: calls the providers saw"
    );
    check_result(&row, &result);
    let reasks: Vec<ChatRequest> = primary.requests().into_iter().skip(1).collect();
    for needle in row.reask_says {
        let said =
            reasks.iter().any(|r| r.messages.last().is_some_and(|m| m.content.contains(needle)));
        assert!(said, "{name}: the re-ask names `{needle}`: {reasks:?}");
    }
    for reask in &reasks {
        assert_eq!(reask.tools, vec![lookup_order()], "{name}: the re-ask still offers the tool");
    }
}

#[tokio::test(start_paused = true)]
async fn tool_turn_matrix() {
    for row in rows() {
        check(row).await;
    }
}

/// The same rows through a checked stream: the events the caller gets carry the checked call
/// (or answer), and nothing of a turn that failed its checks.
#[tokio::test(start_paused = true)]
async fn tool_turn_matrix_streamed_checked() {
    for row in rows() {
        let name = row.name;
        let (engine, _, _) = engine_for(&row);
        let ctx = CallContext::new().evidence(evidence());
        let mut stream = engine.stream(ctx, "r", request(&row)).unwrap();
        let mut builder = ResponseBuilder::default();
        let mut completed = None;
        while let Some(item) = stream.next().await {
            match item {
                Released::Event(event) => builder.push(&event),
                Released::Completed(done) => completed = Some(Ok(*done)),
                Released::Failed(error) => completed = Some(Err(*error)),
            }
        }
        let completed = completed.unwrap_or_else(|| panic!("{name}: the stream ends"));
        check_result(&row, &completed);
        let streamed = builder.finish();
        let done = completed.unwrap();
        assert_eq!(streamed.tool_calls, done.response.tool_calls, "{name}: streamed calls");
        assert_eq!(streamed.text, done.response.text, "{name}: streamed text");
    }
}

/// The report records a tool turn's check as a tool-call check: problems labelled
/// `tool_call/...` with a pointer into the turn's calls.
#[tokio::test(start_paused = true)]
async fn a_failed_tool_turn_is_recorded_with_its_problems() {
    let row = row(
        "report",
        Contract::Route,
        vec![call("cancel_order", ARGS), call("lookup_order", ARGS)],
        Expect::ToolCall,
    );
    let (engine, _, _) = engine_for(&row);
    let done = engine.complete(CallContext::new(), "r", request(&row)).await.unwrap();
    let checks: Vec<(&str, Vec<String>)> = done
        .report
        .steps
        .iter()
        .filter_map(|step| match step {
            Step::Checked { verdict, problems, .. } => Some((
                *verdict,
                problems
                    .iter()
                    .map(|p| format!("{} at {}", p.kind, p.path.as_deref().unwrap_or("")))
                    .collect(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        checks,
        vec![
            ("fail", vec!["tool_call/unknown_tool at /tool_calls/0/name".to_string()]),
            ("pass", vec![]),
        ]
    );
}
