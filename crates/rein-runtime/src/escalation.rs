//! Hand-offs: a conversation sent to a person, with its packet. [`Escalations::hand_off`]
//! builds the [`HandoffPacket`] from what rein itself saw of the run (the customer's message,
//! the draft, the evidence its tools returned, its tool calls, the call's attempts), keeps it in
//! the store (one hand-off per conversation, whichever replica or retry gets there first), and
//! delivers it through `[handoffs] tool`: an ordinary write tool whose key comes from the
//! conversation, so its ladder, outbox and duplicate guard make one ticket per conversation
//! however often the hand-off is retried, by rein or by the caller calling the same tool. A
//! share of hand-offs (`canary_rate`) is followed by a canary: a draft known to be wrong, marked
//! only in the store, so the review stats show how many of them reviewers catch. A hand-off
//! drill ([`Escalations::seed_drill`]) seeds conversations under their own trigger, `drill`, to
//! time the replies.

use std::sync::Arc;

use rand::RngExt;
use rein_core::CallContext;
use rein_core::handoff::{
    AttemptsSummary, HandoffPacket, PACKET_SCHEMA_VERSION, ToolCallLine, Trigger, trace_url,
};
use rein_core::validate::EvidenceItem;
use rein_store::StoreError;
use rein_store::handoffs::{
    Handoff, HandoffDelivery, HandoffFilter, NewHandoff, ReviewDecision, ReviewStats,
};
use rein_store::tools::ToolStore;
use rein_tools::{Dispatcher, ToolStatus};
use serde_json::Value;

use crate::config::escalation::HandoffsConfig;

/// One escalation, as the layer that decided it knows it.
#[derive(Debug, Clone)]
pub struct Escalation {
    pub trigger: Trigger,
    /// What fired, in the trigger's terms.
    pub reason: String,
    pub route: Option<String>,
    pub stop_status: Option<String>,
    pub draft: Option<String>,
    pub attempts: Option<AttemptsSummary>,
    pub coverage: Option<Value>,
    /// The customer's message, when this call carries it (else the run's, from the store).
    pub message: Option<String>,
    /// The evidence this call carried (the run's tool results are read from the store).
    pub evidence: Vec<EvidenceItem>,
}

impl Escalation {
    /// A stop condition's escalation: the stop's status is its reason.
    pub fn stopped(status: &str, route: Option<String>) -> Self {
        Self {
            stop_status: Some(status.to_string()),
            route,
            ..Self::new(Trigger::StopCondition, status)
        }
    }

    pub fn new(trigger: Trigger, reason: impl Into<String>) -> Self {
        Self {
            trigger,
            reason: reason.into(),
            route: None,
            stop_status: None,
            draft: None,
            attempts: None,
            coverage: None,
            message: None,
            evidence: Vec::new(),
        }
    }
}

/// A hand-off made or found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedOff {
    pub id: i64,
    pub conversation_id: String,
    /// This escalation made it (false: the conversation had one already).
    pub created: bool,
}

/// Makes, keeps and delivers hand-offs.
#[derive(Debug, Clone)]
pub struct Escalations {
    store: Arc<dyn ToolStore>,
}

impl Escalations {
    pub fn new(store: Arc<dyn ToolStore>) -> Self {
        Self { store }
    }

    /// The conversation a call's hand-off belongs to: its conversation, else its run, else the
    /// request alone.
    pub fn conversation_of(ctx: &CallContext, request_id: &str) -> String {
        ctx.conversation_id
            .clone()
            .or_else(|| ctx.run_id.clone())
            .unwrap_or_else(|| format!("request:{request_id}"))
    }

    /// Hand the call's conversation to a person: the packet kept (once per conversation) and,
    /// when this made it, delivered in the background through the hand-off tool.
    pub async fn hand_off(
        &self,
        config: &HandoffsConfig,
        tools: &Arc<Dispatcher>,
        ctx: &CallContext,
        request_id: &str,
        escalation: Escalation,
    ) -> Result<HandedOff, StoreError> {
        let conversation = Self::conversation_of(ctx, request_id);
        // A conversation handed off already needs no packet (three reads of the run); the open
        // below still settles a race between replicas.
        if let Some(found) = self.store.handoff_find(&conversation).await? {
            return Ok(HandedOff { id: found.id, conversation_id: conversation, created: false });
        }
        let packet = self.packet(config, ctx, request_id, &conversation, escalation).await?;
        let (handoff, created) =
            self.open(&conversation, ctx.run_id.clone(), &packet, false).await?;
        if created {
            tracing::info!(
                request_id,
                conversation = %conversation,
                trigger = packet.trigger.as_str(),
                reason = %packet.reason,
                handoff = handoff.id,
                "conversation handed off"
            );
            self.deliver(config, tools, ctx, &handoff);
            self.maybe_canary(config, tools, ctx).await;
        }
        Ok(HandedOff { id: handoff.id, conversation_id: conversation, created })
    }

    /// Hand-offs, newest first.
    pub async fn list(
        &self,
        filter: &HandoffFilter,
        limit: i64,
    ) -> Result<Vec<Handoff>, StoreError> {
        self.store.handoff_list(filter, limit).await
    }

    /// One hand-off.
    pub async fn get(&self, id: i64) -> Result<Option<Handoff>, StoreError> {
        self.store.handoff_get(id).await
    }

    /// A reviewer's decision on a hand-off's draft; only the first counts (`None`: missing or
    /// decided already).
    pub async fn decide(
        &self,
        id: i64,
        decision: ReviewDecision,
        by: &str,
        edited_draft: Option<&str>,
        note: &str,
    ) -> Result<Option<Handoff>, StoreError> {
        self.store.handoff_decide(id, decision, by, edited_draft, note, now_ms()).await
    }

    /// Per trigger: how often reviewers changed the draft, and how many canaries they caught,
    /// over the hand-offs made since `since_unix_ms`.
    pub async fn review_stats(
        &self,
        config: &HandoffsConfig,
        since_unix_ms: i64,
    ) -> Result<Vec<ReviewReport>, StoreError> {
        let stats = self.store.handoff_review_stats(since_unix_ms).await?;
        Ok(stats
            .into_iter()
            .map(|stats| {
                let edit_rate =
                    (stats.decided > 0).then(|| stats.changed as f64 / stats.decided as f64);
                let catch_rate = (stats.canaries_decided > 0)
                    .then(|| stats.canaries_caught as f64 / stats.canaries_decided as f64);
                let flagged = stats.decided >= i64::from(config.edit_rate_min_decided)
                    && edit_rate.is_some_and(|rate| rate < config.edit_rate_floor);
                ReviewReport { stats, edit_rate, catch_rate, flagged }
            })
            .collect())
    }

    async fn open(
        &self,
        conversation: &str,
        run_id: Option<String>,
        packet: &HandoffPacket,
        canary: bool,
    ) -> Result<(Handoff, bool), StoreError> {
        let value = serde_json::to_value(packet).unwrap_or(Value::Null);
        let new = NewHandoff {
            conversation_id: conversation.to_string(),
            run_id,
            route: packet.route.clone(),
            trigger: packet.trigger.as_str().to_string(),
            stop_status: packet.stop_status.clone(),
            packet: value,
            canary,
        };
        self.store.handoff_open(&new, now_ms()).await
    }

    async fn packet(
        &self,
        config: &HandoffsConfig,
        ctx: &CallContext,
        request_id: &str,
        conversation: &str,
        escalation: Escalation,
    ) -> Result<HandoffPacket, StoreError> {
        let (mut message, mut route, mut draft) =
            (escalation.message, escalation.route, escalation.draft);
        let mut evidence = Vec::new();
        let mut tool_calls = Vec::new();
        if let Some(run) = &ctx.run_id {
            if let Some(info) = self.store.run_get(run).await? {
                message = message.or(info.message);
                route = route.or(info.route);
                draft = draft.or(info.draft);
            }
            for call in self.store.run_tool_log(run).await? {
                tool_calls.push(ToolCallLine {
                    tool: call.tool,
                    args: call.args,
                    status: call.status,
                    result: call.result,
                    at_unix_ms: call.at_unix_ms,
                });
            }
            for value in self.store.run_evidence(run, 0).await? {
                if let Ok(item) = serde_json::from_value::<EvidenceItem>(value)
                    && !evidence.contains(&item)
                {
                    evidence.push(item);
                }
            }
        }
        for item in escalation.evidence {
            if !evidence.contains(&item) {
                evidence.push(item);
            }
        }
        let trace_id = ctx.trace.as_ref().map(|ids| ids.trace_id.clone());
        let template = match (&config.trace_url, &trace_id) {
            (Some(template), _) => Some(template.as_str()),
            (None, Some(_)) => Some(rein_core::handoff::DEFAULT_TRACE_URL),
            (None, None) => None,
        };
        let trace = template.map(|template| {
            let id = trace_id.as_deref().unwrap_or("");
            trace_url(template, id, ctx.run_id.as_deref(), conversation, request_id)
        });
        Ok(HandoffPacket {
            schema_version: PACKET_SCHEMA_VERSION,
            conversation_id: conversation.to_string(),
            run_id: ctx.run_id.clone(),
            route,
            trigger: escalation.trigger,
            reason: escalation.reason,
            stop_status: escalation.stop_status,
            customer_message: message,
            draft,
            evidence,
            tool_calls,
            attempts: escalation.attempts,
            coverage: escalation.coverage,
            trace_id,
            trace_url: trace,
            created_unix_ms: now_ms(),
        })
    }

    /// Deliver a kept hand-off through the hand-off tool, off the caller's path, on the
    /// escalating call's clock (a write that cannot be sent in time waits in the outbox); its
    /// state lands in the store.
    fn deliver(
        &self,
        config: &HandoffsConfig,
        tools: &Arc<Dispatcher>,
        ctx: &CallContext,
        handoff: &Handoff,
    ) {
        let Some(tool) = config.tool.clone() else { return };
        let (store, tools, handoff) = (self.store.clone(), tools.clone(), handoff.clone());
        let ctx = ctx.child().conversation(handoff.conversation_id.clone());
        tokio::spawn(async move {
            let (delivery, ticket, detail) = match tools
                .call(&ctx, &tool, handoff.packet.clone())
                .await
            {
                Ok(outcome) => {
                    let detail =
                        outcome.envelope.get("detail").and_then(Value::as_str).map(str::to_string);
                    match outcome.status {
                        ToolStatus::Ok => (
                            HandoffDelivery::Delivered,
                            outcome.envelope.get("result").cloned(),
                            detail,
                        ),
                        ToolStatus::Queued | ToolStatus::PendingApproval => {
                            (HandoffDelivery::Queued, None, detail)
                        }
                        _ => (HandoffDelivery::Failed, None, detail),
                    }
                }
                Err(error) => (HandoffDelivery::Failed, None, Some(error.to_string())),
            };
            tracing::info!(
                handoff = handoff.id,
                tool = %tool,
                delivery = ?delivery,
                "hand-off delivered through its tool"
            );
            let result = store
                .handoff_delivery(
                    handoff.id,
                    delivery,
                    ticket.as_ref(),
                    detail.as_deref(),
                    now_ms(),
                )
                .await;
            if let Err(error) = result {
                tracing::error!(handoff = handoff.id, "hand-off delivery not recorded: {error}");
            }
        });
    }

    /// A hand-off drill: `count` seeded conversations of `route` opened in the queue (trigger
    /// `drill`, so the review stats of real triggers leave them out; the packet says `drill`)
    /// and delivered through the hand-off tool like real ones, so the people on the other end
    /// answer them as they would a customer. The hand-offs made, oldest first.
    pub async fn seed_drill(
        &self,
        config: &HandoffsConfig,
        tools: &Arc<Dispatcher>,
        ctx: &CallContext,
        route: &str,
        count: usize,
        author: &str,
    ) -> Result<Vec<Handoff>, StoreError> {
        let mut made = Vec::with_capacity(count);
        for index in 1..=count {
            let conversation = format!("drill-{}", uuid_like());
            let packet = HandoffPacket {
                schema_version: PACKET_SCHEMA_VERSION,
                conversation_id: conversation.clone(),
                run_id: None,
                route: Some(route.to_string()),
                trigger: Trigger::HandoffRule,
                reason: format!(
                    "drill {index}/{count} started by {author}: time the reply to a seeded conversation"
                ),
                stop_status: None,
                customer_message: Some(format!(
                    "(drill) Seeded conversation {index} of {count}: please reply as you would to a customer."
                )),
                draft: None,
                evidence: Vec::new(),
                tool_calls: Vec::new(),
                attempts: None,
                coverage: None,
                trace_id: None,
                trace_url: None,
                created_unix_ms: now_ms(),
            };
            let mut value = serde_json::to_value(&packet).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut value {
                map.insert("drill".into(), Value::Bool(true));
            }
            let new = NewHandoff {
                conversation_id: conversation.clone(),
                run_id: None,
                route: Some(route.to_string()),
                trigger: DRILL_TRIGGER.to_string(),
                stop_status: None,
                packet: value,
                canary: false,
            };
            let (handoff, created) = self.store.handoff_open(&new, now_ms()).await?;
            if created {
                tracing::info!(
                    route,
                    handoff = handoff.id,
                    author,
                    "hand-off drill: conversation seeded"
                );
                let mut posing = ctx.child();
                posing.run_id = None;
                self.deliver(config, tools, &posing, &handoff);
            }
            made.push(handoff);
        }
        Ok(made)
    }

    /// After a real hand-off: a canary draft, at `canary_rate`.
    async fn maybe_canary(
        &self,
        config: &HandoffsConfig,
        tools: &Arc<Dispatcher>,
        ctx: &CallContext,
    ) {
        if config.canaries.is_empty() || config.canary_rate <= 0.0 {
            return;
        }
        let (roll, pick) = {
            let mut rng = rand::rng();
            (rng.random::<f64>(), rng.random_range(0..config.canaries.len()))
        };
        if roll >= config.canary_rate {
            return;
        }
        let canary = &config.canaries[pick];
        let conversation = format!("conv-{}", uuid_like());
        let packet = HandoffPacket {
            schema_version: PACKET_SCHEMA_VERSION,
            conversation_id: conversation.clone(),
            run_id: None,
            route: None,
            trigger: canary.trigger,
            reason: posed_reason(canary.trigger).into(),
            stop_status: None,
            customer_message: Some(canary.message.clone()),
            draft: Some(canary.draft.clone()),
            evidence: canary.evidence.clone(),
            tool_calls: Vec::new(),
            attempts: None,
            coverage: None,
            trace_id: None,
            trace_url: None,
            created_unix_ms: now_ms(),
        };
        match self.open(&conversation, None, &packet, true).await {
            Ok((handoff, true)) => {
                let mut posing = ctx.child();
                posing.run_id = None;
                self.deliver(config, tools, &posing, &handoff);
            }
            Ok(_) => {}
            Err(error) => tracing::error!("canary hand-off not kept: {error}"),
        }
    }
}

/// The trigger of a hand-off drill's seeded conversations.
pub const DRILL_TRIGGER: &str = "drill";

/// Review stats of one trigger, with the rates and the flag.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ReviewReport {
    #[serde(flatten)]
    pub stats: ReviewStats,
    /// Drafts changed (edited or rejected) per decision, canaries left out.
    pub edit_rate: Option<f64>,
    /// Canaries caught (edited or rejected) per canary decided.
    pub catch_rate: Option<f64>,
    /// The edit rate stays under `[handoffs] edit_rate_floor` over enough decisions: nobody is
    /// reading, or the trigger is too loose.
    pub flagged: bool,
}

/// The reason a canary gives, as a real hand-off of its trigger would.
fn posed_reason(trigger: Trigger) -> &'static str {
    match trigger {
        Trigger::HandoffRule => "a hand-off rule fired on the customer's message",
        Trigger::Coverage => "the coverage check scored the evidence under its cutoff",
        Trigger::ChecksFailed => "the answer failed its checks after its one repair",
        Trigger::StopCondition => "the run hit a stop condition",
        Trigger::Gate => "a gate held the action for a person",
        Trigger::Degraded => "no model could answer",
    }
}

/// A random id that reads like the ones callers send (so a canary cannot be told by its id).
fn uuid_like() -> String {
    let mut rng = rand::rng();
    let (a, b): (u64, u64) = (rng.random(), rng.random());
    format!("{:08x}-{:04x}-{:012x}", a >> 32, b >> 48, b & 0xffff_ffff_ffff)
}

/// The wall clock, in the store's units.
fn now_ms() -> i64 {
    i64::try_from(rein_core::clock::unix_ms()).unwrap_or(i64::MAX)
}
