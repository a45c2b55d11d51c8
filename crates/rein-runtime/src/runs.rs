//! What rein saw in each run, keyed by the caller's `x-rein-run-id`: the evidence from tool
//! calls that went through `POST /v1/tools/{tool}` (per each tool's `evidence` config), added to
//! the evidence of later model calls in the same run, so a rule such as "every cited article was
//! returned by search in this run" checks against what the tools really returned rather than
//! what the caller says they did.
//!
//! Kept in memory by each gateway process and bounded: a run idle for an hour is forgotten, at
//! most [`MAX_RUNS`] runs and [`MAX_ITEMS`] items per run are kept (the oldest go first).
//! Replicas do not share it: route a run's calls to one replica, or pass evidence in the body.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rein_core::validate::EvidenceItem;
use tokio::time::Instant;

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
