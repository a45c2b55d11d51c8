//! The replay worker: sends queued writes to their tool's primary (the first http rung) with the
//! ORIGINAL `Idempotency-Key`. An item whose earlier send's outcome is unknown (a timeout, a
//! 5xx, a worker that died mid-send) is resent only behind the tool's duplicate guard: the
//! backend honours the key (`idempotency = "key"`), a lookup finds no earlier result
//! (`"lookup"`; a result found is recorded as the write's), or neither, and the item is held
//! for a person (`"none"`). A 2xx completes the item and makes the final `ok` envelope the
//! key's result; a transient failure (408, 409, 425, 429, 5xx, connection error, timeout) or
//! refused credentials (401, 403: a configuration failure, never final) make it due again after
//! full-jitter exponential backoff; any other 4xx fails it for good, for an operator.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use rein_core::retry::RetryPolicy;
use rein_store::StoreError;
use rein_store::tools::OutboxItem;
use serde_json::Value;
use tokio::time::Instant;

use crate::config::Idempotency;
use crate::dispatcher::{Dispatcher, Resolution, admit, resolve};
use crate::envelope;
use crate::guard::{Guard, Write, duplicate_guard};
use crate::http::HttpOutcome;
use crate::ladder::{Rung, Tool};
use crate::observer::ReplayResult;

/// What one replay pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Items claimed (leased to this worker).
    pub claimed: usize,
    /// Executed by the primary; their keys' results are final.
    pub done: usize,
    /// Due again after a backoff.
    pub retried: usize,
    /// Refused for good by the primary.
    pub failed: usize,
    /// Outcome unknown and no machine duplicate guard: held for a person.
    pub review: usize,
    /// Store operations that failed (the item's lease expires and it is claimed again).
    pub store_errors: usize,
}

/// One replay pass of up to `limit` due items, leased to `owner`.
pub(crate) async fn replay_due(dispatcher: &Dispatcher, owner: &str, limit: i64) -> ReplayReport {
    let mut report = ReplayReport::default();
    let now = dispatcher.clock.now_unix_ms();
    let lease_ms = i64::try_from(dispatcher.plan.outbox.lease.as_millis()).unwrap_or(i64::MAX);
    let items = match dispatcher.store.outbox_claim(owner, now, lease_ms, limit).await {
        Ok(items) => items,
        Err(error) => {
            tracing::error!(%error, "could not claim queued writes");
            report.store_errors += 1;
            return report;
        }
    };
    report.claimed = items.len();
    // Concurrently, so a batch finishes well within its lease; bulkheads still bound each
    // dependency.
    let results = join_all(items.into_iter().map(|item| replay_one(dispatcher, item))).await;
    for result in results {
        match result {
            Ok(Some(ReplayResult::Done)) => report.done += 1,
            Ok(Some(ReplayResult::Retry)) => report.retried += 1,
            Ok(Some(ReplayResult::Failed)) => report.failed += 1,
            Ok(Some(ReplayResult::Review)) => report.review += 1,
            Ok(None) => {}
            Err(error) => {
                tracing::error!(%error, "could not record a replay");
                report.store_errors += 1;
            }
        }
    }
    report
}

/// The replay worker: [`replay_due`] in a loop, pausing `poll` after a pass that was not full.
pub(crate) fn spawn_replay_worker(
    dispatcher: Arc<Dispatcher>,
    owner: String,
    poll: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let batch = dispatcher.plan.outbox.batch;
        loop {
            let report = replay_due(&dispatcher, &owner, i64::from(batch)).await;
            if report.claimed < batch as usize || report.store_errors > 0 {
                tokio::time::sleep(poll).await;
            }
        }
    })
}

/// Send one claimed item. `None` when the item was no longer pending when its result came
/// back (an operator dropped it, or another worker finished it after this lease expired).
async fn replay_one(
    dispatcher: &Dispatcher,
    item: OutboxItem,
) -> Result<Option<ReplayResult>, StoreError> {
    // A queued write of a listed MCP tool rein has not seen listed since it started: the
    // server's list is fetched within its connect budget.
    let resolved = dispatcher.resolve_with(&item.tool, |budget| budget).await;
    let Some((tool, rung)) =
        resolved.as_ref().and_then(|tool| tool.primary_remote().map(|rung| (tool.as_ref(), rung)))
    else {
        let error = format!("tool `{}` has no http or mcp rung in the config", item.tool);
        return retry_later(dispatcher, &item, &error, None, false).await;
    };
    let Some(permit) = admit(rung) else {
        // Not sent: due again when the breaker lets a probe through (or after the backoff,
        // if that is sooner), not after a backoff grown by outage-long attempts.
        let error = format!("breaker of `{}` is open", rung.source);
        let backoff = backoff(dispatcher, item.attempts);
        let wait = rung.breaker.as_ref().map_or(backoff, |b| b.policy().cooldown.min(backoff));
        return retry_later(dispatcher, &item, &error, Some(wait), false).await;
    };
    let target = match rung.action.target(&item.args) {
        Some(Ok(target)) => target,
        Some(Err(problem)) => {
            resolve(permit, Resolution::Unused);
            let problem = problem.message;
            if item.outcome_unknown {
                // An earlier send may have executed: "refused for good" would say it did not.
                return review(dispatcher, &item, tool, &problem).await;
            }
            let envelope = envelope::replay_final(
                tool,
                rung,
                &item.idempotency_key,
                Err(&problem),
                &item.args,
                0,
            );
            return fail(dispatcher, &item, &problem, &envelope.to_json()).await;
        }
        None => unreachable!("primary_remote returns a rung that calls out"),
    };
    if item.outcome_unknown {
        let write = Write {
            key: &item.idempotency_key,
            args: &item.args,
            conversation_id: item.conversation_id.as_deref(),
        };
        match duplicate_guard(dispatcher, tool, write, rung.timeout).await {
            Guard::Send => {}
            Guard::Found(result) => {
                resolve(permit, Resolution::Unused);
                return complete(dispatcher, &item, tool, rung, result, 0).await;
            }
            Guard::Wait(reason) => {
                resolve(permit, Resolution::Unused);
                return retry_later(dispatcher, &item, &reason, None, false).await;
            }
            Guard::Review => {
                resolve(permit, Resolution::Unused);
                let why =
                    "an earlier send's outcome is unknown and the tool's idempotency is \"none\"";
                return review(dispatcher, &item, tool, why).await;
            }
        }
    }
    let bulkhead = target.bulkhead();
    let Some(_slot) = bulkhead.try_enter() else {
        resolve(permit, Resolution::Unused);
        let error = format!("bulkhead `{}` is full", bulkhead.name);
        let wait = Duration::from_millis(bulkhead.retry_after_ms);
        return retry_later(dispatcher, &item, &error, Some(wait), false).await;
    };
    let started = Instant::now();
    let key = item.idempotency_key.as_str();
    let sent = target.send(dispatcher, &item.args, Some(key), rung.timeout).await;
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match sent {
        HttpOutcome::Answered(result) => {
            resolve(permit, Resolution::Succeeded);
            complete(dispatcher, &item, tool, rung, result, elapsed_ms).await
        }
        HttpOutcome::Unparseable { body } => {
            // A 2xx executed the write; its body is reported as it came.
            resolve(permit, Resolution::Succeeded);
            complete(dispatcher, &item, tool, rung, Value::String(body), elapsed_ms).await
        }
        HttpOutcome::Rejected { status, message } => {
            resolve(permit, Resolution::Succeeded);
            let envelope =
                envelope::replay_final(tool, rung, key, Err(&message), &item.args, elapsed_ms);
            let error = format!("status {status}: {message}");
            fail(dispatcher, &item, &error, &envelope.to_json()).await
        }
        HttpOutcome::Unauthorized { status, message } => {
            // A configuration failure: due again, so the write goes once they are fixed.
            resolve(permit, Resolution::Failed);
            tracing::error!(tool = %item.tool, id = item.id, status, %message, "the backend refused rein's credentials (check the rung's headers_env)");
            let error = format!("status {status} (rein's credentials refused): {message}");
            retry_later(dispatcher, &item, &error, None, false).await
        }
        HttpOutcome::Failed { reason, may_have_executed } => {
            resolve(permit, Resolution::Failed);
            unconfirmed(dispatcher, &item, tool, &reason, may_have_executed).await
        }
        HttpOutcome::TimedOut => {
            resolve(permit, Resolution::Failed);
            let error = format!("timed out after {} ms", rung.timeout.as_millis());
            unconfirmed(dispatcher, &item, tool, &error, true).await
        }
    }
}

/// The primary executed the item: its final `ok` envelope becomes the key's result.
async fn complete(
    dispatcher: &Dispatcher,
    item: &OutboxItem,
    tool: &Tool,
    rung: &Rung,
    result: Value,
    elapsed_ms: u64,
) -> Result<Option<ReplayResult>, StoreError> {
    let key = item.idempotency_key.as_str();
    let envelope = envelope::replay_final(tool, rung, key, Ok(result), &item.args, elapsed_ms);
    let now = dispatcher.clock.now_unix_ms();
    let completed = dispatcher.store.outbox_complete(item.id, &envelope.to_json(), now).await?;
    dispatcher.observer.replayed(&tool.name, ReplayResult::Done);
    Ok(completed.then_some(ReplayResult::Done))
}

/// A send that was not confirmed: due again later, remembering when it may have executed;
/// for a tool with no machine duplicate guard such an item goes to review instead.
async fn unconfirmed(
    dispatcher: &Dispatcher,
    item: &OutboxItem,
    tool: &Tool,
    error: &str,
    may_have_executed: bool,
) -> Result<Option<ReplayResult>, StoreError> {
    if may_have_executed && tool.idempotency == Idempotency::Review {
        return review(dispatcher, item, tool, error).await;
    }
    retry_later(dispatcher, item, error, None, may_have_executed).await
}

/// Hold the item for a person: its outcome is unknown and nothing may resend it on its own.
async fn review(
    dispatcher: &Dispatcher,
    item: &OutboxItem,
    tool: &Tool,
    error: &str,
) -> Result<Option<ReplayResult>, StoreError> {
    tracing::warn!(tool = %item.tool, id = item.id, %error, "queued write's outcome unknown: held for review");
    let source = tool.queue_source().unwrap_or(crate::write::REVIEW_SOURCE);
    let envelope = envelope::held_for_review(tool, source, &item.idempotency_key, &item.args, 0);
    let now = dispatcher.clock.now_unix_ms();
    let held = dispatcher.store.outbox_review(item.id, error, &envelope.to_json(), now).await?;
    dispatcher.observer.replayed(&item.tool, ReplayResult::Review);
    Ok(held.then_some(ReplayResult::Review))
}

/// Make the item due again: after `wait`, or after the backoff for its attempt count.
/// `may_have_executed`: this attempt's outcome is unknown.
async fn retry_later(
    dispatcher: &Dispatcher,
    item: &OutboxItem,
    error: &str,
    wait: Option<Duration>,
    may_have_executed: bool,
) -> Result<Option<ReplayResult>, StoreError> {
    let wait = wait.unwrap_or_else(|| backoff(dispatcher, item.attempts));
    let due = dispatcher.clock.now_unix_ms() + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
    tracing::warn!(tool = %item.tool, id = item.id, attempts = item.attempts, %error, "replay failed; due again later");
    let pending =
        dispatcher.store.outbox_retry_later(item.id, error, due, may_have_executed).await?;
    dispatcher.observer.replayed(&item.tool, ReplayResult::Retry);
    Ok(pending.then_some(ReplayResult::Retry))
}

/// Fail the item for good: `failed_result` becomes its key's final result.
async fn fail(
    dispatcher: &Dispatcher,
    item: &OutboxItem,
    error: &str,
    failed_result: &Value,
) -> Result<Option<ReplayResult>, StoreError> {
    tracing::error!(tool = %item.tool, id = item.id, %error, "queued write refused for good");
    let now = dispatcher.clock.now_unix_ms();
    let failed = dispatcher.store.outbox_fail(item.id, error, failed_result, now).await?;
    dispatcher.observer.replayed(&item.tool, ReplayResult::Failed);
    Ok(failed.then_some(ReplayResult::Failed))
}

/// Full-jitter exponential backoff: uniform in `[0, min(cap, base · 2^(attempts-1))]`.
fn backoff(dispatcher: &Dispatcher, attempts: i64) -> Duration {
    let policy = RetryPolicy {
        attempts: 1,
        base: dispatcher.plan.outbox.backoff_base,
        cap: dispatcher.plan.outbox.backoff_cap,
        floor: Duration::ZERO,
    };
    let retry = u32::try_from(attempts.saturating_sub(1).max(0)).unwrap_or(u32::MAX);
    policy.backoff(retry, dispatcher.jitter.as_ref())
}

#[cfg(test)]
mod tests {
    use rein_core::retry::FixedJitter;
    use rein_store::{SqliteToolStore, Store};

    use super::*;
    use crate::config::ToolsConfig;

    fn dispatcher(jitter: f64) -> Dispatcher {
        let config: ToolsConfig =
            toml::from_str("[outbox]\nbackoff_base_ms = 1000\nbackoff_cap_ms = 5000\n").unwrap();
        config.validate().unwrap();
        let store = Arc::new(SqliteToolStore::new(Arc::new(Store::open_in_memory().unwrap())));
        // reqwest has rustls without a crypto provider of its own.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Dispatcher::with_env(&config, store, reqwest::Client::new(), &|_| None)
            .unwrap()
            .with_jitter(Arc::new(FixedJitter(jitter)))
    }

    #[tokio::test]
    async fn replay_backoff_is_full_jitter_doubling_to_the_cap() {
        let top = dispatcher(1.0);
        let secs = Duration::from_secs;
        assert_eq!(backoff(&top, 1), secs(1));
        assert_eq!(backoff(&top, 2), secs(2));
        assert_eq!(backoff(&top, 3), secs(4));
        assert_eq!(backoff(&top, 4), secs(5));
        assert_eq!(backoff(&top, 60), secs(5));
        assert_eq!(backoff(&top, 0), secs(1), "an unclaimed item backs off like a first attempt");
        assert_eq!(backoff(&dispatcher(0.0), 3), Duration::ZERO, "full jitter reaches zero");
        assert_eq!(backoff(&dispatcher(0.5), 2), secs(1));
    }
}
