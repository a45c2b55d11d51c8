//! The runtime's background workers, one task each, every one stopping when the stop signal
//! turns true: the outbox replay (claims due queued writes under a lease and sends each with its
//! original idempotency key; replicas sharing a Postgres store each run one, leases keep them
//! apart; once an hour the retention pass, idle runs included) and the kill-switch sync (applies flips recorded by
//! other replicas every `server.kill_sync_ms`, the route-to lever's flips with them).

use std::sync::Arc;
use std::time::Duration;

use rand::RngExt;
use tokio::sync::watch;

use crate::runtime::Runtime;

/// How often the replay worker runs the tool store's retention pass.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Every `outbox.poll_ms` (or at once when kicked), one replay pass of due queued writes.
pub(crate) async fn replay_outbox(runtime: Arc<Runtime>, mut stop: watch::Receiver<bool>) {
    let suffix: u64 = rand::rng().random();
    let owner = format!("{}-{suffix:016x}", std::process::id());
    let mut next_prune = tokio::time::Instant::now();
    loop {
        let current = runtime.current();
        let tools = current.tools.clone();
        // Once an hour: forget finished keys and cache entries past their retention.
        if tokio::time::Instant::now() >= next_prune {
            next_prune += PRUNE_EVERY;
            match tools.prune().await {
                Ok(pruned) => tracing::debug!(?pruned, "retention pass"),
                Err(error) => tracing::warn!("retention pass failed: {error}"),
            }
            // And the runs idle past `runs.idle_ms`, with their evidence.
            match runtime.stops.prune(&current.config.runs).await {
                Ok(runs) => tracing::debug!(runs, "idle runs forgotten"),
                Err(error) => tracing::warn!("run retention pass failed: {error}"),
            }
        }
        let batch = i64::from(current.config.tools.outbox.batch.max(1));
        let report = tools.replay_due(&owner, batch).await;
        if report.claimed > 0 {
            tracing::info!(
                claimed = report.claimed,
                done = report.done,
                retried = report.retried,
                failed = report.failed,
                "outbox replay pass"
            );
        }
        // A full batch may have more behind it: go again at once.
        if report.claimed >= batch as usize && report.store_errors == 0 {
            continue;
        }
        let poll = Duration::from_millis(current.config.tools.outbox.poll_ms.max(1));
        drop(current);
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = runtime.replay_kick.notified() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

/// Sync the kill switch and the route-to lever every `server.kill_sync_ms` until `stop`.
pub(crate) async fn sync_kill_switch(runtime: Arc<Runtime>, mut stop: watch::Receiver<bool>) {
    loop {
        let every = runtime.current().config.server.kill_sync;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        if let Err(failure) = runtime.sync_kill_switch().await {
            tracing::warn!("cannot read kill switch flips from the store: {failure}");
        }
        if let Err(failure) = runtime.sync_route_to().await {
            tracing::warn!("cannot read route-to flips from the store: {failure}");
        }
    }
}
