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

/// Queued writes, newest first.
pub(crate) async fn outbox_list(
    dispatcher: &Dispatcher,
    state: Option<OutboxState>,
    limit: i64,
) -> Result<Vec<OutboxItem>, ToolError> {
    Ok(dispatcher.store.outbox_list(state, limit).await?)
}

/// One queued write.
pub(crate) async fn outbox_get(
    dispatcher: &Dispatcher,
    id: i64,
) -> Result<Option<OutboxItem>, ToolError> {
    Ok(dispatcher.store.outbox_get(id).await?)
}

/// Make a pending or failed write due now.
pub(crate) async fn outbox_replay_now(dispatcher: &Dispatcher, id: i64) -> Result<bool, ToolError> {
    Ok(dispatcher.store.outbox_replay_now(id, dispatcher.clock.now_unix_ms()).await?)
}

/// Drop a write that is not done, giving its key a final `refused` result that says so.
pub(crate) async fn outbox_drop(
    dispatcher: &Dispatcher,
    id: i64,
    by: &str,
    reason: &str,
) -> Result<bool, ToolError> {
    let Some(item) = dispatcher.store.outbox_get(id).await? else {
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
    Ok(dispatcher.store.outbox_drop(id, &result, dispatcher.clock.now_unix_ms()).await?)
}

/// Record that a write not in flight did execute, giving its key a final `ok` result.
pub(crate) async fn outbox_mark_executed(
    dispatcher: &Dispatcher,
    id: i64,
    by: &str,
    result: Option<Value>,
    note: &str,
) -> Result<bool, ToolError> {
    let Some(item) = dispatcher.store.outbox_get(id).await? else {
        return Ok(false);
    };
    let now = dispatcher.clock.now_unix_ms();
    let leased = item.lease_until_unix_ms.is_some_and(|until| until > now);
    if !matches!(item.state, OutboxState::Pending | OutboxState::Review) || leased {
        return Ok(false);
    }
    let note = if note.trim().is_empty() { String::new() } else { format!(": {}", note.trim()) };
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
    Ok(dispatcher.store.outbox_complete(id, &envelope, now).await?)
}

/// The store's queue numbers.
pub(crate) async fn outbox_stats(
    dispatcher: &Dispatcher,
) -> Result<rein_store::tools::OutboxStats, ToolError> {
    Ok(dispatcher.store.outbox_stats().await?)
}

/// Gate holds, newest first.
pub(crate) async fn holds(
    dispatcher: &Dispatcher,
    state: Option<rein_store::tools::HoldState>,
    limit: i64,
) -> Result<Vec<rein_store::tools::Hold>, ToolError> {
    Ok(dispatcher.store.hold_list(state, limit).await?)
}

/// The retention pass: forget finished records older than the outbox's retention settings.
pub(crate) async fn prune(dispatcher: &Dispatcher) -> Result<rein_store::tools::Pruned, ToolError> {
    let now = dispatcher.clock.now_unix_ms();
    let ago = |d: std::time::Duration| now - i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let keys_before = ago(dispatcher.plan.outbox.keys_retain);
    let cache_before = ago(dispatcher.plan.outbox.cache_retain);
    Ok(dispatcher.store.prune(keys_before, cache_before).await?)
}
