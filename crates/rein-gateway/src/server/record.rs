//! What a model call leaves behind once it is over: its SLI record counted in the metrics, and
//! its report handed to the runtime's recorder, which builds the trace and writes both off the
//! request path. [`Recording::start`] takes what the call's context knows before the engine
//! consumes it (trace ids, deadline, labels, the coverage verdict, the messages when the route
//! exports content); [`Recording::finish`] adds the report. A tool call is recorded the same way
//! ([`ToolRecording`]): the dispatcher's notes (a span per rung) with the run's guard, its stop
//! and hand-off around them. A model call the route's `[judge]` sampling draws (at its start,
//! so only drawn calls copy their question and evidence) is handed to the online judge once it
//! has answered.

use std::borrow::Cow;

use rein_core::handoff::Trigger;
use rein_core::sli::CallRecord;
use rein_core::trace::{CallInfo, Content, SpanEvent, ToolCallInfo};
use rein_core::{CallContext, CallReport, ChatRequest, Step, Usage};
use rein_runtime::online_judge::Sampled;
use rein_runtime::recorder::{Finished, FinishedTool};
use rein_tools::ToolOutcome;

use super::Gateway;
use super::error::Api;

/// The root span's event for a hand-off to a person.
const HANDOFF_EVENT: &str = "handoff";

/// A hand-off on a call's trace: its trigger, what fired it (`rule`: the hand-off rule, the
/// stop's status, the coverage method) and whether it was kept (`None`: the store failed).
pub(super) fn handoff_event(
    at_ms: u64,
    trigger: Trigger,
    rule: &str,
    created: Option<bool>,
) -> SpanEvent {
    let event = SpanEvent::new(HANDOFF_EVENT, at_ms)
        .with("rein.trigger", trigger.as_str())
        .with("rein.rule", rule);
    match created {
        Some(created) => event.with("rein.handoff.created", created),
        None => event.with("error.type", "handoff_not_kept"),
    }
}

/// A model call being recorded.
pub(super) struct Recording {
    deadline_ms: u64,
    /// An eval's call (pinned to one tier, or past the coverage check): not counted in the
    /// SLIs.
    pinned: bool,
    covered: Option<bool>,
    labels: std::collections::BTreeMap<String, String>,
    info: CallInfo,
    /// Drawn for the online judge: what it reads besides the answer.
    judged: Option<Box<Drawn>>,
}

/// A call drawn for the online judge, as its start knows it.
struct Drawn {
    draw: rein_core::quality::Draw,
    question: Option<String>,
    evidence: Vec<(String, String)>,
}

impl Drawn {
    /// Whether the judge samples this call of `route`: never an eval's call (pinned to a tier,
    /// or past the coverage check).
    fn draw(
        judge: &rein_runtime::config::judge::JudgeConfig,
        route: &str,
        ctx: &CallContext,
        request: &ChatRequest,
    ) -> Option<Box<Self>> {
        if ctx.pin_tier.is_some() || ctx.skip_coverage {
            return None;
        }
        let judging = judge.of(route)?;
        let draw = judging.sampling.draw(&ctx.labels, rand::random::<f64>())?;
        let question = request
            .messages
            .iter()
            .rev()
            .find(|message| message.role == rein_core::Role::User)
            .map(|message| message.content.clone());
        let evidence =
            ctx.evidence.items().iter().map(|item| (item.id.clone(), item.text.clone())).collect();
        Some(Box::new(Drawn { draw, question, evidence }))
    }
}

impl Recording {
    /// Before the engine runs: what the call's context and request say. `deadline_ms` is the
    /// route's deadline when the caller set none (or a later one).
    pub(super) fn start(
        gateway: &Gateway,
        api: Api,
        route: &str,
        ctx: &CallContext,
        request: &ChatRequest,
    ) -> Self {
        let runtime = gateway.current();
        let route_config = runtime.config.routes.get(route);
        let route_deadline = route_config.map(|config| config.clocks.deadline);
        let deadline = match (ctx.deadline().is_bounded(), route_deadline) {
            (true, Some(route)) => ctx.deadline().remaining().min(route),
            (true, None) => ctx.deadline().remaining(),
            (false, Some(route)) => route,
            (false, None) => std::time::Duration::MAX,
        };
        let content = route_config.is_some_and(|config| config.trace_content).then(|| Content {
            input: serde_json::to_string(&request.messages).unwrap_or_default(),
            output: String::new(),
        });
        // The trace starts where the call reached rein; the steps before the engine took this.
        let offset_ms = ctx.deadline().elapsed_ms();
        Self {
            judged: Drawn::draw(&runtime.config.judge, route, ctx, request),
            deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            pinned: ctx.pin_tier.is_some() || ctx.skip_coverage,
            covered: ctx.covered,
            labels: ctx.labels.clone(),
            info: CallInfo {
                ids: ctx.trace.clone(),
                request_id: ctx.request_id.clone().unwrap_or_default(),
                started_unix_ms: rein_core::clock::unix_ms().saturating_sub(offset_ms),
                api: api.label().to_string(),
                request_model: route.to_string(),
                content,
                offset_ms,
                notes: ctx.notes.as_deref().cloned().unwrap_or_default(),
                ..CallInfo::default()
            },
        }
    }

    /// The trace id the call's response names.
    pub(super) fn trace_id(&self) -> Option<&str> {
        self.info.ids.as_ref().map(|ids| ids.trace_id.as_str())
    }

    /// The call is over: count its SLIs and hand it to the recorder (which never waits). The
    /// recorder keeps the report: given one the caller no longer needs, it takes it as it is.
    pub(super) fn finish(
        self,
        gateway: &Gateway,
        report: Cow<'_, CallReport>,
        usage: Option<Usage>,
        output: Option<&str>,
    ) {
        let Recording { deadline_ms, pinned, covered, labels, mut info, judged } = self;
        let report_ref: &CallReport = &report;
        // Only the keys the route slices by: a record's labels are bounded like its metrics.
        let labels: std::collections::BTreeMap<String, String> =
            labels.into_iter().filter(|(key, _)| report_ref.labels.contains_key(key)).collect();
        if let (Some(drawn), Some(served), Some(answer)) = (judged, &report_ref.served_by, output)
            && !answer.trim().is_empty()
        {
            let Drawn { draw, question, evidence } = *drawn;
            gateway.runtime.judge.submit(Sampled {
                at_unix_ms: i64::try_from(info.started_unix_ms).unwrap_or(i64::MAX),
                request_id: info.request_id.clone(),
                trace_id: info.ids.as_ref().map(|ids| ids.trace_id.clone()).unwrap_or_default(),
                route: report_ref.route.clone(),
                tier: Some(served.tier_name.clone()),
                model: Some(served.model.clone()),
                labels: labels.clone(),
                draw,
                question,
                evidence,
                answer: answer.to_string(),
            });
        }
        let mut record = CallRecord::of_report(report_ref, labels, deadline_ms);
        record.escalation = escalation_of(report_ref);
        record.covered = covered.or_else(|| {
            report_decided(report_ref).filter(|s| s.starts_with("coverage")).map(|_| false)
        });
        if !pinned {
            gateway.metrics.sli(&record);
        }
        let recorder = &gateway.runtime.recorder;
        if !recorder.enabled() {
            return;
        }
        info.usage = usage;
        if let (Some(content), Some(output)) = (&mut info.content, output) {
            content.output = output.to_string();
        }
        info.labels = report_ref.labels.clone();
        if let Some(trigger) = record.escalation
            && !info.notes.events.iter().any(|event| event.name == HANDOFF_EVENT)
        {
            // Sent to a person by what the engine did (checks failed, a degraded reply that
            // hands off, a stop): at the end of the call, when the hand-off is made.
            let at_ms = info.offset_ms + report_ref.elapsed_ms;
            info.notes
                .events
                .push(SpanEvent::new(HANDOFF_EVENT, at_ms).with("rein.trigger", trigger.as_str()));
        }
        let finished = Finished {
            // The call is recorded at the time it started, as its trace is.
            at_unix_ms: i64::try_from(info.started_unix_ms).unwrap_or(i64::MAX),
            report: report.into_owned(),
            info,
            record,
            pinned,
        };
        recorder.submit(finished);
    }
}

/// A tool call being recorded.
pub(super) struct ToolRecording {
    info: ToolCallInfo,
    /// Events of the steps around the dispatcher (the run's guard, stop, hand-off).
    events: Vec<SpanEvent>,
    deadline: rein_core::Deadline,
}

impl ToolRecording {
    /// Before the run's guard: the call's trace ids and labels.
    pub(super) fn start(ctx: &CallContext, tool: &str) -> Self {
        let since = ctx.deadline().elapsed_ms();
        Self {
            info: ToolCallInfo {
                ids: ctx.trace.clone(),
                request_id: ctx.request_id.clone().unwrap_or_default(),
                started_unix_ms: rein_core::clock::unix_ms().saturating_sub(since),
                tool: tool.to_string(),
                labels: ctx.labels.clone(),
                ..ToolCallInfo::default()
            },
            events: Vec::new(),
            deadline: *ctx.deadline(),
        }
    }

    /// Milliseconds since the call reached rein.
    pub(super) fn now_ms(&self) -> u64 {
        self.deadline.elapsed_ms()
    }

    /// Something the steps around the dispatcher did, now.
    pub(super) fn event(&mut self, event: SpanEvent) {
        self.events.push(event);
    }

    /// The trace id the call's response names.
    pub(super) fn trace_id(&self) -> Option<&str> {
        self.info.ids.as_ref().map(|ids| ids.trace_id.as_str())
    }

    /// The call is over with `status` (and the dispatcher's outcome, when it ran): hand it to
    /// the recorder, which never waits.
    pub(super) fn finish(self, gateway: &Gateway, status: &str, outcome: Option<&ToolOutcome>) {
        let recorder = &gateway.runtime.recorder;
        if !recorder.enabled() {
            return;
        }
        let ToolRecording { mut info, events, .. } = self;
        // A stopped run's call never reached the dispatcher: not a first-try answer.
        let notable = !outcome.is_some_and(ToolOutcome::first_try);
        info.elapsed_ms = self.deadline.elapsed_ms();
        info.status = status.to_string();
        if let Some(outcome) = outcome {
            info.served_by = outcome.served_by.clone();
            info.replayed = outcome.replayed;
            let envelope = &outcome.envelope;
            info.fidelity = envelope.get("fidelity").and_then(|v| v.as_str()).map(str::to_string);
            info.degraded = envelope.get("degraded").and_then(serde_json::Value::as_bool);
            info.notes = outcome.trace.clone();
        }
        info.notes.events.extend(events);
        let at_unix_ms = i64::try_from(info.started_unix_ms).unwrap_or(i64::MAX);
        recorder.submit_tool(FinishedTool { at_unix_ms, info, notable });
    }
}

fn report_decided(report: &CallReport) -> Option<&str> {
    report.steps.iter().find_map(|step| match step {
        Step::Decided { status } => Some(status.as_str()),
        _ => None,
    })
}

/// The trigger that sent the call's conversation to a person, as far as its report tells.
fn escalation_of(report: &CallReport) -> Option<Trigger> {
    for step in &report.steps {
        match step {
            Step::Decided { status } if report.outcome == rein_core::Outcome::HandedOff => {
                let trigger = status.split(':').next().unwrap_or_default();
                return Trigger::parse(trigger);
            }
            Step::DegradedActed { handoff: true, .. } => return Some(Trigger::Degraded),
            Step::RunStopped { .. } => return Some(Trigger::StopCondition),
            _ => {}
        }
    }
    let checks_failed = report.served_by.is_none()
        && report.steps.iter().any(|step| {
            matches!(step, Step::TierSkipped { reason: rein_core::SkipReason::ChecksFailed, .. })
        });
    checks_failed.then_some(Trigger::ChecksFailed)
}
