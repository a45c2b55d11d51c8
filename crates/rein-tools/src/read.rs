//! A read's walk down its tool's ladder: each rung gets its own budget (never past the call's
//! deadline) and its own breaker, and says whether it served the call or the walk goes on.
//! An http rung serves its backend's answer (and keeps it for the cache rung) or, on a 4xx, the
//! tool's refusal; it steps down on a hard failure (connection, 5xx, unparseable body, a 401 or
//! 403 of rein's credentials, its budget firing). A full bulkhead answers `busy` at once. A cache
//! rung serves an entry no older than its `max_age_ms` and declines otherwise; a static rung
//! always serves. The ladder ends in a structured refusal, never an error or an empty success.

use rein_core::Deadline;
use rein_core::breaker::Permit;
use serde_json::Value;

use crate::dispatcher::{Dispatcher, Resolution, ToolOutcome, admit, resolve};
use crate::envelope;
use crate::http::HttpOutcome;
use crate::keys::args_hash;
use crate::ladder::{Rung, RungAction, Target, Tool};
use crate::trace::{RungLog, Turn};
use crate::wording::Situation;

/// What a rung did with the call.
enum Step {
    /// It answered (served, refused or busy): the walk ends here.
    Served(ToolOutcome),
    /// The next rung's turn.
    Down,
}

/// Walk `tool`'s ladder for a read with `args`, each http rung at its URL in `urls`.
pub(crate) async fn call_read(
    dispatcher: &Dispatcher,
    tool: &Tool,
    args: &Value,
    targets: &[Option<Target<'_>>],
    deadline: &Deadline,
    log: &RungLog,
) -> ToolOutcome {
    let hash = args_hash(args);
    for (rung, target) in tool.rungs.iter().zip(targets) {
        let budget = deadline.cut(rung.timeout);
        let needs_time = !matches!(rung.action, RungAction::Static { .. });
        if needs_time && budget.is_zero() {
            tracing::debug!(tool = %tool.name, rung = %rung.source, "skipped: no time left before the deadline");
            log.skipped(rung, "no_time_left");
            continue;
        }
        let Some(permit) = admit(rung) else {
            tracing::debug!(tool = %tool.name, rung = %rung.source, "skipped: breaker open");
            log.skipped(rung, "breaker_open");
            continue;
        };
        let start_ms = log.now_ms();
        let rung_read = RungRead { dispatcher, tool, rung, args, deadline, budget, log, start_ms };
        let step = match &rung.action {
            RungAction::Http(_) | RungAction::Mcp(_) => match target {
                Some(target) => rung_read.remote(target, &hash, permit).await,
                None => {
                    resolve(permit, Resolution::Unused);
                    Step::Down
                }
            },
            RungAction::Cache { max_age_ms } => rung_read.cache(*max_age_ms, &hash, permit).await,
            RungAction::Static { result } => {
                resolve(permit, Resolution::Succeeded);
                rung_read.served(result.clone(), None, None)
            }
            // Validation keeps queue rungs out of read ladders.
            RungAction::Queue => {
                resolve(permit, Resolution::Unused);
                Step::Down
            }
        };
        if let Step::Served(outcome) = step {
            return outcome;
        }
    }
    let envelope =
        envelope::refused(tool, Situation::Refused, None, None, None, args, deadline.elapsed_ms());
    dispatcher.finish(tool, envelope, None)
}

/// One rung's turn in a read.
struct RungRead<'a> {
    dispatcher: &'a Dispatcher,
    tool: &'a Tool,
    rung: &'a Rung,
    /// The call's arguments.
    args: &'a Value,
    deadline: &'a Deadline,
    /// The rung's timeout, cut to what the call has left.
    budget: std::time::Duration,
    log: &'a RungLog,
    /// When the rung's turn began, on the call's trace.
    start_ms: u64,
}

impl RungRead<'_> {
    async fn remote(&self, target: &Target<'_>, hash: &str, permit: Option<Permit>) -> Step {
        let (tool, rung, dispatcher, args) = (self.tool, self.rung, self.dispatcher, self.args);
        let bulkhead = target.bulkhead();
        let Some(_slot) = bulkhead.try_enter() else {
            resolve(permit, Resolution::Unused);
            self.turn(Turn::Busy, Some("bulkhead_full"), None);
            return Step::Served(dispatcher.busy(tool, rung, bulkhead, None, args, self.deadline));
        };
        match target.send(dispatcher, args, None, self.budget).await {
            HttpOutcome::Answered(result) => {
                resolve(permit, Resolution::Succeeded);
                remember(dispatcher, tool, hash, &result).await;
                return self.served(result, None, None);
            }
            HttpOutcome::Rejected { status, message } => {
                resolve(permit, Resolution::Succeeded);
                tracing::debug!(tool = %tool.name, rung = %rung.source, status, "backend rejected the arguments");
                self.turn(Turn::Refused, Some("rejected_args"), Some(status));
                let envelope = envelope::refused(
                    tool,
                    Situation::RejectedArgs,
                    Some(rung),
                    Some(&message),
                    None,
                    args,
                    self.deadline.elapsed_ms(),
                );
                return Step::Served(dispatcher.finish(tool, envelope, Some(rung)));
            }
            HttpOutcome::Unparseable { .. } => {
                resolve(permit, Resolution::Failed);
                tracing::warn!(tool = %tool.name, rung = %rung.source, "stepping down: unparseable body");
                self.turn(Turn::Down, Some("unparseable"), None);
            }
            HttpOutcome::Unauthorized { status, message } => {
                resolve(permit, Resolution::Failed);
                tracing::error!(tool = %tool.name, rung = %rung.source, status, %message, "stepping down: the backend refused rein's credentials (check the rung's headers_env)");
                self.turn(Turn::Down, Some("unauthorized"), Some(status));
            }
            HttpOutcome::Failed { reason, .. } => {
                resolve(permit, Resolution::Failed);
                tracing::warn!(tool = %tool.name, rung = %rung.source, %reason, "stepping down");
                let (why, status) = crate::trace::failure(&reason);
                self.turn(Turn::Down, Some(why), status);
            }
            HttpOutcome::TimedOut => {
                resolve(permit, Resolution::Failed);
                tracing::warn!(tool = %tool.name, rung = %rung.source, budget_ms = self.budget.as_millis() as u64, "stepping down: timed out");
                self.turn(Turn::Down, Some("timed_out"), None);
            }
        }
        Step::Down
    }

    async fn cache(&self, max_age_ms: i64, hash: &str, permit: Option<Permit>) -> Step {
        let (tool, rung, dispatcher) = (self.tool, self.rung, self.dispatcher);
        match tokio::time::timeout(self.budget, dispatcher.store.cache_get(&tool.name, hash)).await
        {
            Ok(Ok(Some(cached))) => {
                resolve(permit, Resolution::Succeeded);
                let age_ms = (dispatcher.clock.now_unix_ms() - cached.captured_unix_ms).max(0);
                if age_ms > max_age_ms {
                    tracing::debug!(tool = %tool.name, rung = %rung.source, age_ms, "declined: older than max_age_ms");
                    self.turn(Turn::Declined, Some("older_than_max_age"), None);
                    return Step::Down;
                }
                return self.served(cached.result, Some(age_ms), None);
            }
            Ok(Ok(None)) => {
                resolve(permit, Resolution::Succeeded);
                tracing::debug!(tool = %tool.name, rung = %rung.source, "declined: nothing cached");
                self.turn(Turn::Declined, Some("nothing_cached"), None);
            }
            Ok(Err(error)) => {
                resolve(permit, Resolution::Failed);
                tracing::warn!(tool = %tool.name, rung = %rung.source, %error, "stepping down: cache failed");
                self.turn(Turn::Down, Some("cache_failed"), None);
            }
            Err(_) => {
                resolve(permit, Resolution::Failed);
                tracing::warn!(tool = %tool.name, rung = %rung.source, "stepping down: cache timed out");
                self.turn(Turn::Down, Some("timed_out"), None);
            }
        }
        Step::Down
    }

    /// The rung's turn on the call's trace.
    fn turn(&self, turn: Turn, reason: Option<&str>, status: Option<u16>) {
        self.log.rung(self.rung, self.start_ms, turn, reason, status);
    }

    /// The rung serves `result` (`age_ms` old, for a cache entry).
    fn served(&self, result: Value, age_ms: Option<i64>, status: Option<u16>) -> Step {
        self.turn(Turn::Served, None, status);
        let (tool, rung) = (self.tool, self.rung);
        let elapsed = self.deadline.elapsed_ms();
        let envelope = envelope::served(tool, rung, result, age_ms, None, self.args, elapsed);
        Step::Served(self.dispatcher.finish(tool, envelope, Some(rung)))
    }
}

/// Keep a read's good answer for the tool's cache rung, within that rung's budget; a failure
/// here costs only a later cache miss.
async fn remember(dispatcher: &Dispatcher, tool: &Tool, hash: &str, result: &Value) {
    let Some(cache) = tool.rungs.iter().find(|r| matches!(r.action, RungAction::Cache { .. }))
    else {
        return;
    };
    let now = dispatcher.clock.now_unix_ms();
    let put = dispatcher.store.cache_put(&tool.name, hash, result, now);
    match tokio::time::timeout(cache.timeout, put).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::warn!(tool = %tool.name, %error, "could not cache the result")
        }
        Err(_) => tracing::warn!(tool = %tool.name, "caching the result timed out"),
    }
}
