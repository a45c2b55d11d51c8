//! What rein keeps of each agent run (`x-rein-run-id`: one customer message), in the store so
//! replicas sharing it see one run: [`RunStops`] holds the run to its stop conditions (`[runs]`,
//! [`rein_core::run`]) on rein's own counts, and keeps the evidence its tool calls returned
//! through `POST /v1/tools/{tool}` (per each tool's `evidence` config), which joins the
//! evidence of the run's later model calls, so a rule such as "every cited article was returned
//! by search in this run" checks against what the tools really returned rather than what the
//! caller says they did. A run idle for `[runs] idle_ms` is forgotten; a run keeps its newest
//! [`rein_store::runs::MAX_EVIDENCE`] items.

use std::sync::Arc;

use rein_core::CallContext;
use rein_core::run::{RunLimits, after_tool_result, before_tool_call};
use rein_core::validate::EvidenceItem;
use rein_store::StoreError;
use rein_store::runs::{ModelCall, ModelCallDone, RunEvent, RunInfo, RunNote, RunToolCall};
use rein_store::tools::ToolStore;
use serde_json::Value;

use crate::config::RunsConfig;

/// What a run's next step may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStep {
    /// Go ahead; for a tool call, `same_call` is how often this (tool, arguments) came in the run.
    Go { same_call: i64 },
    /// The run is stopped, with this status (`stopped_repeated_call`, ...); `now`: this step
    /// stopped it (count it once).
    Stopped { status: String, now: bool },
}

/// The stop conditions of agent runs, counted in the store.
#[derive(Debug, Clone)]
pub struct RunStops {
    store: Arc<dyn ToolStore>,
}

impl RunStops {
    pub fn new(store: Arc<dyn ToolStore>) -> Self {
        Self { store }
    }

    /// A model call in the call's run (none: nothing to count), held to `limits` (the route's)
    /// in one store transaction: the run's evidence (its tool calls' returns) is read, the call
    /// is counted and stopped when the run is, or when it passes a limit (the conversation's
    /// spend included); a call that goes has `note` (its route and message) written on the run.
    pub async fn model_call(
        &self,
        config: &RunsConfig,
        limits: &RunLimits,
        ctx: &CallContext,
        note: &RunNote,
    ) -> Result<(RunStep, Vec<EvidenceItem>), StoreError> {
        let Some(run) = &ctx.run_id else { return Ok((RunStep::Go { same_call: 0 }, Vec::new())) };
        let call = ModelCall {
            run_id: run,
            conversation_id: ctx.conversation_id.as_deref(),
            limits: *limits,
            spender: spender(ctx, run),
            note,
            now_unix_ms: now_ms(),
            idle_ms: i64::try_from(config.idle.as_millis()).unwrap_or(i64::MAX),
        };
        let step = self.store.run_model_call(&call).await?;
        let evidence = evidence_items(step.evidence)?;
        let step = match step.stopped {
            None => RunStep::Go { same_call: 0 },
            Some((status, now)) => {
                if now {
                    tracing::info!(run, status = %status, "run stopped");
                }
                RunStep::Stopped { status, now }
            }
        };
        Ok((step, evidence))
    }

    /// A model call of the call's run was answered: what it cost (none: its model has no
    /// price) is added to its conversation's spend (its run's, without a conversation) and its
    /// text noted as the run's draft, in one store transaction.
    pub async fn model_call_done(
        &self,
        ctx: &CallContext,
        micro_usd: Option<u64>,
        draft: Option<&str>,
    ) -> Result<(), StoreError> {
        let Some(run) = &ctx.run_id else { return Ok(()) };
        let done = ModelCallDone {
            run_id: run,
            conversation_id: ctx.conversation_id.as_deref(),
            spender: spender(ctx, run),
            micro_usd: micro_usd.map(|micro| i64::try_from(micro).unwrap_or(i64::MAX)),
            draft,
            now_unix_ms: now_ms(),
        };
        self.store.run_model_call_done(&done).await
    }

    /// A tool call in the call's run, before it runs.
    pub async fn tool_call(
        &self,
        config: &RunsConfig,
        ctx: &CallContext,
        tool: &str,
        args: &Value,
    ) -> Result<RunStep, StoreError> {
        let Some(run) = &ctx.run_id else { return Ok(RunStep::Go { same_call: 0 }) };
        let now = now_ms();
        let args_hash = rein_tools::keys::args_hash(args);
        let event = RunEvent::ToolCall { tool, args_hash: &args_hash };
        let counts = self.count(config, ctx, run, event, now).await?;
        if let Some(status) = counts.stopped.clone() {
            return Ok(RunStep::Stopped { status, now: false });
        }
        match before_tool_call(counts.tally(now), &config.for_tool(tool)) {
            Some(stop) => self.stop(run, stop.status(), now).await,
            None => Ok(RunStep::Go { same_call: counts.same_call }),
        }
    }

    /// A tool call's result (`error`: what it failed with), after the call counted `same_call`:
    /// the status the run stopped with, if this result stopped it.
    pub async fn tool_result(
        &self,
        config: &RunsConfig,
        ctx: &CallContext,
        tool: &str,
        same_call: i64,
        error: Option<&str>,
    ) -> Result<Option<String>, StoreError> {
        let Some(run) = &ctx.run_id else { return Ok(None) };
        let now = now_ms();
        let event = RunEvent::ToolResult { tool, error };
        let mut counts = self.count(config, ctx, run, event, now).await?;
        counts.same_call = same_call;
        match after_tool_result(counts.tally(now), &config.for_tool(tool)) {
            Some(stop) => Ok(Some(self.store.run_stop(run, stop.status(), now).await?)),
            None => Ok(None),
        }
    }

    /// Forget the runs idle past `idle_ms`, with their evidence, and the conversations idle
    /// past `conversation_idle_ms`; how many runs.
    pub async fn prune(&self, config: &RunsConfig) -> Result<u64, StoreError> {
        let idle = i64::try_from(config.idle.as_millis()).unwrap_or(i64::MAX);
        let forgotten = self.store.runs_prune(now_ms().saturating_sub(idle)).await?;
        let idle = i64::try_from(config.conversation_idle.as_millis()).unwrap_or(i64::MAX);
        self.store.conversations_prune(now_ms().saturating_sub(idle)).await?;
        Ok(forgotten)
    }

    /// Note on the call's run what its packet will need (the route, the customer's message, the
    /// draft, the coverage verdict).
    pub async fn note(&self, ctx: &CallContext, note: &RunNote) -> Result<(), StoreError> {
        let Some(run) = &ctx.run_id else { return Ok(()) };
        self.store.run_note(run, ctx.conversation_id.as_deref(), note, now_ms()).await
    }

    /// What is kept of a run.
    pub async fn info(&self, ctx: &CallContext) -> Result<Option<RunInfo>, StoreError> {
        match &ctx.run_id {
            Some(run) => self.store.run_get(run).await,
            None => Ok(None),
        }
    }

    /// Keep a tool call and its result in the run's log (for its hand-off packet).
    pub async fn log_tool(
        &self,
        ctx: &CallContext,
        tool: &str,
        args: &Value,
        status: &str,
        result: &Value,
    ) -> Result<(), StoreError> {
        let Some(run) = &ctx.run_id else { return Ok(()) };
        let call = RunToolCall {
            tool: tool.to_string(),
            args: args.clone(),
            status: status.to_string(),
            result: result.clone(),
            at_unix_ms: now_ms(),
        };
        self.store.run_tool_log_add(run, &call).await
    }

    /// The run's tool calls, oldest first.
    pub async fn tool_log(&self, ctx: &CallContext) -> Result<Vec<RunToolCall>, StoreError> {
        match &ctx.run_id {
            Some(run) => self.store.run_tool_log(run).await,
            None => Ok(Vec::new()),
        }
    }

    /// Whether another run of the call's conversation asked this question (normalised) before;
    /// this run's asking is recorded. False without a conversation and a run.
    pub async fn question_repeated(
        &self,
        ctx: &CallContext,
        message: &str,
    ) -> Result<bool, StoreError> {
        let (Some(conversation), Some(run)) = (&ctx.conversation_id, &ctx.run_id) else {
            return Ok(false);
        };
        let normalised = rein_core::handoff::normalise(message);
        if normalised.is_empty() {
            return Ok(false);
        }
        let hash = rein_tools::keys::args_hash(&Value::String(normalised));
        Ok(self.store.question_seen(conversation, run, &hash, now_ms()).await? > 0)
    }

    /// Keep `items` as seen in `run`.
    pub async fn record_evidence(
        &self,
        run: &str,
        items: Vec<EvidenceItem>,
    ) -> Result<(), StoreError> {
        self.record_evidence_at(run, items, now_ms()).await
    }

    /// [`RunStops::record_evidence`] at a given wall-clock time (tests).
    pub async fn record_evidence_at(
        &self,
        run: &str,
        items: Vec<EvidenceItem>,
        now: i64,
    ) -> Result<(), StoreError> {
        let values: Vec<Value> = items
            .iter()
            .map(|item| serde_json::to_value(item).unwrap_or(Value::Null))
            .filter(|value| !value.is_null())
            .collect();
        self.store.run_evidence_add(run, &values, now).await
    }

    /// Everything kept for `run`, oldest first (nothing of a run idle for `idle_ms`).
    pub async fn evidence(
        &self,
        config: &RunsConfig,
        run: &str,
    ) -> Result<Vec<EvidenceItem>, StoreError> {
        self.evidence_at(config, run, now_ms()).await
    }

    /// [`RunStops::evidence`] at a given wall-clock time (tests).
    pub async fn evidence_at(
        &self,
        config: &RunsConfig,
        run: &str,
        now: i64,
    ) -> Result<Vec<EvidenceItem>, StoreError> {
        let idle = i64::try_from(config.idle.as_millis()).unwrap_or(i64::MAX);
        evidence_items(self.store.run_evidence(run, now.saturating_sub(idle)).await?)
    }

    async fn count(
        &self,
        config: &RunsConfig,
        ctx: &CallContext,
        run: &str,
        event: RunEvent<'_>,
        now: i64,
    ) -> Result<rein_store::runs::RunCounts, StoreError> {
        let idle = i64::try_from(config.idle.as_millis()).unwrap_or(i64::MAX);
        self.store.run_record(run, ctx.conversation_id.as_deref(), event, now, idle).await
    }

    async fn stop(&self, run: &str, status: &str, now: i64) -> Result<RunStep, StoreError> {
        let status = self.store.run_stop(run, status, now).await?;
        tracing::info!(run, status = %status, "run stopped");
        Ok(RunStep::Stopped { status, now: true })
    }
}

/// Evidence as the store keeps it, read back as items.
fn evidence_items(values: Vec<Value>) -> Result<Vec<EvidenceItem>, StoreError> {
    values
        .into_iter()
        .map(|value| {
            serde_json::from_value(value).map_err(|error| {
                StoreError::Corrupt(format!("run evidence is not an evidence item: {error}"))
            })
        })
        .collect()
}

/// Whose spend a call adds to: its conversation's, else its run's.
fn spender<'a>(ctx: &'a CallContext, run: &'a str) -> &'a str {
    ctx.conversation_id.as_deref().unwrap_or(run)
}

/// The wall clock, in the store's units.
fn now_ms() -> i64 {
    i64::try_from(rein_core::clock::unix_ms()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rein_store::{SqliteToolStore, Store};

    use super::*;

    const T0: i64 = 1_700_000_000_000;

    fn stops() -> RunStops {
        let store = Arc::new(Store::open_in_memory().unwrap());
        RunStops::new(Arc::new(SqliteToolStore::new(store)))
    }

    fn config() -> RunsConfig {
        RunsConfig {
            limits: rein_core::run::RunLimits::default(),
            idle: Duration::from_secs(3600),
            stopped_detail: String::new(),
            conversation_idle: Duration::from_secs(3600),
            tools: Default::default(),
        }
    }

    fn item(id: &str) -> EvidenceItem {
        EvidenceItem::new("search", id, "")
    }

    #[tokio::test]
    async fn runs_keep_their_own_items_and_forget_after_an_idle_hour() {
        let (runs, config) = (stops(), config());
        runs.record_evidence_at("a", vec![item("140")], T0).await.unwrap();
        runs.record_evidence_at("b", vec![item("212")], T0).await.unwrap();
        runs.record_evidence_at("a", vec![item("118")], T0 + 1).await.unwrap();
        let ids = async |run: &str, at: i64| {
            let items = runs.evidence_at(&config, run, at).await.unwrap();
            items.into_iter().map(|i| i.id).collect::<Vec<_>>()
        };
        assert_eq!(ids("a", T0 + 2).await, ["140", "118"]);
        assert_eq!(ids("b", T0 + 2).await, ["212"]);
        assert!(ids("c", T0 + 2).await.is_empty());
        assert!(ids("a", T0 + 2 + 3_600_000).await.is_empty(), "an idle run is forgotten");
    }

    #[tokio::test]
    async fn a_run_keeps_only_its_newest_items() {
        let (runs, config) = (stops(), config());
        let max = usize::try_from(rein_store::runs::MAX_EVIDENCE).unwrap();
        let many: Vec<_> = (0..max + 5).map(|n| item(&n.to_string())).collect();
        runs.record_evidence_at("a", many, T0).await.unwrap();
        let items = runs.evidence_at(&config, "a", T0).await.unwrap();
        assert_eq!(items.len(), max);
        assert_eq!(items[0].id, "5");
    }
}
