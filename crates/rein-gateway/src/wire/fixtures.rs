//! Test fixtures shared by the wire tests: call reports, canonical answers (text, tool calls,
//! refusal, thinking), the released items a stream of them yields, and a readable JSON view
//! of SSE frames for snapshots.

use bytes::Bytes;
use serde_json::{Value, json};

use rein_core::{
    AttemptRecord, CallError, CallReport, ChatResponse, Completion, Outcome, Released, ServedBy,
    Step, StopReason, StreamEvent, TokenLogprob, ToolCall, Usage,
};

use super::ResponseMeta;

pub(crate) fn meta(id: &str) -> ResponseMeta {
    ResponseMeta::new(id, 1_760_000_000)
}

fn attempt(tier: usize, tier_name: &str, number: u32) -> Step {
    Step::Attempt(AttemptRecord {
        tier,
        tier_name: tier_name.into(),
        provider: "p".into(),
        model: "m".into(),
        number,
        started_ms: 0,
        elapsed_ms: 10,
        failure: None,
        classified: None,
        probe: false,
    })
}

/// For property tests: a stop reason by `index` (0 to 6 the named ones, else `Other(other)`).
pub(crate) fn stop_reason(index: usize, other: &str) -> StopReason {
    match index {
        0 => StopReason::EndTurn,
        1 => StopReason::StopSequence,
        2 => StopReason::MaxTokens,
        3 => StopReason::ToolUse,
        4 => StopReason::ContentFilter,
        5 => StopReason::Refusal,
        6 => StopReason::PauseTurn,
        _ => StopReason::Other(other.to_string()),
    }
}

/// For property tests: what rein's summary of a call reads, varied. `served` as [`report`]'s.
pub(crate) fn summary_report(
    served: Option<&(usize, String)>,
    route: String,
    settings_version: Option<i64>,
    run_stopped: Option<String>,
) -> CallReport {
    let mut report = report(Outcome::Answered, served.map(|(tier, name)| (*tier, name.as_str())));
    report.route = route;
    report.settings_version = settings_version;
    if let Some(status) = run_stopped {
        report.steps.push(Step::RunStopped { status });
    }
    report
}

/// For property tests of a stream's last frames: finished calls, their stop reason
/// ([`stop_reason`]), usage and summary ([`summary_report`]) varied, strings with quotes.
pub(crate) fn ended_calls() -> impl proptest::strategy::Strategy<Value = Completion> {
    use proptest::option::of;
    use proptest::prelude::{Strategy, any};
    let stop = (of(0usize..8), ".{0,8}");
    let summary =
        (of((0usize..3, "[a-z\"]{1,8}")), ".{0,10}", of(any::<i64>()), of("[a-z_\"]{1,20}"));
    (stop, (any::<u32>(), any::<u32>()), summary).prop_map(
        |((stop, other), tokens, (served, route, version, run_stopped))| {
            let response = ChatResponse {
                stop_reason: stop.map(|index| stop_reason(index, &other)),
                usage: Usage { input_tokens: tokens.0, output_tokens: tokens.1 },
                ..ChatResponse::default()
            };
            let report = summary_report(served.as_ref(), route, version, run_stopped);
            Completion { response, report }
        },
    )
}

/// A report for route `support`; `served` is the tier index and name that answered.
pub(crate) fn report(outcome: Outcome, served: Option<(usize, &str)>) -> CallReport {
    let steps = match served {
        Some((tier, name)) if tier > 0 => {
            vec![attempt(0, "primary", 1), attempt(0, "primary", 2), attempt(tier, name, 1)]
        }
        Some((tier, name)) => vec![attempt(tier, name, 1)],
        None => vec![attempt(0, "primary", 1)],
    };
    CallReport {
        route: "support".into(),
        settings_version: Some(3),
        outcome,
        served_by: served.map(|(tier, name)| ServedBy {
            tier,
            tier_name: name.into(),
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5-20250929".into(),
            failover: false,
        }),
        steps,
        alerts: Vec::new(),
        elapsed_ms: 30,
        rejected_draft: None,
        labels: Default::default(),
    }
}

pub(crate) fn completed(response: ChatResponse) -> Released {
    Released::Completed(Box::new(Completion {
        response,
        report: report(Outcome::Answered, Some((0, "primary"))),
    }))
}

pub(crate) fn text_response() -> ChatResponse {
    ChatResponse {
        id: "chatcmpl-upstream".into(),
        model: "gpt-4o-2024-08-06".into(),
        text: "Your order ships tomorrow.".into(),
        stop_reason: Some(StopReason::EndTurn),
        usage: Usage { input_tokens: 42, output_tokens: 7 },
        ..ChatResponse::default()
    }
}

/// An answer from a Claude tier with thinking, text and two tool calls.
pub(crate) fn tool_response() -> ChatResponse {
    ChatResponse {
        id: "msg_upstream".into(),
        model: "claude-sonnet-4-5-20250929".into(),
        text: "Let me look that up.".into(),
        thinking: "The user wants the order status.".into(),
        tool_calls: vec![
            ToolCall {
                id: "toolu_01A".into(),
                name: "get_order".into(),
                arguments: r#"{"order_id":"A-17"}"#.into(),
            },
            ToolCall {
                id: "call_9xY".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
            },
        ],
        stop_reason: Some(StopReason::ToolUse),
        usage: Usage { input_tokens: 120, output_tokens: 35 },
        ..ChatResponse::default()
    }
}

pub(crate) fn refusal_response() -> ChatResponse {
    ChatResponse {
        id: "chatcmpl-upstream".into(),
        model: "gpt-4o-2024-08-06".into(),
        refusal: Some("I can't help with that.".into()),
        stop_reason: Some(StopReason::Refusal),
        usage: Usage { input_tokens: 12, output_tokens: 6 },
        ..ChatResponse::default()
    }
}

pub(crate) fn logprob_response() -> ChatResponse {
    ChatResponse {
        text: "Yes".into(),
        logprobs: vec![TokenLogprob {
            token: "Yes".into(),
            logprob: -0.01,
            top: vec![("Yes".into(), -0.01), ("No".into(), -4.6)],
        }],
        ..text_response()
    }
}

/// The items of a streamed answer, split into several deltas as a provider sends them.
fn streamed(response: &ChatResponse) -> Vec<Released> {
    let mut items = Vec::new();
    for event in response.to_events() {
        match event {
            StreamEvent::TextDelta { text } if text.contains(' ') => {
                let (head, tail) = text.split_at(text.find(' ').unwrap_or(0));
                items.push(Released::Event(StreamEvent::TextDelta { text: head.into() }));
                items.push(Released::Event(StreamEvent::TextDelta { text: tail.into() }));
            }
            StreamEvent::ToolCallDelta { index, arguments } if arguments.len() > 4 => {
                let (head, tail) = arguments.split_at(4);
                items.push(Released::Event(StreamEvent::ToolCallDelta {
                    index,
                    arguments: head.into(),
                }));
                items.push(Released::Event(StreamEvent::ToolCallDelta {
                    index,
                    arguments: tail.into(),
                }));
            }
            StreamEvent::Done => {}
            event => items.push(Released::Event(event)),
        }
    }
    items
}

pub(crate) fn text_answer_items() -> Vec<Released> {
    let response = text_response();
    let mut items = streamed(&response);
    items.push(completed(response));
    items
}

pub(crate) fn tool_answer_items() -> Vec<Released> {
    let response = tool_response();
    let mut items = streamed(&response);
    items.push(completed(response));
    items
}

pub(crate) fn refusal_items() -> Vec<Released> {
    let response = refusal_response();
    let mut items = streamed(&response);
    items.push(completed(response));
    items
}

/// Text started, then the provider's stream broke: the call ends `Interrupted`.
pub(crate) fn interrupted_items() -> Vec<Released> {
    // Start, usage, and the first two pieces of text.
    let mut items: Vec<Released> = streamed(&text_response()).into_iter().take(4).collect();
    items.push(Released::Failed(Box::new(CallError::Interrupted {
        reason: "stream broke mid-answer".into(),
        report: Box::new(report(Outcome::Interrupted, None)),
    })));
    items
}

pub(crate) fn context_length_failure() -> Released {
    Released::Failed(Box::new(CallError::ContextLength {
        reason: "prompt is 210000 tokens; the largest tier takes 200000".into(),
        report: Box::new(report(Outcome::Stopped, None)),
    }))
}

/// Each frame as `{"event": .., "data": ..}` with the data parsed, so snapshots read well and
/// do not depend on key order.
pub(crate) fn frames_json(frames: &[Bytes]) -> Value {
    let frames = frames
        .iter()
        .map(|frame| {
            let text = std::str::from_utf8(frame).unwrap();
            assert!(text.ends_with("\n\n"), "frame not terminated: {text:?}");
            let mut event = Value::Null;
            let mut data = Value::Null;
            for line in text.trim_end().lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = json!(name);
                } else if let Some(payload) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(payload).unwrap_or_else(|_| json!(payload));
                } else {
                    panic!("unexpected line in frame: {line:?}");
                }
            }
            if event.is_null() {
                json!({"data": data})
            } else {
                json!({"event": event, "data": data})
            }
        })
        .collect();
    Value::Array(frames)
}
