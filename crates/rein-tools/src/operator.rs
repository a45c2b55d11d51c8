//! What an operator does to the outbox (through the admin API or `rein outbox`): list and show
//! queued writes, make one due now (for one held for review: release it, having checked that it
//! did not execute), mark one executed (having found its result), or drop one so it is never
//! sent; and the retention pass that forgets finished records. Dropping a write gives its
//! idempotency key a final `refused` result, so a repeat of the call says what happened instead
//! of queueing it again; one whose outcome is unknown is never said not to have executed.

use rein_store::tools::{OutboxItem, OutboxState};
use serde_json::{Value, json};

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

    /// Drop a pending, review or failed write: it is never sent, and its key's final result
    /// says so. False when there is no such item or it is done or dropped.
    pub async fn outbox_drop(&self, id: i64, by: &str, reason: &str) -> Result<bool, ToolError> {
        let Some(item) = self.store.outbox_get(id).await? else {
            return Ok(false);
        };
        if matches!(item.state, OutboxState::Done | OutboxState::Dropped) {
            return Ok(false);
        }
        let reason = if reason.trim().is_empty() { "no reason given" } else { reason.trim() };
        let tool = &item.tool;
        let detail = if item.outcome_unknown {
            format!(
                "{tool} may or may not have executed (an earlier attempt was not confirmed); an operator ({by}) dropped it: {reason}. rein will not send it again. Do not tell the user it is done or that it failed."
            )
        } else {
            format!(
                "{tool} was queued but an operator ({by}) dropped it before it executed: {reason}. It has NOT executed and will not. Tell the user it was not done."
            )
        };
        let mut result = json!({
            "status": "refused",
            "tool": item.tool,
            "degraded": true,
            "fidelity": "deferred",
            "idempotency_key": item.idempotency_key,
            "detail": detail,
            "elapsed_ms": 0,
        });
        if item.outcome_unknown
            && let Some(map) = result.as_object_mut()
        {
            map.insert("outcome_unknown".into(), json!(true));
        }
        Ok(self.store.outbox_drop(id, &result, self.clock.now_unix_ms()).await?)
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
        let Some(item) = self.store.outbox_get(id).await? else {
            return Ok(false);
        };
        let now = self.clock.now_unix_ms();
        let leased = item.lease_until_unix_ms.is_some_and(|until| until > now);
        if !matches!(item.state, OutboxState::Pending | OutboxState::Review) || leased {
            return Ok(false);
        }
        let note =
            if note.trim().is_empty() { String::new() } else { format!(": {}", note.trim()) };
        let envelope = json!({
            "status": "ok",
            "tool": item.tool,
            "result": result.unwrap_or(Value::Null),
            "degraded": true,
            "fidelity": "exact",
            "source": "operator",
            "idempotency_key": item.idempotency_key,
            "detail": format!(
                "an operator ({by}) confirmed that {} executed{note}. This result is final; rein will not send it again.",
                item.tool
            ),
            "elapsed_ms": 0,
        });
        Ok(self.store.outbox_complete(id, &envelope, now).await?)
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
