//! What an operator does to the outbox (through the admin API or `rein outbox`): list and show
//! queued writes, make one due now, or drop one so it is never sent; and the retention pass that
//! forgets finished records. Dropping a write gives its idempotency key a final `refused` result,
//! so a repeat of the call says what happened instead of queueing it again.

use rein_store::tools::{OutboxItem, OutboxState};
use serde_json::json;

use crate::dispatcher::Dispatcher;
use crate::error::ToolError;

impl Dispatcher {
    /// Queued writes, newest first, optionally only those in `state`.
    pub async fn outbox_list(
        &self,
        state: Option<OutboxState>,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, ToolError> {
        Ok(self.store.outbox_list(state, limit).await?)
    }

    /// One queued write.
    pub async fn outbox_get(&self, id: i64) -> Result<Option<OutboxItem>, ToolError> {
        Ok(self.store.outbox_get(id).await?)
    }

    /// Make a pending or failed write due now (a failed one is pending again, same key). False
    /// when there is no such item or it is done or dropped.
    pub async fn outbox_replay_now(&self, id: i64) -> Result<bool, ToolError> {
        Ok(self.store.outbox_replay_now(id, self.clock.now_unix_ms()).await?)
    }

    /// Drop a pending or failed write: it is never sent, and its key's final result says so.
    /// False when there is no such item or it is done or dropped.
    pub async fn outbox_drop(&self, id: i64, by: &str, reason: &str) -> Result<bool, ToolError> {
        let Some(item) = self.store.outbox_get(id).await? else {
            return Ok(false);
        };
        if matches!(item.state, OutboxState::Done | OutboxState::Dropped) {
            return Ok(false);
        }
        let reason = if reason.trim().is_empty() { "no reason given" } else { reason.trim() };
        let result = json!({
            "status": "refused",
            "tool": item.tool,
            "degraded": true,
            "fidelity": "deferred",
            "idempotency_key": item.idempotency_key,
            "detail": format!(
                "{} was queued but an operator ({by}) dropped it before it executed: {reason}. It has NOT executed and will not. Tell the user it was not done.",
                item.tool
            ),
            "elapsed_ms": 0,
        });
        Ok(self.store.outbox_drop(id, &result, self.clock.now_unix_ms()).await?)
    }

    /// The store's queue numbers, for metrics.
    pub async fn outbox_stats(&self) -> Result<rein_store::tools::OutboxStats, ToolError> {
        Ok(self.store.outbox_stats().await?)
    }

    /// Gate holds, newest first, optionally only those in `state`.
    pub async fn holds(
        &self,
        state: Option<rein_store::tools::HoldState>,
        limit: i64,
    ) -> Result<Vec<rein_store::tools::Hold>, ToolError> {
        Ok(self.store.hold_list(state, limit).await?)
    }

    /// Forget finished writes' keys (with their outbox items and holds) older than
    /// `outbox.keys_retain_ms` and cache entries older than `outbox.cache_retain_ms`; nothing
    /// queued, held, failed or in flight is touched.
    pub async fn prune(&self) -> Result<rein_store::tools::Pruned, ToolError> {
        let now = self.clock.now_unix_ms();
        let ago = |d: std::time::Duration| now - i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let keys_before = ago(self.outbox.keys_retain);
        let cache_before = ago(self.outbox.cache_retain);
        Ok(self.store.prune(keys_before, cache_before).await?)
    }

    /// The wall-clock time the dispatcher stamps records with.
    pub fn now_unix_ms(&self) -> i64 {
        self.clock.now_unix_ms()
    }
}
