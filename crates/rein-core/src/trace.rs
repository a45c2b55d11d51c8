//! A call as a trace: one root span for the request, a client span per upstream attempt, an
//! internal span per wait, and span events for every tier skip, check, re-ask, kill-switch
//! diversion, degraded reply, decision and hand-off, built from the call's [`CallReport`] after
//! it ends (with the times the report recorded), so building a trace costs the request path
//! nothing. Attributes follow the OpenTelemetry GenAI semantic conventions
//! (`gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
//! `gen_ai.response.model`, `gen_ai.usage.*`) beside rein's own (`rein.tier`,
//! `rein.disposition`, `rein.reason`, `rein.outcome`, `rein.clock`, `rein.rung`,
//! `rein.fidelity`). The same [`Trace`] is kept in the embedded trace store and exported over
//! OTLP. Message content is in it only when the route opts in ([`CallInfo::content`]); problem
//! sentences and upstream error messages, which can quote content, never are.

use std::borrow::Cow;
use std::collections::BTreeMap;

use rand::RngExt;
use serde::{Deserialize, Serialize};

use crate::context::TraceParent;
use crate::model::Usage;
use crate::report::{CallReport, ReaskReason, SkipReason, Step};

/// The ids of one call's trace: the trace it belongs to (the caller's, from `traceparent`, or a
/// new one), rein's root span in it, and the caller's span that is its parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceIds {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits: rein's span for the call.
    pub span_id: String,
    /// The caller's span, when the caller sent a valid `traceparent`.
    pub parent_id: Option<String>,
}

impl TraceIds {
    /// The ids for a call under `parent` (the caller's `traceparent`), or in a new trace.
    pub fn for_call(parent: Option<&TraceParent>) -> Self {
        match parent {
            Some(parent) => Self {
                trace_id: parent.trace_id.clone(),
                span_id: new_span_id(),
                parent_id: Some(parent.parent_id.clone()),
            },
            None => Self { trace_id: new_trace_id(), span_id: new_span_id(), parent_id: None },
        }
    }

    /// The `traceparent` value naming rein's span (for a call rein makes on this call's behalf).
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

/// The low `digits` (at most 32) hex digits of `value`, lowercase, zero-padded.
fn hex(value: u128, digits: usize) -> String {
    let mut out = String::with_capacity(digits);
    push_hex(&mut out, value, digits);
    out
}

/// Append the low `digits` (at most 32) hex digits of `value`, lowercase, zero-padded: the
/// text of trace, span and request ids.
pub fn push_hex(out: &mut String, value: u128, digits: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Written into a buffer and appended once: a `push` a digit cost ~12 instructions each
    // (a capacity check and a char's encoding), 1.4k a call for its four ids.
    let digits = digits.min(32);
    let mut text = [0u8; 32];
    for (at, digit) in text[..digits].iter_mut().enumerate() {
        let nibble = digits - 1 - at;
        *digit = HEX[((value >> (nibble * 4)) & 0xf) as usize];
    }
    out.push_str(std::str::from_utf8(&text[..digits]).unwrap_or_default());
}

/// A random, non-zero 32-digit trace id.
pub fn new_trace_id() -> String {
    let value: u128 = rand::rng().random::<u128>().max(1);
    hex(value, 32)
}

/// A random, non-zero 16-digit span id.
pub fn new_span_id() -> String {
    let value: u64 = rand::rng().random::<u64>().max(1);
    hex(u128::from(value), 16)
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl From<&str> for Value {
    fn from(value: &str) -> Self {
        Value::Str(value.to_string())
    }
}

impl From<String> for Value {
    fn from(value: String) -> Self {
        Value::Str(value)
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Self {
        Value::Bool(value)
    }
}

impl From<u64> for Value {
    fn from(value: u64) -> Self {
        Value::Int(i64::try_from(value).unwrap_or(i64::MAX))
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Int(value)
    }
}

impl From<u32> for Value {
    fn from(value: u32) -> Self {
        Value::Int(i64::from(value))
    }
}

impl From<usize> for Value {
    fn from(value: usize) -> Self {
        Value::Int(i64::try_from(value).unwrap_or(i64::MAX))
    }
}

impl From<f64> for Value {
    fn from(value: f64) -> Self {
        Value::Float(value)
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bool(value) => write!(f, "{value}"),
            Value::Int(value) => write!(f, "{value}"),
            Value::Float(value) => write!(f, "{value}"),
            Value::Str(value) => write!(f, "{value}"),
        }
    }
}

/// Attributes by name, in a stable order. The names are mostly fixed (`gen_ai.request.model`):
/// those are borrowed, not copied into every trace. A sorted vector (`LiteMap`), not a tree: a
/// span holds a dozen or two, written once and read in order, so a tree's nodes cost more to
/// build, walk and drop than they save.
pub type Attributes = litemap::LiteMap<Cow<'static, str>, Value>;

/// What a span stands for, as OpenTelemetry's span kinds say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// The call rein served.
    Server,
    /// A request rein made upstream.
    Client,
    /// Time spent inside rein (a wait).
    Internal,
}

/// Something that happened at one moment inside a span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanEvent {
    pub name: String,
    /// Since the trace started.
    pub at_ms: u64,
    #[serde(default, skip_serializing_if = "Attributes::is_empty")]
    pub attributes: Attributes,
}

impl SpanEvent {
    pub fn new(name: impl Into<String>, at_ms: u64) -> Self {
        Self { name: name.into(), at_ms, attributes: Attributes::new() }
    }

    /// The same event with this attribute (builder form).
    #[must_use]
    pub fn with(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.attributes.insert(Cow::Borrowed(key), value.into());
        self
    }
}

/// One span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub span_id: String,
    /// The span above it; the root's is the caller's span (or none).
    pub parent_id: Option<String>,
    pub name: String,
    pub kind: SpanKind,
    /// Since the trace started.
    pub start_ms: u64,
    pub end_ms: u64,
    pub attributes: Attributes,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<SpanEvent>,
    /// The span failed, with this description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Span {
    /// A span with no attributes, events or error yet.
    pub fn new(
        name: impl Into<String>,
        kind: SpanKind,
        parent_id: Option<String>,
        start_ms: u64,
        end_ms: u64,
    ) -> Self {
        Self {
            span_id: new_span_id(),
            parent_id,
            name: name.into(),
            kind,
            start_ms,
            end_ms: end_ms.max(start_ms),
            attributes: Attributes::new(),
            events: Vec::new(),
            error: None,
        }
    }

    /// The value of an attribute.
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes.get(key)
    }
}

/// One call's trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub trace_id: String,
    pub request_id: String,
    /// The route (model calls) or the tool (tool calls).
    pub target: String,
    /// `chat` or `execute_tool`, as `gen_ai.operation.name` says.
    pub operation: String,
    /// When the call started, in Unix milliseconds.
    pub started_unix_ms: u64,
    /// How the call ended (`answered`, `fallback`, `degraded`, ...; a tool's status).
    pub outcome: String,
    /// The root span first, then the others in the order they started.
    pub spans: Vec<Span>,
}

impl Trace {
    /// The root span.
    pub fn root(&self) -> Option<&Span> {
        self.spans.first()
    }

    /// How long the call took.
    pub fn elapsed_ms(&self) -> u64 {
        self.root().map_or(0, |root| root.end_ms.saturating_sub(root.start_ms))
    }
}

/// The message content of a call, for a route that exports it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Content {
    /// The messages the caller sent, as JSON.
    pub input: String,
    /// The answer's text.
    pub output: String,
}

/// What a trace needs beside the report.
#[derive(Debug, Clone, Default)]
pub struct CallInfo {
    pub ids: Option<TraceIds>,
    pub request_id: String,
    pub started_unix_ms: u64,
    /// The format the caller spoke (`openai`, `anthropic`).
    pub api: String,
    /// The model the caller asked for (the route's name, as callers send it).
    pub request_model: String,
    pub usage: Option<Usage>,
    /// Each provider's kind (`openai`, `anthropic`) by its configured name, for
    /// `gen_ai.provider.name`.
    pub provider_kinds: BTreeMap<String, String>,
    /// The caller's labels the route slices by.
    pub labels: BTreeMap<String, String>,
    /// How long after the call reached rein the engine started (the steps before it: the run's
    /// stop conditions, the hand-off rules, the coverage check): the engine's times are shifted
    /// by it, so the trace starts where the call did.
    pub offset_ms: u64,
    /// What the layers above the engine add: events on the root span (hand-off, coverage, run
    /// stop) and spans under it (the coverage check's model calls), timed since the call
    /// reached rein; the spans' parent is set here.
    pub notes: Notes,
    /// Message content, only when the route opts in.
    pub content: Option<Content>,
}

/// What the layers above the engine noted for a call's trace before the engine ran, timed since
/// the call reached rein (its deadline's start). Carried in the call's context.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Notes {
    pub events: Vec<SpanEvent>,
    pub spans: Vec<Span>,
}

impl Notes {
    /// A child span of the call's root (its parent is set when the trace is built).
    pub fn span(&mut self, name: &str, kind: SpanKind, start_ms: u64, end_ms: u64) -> &mut Span {
        self.spans.push(Span::new(name, kind, None, start_ms, end_ms));
        let last = self.spans.len() - 1;
        &mut self.spans[last]
    }
}

/// What a tool call's trace is built from: the dispatcher's notes (a span per rung that ran)
/// and what the envelope said.
#[derive(Debug, Clone, Default)]
pub struct ToolCallInfo {
    pub ids: Option<TraceIds>,
    pub request_id: String,
    pub started_unix_ms: u64,
    /// Since the call reached rein.
    pub elapsed_ms: u64,
    pub tool: String,
    /// The envelope's status (`ok`, `refused`, `queued`, `pending_approval`, `busy`,
    /// `stopped`).
    pub status: String,
    /// The rung that served or refused it.
    pub served_by: Option<String>,
    pub fidelity: Option<String>,
    pub degraded: Option<bool>,
    /// A stored result returned for a repeated idempotency key.
    pub replayed: bool,
    /// The caller's labels.
    pub labels: BTreeMap<String, String>,
    /// The rungs' spans and the events of the ladder, the run's guards and the hand-off.
    pub notes: Notes,
}

impl ToolCallInfo {
    /// When its trace's root span ends: the call's end, or its last rung's when that is later.
    pub fn end_ms(&self) -> u64 {
        self.notes.spans.iter().map(|span| span.end_ms).fold(self.elapsed_ms, u64::max)
    }
}

fn skip_reason(reason: &SkipReason) -> &'static str {
    match reason {
        SkipReason::CoolingDown => "cooling_down",
        SkipReason::NoTimeLeft { .. } => "no_time_left",
        SkipReason::RetryBudgetExhausted => "retry_budget_exhausted",
        SkipReason::RetryAfterBeyondDeadline { .. } => "retry_after_beyond_deadline",
        SkipReason::ContextTooSmall => "context_too_small",
        SkipReason::PermanentFailure => "permanent_failure",
        SkipReason::AttemptsExhausted => "attempts_exhausted",
        SkipReason::NotRetryable => "not_retryable",
        SkipReason::ChecksFailed => "checks_failed",
        SkipReason::SavedForNextTier { .. } => "saved_for_next_tier",
        SkipReason::SentOn { .. } => "sent_on",
        SkipReason::StreamBroke => "stream_broke",
        SkipReason::NoPrefill => "no_prefill",
        SkipReason::PrefillRejected => "prefill_rejected",
    }
}

fn tier_name(report: &CallReport, tier: usize) -> Option<String> {
    report.attempts().find(|a| a.tier == tier).map(|a| a.tier_name.clone())
}

impl Trace {
    /// The trace of a finished model call.
    /// How many spans [`Trace::of_call`] makes of `report` and `info`, without making them:
    /// the call's, one per attempt and per wait, and the notes' own.
    pub fn spans_of_call(report: &CallReport, info: &CallInfo) -> usize {
        let steps = report
            .steps
            .iter()
            .filter(|step| matches!(step, Step::Attempt(_) | Step::Wait { .. }))
            .count();
        1 + steps + info.notes.spans.len()
    }

    /// How many spans [`Trace::of_tool_call`] makes of `info`: the call's and the notes' own.
    pub fn spans_of_tool_call(info: &ToolCallInfo) -> usize {
        1 + info.notes.spans.len()
    }

    pub fn of_call(report: &CallReport, info: CallInfo) -> Trace {
        let ids = info.ids.clone().unwrap_or_else(|| TraceIds::for_call(None));
        let kind_of = |provider: &str| {
            info.provider_kinds.get(provider).cloned().unwrap_or_else(|| provider.to_string())
        };
        let mut root = Span {
            span_id: ids.span_id.clone(),
            ..Span::new(
                format!("chat {}", report.route),
                SpanKind::Server,
                ids.parent_id.clone(),
                0,
                report.elapsed_ms,
            )
        };
        let attrs = &mut root.attributes;
        attrs.insert("gen_ai.operation.name".into(), "chat".into());
        attrs.insert("gen_ai.request.model".into(), info.request_model.clone().into());
        attrs.insert("rein.route".into(), report.route.clone().into());
        attrs.insert("rein.outcome".into(), report.outcome.as_str().into());
        attrs.insert("rein.attempts".into(), report.attempt_count().into());
        attrs.insert("rein.reasks".into(), report.reask_count().into());
        attrs.insert("rein.request_id".into(), info.request_id.clone().into());
        if !info.api.is_empty() {
            attrs.insert("rein.api".into(), info.api.clone().into());
        }
        if let Some(version) = report.settings_version {
            attrs.insert("rein.settings_version".into(), Value::Int(version));
        }
        if let Some(served) = &report.served_by {
            attrs.insert("gen_ai.provider.name".into(), kind_of(&served.provider).into());
            attrs.insert("gen_ai.response.model".into(), served.model.clone().into());
            attrs.insert("rein.tier".into(), served.tier_name.clone().into());
            attrs.insert("rein.provider".into(), served.provider.clone().into());
            attrs.insert("rein.failover".into(), served.failover.into());
        }
        if let Some(usage) = info.usage {
            attrs.insert("gen_ai.usage.input_tokens".into(), usage.input_tokens.into());
            attrs.insert("gen_ai.usage.output_tokens".into(), usage.output_tokens.into());
        }
        if let Some(status) = report.run_status() {
            attrs.insert("rein.run_status".into(), status.into());
        }
        for (key, value) in &info.labels {
            attrs.insert(format!("rein.label.{key}").into(), value.clone().into());
        }
        if let Some(content) = &info.content {
            attrs.insert("gen_ai.input.messages".into(), content.input.clone().into());
            attrs.insert("gen_ai.output.messages".into(), content.output.clone().into());
        }
        if matches!(
            report.outcome,
            crate::Outcome::Stopped | crate::Outcome::Interrupted | crate::Outcome::Degraded
        ) && report.served_by.is_none()
        {
            root.error = Some(format!("no model answered: {}", report.outcome.as_str()));
        }

        let mut children = Vec::new();
        for step in &report.steps {
            match step {
                Step::Attempt(attempt) => {
                    let mut span = Span::new(
                        format!("chat {}", attempt.model),
                        SpanKind::Client,
                        Some(ids.span_id.clone()),
                        attempt.started_ms,
                        attempt.started_ms + attempt.elapsed_ms,
                    );
                    let attrs = &mut span.attributes;
                    attrs.insert("gen_ai.operation.name".into(), "chat".into());
                    attrs.insert("gen_ai.provider.name".into(), kind_of(&attempt.provider).into());
                    attrs.insert("gen_ai.request.model".into(), attempt.model.clone().into());
                    attrs.insert("rein.tier".into(), attempt.tier_name.clone().into());
                    attrs.insert("rein.tier_index".into(), attempt.tier.into());
                    attrs.insert("rein.provider".into(), attempt.provider.clone().into());
                    attrs.insert("rein.attempt".into(), attempt.number.into());
                    attrs.insert("rein.probe".into(), attempt.probe.into());
                    match (&attempt.failure, &attempt.classified) {
                        (None, _) => {
                            attrs.insert("rein.disposition".into(), "answered".into());
                        }
                        (Some(failure), classified) => {
                            if let crate::Failure::ClockFired { clock, .. } = failure {
                                attrs.insert("rein.clock".into(), clock.as_str().into());
                            }
                            if let crate::Failure::Http { http, .. } = failure {
                                attrs.insert(
                                    "http.response.status_code".into(),
                                    u32::from(http.status).into(),
                                );
                            }
                            if let Some(classified) = classified {
                                let disposition = serde_json::to_value(classified.disposition)
                                    .ok()
                                    .and_then(|v| v.as_str().map(str::to_string))
                                    .unwrap_or_default();
                                attrs.insert("rein.disposition".into(), disposition.into());
                                attrs.insert("rein.reason".into(), classified.reason.into());
                                attrs.insert("error.type".into(), classified.kind.as_str().into());
                                span.error = Some(classified.kind.as_str().to_string());
                            } else {
                                span.error = Some("failed".to_string());
                            }
                        }
                    }
                    children.push(span);
                }
                Step::Wait { tier, at_ms, wait_ms, pushback } => {
                    let mut span = Span::new(
                        "wait",
                        SpanKind::Internal,
                        Some(ids.span_id.clone()),
                        *at_ms,
                        at_ms + wait_ms,
                    );
                    span.attributes.insert("rein.wait_ms".into(), (*wait_ms).into());
                    span.attributes.insert("rein.pushback".into(), (*pushback).into());
                    if let Some(name) = tier_name(report, *tier) {
                        span.attributes.insert("rein.tier".into(), name.into());
                    }
                    children.push(span);
                }
                Step::TierSkipped { tier_name, at_ms, reason, .. } => {
                    let mut event = SpanEvent::new("tier_skipped", *at_ms)
                        .with("rein.tier", tier_name.as_str())
                        .with("rein.reason", skip_reason(reason));
                    if let SkipReason::SentOn { clock } = reason {
                        event = event.with("rein.clock", *clock);
                    }
                    root.events.push(event);
                }
                Step::Checked {
                    tier,
                    at_ms,
                    verdict,
                    repairs,
                    problems,
                    failed_open,
                    recorded_only,
                } => {
                    let kinds: Vec<String> = problems.iter().map(|p| p.kind.label()).collect();
                    let mut event = SpanEvent::new("check", *at_ms)
                        .with("rein.verdict", *verdict)
                        .with("rein.repairs", repairs.len())
                        .with("rein.problems", problems.len())
                        .with("rein.failed_open", failed_open.len())
                        .with("rein.recorded_only", *recorded_only);
                    if !kinds.is_empty() {
                        event = event.with("rein.problem_kinds", kinds.join(","));
                    }
                    if let Some(name) = tier_name(report, *tier) {
                        event = event.with("rein.tier", name);
                    }
                    root.events.push(event);
                }
                Step::Reask { tier, at_ms, reason } => {
                    let why = match reason {
                        ReaskReason::CutOff { .. } => "cut_off",
                        ReaskReason::ChecksFailed { .. } => "checks_failed",
                    };
                    let mut event = SpanEvent::new("reask", *at_ms).with("rein.reason", why);
                    if let ReaskReason::CutOff { max_tokens } = reason {
                        event = event.with("gen_ai.request.max_tokens", *max_tokens);
                    }
                    if let Some(name) = tier_name(report, *tier) {
                        event = event.with("rein.tier", name);
                    }
                    root.events.push(event);
                }
                Step::KillSwitch { .. } => {
                    root.events.push(SpanEvent::new("kill_switch", 0));
                }
                Step::RunStopped { status } => {
                    root.events.push(
                        SpanEvent::new("run_stopped", 0).with("rein.run_status", status.as_str()),
                    );
                }
                Step::Decided { status } => {
                    root.events
                        .push(SpanEvent::new("decided", 0).with("rein.status", status.as_str()));
                }
                Step::Degraded { at_ms } => {
                    root.events.push(SpanEvent::new("degraded_reply", *at_ms));
                }
                Step::DegradedActed { rule, handoff } => {
                    root.events.push(
                        SpanEvent::new("degraded_acted", report.elapsed_ms)
                            .with("rein.rule", rule.as_str())
                            .with("rein.handoff", *handoff),
                    );
                }
            }
        }
        if info.offset_ms > 0 {
            let offset = info.offset_ms;
            root.end_ms += offset;
            for event in &mut root.events {
                event.at_ms += offset;
            }
            for span in &mut children {
                span.start_ms += offset;
                span.end_ms += offset;
            }
        }
        root.end_ms = info.notes.spans.iter().map(|span| span.end_ms).fold(root.end_ms, u64::max);
        root.events.extend(info.notes.events);
        children.extend(info.notes.spans);
        let outcome = report.outcome.as_str().to_string();
        Trace::assemble(ids, root, children, info.request_id, info.started_unix_ms).named(
            report.route.clone(),
            "chat",
            outcome,
        )
    }

    /// The root and its children in order: events by time, children (each under the root) by
    /// start. The target, operation and outcome are set by [`Trace::named`].
    fn assemble(
        ids: TraceIds,
        mut root: Span,
        mut children: Vec<Span>,
        request_id: String,
        started_unix_ms: u64,
    ) -> Trace {
        root.events.sort_by_key(|event| event.at_ms);
        for span in &mut children {
            span.parent_id = Some(ids.span_id.clone());
        }
        children.sort_by_key(|span| span.start_ms);
        let mut spans = Vec::with_capacity(children.len() + 1);
        spans.push(root);
        spans.extend(children);
        Trace {
            trace_id: ids.trace_id,
            request_id,
            target: String::new(),
            operation: String::new(),
            started_unix_ms,
            outcome: String::new(),
            spans,
        }
    }

    fn named(mut self, target: String, operation: &str, outcome: String) -> Trace {
        self.target = target;
        self.operation = operation.to_string();
        self.outcome = outcome;
        self
    }

    /// The trace of a finished tool call: a root span for the call (`execute_tool`), a child
    /// span per rung that ran, and the ladder's events.
    pub fn of_tool_call(info: ToolCallInfo) -> Trace {
        let ids = info.ids.clone().unwrap_or_else(|| TraceIds::for_call(None));
        let end_ms = info.end_ms();
        let name = format!("execute_tool {}", info.tool);
        let mut root = Span {
            span_id: ids.span_id.clone(),
            events: info.notes.events,
            ..Span::new(name, SpanKind::Server, ids.parent_id.clone(), 0, end_ms)
        };
        let attrs = &mut root.attributes;
        attrs.insert("gen_ai.operation.name".into(), "execute_tool".into());
        attrs.insert("gen_ai.tool.name".into(), info.tool.clone().into());
        attrs.insert("rein.outcome".into(), info.status.clone().into());
        attrs.insert("rein.request_id".into(), info.request_id.clone().into());
        attrs.insert("rein.replayed".into(), info.replayed.into());
        if let Some(rung) = &info.served_by {
            attrs.insert("rein.rung".into(), rung.clone().into());
        }
        if let Some(fidelity) = &info.fidelity {
            attrs.insert("rein.fidelity".into(), fidelity.clone().into());
        }
        if let Some(degraded) = info.degraded {
            attrs.insert("rein.degraded".into(), degraded.into());
        }
        for (key, value) in &info.labels {
            attrs.insert(format!("rein.label.{key}").into(), value.clone().into());
        }
        if matches!(info.status.as_str(), "refused" | "stopped") {
            root.error = Some(format!("the tool call was {}", info.status));
        }
        Trace::assemble(ids, root, info.notes.spans, info.request_id, info.started_unix_ms).named(
            info.tool,
            "execute_tool",
            info.status,
        )
    }

    /// One call's timeline as a readable tree: the root, then each attempt and wait under it,
    /// with the events between them, in time order.
    pub fn render_tree(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let Some(root) = self.root() else { return out };
        let _ = writeln!(
            out,
            "{} {} ({}) {} ms, trace {}, request {}",
            self.operation,
            self.target,
            self.outcome,
            self.elapsed_ms(),
            self.trace_id,
            self.request_id
        );
        enum Line<'a> {
            Span(&'a Span),
            Event(&'a SpanEvent),
        }
        let mut lines: Vec<(u64, Line)> = self.spans[1..]
            .iter()
            .map(|span| (span.start_ms, Line::Span(span)))
            .chain(root.events.iter().map(|event| (event.at_ms, Line::Event(event))))
            .collect();
        lines.sort_by_key(|(at, _)| *at);
        let count = lines.len();
        for (index, (at, line)) in lines.into_iter().enumerate() {
            let branch = if index + 1 == count { "└─" } else { "├─" };
            match line {
                Line::Span(span) => {
                    let mut extra = Vec::new();
                    for key in [
                        "rein.tier",
                        "rein.attempt",
                        "rein.clock",
                        "rein.disposition",
                        "rein.reason",
                        "http.response.status_code",
                        "rein.rung",
                        "rein.fidelity",
                        "rein.wait_ms",
                        "rein.pushback",
                        "rein.coverage.method",
                        "rein.coverage.score",
                        "rein.coverage.cutoff",
                        "rein.coverage.covered",
                    ] {
                        if let Some(value) = span.attribute(key) {
                            let key = key.trim_start_matches("rein.");
                            extra.push(format!("{key}={value}"));
                        }
                    }
                    let status = if span.error.is_some() { " ✗" } else { "" };
                    let _ = writeln!(
                        out,
                        "{branch} +{at} ms {} [{} ms]{status} {}",
                        span.name,
                        span.end_ms.saturating_sub(span.start_ms),
                        extra.join(" ")
                    );
                }
                Line::Event(event) => {
                    let extra: Vec<String> = event
                        .attributes
                        .iter()
                        .map(|(key, value)| format!("{}={value}", key.trim_start_matches("rein.")))
                        .collect();
                    let _ = writeln!(out, "{branch} +{at} ms · {} {}", event.name, extra.join(" "));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use crate::report::{AttemptRecord, ServedBy};
    use crate::{Clock, Failure, Outcome, classify};

    #[test]
    fn ids_are_zero_padded_lowercase_hex_of_their_width() {
        assert_eq!(hex(0xabc, 16), "0000000000000abc");
        assert_eq!(hex(u128::MAX, 32), "f".repeat(32));
        assert_eq!(hex(u128::MAX, 16), "f".repeat(16), "only the low digits");
        for value in [1u128, 0x0123_4567_89ab_cdef, u128::from(u64::MAX) << 3, 7 << 100] {
            assert_eq!(hex(value, 32), format!("{value:032x}"));
        }
        let mut id = "req_".to_string();
        push_hex(&mut id, 0xabc, 40);
        assert_eq!(id, format!("req_{:032x}", 0xabc), "appended, at most 32 digits");
        let (trace, span) = (new_trace_id(), new_span_id());
        assert_eq!((trace.len(), span.len()), (32, 16));
        assert!(TraceParent::parse(&format!("00-{trace}-{span}-01")).is_some());
    }

    #[test]
    fn attributes_serialize_as_a_map_in_key_order_and_read_back() {
        let mut span = Span::new("chat x", SpanKind::Client, None, 0, 5);
        span.attributes.insert("rein.tier".into(), "primary".into());
        span.attributes.insert("gen_ai.request.model".into(), "m".into());
        span.attributes.insert("rein.attempt".into(), 1u32.into());
        span.attributes.insert("rein.tier".into(), "fallback".into());
        let json = serde_json::to_value(&span).unwrap();
        assert_eq!(
            serde_json::to_string(&json["attributes"]).unwrap(),
            r#"{"gen_ai.request.model":"m","rein.attempt":1,"rein.tier":"fallback"}"#
        );
        let back: Span = serde_json::from_value(json).unwrap();
        assert_eq!(back, span);
        assert_eq!(back.attributes.get("rein.attempt"), Some(&Value::Int(1)));
    }

    fn attempt(
        tier: usize,
        name: &str,
        number: u32,
        started: u64,
        failure: Option<Failure>,
    ) -> Step {
        let classified = failure.as_ref().map(classify);
        Step::Attempt(AttemptRecord {
            tier,
            tier_name: name.into(),
            provider: format!("{name}-provider"),
            model: format!("{name}-model"),
            number,
            started_ms: started,
            elapsed_ms: 100,
            failure,
            classified,
            probe: false,
        })
    }

    fn report() -> CallReport {
        let timeout =
            Failure::ClockFired { clock: Clock::FirstToken, after: Duration::from_millis(100) };
        CallReport {
            route: "support".into(),
            settings_version: None,
            outcome: Outcome::Fallback,
            served_by: Some(ServedBy {
                tier: 1,
                tier_name: "fallback".into(),
                provider: "fallback-provider".into(),
                model: "fallback-model-2026".into(),
                failover: false,
            }),
            steps: vec![
                attempt(0, "primary", 1, 0, Some(timeout.clone())),
                Step::Wait { tier: 0, at_ms: 100, wait_ms: 50, pushback: false },
                attempt(0, "primary", 2, 150, Some(timeout)),
                Step::TierSkipped {
                    tier: 0,
                    tier_name: "primary".into(),
                    at_ms: 250,
                    reason: SkipReason::AttemptsExhausted,
                },
                attempt(1, "fallback", 1, 250, None),
                Step::Checked {
                    tier: 1,
                    at_ms: 350,
                    verdict: "pass",
                    repairs: vec![],
                    problems: vec![],
                    failed_open: vec![],
                    recorded_only: false,
                },
            ],
            alerts: vec![],
            elapsed_ms: 360,
            rejected_draft: None,
            labels: BTreeMap::new(),
        }
    }

    #[test]
    fn the_span_count_of_a_call_or_tool_call_is_the_built_traces() {
        let mut info = CallInfo { request_id: "req_1".into(), ..CallInfo::default() };
        assert_eq!(
            Trace::spans_of_call(&report(), &info),
            Trace::of_call(&report(), info.clone()).spans.len()
        );
        info.notes.span("lookup", SpanKind::Client, 1, 9);
        info.notes.span("lookup", SpanKind::Client, 10, 19);
        let counted = Trace::spans_of_call(&report(), &info);
        assert_eq!(counted, Trace::of_call(&report(), info).spans.len());
        assert_eq!(counted, 7, "the call's, three attempts, a wait, two of the notes'");

        let mut tool = ToolCallInfo { request_id: "t".into(), elapsed_ms: 5, ..Default::default() };
        tool.notes.span("rung", SpanKind::Client, 1, 9);
        let counted = Trace::spans_of_tool_call(&tool);
        assert_eq!((counted, Trace::of_tool_call(tool).spans.len()), (2, 2));
    }

    #[test]
    fn a_call_is_one_trace_with_a_span_per_attempt_under_the_callers_span() {
        let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let ids = TraceIds::for_call(parent.as_ref());
        let info = CallInfo {
            ids: Some(ids.clone()),
            request_id: "req_1".into(),
            request_model: "support".into(),
            provider_kinds: [("fallback-provider".to_string(), "anthropic".to_string())].into(),
            usage: Some(Usage { input_tokens: 12, output_tokens: 7 }),
            ..CallInfo::default()
        };
        let trace = Trace::of_call(&report(), info);
        assert_eq!(trace.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        let root = trace.root().unwrap();
        assert_eq!(root.parent_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(root.span_id, ids.span_id);
        assert_eq!(root.attribute("gen_ai.provider.name"), Some(&Value::from("anthropic")));
        assert_eq!(
            root.attribute("gen_ai.response.model"),
            Some(&Value::from("fallback-model-2026"))
        );
        assert_eq!(root.attribute("gen_ai.usage.input_tokens"), Some(&Value::Int(12)));
        assert_eq!(root.attribute("rein.outcome"), Some(&Value::from("fallback")));
        assert!(root.attribute("gen_ai.input.messages").is_none(), "no content unless opted in");

        let attempts: Vec<&Span> =
            trace.spans.iter().filter(|s| s.kind == SpanKind::Client).collect();
        assert_eq!(attempts.len(), 3);
        assert!(attempts.iter().all(|s| s.parent_id.as_deref() == Some(ids.span_id.as_str())));
        assert_eq!(attempts[0].attribute("rein.clock"), Some(&Value::from("first_token")));
        assert_eq!(attempts[0].attribute("rein.disposition"), Some(&Value::from("retry_tier")));
        assert!(attempts[0].error.is_some());
        assert_eq!(attempts[2].attribute("rein.disposition"), Some(&Value::from("answered")));
        assert_eq!(attempts[2].attribute("gen_ai.provider.name"), Some(&Value::from("anthropic")));
        assert_eq!((attempts[1].start_ms, attempts[1].end_ms), (150, 250));
        let waits = trace.spans.iter().filter(|s| s.name == "wait").count();
        assert_eq!(waits, 1);
        let events: Vec<&str> = root.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(events, ["tier_skipped", "check"]);

        let tree = trace.render_tree();
        assert!(tree.contains("clock=first_token"), "{tree}");
        assert!(tree.contains("· check ") && tree.contains("verdict=pass"), "{tree}");
        // Round trip through the store's JSON.
        let back: Trace = serde_json::from_str(&serde_json::to_string(&trace).unwrap()).unwrap();
        assert_eq!(back, trace);
    }

    #[test]
    fn the_steps_before_the_engine_shift_its_times_and_add_their_own() {
        let mut notes = Notes::default();
        let check = notes.span("coverage_check", SpanKind::Client, 5, 40);
        check.attributes.insert("rein.coverage.score".into(), 0.02.into());
        notes.events.push(SpanEvent::new("handoff", 41).with("rein.trigger", "coverage"));
        let info =
            CallInfo { request_id: "req_1".into(), offset_ms: 42, notes, ..CallInfo::default() };
        let trace = Trace::of_call(&report(), info);
        let root = trace.root().unwrap();
        assert_eq!((root.start_ms, root.end_ms), (0, 42 + 360), "from the intake to the end");
        let first = trace.spans.iter().find(|s| s.name == "chat primary-model").unwrap();
        assert_eq!(first.start_ms, 42, "the engine's first attempt starts after the steps");
        let check = trace.spans.iter().find(|s| s.name == "coverage_check").unwrap();
        assert_eq!((check.start_ms, check.end_ms), (5, 40), "the step's own times are kept");
        assert_eq!(check.parent_id.as_deref(), Some(root.span_id.as_str()));
        let events: Vec<(&str, u64)> =
            root.events.iter().map(|e| (e.name.as_str(), e.at_ms)).collect();
        assert_eq!(events, [("handoff", 41), ("tier_skipped", 42 + 250), ("check", 42 + 350)]);
        assert!(trace.render_tree().contains("coverage_check"), "{}", trace.render_tree());
    }

    #[test]
    fn a_tool_call_is_a_root_with_its_rungs_under_it() {
        let mut notes = Notes::default();
        let primary = notes.span("rung search_primary", SpanKind::Client, 1, 30);
        primary.attributes.insert("rein.disposition".into(), "down".into());
        primary.error = Some("status".into());
        notes.span("rung search_cache", SpanKind::Internal, 30, 32);
        notes.events.push(SpanEvent::new("rung_skipped", 0).with("rein.rung", "replica"));
        let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let info = ToolCallInfo {
            ids: Some(TraceIds::for_call(parent.as_ref())),
            request_id: "req_7".into(),
            elapsed_ms: 33,
            tool: "search_docs".into(),
            status: "ok".into(),
            served_by: Some("search_cache".into()),
            fidelity: Some("stale".into()),
            degraded: Some(true),
            notes,
            ..ToolCallInfo::default()
        };
        let trace = Trace::of_tool_call(info);
        assert_eq!(
            (trace.operation.as_str(), trace.target.as_str()),
            ("execute_tool", "search_docs")
        );
        let root = trace.root().unwrap();
        assert_eq!(root.parent_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(root.attribute("gen_ai.tool.name"), Some(&Value::from("search_docs")));
        assert_eq!(root.attribute("rein.rung"), Some(&Value::from("search_cache")));
        assert_eq!(root.end_ms, 33);
        assert!(root.error.is_none(), "served, if degraded");
        assert_eq!(trace.spans.len(), 3);
        assert!(trace.spans[1..].iter().all(|s| s.parent_id.as_deref() == Some(&root.span_id[..])));
        let tree = trace.render_tree();
        assert!(tree.starts_with("execute_tool search_docs (ok) 33 ms"), "{tree}");
        assert!(tree.contains("rung search_primary") && tree.contains("✗"), "{tree}");

        let refused = Trace::of_tool_call(ToolCallInfo {
            status: "refused".into(),
            ..ToolCallInfo::default()
        });
        assert!(refused.root().unwrap().error.is_some(), "a refusal is the call's error");
    }

    #[test]
    fn content_is_in_the_trace_only_when_given() {
        let info = CallInfo {
            content: Some(Content { input: "[{\"role\":\"user\"}]".into(), output: "hi".into() }),
            ..CallInfo::default()
        };
        let trace = Trace::of_call(&report(), info);
        assert_eq!(
            trace.root().unwrap().attribute("gen_ai.output.messages"),
            Some(&Value::from("hi"))
        );
    }

    #[test]
    fn ids_are_w3c_shaped_and_a_new_trace_has_no_parent() {
        let ids = TraceIds::for_call(None);
        assert_eq!((ids.trace_id.len(), ids.span_id.len()), (32, 16));
        assert!(ids.parent_id.is_none());
        assert!(TraceParent::parse(&ids.traceparent()).is_some());
    }
}
