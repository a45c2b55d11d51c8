//! The dispatcher: the one type a tool call goes through, with every public method (calls,
//! the operator's outbox and approvals, replay, evidence). A call's arguments are checked against
//! the tool's URLs before any rung runs (a missing one, an object, a `..` path segment are the
//! caller's mistake); then a read walks its ladder (`read.rs`: each rung with its own budget,
//! never past the call's deadline, and its own breaker, ending in a structured refusal), a write
//! takes the same walk with idempotency keys, gates and the outbox (`write.rs`), and queued
//! writes replay in `replay.rs`. The concept modules hold the logic; the methods here delegate.

use std::sync::Arc;
use std::time::Duration;

use rein_core::breaker::{Admission, BreakerState, Permit};
use rein_core::retry::{Jitter, SeededJitter};
use rein_core::validate::EvidenceItem;
use rein_core::{CallContext, Deadline};
use rein_store::tools::{Hold, HoldState, OutboxItem, OutboxState, OutboxStats, Pruned, ToolStore};
use serde::Serialize;
use serde_json::Value;

use crate::clock::{SystemClock, WallClock};
use crate::config::{ConfigError, ToolKind, ToolsConfig, ToolsPlan};
use crate::envelope::{self, Envelope, ToolStatus};
use crate::error::ToolError;
use crate::ladder::{Bulkhead, Rung, Target, Tool};
use crate::observer::{LADDER_EXHAUSTED, NoopObserver, ToolObserver};
use crate::replay::{self, ReplayReport};
use crate::trace::RungLog;
use crate::{evidence, operator, write};

/// How a call ended: the envelope the model sees, and the facts the caller's headers and logs
/// need without parsing it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub envelope: Value,
    pub status: ToolStatus,
    /// The source of the rung that served (or refused) the call; `None` when none did.
    pub served_by: Option<String>,
    /// True when the envelope is a stored result returned for a repeated idempotency key:
    /// nothing ran this time.
    pub replayed: bool,
    /// What the call did, for its trace: a span per rung that ran, events for the rest, timed
    /// since the call's context started.
    pub trace: rein_core::trace::Notes,
}

/// One rung's breaker, for operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RungBreaker {
    pub tool: String,
    pub rung: usize,
    pub source: String,
    pub state: BreakerState,
}

/// The tool dispatcher. Cheap to share behind an `Arc`; breakers and bulkheads live as long as
/// it does.
#[derive(Debug)]
pub struct Dispatcher {
    /// The ladders, outbox settings and secrets to redact (the validated config).
    pub(crate) plan: Arc<ToolsPlan>,
    pub(crate) store: Arc<dyn ToolStore>,
    pub(crate) http: reqwest::Client,
    pub(crate) observer: Arc<dyn ToolObserver>,
    pub(crate) jitter: Arc<dyn Jitter>,
    pub(crate) clock: Arc<dyn WallClock>,
}

impl Dispatcher {
    /// Compile `config` into ladders over `store`, sending http rungs through `http`.
    /// `headers_env` values are read from the process environment.
    pub fn new(
        config: &ToolsConfig,
        store: Arc<dyn ToolStore>,
        http: reqwest::Client,
    ) -> Result<Dispatcher, ConfigError> {
        Self::with_env(config, store, http, &|name| std::env::var(name).ok())
    }

    /// As [`Dispatcher::new`], with `headers_env` values looked up in `env`.
    pub fn with_env(
        config: &ToolsConfig,
        store: Arc<dyn ToolStore>,
        http: reqwest::Client,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Dispatcher, ConfigError> {
        Ok(Self::from_plan(Arc::new(config.compile(env)?), store, http))
    }

    /// The dispatcher that runs `plan` (made by [`ToolsConfig::compile`]) over `store`, sending
    /// http rungs through `http`. Dispatchers of one plan share its breakers and bulkheads.
    pub fn from_plan(
        plan: Arc<ToolsPlan>,
        store: Arc<dyn ToolStore>,
        http: reqwest::Client,
    ) -> Dispatcher {
        let seed = rein_core::clock::unix_ms();
        Dispatcher {
            plan,
            store,
            http,
            observer: Arc::new(NoopObserver),
            jitter: Arc::new(SeededJitter::new(seed)),
            clock: Arc::new(SystemClock),
        }
    }

    /// Report to `observer` (metrics).
    pub fn with_observer(mut self, observer: Arc<dyn ToolObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Draw the replay backoff's jitter from `jitter` (tests fix it).
    pub fn with_jitter(mut self, jitter: Arc<dyn Jitter>) -> Self {
        self.jitter = jitter;
        self
    }

    /// Read stored times from `clock` (tests move it).
    pub fn with_wall_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.clock = clock;
        self
    }

    /// Whether a tool of this name is configured, or is an MCP server's listed tool rein has
    /// made a ladder for.
    pub fn has_tool(&self, name: &str) -> bool {
        self.tool_now(name).is_some()
    }

    /// Whether `name` is a tool rein serves: configured, or listed by an MCP server (asked
    /// within `deadline` when rein has not made its ladder yet).
    pub async fn knows(&self, name: &str, deadline: &Deadline) -> bool {
        self.resolve(name, deadline).await.is_some()
    }

    /// The ladder of `name`: configured, or made for an MCP server's listed tool (asking the
    /// server for its list within `deadline` the first time).
    pub(crate) async fn resolve(&self, name: &str, deadline: &Deadline) -> Option<Arc<Tool>> {
        self.resolve_with(name, |budget| deadline.cut(budget)).await
    }

    /// [`Dispatcher::resolve`], a server's list fetched within `cut` of its connect budget.
    pub(crate) async fn resolve_with(
        &self,
        name: &str,
        cut: impl Fn(Duration) -> Duration,
    ) -> Option<Arc<Tool>> {
        if let Some(tool) = self.plan.tools.get(name) {
            return Some(tool.clone());
        }
        self.plan.mcp.resolve(name, cut).await
    }

    /// The ladder of `name` if it is configured or already made, without asking any server.
    pub(crate) fn tool_now(&self, name: &str) -> Option<Arc<Tool>> {
        self.plan.tools.get(name).cloned().or_else(|| self.plan.mcp.made(name))
    }

    /// Every tool rein serves over MCP, within `deadline`: the upstream servers' (asked at
    /// once) and the configured ones.
    pub async fn mcp_tools(&self, deadline: &Deadline) -> crate::mcp::ToolList {
        self.plan.mcp.list(&self.plan.tools, deadline).await
    }

    /// How long a caller's repeat of a write without a key is taken for the re-issue of the
    /// same call (`[mcp] reissue_window_ms`).
    pub fn reissue_window(&self) -> Duration {
        self.plan.mcp.reissue_window
    }

    /// The configured tools and their kinds.
    pub fn tools(&self) -> Vec<(String, ToolKind)> {
        self.ladders().map(|tool| (tool.name.clone(), tool.kind)).collect()
    }

    /// Every ladder: the configured ones, then those made for MCP servers' listed tools so far.
    fn ladders(&self) -> impl Iterator<Item = Arc<Tool>> + '_ {
        self.plan.tools.values().cloned().chain(self.plan.mcp.made_all())
    }

    /// Each tool's primary: the source of its first rung (anything else that serves is a
    /// fallback, for `fallback_served`).
    pub fn primaries(&self) -> Vec<(String, String)> {
        self.plan
            .tools
            .values()
            .filter_map(|tool| tool.rungs.first().map(|r| (tool.name.clone(), r.source.clone())))
            .collect()
    }

    /// Every rung breaker's state.
    pub fn breakers(&self) -> Vec<RungBreaker> {
        self.ladders()
            .flat_map(|tool| {
                let breakers: Vec<RungBreaker> = tool
                    .rungs
                    .iter()
                    .filter_map(|rung| {
                        rung.breaker.as_ref().map(|breaker| RungBreaker {
                            tool: tool.name.clone(),
                            rung: rung.index,
                            source: rung.source.clone(),
                            state: breaker.state(),
                        })
                    })
                    .collect();
                breakers
            })
            .collect()
    }

    /// Dispatch one call of `tool` with `args` (a JSON object) through its ladder, within the
    /// context's deadline (no rung runs past it), with its idempotency key and conversation.
    pub async fn call(
        &self,
        ctx: &CallContext,
        tool: &str,
        args: Value,
    ) -> Result<ToolOutcome, ToolError> {
        self.call_as(ctx, tool, args, None).await
    }

    /// [`Dispatcher::call`] for `caller` (an opaque identity of who calls: their client key's
    /// and session's). A write `caller` sends again with the same arguments and no key of its
    /// own, within `[mcp] reissue_window_ms`, is taken for the re-issue of the first call (its
    /// stream broke) and gets that call's key: it is answered from the stored result, or as
    /// still in flight, and never executes twice.
    pub async fn call_as(
        &self,
        ctx: &CallContext,
        tool: &str,
        args: Value,
        caller: Option<&str>,
    ) -> Result<ToolOutcome, ToolError> {
        let deadline = ctx.deadline();
        let Some(tool) = self.resolve(tool, deadline).await else {
            return Err(ToolError::UnknownTool(tool.to_string()));
        };
        let tool = tool.as_ref();
        if !args.is_object() {
            return Err(ToolError::BadArgs(format!(
                "the arguments of `{}` must be a JSON object, not {}",
                tool.name,
                json_kind(&args)
            )));
        }
        let targets = targets(tool, &args)?;
        let log = RungLog::new(deadline);
        let mut outcome = match tool.kind {
            ToolKind::Read => {
                crate::read::call_read(self, tool, &args, &targets, deadline, &log).await
            }
            ToolKind::Write => {
                write::call_write(self, ctx, tool, &args, &targets, &log, caller).await?
            }
        };
        outcome.trace = log.take();
        Ok(outcome)
    }

    /// A person's decision on a held write. Approval puts the write in the outbox (the replay
    /// worker sends it once, with its original key); rejection makes `refused` the key's final
    /// result. Only the first decision counts: `None` when the hold does not exist or was
    /// already decided.
    pub async fn decide(
        &self,
        hold_id: i64,
        approve: bool,
        by: &str,
        note: &str,
    ) -> Result<Option<Hold>, ToolError> {
        write::decide(self, hold_id, approve, by, note).await
    }

    /// The evidence in one call's envelope, per the tool's `evidence` config; empty when the
    /// tool has none, the call was not `ok`, or nothing in the result matches.
    pub fn evidence_of(&self, tool: &str, envelope: &Value) -> Vec<EvidenceItem> {
        evidence::evidence_of(self, tool, envelope)
    }

    /// One pass: claim up to `limit` due items under a lease for `owner` and send each once.
    pub async fn replay_due(&self, owner: &str, limit: i64) -> ReplayReport {
        replay::replay_due(self, owner, limit).await
    }

    /// Run [`Dispatcher::replay_due`] forever: at once again while passes come back full,
    /// otherwise every `poll`. Abort the handle to stop it.
    pub fn spawn_replay_worker(
        self: Arc<Self>,
        owner: String,
        poll: Duration,
    ) -> tokio::task::JoinHandle<()> {
        replay::spawn_replay_worker(self, owner, poll)
    }

    /// Queued writes, newest first, optionally only those in `state`.
    pub async fn outbox_list(
        &self,
        state: Option<OutboxState>,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, ToolError> {
        operator::outbox_list(self, state, limit).await
    }

    /// One queued write.
    pub async fn outbox_get(&self, id: i64) -> Result<Option<OutboxItem>, ToolError> {
        operator::outbox_get(self, id).await
    }

    /// Make a pending or failed write due now (a failed one is pending again, same key). False
    /// when there is no such item or it is done or dropped.
    pub async fn outbox_replay_now(&self, id: i64) -> Result<bool, ToolError> {
        operator::outbox_replay_now(self, id).await
    }

    /// Drop a pending, review or failed write: it is never sent, and its key's final result
    /// says so. False when there is no such item or it is done or dropped.
    pub async fn outbox_drop(&self, id: i64, by: &str, reason: &str) -> Result<bool, ToolError> {
        operator::outbox_drop(self, id, by, reason).await
    }

    /// Record that a pending or review write did execute (an operator found it at the
    /// backend), with `result` if they have it: it is never sent again, and its key's final
    /// result is `ok`. False when there is no such item, it is not pending or in review, or a
    /// worker is sending it right now.
    pub async fn outbox_mark_executed(
        &self,
        id: i64,
        by: &str,
        result: Option<Value>,
        note: &str,
    ) -> Result<bool, ToolError> {
        operator::outbox_mark_executed(self, id, by, result, note).await
    }

    /// The store's queue numbers, for metrics.
    pub async fn outbox_stats(&self) -> Result<OutboxStats, ToolError> {
        operator::outbox_stats(self).await
    }

    /// One gate hold.
    pub async fn hold(&self, id: i64) -> Result<Option<Hold>, ToolError> {
        Ok(self.store.hold_get(id).await?)
    }

    /// Gate holds, newest first, optionally only those in `state`.
    pub async fn holds(
        &self,
        state: Option<HoldState>,
        limit: i64,
    ) -> Result<Vec<Hold>, ToolError> {
        operator::holds(self, state, limit).await
    }

    /// Forget finished writes' keys (with their outbox items and holds) older than
    /// `outbox.keys_retain_ms` and cache entries older than `outbox.cache_retain_ms`; nothing
    /// queued, held, failed or in flight is touched.
    pub async fn prune(&self) -> Result<Pruned, ToolError> {
        operator::prune(self).await
    }

    /// The wall-clock time the dispatcher stamps records with.
    pub fn now_unix_ms(&self) -> i64 {
        self.clock.now_unix_ms()
    }

    /// A full bulkhead: `busy`, with nothing run and no step down the ladder.
    pub(crate) fn busy(
        &self,
        tool: &Tool,
        rung: &Rung,
        bulkhead: &Bulkhead,
        key: Option<&str>,
        args: &Value,
        deadline: &Deadline,
    ) -> ToolOutcome {
        self.observer.busy(&tool.name, &bulkhead.name);
        let elapsed = deadline.elapsed_ms();
        let envelope = envelope::busy(tool, rung, bulkhead.retry_after_ms, key, args, elapsed);
        outcome(envelope, Some(rung), false)
    }

    /// Report a served, queued or refused call, and hand back its outcome.
    pub(crate) fn finish(
        &self,
        tool: &Tool,
        envelope: Envelope,
        rung: Option<&Rung>,
    ) -> ToolOutcome {
        let source = rung.map_or(LADDER_EXHAUSTED, |rung| rung.source.as_str());
        self.observer.served(&tool.name, source, envelope.status);
        outcome(envelope, rung, false)
    }
}

impl ToolOutcome {
    /// Answered `ok` by the first rung that ran, with nothing skipped, held, guarded or
    /// replayed on the way: a call whose trace need not outlive the newest ones.
    pub fn first_try(&self) -> bool {
        self.status == ToolStatus::Ok
            && !self.replayed
            && self.trace.spans.len() <= 1
            && self.trace.events.is_empty()
    }
}

pub(crate) fn outcome(envelope: Envelope, rung: Option<&Rung>, replayed: bool) -> ToolOutcome {
    ToolOutcome {
        status: envelope.status,
        served_by: rung.map(|rung| rung.source.clone()),
        envelope: envelope.to_json(),
        replayed,
        trace: rein_core::trace::Notes::default(),
    }
}

/// How a breaker permit ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// The dependency answered (even with a 4xx, or a cache miss: it is healthy).
    Succeeded,
    /// The dependency failed this call.
    Failed,
    /// The rung was not used after all (busy, bad arguments): hand a probe slot back.
    Unused,
}

/// `Some(permit)` when the rung may run: a rung without a breaker always may.
pub(crate) fn admit(rung: &Rung) -> Option<Option<Permit>> {
    match rung.breaker.as_ref().map(|breaker| breaker.admit()) {
        None => Some(None),
        Some(Admission::Allowed(permit)) => Some(Some(permit)),
        Some(Admission::Skip { .. }) => None,
    }
}

pub(crate) fn resolve(permit: Option<Permit>, resolution: Resolution) {
    let Some(permit) = permit else { return };
    match resolution {
        Resolution::Succeeded => permit.succeeded(),
        Resolution::Failed => permit.failed(),
        Resolution::Unused => permit.unused(),
    }
}

/// Each rung's call for these arguments (`None` for rungs that do not call out), or the first
/// argument an http rung's URL cannot take: the caller's mistake (400), found before anything
/// runs.
fn targets<'t>(tool: &'t Tool, args: &Value) -> Result<Vec<Option<Target<'t>>>, ToolError> {
    tool.rungs
        .iter()
        .map(|rung| match rung.action.target(args) {
            None => Ok(None),
            Some(Ok(target)) => Ok(Some(target)),
            Some(Err(problem)) => {
                Err(ToolError::BadArgument { argument: problem.argument, message: problem.message })
            }
        })
        .collect()
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
