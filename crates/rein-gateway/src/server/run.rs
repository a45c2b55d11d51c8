//! What happens around a model call that is part of an agent run, in the spec's order. Before
//! the engine: the run's evidence joins the call's, the call is counted against the run's stop
//! conditions (its route's limits and the conversation's spend), then the hand-off rules read
//! the customer's message (asks for a person, the same question again, nothing found), then the
//! coverage check scores the evidence. A stop, a hand-off or a clarifying question is a
//! decision the engine answers with the route's decided reply, without a provider. After the
//! engine ([`Followup`]): what the answer cost is added to the conversation's spend, the draft
//! is noted for the run's packet, and an answer that failed its checks after its one repair
//! sends the conversation to a person.

use rein_core::coverage::{Declined, Verdict};
use rein_core::handoff::{AttemptsSummary, HandoffRule, Trigger};
use rein_core::validate::Evidence;
use rein_core::{CallContext, CallReport, ChatRequest, Completion, Decided, Outcome, Step};
use rein_runtime::Snapshot;
use rein_runtime::escalation::Escalation;
use rein_runtime::runs::RunStep;
use rein_store::StoreError;
use rein_store::runs::RunNote;

use rein_core::trace::SpanKind;

use super::Gateway;
use super::error::{Api, ApiError};
use super::record::handoff_event;
use crate::wire::ErrorKind;

/// What is left to do once a call in a run or a conversation is answered: its context, boxed
/// (it travels with the call's futures). A call in neither has no one to hand off to and nothing
/// to count, so it has none.
#[derive(Debug, Clone)]
pub(super) struct Followup {
    ctx: Box<CallContext>,
}

impl Followup {
    fn of(ctx: &CallContext) -> Option<Followup> {
        (ctx.run_id.is_some() || ctx.conversation_id.is_some())
            .then(|| Followup { ctx: Box::new(ctx.clone()) })
    }
}

/// The run's steps before the engine. Returns the context the engine runs with (a decision in
/// it, if one was made) and what to do after. A call outside a run on a route that escalates
/// nothing has no step to take: it is answered at once, without entering the (boxed) steps, so
/// the common call carries none of their state.
pub(super) async fn before(
    gateway: &Gateway,
    runtime: &Snapshot,
    api: Api,
    route: &str,
    request: &ChatRequest,
    ctx: CallContext,
    request_id: &str,
) -> Result<(CallContext, Option<Followup>), ApiError> {
    let route_config = runtime.config.routes.get(route);
    let escalation = route_config.map(|config| &config.escalation).filter(|e| e.acts_before_call());
    if ctx.run_id.is_none() && escalation.is_none() {
        let followup = Followup::of(&ctx);
        return Ok((ctx, followup));
    }
    let call = Call { api, route, route_config, escalation, request, request_id };
    Box::pin(steps(gateway, runtime, call, ctx)).await
}

/// What the steps before a call read of it.
struct Call<'a> {
    api: Api,
    route: &'a str,
    route_config: Option<&'a rein_runtime::config::RouteConfig>,
    /// The route's escalation settings, when something runs before its calls.
    escalation: Option<&'a rein_runtime::config::escalation::RouteEscalation>,
    request: &'a ChatRequest,
    request_id: &'a str,
}

async fn steps(
    gateway: &Gateway,
    runtime: &Snapshot,
    call: Call<'_>,
    mut ctx: CallContext,
) -> Result<(CallContext, Option<Followup>), ApiError> {
    let Call { api, route, route_config, escalation, request, request_id } = call;
    let unavailable = |error: StoreError| {
        tracing::error!(request_id, "run store failed: {error}");
        let message = "rein's run store is unavailable; the call was not made.";
        ApiError::new(api, ErrorKind::Unavailable, message, request_id)
    };
    let message = request.last_user_text().map(str::to_string);
    let stops = &gateway.runtime.stops;
    if ctx.run_id.is_some() {
        // In one store transaction: the call is counted and judged, noted when it goes, and
        // what the run's tool calls returned through rein is read; that evidence comes first,
        // then what the caller sent.
        let limits = runtime.config.runs.for_route(route_config);
        let note = RunNote {
            route: Some(route.to_string()),
            message: message.clone(),
            ..RunNote::default()
        };
        let (step, mut items) = stops
            .model_call(&runtime.config.runs, &limits, &ctx, &note)
            .await
            .map_err(unavailable)?;
        if !items.is_empty() {
            items.extend(ctx.evidence.items().iter().cloned());
            ctx.evidence = Evidence::from_items(items);
        }
        if let RunStep::Stopped { status, now } = step {
            if now {
                gateway.metrics.run_stopped(&status);
                let mut stop = Escalation::stopped(&status, Some(route.to_string()));
                stop.message = message.clone();
                let created = hand_off(gateway, runtime, &ctx, request_id, route, stop).await;
                note_handoff(&mut ctx, Trigger::StopCondition, &status, created);
            }
            stop_facts(&mut ctx, stops, &status).await;
            ctx.run_stopped = Some(status);
            return Ok((ctx, None));
        }
    }
    let followup = Followup::of(&ctx);
    let Some(escalation) = escalation else { return Ok((ctx, followup)) };
    let Some(message) = message else { return Ok((ctx, followup)) };

    // The hand-off rules read the customer's message alone.
    let rules = &escalation.rules;
    let fired = if let Some(phrase) = rules.asks_for_person(&message) {
        Some((
            HandoffRule::AsksForPerson,
            format!("the customer asked for a person (\"{phrase}\")"),
        ))
    } else if rules.repeated_question
        && stops.question_repeated(&ctx, &message).await.map_err(unavailable)?
    {
        Some((
            HandoffRule::RepeatedQuestion,
            "the customer asked the same question again in this conversation".to_string(),
        ))
    } else if rules.no_evidence
        && ctx.evidence.is_empty()
        && stops.info(&ctx).await.map_err(unavailable)?.is_some_and(|info| info.tool_calls > 0)
    {
        Some((HandoffRule::NoEvidence, "the run's tools found nothing to answer from".to_string()))
    } else {
        None
    };
    if let Some((rule, reason)) = fired {
        let mut handoff = Escalation::new(Trigger::HandoffRule, reason);
        handoff.route = Some(route.to_string());
        handoff.message = Some(message.clone());
        handoff.evidence = ctx.evidence.items().to_vec();
        let created = hand_off(gateway, runtime, &ctx, request_id, route, handoff).await;
        note_handoff(&mut ctx, Trigger::HandoffRule, rule.as_str(), created);
        let status = format!("{}:{}", Trigger::HandoffRule.as_str(), rule.as_str());
        ctx.decided = escalation
            .handoff_reply
            .clone()
            .map(|reply| Box::new(Decided { outcome: Outcome::HandedOff, status, reply }));
        return Ok((ctx, followup));
    }

    // The coverage check, after retrieval and before drafting: once per run (an eval sweeping
    // its cutoff skips it, to see the answer whatever the score).
    let Some(check) = &escalation.coverage else { return Ok((ctx, followup)) };
    if ctx.evidence.is_empty() || ctx.skip_coverage {
        return Ok((ctx, followup));
    }
    let known = match stops.info(&ctx).await.map_err(unavailable)? {
        Some(info) => info.coverage.and_then(|value| serde_json::from_value::<Verdict>(value).ok()),
        None => None,
    };
    let verdict = match known {
        Some(verdict) => verdict,
        None => {
            let engine = &gateway.runtime.engine;
            let start_ms = ctx.deadline().elapsed_ms();
            let judged = check.judge(engine, &ctx, &message, ctx.evidence.items()).await;
            note_coverage(&mut ctx, start_ms, judged.as_ref());
            match judged {
                Ok(verdict) => {
                    let method = verdict.method.as_str();
                    let label = if verdict.covered { "covered" } else { "not_covered" };
                    gateway.metrics.coverage_checked(route, method, label);
                    tracing::info!(
                        request_id,
                        route,
                        score = verdict.score,
                        cutoff = verdict.cutoff,
                        method,
                        "coverage checked"
                    );
                    let note = RunNote {
                        coverage: serde_json::to_value(&verdict).ok(),
                        ..RunNote::default()
                    };
                    stops.note(&ctx, &note).await.map_err(unavailable)?;
                    verdict
                }
                Err(error) => {
                    // The check could not be made: the answer's own checks still hold it.
                    gateway.metrics.coverage_checked(route, "error", "error");
                    tracing::warn!(
                        request_id,
                        route,
                        "coverage check failed, not applied: {error}"
                    );
                    return Ok((ctx, followup));
                }
            }
        }
    };
    ctx.covered = Some(verdict.covered);
    if verdict.covered {
        return Ok((ctx, followup));
    }
    match check.declined(&message) {
        Declined::Clarify(question) => {
            ctx.decided = Some(Box::new(Decided {
                outcome: Outcome::Clarified,
                status: "coverage:clarify".to_string(),
                reply: rein_core::DegradedReply::text(question),
            }));
        }
        Declined::Handoff => {
            let reason = format!(
                "coverage {:.3} under the cutoff {:.2} ({})",
                verdict.score,
                verdict.cutoff,
                verdict.method.as_str()
            );
            let mut handoff = Escalation::new(Trigger::Coverage, reason);
            handoff.route = Some(route.to_string());
            handoff.message = Some(message.clone());
            handoff.evidence = ctx.evidence.items().to_vec();
            handoff.coverage = serde_json::to_value(&verdict).ok();
            let created = hand_off(gateway, runtime, &ctx, request_id, route, handoff).await;
            note_handoff(&mut ctx, Trigger::Coverage, verdict.method.as_str(), created);
            ctx.decided = escalation.handoff_reply.clone().map(|reply| {
                Box::new(Decided {
                    outcome: Outcome::HandedOff,
                    status: Trigger::Coverage.as_str().to_string(),
                    reply,
                })
            });
        }
    }
    Ok((ctx, followup))
}

/// The facts of a stop, for the decided reply's template: `{{status}}`, and the arguments of
/// the run's last tool call (`{{order_id}}` of the lookup it kept repeating), where the caller
/// did not set them.
async fn stop_facts(ctx: &mut CallContext, stops: &rein_runtime::runs::RunStops, status: &str) {
    ctx.vars.entry("status".to_string()).or_insert_with(|| status.to_string());
    let Ok(log) = stops.tool_log(ctx).await else { return };
    let Some(last) = log.last() else { return };
    ctx.vars.entry("tool".to_string()).or_insert_with(|| last.tool.clone());
    if let Some(args) = last.args.as_object() {
        for (name, value) in args {
            let text = match value {
                serde_json::Value::String(text) => {
                    text.chars().filter(|c| !c.is_control()).take(200).collect()
                }
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                _ => continue,
            };
            ctx.vars.entry(name.clone()).or_insert(text);
        }
    }
}

/// Send the call's conversation to a person (once per conversation), counting it when this
/// made the hand-off. A store failure is logged: the customer still gets the decided reply.
/// Whether this made the hand-off (`false`: the conversation already had one), or `None` when
/// it could not be kept.
pub(super) async fn hand_off(
    gateway: &Gateway,
    runtime: &Snapshot,
    ctx: &CallContext,
    request_id: &str,
    route: &str,
    escalation: Escalation,
) -> Option<bool> {
    let trigger = escalation.trigger;
    let handed = gateway
        .runtime
        .escalations
        .hand_off(&runtime.config.handoffs, &runtime.tools, ctx, request_id, escalation)
        .await;
    match handed {
        Ok(handed) => {
            if handed.created {
                gateway.metrics.escalated(route, trigger.as_str());
            }
            Some(handed.created)
        }
        Err(error) => {
            tracing::error!(request_id, route, "hand-off not kept: {error}");
            None
        }
    }
}

/// A hand-off made before the engine ran, on the call's trace: its trigger, what fired it
/// (`rule`: the hand-off rule, the stop, the coverage method) and whether it was kept.
fn note_handoff(ctx: &mut CallContext, trigger: Trigger, rule: &str, created: Option<bool>) {
    let event = handoff_event(ctx.deadline().elapsed_ms(), trigger, rule, created);
    ctx.notes_mut().events.push(event);
}

/// The coverage check on the call's trace: a span over its model calls (the judge's), with
/// its score against the cutoff, or the error that kept it from being applied.
fn note_coverage(
    ctx: &mut CallContext,
    start_ms: u64,
    judged: Result<&Verdict, &rein_core::CallError>,
) {
    let end_ms = ctx.deadline().elapsed_ms();
    let span = ctx.notes_mut().span("coverage_check", SpanKind::Client, start_ms, end_ms);
    span.attributes.insert("gen_ai.operation.name".into(), "chat".into());
    match judged {
        Ok(verdict) => {
            let attrs = &mut span.attributes;
            attrs.insert("rein.coverage.method".into(), verdict.method.as_str().into());
            attrs.insert("rein.coverage.score".into(), verdict.score.into());
            attrs.insert("rein.coverage.cutoff".into(), verdict.cutoff.into());
            attrs.insert("rein.coverage.covered".into(), verdict.covered.into());
            attrs.insert("rein.coverage.label".into(), verdict.label.clone().into());
            attrs.insert("rein.coverage.calls".into(), verdict.calls.into());
        }
        Err(_) => {
            span.attributes.insert("error.type".into(), "coverage_check_failed".into());
            span.error = Some("the coverage check could not be made".to_string());
        }
    }
}

impl Followup {
    /// Whether [`Followup::finished`] has anything to do for this call: always in a run (its
    /// spend and draft), else only for an answer that failed its checks for good.
    pub(super) fn needed(&self, report: &CallReport) -> bool {
        self.ctx.run_id.is_some() || failed_checks(report)
    }

    /// The call is over: its spend, its draft, and a hand-off when its answer failed its checks
    /// for good (boxed: the common call carries none of that state).
    pub(super) async fn finished(
        self,
        gateway: &Gateway,
        completion: Option<&Completion>,
        report: &CallReport,
    ) {
        if self.needed(report) {
            Box::pin(self.finish(gateway, completion, report)).await;
        }
    }

    async fn finish(self, gateway: &Gateway, completion: Option<&Completion>, report: &CallReport) {
        let runtime = gateway.current();
        let stops = &gateway.runtime.stops;
        let request_id = self.ctx.request_id.clone().unwrap_or_default();
        if let Some(done) = completion
            && let Some(served) = &report.served_by
            && self.ctx.run_id.is_some()
        {
            let cost = price_of(&runtime.config.prices, &served.model)
                .map(|price| price.cost_micro_usd(&done.response.usage));
            let text = &done.response.text;
            let draft = (!text.is_empty()).then_some(text.as_str());
            if let Err(error) = stops.model_call_done(&self.ctx, cost, draft).await {
                tracing::error!(request_id, "spend and draft not recorded: {error}");
            }
        }
        if failed_checks(report) {
            let mut handoff = Escalation::new(
                Trigger::ChecksFailed,
                "the answer failed its checks after its one repair",
            );
            handoff.route = Some(report.route.clone());
            handoff.draft = report.rejected_draft.clone();
            handoff.attempts = Some(AttemptsSummary::of(report));
            handoff.evidence = self.ctx.evidence.items().to_vec();
            hand_off(gateway, &runtime, &self.ctx, &request_id, &report.route, handoff).await;
        }
    }
}

/// No tier served the call and an answer was thrown away for failing its checks after its
/// repair.
fn failed_checks(report: &CallReport) -> bool {
    report.served_by.is_none()
        && report.steps.iter().any(|step| {
            matches!(step, Step::TierSkipped { reason, .. } if *reason == rein_core::SkipReason::ChecksFailed)
        })
}

/// The price of a model: its own entry, else the longest entry it starts with (a dated
/// snapshot of a priced model).
fn price_of<'a>(
    prices: &'a std::collections::BTreeMap<String, rein_core::run::ModelPrice>,
    model: &str,
) -> Option<&'a rein_core::run::ModelPrice> {
    prices.get(model).or_else(|| {
        prices
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, price)| price)
    })
}
