//! What rein saw in each run, keyed by the caller's `x-rein-run-id`: the evidence from tool
//! calls that went through `POST /v1/tools/{tool}` (per each tool's `evidence` config), added to
//! the evidence of later model calls in the same run, so a rule such as "every cited article was
//! returned by search in this run" checks against what the tools really returned rather than
//! what the caller says they did.
//!
//! Kept in memory by each gateway process and bounded: a run idle for an hour is forgotten, at
//! most [`MAX_RUNS`] runs and [`MAX_ITEMS`] items per run are kept (the oldest go first).
//! Replicas do not share it: route a run's calls to one replica, or pass evidence in the body.
//!
//! [`RunStops`] holds each run to its stop conditions (`[runs]`, [`rein_core::run`]): the
//! counts are rein's own, kept in the store, so replicas sharing it stop a run at one count.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use std::sync::Arc;

use rein_core::CallContext;
use rein_core::run::{after_tool_result, before_model_call, before_tool_call};
use rein_core::validate::EvidenceItem;
use rein_store::StoreError;
use rein_store::runs::RunEvent;
use rein_store::tools::ToolStore;
use serde_json::Value;
use tokio::time::Instant;

use crate::config::RunsConfig;

/// Runs remembered at once.
pub const MAX_RUNS: usize = 10_000;
/// Items remembered per run.
pub const MAX_ITEMS: usize = 1_000;
/// How long an idle run is remembered.
pub const IDLE: Duration = Duration::from_secs(3600);

#[derive(Debug)]
struct Run {
    items: Vec<EvidenceItem>,
    touched: Instant,
}

/// The per-run evidence record.
#[derive(Debug, Default)]
pub struct RunEvidence {
    runs: Mutex<HashMap<String, Run>>,
}

impl RunEvidence {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Run>> {
        match self.runs.lock() {
            Ok(runs) => runs,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Remember `items` as seen in `run`.
    pub fn record(&self, run: &str, items: Vec<EvidenceItem>) {
        if items.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut runs = self.lock();
        if !runs.contains_key(run) && runs.len() >= MAX_RUNS {
            runs.retain(|_, r| now.duration_since(r.touched) < IDLE);
            if runs.len() >= MAX_RUNS
                && let Some(oldest) =
                    runs.iter().min_by_key(|(_, r)| r.touched).map(|(key, _)| key.clone())
            {
                runs.remove(&oldest);
            }
        }
        let entry =
            runs.entry(run.to_string()).or_insert_with(|| Run { items: Vec::new(), touched: now });
        entry.touched = now;
        entry.items.extend(items);
        if entry.items.len() > MAX_ITEMS {
            let excess = entry.items.len() - MAX_ITEMS;
            entry.items.drain(..excess);
        }
    }

    /// Everything recorded for `run`, oldest first (nothing once it has been idle too long).
    pub fn items(&self, run: &str) -> Vec<EvidenceItem> {
        let now = Instant::now();
        let mut runs = self.lock();
        match runs.get_mut(run) {
            Some(entry) if now.duration_since(entry.touched) < IDLE => {
                entry.touched = now;
                entry.items.clone()
            }
            Some(_) => {
                runs.remove(run);
                Vec::new()
            }
            None => Vec::new(),
        }
    }
}

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

    /// A model call in the call's run (none: nothing to count): stopped when the run is, or
    /// when this call passes a limit.
    pub async fn model_call(
        &self,
        config: &RunsConfig,
        ctx: &CallContext,
    ) -> Result<RunStep, StoreError> {
        let Some(run) = &ctx.run_id else { return Ok(RunStep::Go { same_call: 0 }) };
        let now = now_ms();
        let counts = self.count(config, ctx, run, RunEvent::ModelCall, now).await?;
        if let Some(status) = counts.stopped.clone() {
            return Ok(RunStep::Stopped { status, now: false });
        }
        match before_model_call(counts.tally(now), &config.limits) {
            Some(stop) => self.stop(run, stop.status(), now).await,
            None => Ok(RunStep::Go { same_call: 0 }),
        }
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
        match before_tool_call(counts.tally(now), &config.limits) {
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
        match after_tool_result(counts.tally(now), &config.limits) {
            Some(stop) => Ok(Some(self.store.run_stop(run, stop.status(), now).await?)),
            None => Ok(None),
        }
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

/// The wall clock, in the store's units.
fn now_ms() -> i64 {
    i64::try_from(rein_core::clock::unix_ms()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str) -> EvidenceItem {
        EvidenceItem::new("search", id, "")
    }

    #[tokio::test(start_paused = true)]
    async fn runs_keep_their_own_items_and_forget_after_an_idle_hour() {
        let runs = RunEvidence::default();
        runs.record("a", vec![item("140")]);
        runs.record("b", vec![item("212")]);
        runs.record("a", vec![item("118")]);
        let ids = |run: &str| runs.items(run).into_iter().map(|i| i.id).collect::<Vec<_>>();
        assert_eq!(ids("a"), ["140", "118"]);
        assert_eq!(ids("b"), ["212"]);
        assert!(ids("c").is_empty());
        tokio::time::advance(IDLE + Duration::from_secs(1)).await;
        assert!(ids("a").is_empty(), "an idle run is forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_keeps_only_its_newest_items() {
        let runs = RunEvidence::default();
        let many: Vec<_> = (0..MAX_ITEMS + 5).map(|n| item(&n.to_string())).collect();
        runs.record("a", many);
        let items = runs.items("a");
        assert_eq!(items.len(), MAX_ITEMS);
        assert_eq!(items[0].id, "5");
    }
}
